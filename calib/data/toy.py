"""Offline toy data: a Gaussian mixture with a known posterior, and scikit-learn's digits.

The Gaussian mixture is the toy experiment of Lin et al. (2024) section 4.3: K classes, each an
isotropic Gaussian ``N(mu_k, s^2 I)`` with the means drawn uniformly in
``[low, high]^dim`` (Lin et al. (2024): K = 5, dim = 2, [-10, 10], identity covariance, 10,000 training
and 1,000 test points per class). With equal priors the true posterior is

``eta_k(x) = N(x; mu_k, s^2 I) / sum_j N(x; mu_j, s^2 I) = softmax_k(-||x - mu_k||^2 / (2 s^2))``

(Lin et al. (2024) Eq. 13), computed here through a log-sum-exp softmax so that points far from
every mean do not underflow. Because ``eta`` is known, a calibration error can be
measured against the truth instead of being estimated from labels.

``digits`` splits scikit-learn's bundled ``load_digits`` (1,797 8x8 images, 10
classes, shipped with the package: no network) into train / validation / test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .._checks import ArrayLike, as_tensor, check_positive_int, check_positive

from .splits import Splits

__all__ = [
    "ToyData",
    "gaussian_mixture",
    "true_posterior",
    "true_log_posterior",
    "gaussian_splits",
    "gaussian_overlap_splits",
    "digits",
    "digits_splits",
    "calibrated_predictions",
]

Tensor = torch.Tensor


def _check_scale(scale: float) -> float:
    return check_positive(scale, "scale")


def _check_means(means: ArrayLike) -> Tensor:
    m = as_tensor(means, "means")
    if not m.is_floating_point():
        m = m.double()
    if m.ndim != 2 or m.shape[0] < 2 or m.shape[1] < 1:
        raise ValueError(f"means must have shape (K, dim) with K >= 2, got shape {tuple(m.shape)}")
    if not bool(torch.isfinite(m).all()):
        raise ValueError("means contains NaN or inf values")
    return m.double()


def true_log_posterior(x: ArrayLike, means: ArrayLike, scale: float = 1.0) -> Tensor:
    """``log eta(x)``, float64 ``(N, K)``: ``log_softmax_k(-||x - mu_k||^2 / (2 s^2))``.

    Lin et al. (2024) Eq. (13) with equal priors and a shared covariance ``s^2 I``; the Gaussian
    normalisers cancel. Use this rather than ``log(true_posterior(...))`` when building
    logits, since ``eta`` underflows to 0 far from a class while ``log eta`` stays finite.
    """
    m = _check_means(means)
    s = _check_scale(scale)
    xt = as_tensor(x, "x")
    if not xt.is_floating_point():
        raise TypeError(f"x must be floating point, got dtype {xt.dtype}")
    if xt.ndim != 2 or xt.shape[1] != m.shape[1]:
        raise ValueError(f"x must have shape (N, {m.shape[1]}) to match means, got shape {tuple(xt.shape)}")
    if not bool(torch.isfinite(xt).all()):
        raise ValueError("x contains NaN or inf values")
    sq = torch.cdist(xt.double(), m.to(xt.device), compute_mode="donot_use_mm_for_euclid_dist").square()
    return torch.log_softmax(-sq / (2 * s * s), dim=1)


def true_posterior(x: ArrayLike, means: ArrayLike, scale: float = 1.0) -> Tensor:
    """The true class posterior ``eta(x)`` of the mixture, float64 ``(N, K)`` (Lin et al. (2024) Eq. 13)."""
    return true_log_posterior(x, means, scale).exp()


@dataclass(frozen=True, repr=False)
class ToyData:
    """Points ``x`` (float32 ``(N, dim)``), labels ``y`` (int64 ``(N,)``), the true posterior
    ``eta`` (float64 ``(N, K)``), and the mixture itself (``means`` float64 ``(K, dim)``,
    ``scale``). ``sample`` draws fresh points from the same mixture (e.g. a test set)."""

    x: Tensor
    y: Tensor
    eta: Tensor
    means: Tensor
    scale: float

    @property
    def num_classes(self) -> int:
        return int(self.means.shape[0])

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        return (
            f"ToyData(N={len(self)}, num_classes={self.num_classes}, dim={self.means.shape[1]}, "
            f"scale={self.scale:g})"
        )

    def log_eta(self) -> Tensor:
        """``log eta(x)`` (float64), finite even where ``eta`` underflows."""
        return true_log_posterior(self.x, self.means, self.scale)

    def bayes_predictions(self) -> Tensor:
        """The Bayes classifier ``argmax_k eta_k(x)``: the most accurate possible."""
        return self.eta.argmax(dim=1)

    def sample(self, n_per_class: int, seed: int = 1) -> "ToyData":
        """Fresh points from the same mixture (same means and scale), ``n_per_class`` each."""
        return gaussian_mixture(n_per_class, means=self.means, scale=self.scale, seed=seed)


def _check_range(low: float, high: float) -> tuple[float, float]:
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not low < high:
        raise ValueError(f"low must be < high, got low={low}, high={high}")
    return float(low), float(high)


def gaussian_mixture(
    n_per_class: int = 1000,
    num_classes: int = 5,
    dim: int = 2,
    low: float = -10.0,
    high: float = 10.0,
    scale: float = 1.0,
    seed: int = 0,
    *,
    means: ArrayLike | None = None,
) -> ToyData:
    """Sample the Gaussian-mixture toy data of Lin et al. (2024) section 4.3 with its true posterior.

    ``num_classes`` means drawn uniformly in ``[low, high]^dim`` (or given as ``means``,
    which then fixes ``num_classes`` and ``dim``), ``n_per_class`` points from each
    ``N(mu_k, scale^2 I)``, shuffled; everything from ``torch.Generator().manual_seed(seed)``.
    Equal class sizes make the priors equal, as the posterior formula assumes.
    """
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    s = _check_scale(scale)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    gen = torch.Generator().manual_seed(int(seed))
    if means is None:
        num_classes = check_positive_int(num_classes, "num_classes", minimum=2)
        dim = check_positive_int(dim, "dim")
        lo, hi = _check_range(low, high)
        mu = lo + (hi - lo) * torch.rand(num_classes, dim, generator=gen, dtype=torch.float64)
    else:
        mu = _check_means(means).cpu()
    k, d = mu.shape
    y = torch.arange(k).repeat_interleave(n_per_class)
    x = mu[y] + s * torch.randn(k * n_per_class, d, generator=gen, dtype=torch.float64)
    order = torch.randperm(k * n_per_class, generator=gen)
    x, y = x[order].float(), y[order]
    return ToyData(x=x, y=y, eta=true_posterior(x, mu, s), means=mu, scale=s)


def gaussian_splits(
    seed: int = 0,
    n_train_per_class: int = 10_000,
    n_val_per_class: int = 1_000,
    n_test_per_class: int = 1_000,
    num_classes: int = 5,
    dim: int = 2,
    scale: float = 1.0,
) -> "Splits":
    """The Lin et al. (2024) section 4.3 setup as :class:`calib.data.Splits` (``image=False``).

    Train / validation / test are independent draws from one mixture (seeds ``seed``,
    ``seed + 1``, ``seed + 2``); ``extra`` holds ``means`` and each split's true posterior
    (``train_eta``, ``val_eta``, ``test_eta``).
    """
    train = gaussian_mixture(n_train_per_class, num_classes, dim, scale=scale, seed=seed)
    val = train.sample(n_val_per_class, seed=seed + 1)
    test = train.sample(n_test_per_class, seed=seed + 2)
    return Splits(
        train.x, train.y, val.x, val.y, test.x, test.y,
        num_classes=train.num_classes, mean=(), std=(), name="gaussian", image=False,
        extra={"means": train.means, "train_eta": train.eta, "val_eta": val.eta, "test_eta": test.eta},
    )


def gaussian_overlap_splits(seed: int = 0) -> "Splits":
    """A small, overlapping mixture on which an over-parameterised net becomes over-confident.

    :func:`gaussian_splits` with K = 5 classes in ``dim = 20`` dimensions, means uniform in
    ``[-10, 10]^20`` and noise ``scale = 12``, so the classes overlap (even the Bayes
    classifier errs on a sizeable fraction of points), and only 108 training points per
    class (540 in all), 100 per class for validation and 200 per class for test. An MLP
    with two hidden layers of 128 units fits its training points almost perfectly (96–98 %
    training accuracy at the last epoch in chapter 8's runs) and its
    test predictions grow far more confident than they are accurate, the regime of
    Mukhoti et al. (2020, §3) and Wang et al. (2021) at CPU scale. The true posterior is
    in ``extra`` as for :func:`gaussian_splits`; the name in :func:`calib.data.load` is
    ``"gaussian_overlap"``.
    """
    return gaussian_splits(seed=seed, n_train_per_class=108, n_val_per_class=100,
                           n_test_per_class=200, num_classes=5, dim=20, scale=12.0)


def _check_fraction(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def digits(seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2) -> "Splits":
    """scikit-learn's ``load_digits`` split into train / validation / test tensors.

    Inputs are the 64 pixel intensities (0..16 in the file) scaled to [0, 1], float32
    ``(N, 64)``; labels int64 in 0..9. A seeded permutation (``torch.Generator``) puts
    ``round(test_fraction * 1797)`` images in the test split, ``round(val_fraction *
    1797)`` in validation and the rest in training (1,079 / 359 / 359 by default). No
    network: the data ship with scikit-learn.
    """
    from sklearn.datasets import load_digits

    val_fraction = _check_fraction(val_fraction, "val_fraction")
    test_fraction = _check_fraction(test_fraction, "test_fraction")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got {val_fraction + test_fraction}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    data = load_digits()
    x = torch.as_tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.as_tensor(data.target, dtype=torch.int64)
    n = y.numel()
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    n_test, n_val = round(test_fraction * n), round(val_fraction * n)
    te, va, tr = order[:n_test], order[n_test:n_test + n_val], order[n_test + n_val:]
    return Splits(
        x[tr], y[tr], x[va], y[va], x[te], y[te],
        num_classes=10, mean=(), std=(), name="digits", image=False,
    )


def digits_splits(seed: int = 0) -> "Splits":
    """:func:`digits` with the default fractions (the name :func:`calib.data.load` calls)."""
    return digits(seed=seed)


def calibrated_predictions(n: int, seed: int = 0, shift: float = 0.0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Binary predictions with a known calibration error: confidence ``z ~ U(0.5, 1)``, right with probability ``z - shift``.

    The predicted class is 0 with probability vector ``(z, 1 - z)``; the label is 0 when the
    prediction is right. So the true top-label ECE is exactly ``shift``
    (``E|P(right | z) - z| = shift``): 0 gives perfectly calibrated predictions, the
    synthetic check of binned ECE and SECE in Wang & Golebiowski (2024), §4.2 and Fig. 5.

    Returns:
        ``(probs, labels, z, correct)``: ``(n, 2)`` float64 probabilities, ``(n,)`` int64
        labels, the ``(n,)`` confidences and the ``(n,)`` 0/1 correctness as float64.

    Raises:
        ValueError: ``n`` not a positive integer, or ``shift`` outside [0, 0.5].
    """
    n = check_positive_int(n, "n")
    if not 0.0 <= shift <= 0.5:
        raise ValueError(f"shift must lie in [0, 0.5] so that z - shift is a probability, got {shift}")
    g = torch.Generator().manual_seed(seed)
    z = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
    correct = torch.rand(n, generator=g, dtype=torch.float64) < (z - shift)
    labels = torch.where(correct, 0, 1)
    return torch.stack([z, 1 - z], 1), labels, z, correct.double()
