"""Input validation shared by every public function of :mod:`calib`.

Every metric, loss and calibrator funnels its inputs through these helpers so a
reader gets the same clear message (naming the argument and the problem) wherever
they pass a wrong shape, a NaN, labels out of range or probabilities in place of
logits.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from . import profile as _profile

ArrayLike = Any  # torch.Tensor | np.ndarray | sequence of numbers

# Value checks in the training step ("labels lie in [0, K)", "logits are finite") read a
# tensor's values on the host. For a CPU tensor that is free; for a CUDA tensor it blocks
# until the GPU has caught up, on every step. Checks marked ``per_step`` therefore read
# values only on these device types, or anywhere in debug mode (calib.profile.debug()).
# The loaders and the trainer validate whole splits once instead.
HOST_DEVICES: tuple[str, ...] = ("cpu",)
#: How far outside [0, 1] a probability may lie (rounding in a softmax): [-1e-6, 1 + 1e-6].
ENTRY_SLACK = 1e-6


def reads_values(t: torch.Tensor) -> bool:
    """Whether a per-step check may read ``t``'s values: on the host or in debug mode,
    never inside ``torch.compile`` (reading values would break the graph)."""
    if torch.compiler.is_compiling():
        return False
    return t.device.type in HOST_DEVICES or _profile.debug()


def as_tensor(x: ArrayLike, name: str, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Return ``x`` as a torch tensor (no copy for tensors); refuse strings and None."""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a torch.Tensor or numpy array: {exc}") from None
    if t.is_complex():
        raise TypeError(f"{name} must be real numbers, got complex dtype {t.dtype}")
    if dtype is not None:
        t = t.to(dtype)
    return t


class NonFiniteError(ValueError):
    """An input holds NaN or inf: a ``ValueError`` like any bad input, with its own type so
    the trainer tells diverged weights (NaN logits) from a wrong call without reading text."""


def check_finite(t: torch.Tensor, name: str, *, per_step: bool = False) -> None:
    """Refuse NaN/inf (:class:`NonFiniteError`); ``per_step`` checks only where :func:`reads_values` allows."""
    if per_step and not reads_values(t):
        return
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise NonFiniteError(f"{name} contains NaN or inf values")


def check_matrix(x: ArrayLike, name: str, *, per_step: bool = False) -> torch.Tensor:
    """A non-empty, finite, floating ``(N, K)`` tensor with K >= 2 (finiteness: see check_finite)."""
    t = as_tensor(x, name)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    _check_nk_shape(t, name)
    check_finite(t, name, per_step=per_step)
    return t


def _check_nk_shape(t: torch.Tensor, name: str) -> None:
    """``(N, K)`` with N >= 1 and K >= 2."""
    if t.ndim != 2:
        raise ValueError(f"{name} must have shape (N, K), got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} is empty (N = 0)")
    if t.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 classes (K >= 2), got K = {t.shape[1]}")


check_nk_shape = _check_nk_shape

#: Row-sum tolerance of probabilities in float32/float64 (and integer inputs).
ROW_SUM_ATOL = 1e-3


