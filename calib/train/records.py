"""Run records: the files of a run directory and pure functions over them.

A run directory written by :class:`calib.train.Trainer` holds::

    config.json      the TrainConfig (JSON)
    history.jsonl    one JSON line per epoch
    logits.pt        val/test logits and labels of the selected epoch, and
                     selected_epoch
    metrics.json     :func:`compute_metrics` of those logits
    checkpoint.pt    everything needed to resume (see calib.train)
    epoch_logits/    epoch_0001.pt, ... (only with ``keep_epoch_logits=True``)

Every metric is a pure function of the saved logits, so tables and figures can be
recomputed without retraining. This module imports nothing from :mod:`calib.train`
(``load_config`` and ``evaluate_run``, which need the config class, live there).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_labels, check_logits, check_positive_int

__all__ = [
    "CONFIG_FILE",
    "HISTORY_FILE",
    "METRICS_FILE",
    "LOGITS_FILE",
    "CHECKPOINT_FILE",
    "EPOCH_LOGITS_DIR",
    "TS_METHODS",
    "atomic_save",
    "atomic_write_text",
    "load_history",
    "mean_history",
    "load_logits",
    "load_epoch_logits",
    "compute_metrics",
    "split_stats",
]

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.jsonl"
METRICS_FILE = "metrics.json"
LOGITS_FILE = "logits.pt"
CHECKPOINT_FILE = "checkpoint.pt"
EPOCH_LOGITS_DIR = "epoch_logits"  # epoch_0001.pt, ... with keep_epoch_logits=True
TS_METHODS = ("nll", "grid")


def atomic_save(obj: Any, path: Path, *, durable: bool = True) -> None:
    """``torch.save`` to a temp file in the same folder, fsync, then ``os.replace``.

    A crash mid-write leaves at most a stray temp file; ``path`` keeps its previous,
    complete content until the rename, which POSIX makes atomic. ``durable=False`` skips
    the two fsyncs: still safe against a killed process (the rename is atomic and the
    bytes are in the page cache), not against a power cut; ~10 ms saved per file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with _cleaned_up(tmp, path):
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    if not durable:
        return
    with contextlib.suppress(OSError):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path``, then ``os.replace``: readers see old or new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with _cleaned_up(tmp, path):
        tmp.write_text(text)
        os.replace(tmp, path)


@contextlib.contextmanager
def _cleaned_up(tmp: Path, path: Path) -> Iterator[None]:
    """Remove ``tmp`` if the block fails; a failed write becomes an ``OSError`` naming ``path``.

    torch's archive writer reports a full disk or a file-size limit as a ``RuntimeError``
    ("[enforce fail at inline_container.cc] unexpected pos ..."), which names neither the
    file nor the cause.
    """
    try:
        yield
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _write_error(path, exc.errno, exc.strerror or str(exc)) from exc
        if isinstance(exc, RuntimeError) and "inline_container" in str(exc):
            raise _write_error(path, errno.ENOSPC, "the disk is full or a file-size limit was reached") from exc
        raise


def _write_error(path: Path, code: int | None, why: str) -> OSError:
    error = OSError(f"could not write {path}: {why}")  # one line: no "[Errno N]" prefix
    error.errno = code
    return error


