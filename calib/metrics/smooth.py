"""Kernel estimators of calibration: SECE (Wang & Golebiowski 2024) and smooth ECE
(Błasiok & Nakkiran 2023), and the all-pairs soft accuracy that makes SECE differentiable."""
from __future__ import annotations

import torch

from .. import _checks
from .._checks import ArrayLike, as_tensor, check_labels, check_positive
from ._inputs import checked, checked_confidence

Tensor = torch.Tensor

# Smallest SECE bandwidth: below it h^2 underflows float64 and the kernel is undefined.
_MIN_BANDWIDTH = 1e-150
# Entries of the N x N kernel matrix formed at once (bounds SECE's memory).
_BLOCK = 1 << 22


def _check_bandwidth(bandwidth: float) -> float:
    h = check_positive(bandwidth, "bandwidth")
    if h < _MIN_BANDWIDTH:
        raise ValueError(f"bandwidth must be >= {_MIN_BANDWIDTH:g} (its square underflows below that), got {bandwidth}")
    return h


# --------------------------------------------------------------------------- soft accuracy


def _soft_accuracy(p: Tensor, y: Tensor, tau: float) -> Tensor:
    """``a_i = relu(1 - sum_{k != y_i} sigmoid((p_ik - p_{i,y_i}) / tau))`` of checked input."""
    p_y = p.gather(1, y[:, None])
    beats = torch.sigmoid((p - p_y) / tau).scatter(1, y[:, None], 0.0)  # k = y_i left out
    return torch.relu(1 - beats.sum(dim=1))


def _differentiable(probs: ArrayLike, labels: ArrayLike) -> tuple[Tensor, Tensor]:
    """``(p, y)`` for a training objective: ``p`` keeps the caller's graph; values are checked
    only where that costs no GPU sync (:func:`calib._checks.reads_values`)."""
    p = as_tensor(probs, "probs")
    if p.ndim == 1 and p.is_floating_point():  # binary: the columns [1 - p, p], as checked() reads them
        p = torch.stack([1 - p, p], dim=1)
    if p.is_floating_point() and _checks.reads_values(p):
        checked(p, labels).verify()  # every value check, on the detached input
    else:
        _checks._shape_only(p, "probs")
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    y = check_labels(labels, p.shape[0], p.shape[1], "labels", per_step=True).to(p.device)
    return p, y


def soft_accuracy(probs: ArrayLike, labels: ArrayLike, tau: float = 0.01) -> Tensor:
    """All-pairs soft correctness of each prediction, differentiable in ``probs``: ``(N,)``.

    ``a_i = relu(1 - sum_{k != y_i} sigmoid((p_ik - p_{i,y_i}) / tau))``: one minus the
    soft count of classes ranked above the label (the all-pairs soft rank of Qin et al.
    2010, ``rank_i = 1 + sum_{k != y_i} sigmoid(...)``, and ``a_i = relu(2 - rank_i)``),
    as in meta-calibration's DECE (Bohdal et al. 2021) and SECE (Wang & Golebiowski
    (2024) section 4.2). As ``tau -> 0`` it tends to the hard correctness ``pi_i``
    (1/2 for a tie between the label and one other class). ``tau = 0.01`` by default: the
    temperature Wang & Golebiowski (2024, section 5) fix for the gamma-Net; they state none
    for the soft accuracy.
    """
    tau = check_positive(tau, "tau")
    return _soft_accuracy(*_differentiable(probs, labels), tau)


# --------------------------------------------------------------------------- SECE


