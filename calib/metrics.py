"""Calibration metrics: pure functions of predicted probabilities and labels.

Inputs everywhere: ``probs`` of shape ``(N, K)`` (torch tensor or numpy array, rows on
the simplex) and integer ``labels`` of shape ``(N,)``. Results are Python floats, except
:func:`sece_loss`, which returns a differentiable 0-dim tensor for training.

Notation (DESIGN.md section 5): confidence ``c_i = max_k p_ik``, prediction
``yhat_i = argmax_k p_ik``, correctness ``pi_i = 1[yhat_i = y_i]``.

Bin conventions (``closed``):

``"right"`` (default)
    bins ``(lo, hi]``, with a confidence of exactly 0 kept in the first bin. This is the
    convention of the papers' code (Mukhoti et al. (2020) section 2 writes the bins as
    ``((i-1)/M, i/M]``).
``"left"``
    bins ``[lo, hi)``, with a confidence of exactly 1 kept in the last bin. torchmetrics
    (``MulticlassCalibrationError``) and netcal use ``[lo, hi)``; note that torchmetrics
    gives a confidence of exactly 1 a bin of its own, ``[1, 1]``, which matters for MCE
    when some confidences saturate at 1 (ECE agrees whenever that bin and the last one
    are both over-confident, the usual case).

Every binned metric is computed with one weighted ``bincount`` over bin indices, so
the cost is a few passes over the data: no Python loop over samples or bins.

Speed: validation and the top label come from one read of ``probs``
(:mod:`calib._scan`). On a CPU with AVX2 and a C compiler, a small compiled kernel
(``calib/_native.c``, built on the first metric call into ``~/.cache/calib``, about half
a second once per machine) does that read; otherwise PyTorch ops give the same results.
``CALIB_NATIVE=0`` turns the kernel off; ``calib._native.status()`` says which is used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np
import torch

from ._checks import (
    ArrayLike,
    as_tensor,
    check_labels,
    check_probs_fast,
    check_nk_shape,
    check_positive,
    check_positive_int,
)
from . import _checks
from . import _native
from ._scan import Checked, Rows, scan, select_above, serial, top_label

__all__ = [
    "accuracy",
    "nll",
    "brier_score",
    "ece",
    "mce",
    "adaece",
    "classwise_ece",
    "sece",
    "sece_loss",
    "BinStats",
    "bin_stats",
    "bin_stats_from_confidence",
    "ece_sweep",
    "bootstrap_ci",
    "summary",
    "NLL_EPS",
    "FIG5_BINS",
    "forecast_groups",
    "brier_decomposition",
]

Tensor = torch.Tensor
Closed = Literal["right", "left"]

#: Probabilities are clamped at this value before the log in :func:`nll`, so a single
#: confidently wrong prediction costs at most ``-log(1e-12) = 27.6`` nats, not inf.
NLL_EPS = 1e-12
#: Bin counts of Wang & Golebiowski (2024) Fig. 5 (ECE and MCE against the number of bins).
FIG5_BINS = (10, 20, 50, 100, 200, 500, 1000)
# Entries of (N, K) processed at once by classwise ECE and SECE (bounds memory).
_CHUNK = 1 << 22
# Row-sum tolerance of the probability check (calib._checks.check_probs_fast default);
# half precision gets a wider one (calib._checks.row_sum_tolerance).
_ROW_SUM_ATOL = 1e-3
# Samples per chunk of the float32 per-bin sums in ECE (see _binned_sum).
_SUM_CHUNK = 1 << 12
# Above this many bins, bin indices come from torch.bucketize instead of arithmetic, and
# bin totals from bincounts instead of the compiled kernel (per-thread copies of the bins).
_ARITH_MAX_BINS = _NATIVE_MAX_BINS = 1 << 16
# Most bins (times classes, for Classwise-ECE) a metric allocates: 2^24 float64 cells
# are 128 MiB; beyond that n_bins is refused instead of exhausting memory.
_MAX_BIN_CELLS = 1 << 24
# Adaptive bins: up to this many edges, bin indices come from comparisons, not a search.
_COMPARE_MAX_EDGES = 32


# --------------------------------------------------------------------------- inputs


def _scan(probs: ArrayLike, labels: ArrayLike, name: str = "probs") -> Checked:
    """Validated input and its top label from one pass (:func:`calib._scan.scan`)."""
    return scan(probs, labels, name)[0]


def _inputs(probs: ArrayLike, labels: ArrayLike) -> tuple[Tensor, Tensor]:
    """Validated ``(probs, labels)``: probabilities ``(N, K)`` and int64 labels on one device."""
    c = _scan(probs, labels)
    return c.p, c.y


def _check_closed(closed: str) -> str:
    if closed not in ("right", "left"):
        raise ValueError(f'closed must be "right" ((lo, hi] bins) or "left" ([lo, hi) bins), got {closed!r}')
    return closed


def _at_label(p: Tensor, y: Tensor) -> Tensor:
    """``p[i, y_i]`` for every row; for wide rows a flat ``index_select`` beats ``gather`` on CPU."""
    if not p.is_contiguous() or p.shape[1] < 32:
        return p.gather(1, y[:, None]).squeeze(1)
    n, k = p.shape
    flat = torch.arange(0, n * k, k, device=p.device).add_(y)
    return p.view(-1).index_select(0, flat)


def _check_n_bins(n_bins: int, name: str = "n_bins", cells: int = 1) -> int:
    """A positive int whose bins (``cells`` per bin, e.g. K classes) fit in memory."""
    n_bins = check_positive_int(n_bins, name)
    if n_bins * cells > _MAX_BIN_CELLS:
        per = f" x {cells} classes" if cells > 1 else ""
        raise ValueError(
            f"{name} = {n_bins:,} is too large: {n_bins:,}{per} bins would need "
            f"{8 * n_bins * cells / 2**30:.1f} GiB of float64 sums; use at most "
            f"{_MAX_BIN_CELLS // cells:,} bins"
        )
    return n_bins


# --------------------------------------------------------------------------- binning


def _bin_index(x: Tensor, n_bins: int, closed: str) -> Tensor:
    """Equal-width bin (int32) of every entry of ``x`` (any shape) among ``n_bins`` bins of [0, 1].

    Exactly ``torch.bucketize`` against the edges ``e = torch.linspace(0, 1, n_bins + 1)``
    in the dtype of ``x`` (the tests check this, edges and their neighbours included), in
    a few elementwise passes instead of a binary search. The guess
    ``ceil(x * M (1 - d)) - 1`` (``floor`` for ``[lo, hi)``), shrunk by ``d = 16`` machine
    epsilons, is never above the true bin and at most one below it (for ``M <= 2^16``),
    so one comparison with the guessed bin's upper edge settles it.
    """
    edges = torch.linspace(0, 1, n_bins + 1, dtype=x.dtype, device=x.device)
    if n_bins > _ARITH_MAX_BINS or x.dtype not in (torch.float32, torch.float64):
        return torch.bucketize(x, edges[1:-1], right=(closed == "left"), out_int32=True)
    upper = edges[1:].clone()
    upper[-1] = math.inf  # 1 (and anything above) stays in the last bin
    x = x.contiguous()
    buf = x * (n_bins * (1 - 16 * torch.finfo(x.dtype).eps))
    (buf.ceil_().sub_(1) if closed == "right" else buf.floor_()).clamp_(0, n_bins - 1)
    guess = buf.int()
    torch.index_select(upper, 0, guess.view(-1), out=buf.view(-1))
    # right-closed bins (e_m, e_{m+1}]: move up when x > e_{m+1}; left-closed [e_m, e_{m+1}): when x >= e_{m+1}
    return guess.add_(torch.gt(x, buf) if closed == "right" else torch.ge(x, buf))


def _adaptive_edges(conf: Tensor, n_bins: int, select: Callable | None = None) -> Tensor:
    """Equal-mass bin edges: the ``n_bins + 1`` quantiles of ``conf``, linearly interpolated.

    The edge ``j`` is the sorted confidence at fractional position ``j * N / n_bins``
    (clamped to the last sample), as in the AdaECE code of Mukhoti et al. (2020). Only
    those ``2 (n_bins + 1)`` order statistics are needed, so on CPU a coarse histogram
    (:class:`_Histogram`, or ``select(ranks)``) finds them instead of a full sort; the
    values are the same.
    """
    n = conf.numel()
    pos = torch.linspace(0, n, n_bins + 1, dtype=torch.float64).clamp_(max=n - 1)
    i0 = pos.floor().long()
    i1 = (i0 + 1).clamp_(max=n - 1)
    frac = pos - i0
    if conf.device.type == "cpu":
        ranks = np.unique(np.concatenate([i0.numpy(), i1.numpy()]))
        values = (select or (lambda r: _order_statistics(conf.numpy(), r)))(ranks)
        at = dict(zip(ranks.tolist(), values.tolist()))
        lo = torch.tensor([at[i] for i in i0.tolist()], dtype=torch.float64)
        hi = torch.tensor([at[i] for i in i1.tolist()], dtype=torch.float64)
    else:
        s = torch.sort(conf).values.cpu()
        lo, hi = s[i0].double(), s[i1].double()
    return (lo + frac * (hi - lo)).to(conf.dtype).to(conf.device)


def _adaptive_index(conf: Tensor, n_bins: int) -> Tensor:
    """The adaptive bin (int32) of every confidence: ``_bucket(conf, edges[1:-1])`` with the
    edges of :func:`_adaptive_edges`, on CPU from the histogram that found the edges.

    The bucket map ``f`` of :class:`_Histogram` is non-decreasing, so an edge ``e`` with
    ``f(e) < f(x)`` lies below ``x`` and one with ``f(e) > f(x)`` above it: a table over
    the buckets gives the bin of every sample, and only the samples that share a bucket
    with an edge (a small fraction) are compared with it.
    """
    if conf.device.type != "cpu" or conf.numel() <= 8 * _SELECT_BUCKETS:
        return _bucket(conf, _adaptive_edges(conf, n_bins)[1:-1])
    x = conf.numpy()
    hist = _Histogram(x)
    if hist.flat:
        return torch.zeros(x.size, dtype=torch.int32)  # every edge equals every sample
    inner = _adaptive_edges(conf, n_bins, hist.select)[1:-1].numpy()
    home = hist.bucket_of(inner)
    idx = np.searchsorted(np.sort(home), np.arange(_SELECT_BUCKETS), side="left")[hist.bucket]
    shared = np.zeros(_SELECT_BUCKETS, dtype=bool)
    shared[home] = True
    near = np.flatnonzero(shared[hist.bucket])
    xs, bs = x[near], hist.bucket[near]
    for e, b in zip(inner, home):  # edges in a sample's own bucket: compare
        idx[near] += (bs == b) & (xs > e)
    return torch.from_numpy(idx.astype(np.int32))


# Buckets of the coarse histogram that locates order statistics (_Histogram).
_SELECT_BUCKETS = 4096


def _order_statistics(x: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """``np.sort(x)[ranks]`` without sorting the whole array (:class:`_Histogram`)."""
    if x.size <= 8 * _SELECT_BUCKETS:
        return np.sort(x)[ranks]
    hist = _Histogram(x)
    return np.full(ranks.shape, x.dtype.type(hist.lo)) if hist.flat else hist.select(ranks)


class _Histogram:
    """A coarse histogram of ``x`` that finds order statistics without a full sort.

    Bucket ``f(v) = min(floor((v - min) * B / (max - min)), B - 1)``, in ``x``'s dtype,
    is non-decreasing in ``v`` (rounding is monotone), so bucket order is value order:
    a histogram locates each rank, then only the few buckets holding the requested
    ranks are sorted, and the values returned are exact elements of ``x``.
    """

    def __init__(self, x: np.ndarray):
        self.x = x
        self.lo, hi = float(x.min()), float(x.max())
        self.flat = self.lo == hi
        if not self.flat:
            self.scale = _SELECT_BUCKETS / (hi - self.lo)
            self.bucket = self.bucket_of(x)
            self.ends = np.cumsum(np.bincount(self.bucket, minlength=_SELECT_BUCKETS))  # ranks below each end

    def bucket_of(self, v: np.ndarray) -> np.ndarray:
        t = self.x.dtype.type
        return np.minimum(((v.astype(self.x.dtype) - t(self.lo)) * t(self.scale)).astype(np.int64),
                          _SELECT_BUCKETS - 1)

    def select(self, ranks: np.ndarray) -> np.ndarray:
        """``np.sort(x)[ranks]``."""
        ends, bucket = self.ends, self.bucket
        home = np.searchsorted(ends, ranks, side="right")  # bucket holding each rank
        wanted = np.zeros(_SELECT_BUCKETS, dtype=bool)
        wanted[home] = True
        pick = wanted[bucket]
        vals, where = self.x[pick], bucket[pick]
        vals = vals[np.lexsort((vals, where))]  # by bucket, then value
        used = np.flatnonzero(wanted)
        starts = np.concatenate([[0], np.cumsum(ends[used] - np.where(used > 0, ends[used - 1], 0))[:-1]])
        first_rank = np.where(used > 0, ends[used - 1], 0)  # rank of each used bucket's smallest value
        slot = np.searchsorted(used, home)
        return vals[starts[slot] + ranks - first_rank[slot]]


def _bucket(x: Tensor, inner: Tensor) -> Tensor:
    """``torch.bucketize(x, inner, right=False)`` (int32): the number of edges below ``x``.

    For a few edges, counting comparisons (one vectorised pass per edge) beats the
    per-element binary search of ``bucketize`` on CPU.
    """
    if inner.numel() > _COMPARE_MAX_EDGES or x.device.type != "cpu":
        return torch.bucketize(x, inner, right=False, out_int32=True)
    idx = torch.zeros(x.shape, dtype=torch.int32, device=x.device)
    above = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    for edge in inner.tolist():
        idx.add_(torch.gt(x, edge, out=above))
    return idx


def _bin_sums(idx: Tensor, correct: Tensor, conf: Tensor, n_bins: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per bin ``(count, sum of pi_i, sum of c_i)``, float64; count and hits from one bincount."""
    conf_sum = torch.bincount(idx, weights=conf.double(), minlength=n_bins)
    both = torch.bincount(idx.add(correct, alpha=n_bins), minlength=2 * n_bins).double()
    return both[:n_bins] + both[n_bins:], both[n_bins:], conf_sum


