"""The sweep runner: losses x seeds (x datasets x models) -> run directories and tables.

>>> from calib.experiments import sweep as sw
>>> grid = ["ce", "focal:gamma=3", ("bsce_gra", {"gamma": 4, "norm": 2})]
>>> res = sw.sweep("runs/ch11", losses=grid, seeds=[0, 1, 2],
...                data="digits", model="mlp", epochs=30)  # doctest: +SKIP
>>> # rows: one dict per finished run (the columns of results.csv);
>>> # summary: mean, std over seeds per
>>> #          (data, model, loss, loss_kwargs, settings)
>>> res.rows, res.summary  # doctest: +SKIP

The same code runs ``python -m calib sweep``. A sweep directory holds::

    sweep.json     the manifest: the grid and every cell's training settings
    runs/<cell>/   one ordinary calib run directory per cell (config.json, ...)
    results.csv    one row per finished run (RESULT_COLUMNS), in grid order
    summary.csv    mean and sample standard deviation over seeds
                   (SUMMARY_KEYS + metrics)
    summary.md     the same as a Markdown table, "mean ± std", errors in %

Guarantees:

* *Refusal.* The manifest is written before the first run. The same directory with other
  arguments (another grid, another setting of any field that changes what is computed) is
  refused with :class:`SweepError` before anything is written. Runtime settings (device,
  progress, AMP, ...) may differ, so shards on different machines can share one sweep.
* *Resumption.* A finished cell (``metrics.json`` present) is skipped; an interrupted one
  continues from its last checkpoint (written atomically after every epoch, with RNG and
  loader state). Every cell is built from the same in-process data and seeds, so a sweep
  killed at any moment and re-run writes the same ``results.csv`` numbers as one that was
  never interrupted (``seconds`` aside).
* *Shards.* ``shard=(i, n)`` (CLI ``--shard i/n``, 1 <= i <= n) runs the cells whose index in
  grid order is ``i - 1`` modulo ``n``. Every call rewrites ``results.csv`` atomically from all
  finished cells of the grid; a final call without a shard (it also trains any cell left)
  or with ``merge=True`` (it trains nothing) collects the whole table.
* *Bad grids* (unknown data, model or loss, a keyword the loss does not take, an empty seed
  list, a bad shard, a bad training setting) raise :class:`SweepError` before any training.

Methods that are not just a loss: a loss item may carry training settings for its cells
after ``@`` (``"ce@mixup_alpha=1"``, ``"ce@meta=l2_reg,meta_objective=dece"``, or the triple
``("ce", {}, {"mixup_alpha": 1.0})``), so one grid can hold every row of a table such as
Wang & Golebiowski (2024) Table 1 (mixup, meta-learned baselines). They fill the ``settings``
column; any :class:`calib.train.TrainConfig` field other than the grid's own may be set.

Seeds: ``seeds="paper"`` uses the seeds of the preset's paper (:data:`calib.train.presets.PAPER_SEEDS`;
Lin et al. (2024): 1, 42, 71).

The grid (:mod:`calib.experiments.grid`) and the tables (:mod:`calib.experiments.results`) live
beside the runner; their public names are re-exported here.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..train import make_trainer, rundir
from ..train.config import SPLIT_SIZES
from .grid import _GRID_FIELDS, Cell, SweepError, format_loss_kwargs, grid_cells, parse_loss, parse_method, parse_shard
from .results import (
    METRICS,
    RESULT_COLUMNS,
    RESULTS_FILE,
    SUMMARY_CSV,
    SUMMARY_KEYS,
    SUMMARY_MD,
    SUMMARY_METRICS,
    _atomic_text,
    _csv_text,
    load_results,
    summarize,
    summary_markdown,
)

__all__ = [
    "SweepError",
    "Cell",
    "SweepResult",
    "DIVERGED_FILE",
    "diverged",
    "METRICS",
    "RESULT_COLUMNS",
    "SUMMARY_KEYS",
    "MANIFEST_FILE",
    "RESULTS_FILE",
    "parse_loss",
    "parse_method",
    "parse_shard",
    "format_loss_kwargs",
    "grid_cells",
    "sweep",
    "plan",
    "describe_plan",
    "load_results",
    "summarize",
    "summary_markdown",
]


MANIFEST_FILE = "sweep.json"


RUNS_DIR = "runs"


MANIFEST_FORMAT = 1


_DATA_CACHE: dict[tuple, Any] = {}


def _cell_config(cell: Cell, out: Path, preset: str | None, profile: str | None,
                 overrides: Mapping[str, Any]) -> Any:
    from ..train.presets import DEFAULT_PRESET
    from ..train.config import TOY_DATA, TrainConfig

    kw = dict(overrides)
    kw.update(dict(cell.settings))
    kw.update(data=cell.data, model=cell.model, loss=cell.loss, loss_kwargs=cell.kwargs, seed=cell.seed,
              out=str(out / RUNS_DIR / cell.name))
    kw.setdefault("progress", False)
    if cell.data in TOY_DATA:  # seconds-long runs: skip the fsyncs (writes stay atomic, so kills are safe)
        kw.setdefault("fsync", False)  # and checkpoint every 5 epochs (a resume replays at most 4)
        kw.setdefault("checkpoint_every", 5)
    return TrainConfig.from_preset(preset or DEFAULT_PRESET.get(cell.data, "cifar"), profile, **kw)


def _check_overrides(overrides: Mapping[str, Any]) -> None:
    from ..train import TrainConfig

    known = {f for f in TrainConfig.__dataclass_fields__}
    if bad := sorted(set(overrides) - known):
        raise SweepError(f"unknown training setting(s) {', '.join(bad)}; any TrainConfig field is accepted "
                         f"except {', '.join(_GRID_FIELDS)}")
    if fixed := sorted(set(overrides) & set(_GRID_FIELDS)):
        raise SweepError(f"{', '.join(fixed)} are set by the sweep itself (losses=, seeds=, data=, model=, "
                         "out as the first argument), not as training settings")


def _manifest(cells: Sequence[Cell], configs: Sequence[Any]) -> dict[str, Any]:
    """The grid (for people) and every cell's config identity (what the refusal compares)."""
    def methods() -> list[str]:
        out = []
        for c in cells:
            _, _, loss, kw, settings = c.method
            text = loss + (f":{kw}" if kw else "") + (f"@{settings}" if settings else "")
            out.append(text)
        return list(dict.fromkeys(out))

    grid = {"data": list(dict.fromkeys(c.data for c in cells)), "model": list(dict.fromkeys(c.model for c in cells)),
            "losses": methods(), "seeds": list(dict.fromkeys(c.seed for c in cells))}
    runs = {cell.name: cfg.identity() for cell, cfg in zip(cells, configs)}
    return {"format": MANIFEST_FORMAT, "grid": grid, "cells": [c.name for c in cells], "runs": runs}


