"""Checked inputs of every metric: validation and the top label.

A metric receives ``probs`` ``(N, K)`` and ``labels`` ``(N,)`` and needs, besides the
checked tensors, each row's top-label confidence ``c_i = max_k p_ik`` and correctness
``pi_i = 1[argmax_k p_ik = y_i]``. ``p.max(dim=1)`` gives both in one read of the array,
and its index is the first of tied maxima, as ``argmax``'s (a tie is a hit only when the
label is the first tied class).

The verdict on the values (finite, in [0, 1], rows summing to 1, labels in range) needs
the host to read a few numbers. On CPU that is free and happens at once. On a GPU it
would stall the device, so :func:`checked` only queues the statistics and the metric
reads them together with its result in one transfer (:meth:`Checked.result`): a call
costs one host sync, and invalid input still raises the same one-line ``ValueError``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _checks
from .._checks import ArrayLike, as_tensor, check_labels, check_nk_shape, check_positive_int, probs_error
from .._checks import row_sum_tolerance

Tensor = torch.Tensor

#: Bin conventions: ``"right"`` = ``(lo, hi]`` bins, ``"left"`` = ``[lo, hi)`` bins.
CLOSED = ("right", "left")
# Most bins (times classes, for classwise ECE) a metric allocates: 2^24 float64 cells
# are 128 MiB; beyond that n_bins is refused instead of exhausting memory.
MAX_BIN_CELLS = 1 << 24


@dataclass(frozen=True)
class Checked:
    """Checked predictions and their top label.

    ``p`` (N, K) float (half precision promoted to float32), detached; ``y`` (N,) int64
    on ``p``'s device; ``conf`` and ``correct`` the top label; ``verdict`` the pending
    value checks (None once done, always on CPU).
    """

    p: Tensor
    y: Tensor
    conf: Tensor
    correct: Tensor
    verdict: tuple | None = None

    def result(self, values: Tensor) -> list[float]:
        """``values`` as Python floats, after the pending value checks (one host sync)."""
        if self.verdict is None:
            return values.double().reshape(-1).tolist()
        stats, name, tol, k = self.verdict
        numbers = torch.cat([stats, values.double().reshape(-1)]).tolist()
        _raise_if_bad(numbers[:6], name, tol, k)
        return numbers[6:]


def checked(probs: ArrayLike, labels: ArrayLike, name: str = "probs") -> Checked:
    """Validate ``probs``/``labels`` and find the top label (see the module docstring).

    Contract of :func:`calib._checks.check_probs_fast`: a real ``(N, K)`` array, N >= 1,
    K >= 2, finite, entries in [0, 1] (1e-6 slack), rows summing to 1 within
    :func:`calib._checks.row_sum_tolerance`; integer labels in ``[0, K)``.
    """
    p = as_tensor(probs, name)
    tol = row_sum_tolerance(p.dtype)
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    check_nk_shape(p, name)
    p = p.detach().contiguous()  # row reductions read rows; a column-major array is copied once
    on_host = p.device.type in _checks.HOST_DEVICES  # the CPU (tests emulate a GPU by emptying it)
    y = check_labels(labels, p.shape[0], p.shape[1], "labels", per_step=not on_host).to(p.device)
    k = p.shape[1]
    # NaN and inf show in the row sums. A matrix-vector product sums the rows: on CPU
    # sum(dim=1) reads short rows ~5x slower (K = 10).
    sums = p @ p.new_ones(k)
    stats = torch.stack([*sums.aminmax(), *p.aminmax()]).double()
    conf, pred = p.max(dim=1)  # the top label: value and (first) index in one read
    correct = pred.eq(y)
    if on_host:  # check_labels has read the labels' range
        _raise_if_bad([*stats.tolist(), 0, 0], name, tol, k)
        return Checked(p, y, conf, correct)
    # on a GPU the labels' range joins the pending verdict; meanwhile never index with a bad one
    stats = torch.cat([stats, torch.stack([*y.aminmax()]).double()])
    return Checked(p, y.clamp(0, k - 1), conf, correct, (stats, name, tol, k))


# Devices where torch.bincount is used as is; elsewhere (a GPU) it would sync: see histogram.
_BINCOUNT_DEVICES = ("cpu",)


def histogram(cells: Tensor, weights: Tensor | None, size: int) -> Tensor:
    """``torch.bincount(cells, weights, minlength=size)`` for ``cells`` known to lie in ``[0, size)``.

    The per-bin sums of every binned metric. On a GPU ``torch.bincount`` reads the cells'
    minimum and maximum on the host to size its output (a sync each); there the same sums
    are an ``index_add_`` into ``size`` zeros, which reads nothing back (its float64
    atomic additions may differ from run to run in the last bits).
    """
    if cells.device.type in _BINCOUNT_DEVICES:
        return torch.bincount(cells, weights, minlength=size)
    if weights is None:  # a count: one per cell, broadcast rather than allocated
        weights = cells.new_ones((), dtype=torch.long).expand(cells.shape)
    return weights.new_zeros(size).index_add_(0, cells, weights)


def _raise_if_bad(stats: list[float], name: str, tol: float, k: int) -> None:
    low, high, lo, hi, y_lo, y_hi = stats
    if y_lo < 0 or y_hi >= k:
        raise ValueError(f"labels must lie in [0, {k}); got values in [{int(y_lo)}, {int(y_hi)}]")
    problem = probs_error(name, (low, high), lo, hi, tol)
    if problem is not None:
        raise ValueError(problem)


def check_closed(closed: str) -> str:
    if closed not in CLOSED:
        raise ValueError(f'closed must be "right" ((lo, hi] bins) or "left" ([lo, hi) bins), got {closed!r}')
    return closed


def check_n_bins(n_bins: int, name: str = "n_bins", cells: int = 1) -> int:
    """A positive int whose bins (``cells`` per bin, e.g. K classes) fit in memory."""
    n_bins = check_positive_int(n_bins, name)
    if n_bins * cells > MAX_BIN_CELLS:
        per = f" x {cells} classes" if cells > 1 else ""
        raise ValueError(
            f"{name} = {n_bins:,} is too large: {n_bins:,}{per} bins would need "
            f"{8 * n_bins * cells / 2**30:.1f} GiB of float64 sums; use at most "
            f"{MAX_BIN_CELLS // cells:,} bins"
        )
    return n_bins


def width(probs: ArrayLike) -> int:
    """K of an (N, K) input, 1 when the shape is not (yet) known to be 2-D."""
    shape = getattr(probs, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 and shape[1] > 0 else 1
