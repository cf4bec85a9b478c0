"""The protocol studies of the ledger: the same losses under several training protocols.

The authors' code of Lin et al. (2024) sums the loss over the batch and clips the gradient
norm at 2, where calib averages; the ledger's ``reduction`` sweep trains CE, focal loss and
BSCE-GRA under the protocols of :data:`calib.experiments.ledger.PROTOCOLS` (A: mean, lr
0.05; C: mean, lr 0.1, clip 2; B: sum, lr 0.1, clip 2) so that A -> C -> B separates the
reduction from the learning rate and the clipping (chapter 11). The ``regime`` sweep trains
the losses under A and B at three training-set sizes (chapter 14); a cell's ``train_size``
setting gives its size, and a cell without one has the sweep's ``--train-size``. This module
reads both: one row per run, tables over seeds, per-epoch curves and the last epoch's
training records; a chapter tests the papers' orderings on them through :mod:`calib.evidence`.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .grid import cell_name_parts
from .cell_origin import cell_origins
from .ledger import PROTOCOLS, SWEEPS, TABLE_COLUMNS, cell_dirs, histories, load, test_predictions

__all__ = ["protocol_of", "size_of", "draw_of", "grid", "protocol_runs", "machine_kind", "protocol_table", "epoch_curves",
           "last_epoch", "sgd_steps", "first_drop", "nll_rise", "log_t_ratio", "test_noise", "LOSS_NAMES"]


def _settings(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def protocol_of(settings: str) -> str:
    """The :data:`PROTOCOLS` key of a cell's per-cell settings (``"clip_grad=2,lr=0.1"`` -> ``"C"``);
    a ``train_size`` or ``split_seed`` among them is not part of the protocol."""
    given = _settings(settings)
    given.pop("train_size", None)
    given.pop("split_seed", None)
    for key, spec in PROTOCOLS.items():
        if _settings(spec) == given:
            return key
    raise ValueError(f"settings {settings!r} are none of the protocols {PROTOCOLS}")


def size_of(settings: str, name: str = "reduction") -> int:
    """The number of training images of a cell of sweep ``name``: its ``train_size`` setting,
    else the sweep's ``--train-size``."""
    return int(_settings(settings).get("train_size", SWEEPS[name].arg("--train-size")))


def draw_of(settings: str) -> int:
    """The split seed of a cell's per-cell settings: which draw of training and validation
    images it trained on (0, the default, where the settings name none)."""
    return int(_settings(settings).get("split_seed", 0))