def _manifest_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if old.get("format") != new["format"]:
        return f"manifest format {old.get('format')!r} vs {new['format']}"
    if old.get("cells") != new["cells"]:
        gone = [c for c in old.get("cells", []) if c not in new["cells"]]
        added = [c for c in new["cells"] if c not in old.get("cells", [])]
        parts = [f"cells not in this call: {', '.join(gone[:3])}" if gone else "",
                 f"new cells: {', '.join(added[:3])}" if added else "",
                 "the same cells in another order" if not gone and not added else ""]
        return "; ".join(p for p in parts if p)
    for name in new["cells"]:
        a, b = old["runs"].get(name, {}), new["runs"][name]
        if diff := sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)):
            k = diff[0]
            return f"{name}: {k} was {a.get(k)!r}, now {b.get(k)!r}"
    return None


def _holds_files(out: Path) -> bool:
    """Whether ``out`` holds anything besides a run-directory lock (:mod:`calib.train.rundir`) and
    the manifest another shard, starting at the same time, is about to link in (:func:`_claim_directory`)."""
    from ..train.rundir import LOCK_FILE

    def claiming(name: str) -> bool:
        return name.startswith(f".{MANIFEST_FILE}.") and name.endswith(".tmp")

    return any(p.name != LOCK_FILE and not claiming(p.name) for p in out.iterdir())


