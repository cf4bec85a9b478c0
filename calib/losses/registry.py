"""The registry (``make("focal", gamma=3.0)``) and the true-logit response of Wang et al. (2021), Fig. 6a."""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import Tensor, nn

from .._checks import (
    ArrayLike,
    check_positive_int,
)
from .batch import ce_dece_loss, ce_sece_loss, dece_loss, mmce_loss, sece_loss
from .focal import bsce_loss, dual_focal_loss, flsd53_loss, focal_loss, inverse_focal_loss
from .gra import bsce_gra_loss, dual_focal_gra_loss, flsd53_gra_loss, focal_gra_loss
from .modules import (
    BrierLoss,
    BSCEGRALoss,
    BSCELoss,
    CEDECELoss,
    CELoss,
    CESECELoss,
    DECELoss,
    DualFocalGRALoss,
    DualFocalLoss,
    EntropyRegLoss,
    FLSD53GRALoss,
    FLSD53Loss,
    FocalGRALoss,
    FocalLoss,
    InverseFocalLoss,
    LabelSmoothingLoss,
    LogitNormLoss,
    MMCELoss,
    SECELoss,
)
from .regularisers import brier_loss, cross_entropy, entropy_reg_loss, label_smoothing_loss, logit_norm_loss

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