def row_sum_tolerance(dtype: torch.dtype, atol: float = ROW_SUM_ATOL) -> float:
    """How far a row of probabilities in ``dtype`` may sum from 1: ``atol``, or wider for half.

    Rounding each entry of a row that sums to 1 moves the sum by at most ``eps / 2``
    (relative rounding error times the entries' total), so bfloat16 (``eps = 2^-7``) and
    float16 (``eps = 2^-10``) rows get ``max(atol, 2 eps)``: 0.0156 and 0.002.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return max(atol, 2 * torch.finfo(dtype).eps)
    return atol


def probs_error(name: str, row_sums: tuple[float, float], lo: float, hi: float, atol: float) -> str | None:
    """The message for probabilities with these statistics, or None when they are fine.

    ``row_sums`` is the smallest and largest row sum (NaN/inf when any entry is),
    ``lo``/``hi`` the smallest and largest entry. The hint to pass ``softmax(logits)``
    goes only to inputs that look like logits: clearly negative entries (below -0.01),
    or entries above 1 in rows whose sums differ (probabilities scaled by a common
    factor, or one entry a little above 1, get the range and the row sums instead).
    """
    low, high = row_sums
    if not (np.isfinite(low) and np.isfinite(high)):
        return f"{name} contains NaN or inf values"
    worst = max(1 - low, high - 1)
    if lo < -ENTRY_SLACK or hi > 1 + ENTRY_SLACK:
        message = f"{name} must be probabilities in [0, 1]; got values in [{lo:.6g}, {hi:.6g}]"
        if lo < -0.01 or high - low > atol:
            return f"{message} (these look like logits: pass softmax(logits), not logits)"
        if worst > atol:
            return f"{message} and row sums in [{low:.6g}, {high:.6g}]; normalise each row, e.g. divide by its sum"
        return message
    if worst > atol:
        return (f"{name} rows must sum to 1 (largest deviation {worst:.3g}, tolerance "
                f"{atol:.3g}); normalise each row, e.g. divide by its sum")
    return None


def check_probs(probs: ArrayLike, name: str = "probs", *, atol: float = 1e-3) -> torch.Tensor:
    """Probabilities ``(N, K)``: entries in [0, 1], rows summing to 1 within ``atol``."""
    p = check_matrix(probs, name)
    if bool((p < -1e-6).any()) or bool((p > 1 + 1e-6).any()):
        raise ValueError(
            f"{name} must be probabilities in [0, 1]; got values in "
            f"[{p.min().item():.4g}, {p.max().item():.4g}] (pass softmax(logits), not logits)"
        )
    rows = p.sum(dim=1, dtype=torch.float64)
    if not bool(torch.allclose(rows, torch.ones_like(rows), atol=atol)):
        worst = (rows - 1).abs().max().item()
        raise ValueError(f"{name} rows must sum to 1 (largest deviation {worst:.3g})")
    return p


def looks_like_probs(t: torch.Tensor) -> bool:
    """True when every row is in [0, 1] and sums to 1: almost surely not logits."""
    if t.ndim != 2 or t.shape[0] == 0:
        return False
    in_range = bool((t >= 0).all()) and bool((t <= 1).all())
    return in_range and bool(torch.allclose(t.sum(1, dtype=torch.float64), torch.ones(t.shape[0], dtype=torch.float64), atol=1e-4))


def check_logits(
    logits: ArrayLike, name: str = "logits", *, refuse_probs: bool = False, per_step: bool = False
) -> torch.Tensor:
    """Logits ``(N, K)``; with ``refuse_probs`` reject rows that are already probabilities.

    ``per_step`` (the losses in a training step): the value checks (finite, not
    probabilities) run one :func:`reads_values` gate, so a CUDA step never syncs.
    """
    values = not per_step or reads_values(as_tensor(logits, name))
    g = _shape_only(logits, name)
    if not values:
        return g
    # One reduction instead of a pass per check: NaN or ±inf anywhere makes the sum
    # non-finite (then the full check decides: a finite sum that overflowed is no error),
    # and rows of probabilities sum to N, so the full probability test runs only then.
    total = float(g.detach().sum())
    if not math.isfinite(total):
        check_finite(g, name)
    maybe_probs = abs(total - g.shape[0]) <= 1e-3 * g.shape[0]
    if refuse_probs and maybe_probs and g.shape[0] > 1 and looks_like_probs(g):
        raise ValueError(
            f"{name} looks like probabilities (every row is in [0, 1] and sums to 1); "
            "pass the unnormalised logits, e.g. the model output before softmax"
        )
    return g


def _shape_only(x: ArrayLike, name: str) -> torch.Tensor:
    """:func:`check_matrix` without reading values: type and ``(N, K)`` shape only."""
    t = as_tensor(x, name)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    _check_nk_shape(t, name)
    return t


def check_labels(
    labels: ArrayLike, n: int, num_classes: int, name: str = "labels", *, per_step: bool = False
) -> torch.Tensor:
    """Integer class labels ``(N,)`` in ``[0, num_classes)`` as an int64 tensor.

    ``per_step``: the range check runs only where :func:`reads_values` allows (dtype and
    shape are always checked: they cost no synchronisation).
    """
    y = label_tensor(labels, n, name)
    if n and (not per_step or reads_values(y)):
        lo, hi = (int(v) for v in y.aminmax())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"{name} must lie in [0, {num_classes}); got values in [{lo}, {hi}]")
    return y


def label_tensor(labels: ArrayLike, n: int, name: str = "labels") -> torch.Tensor:
    """Integer labels ``(N,)`` as int64, dtype and shape checked; their values are not read."""
    y = as_tensor(labels, name)
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(f"{name} must be integer class indices, got dtype {y.dtype}")
    if y.ndim != 1:
        raise ValueError(f"{name} must have shape (N,), got shape {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} entries but the predictions have N = {n} rows")
    return y.long()


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")


# The range checks below compare instead of calling ``math.isfinite``: under torch.compile
# a hyper-parameter whose value changed between calls is traced as a symbolic float, which
# ``math.isfinite`` cannot take (a graph break) but a comparison turns into a guard, so a
# compiled loss still refuses a bad value. NaN fails every comparison; ``float()`` is
# applied to plain numbers only (on a symbolic one it would specialise the graph on it).
def check_nonnegative(value: Any, name: str) -> float:
    _number(value, name)
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value if torch.compiler.is_compiling() else float(value)


def check_probs_fast(probs: ArrayLike, name: str = "probs", *, atol: float = ROW_SUM_ATOL) -> torch.Tensor:
    """:func:`check_probs` in two passes over ``(N, K)``, for metrics on millions of rows.

    Same contract: a non-empty ``(N, K)`` real tensor (K >= 2), finite, entries in [0, 1]
    (1e-6 slack), rows summing to 1 within ``atol`` (wider for half precision, see
    :func:`row_sum_tolerance`); messages from :func:`probs_error`. NaN and inf surface
    through the row sums, so no separate ``isfinite`` pass over every entry is needed; the
    range comes from one ``aminmax``. Half precision is promoted to float32.
    """
    p = as_tensor(probs, name)
    tol = row_sum_tolerance(p.dtype, atol)
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    _check_nk_shape(p, name)
    d = p.detach()
    # Row sums: a matrix-vector product is ~2x faster than sum(dim=1) for narrow rows.
    rows = torch.mv(d, torch.ones(d.shape[1], dtype=d.dtype, device=d.device)) if d.shape[1] < 32 else d.sum(dim=1)
    low, high = (float(v) for v in torch.aminmax(rows))  # NaN or inf anywhere shows up here
    lo, hi = torch.aminmax(d) if np.isfinite(low + high) else (low, high)
    problem = probs_error(name, (low, high), float(lo), float(hi), tol)
    if problem is not None:
        raise ValueError(problem)
    return p


def check_positive(value: Any, name: str) -> float:
    """A finite number > 0 (the message says "> 0" for zero and negative values alike)."""
    _number(value, name)
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value if torch.compiler.is_compiling() else float(value)
