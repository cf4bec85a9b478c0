"""calib.experiments.bench: chapter 10's bench findings, on runs built to hold or fail them."""
from __future__ import annotations

import pandas as pd
import pytest

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
            rows.append(dict(loss=loss, loss_kwargs=kw or float("nan"), seed=s, ece=e + 1e-4 * s,
                             ece_ts=ets + 1e-5 * s, temperature=tt))
    return pd.DataFrame(rows)


def test_every_finding_holds_on_runs_built_for_them():
    runs = bench.label_runs(_rows(), BENCH)
    assert set(runs["panel"]) == {"CE", *BENCH}
    assert bench.best_coefficients(runs, BENCH) == {"CE": 0.0, "label smoothing": 0.05, "L1 logit norm": 0.05,
                                                     "entropy regulariser": 0.3, "focal": 3.0}
    every_seed, on_means = bench.findings(runs, BENCH)
    assert len(every_seed) == 10 and all(every_seed.values()), every_seed
    # label smoothing's step is 0.5 points; focal gamma=3 is above CE after TS; label
    # smoothing (0.80) is below CE (1.00) after TS
    assert list(on_means.values()) == [False, True, False, False], on_means
    assert any("0.50 points" in text for text in on_means)
    assert any("others: entropy regulariser 0.5, focal 3, focal 5)" in text for text in on_means)
    assert any("CE 1.00 ± 0.00 over seeds, lowest of the three label smoothing 0.80" in text for text in on_means)
    faster = _rows({("label_smoothing", "epsilon=0.05", s): (0.06, 0.011, 0.9) for s in range(3)})
    assert list(bench.findings(bench.label_runs(faster, BENCH), BENCH)[1].values())[-1]  # now CE is lowest


@pytest.mark.parametrize("change, broken", [
    ((("focal", "gamma=3.0", 1), (0.11, 0.035, 0.98)), "under half CE's ECE"),  # one seed
    ((("entropy_reg", "alpha=0.5", 2), (0.10, 0.012, 0.6)), "strongest entropy"),
    ((("ce", "", 0), (0.20, 0.050, 2.5)), "every L1 run"),
    ((("logit_norm", "alpha=0.1", 0), (0.13, 0.03, 1.1)), "over- to under-confident"),
])
def test_one_seed_breaks_one_finding(change, broken):
    (key, values) = change
    every_seed, _ = bench.findings(bench.label_runs(_rows({key: values}), BENCH), BENCH)
    failed = [text for text, ok in every_seed.items() if not ok]
    assert any(broken in text for text in failed), failed


def test_bad_bench_or_rows_are_named():
    with pytest.raises(ValueError, match=r"bench lacks the losses \['focal'\]"):
        bench.label_runs(_rows(), {k: v for k, v in BENCH.items() if k != "focal"})
    with pytest.raises(ValueError, match="ascending grid of an odd number"):
        bench.label_runs(_rows(), {**BENCH, "focal": ("focal", "gamma", [3.0, 1.0, 5.0])})
    with pytest.raises(ValueError, match=r"lack the columns \['ece_ts'\]"):
        bench.label_runs(_rows().drop(columns="ece_ts"), BENCH)
    twice = pd.concat([_rows(), _rows().iloc[:1]])
    with pytest.raises(ValueError, match=r"two runs of one setting and seed: \[\('CE', 0.0, 0\)\]"):
        bench.label_runs(twice, BENCH)
    extra = pd.concat([_rows(), _rows().assign(loss_kwargs="gamma=2.0").query("loss == 'focal'")])
    assert len(bench.label_runs(extra, BENCH)) == 39  # off-grid runs are left out


def test_missing_setting_is_named():
    rows = _rows()
    rows = rows[~((rows["loss"] == "focal") & (rows["loss_kwargs"] == "gamma=5.0"))]
    with pytest.raises(ValueError, match=r"no run for the settings \[\('focal', 5.0\)\]"):
        bench.label_runs(rows, BENCH)