def _check_directory(out: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse (read-only) a directory that holds another sweep or something else."""
    path = out / MANIFEST_FILE
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SweepError(f"{path} is unreadable ({exc}); not touching {out}") from None
        if diff := _manifest_diff(old, manifest):
            raise SweepError(f"{out} holds another sweep ({diff}); use another directory, or the same "
                             "arguments to resume it")
    elif out.exists() and (not out.is_dir() or _holds_files(out)):
        if path.exists():  # another shard linked its manifest in between the two looks
            _check_directory(out, manifest)
            return
        raise SweepError(f"{out} exists, is not an empty directory and holds no {MANIFEST_FILE}: not a sweep "
                         "directory; choose another one")


def _claim_directory(out: Path, manifest: Mapping[str, Any]) -> None:
    """Write the manifest, or check the one there; refuse a foreign directory before touching it."""
    path = out / MANIFEST_FILE
    _check_directory(out, manifest)
    if path.exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    tmp = out / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
    tmp.write_text(text)
    try:
        os.link(tmp, path)  # atomic create: two shards starting at once cannot both write it
    except FileExistsError:
        tmp.unlink()
        _claim_directory(out, manifest)
        return
    except OSError:  # file systems without hard links
        os.replace(tmp, path)
    else:
        tmp.unlink()


def _data_for(cfg: Any) -> Any:
    """``calib.data.load`` once per process for each (data, root, split) triple."""
    from .. import data as cdata

    kw = {k: getattr(cfg, k) for k in SPLIT_SIZES if getattr(cfg, k) is not None}
    key = (cfg.data, cfg.data_root, cfg.split_seed, cfg.download, *sorted(kw.items()))
    if key not in _DATA_CACHE:
        if len(_DATA_CACHE) >= 4:
            _DATA_CACHE.pop(next(iter(_DATA_CACHE)))
        _DATA_CACHE[key] = cdata.load(cfg.data, cfg.data_root, split_seed=cfg.split_seed,
                                      download=cfg.download, **kw)
    return _DATA_CACHE[key]


def _finished(run_dir: Path) -> bool:
    from ..train import METRICS_FILE

    return (run_dir / METRICS_FILE).is_file()


# Written in a cell's run directory when its training diverged (loss NaN or inf): the cell
# is done, without a row, and a resumed sweep does not train it again.
DIVERGED_FILE = "diverged.json"


def diverged(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """Where a sweep cell diverged, or None: its key columns as in a results row (data,
    model, loss, loss_kwargs, settings, seed) and ``epoch``, ``step``, ``lr``, ``message``."""
    path = Path(run_dir) / DIVERGED_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _run_cell(cfg: Any) -> None:
    make_trainer(cfg, data=_data_for(cfg)).fit(resume=True)


def _preflight(cells: Sequence[Cell], configs: Sequence[Any], mine: Sequence[int]) -> None:
    """Build (without training) one trainer per (data, model, loss) still to run.

    This loads each dataset (missing files fail here), builds each model on its data (a
    convolutional net on feature vectors fails here) and each loss, so a bad grid stops
    before its first run instead of after some of them.
    """
    seen: set[tuple] = set()
    for i in mine:
        cell, cfg = cells[i], configs[i]
        key = cell.method
        if key in seen or _finished(Path(cfg.out)):
            continue
        seen.add(key)
        try:
            make_trainer(cfg, data=_data_for(cfg))
        except (TypeError, ValueError, FileNotFoundError) as exc:
            raise SweepError(f"cell {cell.name}: {exc}") from None


def _key(cell: Cell) -> dict[str, Any]:
    """The columns of a results row that name its cell."""
    return {"data": cell.data, "model": cell.model, "loss": cell.loss, "loss_kwargs": format_loss_kwargs(cell.kwargs),
            "settings": format_loss_kwargs(dict(cell.settings)), "seed": cell.seed}


def _row(cell: Cell, run_dir: Path, cfg: Any) -> dict[str, Any]:
    """The results row of a finished cell, trained with ``cfg`` (its run directory's config)."""
    from ..train import METRICS_FILE, load_history

    m = json.loads((run_dir / METRICS_FILE).read_text())
    history = load_history(run_dir)
    row = _key(cell)
    row.update({k: m["pre_ts"][k] for k in METRICS})
    row.update({f"{k}_ts": m["post_ts"][k] for k in METRICS})
    ts = m.get("ts", {})
    row.update(temperature=m["temperature"], ts_method=m.get("ts_method", cfg.ts_method),
               temperature_nll=ts.get("nll", {}).get("temperature"),
               temperature_grid=ts.get("grid", {}).get("temperature"),
               ece_ts_nll=ts.get("nll", {}).get("post_ts", {}).get("ece"),
               ece_ts_grid=ts.get("grid", {}).get("post_ts", {}).get("ece"),
               select=cfg.select, selected_epoch=m.get("selected_epoch", len(history)), epochs=cfg.epochs,
               seconds=sum(float(h.get("seconds", 0.0)) for h in history))
    return row


@dataclass
class SweepResult:
    """What :func:`sweep` returns: the finished rows, their summary and where they live."""

    out: Path
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    missing: list[str] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)  # cells whose loss became NaN or inf: no row

    def run_dir(self, loss: str | Sequence[Any], seed: int, data: str | None = None,
                model: str | None = None) -> Path:
        """The run directory of one cell, e.g. ``res.run_dir("focal:gamma=3", 0)``.

        ``data`` and ``model`` may be left out when the sweep had one of each.
        """
        name, kwargs, settings = parse_method(loss)
        datas = list(dict.fromkeys(r["data"] for r in self.rows)) if data is None else [data]
        models = list(dict.fromkeys(r["model"] for r in self.rows)) if model is None else [model]
        if len(datas) != 1 or len(models) != 1:
            raise ValueError(f"this sweep has data {datas} and models {models}: pass data= and model=")
        cell = Cell(datas[0], models[0], name, tuple(sorted(kwargs.items())), int(seed),
                    tuple(sorted(settings.items())))
        return self.out / RUNS_DIR / cell.name

    def to_frame(self, which: str = "rows") -> Any:
        """``rows`` or ``summary`` as a pandas DataFrame (pandas is imported only here)."""
        import pandas as pd

        if which not in ("rows", "summary"):
            raise ValueError(f"which must be 'rows' or 'summary', got {which!r}")
        return pd.DataFrame(self.rows if which == "rows" else self.summary)


def _progress_line(i: int, total: int, cell: Cell, row: Mapping[str, Any] | None, status: str) -> str:
    """One line per cell; ``row`` None for a diverged cell, which has no metrics."""
    kw = format_loss_kwargs(cell.kwargs)
    loss = f"{cell.loss}:{kw}" if kw else cell.loss
    if cell.settings:
        loss += "@" + format_loss_kwargs(dict(cell.settings))
    head = f"[{i}/{total}] {cell.data} {cell.model} {loss} seed {cell.seed}:"
    if row is None:
        return f"{head} {status}"
    return (f"{head} acc {100 * row['accuracy']:.2f}% ECE {100 * row['ece']:.2f}% -> {100 * row['ece_ts']:.2f}% "
            f"(T {row['temperature']:.2f}) {status}")


def plan(out: str | os.PathLike, losses: Sequence[Any], seeds: Any, data: str | Iterable[str] = "digits",
         model: str | Iterable[str] = "mlp", *, preset: str | None = None, profile: str | None = None,
         **train_overrides: Any) -> list[tuple[Cell, Any]]:
    """The cells of a sweep and their :class:`calib.train.TrainConfig`, without touching anything.

    The arguments are those of :func:`sweep`; every check that needs no data runs here (names,
    loss keywords, seeds, training settings), so ``plan`` tells whether a paper-scale command
    is valid on a machine that cannot run it. ``python -m calib sweep ... --dry-run`` prints it.
    """
    out = Path(out)
    _check_overrides(train_overrides)
    if profile is not None:
        from ..profile import PROFILES

        if profile not in PROFILES:
            raise SweepError(f"profile must be one of {PROFILES}, got {profile!r}")
    from ..train.presets import PRESETS

    if preset is not None and preset not in PRESETS:
        raise SweepError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    cells = grid_cells(losses, seeds, data, model, preset)
    try:
        return [(c, _cell_config(c, out, preset, profile, train_overrides)) for c in cells]
    except (TypeError, ValueError) as exc:
        raise SweepError(f"bad training setting: {exc}") from None


def describe_plan(planned: Sequence[tuple[Cell, Any]]) -> str:
    """A short text: how many runs and epochs, and the protocol of the cells (from their configs)."""
    cfgs = [cfg for _, cfg in planned]
    keys = ("profile", "preset", "epochs", "milestones", "lr", "batch_size", "weight_decay", "val_size",
            "train_size", "test_size", "select", "ts_method", "ts_grid_step", "clip_grad", "loss_reduction")
    lines = [f"{len(planned)} runs, {sum(c.epochs for c in cfgs)} epochs in all"]
    for k in keys:
        values = list(dict.fromkeys(json.dumps(getattr(c, k)) for c in cfgs))
        lines.append(f"  {k}: {' | '.join(values)}")
    lines.append("  runs: " + ", ".join(c.name for c, _ in planned[:4]) + (" ..." if len(planned) > 4 else ""))
    return "\n".join(lines)


def sweep(out: str | os.PathLike, losses: Sequence[Any], seeds: Any, data: str | Iterable[str] = "digits",
          model: str | Iterable[str] = "mlp", *, shard: Any = None, merge: bool = False,
          progress: bool = True, preset: str | None = None, profile: str | None = None,
          **train_overrides: Any) -> SweepResult:
    """Train every cell of losses x seeds x data x model under ``out`` and tabulate them.

    ``losses``: ``"name"``, ``"name:key=value,..."`` or ``(name, {kwargs})`` items.
    ``seeds``: integers, ``"0,1,2"``, or ``"paper"`` (the preset's paper seeds).
    ``preset``/``profile``: as in :meth:`calib.train.TrainConfig.from_preset` (default preset:
    ``cifar``, or ``tiny_imagenet`` for that dataset; paper presets such as ``lin2024`` also
    set the temperature-scaling method, model selection and clipping of that paper).
    ``train_overrides``: any other :class:`calib.train.TrainConfig` field (``epochs``, ``lr``,
    ``select``, ``clip_grad``, ``ts_method``, ``model_kwargs``, ...), applied to every cell.
    ``shard``: ``"i/n"`` or ``(i, n)`` to run every n-th cell only; ``merge=True`` trains
    nothing and only collects. Returns a :class:`SweepResult` over every finished cell.

    Raises :class:`SweepError` (a ``ValueError``) for a bad grid or a directory holding a
    different sweep, before anything is trained or written, and
    :class:`calib.train.rundir.RunDirError` when another process holds the sweep (unsharded) or
    the cell it is about to train (:func:`calib.train.rundir.lock`; a stale lock is taken over).
    """
    out = Path(out)
    shard_t = parse_shard(shard)
    if shard_t is not None and merge:
        raise SweepError("merge collects every shard: call it without shard")
    planned = plan(out, losses, seeds, data, model, preset=preset, profile=profile, **train_overrides)
    cells, configs = [c for c, _ in planned], [cfg for _, cfg in planned]
    mine = [i for i in range(len(cells)) if shard_t is None or i % shard_t[1] == shard_t[0] - 1]
    manifest = _manifest(cells, configs)
    _check_directory(out, manifest)
    if not merge:
        _preflight(cells, configs, mine)
    with contextlib.ExitStack() as stack:
        if shard_t is None:  # shards share the directory; each cell has its own lock below
            stack.enter_context(rundir.lock(out, what="sweep"))
        _claim_directory(out, manifest)
        trained: list[str] = []
        if not merge:
            try:
                trained = _run_cells(out, cells, configs, mine, progress)
            except BaseException:  # interrupted (SIGTERM/SIGINT) or failed: still table what finished
                with contextlib.suppress(Exception):
                    _collect(out, cells, [], configs)
                raise
        return _collect(out, cells, trained, configs)


def _run_cells(out: Path, cells: Sequence[Cell], configs: Sequence[Any], mine: Sequence[int],
               progress: bool) -> list[str]:
    from ..train.progress import TrainingDiverged, progress_enabled, tqdm_class

    show = progress and progress_enabled(None)
    tqdm = tqdm_class(show)
    trained: list[str] = []
    with tqdm(total=len(mine), desc="sweep", unit="run", disable=not show, dynamic_ncols=True,
              file=sys.stderr) as bar:
        for k, i in enumerate(mine, start=1):
            cell, cfg = cells[i], configs[i]
            run_dir = Path(cfg.out)
            failed_before = diverged(run_dir) is not None
            status = "diverged before" if failed_before else "done before"
            if not _finished(run_dir) and not failed_before:
                t0 = time.perf_counter()
                with rundir.lock(run_dir, what=f"sweep cell {cell.name}"):
                    try:
                        _run_cell(cfg)
                    except TrainingDiverged as exc:  # a result of the method: kept, and the sweep goes on
                        record = {**_key(cell), "epoch": exc.epoch, "step": exc.step, "lr": exc.lr,
                                  "message": str(exc)}
                        _atomic_text(run_dir / DIVERGED_FILE, json.dumps(record) + "\n")
                        print(f"sweep: {cell.name} diverged at epoch {exc.epoch}; kept as diverged, "
                              "going on", file=sys.stderr, flush=True)
                        status = f"diverged at epoch {exc.epoch}"
                    else:
                        trained.append(cell.name)
                        status = f"{time.perf_counter() - t0:.1f} s"
            if show:
                row = _row(cell, run_dir) if _finished(run_dir) else None  # a diverged cell has no metrics
                bar.write(_progress_line(k, len(mine), cell, row, status), file=sys.stderr)
            bar.update(1)
    return trained


def _collect(out: Path, cells: Sequence[Cell], trained: list[str], configs: Sequence[Any]) -> SweepResult:
    from ..train import load_config, smoke_config

    rows, missing, failed = [], [], []
    for cell, cfg in zip(cells, configs):
        run_dir = out / RUNS_DIR / cell.name
        if _finished(run_dir):
            made = load_config(run_dir)
            # what this sweep trains here (capped in smoke mode); a copy made under another
            # profile, say, is another run
            if made.identity() != smoke_config(cfg).identity():
                raise SweepError(f"{run_dir} holds a finished run of another configuration than the sweep "
                                 "plans for this cell; move it away (or train it again) and merge again")
            rows.append(_row(cell, run_dir, made))
        elif diverged(run_dir):
            failed.append(cell.name)
        else:
            missing.append(cell.name)
    summary = summarize(rows)
    _atomic_text(out / RESULTS_FILE, _csv_text(rows, RESULT_COLUMNS))
    summary_cols = (*SUMMARY_KEYS, "n", *(f"{m}_{s}" for m in SUMMARY_METRICS for s in ("mean", "std")))
    _atomic_text(out / SUMMARY_CSV, _csv_text(summary, summary_cols))
    note = f"\nDiverged (loss NaN or inf, no row): {', '.join(failed)}.\n" if failed else ""
    _atomic_text(out / SUMMARY_MD, summary_markdown(summary, missing=len(missing)) + note)
    return SweepResult(out=out, rows=rows, summary=summary, missing=missing, trained=trained, diverged=failed)
