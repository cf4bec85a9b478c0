"""Batch-level objectives: MMCE (Kumar et al. 2018), DECE (Bohdal et al. 2023) and SECE (Wang & Golebiowski 2024).

Their ``"mean"`` is the batch value, ``"none"`` repeats it per sample, ``"sum"`` is N times it."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ..metrics import soft_accuracy
from .._checks import (
    ArrayLike,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from ._core import Reduction, _reduce_batch, full_precision, prepare
from .._checks import reads_values

def _batch_rows(logits: ArrayLike, targets: ArrayLike, reduction: str) -> tuple[Tensor, Tensor]:
    """Logits ``(N, K)`` and integer labels ``(N,)`` of a batch-level objective.

    The objective is a statistic of the batch, so it does not extend to probability
    targets or to positions of a segmentation map, and a row labelled ``ignore_index``
    cannot just count 0 in it: these are refused (the last one where values are read).
    """
    rows = prepare(logits, targets, reduction, soft=False, spatial=False,
                   name="a batch-level objective (mmce, dece, sece)")
    if rows.keep is not None and reads_values(rows.keep) and not bool(rows.keep.all()):
        raise ValueError("a batch-level objective (mmce, dece, sece) takes no rows labelled "
                         "ignore_index: drop them before the call")
    return rows.x, rows.y


def _reduce_rows(per_sample: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per_sample.mean()
    return per_sample.sum() if reduction == "sum" else per_sample


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
    both = torch.ones((), dtype=torch.bool, device=x.device)
    if weighted:
        n_c, n_w = correct.sum(), (1 - correct).sum()
        both = (n_c > 0) & (n_w > 0)  # MMCE_w needs both groups (Kumar et al. §4); 0 otherwise
        v = correct * (1 - conf) / n_c.clamp_min(1) ** power - (1 - correct) * conf / n_w.clamp_min(1) ** power
    else:
        v = (correct - conf) / x.shape[0]
    kernel = torch.exp(-(conf[:, None] - conf[None, :]).abs() / width)
    squared = v @ (kernel @ v)
    if normalization == "code" and not weighted:  # the code's MMCE_m returns the square
        return squared
    # branch-free (a data-dependent `if` would break a compiled graph)
    return torch.where(both, torch.sqrt(torch.clamp(squared, min=1e-12)), (conf * 0).sum())


@full_precision
def mmce(
    logits: ArrayLike,
    targets: ArrayLike,
    width: float = 0.4,
    weighted: bool = True,
    normalization: Literal["paper", "code"] = "paper",
) -> Tensor:
    """Maximum mean calibration error of a batch (Kumar et al. 2018, §3-4), a 0-dim tensor.

    With confidence ``r_i``, correctness ``c_i`` and the kernel ``k(r, r') = exp(−|r − r'| /
    width)``, ``MMCE² = vᵀ K v``: ``v_i = (c_i − r_i)/m`` (``weighted=False``), or for MMCE_w
    (``weighted=True``, what Kumar et al. and Mukhoti et al. (2020) train with) ``(1 − r_i)/n``
    on the n correct and ``−r_i/(m − n)`` on the wrong samples, 0 if either group is empty.
    Gradients flow through the confidences only. ``normalization="code"`` computes the
    smaller value of Mukhoti et al.'s code, on which their λ = 2 was tuned (the book's loss
    field guide, "Batch-level objectives").
    """
    x, y = _batch_rows(logits, targets, "mean")
    normalization = _check_normalization(normalization)
    return _mmce_value(x, y, check_positive(width, "width"), bool(weighted), normalization)


@full_precision
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
    x, y = _batch_rows(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    normalization = _check_normalization(normalization)
    penalty = _mmce_value(x, y, check_positive(width, "width"), bool(weighted), normalization)
    return _reduce_rows(F.cross_entropy(x, y, reduction="none") + lam * penalty, reduction)


# =========================================================================== DECE and SECE
def _dece_value(x: Tensor, y: Tensor, n_bins: int, bin_temperature: float, acc_temperature: float) -> Tensor:
    p = F.softmax(x, dim=1)
    conf = p.max(dim=1).values
    acc = soft_accuracy(p, y, acc_temperature)  # all-pairs soft accuracy, shared with SECE
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


@full_precision
def dece(
    logits: ArrayLike,
    targets: ArrayLike,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
) -> Tensor:
    """Differentiable ECE of a batch (Bohdal et al. 2021, §3.1), 0-dim.

    ``DECE = (1/N) Σ_m |Σ_i o_im (a_i − c_i)|`` with soft bin membership ``o_im =
    softmax_m(Σ_{j≤m} (c_i − e_j) / τ_b)`` over the lower edges ``e_j = (j−1)/M`` and the
    soft accuracy ``a_i = max(0, 2 − rank_i)``, ``rank_i = 1 + Σ_{k≠y} σ((p̂_ik − p̂_iy)/τ_a)``;
    as τ_b, τ_a → 0 it is ECE with ``(lo, hi]`` bins. The meta-objective of the CE-DECE
    baseline of Wang & Golebiowski (2024).
    """
    x, y = _batch_rows(logits, targets, "mean")
    return _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))


@full_precision
def dece_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
    reduction: Reduction = "mean",
) -> Tensor:
    """DECE alone as a training objective (batch level; see :func:`dece`)."""
    x, y = _batch_rows(logits, targets, reduction)
    value = _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))
    return _reduce_batch(value, x.shape[0], reduction)


@full_precision
def ce_dece_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    lam: float = 1.0,
    n_bins: int = 15,
    bin_temperature: float = 0.01,
    acc_temperature: float = 0.01,
    reduction: Reduction = "mean",
) -> Tensor:
    """``L = CE + λ·DECE``: DECE (Bohdal et al. 2021) as a direct penalty, calib's own variant.

    Not Wang & Golebiowski (2024), Table 1 "CE-DECE": that row is meta-learned L2
    regularisation with DECE as the meta-objective (:mod:`calib.train.meta`, ``meta="l2_reg"``).
    """
    x, y = _batch_rows(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    value = _dece_value(x, y, *_check_dece(n_bins, bin_temperature, acc_temperature))
    return _reduce_rows(F.cross_entropy(x, y, reduction="none") + lam * value, reduction)


def _sece_value(x: Tensor, y: Tensor, bandwidth: float) -> Tensor:
    from ..metrics import sece_loss as metric_sece  # Wang & Golebiowski (2024), §4.2, defined with the other metrics

    return metric_sece(F.softmax(x, dim=1), y, bandwidth=bandwidth)


@full_precision
def sece_loss(logits: ArrayLike, targets: ArrayLike, bandwidth: float = 0.01, reduction: Reduction = "mean") -> Tensor:
    """Smooth ECE of Wang & Golebiowski (2024), §4.2 (Eq. 5-7) on ``softmax(logits)``, as a training objective.

    ``SACC_i = Σ_j a_j K(z_i, z_j) / Σ_j K(z_i, z_j)`` with the all-pairs soft accuracy ``a_j``
    (:func:`calib.metrics.soft_accuracy`, τ = 0.01), a Gaussian kernel of bandwidth h
    (0.01 in Wang & Golebiowski (2024), §5) and ``SECE = (1/N) Σ_i |SACC_i − z_i|``: a batch-level value computed by
    :func:`calib.metrics.sece_loss`; this wrapper feeds it logits and applies ``reduction``.
    """
    x, y = _batch_rows(logits, targets, reduction)
    value = _sece_value(x, y, check_positive(bandwidth, "bandwidth"))
    return _reduce_batch(value, x.shape[0], reduction)


@full_precision
def ce_sece_loss(
    logits: ArrayLike, targets: ArrayLike, lam: float = 1.0, bandwidth: float = 0.01, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE + λ·SECE``: SECE (Wang & Golebiowski 2024, §4.2) as a direct penalty, calib's own variant.

    Not Wang & Golebiowski (2024), Table 1 "CE-SECE": that row is meta-learned L2
    regularisation with SECE as the meta-objective (:mod:`calib.train.meta`, ``meta="l2_reg"``).
    """
    x, y = _batch_rows(logits, targets, reduction)
    lam = check_nonnegative(lam, "lam")
    value = _sece_value(x, y, check_positive(bandwidth, "bandwidth"))
    return _reduce_rows(F.cross_entropy(x, y, reduction="none") + lam * value, reduction)