def load_history(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The per-epoch lines of ``history.jsonl``."""
    path = Path(run_dir) / HISTORY_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a calib run directory?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_history(histories: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The per-epoch mean of several runs' histories (e.g. one per seed), as one history.

    Epoch ``i`` of the result averages epoch ``i`` of every run, key by key, over the keys
    that are numbers in every run at that epoch. A key some run has at that epoch but not
    as a number in all (None: e.g. no correct prediction to average over) is None there, a
    gap in a plot rather than a missing key; ``epoch`` is kept. The result can go wherever
    one history goes, e.g. :func:`calib.plots.training_curves`.

    Raises:
        ValueError: no histories, or histories of different lengths.
    """
    runs = [list(h) for h in histories]
    if not runs or not all(runs):
        raise ValueError("histories must be one or more non-empty lists of per-epoch dicts")
    if len({len(h) for h in runs}) != 1:
        raise ValueError(f"histories must have the same number of epochs, got {[len(h) for h in runs]}")
    out = []
    for lines in zip(*runs):
        keys = dict.fromkeys(k for line in lines for k, v in line.items() if v is None or _is_number(v))
        out.append({k: sum(float(line[k]) for line in lines) / len(lines)
                    if all(_is_number(line.get(k)) for line in lines) else None for k in keys})
        if "epoch" in lines[0]:
            out[-1]["epoch"] = lines[0]["epoch"]
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load_logits(run_dir: str | os.PathLike) -> dict[str, Tensor]:
    """``{"val_logits", "val_labels", "test_logits", "test_labels"}`` of a finished run."""
    path = Path(run_dir) / LOGITS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: has the run in {run_dir} finished?")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, unsafe global, ...
        raise ValueError(f"{path} is corrupt or unreadable ({type(exc).__name__}: {str(exc)[:200]}); "
                         "rerun the training with --resume to write it again") from exc
    if not isinstance(record, dict):
        raise ValueError(f"{path} does not hold a dict of logits and labels")
    if missing := {"val_logits", "val_labels", "test_logits", "test_labels"} - set(record):
        raise ValueError(f"{path} lacks {sorted(missing)}")
    return record


def compute_metrics(record: Mapping[str, Tensor], *, n_bins: int = 15, ts_method: str = "nll",
                    ts_grid_step: float = 0.1, select: str | None = None) -> dict[str, Any]:
    """Test metrics before and after temperature scaling fitted on the validation logits.

    ``calib.metrics.summary`` (accuracy, NLL, Brier, ECE, AdaECE, Classwise-ECE, MCE with
    ``n_bins`` bins) on ``softmax(g)`` and on ``softmax(g / T)`` for two temperatures fitted on
    the validation split by ``calib.posthoc.TemperatureScaling``: ``"nll"``, the NLL minimiser
    (Guo et al.), and ``"grid"``, the lowest validation ECE over ``ts_grid_step, ..., 10``
    (Lin et al. (2024) §5 with step 0.1, Mukhoti et al. (2020) Table 1 with no grid stated;
    Wang et al. (2021) §4 with step 0.01). Both are kept under ``"ts"``; ``ts_method`` picks the one reported as
    ``post_ts`` and ``temperature``. ``selected_epoch`` (from the record) says which epoch's
    weights produced the logits.
    """
    from .. import metrics, posthoc

    check_positive_int(n_bins, "n_bins")
    if ts_method not in TS_METHODS:
        raise ValueError(f"ts_method must be 'nll' or 'grid', got {ts_method!r}")
    test_logits, test_labels = record["test_logits"], record["test_labels"]
    pre = metrics.summary(torch.softmax(test_logits.double(), 1), test_labels, n_bins=n_bins)
    as_float = lambda d: {k: float(v) for k, v in d.items()}  # noqa: E731
    grids = {"nll": None, "grid": posthoc.default_grid(ts_grid_step)}
    fits: dict[str, dict[str, Any]] = {}
    for method, grid in grids.items():
        ts = posthoc.TemperatureScaling(method=method, grid=grid, n_bins=n_bins)
        ts.fit(record["val_logits"], record["val_labels"])
        post = metrics.summary(ts.predict_proba(test_logits), test_labels, n_bins=n_bins)
        fits[method] = {"temperature": float(ts.temperature), "post_ts": as_float(post)}
    out = {"pre_ts": as_float(pre), "post_ts": fits[ts_method]["post_ts"],
           "temperature": fits[ts_method]["temperature"], "ts_method": ts_method, "ts": fits,
           "ts_grid_step": float(ts_grid_step), "n_bins": n_bins, "n_test": int(test_labels.shape[0]),
           "n_val": int(record["val_labels"].shape[0])}
    if "selected_epoch" in record:
        out["selected_epoch"] = int(record["selected_epoch"])
    if select is not None:
        out["select"] = select
    return out


def load_epoch_logits(run_dir: str | os.PathLike) -> dict[str, Any]:
    """Per-epoch logits of a run trained with ``keep_epoch_logits=True``.

    Returns ``{"epochs": [1, 2, ...], "val_logits": (E, N_val, K), "test_logits": (E, N_test, K),
    "val_labels", "test_labels"}`` (and ``train_logits``/``train_labels`` when the run tracked
    the training split); only epochs up to the run's last finished one are read.
    """
    folder = Path(run_dir) / EPOCH_LOGITS_DIR
    files = sorted(folder.glob("epoch_*.pt")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no per-epoch logits in {folder}: train with keep_epoch_logits=True "
                                "(CLI: --keep-epoch-logits)")
    done = len(load_history(run_dir))
    epochs = [int(f.stem.split("_")[1]) for f in files]
    keep = [(e, f) for e, f in zip(epochs, files) if e <= done]
    recs = [torch.load(f, map_location="cpu", weights_only=True) for _, f in keep]
    out: dict[str, Any] = {"epochs": [e for e, _ in keep]}
    for split in ("val", "test", "train"):
        if all(f"{split}_logits" in r for r in recs):
            out[f"{split}_logits"] = torch.stack([r[f"{split}_logits"] for r in recs])
            out[f"{split}_labels"] = recs[0][f"{split}_labels"]
    return out


def split_stats(logits: Tensor, labels: Tensor, n_bins: int = 15) -> dict[str, float | None]:
    """Accuracy, NLL, ECE, NLL/entropy of correct vs wrong predictions (Mukhoti et al. (2020) §3).

    NLL is the mean of ``-log softmax(g)_y``; the entropy of a prediction is
    ``H(p̂) = -Σ_k p̂_k log p̂_k``. Groups with no member (e.g. no wrong prediction) give None.
    ECE is :func:`calib.metrics.ece` with ``n_bins`` equal-width bins.
    """
    from .. import metrics

    g = check_logits(logits, "logits").float()
    y = check_labels(labels, g.shape[0], g.shape[1]).to(g.device)
    logp = F.log_softmax(g, dim=1)
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(1)
    correct = logp.argmax(1) == y

    def mean(t: Tensor, mask: Tensor) -> float | None:
        return float(t[mask].mean()) if bool(mask.any()) else None

    return {
        "acc": float(correct.float().mean()),
        "nll": float(nll.mean()),
        "ece": float(metrics.ece(logp.exp(), y, n_bins=n_bins)),
        "nll_correct": mean(nll, correct),
        "nll_wrong": mean(nll, ~correct),
        "entropy_correct": mean(ent, correct),
        "entropy_wrong": mean(ent, ~correct),
    }