def _binned_sum(idx: Tensor, w: Tensor, n_bins: int) -> Tensor:
    """Per-bin sums of ``w`` as float64, accumulated in ``w``'s dtype over short chunks.

    A float32 ``bincount`` is about twice as fast as a float64 one on CPU, but one long
    float32 running sum loses digits. Each chunk of ``_SUM_CHUNK`` samples gets its own
    row of bins (one ``bincount`` over ``chunk * n_bins + bin``), and only the per-chunk
    totals (and the short tail) are summed in float64: the result agrees with a float64
    sum to ~1e-8 relative (``tests/test_metrics.py`` checks it).
    """
    n = w.numel()
    m = n // _SUM_CHUNK if n_bins <= _SUM_CHUNK else 0  # many bins: one float64 bincount
    full = m * _SUM_CHUNK
    total = torch.bincount(idx[full:], weights=w[full:].double(), minlength=n_bins)
    if m:
        offset = torch.arange(0, m * n_bins, n_bins, dtype=idx.dtype, device=idx.device)[:, None]
        rows = idx[:full].view(m, _SUM_CHUNK).add(offset).view(-1)
        total += torch.bincount(rows, weights=w[:full], minlength=m * n_bins).view(m, n_bins).double().sum(0)
    return total


def _ece_from(idx: Tensor, correct: Tensor, conf: Tensor, n_bins: int) -> float:
    """``sum_m |B_m|/N |acc_m - conf_m| = (1/N) sum_m |sum_{i in B_m} (pi_i - c_i)|``: one bincount."""
    gap = _binned_sum(idx, correct.to(conf.dtype).sub_(conf), n_bins)
    return float(gap.abs_().sum()) / conf.numel()