def sgd_steps(name: str, train_size: int | None = None, *, after_epoch: int = 0) -> int:
    """The SGD steps of one run of sweep ``name``: ``ceil(n / batch) * (epochs - after_epoch)``.

    ``n`` is ``train_size`` (default: the sweep's ``--train-size``); the loader keeps the last
    partial batch, so an epoch has ``ceil(n / batch)`` steps. ``after_epoch``: count only the
    epochs after it (:func:`first_drop` gives the steps after the first learning-rate drop).
    At a fixed number of epochs the size sets the steps (Mukhoti et al. 2020, §3, tie CE's
    over-confidence to the epochs after the drop), so a trend over sizes is also one over steps.
    """
    sweep = SWEEPS[name]
    n = int(sweep.arg("--train-size")) if train_size is None else int(train_size)
    if n < 1:
        raise ValueError(f"train_size must be a positive int, got {train_size!r}")
    epochs = int(sweep.arg("--epochs"))
    if not 0 <= after_epoch <= epochs:
        raise ValueError(f"after_epoch must lie in [0, {epochs}], got {after_epoch!r}")
    return -(-n // int(sweep.arg("--batch-size"))) * (epochs - after_epoch)


def first_drop(name: str) -> int:
    """The epoch after which sweep ``name`` first divides its learning rate (its first milestone)."""
    return int(SWEEPS[name].arg("--milestones").split(",")[0])


def grid(name: str = "reduction") -> list[tuple[str, str, int]]:
    """The sweep's cells by (loss, protocol, train_size), in the order of its ``--loss`` specs
    (the seeds aside): what :func:`protocol_runs` holds once the sweep has finished."""
    args = SWEEPS[name].args
    specs = [spec for flag, spec in zip(args, args[1:]) if flag == "--loss"]
    out = []
    for spec in specs:  # <loss>[:<kwargs>]@<settings>, as in calib.experiments.sweep
        loss, settings = spec.split("@", 1)
        out.append((loss.split(":", 1)[0], protocol_of(settings), size_of(settings, name)))
    return list(dict.fromkeys(out))  # the draws of one (loss, protocol, size) are one group


def protocol_runs(name: str = "reduction", root: str | os.PathLike | None = None) -> Any:
    """One row per cell in the sweep's ``results.csv``, as a pandas DataFrame.

    ``results.csv`` holds the cells finished when the sweep last merged its shards; a cell
    finished since then has a run directory but no row, and is left out here (as in
    :func:`epoch_curves`). Columns: ``loss``, ``protocol`` (A, B or C of
    :data:`PROTOCOLS`), ``seed``; ``temperature``, the run's temperature fit on the
    validation split (the NLL fit in the reduction sweep); and the test-set metrics of
    the epoch the run kept (the last, in every protocol sweep): ``accuracy``, ``ece`` and
    ``nll`` before temperature scaling, ``ece_ts`` and ``nll_ts`` after it; ``train_size``,
    the number of training images (:func:`size_of`); ``seconds``, the run's training time;
    ``device``, where it trained (``cpu``, or the ``cuda`` of a ledger session on a GPU);
    ``machine``, the machine that made it (:func:`calib.experiments.cell_origin.cell_origins`:
    "x86_64, AMD EPYC"; CPU kinds differ in a run's last bits, which SGD amplifies);
    ``split_seed``, the draw of training and validation images (:func:`draw_of`).
    """
    import pandas as pd

    rows, _ = load(name, root)
    where = {_cell_key(name, cell): origin for cell, origin in cell_origins(name, root).items()}
    keep = ("loss", "seed", "accuracy", "ece", "temperature", "ece_ts", "nll", "nll_ts", "seconds")
    derived = ("protocol", "train_size", "split_seed")
    out = [{**{k: r[k] for k in keep}, **dict(zip(derived, key[1:4])), "device": where[key][0],
            "machine": where[key][1]} for r in rows for key in [_row_key(name, r)]]
    return pd.DataFrame(out, columns=[*keep, *derived, "device", "machine"])


def machine_kind(machine: str, device: str = "cpu") -> str:
    """A run's machine for prose: "AMD EPYC CPU", "Intel Xeon CPU" or "NVIDIA H200 GPU"
    from :func:`protocol_runs`' ``machine`` ("x86_64, AMD EPYC"; a GPU session's GPU last)
    and ``device`` columns; "unrecorded CPU" where the ledger does not know it."""
    unit = "GPU" if str(device).startswith("cuda") else "CPU"
    parts = machine.split(", ")
    if machine == "unrecorded" or len(parts) < 2:
        return f"unrecorded {unit}"
    name = parts[-1] if unit == "GPU" else parts[1]
    return f"{name.replace('(R)', '').removesuffix(' Processor')} {unit}"


def protocol_table(runs: Any) -> Any:
    """``mean ± std`` over seeds of :func:`protocol_runs`, one row per (loss, protocol), or per
    (loss, protocol, train_size) when the runs hold more than one training-set size.

    ``n`` is the number of seeds in the row (with one, only the value is printed); the
    columns are the accuracy and the ECE before and after temperature scaling in percent,
    and the temperature ``T`` as is. The std is the sample standard deviation.
    """
    import pandas as pd

    from .tables import mean_std

    keys = ["loss", "protocol"] + (["train_size"] if runs["train_size"].nunique() > 1 else [])
    rows = []
    for key, group in runs.groupby(keys, sort=False):
        rows.append({**dict(zip(keys, key)), "n": len(group),
                     **{head: mean_std(group[col], scale) for col, head, scale in TABLE_COLUMNS}})
    return pd.DataFrame(rows).set_index(keys)


def epoch_curves(name: str = "reduction", key: str = "test_ece",
                 root: str | os.PathLike | None = None, *,
                 train_size: int | None = None, split_seed: int | None = None
                 ) -> dict[tuple[str, str], Any]:
    """Per-epoch ``key`` of the cells of :func:`protocol_runs`, grouped by (loss, protocol).

    Returns ``{(loss, protocol): (seeds, epochs) array}`` from each cell's
    ``history.jsonl``. Only cells with a row in ``results.csv`` are read, so the curves
    rest on the same seeds as the table (a run directory finished after the last merge
    is left out). ``train_size`` keeps the cells of that size (a sweep over sizes, such as
    ``regime``, needs it); None keeps every cell. ``split_seed`` likewise keeps one draw of
    images (``regime_draws``). The rows are in seed order.
    """
    import numpy as np

    groups: dict[tuple[str, str], list[list[float]]] = {}
    for (loss, protocol, size, draw, _), history in sorted(_listed_histories(name, root).items()):
        if (train_size is None or size == train_size) and (split_seed is None or draw == split_seed):
            groups.setdefault((loss, protocol), []).append([h[key] for h in history])
    return {k: np.asarray(v, dtype=float) for k, v in groups.items()}


def _listed_histories(name: str, root: str | os.PathLike | None
                      ) -> dict[tuple[str, str, int, int, int], list[dict[str, Any]]]:
    """``{(loss, protocol, train_size, split_seed, seed): history}`` of the cells with a row in ``results.csv``
    (a run directory finished after the last merge is left out, so curves and tables share
    their seeds)."""
    rows, _ = load(name, root)
    listed = {_row_key(name, r) for r in rows}
    return {k: history for cell, history in histories(name, root).items() if (k := _cell_key(name, cell)) in listed}


def _key(name: str, loss: str, settings: str, seed: int) -> tuple[str, str, int, int, int]:
    return loss, protocol_of(settings), size_of(settings, name), draw_of(settings), seed


def _row_key(name: str, row: Mapping[str, Any]) -> tuple[str, str, int, int, int]:
    """A ``results.csv`` row's (loss, protocol, train_size, split_seed, seed), its settings parsed once."""
    return _key(name, str(row["loss"]), str(row["settings"] or ""), int(row["seed"]))


def _cell_key(name: str, cell: str) -> tuple[str, str, int, int, int]:
    """A cell directory's (loss, protocol, train_size, split_seed, seed), read from its name
    (:func:`calib.experiments.grid.cell_name_parts`)."""
    if (parts := cell_name_parts(cell)) is None:
        raise ValueError(f"{cell!r} is not a sweep cell's directory name")
    return _key(name, *parts)


LOSS_NAMES = {"ce": "CE", "focal": "focal", "bsce_gra": "BSCE-GRA",  # the losses' names in the book
              "dual_focal": "dual focal"}


def last_epoch(name: str = "reduction", keys: tuple[str, ...] = ("train_loss", "classifier_norm", "train_grad_norm"),
               root: str | os.PathLike | None = None) -> Any:
    """The last epoch's ``keys`` of each cell of :func:`protocol_runs`, one row per cell.

    Columns ``loss``, ``protocol``, ``train_size``, ``split_seed``, ``seed`` and the keys (NaN where a run
    did not record one: ``train_grad_norm``, the norm of the gradient before clipping, is
    recorded only by runs that clip).
    """
    import pandas as pd

    return pd.DataFrame([{"loss": loss, "protocol": protocol, "train_size": size, "split_seed": draw,
                          "seed": seed, **{k: float(history[-1].get(k, float("nan"))) for k in keys}}
                         for (loss, protocol, size, draw, seed), history
                         in _listed_histories(name, root).items()])


def nll_rise(name: str, protocol: str, train_size: int, *, loss: str = "ce", split_seed: int = 0,
             root: str | os.PathLike | None = None, whole_run: bool = False) -> Any:
    """Per seed (in seed order): the test NLL at the last epoch minus its lowest value from the
    last epoch before the first learning-rate drop on (0 if the curve never rises after it).

    The rise of the test NLL after the drop is how Mukhoti et al. (2020, §3) see CE overfit
    the NLL. The window starts at epoch ``first_drop(name)``, the last at the high rate, so a
    curve that only falls gives 0. Empty (shape ``(0,)``) while no run of the group is finished.
    ``whole_run=True`` starts the window at epoch 1: the last NLL above the run's lowest, which
    also counts overfitting at the high rate, before the drop (a long run can start its low-rate
    phase already overfit, so the rise after the drop misses part of it).
    """
    import numpy as np

    curves = epoch_curves(name, "test_nll", root, train_size=train_size,
                          split_seed=split_seed).get((loss, protocol))
    if curves is None:
        return np.empty(0)
    return curves[:, -1] - curves[:, 0 if whole_run else first_drop(name) - 1:].min(axis=1)


def log_t_ratio(runs: Any, reference: str = "ce") -> Any:
    """Per seed, ``log T_loss - log T_reference``: each loss's temperature against the
    reference's run with the same protocol, size, draw and seed (the same initialisation and
    images), as a DataFrame with ``loss``, ``protocol``, ``train_size``, ``split_seed``, ``seed``
    and ``log_ratio``.

    A loss that corrects more as the data grow has a ratio that falls with the size; a fall of
    its T alone can be the reference's own fall (Wang et al. 2021, §4, tie the best
    regulariser strength to the size). A run without its reference partner is left out.
    """
    import numpy as np

    keys = ["protocol", "train_size", "split_seed", "seed"]
    missing = {"loss", "temperature", *keys} - set(runs.columns)
    if missing:
        raise ValueError(f"runs lacks the columns {sorted(missing)} (protocol_runs gives them)")
    ref = runs[runs["loss"] == reference][[*keys, "temperature"]]
    both = runs[runs["loss"] != reference].merge(ref, on=keys, suffixes=("", "_ref"))
    both = both.assign(log_ratio=np.log(both["temperature"]) - np.log(both["temperature_ref"]))
    return both[["loss", *keys, "log_ratio"]].reset_index(drop=True)


def test_noise(name: str, a: str, b: str, protocol: str, train_size: int, *, split_seed: int = 0,
               scale: float = 100.0, n_boot: int = 200, root: str | os.PathLike | None = None) -> dict[str, float]:
    """The test-set noise of mean ECE(``a``) − mean ECE(``b``) before temperature scaling, over
    the seeds both losses finished in one (protocol, size, draw) (the rows of ``results.csv``), as the ``test_se`` and
    ``test_df`` keywords of :func:`calib.evidence.compare` (or :meth:`~calib.evidence.Family.add`).

    Every run is scored on the same test images, so another draw of them would move each
    seed's ECE difference, partly alike for every seed; three seeds cannot average that shared
    part out. :func:`calib.evidence.test_se`
    resamples the test images once for all runs (a bootstrap of ``n_boot``) from each cell's
    committed ``test_predictions.npz``; the ECE is the 15-bin top-label one, times ``scale``
    (100: points). ``{}`` where a run keeps no predictions (cells trained before the ledger
    kept them), where the two losses finished different seeds, or fewer than two: the verdict
    then counts the seeds' noise only.
    """
    from ..evidence import test_se
    from .scores import labels_of, score_ece, top_label_scores

    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}, got {protocol!r}")
    done = {_row_key(name, r) for r in load(name, root)[0]}  # the seeds results.csv holds
    cells = {key: d for d in cell_dirs(name, root) if (key := _cell_key(name, d.name)) in done}
    group = {loss: {k[4]: d for k, d in cells.items() if k[:4] == (loss, protocol, int(train_size), int(split_seed))}
             for loss in (a, b)}
    seeds = sorted(group[a])
    if len(seeds) < 2 or set(group[b]) != set(seeds):  # else the t-test and the bootstrap
        return {}                                      # would describe different runs
    runs: dict[str, list[Any]] = {a: [], b: []}
    for loss in (a, b):
        for seed in seeds:
            if (kept := test_predictions(group[loss][seed])) is None:
                return {}
            runs[loss].append(top_label_scores(*kept))
    se = test_se(score_ece, runs[a], labels_of(runs[a]), runs[b], n_boot=n_boot)
    return {"test_se": scale * se, "test_df": float(n_boot - 1)}
