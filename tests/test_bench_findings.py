"""calib.experiments.bench: a bench's runs labelled, its best coefficients, its values seed by seed.

Chapter 10 states its findings as calib.evidence verdicts on these values; the library
keeps only the bookkeeping, tested here on runs built for it.
"""
from __future__ import annotations

import pandas as pd
import pytest

from calib import evidence
from calib.experiments import bench

BENCH = {
    "label smoothing": ("label_smoothing", "epsilon", [0.01, 0.05, 0.09]),
    "L1 logit norm": ("logit_norm", "alpha", [0.01, 0.05, 0.1]),
    "entropy regulariser": ("entropy_reg", "alpha", [0.1, 0.3, 0.5]),
    "focal": ("focal", "gamma", [1.0, 3.0, 5.0]),
}
# (ECE before TS, ECE after TS, T) per setting: every grid V-shaped, over- to under-confident
SETTINGS = {
    ("ce", ""): (0.20, 0.010, 2.5),
    ("label_smoothing", "epsilon=0.01"): (0.12, 0.010, 1.3),
    ("label_smoothing", "epsilon=0.05"): (0.06, 0.008, 0.9),
    ("label_smoothing", "epsilon=0.09"): (0.065, 0.009, 0.8),
    ("logit_norm", "alpha=0.01"): (0.12, 0.03, 1.3),
    ("logit_norm", "alpha=0.05"): (0.04, 0.042, 1.02),
    ("logit_norm", "alpha=0.1"): (0.13, 0.03, 0.7),
    ("entropy_reg", "alpha=0.1"): (0.12, 0.010, 1.3),
    ("entropy_reg", "alpha=0.3"): (0.05, 0.006, 0.8),
    ("entropy_reg", "alpha=0.5"): (0.25, 0.012, 0.6),
    ("focal", "gamma=1.0"): (0.12, 0.010, 1.3),
    ("focal", "gamma=3.0"): (0.03, 0.035, 0.98),
    ("focal", "gamma=5.0"): (0.12, 0.012, 0.7),
}


def _rows(changes=None, seeds=(0, 1, 2)):
    rows = []
    for (loss, kw), (ece, ece_ts, t) in SETTINGS.items():
        for s in seeds:
            e, ets, tt = (changes or {}).get((loss, kw, s), (ece, ece_ts, t))
            rows.append(dict(loss=loss, loss_kwargs=kw or float("nan"), seed=s, ece=e + 1e-3 * s,
                             ece_ts=ets + 1e-4 * s, temperature=tt))
    return pd.DataFrame(rows)


def test_runs_are_labelled_and_the_best_coefficients_found():
    runs = bench.label_runs(_rows(), BENCH)
    assert set(runs["panel"]) == {"CE", *BENCH} and len(runs) == 39
    assert runs.loc[runs["loss"] == "ce", "coef"].eq(0.0).all()
    assert bench.best_coefficients(runs, BENCH) == {"CE": 0.0, "label smoothing": 0.05, "L1 logit norm": 0.05,
                                                     "entropy regulariser": 0.3, "focal": 3.0}
    # the best coefficient follows the mean over seeds: one low seed does not move it
    one = bench.label_runs(_rows({("focal", "gamma=1.0", 0): (0.0, 0.01, 1.3)}), BENCH)
    assert bench.best_coefficients(one, BENCH)["focal"] == 3.0
    every = bench.label_runs(_rows({("focal", "gamma=1.0", s): (0.02, 0.01, 1.3) for s in range(3)}), BENCH)
    assert bench.best_coefficients(every, BENCH)["focal"] == 1.0


def test_per_seed_rows_pair_by_seed_in_evidence():
    runs = bench.label_runs(_rows(seeds=(2, 0, 1)), BENCH)  # rows in any seed order
    ece = bench.per_seed(runs, "ece")
    assert list(ece.columns) == [0, 1, 2] and ece.shape == (13, 3)
    assert ece.loc[("focal", 3.0)].tolist() == pytest.approx([0.030, 0.031, 0.032])
    v = evidence.compare(ece.loc[("CE", 0.0)], ece.loc[("focal", 3.0)], "CE above focal")
    assert v.test.startswith("paired t") and v.effect == pytest.approx(0.17)
    assert bench.per_seed(runs, "temperature").loc[("CE", 0.0)].tolist() == [2.5, 2.5, 2.5]


def test_per_seed_refuses_unpaired_settings_and_unknown_columns():
    runs = bench.label_runs(_rows(), BENCH)
    with pytest.raises(ValueError, match="no column 'nll'"):
        bench.per_seed(runs, "nll")
    short = runs[~((runs["panel"] == "focal") & (runs["coef"] == 5.0) & (runs["seed"] == 2))]
    with pytest.raises(ValueError, match=r"\('focal', 5.0\)"):
        bench.per_seed(short, "ece")


def test_bad_bench_or_rows_are_named():
    with pytest.raises(ValueError, match="bench is empty"):
        bench.label_runs(_rows(), {})
    with pytest.raises(ValueError, match="strictly ascending"):
        bench.label_runs(_rows(), {**BENCH, "focal": ("focal", "gamma", [3.0, 1.0, 5.0])})
    with pytest.raises(ValueError, match=r"lack the columns \['ece_ts'\]"):
        bench.label_runs(_rows().drop(columns="ece_ts"), BENCH)
    twice = pd.concat([_rows(), _rows().iloc[:1]])
    with pytest.raises(ValueError, match=r"two runs of one setting and seed: \[\('CE', 0.0, 0\)\]"):
        bench.label_runs(twice, BENCH)
    extra = pd.concat([_rows(), _rows().assign(loss_kwargs="gamma=2.0").query("loss == 'focal'")])
    assert len(bench.label_runs(extra, BENCH)) == 39  # off-grid runs are left out
    # a smaller bench keeps only its own losses
    assert set(bench.label_runs(_rows(), {"focal": BENCH["focal"]})["panel"]) == {"CE", "focal"}


def test_missing_setting_is_named():
    rows = _rows()
    rows = rows[~((rows["loss"] == "focal") & (rows["loss_kwargs"] == "gamma=5.0"))]
    with pytest.raises(ValueError, match=r"no run for the settings \[\('focal', 5.0\)\]"):
        bench.label_runs(rows, BENCH)
