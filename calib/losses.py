"""Every training loss of the five papers: a functional core, thin modules and a registry.

Each loss is a function ``loss(logits, targets, ..., reduction="mean")`` on raw logits
``(N, K)`` and integer targets ``(N,)``; ``reduction`` is ``"mean"``, ``"sum"`` or ``"none"``
(per-sample values of shape ``(N,)``). Modules wrap them (``FocalLoss(gamma=3.0)``) and
:func:`make` builds a module from its registry name (:func:`names`)::

    from calib import losses
    loss = losses.focal_loss(logits, y, gamma=3.0)
    criterion = losses.make("bsce_gra", gamma=4.0, norm=2.0)

Conventions, shared by every loss:

* **Numerics.** Everything is computed from ``log_softmax`` (never ``log(softmax)``), in
  float32 (float64 inputs stay float64) and with autocast switched off inside the loss, so
  ``torch.autocast`` (bf16/fp16) changes only the rounding of the incoming logits. Weights
  such as ``(1 − p_y)^γ`` are formed in log space (:mod:`calib.uncertainty`), so values and
  gradients stay finite for logits up to ±1e4, for ``p_y → 1`` and for ``0 < γ < 1``.
* **Loss weighting vs gradient weighting** (Lin et al. (2024), §4). ``focal``, ``dual_focal`` and ``bsce``
  are ``u · CE`` and differentiate through the weight ``u``. Their ``*_gra`` twins use the
  same ``u`` *detached*: the value is ``u · CE`` but the gradient is exactly ``u · ∇CE``.
  Only that gradient matters for training; Lin et al. 2024, Eq. 10 and 14 define the loss as its integral.
* **Batch-level objectives** (``mmce``, ``dece``, ``sece``) measure a whole batch. Their
  ``"mean"`` is the batch value, ``"none"`` repeats it for every sample and ``"sum"`` is N
  times it, so that ``mean == sum / N == none.mean()`` holds for every loss here. As
  penalties they are added to the mean CE: ``ce_dece`` is ``CE + λ·DECE`` and ``ce_sece`` is
  ``CE + λ·SECE`` (``mmce`` is always ``CE + λ·MMCE_w``, as Kumar et al. train it).

Sources: Lin et al. (2024) (BSCE-GRA), Wang & Golebiowski (2024) (gamma-Net + SECE), the
student report (2021) (a comparison of regularisers), Wang et al. (2021) (calibrated vs
calibratable) and Mukhoti et al. (2020) (focal loss).
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import uncertainty as _u
from ._checks import (
    ArrayLike, check_labels, check_logits, check_nonnegative, check_positive, check_positive_int, reads_values,
)
from .uncertainty import Gamma, check_gamma

__all__ = [
    # functional core
    "cross_entropy", "label_smoothing_loss", "logit_norm_loss", "entropy_reg_loss", "brier_loss",
    "mmce", "mmce_loss", "focal_loss", "flsd53_loss", "dual_focal_loss", "inverse_focal_loss",
    "bsce_loss", "focal_gra_loss", "flsd53_gra_loss", "dual_focal_gra_loss", "bsce_gra_loss", "uncertainty_gra",
    "dece", "dece_loss", "ce_dece_loss", "sece_loss", "ce_sece_loss",
    # modules
    "CELoss", "LabelSmoothingLoss", "LogitNormLoss", "EntropyRegLoss", "BrierLoss", "MMCELoss",
    "FocalLoss", "FLSD53Loss", "DualFocalLoss", "InverseFocalLoss", "BSCELoss", "FocalGRALoss",
    "FLSD53GRALoss", "DualFocalGRALoss", "BSCEGRALoss", "UncertaintyGRALoss", "DECELoss", "SECELoss",
    "CEDECELoss", "CESECELoss",
    # registry and analysis
    "make", "names", "functional", "is_batch_level", "true_logit_response",
]

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS = ("mean", "sum", "none")
WeightFn = Callable[[Tensor, Tensor], Tensor]


# =========================================================================== plumbing
def _check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return reduction


def _check_unit(value: float, name: str) -> float:
    value = check_nonnegative(value, name)
    if value > 1:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


def _prepare(logits: ArrayLike, targets: ArrayLike, reduction: str) -> tuple[Tensor, Tensor]:
    """Validated float32 (or float64) logits and int64 targets on the logits' device."""
    _check_reduction(reduction)
    g = check_logits(logits, "logits", refuse_probs=True, per_step=True)  # no GPU sync per step
    y = check_labels(targets, g.shape[0], g.shape[1], "targets", per_step=True)
    x = g if g.dtype == torch.float64 else g.float()
    return x, y.to(x.device)


