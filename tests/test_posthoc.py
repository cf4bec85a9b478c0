"""calib.posthoc: temperature scaling (NLL and grid) and histogram binning."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib import metrics as M
from calib.data import gaussian_mixture
from calib.posthoc import (
    HistogramBinning,
    NotFittedError,
    TemperatureScaling,
    default_grid,
    fit_temperature,
    temperature_scale,
)


@pytest.fixture(scope="module")
def sharpened():
    """Toy predictions with a known truth: log eta / 0.5, so T = 2 restores eta."""
    train = gaussian_mixture(1500, num_classes=5, scale=2.5, seed=0)
    test = train.sample(1500, seed=1)
    return train.log_eta() / 0.5, train.y, test.log_eta() / 0.5, test.y


def test_default_grid_is_the_papers():
    g = default_grid()
    assert g[0] == 0.1 and g[-1] == 10.0 and len(g) == 100
    np.testing.assert_allclose(np.diff(g), 0.1)


def test_nll_fit_recovers_known_temperature(sharpened):
    g, y, g_test, y_test = sharpened
    ts = TemperatureScaling("nll").fit(g, y)
    assert ts.temperature == pytest.approx(2.0, abs=0.15)
    assert M.ece(ts.predict_proba(g_test), y_test) < 0.5 * M.ece(torch.softmax(g_test, 1), y_test)
    assert M.nll(ts.predict_proba(g_test), y_test) < M.nll(torch.softmax(g_test, 1), y_test)


def test_nll_fit_is_the_minimiser(sharpened):
    g, y, _, _ = sharpened
    t = fit_temperature(g, y, "nll")
    at = lambda s: M.nll(torch.softmax(g / s, 1), y)  # noqa: E731
    assert at(t) <= min(at(t * 0.97), at(t * 1.03))
    assert at(t) <= at(2.0) + 1e-9


def test_grid_fit_finds_the_grid_minimum(sharpened):
    g, y, _, _ = sharpened
    ts = TemperatureScaling("grid").fit(g, y)
    assert ts.temperature in set(default_grid().tolist())
    scores = [M.ece(torch.softmax(g / t, 1), y) for t in default_grid()]
    assert M.ece(ts.predict_proba(g), y) == pytest.approx(min(scores), abs=1e-12)
    assert ts.temperature == pytest.approx(2.0, abs=0.5)


def test_grid_ties_keep_first_minimum():
    # constant logits: the confidence is 1/K at every temperature, so every T ties
    g = torch.zeros(50, 4)
    y = torch.arange(50) % 4
    assert fit_temperature(g, y, "grid") == 0.1
    assert fit_temperature(g, y, "grid", grid=[3.0, 0.5, 7.0]) == 3.0
    assert TemperatureScaling("grid", grid=[5.0, 1.0]).fit(g, y).temperature == 5.0


def test_custom_grid_and_n_bins(sharpened):
    g, y, _, _ = sharpened
    assert fit_temperature(g, y, "grid", grid=[1.0, 2.0, 4.0], n_bins=10) == 2.0


@pytest.mark.parametrize("name", ["wideresnet-16-4-cifar-10", "wideresnet-16-4-cifar-100", "densenet-bc-100-cifar-100"])
@pytest.mark.parametrize("method", ["nll", "grid"])
def test_temperature_scaling_helps_real_networks(netcal_records, name, method):
    d = np.load(netcal_records / f"{name}.npz")
    p, y = torch.from_numpy(d["predictions"]), torch.from_numpy(d["ground_truth"])
    logits = torch.log(p.double().clamp_min(1e-30))  # softmax(log p) = p, up to the clamp
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    val, test = order[:5000], order[5000:]
    ts = TemperatureScaling(method).fit(logits[val], y[val])
    assert ts.temperature > 1  # these networks are over-confident
    q = ts.predict_proba(logits[test])
    assert M.nll(q, y[test]) < M.nll(p[test], y[test])
    assert M.ece(q, y[test]) < M.ece(p[test], y[test])
    assert M.accuracy(q, y[test]) == M.accuracy(p[test], y[test])  # T keeps the arg-max


def test_histogram_binning_zero_ece_on_fit_set_and_helps_held_out(sharpened):
    g, y, g_test, y_test = sharpened
    hb = HistogramBinning(15).fit(g, y)
    correct = g.argmax(1) == y
    assert M.bin_stats_from_confidence(hb.predict_confidence(g), correct).ece == pytest.approx(0, abs=1e-12)
    c_test = hb.predict_confidence(g_test)
    assert c_test.shape == (len(y_test),) and c_test.dtype == torch.float64
    before = M.ece(torch.softmax(g_test, 1), y_test)
    after = M.bin_stats_from_confidence(c_test, g_test.argmax(1) == y_test).ece
    assert after < 0.5 * before
    assert torch.equal(hb.predict(g_test), g_test.argmax(1))


def test_histogram_binning_values_and_empty_bins():
    # two samples in bin (0.6, 0.6667] (one right) and nothing else
    g = torch.log(torch.tensor([[0.65, 0.35], [0.65, 0.35]]))
    hb = HistogramBinning(15).fit(g, torch.tensor([0, 1]))
    assert hb.bin_counts.sum() == 2 and hb.bin_counts[9] == 2
    assert hb.bin_values[9] == pytest.approx(0.5)
    mid = 0.5 * (hb.edges[:-1] + hb.edges[1:])
    empty = hb.bin_counts == 0
    np.testing.assert_allclose(hb.bin_values[empty], mid[empty])
    with pytest.raises(ValueError):
        hb.bin_values[0] = 1.0  # read-only


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.floats(0.2, 5.0), st.integers(0, 1000))
def test_transform_properties(k, t, seed):
    g = 3 * torch.randn(40, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    y = torch.multinomial(torch.softmax(g, 1), 1, generator=torch.Generator().manual_seed(seed)).squeeze(1)
    ts = TemperatureScaling()
    ts._temperature = t
    torch.testing.assert_close(ts.transform(g), g / t)
    q = ts.predict_proba(g)
    torch.testing.assert_close(q.sum(1), torch.ones(40, dtype=torch.float64))
    assert torch.equal(q.argmax(1), g.argmax(1))
    assert temperature_scale(g.numpy(), t).shape == g.shape
    # scaling the logits by s scales the fitted temperature by s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tiny samples can be separable
        t1 = fit_temperature(g, y, "nll")
        if 0.05 < t1 < 50 and not bool(g.argmax(1).eq(y).all()):
            assert fit_temperature(2 * g, y, "nll") == pytest.approx(2 * t1, rel=1e-3)


def test_unfitted_use_raises_not_fitted_error():
    g = torch.randn(5, 3)
    for call in (lambda: TemperatureScaling().temperature, lambda: TemperatureScaling().transform(g),
                 lambda: TemperatureScaling().predict_proba(g), lambda: HistogramBinning().predict_confidence(g),
                 lambda: HistogramBinning().bin_values):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()
    assert issubclass(NotFittedError, ValueError)
    assert not hasattr(TemperatureScaling(), "temperature")  # AttributeError subclass, like sklearn


def test_probabilities_are_refused_as_logits():
    p = torch.softmax(torch.randn(20, 4), 1)
    y = torch.randint(0, 4, (20,))
    for call in (lambda: TemperatureScaling().fit(p, y), lambda: HistogramBinning().fit(p, y),
                 lambda: fit_temperature(p, y, "grid"), lambda: temperature_scale(p, 2.0)):
        with pytest.raises(ValueError, match="looks like probabilities"):
            call()


@pytest.mark.parametrize(
    "logits, labels, exc, words",
    [
        (torch.full((4, 3), float("nan")), torch.zeros(4, dtype=torch.long), ValueError, "NaN"),
        (torch.randn(4), torch.zeros(4, dtype=torch.long), ValueError, "shape (N, K)"),
        (torch.randn(4, 3), torch.zeros(3, dtype=torch.long), ValueError, "labels has 3 entries"),
        (torch.randn(4, 3), torch.full((4,), 3), ValueError, "labels must lie"),
        (torch.randn(4, 3), torch.zeros(4), TypeError, "labels must be integer"),
        (torch.empty(0, 3), torch.empty(0, dtype=torch.long), ValueError, "empty"),
    ],
)
def test_bad_input(logits, labels, exc, words):
    for cal in (TemperatureScaling(), TemperatureScaling("grid"), HistogramBinning()):
        with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
            cal.fit(logits, labels)


def test_bad_hyper_parameters():
    with pytest.raises(ValueError, match="method"):
        TemperatureScaling("ece")
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("grid", grid=[1.0, -2.0])
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("grid", grid=[])
    with pytest.raises(ValueError, match="n_bins"):
        HistogramBinning(0)
    with pytest.raises(TypeError, match="n_bins"):
        TemperatureScaling(n_bins=2.5)
    with pytest.raises(ValueError, match="temperature"):
        temperature_scale(torch.randn(3, 2), 0.0)
    with pytest.raises(ValueError, match="temperature"):
        temperature_scale(torch.randn(3, 2), math.inf)


def test_degenerate_validation_sets_warn():
    y = torch.tensor([0, 1] * 10)
    with pytest.warns(RuntimeWarning, match="every validation prediction is correct"):
        t = fit_temperature(torch.tensor([[5.0, -5.0], [-5.0, 5.0]] * 10), y, "nll")
    assert t < 1  # sharpening always helps when nothing is wrong
    # labels unrelated to the logits: the uniform prediction (T -> inf) is best; clipped
    with pytest.warns(RuntimeWarning, match="extreme"):
        t = fit_temperature(torch.tensor([[1.0, -1.0], [1.0, -1.0]] * 10), y, "nll")
    assert t == 1e3


# ----------------------------------------------------------------------------- hardening (issue 14)


def _lbfgs_temperature(g, y, max_iter=100):
    """The previous fit (L-BFGS on log T, strong Wolfe), kept here as the reference."""
    import torch.nn.functional as F

    g64 = g.double()
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(g64 * torch.exp(-log_t), y)
        loss.backward()
        return loss

    opt.step(closure)
    return math.exp(float(log_t.detach()))


def _nll_slope(g, y, beta):
    """``dL/dbeta`` of the mean NLL ``L(beta) = (1/N) sum_i -log softmax(beta g_i)_{y_i}``."""
    b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(torch.nn.functional.cross_entropy(g * b, y), b)
    return float(slope)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(20, 400), st.floats(0.2, 6.0), st.integers(0, 10_000))
def test_nll_fit_equals_the_reference_lbfgs(k, n, sharp, seed):
    gen = torch.Generator().manual_seed(seed)
    g = sharp * torch.randn(n, k, generator=gen, dtype=torch.float64)
    # labels from a softmax at another temperature, with some noise: a finite optimum
    y = torch.multinomial(torch.softmax(g / 1.7, 1), 1, generator=gen).squeeze(1)
    want = _lbfgs_temperature(g, y)
    if bool(g.argmax(1).eq(y).all()) or not 1e-2 < want < 1e2:
        return  # no finite minimiser in reach (T -> 0 or inf): both warn and clip instead
    got = fit_temperature(g, y, "nll")
    if got != pytest.approx(want, rel=1e-6, abs=1e-6):
        # a flat NLL (weak logits, large T): the looser reference stops early; the fit must
        # then be the better stationary point (zero slope, no larger NLL)
        assert abs(_nll_slope(g, y, 1 / got)) < 1e-12 < abs(_nll_slope(g, y, 1 / want))
        nll = lambda t: float(torch.nn.functional.cross_entropy(g / t, y))  # noqa: E731
        assert nll(got) <= nll(want) + 1e-15


def test_nll_fit_equals_the_reference_lbfgs_on_the_toy_data(sharpened):
    g, y, _, _ = sharpened
    assert fit_temperature(g, y, "nll") == pytest.approx(_lbfgs_temperature(g, y), abs=1e-6)


def test_fewer_than_two_samples_refused():
    for method in ("nll", "grid"):
        with pytest.raises(ValueError, match="at least 2 samples"):
            TemperatureScaling(method).fit(torch.tensor([[2.0, 0.0, 1.0]]), torch.tensor([0]))


def test_histogram_binning_refuses_another_width():
    g = torch.randn(100, 4)
    hb = HistogramBinning().fit(g, torch.randint(0, 4, (100,)))
    for call in (hb.predict_confidence, hb.predict):
        with pytest.raises(ValueError, match="K = 5 classes but HistogramBinning was fitted on K = 4"):
            call(torch.randn(10, 5))
    assert hb.predict_confidence(torch.randn(10, 4)).shape == (10,)


def test_temperature_scale_accepts_one_element_tensors_and_says_positive():
    g = torch.randn(6, 3)
    for t in (torch.tensor(2.0), torch.tensor([2.0]), np.float64(2.0), np.array(2.0), 2):
        assert torch.allclose(temperature_scale(g, t), g / 2)
    for bad in (0.0, -1.0, torch.tensor(-2.0)):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            temperature_scale(g, bad)
    with pytest.raises(ValueError, match="single number"):
        temperature_scale(g, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="temperature"):
        temperature_scale(g, torch.tensor(True))
