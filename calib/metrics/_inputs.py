"""Checked inputs of every metric: validation and the top label.

A metric receives ``probs`` ``(N, K)`` and ``labels`` ``(N,)`` and needs, besides the
checked tensors, each row's top-label confidence ``c_i = max_k p_ik`` and correctness
``pi_i = 1[argmax_k p_ik = y_i]`` (``argmax`` takes the first of tied maxima, so a tie
is a hit only when the label is the first tied class).

The verdict on the values (finite, in [0, 1], rows summing to 1, labels in range) needs
the host to read a few numbers. On CPU that is free and happens at once. On a GPU it
would stall the device, so :func:`checked` only queues the statistics and the metric
reads them together with its result in one transfer (:meth:`Checked.result`): a call
costs one host sync, and invalid input still raises the same one-line ``ValueError``.

On CPU the checks and the top label read every row three times (row sum, minimum, row
maximum) and one entry of it (the label's), the rows with a possible tie once more. A
large array is therefore walked in blocks of rows that fit in the L3 cache, each block
read from memory once and then from the cache. With the sample blocks of
:mod:`~calib.metrics.binned`, ECE at N = 10^6, K = 100 went from 68 to 55 ms on a 2-core
machine (``make bench``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import _checks
from .._checks import ArrayLike, as_tensor, check_labels, check_nk_shape, check_positive_int, probs_error
from .._checks import ENTRY_SLACK, row_sum_tolerance

Tensor = torch.Tensor

#: Bin conventions: ``"right"`` = ``(lo, hi]`` bins, ``"left"`` = ``[lo, hi)`` bins.
CLOSED = ("right", "left")
# Most bins (times classes, for classwise ECE) a metric allocates: 2^24 float64 cells
# are 128 MiB; beyond that n_bins is refused instead of exhausting memory.
MAX_BIN_CELLS = 1 << 24
# Bytes of (N, K) checked at once on CPU: 4 MiB stay in the L3 cache while the block's
# reductions read it.
_CACHE_BYTES = 4 << 20


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
    if on_host:
        stats, conf, correct = _host_pass(p, y, tol)
        _raise_if_bad([*stats, 0, 0], name, tol, k)
        return Checked(p, y, conf, correct)
    # NaN and inf show in the row sums; the labels' range is checked here too (on the host
    # check_labels has read it)
    stats = torch.cat([torch.stack([*p.sum(dim=1).aminmax(), *p.aminmax()]).double(),
                       torch.stack([*y.aminmax()]).double()])
    y = y.clamp(0, k - 1)  # out-of-range labels are refused at the sync; never index with them
    conf, pred = p.max(dim=1)  # on a GPU, max with its index (the first maximum) costs one read
    return Checked(p, y, conf, pred.eq(y), (stats, name, tol, k))


def _host_pass(p: Tensor, y: Tensor, tol: float) -> tuple[list[float], Tensor, Tensor]:
    """On CPU, block by block: the row sums' and entries' ranges, and the top label."""
    n, k = p.shape
    sums, conf = p.new_empty(n), p.new_empty(n)
    correct = torch.empty(n, dtype=torch.bool, device=p.device)
    lowest, ones = [], p.new_ones(k)
    step = max(1, _CACHE_BYTES // (k * p.element_size()))
    # the top label is found before the verdict; on bad input it is discarded unread
    for start in range(0, n, step):
        rows = slice(start, start + step)
        block = p[rows]
        # NaN and inf show in the row sums; a matrix-vector product sums short rows ~5x
        # faster than sum(dim=1) at K = 10
        torch.mv(block, ones, out=sums[rows])
        lowest.append(block.amin())
        torch.amax(block, dim=1, out=conf[rows])
        correct[rows] = _host_correct(block, y[rows], conf[rows], tol)
    stats = [*sums.aminmax(), torch.stack(lowest).min(), conf.max()]
    return [float(v) for v in stats], conf, correct


def _host_correct(p: Tensor, y: Tensor, conf: Tensor, tol: float) -> Tensor:
    """``pi_i = 1[argmax_k p_ik = y_i]`` (the first of tied maxima) given ``c_i = max_k p_ik``.

    ``argmax`` costs several reads on CPU, so it is paid only where a tie is possible:
    ``p_{i,y_i} = c_i`` says the label is *a* maximum; two maxima ``c_i`` in a row that
    sums to at most ``1 + tol``, with its other K - 2 entries at least ``-ENTRY_SLACK``,
    need ``c_i <= (1 + tol + (K - 2) ENTRY_SLACK) / 2``; and only rows where another
    class reaches ``c_i`` too (the label hidden) go to ``argmax``.
    """
    k = p.shape[1]
    correct = p.gather(1, y[:, None]).squeeze(1).eq(conf)
    cand = (correct & conf.le(0.5 * (1 + tol + (k - 2) * ENTRY_SLACK))).nonzero().squeeze(1)
    if not cand.numel():
        return correct
    y_cand = y.index_select(0, cand)
    rest = p.index_select(0, cand).scatter_(1, y_cand[:, None], -math.inf)  # the label hidden
    tie = rest.amax(dim=1).eq(conf.index_select(0, cand))
    if tie.any():
        tied = cand[tie]
        correct[tied] = p.index_select(0, tied).argmax(dim=1).eq(y.index_select(0, tied))
    return correct


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