def _totals(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> tuple[Tensor, Tensor, Tensor]:
    """Per equal-width bin ``(count, sum of pi_i, sum of c_i)`` in float64: by the compiled
    kernel in one pass (:mod:`calib._native`) where it is available, else bin indices
    (:func:`_bin_index`) and bincounts."""
    sums = _native_totals(conf, correct, n_bins, closed)
    if sums is None:
        return _bin_sums(_bin_index(conf, n_bins, closed), correct, conf, n_bins)
    return sums[0], sums[1], sums[2]


def _native_totals(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> Tensor | None:
    """``(3, n_bins)`` float64 bin totals from the compiled kernel, or None without it."""
    fn = _native.bin_sums_fn(conf.dtype) if conf.device.type == "cpu" else None
    if fn is None or n_bins > _NATIVE_MAX_BINS:
        return None
    conf, correct = conf.contiguous(), correct.contiguous()
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype).double()  # the edges _bin_index uses
    sums = torch.empty(3, n_bins, dtype=torch.float64)
    failed = fn(conf.data_ptr(), correct.data_ptr(), conf.numel(), edges.data_ptr(), n_bins, int(closed == "left"),
                sums.data_ptr(), _native.threads(conf.numel()))
    return None if failed else sums


def _ece_of(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> float:
    """ECE of top-label confidences and correctness (see :func:`ece`)."""
    sums = _native_totals(conf, correct, n_bins, closed)
    if sums is None:
        return _ece_from(_bin_index(conf, n_bins, closed), correct, conf, n_bins)
    return float((sums[1] - sums[2]).abs_().sum()) / conf.numel()


def _mce_of(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> float:
    """MCE of top-label confidences and correctness (see :func:`mce`)."""
    counts, hits, conf_sum = _totals(conf, correct, n_bins, closed)
    full = counts > 0
    return float(((hits[full] - conf_sum[full]).abs() / counts[full]).max())


# --------------------------------------------------------------------------- basic scores


@torch.no_grad()
def accuracy(probs: ArrayLike, labels: ArrayLike) -> float:
    """Fraction of samples whose arg-max class is the label: ``(1/N) sum_i 1[yhat_i = y_i]``."""
    return float(_scan(probs, labels).correct.double().mean())


@torch.no_grad()
def nll(probs: ArrayLike, labels: ArrayLike) -> float:
    """Negative log-likelihood ``-(1/N) sum_i log max(p_{i,y_i}, eps)`` in nats.

    The clamp at ``eps = NLL_EPS = 1e-12`` keeps a probability that underflowed to 0
    (common in float32) from turning the mean into inf; it only changes terms whose true
    value exceeds 27.6 nats. NLL is the proper scoring rule that temperature scaling
    minimises (Guo et al. 2017; Mukhoti et al. (2020) section 3 tracks its over-fitting during training).
    """
    return _nll(*_inputs(probs, labels))


def _nll(p: Tensor, y: Tensor) -> float:
    p_true = p.gather(1, y[:, None]).squeeze(1).double()
    return float(-p_true.clamp_min(NLL_EPS).log().mean())


@torch.no_grad()
def brier_score(probs: ArrayLike, labels: ArrayLike) -> float:
    """Brier score ``(1/N) sum_i sum_k (p_ik - y_ik)^2`` with one-hot ``y`` (Brier 1950).

    Summed over classes and averaged over samples (DESIGN.md section 5), so it lies in
    [0, 2]. Lin et al. (2024) Eq. (12) splits its expectation into ``||p - eta||^2`` plus a term fixed
    by the true posterior ``eta``. Computed as ``sum_k p_ik^2 - 2 p_{i,y_i} + 1``.
    """
    return _brier(*_inputs(probs, labels))


def _brier(p: Tensor, y: Tensor) -> float:
    sq = (p * p).sum(dim=1).double()
    p_true = p.gather(1, y[:, None]).squeeze(1).double()
    return float((sq - 2 * p_true + 1).mean())


# --------------------------------------------------------------------------- binned metrics


@torch.no_grad()
def ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Expected calibration error over ``n_bins`` equal-width confidence bins.

    ``ECE = sum_m |B_m|/N |acc(B_m) - conf(B_m)|`` (Naeini et al. 2015; Mukhoti et al. (2020) section 2;
    Wang & Golebiowski (2024) section 3.1), where ``B_m`` holds the samples whose top-label confidence falls in
    bin ``m``, ``acc`` is their accuracy and ``conf`` their mean confidence. ``closed``
    picks the bin convention (module docstring). Example (DESIGN.md section 5): the
    confidences ``[.25, .3, .5, .6, 1, .9]`` with correctness ``[0, 1, 1, 0, 1, 0]`` and 4
    bins give 0.491667 with ``(lo, hi]`` bins and 0.241667 with ``[lo, hi)``.
    """
    n_bins = _check_n_bins(n_bins)
    _check_closed(closed)
    c = _scan(probs, labels)
    return _ece_of(c.conf, c.correct, n_bins, closed)


@torch.no_grad()
def mce(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Maximum calibration error ``max_m |acc(B_m) - conf(B_m)|`` over non-empty bins.

    Naeini et al. (2015); Mukhoti et al. (2020) section 2; Wang & Golebiowski (2024) section 3.1. Same bins as :func:`ece`.
    MCE >= ECE always (ECE is a weighted mean of the same gaps).
    """
    n_bins = _check_n_bins(n_bins)
    _check_closed(closed)
    c = _scan(probs, labels)
    return _mce_of(c.conf, c.correct, n_bins, closed)


@torch.no_grad()
def adaece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Adaptive ECE: the ECE formula over ``n_bins`` equal-mass bins (Mukhoti et al. (2020) section 2, AdaECE).

    Edges are the interpolated quantiles of the confidences (:func:`_adaptive_edges`);
    bins are ``(lo, hi]`` with the smallest confidence kept in the first bin (the code of
    Mukhoti et al. (2020) drops it). Assigning by value keeps tied confidences together, so the metric does
    not depend on sample order; with many ties the bins are only roughly equal in mass.
    """
    n_bins = _check_n_bins(n_bins)
    c = _scan(probs, labels)
    return _adaece_from(c.conf, c.correct, n_bins)


def _adaece_from(conf: Tensor, correct: Tensor, n_bins: int) -> float:
    return _ece_from(_adaptive_index(conf, n_bins), correct, conf, n_bins)


@torch.no_grad()
def classwise_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Classwise ECE ``(1/K) sum_k ECE(p_{.k}, 1[y = k])`` (Mukhoti et al. (2020) section 2; Nixon et al. 2019).

    Each class ``k`` bins the probability ``p_ik`` of every sample (not only the top
    label) and compares the bin's mean ``p_ik`` with the frequency of ``y_i = k``:
    ``(1/K) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)| / N``. ``K`` is the width of
    ``probs``, so classes absent from ``labels`` still count.

    Cost: with ``e_1`` the first inner edge, every entry at or below it (most of them
    when K is large) lies in bin 0, so ``sum_{i in B_k0} p_ik`` is the column sum minus
    the other bins' sums. Only the entries above ``e_1`` are binned and scattered, and
    the label indicator contributes one entry per row. The compiled kernel
    (:mod:`calib._native`) does it in one pass after validation; with PyTorch ops it runs
    on each chunk of the validation pass while the chunk is in cache (:mod:`calib._scan`).
    """
    n_bins = _check_n_bins(n_bins, cells=_width(probs))
    _check_closed(closed)
    if _native.kernel() is not None:  # two compiled passes: validation, then the sums
        c = _scan(probs, labels)
        return _classwise(c.p, c.y, n_bins, closed)
    c, parts = scan(probs, labels, per_chunk=lambda rows: _classwise_sums(rows, n_bins, closed))
    return _classwise_total(parts, *c.p.shape, n_bins)


def _width(probs: ArrayLike) -> int:
    """K of an (N, K) input, 1 when the shape is not (yet) known to be 2-D."""
    shape = getattr(probs, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 and shape[1] > 0 else 1


def _classwise(p: Tensor, y: Tensor, n_bins: int, closed: str) -> float:
    """Classwise ECE of checked input, a block of rows at a time (see :func:`classwise_ece`)."""
    n, k = p.shape
    native = _native_classwise_sums(p, y, n_bins, closed)  # one pass, OpenMP threads
    if native is not None:
        return _classwise_total([native], n, k, n_bins)
    rows = max(1, _CHUNK // k)
    with serial(p.device):
        parts = [_classwise_sums(Rows(p[i:i + rows], y[i:i + rows], None, None, None), n_bins, closed)
                 for i in range(0, n, rows)]
    return _classwise_total(parts, n, k, n_bins)


def _classwise_sums(rows: Rows, n_bins: int, closed: str) -> tuple[Tensor, Tensor, Tensor]:
    """For a block of rows, per class ``k``: the column sum of ``p_ik``, and per cell
    ``(k, m)`` (flat index ``k * n_bins + m``) the sum of ``p_ik`` and the count of
    ``y_i = k`` over the samples whose ``p_ik`` falls in bin ``m``.

    Only entries above the first edge are binned (most entries lie in bin 0 when K is
    large); bin 0's sums are the column sums minus the other bins' (:func:`_classwise_total`).
    """
    pc, yc = rows.p, rows.y
    k = pc.shape[1]
    psum = torch.zeros(k * n_bins, dtype=torch.float64, device=pc.device)
    if n_bins > 1:
        e1 = float(torch.linspace(0, 1, n_bins + 1, dtype=pc.dtype)[1])
        v, where = select_above(pc, e1, inclusive=closed == "left")  # beyond bin 0
        cell = where.remainder_(k).mul_(n_bins).add_(_bin_index(v, n_bins, closed))  # class * M + bin
        psum += torch.bincount(cell, weights=v.double(), minlength=k * n_bins)  # (int64 zeros when empty)
    p_true = rows.p_true if rows.p_true is not None else _at_label(pc, yc)
    hits = torch.bincount(yc.mul(n_bins).add_(_bin_index(p_true, n_bins, closed)), minlength=k * n_bins)
    return _column_sums(pc), psum, hits


def _native_classwise_sums(pc: Tensor, yc: Tensor, n_bins: int, closed: str) -> tuple | None:
    """:func:`_classwise_sums` by the compiled kernel (one pass in PyTorch's OpenMP
    threads, float64 sums), or None without it."""
    fn = _native.classwise_fn(pc.dtype) if pc.device.type == "cpu" and pc.is_contiguous() else None
    if fn is None or n_bins > _NATIVE_MAX_BINS:
        return None
    (n, k), yc = pc.shape, yc.contiguous()
    edges = torch.linspace(0, 1, n_bins + 1, dtype=pc.dtype).double()
    col, psum = torch.zeros(k, dtype=torch.float64), torch.zeros(k * n_bins, dtype=torch.float64)
    hits = torch.zeros(k * n_bins, dtype=torch.int64)
    failed = fn(pc.data_ptr(), yc.data_ptr(), n, k, edges.data_ptr(), n_bins, int(closed == "left"),
                col.data_ptr(), psum.data_ptr(), hits.data_ptr(), _native.threads(pc.numel()))
    return None if failed else (col, psum, hits)


def _column_sums(pc: Tensor) -> Tensor:
    """``pc.sum(0)`` as float64; float32 input is summed over blocks of ``_SUM_CHUNK`` rows
    with float64 totals (as in :func:`_binned_sum`: ~1e-8 relative, tested)."""
    if pc.dtype == torch.float64 or pc.shape[0] <= _SUM_CHUNK:
        return pc.sum(dim=0).double()
    m = pc.shape[0] // _SUM_CHUNK
    full = pc[:m * _SUM_CHUNK].view(m, _SUM_CHUNK, -1).sum(dim=1).double().sum(dim=0)
    return full + pc[m * _SUM_CHUNK:].sum(dim=0).double()


def _classwise_total(parts: list, n: int, k: int, n_bins: int) -> float:
    """``(1/(N K)) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)|`` from per-block sums."""
    col, psum, hits = (torch.stack(t).sum(0) for t in zip(*parts))
    psum = psum.view(k, n_bins)
    psum[:, 0] = col - psum[:, 1:].sum(dim=1)  # bin 0 holds every entry not selected above
    return float((hits.view(k, n_bins).double() - psum).abs_().sum()) / (n * k)


# --------------------------------------------------------------------------- smooth ECE


# Smallest SECE bandwidth: below it h^2 underflows float64 and the kernel is undefined.
_MIN_BANDWIDTH = 1e-150


def _check_bandwidth(bandwidth: float) -> float:
    h = check_positive(bandwidth, "bandwidth")
    if h < _MIN_BANDWIDTH:
        raise ValueError(f"bandwidth must be >= {_MIN_BANDWIDTH:g} (its square underflows below that), got {bandwidth}")
    return h


def _sece_terms(z: Tensor, pi: Tensor, h: float) -> Tensor:
    """``|SACC_i - z_i|`` for every sample, the kernel matrix built a block of rows at a time.

    One matrix product against ``[pi, 1]`` gives numerator and denominator together.
    Without autograd the kernel block is formed in place (fewer passes over N^2 entries).
    """
    n = z.numel()
    rows = max(1, _CHUNK // n)
    rhs = torch.stack([pi, torch.ones_like(pi)], dim=1)
    track = torch.is_grad_enabled() and z.requires_grad
    coef = -0.5 / (h * h)
    if abs(coef) > torch.finfo(z.dtype).max:  # 1 / h^2 overflows float32: compute in float64
        return _sece_terms(z.double(), pi.double(), h).to(z.dtype)
    out = []
    for start in range(0, n, rows):
        zi = z[start:start + rows]
        if track:
            kern = torch.exp(-0.5 * ((zi[:, None] - z[None, :]) / h) ** 2)
        else:
            kern = (zi[:, None] - z[None, :]).square_().mul_(coef).exp_()
        num, den = (kern @ rhs).unbind(dim=1)
        out.append((num / den - zi).abs())
    return torch.cat(out)


def _sece_inputs(
    probs: ArrayLike, labels: ArrayLike, bandwidth: float, per_step: bool = False
) -> tuple[Checked, float]:
    """Checked SECE inputs. ``per_step`` (the training objective): value checks only where
    they cost no GPU sync (:func:`calib._checks.reads_values`); elsewhere one fused pass."""
    h = _check_bandwidth(bandwidth)
    if per_step and not _checks.reads_values(as_tensor(probs, "probs")):
        p = _checks._shape_only(probs, "probs").detach()
        if p.dtype in (torch.float16, torch.bfloat16):
            p = p.float()
        y = check_labels(labels, p.shape[0], p.shape[1], "labels", per_step=True).to(p.device)
        conf, pred = p.max(dim=1)
        return Checked(p, y, conf, pred.eq(y)), h
    return _scan(probs, labels), h


def sece_loss(probs: ArrayLike, labels: ArrayLike, bandwidth: float = 0.01) -> Tensor:
    """Smooth ECE of Wang & Golebiowski (2024) section 4.2 as a differentiable 0-dim tensor (for training).

    With top-label confidence ``z_i``, correctness ``pi_i`` and the Gaussian kernel
    ``K(z, z') = exp(-(z - z')^2 / (2 h^2))`` (Wang & Golebiowski (2024) Eq. 6, bandwidth ``h = 0.01`` in Wang & Golebiowski (2024)
    section 5):

    ``SACC_i = sum_j pi_j K(z_i, z_j) / sum_j K(z_i, z_j)``,
    ``SECE = (1/N) sum_i |SACC_i - z_i|`` (Wang & Golebiowski (2024) Eq. 7).

    Choices, read from Wang & Golebiowski (2024): Eq. (5) as printed has ``pi(x_i)`` inside the sum and no
    denominator, which would not be an accuracy; we use the normalised all-pairs form of
    Wang & Golebiowski (2024) Eq. (12) (a Nadaraya-Watson estimate of the accuracy at ``z_i``), with ``pi_j``
    inside the sum. The sum runs over all ``j`` including ``j = i`` ("all-pairs"), so the
    denominator is at least ``K(z_i, z_i) = 1`` and never vanishes. As ``h -> 0`` SACC_i
    tends to ``pi_i`` and SECE to ``mean |pi_i - z_i|``; as ``h`` grows it tends to
    ``|accuracy - mean confidence|``-like averages. Gradients flow through ``z`` (both in
    the kernel and in ``-z_i``), not through ``pi`` (an arg-max). Cost and memory are
    ``O(N^2)``: meant for mini-batches of up to a few thousand samples.
    """
    c, h = _sece_inputs(probs, labels, bandwidth, per_step=True)
    p = as_tensor(probs, "probs")  # the caller's tensor, so gradients reach it
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    z = p.max(dim=1).values if p.requires_grad else c.conf
    return _sece_terms(z, c.correct.to(z.dtype), h).mean()


@torch.no_grad()
def sece(probs: ArrayLike, labels: ArrayLike, bandwidth: float = 0.01) -> float:
    """Smooth ECE of Wang & Golebiowski (2024) section 4.2 as a float (see :func:`sece_loss` for the formula).

    Computed in float64, a block of kernel rows at a time; ``O(N^2)`` time, so about a
    second for N = 10,000 on one CPU core. Unlike binned ECE it has no bin count to
    choose, only the kernel bandwidth (Wang & Golebiowski (2024) Fig. 5 contrasts the two).
    """
    c, h = _sece_inputs(probs, labels, bandwidth)
    return float(_sece_terms(c.conf.double(), c.correct.double(), h).mean())


# --------------------------------------------------------------------------- bin statistics


@dataclass(frozen=True)
class BinStats:
    """Per-bin data of a reliability diagram (numpy arrays; NaN marks empty bins).

    ``edges`` (n_bins + 1,), ``counts`` (n_bins,) int64, ``accuracy`` and ``confidence``
    (n_bins,) the mean correctness and mean confidence of each bin, ``closed`` the bin
    convention. ``ece``/``mce``/``gap`` are derived from these.
    """

    edges: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray
    closed: str

    @property
    def n_bins(self) -> int:
        return int(self.counts.size)

    @property
    def n_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def gap(self) -> np.ndarray:
        """``accuracy - confidence`` per bin: negative means over-confident."""
        return self.accuracy - self.confidence

    @property
    def ece(self) -> float:
        full = self.counts > 0
        return float((self.counts[full] * np.abs(self.gap[full])).sum() / self.n_samples)

    @property
    def mce(self) -> float:
        full = self.counts > 0
        return float(np.abs(self.gap[full]).max())


def _stats(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> BinStats:
    counts, hits, conf_sum = _totals(conf, correct, n_bins, closed)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype)
    c = counts.cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(c > 0, hits.cpu().numpy() / c, np.nan)
        cnf = np.where(c > 0, conf_sum.cpu().numpy() / c, np.nan)
    for a in (acc, cnf):
        a.setflags(write=False)
    return BinStats(edges.double().cpu().numpy(), c.astype(np.int64), acc, cnf, closed)


@torch.no_grad()
def bin_stats(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> BinStats:
    """Counts, accuracy and mean confidence per equal-width bin of the top-label confidence.

    The data of a reliability diagram (Guo et al. 2017; Wang & Golebiowski (2024) Fig. 2). ``bin_stats(...).ece``
    equals :func:`ece` with the same arguments.
    """
    n_bins = _check_n_bins(n_bins)
    _check_closed(closed)
    c = _scan(probs, labels)
    return _stats(c.conf, c.correct, n_bins, closed)


@torch.no_grad()
def bin_stats_from_confidence(
    confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15, *, closed: Closed = "right"
) -> BinStats:
    """:func:`bin_stats` for confidences that are not the max of a probability vector.

    ``confidence`` (N,) in [0, 1] and ``correct`` (N,) booleans or 0/1 integers, e.g. the
    output of :class:`calib.posthoc.HistogramBinning` with the unchanged predictions'
    correctness. ``.ece`` then gives the ECE of those confidences.
    """
    n_bins = _check_n_bins(n_bins)
    _check_closed(closed)
    c = as_tensor(confidence, "confidence")
    if not c.is_floating_point():
        raise TypeError(f"confidence must be floating point, got dtype {c.dtype}")
    if c.dtype in (torch.float16, torch.bfloat16):
        c = c.float()
    if c.ndim != 1 or c.numel() == 0:
        raise ValueError(f"confidence must be a non-empty 1-D array, got shape {tuple(c.shape)}")
    if not bool(torch.isfinite(c).all()) or float(c.min()) < 0 or float(c.max()) > 1:
        raise ValueError("confidence must be finite values in [0, 1]")
    ok = as_tensor(correct, "correct")
    if ok.is_floating_point() or ok.is_complex():
        raise TypeError(f"correct must be booleans or 0/1 integers, got dtype {ok.dtype}")
    if ok.shape != c.shape:
        raise ValueError(f"correct has shape {tuple(ok.shape)} but confidence has {tuple(c.shape)}")
    if bool(((ok != 0) & (ok != 1)).any()):
        raise ValueError("correct must hold only 0/1 (or booleans)")
    return _stats(c, ok.to(device=c.device).bool(), n_bins, closed)


# --------------------------------------------------------------------------- sweeps, CIs, summary


_SWEEPABLE = ("ece", "mce", "adaece", "classwise_ece")


@torch.no_grad()
def ece_sweep(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins_list: Sequence[int] = FIG5_BINS,
    metric: str = "ece",
    *,
    closed: Closed = "right",
) -> dict[int, float]:
    """A binned metric for each bin count in ``n_bins_list``: ``{n_bins: value}``.

    Wang & Golebiowski (2024) Fig. 5 plots ECE and MCE for 10 ... 1000 bins (the default list) to show that
    binned estimates depend on the binning; :func:`sece` has no such knob. ``metric`` is
    one of ``"ece"``, ``"mce"``, ``"adaece"``, ``"classwise_ece"``. The top label is
    computed once for all bin counts.
    """
    if metric not in _SWEEPABLE:
        raise ValueError(f"metric must be one of {', '.join(_SWEEPABLE)}, got {metric!r}")
    if isinstance(n_bins_list, (int, np.integer)) or len(n_bins_list) == 0:
        raise ValueError("n_bins_list must be a non-empty sequence of bin counts")
    cells = _width(probs) if metric == "classwise_ece" else 1
    counts = [_check_n_bins(b, "n_bins_list entry", cells) for b in n_bins_list]
    _check_closed(closed)
    c = _scan(probs, labels)
    p, y, conf, correct = c.p, c.y, c.conf, c.correct
    if metric == "adaece":
        return {b: _adaece_from(conf, correct, b) for b in counts}
    if metric == "classwise_ece":
        return {b: _classwise(p, y, b, closed) for b in counts}
    one = _ece_of if metric == "ece" else _mce_of
    return {b: one(conf, correct, b, closed) for b in counts}


def _per_sample_stat(metric_fn: Callable, p: Tensor, y: Tensor, kw: dict) -> tuple[Callable, Tensor] | None:
    """For metrics that resample cheaply, a function of bootstrap index rows ``(B, N)``.

    Means of a per-sample value (accuracy, NLL, Brier) and the binned ECE/MCE reduce to
    gathers and one bincount per block of bootstrap replicates.
    """
    conf, correct = top_label(p, y, _ROW_SUM_ATOL)
    if metric_fn in (accuracy, nll, brier_score) and not kw:
        p_true = p.gather(1, y[:, None]).squeeze(1).double()
        if metric_fn is accuracy:
            v = correct.double()
        elif metric_fn is nll:
            v = -p_true.clamp_min(NLL_EPS).log()
        else:
            v = (p * p).sum(1).double() - 2 * p_true + 1
        return (lambda rows: v[rows].mean(dim=1)), v
    if metric_fn in (ece, mce) and set(kw) <= {"n_bins", "closed"}:
        n_bins = _check_n_bins(kw.get("n_bins", 15))
        bins = _bin_index(conf, n_bins, _check_closed(kw.get("closed", "right")))
        gap = correct.double() - conf.double()
        n = conf.numel()

        def binned(rows: Tensor) -> Tensor:
            b = rows.shape[0]
            flat = (bins[rows] + n_bins * torch.arange(b, device=rows.device)[:, None]).view(-1)
            sums = torch.bincount(flat, weights=gap[rows].view(-1), minlength=b * n_bins).view(b, n_bins)
            if metric_fn is ece:
                return sums.abs().sum(dim=1) / n
            cnt = torch.bincount(flat, minlength=b * n_bins).view(b, n_bins)
            return (sums.abs() / cnt.clamp_min(1)).amax(dim=1)

        return binned, gap
    return None


def bootstrap_ci(
    metric_fn: Callable[..., float],
    probs: ArrayLike,
    labels: ArrayLike,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    **kw,
) -> tuple[float, float, float]:
    """Percentile bootstrap interval ``(low, point, high)`` for any metric.

    ``point = metric_fn(probs, labels, **kw)``; ``n_boot`` replicates resample the N
    samples with replacement (``torch.Generator`` seeded with ``seed``); ``low``/``high``
    are the ``alpha/2`` and ``1 - alpha/2`` quantiles of the replicates (Efron's
    percentile interval). :func:`accuracy`, :func:`nll`, :func:`brier_score`, :func:`ece`
    and :func:`mce` are resampled in vectorised blocks; any other callable is called once
    per replicate on the same resampled indices, so both paths give the same numbers.

    Binned ECE is biased upwards and resampling adds to the bias, so for a well
    calibrated model the point estimate can fall below ``low``; for means (accuracy,
    NLL, Brier) it sits inside the interval.
    """
    if not callable(metric_fn):
        raise TypeError(f"metric_fn must be callable, got {type(metric_fn).__name__}")
    n_boot = check_positive_int(n_boot, "n_boot")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    p, y = _inputs(probs, labels)
    point = float(metric_fn(p, y, **kw))
    n = p.shape[0]
    gen = torch.Generator().manual_seed(int(seed))
    fast = _per_sample_stat(metric_fn, p, y, kw)
    block = max(1, _CHUNK // n)
    stats = []
    for start in range(0, n_boot, block):
        rows = torch.randint(n, (min(block, n_boot - start), n), generator=gen).to(p.device)
        if fast is not None:
            stats.append(fast[0](rows).double().cpu())
        else:
            stats.append(torch.tensor([float(metric_fn(p[r], y[r], **kw)) for r in rows], dtype=torch.float64))
    reps = torch.cat(stats).numpy()
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return float(low), point, float(high)


@torch.no_grad()
def summary(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> dict[str, float]:
    """The standard report of a set of predictions, as written to a run's ``metrics.json``.

    Keys: ``accuracy``, ``nll``, ``brier``, ``ece``, ``adaece``, ``classwise_ece``,
    ``mce`` (bins ``(lo, hi]``, ``n_bins`` of them; 15 as in Mukhoti et al. (2020) and Lin et al. (2024)). Inputs are
    validated and the top label found once for all of them.
    """
    n_bins = _check_n_bins(n_bins, cells=_width(probs))
    c = _scan(probs, labels)
    p, y, conf, correct = c.p, c.y, c.conf, c.correct
    return {
        "accuracy": float(correct.double().mean()),
        "nll": _nll(p, y),
        "brier": _brier(p, y),
        "ece": _ece_of(conf, correct, n_bins, "right"),
        "adaece": _adaece_from(conf, correct, n_bins),
        "classwise_ece": _classwise(p, y, n_bins, "right"),
        "mce": _mce_of(conf, correct, n_bins, "right"),
    }


# --------------------------------------------------------------------------- Brier decomposition


def forecast_groups(probs: ArrayLike, n_bins: int | None = None) -> tuple[Tensor, Tensor]:
    """Group the rows of ``probs``: ``(inverse, counts)`` with ``inverse[i]`` the group of row i.

    ``n_bins=None``: one group per distinct probability vector (exact, for forecasts that
    take finitely many values). ``n_bins=M``: one group per occupied cell of the regular
    grid with ``M`` equal-width bins ``[j/M, (j+1)/M)`` per class (1 in the last bin).
    """
    p = check_probs_fast(probs, "probs", atol=_ROW_SUM_ATOL).detach()
    if n_bins is None:
        keys = p.double()
    else:
        m = check_positive_int(n_bins, "n_bins")
        keys = (p.double() * m).floor().clamp_(0, m - 1).long()
    _, inverse, counts = torch.unique(keys, dim=0, return_inverse=True, return_counts=True)
    return inverse, counts


def brier_decomposition(probs: ArrayLike, labels: ArrayLike, n_bins: int | None = None) -> dict[str, float]:
    """Murphy's decomposition ``brier = reliability - resolution + uncertainty``.

    Group the forecasts (:func:`forecast_groups`); for group ``g`` with weight
    ``w_g = |g|/N``, mean forecast ``pbar_g`` and label frequencies ``obar_g``, and overall
    label frequencies ``obar`` (Murphy 1973; DeGroot & Fienberg 1983)::

        reliability = sum_g w_g ||pbar_g - obar_g||^2      (calibration; 0 when calibrated)
        resolution  = sum_g w_g ||obar_g - obar||^2        (how much the groups differ)
        uncertainty = sum_k obar_k (1 - obar_k)            (the labels alone)

    ``refinement = uncertainty - resolution`` is DeGroot and Fienberg's second term. With
    ``n_bins=None`` the groups are the distinct probability vectors and the identity is
    exact (to rounding). With ``n_bins`` the groups are cells of a grid with ``n_bins``
    bins per class, ``pbar_g`` is the mean forecast of a cell, and the identity is only
    approximate: ``brier`` (always the plain Brier score of ``probs``) differs from
    ``reliability - resolution + uncertainty`` by within-cell spread terms that vanish as
    the cells shrink. Returns floats ``brier``, ``reliability``, ``resolution``,
    ``uncertainty``, ``refinement``.
    """
    p, y = _inputs(probs, labels)
    inverse, counts = forecast_groups(p, n_bins)
    n, k = p.shape
    p64 = p.double()
    onehot = torch.zeros(n, k, dtype=torch.float64, device=p.device)
    onehot[torch.arange(n, device=p.device), y] = 1.0
    cnt = counts.to(torch.float64)[:, None]
    pbar = torch.zeros(len(counts), k, dtype=torch.float64, device=p.device).index_add_(0, inverse, p64) / cnt
    obar_g = torch.zeros_like(pbar).index_add_(0, inverse, onehot) / cnt
    obar = onehot.mean(0)
    w = cnt[:, 0] / n
    reliability = float((w * (pbar - obar_g).pow(2).sum(1)).sum())
    resolution = float((w * (obar_g - obar).pow(2).sum(1)).sum())
    uncertainty = float((obar * (1 - obar)).sum())
    return {
        "brier": _brier(p, y),
        "reliability": reliability,
        "resolution": resolution,
        "uncertainty": uncertainty,
        "refinement": uncertainty - resolution,
    }
