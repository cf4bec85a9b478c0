"""Plumbing shared by every loss: reduction, input checks, full precision under autocast."""
from __future__ import annotations

import functools
from typing import Callable, Literal

import torch
from torch import Tensor

from .._checks import (
    ArrayLike,
    check_labels,
    check_logits,
    check_nonnegative,
)

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
