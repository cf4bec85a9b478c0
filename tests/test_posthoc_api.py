"""calib.posthoc's shared interface (issue 35, item 4): NumPy in gives NumPy out, ``as_module()``
equals ``predict_proba``, ``state_dict()`` survives ``torch.save``/``torch.load(weights_only=True)``,
and an unfitted calibrator says what is missing."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from calib.posthoc import (
    CalibrationModule,
    Calibrator,
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

# (name, factory, K): every calibrator, with non-default hyper-parameters where it has them
CALIBRATORS = [
    ("temperature", lambda: TemperatureScaling(), 4),
    ("temperature-grid", lambda: TemperatureScaling("grid", grid=[0.5, 1.0, 2.0], n_bins=10), 4),
    ("vector", lambda: VectorScaling(intercept=0.01), 4),
    ("matrix", lambda: MatrixScaling(off_diagonal=0.01, intercept=0.02), 4),
    ("dirichlet", lambda: DirichletCalibration(off_diagonal=0.1, intercept=0.1), 4),
    ("isotonic", lambda: IsotonicCalibration(), 4),
    ("ets", lambda: EnsembleTemperatureScaling("mse"), 4),
    ("platt", lambda: PlattScaling(smooth_targets=False), 2),
    ("histogram", lambda: HistogramBinning(n_bins=7), 4),
]
IDS = [c[0] for c in CALIBRATORS]
SCALING = {"temperature", "temperature-grid", "vector", "matrix", "dirichlet", "platt"}


def _toy(k, n=400, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = 2.5 * torch.randn(n, k, generator=gen, dtype=torch.float64)
    bias = torch.linspace(-0.5, 0.5, k, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(g / 1.7 + bias, 1), 1, generator=gen).squeeze(1)
    return g, y


def _fitted(make, k):
    g, y = _toy(k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return make().fit(g, y)


def _output(cal, logits):
    """What the calibrator predicts: probabilities, or the confidence for histogram binning."""
    return cal.predict_confidence(logits) if isinstance(cal, HistogramBinning) else cal.predict_proba(logits)


@pytest.mark.parametrize("name, make, k", CALIBRATORS, ids=IDS)
def test_numpy_in_numpy_out_torch_in_torch_out(name, make, k):
    g, y = _toy(k, seed=1)
    cal = make().fit(g.numpy(), y.numpy())  # fitting takes NumPy too
    assert isinstance(cal, Calibrator)
    for dtype, torch_dtype in ((np.float64, torch.float64), (np.float32, torch.float32)):
        out = _output(cal, g.numpy().astype(dtype))
        assert isinstance(out, np.ndarray) and np.issubdtype(out.dtype, np.floating)
        if name != "histogram":  # histogram binning's confidence is float64 whatever comes in
            assert out.dtype == dtype
        np.testing.assert_array_equal(out, _output(cal, g.to(torch_dtype)).numpy())
    assert isinstance(_output(cal, g), torch.Tensor)
    assert isinstance(_output(cal, g.tolist()), np.ndarray)  # a list is not a tensor: NumPy out
    for method in ("transform", "predict"):
        if hasattr(cal, method):
            assert isinstance(getattr(cal, method)(g.numpy()), np.ndarray)
            assert isinstance(getattr(cal, method)(g), torch.Tensor)
            np.testing.assert_array_equal(getattr(cal, method)(g.numpy()), getattr(cal, method)(g).numpy())
    if hasattr(cal, "fit_transform"):
        assert isinstance(make().fit_transform(g.numpy(), y.numpy()), np.ndarray)


def test_temperature_scale_gives_numpy_for_numpy():
    from calib.posthoc import temperature_scale

    g = np.random.default_rng(0).normal(size=(5, 3))
    out = temperature_scale(g, 2.0)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, g / 2.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, make, k", CALIBRATORS, ids=IDS)
def test_module_equals_predict_proba(name, make, k, dtype):
    cal = _fitted(make, k)
    module = cal.as_module()
    assert isinstance(module, torch.nn.Module) and isinstance(module, CalibrationModule)
    assert module.returns == ("logits" if name in SCALING else "confidence" if name == "histogram" else "probabilities")
    assert len(dict(module.named_buffers())) > 0 and set(module.state_dict()) == set(dict(module.named_buffers()))
    g = 3 * _toy(k, n=300, seed=2)[0].to(dtype)  # beyond the validation range too
    out = module(g)
    assert out.dtype == dtype and out.device == g.device
    got = torch.softmax(out.double(), dim=1) if module.returns == "logits" else out.double()
    torch.testing.assert_close(got, torch.as_tensor(_output(cal, g)).double(), atol=1e-6, rtol=0)


def test_modules_are_copies_and_differentiable():
    g, y = _toy(4)
    cal = VectorScaling().fit(g, y)
    module = cal.as_module()
    before = module(g)
    cal.fit(3 * g, y)  # a later fit leaves the module alone
    torch.testing.assert_close(module(g), before)
    x = g.clone().requires_grad_(True)
    torch.nn.Sequential(torch.nn.Identity(), module)(x).logsumexp(1).sum().backward()  # appendable to a network
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert not any(p.requires_grad for p in module.parameters())  # fitted numbers are buffers, not parameters


@pytest.mark.parametrize("name, make, k", CALIBRATORS, ids=IDS)
def test_state_dict_round_trip_through_torch_save(name, make, k, tmp_path):
    cal = _fitted(make, k)
    path = tmp_path / f"{name}.pt"
    torch.save(cal.state_dict(), path)
    loaded = type(cal)().load_state_dict(torch.load(path, weights_only=True))  # default hyper-parameters first
    g = _toy(k, n=200, seed=5)[0]
    assert torch.equal(_output(loaded, g), _output(cal, g))
    assert loaded.state_dict()["params"] == cal.state_dict()["params"]  # hyper-parameters restored
    assert torch.equal(torch.softmax(loaded.as_module()(g), 1) if name in SCALING else loaded.as_module()(g),
                       torch.softmax(cal.as_module()(g), 1) if name in SCALING else cal.as_module()(g))
    if name == "isotonic":  # the scikit-learn maps come back from the thresholds
        q = torch.softmax(g, 1).numpy()
        for k_, (a, b) in enumerate(zip(loaded.models, cal.models)):
            np.testing.assert_array_equal(a.predict(q[:, k_]), b.predict(q[:, k_]))
    if name == "histogram":
        assert loaded.n_bins == 7 and np.array_equal(loaded.bin_counts, cal.bin_counts)


def test_state_dict_holds_plain_cpu_tensors_and_names_the_calibrator():
    g, y = _toy(4)
    sd = MatrixScaling(0.5, 0.25).fit(g, y).state_dict()
    assert sd["calibrator"] == "MatrixScaling" and sd["params"] == {"off_diagonal": 0.5, "intercept": 0.25,
                                                                    "max_iter": 1000}
    assert set(sd["state"]) == {"weights", "bias"}
    assert all(t.device.type == "cpu" and t.dtype == torch.float64 for t in sd["state"].values())


def test_load_state_dict_refuses_another_calibrator_or_a_broken_dict():
    g, y = _toy(4)
    sd = VectorScaling().fit(g, y).state_dict()
    with pytest.raises(ValueError, match="saved from VectorScaling, not MatrixScaling"):
        MatrixScaling().load_state_dict(sd)
    with pytest.raises(ValueError, match="keys"):
        VectorScaling().load_state_dict({"weights": sd["state"]["weights"]})
    with pytest.raises(ValueError, match="must hold"):
        VectorScaling().load_state_dict({**sd, "state": {"weights": sd["state"]["weights"]}})
    with pytest.raises(ValueError, match="shape"):
        VectorScaling().load_state_dict({**sd, "state": {"weights": torch.ones(4, 4), "bias": torch.zeros(4)}})
    with pytest.raises(ValueError, match="7 bin values"):
        hb = HistogramBinning(5).fit(g, y).state_dict()
        HistogramBinning().load_state_dict({**hb, "params": {"n_bins": 7}})


@pytest.mark.parametrize("name, make, k", CALIBRATORS, ids=IDS)
def test_unfitted_calibrator_names_itself_and_the_call(name, make, k):
    cal = make()
    g = _toy(k, n=10)[0]
    who = type(cal).__name__
    calls = {"as_module": lambda: cal.as_module(), "state_dict": lambda: cal.state_dict()}
    for method in ("predict_proba", "predict_confidence", "transform", "predict"):
        if hasattr(type(cal), method):
            calls[method] = (lambda m: lambda: getattr(cal, m)(g))(method)
    for method, call in calls.items():
        with pytest.raises(NotFittedError, match=rf"{who} is not fitted yet; call \.fit\(logits, labels\) "
                                                 rf"before \.{method}\(\)"):
            call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name, make, k", CALIBRATORS, ids=IDS)
def test_module_runs_on_the_device_of_its_input(name, make, k):
    cal = _fitted(make, k)
    g = _toy(k, n=100, seed=3)[0]
    want = torch.as_tensor(_output(cal, g))
    for module in (cal.as_module(), cal.as_module().cuda()):  # CPU buffers follow a CUDA input; moved ones too
        out = module(g.cuda())
        assert out.device.type == "cuda"
        got = torch.softmax(out, 1) if module.returns == "logits" else out
        torch.testing.assert_close(got.cpu(), want, atol=1e-6, rtol=0)
    assert _output(cal, g.cuda()).device.type == "cuda"
