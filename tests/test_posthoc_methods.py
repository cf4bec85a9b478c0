"""calib.posthoc beyond temperature scaling: vector/matrix/Dirichlet scaling, isotonic, ETS, Platt."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression

from calib import metrics as M
from calib.posthoc import (
    DirichletCalibration,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    NotFittedError,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)

MULTICLASS = [
    lambda: VectorScaling(),
    lambda: MatrixScaling(),
    lambda: MatrixScaling(off_diagonal=0.01, intercept=0.01),
    lambda: DirichletCalibration(),
    lambda: DirichletCalibration(off_diagonal=0.01, intercept=0.01),
    lambda: IsotonicCalibration(),
    lambda: EnsembleTemperatureScaling(),
    lambda: EnsembleTemperatureScaling("mse"),
]
MULTICLASS_IDS = ["vector", "matrix", "matrix-odir", "dirichlet", "dirichlet-odir", "isotonic", "ets", "ets-mse"]
NEW = [VectorScaling, MatrixScaling, DirichletCalibration, IsotonicCalibration, EnsembleTemperatureScaling]


def _toy(n=600, k=4, seed=0, sharp=2.5, true_t=1.7):
    """Logits and labels drawn from softmax(g / true_t) plus a class bias: a finite MLE."""
    gen = torch.Generator().manual_seed(seed)
    g = sharp * torch.randn(n, k, generator=gen, dtype=torch.float64)
    bias = torch.linspace(-0.5, 0.5, k, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(g / true_t + bias, 1), 1, generator=gen).squeeze(1)
    return g, y


def _fit(cal, g, y):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fit here must converge cleanly
        return cal.fit(g, y)


# ----------------------------------------------------------------------------- real predictions


def _halves(netcal_records, name):
    d = np.load(netcal_records / f"{name}.npz")
    p, y = torch.from_numpy(d["predictions"]).double(), torch.from_numpy(d["ground_truth"]).long()
    g = torch.log(p.clamp_min(1e-30))  # softmax(log p) = p, up to the clamp
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    half = len(y) // 2
    return g, p, y, order[:half], order[half:]


@pytest.mark.parametrize("name", ["wideresnet-16-4-cifar-10", "lenet-5-cifar-10"])
@pytest.mark.parametrize("make", MULTICLASS, ids=MULTICLASS_IDS)
def test_each_method_helps_real_networks(netcal_records, name, make):
    g, p, y, val, test = _halves(netcal_records, name)
    q = _fit(make(), g[val], y[val]).predict_proba(g[test])
    torch.testing.assert_close(q.sum(1), torch.ones(len(test), dtype=q.dtype))
    assert M.nll(q, y[test]) < M.nll(p[test], y[test])
    assert M.ece(q, y[test]) < 0.5 * M.ece(p[test], y[test])


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda: VectorScaling(), lambda: EnsembleTemperatureScaling(),
                                  lambda: IsotonicCalibration()], ids=["vector", "ets", "isotonic"])
def test_methods_help_a_100_class_network(netcal_records, make):
    # Matrix and Dirichlet scaling (10,100 parameters) overfit 5,000 validation samples here
    # (held-out NLL 11.5 unregularised, 1.7 with off_diagonal = intercept = 10, against 1.19
    # before calibration); choosing their penalty is the chapter's subject, not asserted here.
    g, p, y, val, test = _halves(netcal_records, "densenet-bc-100-cifar-100")
    q = _fit(make(), g[val], y[val]).predict_proba(g[test])
    assert M.ece(q, y[test]) < M.ece(p[test], y[test])
    if not isinstance(make(), IsotonicCalibration):  # isotonic steps can put 0 on the true class
        assert M.nll(q, y[test]) < M.nll(p[test], y[test])


def test_platt_helps_a_real_binary_task(netcal_records):
    # one class against the rest of CIFAR-10: logits (log P(not k), log P(k))
    g, p, y, val, test = _halves(netcal_records, "lenet-5-cifar-10")
    pk = p[:, 3]
    g2 = torch.stack([torch.log1p(-pk.clamp(max=1 - 1e-12)), torch.log(pk.clamp_min(1e-30))], 1)
    y2 = (y == 3).long()
    before = torch.stack([1 - pk, pk], 1)
    q = _fit(PlattScaling(), g2[val], y2[val]).predict_proba(g2[test])
    assert M.nll(q, y2[test]) < M.nll(before[test], y2[test])
    assert M.ece(q, y2[test]) < M.ece(before[test], y2[test])


# ----------------------------------------------------------------------------- identities


def test_identity_matrix_is_a_no_op_and_equal_weights_are_temperature_scaling():
    g, y = _toy()
    k = g.shape[1]
    ms = MatrixScaling()
    ms._weights, ms._bias = torch.eye(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    torch.testing.assert_close(ms.predict_proba(g), torch.softmax(g, 1))
    torch.testing.assert_close(ms.transform(g), g)
    ts = TemperatureScaling()
    ts._temperature = 1.7
    vs = VectorScaling()
    vs._weights, vs._bias = torch.full((k,), 1 / 1.7, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    torch.testing.assert_close(vs.predict_proba(g), ts.predict_proba(g))
    pl = PlattScaling()
    pl._coef = (1 / 1.7, 0.0)
    torch.testing.assert_close(pl.predict_proba(g[:, :2]), ts.predict_proba(g[:, :2]))


@pytest.mark.parametrize("reg", [0.0, 0.05])
def test_dirichlet_on_log_probs_is_matrix_scaling_on_log_probs(reg):
    g, y = _toy(k=5, seed=3)
    logp = torch.log_softmax(g, 1)
    dc = _fit(DirichletCalibration(reg, reg), logp, y)
    ms = _fit(MatrixScaling(reg, reg), logp, y)
    torch.testing.assert_close(dc.predict_proba(logp), ms.predict_proba(logp), atol=1e-7, rtol=0)
    torch.testing.assert_close(dc.bias, ms.bias, atol=1e-5, rtol=0)
    # on raw logits the two differ (Dirichlet sees log softmax(g), matrix scaling g)
    dc_raw, ms_raw = _fit(DirichletCalibration(0.05, 0.05), g, y), _fit(MatrixScaling(0.05, 0.05), g, y)
    assert (dc_raw.predict_proba(g) - ms_raw.predict_proba(g)).abs().max() > 1e-4


def test_ets_with_all_weight_on_ts_is_ts():
    g, y = _toy()
    ets = _fit(EnsembleTemperatureScaling(), g, y)
    ts = TemperatureScaling().fit(g, y)
    assert ets.temperature == ts.temperature
    ets._weights = np.array([1.0, 0.0, 0.0])
    torch.testing.assert_close(ets.predict_proba(g), ts.predict_proba(g))


def test_ets_weights_are_a_distribution_and_never_worse_than_ts_on_the_fit_set():
    g, y = _toy(true_t=3.0)  # under-confident enough that mixing pays
    ets = _fit(EnsembleTemperatureScaling(), g, y)
    w = np.array(ets.weights)
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    ts = TemperatureScaling().fit(g, y)
    assert M.nll(ets.predict_proba(g), y) <= M.nll(ts.predict_proba(g), y) + 1e-12
    assert torch.equal(ets.predict_proba(g).argmax(1), g.argmax(1))


def test_matrix_and_vector_scaling_start_from_the_identity_and_reach_the_optimum():
    # labels drawn from softmax(g / 1.7 + bias): a large sample recovers W = I / 1.7, b = bias + c
    g, y = _toy(n=20_000, k=3, seed=1)
    vs = _fit(VectorScaling(), g, y)
    torch.testing.assert_close(vs.weights, torch.full((3,), 1 / 1.7, dtype=torch.float64), atol=0.03, rtol=0)
    b = vs.bias - vs.bias.mean()
    torch.testing.assert_close(b, torch.linspace(-0.5, 0.5, 3, dtype=torch.float64), atol=0.05, rtol=0)


# ----------------------------------------------------------------------------- parity with scikit-learn


def _sklearn_lr(x, y):
    lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000)
    return lr.fit(x.numpy(), y.numpy())


@pytest.mark.parametrize("cls, features", [(MatrixScaling, lambda g: g),
                                           (DirichletCalibration, lambda g: torch.log_softmax(g, 1))],
                         ids=["matrix", "dirichlet"])
def test_unregularised_fit_is_multinomial_logistic_regression(cls, features):
    g, y = _toy(n=800, k=4, seed=5)
    g_test, _ = _toy(n=200, k=4, seed=6)
    ours = _fit(cls(), g, y).predict_proba(g_test)
    theirs = _sklearn_lr(features(g), y).predict_proba(features(g_test).numpy())
    np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-5)


class _Softmax(ClassifierMixin, BaseEstimator):
    """A fitted 'classifier' whose input is the logits: predict_proba = softmax."""

    def fit(self, x, y):
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, x):
        return torch.softmax(torch.as_tensor(x), 1).numpy()

    def predict(self, x):
        return np.argmax(x, axis=1)


class _Binary(ClassifierMixin, BaseEstimator):
    """A fitted binary 'classifier' whose decision function is the score g_1 - g_0."""

    def fit(self, x, y):
        self.classes_ = np.unique(y)
        return self

    def decision_function(self, x):
        return x[:, 1] - x[:, 0]

    def predict(self, x):
        return (x[:, 1] > x[:, 0]).astype(int)


def _frozen():
    return pytest.importorskip("sklearn.frozen", reason="FrozenEstimator needs scikit-learn >= 1.6").FrozenEstimator


def test_isotonic_is_sklearns_one_vs_rest_isotonic():
    FrozenEstimator = _frozen()
    g, y = _toy(n=800, k=4, seed=7)
    g_test, _ = _toy(n=300, k=4, seed=8, sharp=4.0)  # wider scores: clipping at the ends is used
    ours = _fit(IsotonicCalibration(), g, y).predict_proba(g_test)
    est = _Softmax().fit(g.numpy(), y.numpy())
    ref = CalibratedClassifierCV(FrozenEstimator(est), method="isotonic").fit(g.numpy(), y.numpy())
    np.testing.assert_allclose(ours.numpy(), ref.predict_proba(g_test.numpy()), atol=1e-12)


def test_platt_is_sklearns_sigmoid_calibration_and_logistic_regression():
    FrozenEstimator = _frozen()
    g, y = _toy(n=500, k=2, seed=9)
    g_test, _ = _toy(n=200, k=2, seed=10)
    est = _Binary().fit(g.numpy(), y.numpy())
    ref = CalibratedClassifierCV(FrozenEstimator(est), method="sigmoid").fit(g.numpy(), y.numpy())
    ours = _fit(PlattScaling(), g, y).predict_proba(g_test)
    np.testing.assert_allclose(ours.numpy(), ref.predict_proba(g_test.numpy()), atol=1e-6)
    s, s_test = (g[:, 1] - g[:, 0])[:, None], (g_test[:, 1] - g_test[:, 0])[:, None]
    plain = _fit(PlattScaling(smooth_targets=False), g, y).predict_proba(g_test)
    np.testing.assert_allclose(plain.numpy(), _sklearn_lr(s, y).predict_proba(s_test.numpy()), atol=1e-6)


def test_dirichlet_matches_dirichletcal():
    pytest.importorskip("dirichletcal", reason="dirichletcal needs Python >= 3.12 (see book/api/posthoc.md)")
    from dirichletcal.calib.fulldirichlet import FullDirichletCalibrator

    g, y = _toy(n=600, k=4, seed=11)
    g_test, _ = _toy(n=200, k=4, seed=12)
    for lam, mu in [(0.0, 0.0), (0.1, 0.1), (1.0, 0.01)]:
        ref = FullDirichletCalibrator(reg_lambda=lam, reg_mu=mu, reg_norm=True, ref_row=False)
        ref.fit(torch.softmax(g, 1).numpy(), y.numpy())
        ours = _fit(DirichletCalibration(lam, mu), g, y).predict_proba(g_test)
        np.testing.assert_allclose(ours.numpy(), ref.predict_proba(torch.softmax(g_test, 1).numpy()), atol=1e-6)


# ----------------------------------------------------------------------------- properties


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 5), st.integers(0, 10_000), st.sampled_from(range(len(MULTICLASS))))
def test_outputs_are_distributions(k, seed, which):
    g, y = _toy(n=120, k=k, seed=seed)
    if len(torch.unique(y)) < 2:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # small samples may be separable
        cal = MULTICLASS[which]().fit(g, y)
    q = cal.predict_proba(3 * g)  # also beyond the validation range
    assert q.shape == g.shape and bool(torch.isfinite(q).all()) and bool((q >= 0).all())
    torch.testing.assert_close(q.sum(1), torch.ones(len(q), dtype=q.dtype))


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 5), st.integers(0, 10_000), st.floats(-20, 20))
def test_shift_invariance(k, seed, c):
    g, y = _toy(n=300, k=k, seed=seed)
    row_shift = c * torch.randn(len(g), 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    # temperature scaling and Dirichlet calibration see softmax(g): per-row shifts change nothing
    ts = TemperatureScaling().fit(g, y)
    assert TemperatureScaling().fit(g + row_shift, y).temperature == pytest.approx(ts.temperature, rel=1e-9)
    torch.testing.assert_close(ts.predict_proba(g + row_shift), ts.predict_proba(g))
    dc = _fit(DirichletCalibration(0.1, 0.1), g, y)
    torch.testing.assert_close(dc.predict_proba(g + row_shift), dc.predict_proba(g))
    # vector and matrix scaling: one constant added to every logit is absorbed by the intercept
    for cls in (VectorScaling, MatrixScaling):
        a, b = _fit(cls(), g, y), _fit(cls(), g + c, y)
        torch.testing.assert_close(b.predict_proba(g + c), a.predict_proba(g), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- bad input


ALL = NEW + [PlattScaling]


@pytest.mark.parametrize(
    "logits, labels, exc, words",
    [
        (torch.full((4, 2), float("nan")), torch.tensor([0, 1, 0, 1]), ValueError, "NaN"),
        (torch.tensor([[0.0, float("inf")]] * 4), torch.tensor([0, 1, 0, 1]), ValueError, "NaN or inf"),
        (torch.randn(4), torch.zeros(4, dtype=torch.long), ValueError, "shape (N, K)"),
        (torch.randn(4, 2), torch.tensor([0, 1, 0]), ValueError, "labels has 3 entries"),
        (torch.randn(4, 2), torch.tensor([0, 1, 0, 2]), ValueError, "labels must lie"),
        (torch.randn(4, 2), torch.zeros(4), TypeError, "labels must be integer"),
        (torch.empty(0, 2), torch.empty(0, dtype=torch.long), ValueError, "empty"),
        (torch.randn(4, 2), torch.ones(4, dtype=torch.long), ValueError, "single class (1)"),
        (torch.randn(1, 2), torch.tensor([0]), ValueError, "at least 2 samples"),
        (torch.softmax(torch.randn(6, 2), 1), torch.tensor([0, 1] * 3), ValueError, "looks like probabilities"),
    ],
)
@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_bad_input(cls, logits, labels, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        cls().fit(logits, labels)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_predict_before_fit_and_with_another_width(cls):
    g = torch.randn(30, 2, dtype=torch.float64)
    with pytest.raises(NotFittedError, match=f"{cls.__name__} is not fitted yet"):
        cls().predict_proba(g)
    cal = _fit(cls(), *_toy(n=200, k=2, seed=2))
    with pytest.raises(ValueError, match=f"K = 3 classes but {cls.__name__} was fitted on K = 2"):
        cal.predict_proba(torch.randn(5, 3))
    with pytest.raises(ValueError, match="looks like probabilities"):
        cal.predict_proba(torch.softmax(g, 1))


def test_platt_needs_two_classes_and_absent_classes_warn():
    with pytest.raises(ValueError, match="PlattScaling needs K = 2 classes, got K = 3"):
        PlattScaling().fit(torch.randn(10, 3), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]))
    g, y = _toy(n=200, k=4)
    y = torch.where(y == 3, 0, y)
    with pytest.warns(RuntimeWarning, match=r"class\(es\) 3 never occur"):
        VectorScaling(max_iter=50).fit(g, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        MatrixScaling(0.1, 0.1).fit(g, y)  # a penalised intercept has a finite optimum


def test_separable_data_warn():
    g = torch.tensor([[2.0, -2.0], [-2.0, 2.0]] * 10)
    y = torch.tensor([0, 1] * 10)
    for cal in (MatrixScaling(max_iter=30), VectorScaling(max_iter=30), DirichletCalibration(max_iter=30)):
        with pytest.warns(RuntimeWarning, match="every validation prediction is correct"):
            cal.fit(g, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        MatrixScaling(0.1, 0.1).fit(g, y)  # penalised: a finite optimum


def test_separation_by_the_fitted_map_is_told_from_a_perfect_model():
    """Issue 43: a model right on 3 samples in 4 whose errors an affine map of the logits
    corrects; the warning named every prediction correct. The map separates the data."""
    a = torch.tensor([0.5, 0.6, 0.7, 1.5] * 10, dtype=torch.float64)
    g, y = torch.stack([a, torch.zeros_like(a)], dim=1), (a > 1).long()
    assert float(g.argmax(1).eq(y).double().mean()) == 0.75
    for cal in (MatrixScaling(), VectorScaling(), DirichletCalibration()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cal.fit(g, y)
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(messages) == 1, (type(cal).__name__, messages)
        assert "the fitted map classifies every validation sample correctly" in messages[0]
        assert "the model's own accuracy is 0.75" in messages[0] and "separates the validation data" in messages[0]
        assert "every validation prediction is correct" not in messages[0]
        assert torch.equal(cal.predict_proba(g).argmax(1), y)
    # the model itself right everywhere: said as such
    perfect = torch.stack([a - 1, torch.zeros_like(a)], dim=1) * torch.tensor([-1.0, 1.0], dtype=torch.float64)
    assert bool(perfect.argmax(1).eq(y).all())
    with pytest.warns(RuntimeWarning, match="every validation prediction is correct") as caught:
        MatrixScaling().fit(perfect, y)
    assert not any("fitted map" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        MatrixScaling(0.1, 0.1).fit(g, y)  # penalised: a finite optimum, no warning


def test_bad_hyper_parameters():
    with pytest.raises(ValueError, match="off_diagonal"):
        MatrixScaling(off_diagonal=-1.0)
    with pytest.raises(TypeError, match="intercept"):
        DirichletCalibration(intercept="a")
    with pytest.raises(ValueError, match="max_iter"):
        VectorScaling(max_iter=0)
    with pytest.raises(ValueError, match="loss"):
        EnsembleTemperatureScaling("ece")
    with pytest.raises(TypeError, match="smooth_targets"):
        PlattScaling(smooth_targets=1)


def test_dtype_numpy_and_repr():
    g, y = _toy(n=200, k=3)
    for cls in ALL[:-1]:
        cal = _fit(cls(), g.numpy(), y.numpy())
        assert cal.predict_proba(g.float()).dtype == torch.float32
        out = cal.predict_proba(g.numpy())  # NumPy in, NumPy out (tests/test_posthoc_api.py)
        assert isinstance(out, np.ndarray) and out.dtype == np.float64
        assert "unfitted" not in repr(cal) and "unfitted" in repr(cls())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("make", MULTICLASS, ids=MULTICLASS_IDS)
def test_cuda_matches_cpu(make):
    g, y = _toy(n=500, k=4, seed=4)
    on_cpu = _fit(make(), g, y).predict_proba(g)
    on_gpu = _fit(make(), g.cuda(), y.cuda()).predict_proba(g.cuda())
    assert on_gpu.device.type == "cuda"
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, atol=1e-6, rtol=0)


def test_histogram_binning_is_still_exported():
    assert HistogramBinning(5).n_bins == 5


# ----------------------------------------------------------------------------- the optimisers


@pytest.mark.parametrize("make", [lambda: VectorScaling(), lambda: MatrixScaling(), lambda: MatrixScaling(0.1, 0.1),
                                  lambda: DirichletCalibration(1.0, 0.01)], ids=["vector", "matrix", "matrix-odir",
                                                                                 "dirichlet-odir"])
def test_lbfgs_reaches_the_optimum_that_scipy_finds(make):
    """Another optimiser (scipy's BFGS with exact gradients, from W = 0, b = 0) on the same
    objective reaches the same calibrated probabilities."""
    from scipy.optimize import minimize

    g, y = _toy(n=500, k=4, seed=14)
    ours = _fit(make(), g, y)
    cal, k = make(), g.shape[1]
    x = cal._features(g)

    def objective(theta):
        t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        w, b = cal._unpack(t, k)
        loss = torch.nn.functional.cross_entropy(cal._map(x, w, b), y) + cal._penalty(w, b, k)
        (grad,) = torch.autograd.grad(loss, t)
        return float(loss.detach()), grad.numpy()

    n_params = k * (2 if cal._diagonal else k + 1)
    res = minimize(objective, np.zeros(n_params), jac=True, method="BFGS", options={"gtol": 1e-10, "maxiter": 10_000})
    cal._weights, cal._bias = cal._unpack(torch.tensor(res.x), k)
    torch.testing.assert_close(ours.predict_proba(g), cal.predict_proba(g), atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling, DirichletCalibration])
def test_saturated_softmax_still_fits(cls):
    """Logits so large that every softmax entry is 0 or 1 leave no curvature for L-BFGS's
    preconditioner (its Cholesky factorisation failed here): the fit runs unpreconditioned,
    warns that the set is separable and predicts probabilities, as the Newton fits did."""
    y = torch.arange(40) % 4
    g = 1000 * torch.nn.functional.one_hot(y, 4).double() + 0.01 * torch.randn(40, 4, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="every validation prediction is correct"):
        cal = cls().fit(g, y)
    q = cal.predict_proba(g)
    assert bool(torch.isfinite(q).all()) and torch.equal(q.argmax(1), y)
