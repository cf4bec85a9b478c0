"""calib.data.toy: the Gaussian mixture of 000 section 4.3 with its true posterior, and digits."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.data import (
    ToyData,
    digits,
    digits_splits,
    gaussian_mixture,
    gaussian_splits,
    true_log_posterior,
    true_posterior,
)


def test_shapes_dtypes_and_class_balance():
    d = gaussian_mixture(200, num_classes=5, dim=2, seed=0)
    assert isinstance(d, ToyData) and len(d) == 1000 and d.num_classes == 5
    assert d.x.dtype == torch.float32 and d.x.shape == (1000, 2)
    assert d.y.dtype == torch.int64 and torch.equal(torch.bincount(d.y), torch.full((5,), 200))
    assert d.eta.dtype == torch.float64 and d.eta.shape == (1000, 5)
    assert d.means.shape == (5, 2) and bool(((d.means >= -10) & (d.means <= 10)).all())
    assert not torch.equal(d.y[:200], torch.zeros(200, dtype=torch.long))  # shuffled


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 7), st.integers(1, 5), st.floats(0.3, 5.0), st.integers(0, 1000))
def test_eta_is_a_distribution_and_matches_bayes_rule(k, dim, scale, seed):
    d = gaussian_mixture(30, num_classes=k, dim=dim, scale=scale, seed=seed)
    assert bool((d.eta >= 0).all())
    torch.testing.assert_close(d.eta.sum(1), torch.ones(len(d), dtype=torch.float64))
    # Bayes' rule written out with the Gaussian densities (normalisers cancel)
    dens = torch.stack(
        [torch.exp(-((d.x.double() - m) ** 2).sum(1) / (2 * scale**2)) for m in d.means], dim=1
    )
    ok = dens.sum(1) > 1e-250  # far from every mean the direct densities underflow
    torch.testing.assert_close(d.eta[ok], dens[ok] / dens[ok].sum(1, keepdim=True), rtol=1e-9, atol=1e-12)


def test_log_posterior_finite_where_eta_underflows():
    means = torch.tensor([[-10.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    x = torch.tensor([[-12.0, 0.0]])
    log_eta = true_log_posterior(x, means, 0.5)
    assert bool(torch.isfinite(log_eta).all())
    assert float(log_eta[0, 1]) == pytest.approx(-((22**2 - 2**2) / (2 * 0.25)), rel=1e-12)
    assert float(true_posterior(x, means, 0.5)[0, 1]) == 0.0  # underflows, as promised


def test_bayes_classifier_accuracy_matches_expected_accuracy():
    """On samples, the accuracy of argmax eta is close to its expectation, the mean of max eta."""
    d = gaussian_mixture(4000, num_classes=5, scale=3.0, seed=3)
    bayes = d.bayes_predictions()
    acc = float((bayes == d.y).double().mean())
    expected = float(d.eta.max(1).values.mean())
    assert acc == pytest.approx(expected, abs=3 * math.sqrt(expected * (1 - expected) / len(d)) + 1e-3)
    assert 0.5 < expected < 0.99  # the chosen spread makes the classes overlap
    # and no classifier does better than Bayes on average: e.g. the nearest mean is the same rule
    nearest = torch.cdist(d.x.double(), d.means).argmin(1)
    assert torch.equal(nearest, bayes)


def test_labels_are_distributed_as_eta():
    """Within confidence bands of eta, the empirical frequency of y = argmax matches eta."""
    d = gaussian_mixture(5000, num_classes=3, scale=4.0, seed=1)
    top = d.eta.max(1)
    hit = (top.indices == d.y).double()
    for lo, hi in ((0.4, 0.6), (0.6, 0.8), (0.8, 0.95)):
        band = (top.values > lo) & (top.values <= hi)
        assert int(band.sum()) > 300
        assert float(hit[band].mean()) == pytest.approx(float(top.values[band].mean()), abs=0.05)


def test_sample_reuses_the_mixture_and_seeds_are_reproducible():
    train = gaussian_mixture(50, seed=4)
    test = train.sample(20, seed=9)
    assert torch.equal(test.means, train.means) and test.scale == train.scale and len(test) == 100
    assert torch.equal(gaussian_mixture(50, seed=4).x, train.x)
    assert not torch.equal(gaussian_mixture(50, seed=5).x, train.x)
    fixed = gaussian_mixture(10, means=[[0.0, 0.0], [3.0, 3.0], [6.0, 0.0]], scale=0.5, seed=0)
    assert fixed.num_classes == 3 and fixed.means.dtype == torch.float64
    torch.testing.assert_close(fixed.log_eta().exp(), fixed.eta)


def test_paper_setup_splits():
    s = gaussian_splits(seed=0, n_train_per_class=100, n_val_per_class=20, n_test_per_class=30)
    assert s.train_x.shape == (500, 2) and s.val_x.shape == (100, 2) and s.test_x.shape == (150, 2)
    assert s.num_classes == 5 and not s.image and s.name == "gaussian"
    assert s.extra["test_eta"].shape == (150, 5)
    torch.testing.assert_close(s.extra["test_eta"], true_posterior(s.test_x, s.extra["means"], 1.0))


@pytest.mark.slow
def test_digits_splits():
    s = digits(seed=0)
    sizes = (len(s.train_y), len(s.val_y), len(s.test_y))
    assert sum(sizes) == 1797 and sizes == (1079, 359, 359)
    assert s.train_x.dtype == torch.float32 and s.train_x.shape[1] == 64
    assert float(s.train_x.min()) >= 0 and float(s.train_x.max()) <= 1
    assert s.num_classes == 10 and set(s.train_y.tolist()) == set(range(10))
    everything = torch.cat([s.train_x, s.val_x, s.test_x])
    assert torch.unique(everything, dim=0).shape[0] >= 1790  # disjoint splits (a few images repeat)
    assert torch.equal(digits_splits(seed=0).test_y, s.test_y)
    assert not torch.equal(digits(seed=1).test_y, s.test_y)
    small = digits(seed=0, val_fraction=0.1, test_fraction=0.3)
    assert (len(small.val_y), len(small.test_y)) == (180, 539)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"n_per_class": 0}, ValueError, "n_per_class"),
        ({"num_classes": 1}, ValueError, "num_classes"),
        ({"dim": 0}, ValueError, "dim"),
        ({"scale": 0.0}, ValueError, "scale"),
        ({"scale": -1.0}, ValueError, "scale"),
        ({"low": 5.0, "high": 5.0}, ValueError, "low must be < high"),
        ({"low": float("nan")}, ValueError, "low"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"means": [[0.0, 0.0]]}, ValueError, "means"),
        ({"means": [[0.0, float("inf")], [1.0, 1.0]]}, ValueError, "means"),
    ],
)
def test_gaussian_mixture_bad_input(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        gaussian_mixture(**kwargs)


def test_posterior_and_digits_bad_input():
    means = np.zeros((3, 2))
    with pytest.raises(ValueError, match="x must have shape"):
        true_posterior(torch.zeros(4, 3), means)
    with pytest.raises(ValueError, match="x contains NaN"):
        true_posterior(torch.full((2, 2), float("nan")), means)
    with pytest.raises(TypeError, match="x must be floating"):
        true_posterior(torch.zeros(2, 2, dtype=torch.long), means)
    with pytest.raises(ValueError, match="val_fraction"):
        digits(val_fraction=0.0)
    with pytest.raises(ValueError, match="val_fraction \\+ test_fraction"):
        digits(val_fraction=0.6, test_fraction=0.5)


# --------------------------------------------------------------------------- calibrated_predictions
@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 1000), shift=st.floats(0.0, 0.5))
def test_calibrated_predictions_shapes_and_consistency(n, seed, shift):
    from calib.data import calibrated_predictions

    probs, labels, z, correct = calibrated_predictions(n, seed=seed, shift=shift)
    assert probs.shape == (n, 2) and labels.shape == (n,) and z.shape == (n,) and correct.shape == (n,)
    assert probs.dtype == torch.float64 and labels.dtype == torch.int64
    assert torch.allclose(probs.sum(1), torch.ones(n, dtype=torch.float64))
    assert bool(((z >= 0.5) & (z <= 1)).all()) and torch.equal(probs[:, 0], z)
    assert torch.equal(correct, (labels == probs.argmax(1)).double())  # class 0 is the prediction
    again = calibrated_predictions(n, seed=seed, shift=shift)
    assert all(torch.equal(a, b) for a, b in zip(again, (probs, labels, z, correct)))


@pytest.mark.parametrize("shift", [0.0, 0.1])
def test_calibrated_predictions_have_the_chosen_calibration_error(shift):
    from calib.data import calibrated_predictions

    _, _, z, correct = calibrated_predictions(200_000, seed=3, shift=shift)
    # accuracy - confidence within confidence bins is -shift (true ECE = shift)
    bins = torch.bucketize(z, torch.linspace(0.5, 1.0, 11)[1:-1])
    gaps = [float(correct[bins == b].mean() - z[bins == b].mean()) for b in range(10)]
    assert gaps == pytest.approx([-shift] * 10, abs=0.01)


def test_calibrated_predictions_rejects_bad_arguments():
    from calib.data import calibrated_predictions

    with pytest.raises(ValueError, match="n"):
        calibrated_predictions(0)
    with pytest.raises(ValueError, match="shift"):
        calibrated_predictions(10, shift=0.6)
    with pytest.raises(ValueError, match="shift"):
        calibrated_predictions(10, shift=-0.1)