def _sece_terms(z: Tensor, acc: Tensor, h: float) -> Tensor:
    """``|SACC_i - z_i|`` for every sample, ``SACC_i = sum_j acc_j K_ij / sum_j K_ij``,
    the Gaussian kernel matrix ``K_ij = exp(-(z_i - z_j)^2 / (2 h^2))`` a block of rows at a time."""
    if 0.5 / (h * h) > torch.finfo(z.dtype).max:  # 1/h^2 overflows float32: work in float64
        return _sece_terms(z.double(), acc.double(), h).to(z.dtype)
    rhs = torch.stack([acc, torch.ones_like(acc)], dim=1)  # numerator and denominator in one product
    out = []
    for start in range(0, z.numel(), max(1, _BLOCK // z.numel())):
        zi = z[start:start + max(1, _BLOCK // z.numel())]
        kern = torch.exp(-0.5 * ((zi[:, None] - z[None, :]) / h) ** 2)
        num, den = (kern @ rhs).unbind(dim=1)
        out.append((num / den - zi).abs())
    return torch.cat(out)


def sece_loss(probs: ArrayLike, labels: ArrayLike, bandwidth: float = 0.01, *, tau: float = 0.01) -> Tensor:
    """SECE of Wang & Golebiowski (2024) section 4.2, a differentiable 0-dim tensor (for training).

    With top-label confidence ``z_i = max_k p_ik``, the all-pairs soft accuracy ``a_j``
    (:func:`soft_accuracy`, temperature ``tau``) and the Gaussian kernel
    ``K(z, z') = exp(-(z - z')^2 / (2 h^2))`` (Eq. 6; ``h = 0.01`` in section 5)::

        SACC_i = sum_j a_j K(z_i, z_j) / sum_j K(z_i, z_j)   (Eq. 5, normalised: Eq. 12)
        SECE   = (1/N) sum_i |SACC_i - z_i|                  (Eq. 7)

    The paper uses "the all-pairs approach [Qin et al. 2010] to ensure differentiability"
    and says that "replacing binary accuracy with accuracy computed using all-pairs
    approach ... results in SECE", so gradients flow through both the confidences (in
    the kernel and in ``-z_i``) and the accuracy term ``a_j``. Reading of Eq. (5): as
    printed it has ``pi(x_i)`` inside the sum and no denominator, which is not an
    accuracy; we use the normalised form of Eq. (12) with the soft accuracy inside the
    sum. The sum runs over every ``j`` including ``i``, so the denominator is at least 1.
    ``h -> 0`` gives ``mean |a_i - z_i|``. Cost and memory ``O(N^2)``: mini-batches of up to
    a few thousand samples. Value checks run only where they cost no GPU sync.
    """
    h, tau = _check_bandwidth(bandwidth), check_positive(tau, "tau")
    p, y = _differentiable(probs, labels)
    return _sece_terms(p.max(dim=1).values, _soft_accuracy(p, y, tau), h).mean()


@torch.no_grad()
def sece(probs: ArrayLike, labels: ArrayLike, bandwidth: float = 0.01, *, tau: float = 0.01,
         validate: bool = True) -> float:
    """The SECE of Wang & Golebiowski (2024) section 4.2 as a float: :func:`sece_loss`'s
    value (all-pairs soft accuracy), computed in float64.

    This is the quantity the paper trains and reports as SECE. For an estimate of the
    top-label calibration error with 0/1 correctness use :func:`sece_hard`; the two
    differ only through predictions whose label is within a few ``tau`` of another class.
    """
    h, tau = _check_bandwidth(bandwidth), check_positive(tau, "tau")
    c = checked(probs, labels, validate=validate)
    p = c.p.double()
    return c.result(_sece_terms(c.conf.double(), _soft_accuracy(p, c.y, tau), h).mean())[0]


@torch.no_grad()
def sece_hard(probs: ArrayLike, labels: ArrayLike, bandwidth: float = 0.01, *, validate: bool = True) -> float:
    """SECE with hard 0/1 correctness ``pi_j`` in place of the soft accuracy: an evaluation metric.

    ``(1/N) sum_i |sum_j pi_j K(z_i, z_j) / sum_j K(z_i, z_j) - z_i|``: the kernel (KDE)
    estimate of the top-label ECE with binary accuracy that Wang & Golebiowski (2024)
    Eq. (9)-(12) start from (after Zhang et al. 2020), before they replace the accuracy by
    the all-pairs one. Not differentiable in the accuracy; it is *not* the paper's SECE
    (:func:`sece`). ``h -> 0`` gives ``mean |pi_i - z_i|``, ``h -> inf``
    ``mean |accuracy - z_i|``. ``O(N^2)`` time: about a second for N = 10,000 on one core.
    """
    h = _check_bandwidth(bandwidth)
    c = checked(probs, labels, validate=validate)
    return c.result(_sece_terms(c.conf.double(), c.correct.double(), h).mean())[0]


# --------------------------------------------------------------------------- smooth ECE

# Points of the grid on [0, 1] that carries the samples' mass (spacing 1e-4, a tenth of
# the smallest bandwidth searched).
_GRID = 10_001
_MIN_SIGMA = 1e-3


def _grid_mass(f: Tensor, w: Tensor) -> Tensor:
    """Mass ``w_i`` at ``f_i`` split linearly between the two neighbouring grid points."""
    x = f.double().clamp(0, 1) * (_GRID - 1)
    left = x.floor().clamp_(max=_GRID - 2)
    frac = x - left
    idx = torch.cat([left.long(), left.long() + 1])
    return w.new_zeros(_GRID).index_add_(0, idx, torch.cat([(1 - frac) * w, frac * w]))


def _smooth_ece_at(mass: Tensor, sigma: float) -> float:
    """``smECE_sigma = int |r_sigma(t)| delta_sigma(t) dt`` on the grid (Błasiok & Nakkiran 2023).

    ``mass`` ``(2, G)``: the residuals ``f_i - y_i`` and the counts on the grid. Both are
    smoothed with the reflected Gaussian kernel ``phi(t - s) + phi(t + s) + phi(2 - t - s)``
    (mirror images at 0 and 1 keep the mass inside [0, 1]); the ratio of the sums of
    ``|smoothed residual|`` and ``smoothed count`` over the grid is the integral.
    """
    g = _GRID
    inside = mass.clone()
    inside[:, [0, -1]] *= 2  # mass at 0 or 1 is its own mirror image
    ext = torch.cat([mass.flip(1)[:, :-1], inside, mass.flip(1)[:, 1:]], dim=1)  # on [-1, 2]
    offsets = torch.arange(-(g - 1), g, dtype=torch.float64) / (g - 1)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    n = ext.shape[1] + kernel.numel()  # FFT length for a linear (not circular) convolution
    full = torch.fft.irfft(torch.fft.rfft(ext, n) * torch.fft.rfft(kernel, n), n)
    smooth = full[:, 2 * (g - 1):3 * (g - 1) + 1]  # the grid points 0..1
    return float(smooth[0].abs().sum() / smooth[1].sum())


def _smooth_ece_fit(conf: Tensor, correct: Tensor, bandwidth: float | None) -> tuple[float, float]:
    """``(smECE, sigma)``: at ``bandwidth``, or at the fixed point ``smECE_sigma = sigma``."""
    mass = torch.stack([_grid_mass(conf, conf.double() - correct.double()),
                        _grid_mass(conf, torch.ones_like(conf, dtype=torch.float64))]).cpu()
    if bandwidth is not None:
        return _smooth_ece_at(mass, bandwidth), bandwidth
    hi = 1.0  # smECE_sigma falls with sigma: bisect [0, 1] for the crossing, 10 halvings
    if _smooth_ece_at(mass, hi) <= hi:
        lo = 0.0
        for _ in range(10):
            mid = (lo + hi) / 2
            if mid < _MIN_SIGMA or mid < _smooth_ece_at(mass, mid):
                lo = mid
            else:
                hi = mid
    return _smooth_ece_at(mass, hi), hi


@torch.no_grad()
def smooth_ece(probs: ArrayLike, labels: ArrayLike, bandwidth: float | None = None, *,
               validate: bool = True) -> float:
    """Smooth ECE of the top label (Błasiok & Nakkiran 2023), with its automatic bandwidth.

    With confidences ``f_i = c_i``, outcomes ``y_i = pi_i`` and a Gaussian kernel
    ``K_sigma`` reflected at 0 and 1, the kernel-smoothed residual and density are
    ``r(t) = sum_i K(t, f_i)(f_i - y_i) / sum_i K(t, f_i)`` and
    ``delta(t) = (1/N) sum_i K(t, f_i)``, and ``smECE_sigma = int_0^1 |r(t)| delta(t) dt``.
    ``smECE_sigma`` falls as ``sigma`` grows; without ``bandwidth`` the scale is its fixed
    point ``sigma* = smECE_sigma*`` (their section 4), found by bisection on [0, 1]
    (10 halvings, ``sigma >= 0.001``, as in the authors' package ``relplot``); the result
    is consistent (within constant factors of the distance to calibration). The integral
    runs on a grid of 10,001 points with the samples' mass split between neighbours;
    it agrees with the continuous formula to ~1e-4 relative. ``relplot.smECE`` uses a
    coarser grid (about 1,000 points) and leaves out the mirror image of the mass on its
    last point, so the two agree to ~0.5% unless many confidences sit within 1e-3 of 0 or 1
    (7% apart on a test case with a fifth of the confidences above 0.999).
    """
    if bandwidth is not None:
        bandwidth = check_positive(bandwidth, "bandwidth")
    c = checked(probs, labels, validate=validate)
    c.verify()
    return _smooth_ece_fit(c.conf, c.correct, bandwidth)[0]


@torch.no_grad()
def smooth_ece_bandwidth(probs: ArrayLike, labels: ArrayLike, *, validate: bool = True) -> float:
    """The automatic bandwidth ``sigma*`` of :func:`smooth_ece` (its fixed point)."""
    c = checked(probs, labels, validate=validate)
    c.verify()
    return _smooth_ece_fit(c.conf, c.correct, None)[1]


@torch.no_grad()
def smooth_ece_from_confidence(confidence: ArrayLike, correct: ArrayLike,
                               bandwidth: float | None = None, *, validate: bool = True) -> float:
    """:func:`smooth_ece` of forecasts ``f_i`` in [0, 1] with 0/1 outcomes ``y_i`` (Błasiok &
    Nakkiran 2023): the same estimator, on ``confidence`` (N,) and ``correct`` (N,).

    ``smooth_ece(p, y)`` equals it on the top label of ``p``; the probability of the
    positive class with ``y == 1`` gives the positive-class smooth ECE of a binary
    classifier (the setting of Błasiok & Nakkiran 2023, section 2). A floating ``correct``
    in [0, 1] is read as the probability of each outcome (``E[y_i]``), which gives the
    population value when the true posterior is known.
    """
    if bandwidth is not None:
        bandwidth = check_positive(bandwidth, "bandwidth")
    outcome = as_tensor(correct, "correct")
    if outcome.is_floating_point():  # probabilities of the outcomes, checked as forecasts are
        c = checked_confidence(confidence, torch.zeros(outcome.shape, dtype=torch.bool),
                               validate=validate)[0]
        eta = outcome.detach().to(c.device)
        if validate and not bool(((eta >= 0) & (eta <= 1)).all()):
            raise ValueError("correct given as probabilities must lie in [0, 1]")
        return _smooth_ece_fit(c, eta, bandwidth)[0]
    c, ok = checked_confidence(confidence, correct, validate=validate)
    return _smooth_ece_fit(c, ok, bandwidth)[0]
