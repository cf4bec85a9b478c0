"""A bench of regularisers: one coefficient per loss, a grid of it, over seeds.

A bench is ``{panel: (registry name, keyword, coefficients)}``, with CE as the baseline::

    BENCH = {"label smoothing": ("label_smoothing", "epsilon", [0.01, 0.05, 0.09]), ...}
    runs = bench.label_runs(res.to_frame(), BENCH)  # or a ledger sweep's rows
    best = bench.best_coefficients(runs, BENCH)     # {panel: coefficient}
    ece = bench.per_seed(runs, "ece")               # (panel, coef) x seed

Its runs are a sweep's rows (:meth:`SweepResult.to_frame`) or a ledger sweep's
(:func:`calib.experiments.ledger.load`). What the runs show is decided in the chapter
that reads them, through :mod:`calib.evidence` (per-seed values from :func:`per_seed`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .tables import loss_coefficient

Bench = Mapping[str, tuple[str, str, Sequence[float]]]


def label_runs(rows: Any, bench: Bench) -> Any:
    """The CE and bench runs of ``rows``, with their ``panel`` ("CE" for CE) and ``coef`` (0 for CE).

    Only the bench's coefficients are kept (a sweep may hold others). Raises
    ``ValueError`` for an empty bench, a grid that is not strictly ascending, rows
    without the loss, seed, ECE (before and after TS) and temperature columns, a setting
    without a run, or two runs of one setting with the same seed.
    """
    import pandas as pd

    _check_bench(bench)
    frame = pd.DataFrame(rows)
    if missing := sorted({"loss", "loss_kwargs", "seed", *_COLUMNS} - set(frame.columns)):
        raise ValueError(f"rows lack the columns {missing}")
    panel_of = {name: panel for panel, (name, _, _) in bench.items()}
    frame = frame[frame["loss"].isin(["ce", *panel_of])].copy()
    frame["panel"] = frame["loss"].map(panel_of).fillna("CE")
    frame["coef"] = [loss_coefficient(loss, kw) for loss, kw in zip(frame["loss"], frame["loss_kwargs"])]
    grid = {("CE", 0.0)} | {(p, float(c)) for p, (_, _, cs) in bench.items() for c in cs}
    frame = frame[[key in grid for key in zip(frame["panel"], frame["coef"])]]
    if missing := sorted(grid - set(zip(frame["panel"], frame["coef"]))):
        raise ValueError(f"rows have no run for the settings {missing}")
    if frame.duplicated(["panel", "coef", "seed"]).any():
        twice = frame[frame.duplicated(["panel", "coef", "seed"], keep=False)]
        raise ValueError(f"rows hold two runs of one setting and seed: "
                         f"{sorted(set(zip(twice['panel'], twice['coef'], twice['seed'])))}")
    return frame


_COLUMNS = ("ece", "ece_ts", "temperature")


def _check_bench(bench: Bench) -> None:
    if not bench:
        raise ValueError("bench is empty: give {panel: (registry name, keyword, coefficients)}")
    for panel, (_, _, cs) in bench.items():
        cs = [float(c) for c in cs]
        if not cs or cs != sorted(set(cs)):
            raise ValueError(f"bench[{panel!r}] needs a strictly ascending, non-empty grid of "
                             f"coefficients, got {cs}")


def best_coefficients(runs: Any, bench: Bench) -> dict[str, float]:
    """Each panel's coefficient with the lowest mean ECE before TS; CE's is 0.

    Chosen on the test ECE, as Wang et al. (2021) choose theirs (Table 1's caption and
    §3.1; an optimistic choice they state).
    """
    means = runs.groupby(["panel", "coef"])["ece"].mean()
    return {"CE": 0.0, **{p: float(means.loc[p].idxmin()) for p in bench}}


def per_seed(runs: Any, column: str) -> Any:
    """One metric of every run: a DataFrame indexed by ``(panel, coef)``, one column per seed.

    ``runs`` from :func:`label_runs`; ``column`` one of its numeric columns (``"ece"``,
    ``"ece_ts"``, ``"temperature"``, ...). A row's values are in seed order, so two rows
    pair by seed in :func:`calib.evidence.compare`. Raises ``ValueError`` for an unknown
    column or a setting that lacks a seed another one has (the pairing would break).
    """
    if column not in runs.columns:
        raise ValueError(f"runs have no column {column!r}; they have {sorted(runs.columns)}")
    table = runs.pivot(index=["panel", "coef"], columns="seed", values=column).sort_index(axis=1)
    if table.isna().any().any():
        gaps = [key for key, row in table.iterrows() if row.isna().any()]
        raise ValueError(f"the settings {gaps} lack runs for some seeds; every setting needs the same seeds")
    return table
