"""``nn.Module`` wrappers of the functional losses: hyper-parameters validated once, at construction."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .._checks import (
    check_nonnegative,
    check_positive,
)
from . import uncertainty as _u
from ._core import IGNORE_INDEX, Reduction, WeightFn, _check_reduction, _check_unit
from .batch import _check_dece, _check_normalization, ce_dece_loss, ce_sece_loss, dece_loss, mmce_loss, sece_loss
from .focal import bsce_loss, dual_focal_loss, flsd53_loss, focal_loss, inverse_focal_loss
from .gra import bsce_gra_loss, dual_focal_gra_loss, flsd53_gra_loss, focal_gra_loss, uncertainty_gra
from .regularisers import brier_loss, cross_entropy, entropy_reg_loss, label_smoothing_loss, logit_norm_loss
from .uncertainty import Gamma


# =========================================================================== modules
class _LossModule(nn.Module):
    """A loss function with its hyper-parameters fixed: ``forward(logits, targets)``."""

    _fn: Callable[..., Tensor]

    def __init__(self, reduction: Reduction = "mean", *, weight: Tensor | None = None,
                 ignore_index: int | None = None, **hparams: object) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.hparams = hparams
        # class weights follow the module to its device (a buffer, in the state_dict)
        self.register_buffer("weight", None if weight is None else torch.as_tensor(weight, dtype=torch.float32))
        self.ignore_index = ignore_index  # None: a batch-level objective, which takes neither

    def _options(self) -> dict[str, object]:
        if self.ignore_index is None:
            return {}
        return {"weight": self.weight, "ignore_index": self.ignore_index}

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return type(self)._fn(logits, targets, **self.hparams, reduction=self.reduction, **self._options())

    def extra_repr(self) -> str:
        shown = {**self.hparams, "reduction": self.reduction}
        if self.ignore_index not in (None, IGNORE_INDEX):
            shown["ignore_index"] = self.ignore_index
        return ", ".join(f"{k}={v!r}" for k, v in shown.items())


class CELoss(_LossModule):
    """Module form of :func:`cross_entropy`."""

    _fn = staticmethod(cross_entropy)

    def __init__(self, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index)


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
        *, weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX,
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
        super().__init__(reduction, epsilon=epsilon, convention=convention, weight=weight, ignore_index=ignore_index)


class LogitNormLoss(_LossModule):
    """Module form of :func:`logit_norm_loss`."""

    _fn = staticmethod(logit_norm_loss)

    def __init__(self, alpha: float = 0.01, p: float = 1.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        if check_nonnegative(p, "p") < 1:
            raise ValueError(f"p (the order of the logit norm) must be >= 1, got {p}")
        super().__init__(reduction, alpha=check_nonnegative(alpha, "alpha"), p=float(p), weight=weight, ignore_index=ignore_index)


class EntropyRegLoss(_LossModule):
    """Module form of :func:`entropy_reg_loss`."""

    _fn = staticmethod(entropy_reg_loss)

    def __init__(self, alpha: float = 0.1, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(reduction, alpha=check_nonnegative(alpha, "alpha"), weight=weight, ignore_index=ignore_index)


class BrierLoss(_LossModule):
    """Module form of :func:`brier_loss`."""

    _fn = staticmethod(brier_loss)

    def __init__(self, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index)


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
        return type(self)._fn(logits, targets, **hparams, reduction=self.reduction, **self._options())


class FocalLoss(_GammaLoss):
    """Module form of :func:`focal_loss`; ``forward(logits, y, gamma=t)`` takes a per-sample γ."""

    _fn = staticmethod(focal_loss)

    def __init__(self, gamma: float = 3.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, weight=weight, ignore_index=ignore_index)


class FLSD53Loss(_LossModule):
    """Module form of :func:`flsd53_loss`."""

    _fn = staticmethod(flsd53_loss)

    def __init__(
        self, gamma_low: float = 3.0, gamma_high: float = 5.0, threshold: float = 0.2, reduction: Reduction = "mean",
        *, weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX,
    ) -> None:
        super().__init__(
            reduction,
            gamma_low=check_nonnegative(gamma_low, "gamma_low"),
            gamma_high=check_nonnegative(gamma_high, "gamma_high"),
            threshold=_check_unit(threshold, "threshold"), weight=weight, ignore_index=ignore_index)


class DualFocalLoss(_GammaLoss):
    """Module form of :func:`dual_focal_loss`."""

    _fn = staticmethod(dual_focal_loss)

    def __init__(self, gamma: float = 5.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, weight=weight, ignore_index=ignore_index)


class InverseFocalLoss(_GammaLoss):
    """Module form of :func:`inverse_focal_loss`."""

    _fn = staticmethod(inverse_focal_loss)

    def __init__(self, gamma: float = 2.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, weight=weight, ignore_index=ignore_index)


class BSCELoss(_GammaLoss):
    """Module form of :func:`bsce_loss`."""

    _fn = staticmethod(bsce_loss)

    def __init__(self, gamma: float = 4.0, norm: float = 2.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, norm=_u._check_norm(norm), weight=weight, ignore_index=ignore_index)


class FocalGRALoss(_GammaLoss):
    """Module form of :func:`focal_gra_loss`."""

    _fn = staticmethod(focal_gra_loss)

    def __init__(self, gamma: float = 3.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, weight=weight, ignore_index=ignore_index)


class FLSD53GRALoss(FLSD53Loss):
    """Module form of :func:`flsd53_gra_loss` (the settings of :class:`FLSD53Loss`)."""

    _fn = staticmethod(flsd53_gra_loss)


class DualFocalGRALoss(_GammaLoss):
    """Module form of :func:`dual_focal_gra_loss`."""

    _fn = staticmethod(dual_focal_gra_loss)

    def __init__(self, gamma: float = 5.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, weight=weight, ignore_index=ignore_index)


class BSCEGRALoss(_GammaLoss):
    """Module form of :func:`bsce_gra_loss`."""

    _fn = staticmethod(bsce_gra_loss)

    def __init__(self, gamma: float = 4.0, norm: float = 2.0, reduction: Reduction = "mean", *,
                 weight: Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(gamma, reduction, norm=_u._check_norm(norm), weight=weight, ignore_index=ignore_index)


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