def _full_precision(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run ``fn`` with autocast off, so a loss never computes in bf16/fp16 (inputs are upcast)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> Tensor:
        logits = args[0] if args else kwargs.get("logits")
        device = logits.device.type if isinstance(logits, Tensor) else "cpu"
        if device not in ("cpu", "cuda"):
            return fn(*args, **kwargs)
        with torch.autocast(device_type=device, enabled=False):
            return fn(*args, **kwargs)

    return wrapper


def _reduce(per_sample: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    return per_sample


def _reduce_batch(value: Tensor, n: int, reduction: str) -> Tensor:
    """A batch-level value: ``mean`` -> value, ``sum`` -> N·value, ``none`` -> value per sample."""
    if reduction == "mean":
        return value
    if reduction == "sum":
        return value * n
    return value.expand(n)


def _ce(lp: Tensor, y: Tensor) -> Tensor:
    """Per-sample cross-entropy ``−log p_y`` from log-probabilities."""
    return -lp.gather(1, y[:, None]).squeeze(1)


# =========================================================================== CE and regularisers
@_full_precision
def cross_entropy(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
    """Cross-entropy ``L_CE = −log p̂_y`` (the NLL; Mukhoti et al. 2020, §3, ``L_c``)."""
    x, y = _prepare(logits, targets, reduction)
    return F.cross_entropy(x, y, reduction=reduction)


@_full_precision
def label_smoothing_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    epsilon: float = 0.05,
    convention: Literal["uniform", "mukhoti"] = "uniform",
    reduction: Reduction = "mean",
) -> Tensor:
    """Cross-entropy against a smoothed label ``s``: ``L = −Σ_k s_k log p̂_k`` (Müller et al. 2019).

    Two conventions for ``s`` (DESIGN.md §5):

    * ``"uniform"`` (Wang et al. (2021), §3): ``s = (1 − ε)·y + ε/K``, so
      ``L = (1 − ε)·CE + ε·CE(u, p̂)`` with ``u`` uniform (Wang et al. (2021), Eq. 1);
    * ``"mukhoti"`` (Mukhoti et al. (2020), §4, with α = ε): ``s = (1 − ε)·y + ε·(1 − y)/(K − 1)``, all the
      smoothed mass on the *other* classes.

    ε = 0 is plain CE under both. Mukhoti et al. (2020) find ε = 0.05 best; Wang et al. (2021) sweep 0.01-0.09.
    """
    x, y = _prepare(logits, targets, reduction)
    epsilon = _check_unit(epsilon, "epsilon")
    if convention not in ("uniform", "mukhoti"):
        raise ValueError(f"convention must be 'uniform' or 'mukhoti', got {convention!r}")
    lp = F.log_softmax(x, dim=1)
    ce, total = _ce(lp, y), -lp.sum(dim=1)
    k = x.shape[1]
    smooth = total / k if convention == "uniform" else (total - ce) / (k - 1)
    return _reduce((1 - epsilon) * ce + epsilon * smooth, reduction)


@_full_precision
def logit_norm_loss(
    logits: ArrayLike, targets: ArrayLike, alpha: float = 0.01, p: float = 1.0, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE + α‖g‖_p``: CE plus an L_p penalty on the logits ``g`` (Wang et al.
    (2021), §3; the student report (2021), §2.3).

    ``p ≥ 1`` (a norm); the student report (2021) and Wang et al. (2021) use p = 1 and α in
    {0.001, ..., 0.05}. By the student report (2021)'s Theorem 1
    scaling logits up sharpens the softmax, so shrinking them tempers confidence.
    """
    x, y = _prepare(logits, targets, reduction)
    alpha = check_nonnegative(alpha, "alpha")
    p = check_nonnegative(p, "p")
    if p < 1:
        raise ValueError(f"p (the order of the logit norm) must be >= 1, got {p}")
    ce = F.cross_entropy(x, y, reduction="none")
    return _reduce(ce + alpha * torch.linalg.vector_norm(x, ord=p, dim=1), reduction)


@_full_precision
def entropy_reg_loss(
    logits: ArrayLike, targets: ArrayLike, alpha: float = 0.1, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE − α·H(p̂)`` with ``H(p̂) = −Σ_k p̂_k log p̂_k`` (the student
    report (2021), §2.3; Pereyra et al. 2017).

    Rewards high-entropy (less peaked) predictions. Not bounded below by 0: H ≤ log K.
    """
    x, y = _prepare(logits, targets, reduction)
    alpha = check_nonnegative(alpha, "alpha")
    lp = F.log_softmax(x, dim=1)
    entropy = -(lp.exp() * lp).sum(dim=1)
    return _reduce(_ce(lp, y) - alpha * entropy, reduction)


@_full_precision
def brier_loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
    """Brier score ``L = Σ_k (p̂_k − y_k)²`` (Brier 1950; a baseline of Mukhoti
    et al. (2020); Lin et al. 2024, §3).

    Computed as u_gBS with β = γ = 2 (Lin et al. (2024), Eq. 11) in log space, so ``1 − p_y`` keeps its
    digits when ``p_y → 1``.
    """
    x, y = _prepare(logits, targets, reduction)
    return _reduce(_u._log_u_gbs(F.log_softmax(x, dim=1), y, 2.0, 2.0).exp(), reduction)


# =========================================================================== MMCE
MMCE_NORMALIZATIONS = ("paper", "code")


def _check_normalization(normalization: str) -> str:
    if normalization not in MMCE_NORMALIZATIONS:
        raise ValueError(f"normalization must be 'paper' or 'code', got {normalization!r}")
    return normalization


def _mmce_value(x: Tensor, y: Tensor, width: float, weighted: bool, normalization: str = "paper") -> Tensor:
    """MMCE (or MMCE_w) of one batch as ``sqrt(vᵀ K v)`` (see :func:`mmce`)."""
    conf, pred = F.softmax(x, dim=1).max(dim=1)
    correct = (pred == y).to(x.dtype)
    power = 1 if normalization == "paper" else 2  # the authors' code divides by the counts twice
    if weighted:
        n_c, n_w = correct.sum(), (1 - correct).sum()
        if n_c == 0 or n_w == 0:  # MMCE_w needs both groups (Kumar et al. §4); 0 otherwise
            return (conf * 0).sum()
        v = correct * (1 - conf) / n_c**power - (1 - correct) * conf / n_w**power
    else:
        v = (correct - conf) / x.shape[0]
    kernel = torch.exp(-(conf[:, None] - conf[None, :]).abs() / width)
    squared = v @ (kernel @ v)
    if normalization == "code" and not weighted:  # the code's MMCE_m returns the square
        return squared
    return torch.sqrt(torch.clamp(squared, min=1e-12))


@_full_precision
def mmce(
    logits: ArrayLike,
    targets: ArrayLike,
    width: float = 0.4,
    weighted: bool = True,
    normalization: Literal["paper", "code"] = "paper",
) -> Tensor:
    """Maximum mean calibration error of a batch (Kumar et al. 2018, §3-4), a 0-dim tensor.

    With top-label confidence ``r_i = max_k p̂_ik``, correctness ``c_i = 1[argmax p̂_i = y_i]``
    and the Laplacian kernel ``k(r, r') = exp(−|r − r'| / width)`` (width 0.4):

    * ``weighted=False``: ``MMCE² = (1/m²) Σ_ij (c_i − r_i)(c_j − r_j) k(r_i, r_j)``;
    * ``weighted=True`` (MMCE_w, the version Kumar et al. train with and Mukhoti et al.
      (2020) use): with ``C`` the n correct and ``W`` the m − n wrong samples,
      ``MMCE_w² = Σ_{C,C} (1−r_i)(1−r_j)k/n² + Σ_{W,W} r_i r_j k/(m−n)²
      − 2 Σ_{C,W} (1−r_i) r_j k/(n(m−n))``; 0 when either group is empty.

    Both are ``vᵀ K v`` for a vector ``v`` (``v_i = (c_i − r_i)/m``, resp. ``(1 − r_i)/n`` on
    ``C`` and ``−r_i/(m − n)`` on ``W``): a squared RKHS norm, hence ≥ 0. Gradients flow
    through the confidences, not through the correctness indicators.

    ``normalization`` (default ``"paper"``: the definition above, the quantity Kumar et al.
    define and bound; a measure should not depend on an implementation detail):

    * ``"code"``: what the public code of Mukhoti et al. (2020), which Lin et al. (2024)
      follow, computes. It averages each kernel block (dividing by n², (m−n)², n(m−n))
      and then divides by the same counts again, so ``v_i = (1 − r_i)/n²`` on ``C`` and
      ``−r_i/(m − n)²`` on ``W``: a smaller value whose size depends on the batch's
      accuracy. The tuned λ = 2 of those papers acts on this value, so reproducing their
      MMCE rows needs ``normalization="code"`` (``calib.papers.PAPER_LOSS_KWARGS``).
      Their unweighted MMCE returns ``vᵀ K v`` without the square root; ``"code"`` does
      the same for ``weighted=False``. (The code also adds 1e-5 to the denominators and
      1e-10 under the root; those shifts are left out.)
    """
    x, y = _prepare(logits, targets, "mean")
    normalization = _check_normalization(normalization)
    return _mmce_value(x, y, check_positive(width, "width"), bool(weighted), normalization)


@_full_precision
def mmce_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    lam: float = 2.0,
    width: float = 0.4,
    weighted: bool = True,
    normalization: Literal["paper", "code"] = "paper",
    reduction: Reduction = "mean",
) -> Tensor:
    """``L = CE + λ·MMCE_w`` (Kumar et al. 2018; λ = 2 in Mukhoti et al. (2020), App. B).

    ``normalization`` selects the paper's MMCE_w (default) or the authors' code's smaller
    one, on which their λ = 2 was tuned: see :func:`mmce`. ``mean`` is mean CE + λ·MMCE_w
    of the batch; see the module notes for ``sum``/``none``.
    """
    x, y = _prepare(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    normalization = _check_normalization(normalization)
    penalty = _mmce_value(x, y, check_positive(width, "width"), bool(weighted), normalization)
    return _reduce(F.cross_entropy(x, y, reduction="none") + lam * penalty, reduction)


# =========================================================================== focal family
def _focal_core(lp: Tensor, y: Tensor, gamma: Gamma) -> Tensor:
    return _ce(lp, y) * _u._log_u_fl(lp, y, gamma).exp()


@_full_precision
def focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean") -> Tensor:
    """Focal loss ``L_f = −(1 − p̂_y)^γ log p̂_y`` (Lin et al. 2017;
    Mukhoti et al. 2020, §3; Lin et al. 2024, Eq. 4).

    ``gamma`` is a number ≥ 0 or a ``(N,)`` tensor of per-sample values, which receives
    gradient (gamma-Net, Wang & Golebiowski (2024), §4.1). γ = 0 is CE; Mukhoti et al. (2020)
    use γ = 3. By Mukhoti et al. (2020), App. A
    ``L_f ≥ KL(q‖p̂) − γ H(p̂)``: focal loss minimises CE while raising the entropy.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_focal_core(F.log_softmax(x, dim=1), y, gamma), reduction)


@_full_precision
def flsd53_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    gamma_low: float = 3.0,
    gamma_high: float = 5.0,
    threshold: float = 0.2,
    reduction: Reduction = "mean",
) -> Tensor:
    """FLSD-53: focal loss with a sample-dependent γ (Mukhoti et al. 2020, §5; Lin et al. 2024, §5.1).

    ``γ_i = gamma_high if p̂_{i,y} < threshold else gamma_low`` (5 below 0.2, else 3), chosen
    from the true-class probability; γ is a constant (no gradient flows through the choice).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma_low, gamma_high = check_nonnegative(gamma_low, "gamma_low"), check_nonnegative(gamma_high, "gamma_high")
    threshold = _check_unit(threshold, "threshold")
    lp = F.log_softmax(x, dim=1)
    p_y = lp.detach().gather(1, y[:, None]).squeeze(1).exp()
    gamma = torch.where(p_y < threshold, gamma_high, gamma_low).to(lp.dtype)
    return _reduce(_focal_core(lp, y, gamma), reduction)


@_full_precision
def dual_focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean") -> Tensor:
    """Dual focal loss ``L = −(1 − p̂_y + p̂_j)^γ log p̂_y`` (Tao et al. 2023; Lin et al. 2024, Eq. 5).

    ``p̂_j`` is the largest probability strictly below ``p̂_y`` (0 if none): see
    :func:`calib.uncertainty.u_dfl`. Gradient flows through ``p̂_y`` and ``p̂_j``. γ = 5 in Lin et al. (2024).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    lp = F.log_softmax(x, dim=1)
    return _reduce(_ce(lp, y) * _u._log_u_dfl(lp, y, gamma).exp(), reduction)


@_full_precision
def inverse_focal_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """Inverse focal loss ``L = −(1 + p̂_y)^γ̄ log p̂_y`` (Wang et al. (2021), §5.2, Eq. 4).

    The weight *grows* with confidence: easy samples count more, the opposite of focal loss.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    lp = F.log_softmax(x, dim=1)
    p_y = lp.gather(1, y[:, None]).squeeze(1).exp()
    return _reduce(_ce(lp, y) * (gamma * torch.log1p(p_y)).exp(), reduction)


@_full_precision
def bsce_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """BSCE, loss-weighted: ``L = ‖p̂ − y‖_β^γ · CE`` (Lin et al. (2024), §4.3, Uncertainty-CE with u_gBS).

    ``norm`` is the order β, ``gamma`` the exponent γ. The gradient flows through the weight.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma, norm = check_gamma(gamma, x.shape[0]), _u._check_norm(norm)
    lp = F.log_softmax(x, dim=1)
    return _reduce(_ce(lp, y) * _u._log_u_gbs(lp, y, gamma, norm).exp(), reduction)


# =========================================================================== gradient weighting (GRA)
def _gra(lp: Tensor, y: Tensor, log_weight: Callable[..., Tensor], *args: object) -> Tensor:
    """``u · CE`` with u a constant: value u·CE, gradient exactly u·∇CE (Lin et al. (2024), §4.2, Eq. 9).

    The weight is computed without autograd (it is detached anyway), which keeps the
    backward pass as cheap as CE's.
    """
    with torch.no_grad():
        weight = log_weight(lp.detach(), y, *args).exp()
    return _ce(lp, y) * weight


@_full_precision
def focal_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean") -> Tensor:
    """FL-GRA: gradient ``u_FL · ∇CE`` with ``u_FL = (1 − p̂_y)^γ`` held constant (Lin et al. (2024), §5.3)."""
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_fl, gamma), reduction)


def _log_u_flsd53(lp: Tensor, y: Tensor, gamma_low: float, gamma_high: float, threshold: float) -> Tensor:
    """``log (1 − p̂_y)^γ_i`` with FLSD-53's ``γ_i = gamma_high if p̂_y < threshold else gamma_low``."""
    p_y = lp.gather(1, y[:, None]).squeeze(1).exp()
    gamma = torch.where(p_y < threshold, gamma_high, gamma_low).to(lp.dtype)
    return _u._log_u_fl(lp, y, gamma)


@_full_precision
def flsd53_gra_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    gamma_low: float = 3.0,
    gamma_high: float = 5.0,
    threshold: float = 0.2,
    reduction: Reduction = "mean",
) -> Tensor:
    """FLSD-53-GRA: gradient ``(1 − p̂_y)^γ_i · ∇CE`` with the weight held constant.

    The FL-GRA row of Lin et al. (2024), Table 2 (§5.3): the FLSD-53 schedule of Mukhoti et
    al. (2020) (``γ_i = 5`` if ``p̂_y < 0.2`` else 3, see :func:`flsd53_loss`) with the focal
    weight ``u_i = (1 − p̂_y)^γ_i`` detached, so the value is ``u_i · CE_i`` and the
    gradient is exactly ``u_i · ∇CE_i`` (Lin et al. 2024, Eq. 9).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma_low, gamma_high = check_nonnegative(gamma_low, "gamma_low"), check_nonnegative(gamma_high, "gamma_high")
    threshold = _check_unit(threshold, "threshold")
    lp = F.log_softmax(x, dim=1)
    return _reduce(_gra(lp, y, _log_u_flsd53, gamma_low, gamma_high, threshold), reduction)


@_full_precision
def dual_focal_gra_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean"
) -> Tensor:
    """DFL-GRA: gradient ``u_DFL · ∇CE`` with ``u_DFL = (1 − p̂_y + p̂_j)^γ`` constant
    (Lin et al. (2024), §5.3)."""
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_dfl, gamma), reduction)


@_full_precision
def bsce_gra_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """BSCE-GRA: gradient ``‖p̂ − y‖_β^γ · ∇CE`` with the weight held constant
    (Lin et al. (2024), §4.3, Eq. 14)."""
    x, y = _prepare(logits, targets, reduction)
    gamma, norm = check_gamma(gamma, x.shape[0]), _u._check_norm(norm)
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_gbs, gamma, norm), reduction)


def uncertainty_gra(weight_fn: WeightFn, name: str | None = None) -> Callable[..., Tensor]:
    """Turn a sample-wise weight into a GRA loss (Lin et al. (2024), §4.2): gradient = ``u(p̂, y) · ∇CE``.

    Args:
        weight_fn: ``weight_fn(probs, targets) -> (N,)`` non-negative weights, e.g.
            ``functools.partial(calib.uncertainty.u_gbs, gamma=4.0, norm=2.0)``. It sees the
            detached softmax, so it never needs to be differentiable.
        name: a name for the returned function (``repr`` and error messages).

    Returns:
        ``loss(logits, targets, reduction="mean")``.
    """
    if not callable(weight_fn):
        raise TypeError(f"weight_fn must be callable, got {type(weight_fn).__name__}")
    label = name or getattr(weight_fn, "__name__", None) or repr(weight_fn)

    @_full_precision
    def loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
        x, y = _prepare(logits, targets, reduction)
        lp = F.log_softmax(x, dim=1)
        weight = torch.as_tensor(weight_fn(lp.detach().exp(), y))
        if tuple(weight.shape) != (x.shape[0],):
            raise ValueError(f"weight_fn {label} must return shape (N,) = ({x.shape[0]},), got {tuple(weight.shape)}")
        if reads_values(weight) and (not bool(torch.isfinite(weight).all()) or bool((weight < 0).any())):
            raise ValueError(f"weight_fn {label} must return finite weights >= 0")
        return _reduce(_ce(lp, y) * weight.detach().to(device=lp.device, dtype=lp.dtype), reduction)

    loss.__name__ = f"uncertainty_gra[{label}]"
    loss.__doc__ = f"GRA loss with weight {label}: value u·CE, gradient u·∇CE (Lin et al. (2024), §4.2)."
    return loss


# =========================================================================== DECE and SECE
def _dece_value(x: Tensor, y: Tensor, n_bins: int, bin_temperature: float, acc_temperature: float) -> Tensor:
    p = F.softmax(x, dim=1)
    conf = p.max(dim=1).values
    # soft accuracy: soft rank of the true class, 1 + Σ_{k≠y} σ((p_k − p_y)/τ_a), then relu(2 − rank)
    p_y = p.gather(1, y[:, None])
    beats = torch.sigmoid((p - p_y) / acc_temperature).scatter(1, y[:, None], 0.0)
    acc = F.relu(1 - beats.sum(dim=1))
    # soft binning: bin m has logit Σ_{j≤m} (c − e_j)/τ_b over the lower edges e_j = (j − 1)/M
    edges = torch.arange(n_bins, device=x.device, dtype=x.dtype) / n_bins
    member = F.softmax(torch.cumsum(conf[:, None] - edges, dim=1) / bin_temperature, dim=1)
    return (member * (acc - conf)[:, None]).sum(dim=0).abs().sum() / x.shape[0]


def _check_dece(n_bins: int, bin_temperature: float, acc_temperature: float) -> tuple[int, float, float]:
    return (
        check_positive_int(n_bins, "n_bins"),
        check_positive(bin_temperature, "bin_temperature"),
        check_positive(acc_temperature, "acc_temperature"),
    )


@_full_precision
def dece(
    logits: ArrayLike,
    targets: ArrayLike,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
) -> Tensor:
    """Differentiable ECE of a batch (Bohdal et al. 2021, §3.1), 0-dim.

    DECE is the meta-objective of the CE-DECE baseline of Wang & Golebiowski (2024).

    ``ECE = Σ_m |B_m|/N · |acc(B_m) − conf(B_m)|`` (15 bins) made differentiable in two places:

    * **soft bins**: sample i belongs to bin m with weight ``o_im = softmax_m(h_im / τ_b)``,
      ``h_im = Σ_{j≤m} (c_i − e_j)`` over the lower bin edges ``e_j = (j−1)/M`` (the soft
      binning of deep neural decision trees that Bohdal et al. adopt): consecutive logits
      differ by ``c_i − e_m``, so as τ_b → 0 this is the hard bin ``(e_m, e_m + 1/M]``;
    * **soft accuracy** by the all-pairs soft rank of the true class,
      ``rank_i = 1 + Σ_{k≠y} σ((p̂_ik − p̂_iy)/τ_a)`` and ``a_i = max(0, 2 − rank_i)``.

    With ``|B_m| = Σ_i o_im`` and bin means weighted by ``o_im``,
    ``DECE = (1/N) Σ_m |Σ_i o_im (a_i − c_i)|``. Defaults τ_b = 0.01 and τ_a = 0.01 are
    those of Bohdal et al.'s code (which writes τ_a as a sigmoid scale of 100; it also
    adds 1e-6 to every bin weight, which shifts the value by about 1e-6).
    """
    x, y = _prepare(logits, targets, "mean")
    return _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))


@_full_precision
def dece_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
    reduction: Reduction = "mean",
) -> Tensor:
    """DECE alone as a training objective (batch level; see :func:`dece`)."""
    x, y = _prepare(logits, targets, reduction)
    value = _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))
    return _reduce_batch(value, x.shape[0], reduction)


@_full_precision
def ce_dece_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    lam: float = 1.0,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
    reduction: Reduction = "mean",
) -> Tensor:
    """``L = CE + λ·DECE`` (DECE as a penalty; Bohdal et al. 2021, Wang & Golebiowski (2024), Table 1 "CE-DECE")."""
    x, y = _prepare(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    value = _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))
    return _reduce(F.cross_entropy(x, y, reduction="none") + lam * value, reduction)


def _sece_value(x: Tensor, y: Tensor, bandwidth: float) -> Tensor:
    from .metrics import sece_loss as metric_sece  # Wang & Golebiowski (2024), §4.2, defined with the other metrics

    return metric_sece(F.softmax(x, dim=1), y, bandwidth=bandwidth)


@_full_precision
def sece_loss(logits: ArrayLike, targets: ArrayLike, bandwidth: float = 0.01, reduction: Reduction = "mean") -> Tensor:
    """Smooth ECE of Wang & Golebiowski (2024), §4.2 (Eq. 5-7) on ``softmax(logits)``, as a training objective.

    ``SACC_i = Σ_j π_j K(z_i, z_j) / Σ_j K(z_i, z_j)`` with a Gaussian kernel of bandwidth h
    (0.01 in Wang & Golebiowski (2024), §5) and ``SECE = (1/N) Σ_i |SACC_i − z_i|``: a batch-level value computed by
    :func:`calib.metrics.sece_loss`; this wrapper feeds it logits and applies ``reduction``.
    """
    x, y = _prepare(logits, targets, reduction)
    value = _sece_value(x, y, check_positive(bandwidth, "bandwidth"))
    return _reduce_batch(value, x.shape[0], reduction)


@_full_precision
def ce_sece_loss(
    logits: ArrayLike, targets: ArrayLike, lam: float = 1.0, bandwidth: float = 0.01, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE + λ·SECE`` (SECE as a penalty; Wang & Golebiowski 2024, Table 1 "CE-SECE")."""
    x, y = _prepare(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    value = _sece_value(x, y, check_positive(bandwidth, "bandwidth"))
    return _reduce(F.cross_entropy(x, y, reduction="none") + lam * value, reduction)


# =========================================================================== modules
class _LossModule(nn.Module):
    """A loss function with its hyper-parameters fixed: ``forward(logits, targets)``."""

    _fn: Callable[..., Tensor]

    def __init__(self, reduction: Reduction = "mean", **hparams: object) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.hparams = hparams

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return type(self)._fn(logits, targets, **self.hparams, reduction=self.reduction)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in {**self.hparams, "reduction": self.reduction}.items())


class CELoss(_LossModule):
    """Module form of :func:`cross_entropy`."""

    _fn = staticmethod(cross_entropy)

    def __init__(self, reduction: Reduction = "mean") -> None:
        super().__init__(reduction)


class LabelSmoothingLoss(_LossModule):
    """Module form of :func:`label_smoothing_loss`.

    ``epsilon`` (default 0.05) with ``convention`` (default ``"uniform"``, Wang et al. (2021)), or ``alpha``:
    Mukhoti et al. (2020)'s name for the coefficient, which implies ``convention="mukhoti"``
    (Mukhoti et al. (2020), §4).
    """

    _fn = staticmethod(label_smoothing_loss)

    def __init__(
        self,
        epsilon: float | None = None,
        convention: str | None = None,
        alpha: float | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        if alpha is not None:
            if epsilon is not None:
                raise TypeError(
                    "label_smoothing takes epsilon or alpha (Mukhoti et al. (2020)'s name, mukhoti convention), "
                    "not both"
                )
            if convention not in (None, "mukhoti"):
                raise ValueError(
                    f"alpha is Mukhoti et al. (2020)'s coefficient and implies convention='mukhoti', got {convention!r}"
                )
            epsilon, convention = _check_unit(alpha, "alpha"), "mukhoti"
        epsilon = 0.05 if epsilon is None else _check_unit(epsilon, "epsilon")
        convention = "uniform" if convention is None else convention
        if convention not in ("uniform", "mukhoti"):
            raise ValueError(f"convention must be 'uniform' or 'mukhoti', got {convention!r}")
        super().__init__(reduction, epsilon=epsilon, convention=convention)


class LogitNormLoss(_LossModule):
    """Module form of :func:`logit_norm_loss`."""

    _fn = staticmethod(logit_norm_loss)

    def __init__(self, alpha: float = 0.01, p: float = 1.0, reduction: Reduction = "mean") -> None:
        if check_nonnegative(p, "p") < 1:
            raise ValueError(f"p (the order of the logit norm) must be >= 1, got {p}")
        super().__init__(reduction, alpha=check_nonnegative(alpha, "alpha"), p=float(p))


class EntropyRegLoss(_LossModule):
    """Module form of :func:`entropy_reg_loss`."""

    _fn = staticmethod(entropy_reg_loss)

    def __init__(self, alpha: float = 0.1, reduction: Reduction = "mean") -> None:
        super().__init__(reduction, alpha=check_nonnegative(alpha, "alpha"))


class BrierLoss(_LossModule):
    """Module form of :func:`brier_loss`."""

    _fn = staticmethod(brier_loss)

    def __init__(self, reduction: Reduction = "mean") -> None:
        super().__init__(reduction)


class MMCELoss(_LossModule):
    """Module form of :func:`mmce_loss` (CE + λ·MMCE_w); ``normalization="code"`` for the
    authors' code's scaling (Mukhoti et al. 2020; Lin et al. 2024), see :func:`mmce`."""

    _fn = staticmethod(mmce_loss)

    def __init__(
        self,
        lam: float = 2.0,
        width: float = 0.4,
        weighted: bool = True,
        normalization: str = "paper",
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__(
            reduction, lam=check_nonnegative(lam, "lam"), width=check_positive(width, "width"), weighted=bool(weighted),
            normalization=_check_normalization(normalization),
        )


class _GammaLoss(_LossModule):
    """A loss with one exponent ``gamma``; ``forward(..., gamma=t)`` overrides it per call."""

    def __init__(self, gamma: float, reduction: Reduction = "mean", **hparams: object) -> None:
        super().__init__(reduction, gamma=check_nonnegative(gamma, "gamma"), **hparams)

    def forward(self, logits: Tensor, targets: Tensor, gamma: Gamma | None = None) -> Tensor:
        hparams = self.hparams if gamma is None else {**self.hparams, "gamma": gamma}
        return type(self)._fn(logits, targets, **hparams, reduction=self.reduction)


class FocalLoss(_GammaLoss):
    """Module form of :func:`focal_loss`; ``forward(logits, y, gamma=t)`` takes a per-sample γ."""

    _fn = staticmethod(focal_loss)

    def __init__(self, gamma: float = 3.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction)


class FLSD53Loss(_LossModule):
    """Module form of :func:`flsd53_loss`."""

    _fn = staticmethod(flsd53_loss)

    def __init__(
        self, gamma_low: float = 3.0, gamma_high: float = 5.0, threshold: float = 0.2, reduction: Reduction = "mean"
    ) -> None:
        super().__init__(
            reduction,
            gamma_low=check_nonnegative(gamma_low, "gamma_low"),
            gamma_high=check_nonnegative(gamma_high, "gamma_high"),
            threshold=_check_unit(threshold, "threshold"),
        )


class DualFocalLoss(_GammaLoss):
    """Module form of :func:`dual_focal_loss`."""

    _fn = staticmethod(dual_focal_loss)

    def __init__(self, gamma: float = 5.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction)


class InverseFocalLoss(_GammaLoss):
    """Module form of :func:`inverse_focal_loss`."""

    _fn = staticmethod(inverse_focal_loss)

    def __init__(self, gamma: float = 2.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction)


class BSCELoss(_GammaLoss):
    """Module form of :func:`bsce_loss`."""

    _fn = staticmethod(bsce_loss)

    def __init__(self, gamma: float = 4.0, norm: float = 2.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction, norm=_u._check_norm(norm))


class FocalGRALoss(_GammaLoss):
    """Module form of :func:`focal_gra_loss`."""

    _fn = staticmethod(focal_gra_loss)

    def __init__(self, gamma: float = 3.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction)


class FLSD53GRALoss(FLSD53Loss):
    """Module form of :func:`flsd53_gra_loss` (the settings of :class:`FLSD53Loss`)."""

    _fn = staticmethod(flsd53_gra_loss)


class DualFocalGRALoss(_GammaLoss):
    """Module form of :func:`dual_focal_gra_loss`."""

    _fn = staticmethod(dual_focal_gra_loss)

    def __init__(self, gamma: float = 5.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction)


class BSCEGRALoss(_GammaLoss):
    """Module form of :func:`bsce_gra_loss`."""

    _fn = staticmethod(bsce_gra_loss)

    def __init__(self, gamma: float = 4.0, norm: float = 2.0, reduction: Reduction = "mean") -> None:
        super().__init__(gamma, reduction, norm=_u._check_norm(norm))


class UncertaintyGRALoss(nn.Module):
    """Module form of :func:`uncertainty_gra`: ``UncertaintyGRALoss(weight_fn)``."""

    def __init__(self, weight_fn: WeightFn, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.weight_fn = weight_fn
        self._loss = uncertainty_gra(weight_fn)

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return self._loss(logits, targets, reduction=self.reduction)


class DECELoss(_LossModule):
    """Module form of :func:`dece_loss`."""

    _fn = staticmethod(dece_loss)

    def __init__(
        self,
        n_bins: int = 15,
        bin_temperature: float = 0.01,
        acc_temperature: float = 0.01,
        reduction: Reduction = "mean",
    ) -> None:
        n_bins, bin_temperature, acc_temperature = _check_dece(n_bins, bin_temperature, acc_temperature)
        super().__init__(reduction, n_bins=n_bins, bin_temperature=bin_temperature, acc_temperature=acc_temperature)


class CEDECELoss(_LossModule):
    """Module form of :func:`ce_dece_loss` (CE + λ·DECE)."""

    _fn = staticmethod(ce_dece_loss)

    def __init__(
        self,
        lam: float = 1.0,
        n_bins: int = 15,
        bin_temperature: float = 0.01,
        acc_temperature: float = 0.01,
        reduction: Reduction = "mean",
    ) -> None:
        n_bins, bin_temperature, acc_temperature = _check_dece(n_bins, bin_temperature, acc_temperature)
        super().__init__(
            reduction,
            lam=check_nonnegative(lam, "lam"),
            n_bins=n_bins,
            bin_temperature=bin_temperature,
            acc_temperature=acc_temperature,
        )


class SECELoss(_LossModule):
    """Module form of :func:`sece_loss`."""

    _fn = staticmethod(sece_loss)

    def __init__(self, bandwidth: float = 0.01, reduction: Reduction = "mean") -> None:
        super().__init__(reduction, bandwidth=check_positive(bandwidth, "bandwidth"))


class CESECELoss(_LossModule):
    """Module form of :func:`ce_sece_loss` (CE + λ·SECE)."""

    _fn = staticmethod(ce_sece_loss)

    def __init__(self, lam: float = 1.0, bandwidth: float = 0.01, reduction: Reduction = "mean") -> None:
        lam, bandwidth = check_nonnegative(lam, "lam"), check_positive(bandwidth, "bandwidth")
        super().__init__(reduction, lam=lam, bandwidth=bandwidth)


# =========================================================================== registry
_REGISTRY: dict[str, tuple[Callable[..., Tensor], type[nn.Module]]] = {
    "ce": (cross_entropy, CELoss),
    "label_smoothing": (label_smoothing_loss, LabelSmoothingLoss),
    "logit_norm": (logit_norm_loss, LogitNormLoss),
    "entropy_reg": (entropy_reg_loss, EntropyRegLoss),
    "brier": (brier_loss, BrierLoss),
    "mmce": (mmce_loss, MMCELoss),
    "focal": (focal_loss, FocalLoss),
    "flsd53": (flsd53_loss, FLSD53Loss),
    "dual_focal": (dual_focal_loss, DualFocalLoss),
    "inverse_focal": (inverse_focal_loss, InverseFocalLoss),
    "bsce": (bsce_loss, BSCELoss),
    "focal_gra": (focal_gra_loss, FocalGRALoss),
    "flsd53_gra": (flsd53_gra_loss, FLSD53GRALoss),
    "dual_focal_gra": (dual_focal_gra_loss, DualFocalGRALoss),
    "bsce_gra": (bsce_gra_loss, BSCEGRALoss),
    "dece": (dece_loss, DECELoss),
    "ce_dece": (ce_dece_loss, CEDECELoss),
    "sece": (sece_loss, SECELoss),
    "ce_sece": (ce_sece_loss, CESECELoss),
}
_BATCH_LEVEL = frozenset({"mmce", "dece", "ce_dece", "sece", "ce_sece"})


def names() -> list[str]:
    """The registry names, sorted."""
    return sorted(_REGISTRY)


def _lookup(name: str) -> tuple[Callable[..., Tensor], type[nn.Module]]:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"unknown loss {name!r}; valid names: {', '.join(names())}")
    return _REGISTRY[name]


def functional(name: str) -> Callable[..., Tensor]:
    """The functional form of a registered loss (``functional("focal") is focal_loss``)."""
    return _lookup(name)[0]


def is_batch_level(name: str) -> bool:
    """True for objectives whose value depends on the whole batch (MMCE, DECE, SECE)."""
    _lookup(name)
    return name in _BATCH_LEVEL


def make(name: str, **kwargs: object) -> nn.Module:
    """Build the module of a registered loss, e.g. ``make("focal", gamma=3.0)``.

    Raises:
        ValueError: unknown ``name`` (the message lists the valid names) or a bad value.
        TypeError: a keyword the loss does not take (the message names it and lists the valid ones).
    """
    cls = _lookup(name)[1]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unexpected = sorted(set(kwargs) - set(accepted))
    if unexpected:
        raise TypeError(
            f"loss {name!r} got unexpected keyword argument(s) {', '.join(unexpected)}; "
            f"it accepts: {', '.join(accepted)}"
        )
    return cls(**kwargs)


# =========================================================================== analysis
def true_logit_response(
    loss: str | Callable[..., Tensor], p_y: ArrayLike, num_classes: int = 10, **kwargs: object
) -> tuple[Tensor, Tensor]:
    """Loss value and its gradient on the true-class logit as functions of ``p_y`` (Wang et al. (2021), Fig. 6a).

    For each ``p_y`` a ``K``-class logit vector ``g = log p`` is built with ``p_y`` on class 0
    and the rest ``1 − p_y`` spread *uniformly* over the other ``K − 1`` classes; the loss
    and ``∂L/∂g_0`` come from autograd through the functional loss, in float64.
    (With a uniform rest, dual focal's ``p_j`` is ``(1 − p_y)/(K − 1)`` when that is below
    ``p_y`` and 0 otherwise.) CE gives ``∂L/∂g_y = p_y − 1``.

    Args:
        loss: a per-sample registry name or a functional loss ``fn(logits, targets, ..., reduction)``.
        p_y: true-class probabilities in (0, 1).
        num_classes: K ≥ 2.
        **kwargs: hyper-parameters for the loss.

    Returns:
        ``(values, grads)``, two float64 tensors shaped like ``p_y`` (flattened).
    """
    if isinstance(loss, str):
        if is_batch_level(loss):
            raise ValueError(f"{loss!r} is a batch-level objective: one sample has no value of its own")
        loss = functional(loss)
    k = check_positive_int(num_classes, "num_classes", minimum=2)
    p = torch.as_tensor(p_y, dtype=torch.float64).reshape(-1)
    if p.numel() == 0 or not bool(((p > 0) & (p < 1)).all()):
        raise ValueError("p_y must be a non-empty set of probabilities strictly between 0 and 1")
    rest = ((1 - p) / (k - 1))[:, None].expand(-1, k - 1)
    logits = torch.cat([p[:, None], rest], dim=1).log().requires_grad_(True)
    targets = torch.zeros(p.numel(), dtype=torch.long)
    values = loss(logits, targets, reduction="none", **kwargs)
    (grad,) = torch.autograd.grad(values.sum(), logits)
    return values.detach(), grad[:, 0]
