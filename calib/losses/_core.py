"""Plumbing shared by every loss: targets, shapes, class weights, ignored rows, reduction.

Every per-sample loss here is "the loss of the label": a function ``hard(lp, y)`` of the
log-probabilities and the integer label, and ``each(lp, x)``, the ``(M, K)`` matrix of the
values it would take if each class were the label. :func:`per_sample_loss` turns the two
into a loss with the conventions of ``torch.nn.functional.cross_entropy``:

* ``targets``: integer labels ``(N, d1, ...)``, or probabilities ``(N, K, d1, ...)`` (mixup,
  smoothed labels), for which the loss is ``Σ_k w_k q_k ℓ_k``; a one-hot ``q`` gives the
  integer-label value;
* logits ``(N, K)`` or ``(N, K, d1, ...)`` (segmentation): every position is a row;
* ``weight`` (K,): class weights; ``ignore_index`` (default -100): rows with that label
  count 0 and leave the mean's denominator;
* ``reduction``: ``"none"`` (shape ``(N, d1, ...)``, ignored rows 0), ``"sum"``, or
  ``"mean"`` = ``Σ_i w_{y_i} ℓ_i / Σ_i w_{y_i}`` over kept rows (integer labels) and the
  plain mean over rows (probability targets), as torch does.

Input checks (finite logits, labels in range, targets on the simplex) read tensor values:
they run on CPU tensors, on a GPU only with ``CALIB_DEBUG=1`` (a host sync per step), and
never inside ``torch.compile`` (so a compiled loss has no graph break). Where they do not
run, NaN logits give a NaN loss and an out-of-range label an indexing error, as torch's
own losses do.
"""
from __future__ import annotations

import functools
from typing import Callable, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import ArrayLike, as_tensor, check_labels, check_logits, check_nonnegative, reads_values

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS = ("mean", "sum", "none")
WeightFn = Callable[[Tensor, Tensor], Tensor]
IGNORE_INDEX = -100  # torch's default

#: The paragraph every per-sample loss's docstring ends with.
CONVENTIONS = """
    Targets, shapes and checks (:mod:`calib.losses`): integer labels ``(N, d1, ...)`` or
    probabilities ``(N, K, d1, ...)``, logits ``(N, K, d1, ...)``, class ``weight``,
    ``ignore_index`` and ``reduction`` as ``torch.nn.functional.cross_entropy``. NaN logits
    raise ``ValueError`` on CPU; on a GPU (without ``CALIB_DEBUG=1``) and under
    ``torch.compile`` they are not checked and give a NaN loss.
"""


def _check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return reduction


def _check_unit(value: float, name: str) -> float:
    value = check_nonnegative(value, name)
    if value > 1:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


class Rows(NamedTuple):
    """A batch flattened to rows: logits ``x`` (M, K); integer labels ``y`` (M,) with ignored
    rows set to 0 and ``keep`` marking the others, or probability targets ``q`` (M, K);
    ``shape`` is the shape of ``reduction="none"``."""

    x: Tensor
    y: Tensor | None
    q: Tensor | None
    keep: Tensor | None
    shape: tuple[int, ...]


def _rows(t: Tensor) -> Tensor:
    """``(N, K, d1, ...)`` -> ``(N·d1·..., K)``: the class axis last, one row per position."""
    return t if t.ndim == 2 else t.movedim(1, -1).reshape(-1, t.shape[1])


def prepare(logits: ArrayLike, targets: ArrayLike, reduction: str, ignore_index: int | None = IGNORE_INDEX,
            *, soft: bool = True, spatial: bool = True, name: str = "this loss") -> Rows:
    """Validated rows of a batch (see the module notes); ``soft``/``spatial`` False refuse
    probability targets / extra dimensions with one line naming the loss."""
    _check_reduction(reduction)
    g = as_tensor(logits, "logits")
    if g.ndim > 2 and not spatial:
        raise ValueError(f"logits must have shape (N, K), got shape {tuple(g.shape)}: {name} is one value of "
                         "the whole batch, with no value per position; flatten the positions into rows "
                         "(logits (N*d1*..., K), targets (N*d1*...,)) to take it over all of them")
    if g.ndim < 2:
        want = "(N, K) or (N, K, d1, ...)" if spatial else "(N, K)"
        raise ValueError(f"logits must have shape {want}, got shape {tuple(g.shape)}")
    x = _rows(g)
    check_logits(x, "logits", refuse_probs=True, per_step=True)  # values only where cheap
    x = x if x.dtype == torch.float64 else x.float()
    t = as_tensor(targets, "targets")
    if t.is_floating_point():
        if not soft:
            raise ValueError(f"{name} takes integer class labels, not probability targets")
        if tuple(t.shape) == (g.shape[0], *g.shape[2:]):
            raise TypeError(f"targets must be integer class indices, got dtype {t.dtype} of the labels' "
                            f"shape {tuple(t.shape)} (probability targets have the logits' shape)")
        if tuple(t.shape) != tuple(g.shape):
            raise ValueError(f"probability targets must have the logits' shape {tuple(g.shape)}, "
                             f"got {tuple(t.shape)}")
        q = _rows(t).to(device=x.device, dtype=x.dtype)
        if reads_values(q) and (bool((q < 0).any()) or not torch.allclose(q.sum(1), torch.ones_like(q[:, 0]),
                                                                           atol=1e-4)):
            raise ValueError("probability targets must be >= 0 and sum to 1 over the class axis")
        return Rows(x, None, q, None, (g.shape[0], *g.shape[2:]))
    if tuple(t.shape) != (g.shape[0], *g.shape[2:]):
        raise ValueError(f"targets must be integer labels of shape {(g.shape[0], *g.shape[2:])} "
                         f"(or probabilities of shape {tuple(g.shape)}), got shape {tuple(t.shape)}")
    y = t.reshape(-1).to(x.device)
    keep = None if ignore_index is None else y != ignore_index
    if keep is not None and reads_values(keep) and bool(keep.all()):
        keep = None  # no row ignored: the mean needs no mask (a read that costs O(N), on the host only)
    if keep is not None:
        y = torch.where(keep, y, torch.zeros_like(y))
    check_labels(y, x.shape[0], x.shape[1], "targets", per_step=True)
    return Rows(x, y.long(), None, keep, (g.shape[0], *g.shape[2:]))


