"""calib.experiments.posthoc_study: the calibrator table, the validation-size study, the bias simulation."""
from __future__ import annotations

import math

import pytest
import torch

from calib import metrics, posthoc
from calib.experiments import posthoc_study as ps


def _logits(n: int, k: int = 4, seed: int = 0, sharpen: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.distributions.Categorical(logits=z).sample()
    return sharpen * z, y  # over-confident logits of a calibrated model


def test_default_calibrators_cover_the_full_vector_methods():
    cals = ps.default_calibrators(10)
    assert {"temperature", "vector", "matrix", "Dirichlet", "Dirichlet ODIR", "isotonic", "ensemble TS"} <= set(cals)
    assert "Platt" not in cals and "Platt" in ps.default_calibrators(2)
    for make in cals.values():
        assert hasattr(make(), "predict_proba")
    with pytest.raises(ValueError, match="odir"):
        ps.default_calibrators(3, odir=0)


def test_compare_calibrators_table_matches_the_metrics():
    torch.manual_seed(0)
    gv, yv = _logits(800, seed=1)
    gt, yt = _logits(600, seed=2)
    cals = {"temperature": posthoc.TemperatureScaling}
    df = ps.compare_calibrators(cals, gv, yv, gt, yt, n_boot=50)
    assert list(df.method.unique()) == ["none", "temperature"]
    assert set(df.metric) == set(ps.METRICS)
    p = posthoc.TemperatureScaling().fit(gv, yv).predict_proba(gt)
    got = df.set_index(["method", "metric"]).value
    assert got["temperature", "NLL"] == pytest.approx(metrics.nll(p, yt), rel=1e-9)
    assert got["none", "ECE"] == pytest.approx(metrics.ece(torch.softmax(gt, 1), yt), rel=1e-9)
    fast = df[df.metric.isin(["ECE", "NLL"])]
    assert (fast.low <= fast.high).all()
    assert math.isnan(df.set_index(["method", "metric"]).low["none", "smooth ECE"])
    # temperature scaling fixes a planted over-confidence
    assert got["temperature", "NLL"] < got["none", "NLL"]


def test_compare_calibrators_refuses_bad_input():
    gv, yv = _logits(100)
    with pytest.raises(TypeError, match="calibrators"):
        ps.compare_calibrators({}, gv, yv, gv, yv)
    with pytest.raises(ValueError, match="val_logits"):
        ps.compare_calibrators({"t": posthoc.TemperatureScaling}, torch.softmax(gv, 1), yv, gv, yv)
    with pytest.raises(ValueError, match="n_boot_smooth"):
        ps.compare_calibrators({"t": posthoc.TemperatureScaling}, gv, yv, gv, yv, n_boot_smooth=-1)


def test_validation_size_study_shapes_and_shared_test_set():
    g, y = _logits(700, seed=3)
    df = ps.validation_size_study({"temperature": posthoc.TemperatureScaling}, g, y, sizes=(50, 200),
                                  seeds=(0, 1), n_test=400)
    assert len(df) == 2 * 2 * 2
    none = df[df.method == "none"].groupby("seed").NLL.nunique()
    assert (none == 1).all()  # one test set per seed, whatever the size
    with pytest.raises(ValueError, match="exceed"):
        ps.validation_size_study({"t": posthoc.TemperatureScaling}, g, y, sizes=(500,), n_test=400)


def test_true_binary_errors_zero_for_the_posterior_and_ordered():
    calibrated = ps.true_binary_errors(1.0, n_reference=20_000)
    assert all(abs(v) < 1e-12 for k, v in calibrated.items() if k != "smooth ECE")
    assert calibrated["smooth ECE"] < 2e-3
    sharp = ps.true_binary_errors(0.5, n_reference=20_000)
    assert 0 < sharp["ECE"] <= sharp["l2 CE"]  # E|gap| <= sqrt(E gap^2)


def test_estimator_bias_binned_ece_of_a_calibrated_model_is_biased_up():
    df = ps.estimator_bias(ns=(100, 2000), n_bins=(5, 30), seeds=range(3), temperatures=(1.0,), n_reference=2000)
    assert set(df.estimator) == {"binned ECE", "debiased l2 CE", "smooth ECE"}
    assert (df.truth.abs() < 1e-9).all()
    ece = df[df.estimator == "binned ECE"].groupby(["N", "n_bins"]).error.mean()
    assert (ece > 0).all()
    assert ece[100, 30] > ece[2000, 30] and ece[100, 30] > ece[100, 5]
    with pytest.raises(ValueError, match="temperatures"):
        ps.estimator_bias(temperatures=(0.0,))


def test_smoke_mode_caps_the_work(monkeypatch):
    monkeypatch.setenv("CALIB_SMOKE", "1")
    g, y = _logits(1200, seed=4)
    df = ps.compare_calibrators({"temperature": posthoc.TemperatureScaling}, g[:600], y[:600], g[600:], y[600:],
                                n_boot=1000)
    p = posthoc.TemperatureScaling().fit(g[:ps.SMOKE_SAMPLES], y[:ps.SMOKE_SAMPLES])
    want = metrics.nll(p.predict_proba(g[600:600 + ps.SMOKE_SAMPLES]), y[600:600 + ps.SMOKE_SAMPLES])
    assert df.set_index(["method", "metric"]).value["temperature", "NLL"] == pytest.approx(want, rel=1e-9)
    sizes = ps.validation_size_study({"t": posthoc.TemperatureScaling}, g, y, sizes=(500,), seeds=range(5),
                                     n_test=600)
    assert sizes.seed.nunique() == 2
