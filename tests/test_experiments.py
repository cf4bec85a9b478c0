"""calib.experiments: the 000 §4.3 toy experiment (weights vs the true calibration error)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from calib.experiments import (
    DEFAULT_GRID,
    PAPER_TOY_CORRELATION,
    pearson,
    toy_weight_correlation,
    true_calibration_error,
    true_top_label_ece,
    weight_correlations,
)
from calib import metrics


def test_true_calibration_error_by_hand():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]])
    eta = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.5, 0.3]])
    l2 = true_calibration_error(p, eta)
    assert l2[0].item() == pytest.approx(math.sqrt(0.04 + 0.09 + 0.01)) and l2[1].item() == pytest.approx(0.0)
    assert true_calibration_error(p, eta, "sq")[0].item() == pytest.approx(0.14)
    assert true_calibration_error(p, eta, "top")[0].item() == pytest.approx(0.2)  # |0.7 - 0.5| on class 0


def test_true_top_label_ece_is_binned_ece_with_eta_for_the_accuracy():
    # bin (0.6, 0.6667] of 15 holds 0.62 and 0.65 (mean eta of the top class 0.5):
    # |0.5 - 0.635| * 2/3; bin (0.8667, 0.9333] holds 0.9 with eta 0.9: gap 0
    p = torch.tensor([[0.62, 0.38], [0.35, 0.65], [0.9, 0.1]], dtype=torch.float64)
    eta = torch.tensor([[0.3, 0.7], [0.3, 0.7], [0.9, 0.1]], dtype=torch.float64)
    assert true_top_label_ece(p, eta) == pytest.approx(abs(0.5 - 0.635) * 2 / 3)
    # with the one-hot labels as eta it is the label-based ECE (bins (lo, hi], 0.6 in (0.53, 0.6])
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(500, 4, generator=g, dtype=torch.float64), 1)
    probs[0] = torch.tensor([0.6, 0.2, 0.1, 0.1], dtype=torch.float64)
    y = torch.randint(0, 4, (500,), generator=g)
    onehot = torch.nn.functional.one_hot(y, 4).double()
    for n_bins in (5, 15, 100):
        assert true_top_label_ece(probs, onehot, n_bins) == pytest.approx(metrics.ece(probs, y, n_bins))
    # between the per-example mean |eta_y - p_y| (an upper bound) and 0
    eta_r = torch.softmax(3 * torch.randn(500, 4, generator=g, dtype=torch.float64), 1)
    assert 0 <= true_top_label_ece(probs, eta_r) <= true_calibration_error(probs, eta_r, "top").mean() + 1e-12
    with pytest.raises(ValueError, match="eta"):
        true_top_label_ece(p, eta[:, :1])


def test_true_calibration_error_validates():
    p = torch.tensor([[0.7, 0.3]])
    with pytest.raises(ValueError, match="error"):
        true_calibration_error(p, p, "l3")
    with pytest.raises(ValueError, match="eta"):
        true_calibration_error(p, torch.tensor([[0.2, 0.3, 0.5]]))
    with pytest.raises(ValueError, match="eta"):
        true_calibration_error(p, torch.tensor([[0.9, 0.3]]))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(3, 40), elements=st.floats(-100, 100)),
       arrays(np.float64, st.integers(3, 40), elements=st.floats(-100, 100)))
def test_pearson_matches_numpy(a, b):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    r = pearson(a, b)
    if np.std(a) * np.std(b) < 1e-9:
        return
    assert r == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-9)
    assert -1 - 1e-12 <= r <= 1 + 1e-12
    assert pearson(3 * a + 1, b) == pytest.approx(r, abs=1e-9)  # affine invariance


def test_pearson_edge_cases():
    assert math.isnan(pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="same length"):
        pearson([1.0, 2.0], [1.0, 2.0, 3.0])


def test_brier_weight_is_the_error_when_eta_is_one_hot():
    # With eta = one-hot(y), ||p - eta||^2 is exactly u_gBS(gamma=2, norm=2): r = 1 at that grid point.
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(300, 4, generator=g, dtype=torch.float64) * 2, 1)
    y = torch.randint(0, 4, (300,), generator=g)
    eta = torch.nn.functional.one_hot(y, 4).double()
    table = dict((tuple(sorted(pt.items())), r) for pt, r in
                 weight_correlations(probs, y, eta, error="sq")["gBS"])
    assert table[(("gamma", 2.0), ("norm", 2.0))] == pytest.approx(1.0, abs=1e-12)
    assert max(table.values()) == pytest.approx(1.0, abs=1e-12)
    # and u_FL with gamma = 1 is 1 - p_y, which equals the top-class error when eta is one-hot and
    # the prediction is right; overall still strongly correlated with the l2 error
    fl = dict((pt["gamma"], r) for pt, r in weight_correlations(probs, y, eta)["FL"])
    assert fl[1.0] > 0.9


def test_gbs_with_norm_one_is_a_rescaled_focal_weight():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(200, 5, generator=g, dtype=torch.float64), 1)
    y = torch.randint(0, 5, (200,), generator=g)
    eta = torch.softmax(torch.randn(200, 5, generator=g, dtype=torch.float64), 1)
    res = weight_correlations(probs, y, eta)
    fl = {pt["gamma"]: r for pt, r in res["FL"]}
    for pt, r in res["gBS"]:
        if pt["norm"] == 1.0:
            assert r == pytest.approx(fl[pt["gamma"]], abs=1e-12)


def test_weight_correlations_validates():
    p = torch.tensor([[0.6, 0.4], [0.3, 0.7]])
    y = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="grid"):
        weight_correlations(p, y, p, grid={"XYZ": {"gamma": (1.0,)}})
    with pytest.raises(ValueError, match="grid"):
        weight_correlations(p, y, p, grid={"FL": {"gamma": (0.0,)}})
    with pytest.raises(ValueError, match="grid"):
        weight_correlations(p, y, p, grid={"gBS": {"gamma": (1.0,)}})
    with pytest.raises(ValueError, match="labels"):
        weight_correlations(p, torch.tensor([0, 2]), p)


SMALL_GRID = {"FL": {"gamma": (1.0, 3.0)}, "DFL": {"gamma": (1.0, 3.0)}, "gBS": {"gamma": (1.0, 2.0), "norm": (1.0, 2.0)}}


@pytest.fixture(scope="module")
def small_result():
    return toy_weight_correlation(seeds=(0, 1), epochs=2, n_train_per_class=2000, n_test_per_class=200, hidden=16,
                                  grid=SMALL_GRID, device="cpu")


def test_toy_correlation_structure(small_result):
    assert set(small_result) == set(PAPER_TOY_CORRELATION) == set(DEFAULT_GRID)
    for name, res in small_result.items():
        assert len(res["r_per_seed"]) == 2
        assert all(-1 <= r <= 1 for r in res["r_per_seed"])
        assert res["r_mean"] == pytest.approx(np.mean(res["r_per_seed"]))
        assert res["r_std"] == pytest.approx(np.std(res["r_per_seed"], ddof=1))
        assert res["best_params"] in [pt for pt, _ in res["grid"]]
        assert res["r_mean"] == pytest.approx(max(m for _, m in res["grid"]))  # the best grid point
        assert len(res["grid"]) == int(np.prod([len(v) for v in SMALL_GRID[name].values()]))
        assert all(a > 0.8 for a in res["accuracy"])  # the small net learned the mixture


def test_toy_correlation_weights_track_the_error(small_result):
    # every weight is positively correlated with the true calibration error (000 §4.3's premise)
    assert all(res["r_mean"] > 0.2 for res in small_result.values())
    # with norm 1 over all classes, sum_k |p_k - y_k| = 2 (1 - p_y): u_gBS = 2^gamma u_FL, the same r,
    # so the grid search over gBS can never do worse than FL's grid (shared gammas)
    assert small_result["gBS"]["r_mean"] >= small_result["FL"]["r_mean"] - 1e-12


def test_toy_correlation_is_reproducible():
    kw = dict(seeds=(4,), epochs=1, n_train_per_class=200, n_test_per_class=50, hidden=8, grid=SMALL_GRID, device="cpu")
    assert toy_weight_correlation(**kw) == toy_weight_correlation(**kw)


def test_toy_correlation_validates():
    with pytest.raises(ValueError, match="seeds"):
        toy_weight_correlation(seeds=())
    with pytest.raises(ValueError, match="epochs"):
        toy_weight_correlation(seeds=(0,), epochs=0)
    with pytest.raises(ValueError, match="error"):
        toy_weight_correlation(seeds=(0,), error="l1")
    with pytest.raises(ValueError, match="n_test_per_class"):
        toy_weight_correlation(seeds=(0,), n_test_per_class=1)


# --------------------------------------------------------------------------- the chapter's tables
from calib import experiments  # noqa: E402


def _fake_result(r=(0.5, 0.6, 0.7)):
    return {name: {"r_mean": v, "r_std": 0.01, "best_params": {"gamma": 2.0, "norm": 2.0}}
            for name, v in zip(("FL", "DFL", "gBS"), r)}


def test_network_label():
    assert experiments.network_label({"hidden": 64, "depth": 1, "epochs": 5}) == "1x64, 5 ep"
    assert experiments.network_label({"hidden": 64, "depth": 2, "epochs": 5, "lr": 1e-2}) == "2x64, 5 ep, lr 0.01"
    assert experiments.network_label({"hidden": 8, "depth": 1, "epochs": 5, "lr": float("nan")}) == "1x8, 5 ep"
    with pytest.raises(ValueError, match="epochs"):
        experiments.network_label({"hidden": 8, "depth": 1})


def test_study_networks_start_with_the_default_and_the_under_trained_network():
    nets = experiments.STUDY_NETWORKS
    assert nets[0] == {"hidden": 64, "depth": 1, "epochs": 5} and nets[1]["epochs"] == 1
    assert len({experiments.network_label(n) for n in nets}) == len(nets) == 6


def test_toy_correlation_table_puts_ours_beside_the_paper():
    table = experiments.toy_correlation_table(_fake_result())
    assert list(table.index) == ["FL", "DFL", "gBS"] and table.index.name == "weight"
    assert table.loc["gBS", "ours: r (mean ± sd)"] == "0.700 ± 0.010"
    assert table.loc["FL", "ours: best parameters"] == "gamma=2, norm=2"
    assert table.loc["DFL", "Lin et al. (2024): r"] == PAPER_TOY_CORRELATION["DFL"]
    with pytest.raises(ValueError, match="gBS"):
        experiments.toy_correlation_table({k: v for k, v in _fake_result().items() if k != "gBS"})


def _study_rows():
    rows = []
    for net, acc in (({"hidden": 64, "depth": 1, "epochs": 5}, 0.9), ({"hidden": 16, "depth": 1, "epochs": 1}, 0.5)):
        for error in ("l2", "sq"):
            for grid, r in (("default", (0.1, 0.2, 0.3)), ("narrow", (0.3, 0.2, 0.1))):
                best = dict(zip(("FL", "DFL", "gBS"), r))
                rows.append({**net, "error": error, "grid": grid, **best,
                             "order": experiments.ordering(best), "paper_order": False, "accuracy": acc})
    return rows


def test_toy_ordering_table_has_one_row_per_network_and_error():
    table = experiments.toy_ordering_table(_study_rows())
    assert list(table.index) == [("1x64, 5 ep", "l2"), ("1x64, 5 ep", "sq"), ("1x16, 1 ep", "l2"), ("1x16, 1 ep", "sq")]
    assert list(table.columns) == ["r FL", "r DFL", "r gBS", "order (default grid)", "order (narrow grid)",
                                   "test accuracy"]
    row = table.loc[("1x16, 1 ep", "sq")]
    assert row["r gBS"] == 0.3 and row["test accuracy"] == 0.5
    assert row["order (default grid)"] == "gBS > DFL > FL" and row["order (narrow grid)"] == "FL > DFL > gBS"


def test_toy_ordering_table_needs_both_grids():
    with pytest.raises(ValueError, match="narrow"):
        experiments.toy_ordering_table([r for r in _study_rows() if r["grid"] == "default"])
    with pytest.raises(ValueError, match="study"):
        experiments.toy_ordering_table([])