def _check_weight(weight: ArrayLike | None, rows: Rows) -> Tensor | None:
    return None if weight is None else _check_weight_of(weight, rows.x)


def _check_weight_of(weight: ArrayLike, x: Tensor) -> Tensor:
    """Class weights ``(K,)`` for logits ``x`` (class axis 1), on its device and dtype."""
    w = as_tensor(weight, "weight")
    if w.ndim != 1 or w.shape[0] != x.shape[1] or not w.is_floating_point():
        raise ValueError(f"weight must be a float tensor of shape (K,) = ({x.shape[1]},), "
                         f"got {w.dtype} of shape {tuple(w.shape)}")
    w = w.to(device=x.device, dtype=x.dtype)
    if reads_values(w) and (not bool(torch.isfinite(w).all()) or bool((w < 0).any())):
        raise ValueError("weight must be finite and >= 0")
    return w


def finish(rows: Rows, hard: Tensor | None, each: Tensor | None, weight: ArrayLike | None,
           reduction: str) -> Tensor:
    """Reduce per-row values: ``hard`` (M,) for integer labels, ``each`` (M, K) for
    probability targets (``Σ_k w_k q_k each_k``)."""
    w = _check_weight(weight, rows)
    if rows.q is not None:
        q = rows.q if w is None else rows.q * w
        loss = (q * each).sum(1)
        if reduction == "none":
            return loss.view(rows.shape)
        return loss.sum() if reduction == "sum" else loss.mean()
    row_w = None if w is None else w[rows.y]
    if rows.keep is not None:
        keep = rows.keep.to(hard.dtype)
        row_w = keep if row_w is None else row_w * keep
    loss = hard if row_w is None else hard * row_w
    if reduction == "none":
        return loss.view(rows.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.mean() if row_w is None else loss.sum() / row_w.sum()


def per_sample_loss(rows: Rows, hard: Callable[[Tensor, Tensor], Tensor],
                    each: Callable[[Tensor, Tensor], Tensor], weight: ArrayLike | None, reduction: str,
                    fast: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
    """The loss of a batch from ``hard(lp, y)`` -> (M,) and ``each(lp, x)`` -> (M, K).

    ``fast(x, y)`` -> (M,), where given, replaces ``hard`` for integer labels: the same values
    from the logits directly (:mod:`calib.losses._fused`, one pass over the logits)."""
    if rows.q is None and fast is not None:
        return finish(rows, fast(rows.x, rows.y), None, weight, reduction)
    lp = F.log_softmax(rows.x, dim=1)
    if rows.q is None:
        return finish(rows, hard(lp, rows.y), None, weight, reduction)
    return finish(rows, None, each(lp, rows.x), weight, reduction)


def full_precision(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run ``fn`` with autocast off, so a loss never computes in bf16/fp16 (inputs are upcast);
    a docstring ending in ``{conventions}`` gets :data:`CONVENTIONS` there."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> Tensor:
        logits = args[0] if args else kwargs.get("logits")
        device = logits.device.type if isinstance(logits, Tensor) else "cpu"
        if device not in ("cpu", "cuda"):
            return fn(*args, **kwargs)
        with torch.autocast(device_type=device, enabled=False):
            return fn(*args, **kwargs)

    if wrapper.__doc__ and "{conventions}" in wrapper.__doc__:
        wrapper.__doc__ = wrapper.__doc__.replace("{conventions}", CONVENTIONS.strip())
    return wrapper


def _reduce_batch(value: Tensor, n: int, reduction: str) -> Tensor:
    """A batch-level value: ``mean`` -> value, ``sum`` -> N·value, ``none`` -> value per sample."""
    if reduction == "mean":
        return value
    if reduction == "sum":
        return value * n
    return value.expand(n)


def _ce(lp: Tensor, y: Tensor) -> Tensor:
    """Per-sample cross-entropy ``−log p_y`` from log-probabilities (``−lp_y``, bit for bit;
    ``nll_loss`` back-propagates as cross-entropy does, faster than ``gather``)."""
    return F.nll_loss(lp, y, reduction="none")
