"""Binned calibration errors of the top label (ECE, MCE, AdaECE), classwise ECE and the
per-bin data of a reliability diagram.

Each estimator is one bin index per sample (:func:`_bin_index` for equal-width bins,
``torch.bucketize`` against the quantiles for equal-mass ones) and one weighted
bincount for the per-bin sums (:func:`~calib.metrics._inputs.histogram`:
``torch.bincount`` on CPU, ``index_add_`` on a GPU), in float64, on the inputs' device;
on CPU the samples of ECE and MCE are binned in blocks and their sums added.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Iterator, Literal, Sequence

import numpy as np
import torch

from .._checks import ArrayLike, as_tensor
from ._inputs import check_closed, check_n_bins, checked, histogram, width

Tensor = torch.Tensor
Closed = Literal["right", "left"]

# Entries of (N, K) binned at once by classwise ECE (bounds the memory of the bin indices).
_BLOCK = 1 << 22
# Samples binned at once by ECE and MCE on CPU (1 MiB of float32 confidences).
_SAMPLE_BLOCK = 1 << 18


def _bin_index(x: Tensor, n_bins: int, closed: str) -> Tensor:
    """Equal-width bin (int32) of every entry of ``x`` among ``n_bins`` bins of [0, 1].

    The edges are ``e = torch.linspace(0, 1, n_bins + 1)`` in ``x``'s dtype. ``"right"``:
    bins ``(e_m, e_{m+1}]``, a confidence of exactly 0 in the first bin; ``"left"``: bins
    ``[e_m, e_{m+1})``, a confidence of exactly 1 in the last bin. The result equals
    ``torch.bucketize(x, e[1:-1], right=(closed == "left"))`` (tested on and beside every
    edge), but bucketize's binary search costs ~40 ns a value on CPU: here ``floor(x M)``,
    off by at most one bin through rounding, is corrected by comparing with its two edges.
    """
    edges = torch.linspace(0, 1, n_bins + 1, dtype=x.dtype, device=x.device)
    # int32 halves the memory traffic of the index arithmetic; clamped after the cast, so
    # NaN stays harmless
    guess = (x * n_bins).floor_().to(torch.int32).clamp_(0, n_bins - 1)
    lo, hi = edges.index_select(0, guess.view(-1)).view_as(x), edges[1:].index_select(0, guess.view(-1)).view_as(x)
    if closed == "right":
        below, above = x.le(lo), x.gt(hi)
    else:
        below, above = x.lt(lo), x.ge(hi)
    return guess.add_(above.to(torch.int32)).sub_(below.to(torch.int32)).clamp_(0, n_bins - 1)


def _sums(idx: Tensor, correct: Tensor, conf: Tensor, n_bins: int) -> Tensor:
    """``(3, n_bins)`` float64: per bin the count, the hits ``sum pi_i`` and ``sum c_i``."""
    weights = torch.stack([torch.ones_like(conf, dtype=torch.float64), correct.double(), conf.double()])
    rows = torch.arange(3, device=idx.device)[:, None] * n_bins
    return histogram((idx + rows).view(-1), weights.view(-1), 3 * n_bins).view(3, n_bins)


def _totals(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> tuple[Tensor, Tensor, Tensor]:
    """Per equal-width bin ``(count, sum of pi_i, sum of c_i)``, float64."""
    counts, hits, conf_sum = _sums(_bin_index(conf, n_bins, closed), correct, conf, n_bins)
    return counts, hits, conf_sum


def _errors(conf: Tensor, correct: Tensor, bin_counts: Sequence[int], closed: str,
            rows: Tensor | None = None, *, with_mce: bool = True) -> tuple[Tensor, Tensor | None]:
    """ECE and MCE, shape ``(R, len(bin_counts))``, for each bin count and each resample.

    ``rows`` ``(R, N)`` holds the sample indices of R resamples (None: the data once).
    Every (resample, bin count, bin) is one cell of a single bincount of the gaps
    ``pi_i - c_i`` (on CPU, summed over blocks of samples), so there is no Python loop
    over resamples or bins:
    ``ECE = (1/N) sum_m |sum_{i in B_m} (pi_i - c_i)|``, ``MCE = max_m |.| / |B_m|``.
    ECE needs no bin sizes: ``with_mce=False`` skips their bincount (MCE is then None).
    """
    n, total = conf.numel(), sum(bin_counts)
    r = 1 if rows is None else rows.shape[0]
    segment = torch.zeros(total, dtype=torch.long, device=conf.device)  # the bin count s of each cell
    for o in _offsets(bin_counts)[1:]:  # built on the device: no host-to-device copy, no sync
        segment[o:] += 1
    sums = torch.zeros(r * total, dtype=torch.float64, device=conf.device)
    size = torch.zeros(r * total, dtype=torch.long, device=conf.device) if with_mce else None
    for cells, gaps in _cell_blocks(conf, correct, bin_counts, closed, rows):
        sums += histogram(cells, gaps, r * total)
        if size is not None:
            size += histogram(cells, None, r * total)
    sums = sums.view(r, total).abs_()
    ece = torch.zeros(r, len(bin_counts), dtype=torch.float64, device=conf.device).index_add_(1, segment, sums) / n
    if size is None:
        return ece, None
    size = size.view(r, total)
    worst = torch.where(size > 0, sums / size.clamp_min(1), 0.0)
    mce = torch.zeros_like(ece).scatter_reduce_(1, segment.expand(r, -1), worst, "amax")
    return ece, mce


def _offsets(bin_counts: Sequence[int]) -> list[int]:
    """First cell of each bin count: bin count s uses cells offset_s ... offset_s + M_s - 1."""
    return list(accumulate(bin_counts, initial=0))[:-1]


def _cells(conf: Tensor, bin_counts: Sequence[int], closed: str) -> Tensor:
    """``(S, N)`` cell of every sample for each of the S bin counts (no copy for one)."""
    bins = [_bin_index(conf, m, closed).add_(o) if o else _bin_index(conf, m, closed)
            for m, o in zip(bin_counts, _offsets(bin_counts))]
    return bins[0][None] if len(bins) == 1 else torch.stack(bins)


def _cell_blocks(conf: Tensor, correct: Tensor, bin_counts: Sequence[int], closed: str,
                 rows: Tensor | None) -> Iterator[tuple[Tensor, Tensor]]:
    """The (cell, gap ``pi_i - c_i``) pairs of :func:`_errors`, a block at a time.

    The data once, on CPU: blocks of :data:`_SAMPLE_BLOCK` samples, whose temporaries
    the allocator reuses (full-size ones fault in fresh pages: measured 2-3x slower at
    N = 10^6); on a GPU one block, which is fast there.
    Resamples: one block, cells of resample b offset by b * (total cells).
    """
    s = len(bin_counts)
    if rows is None:
        step = _SAMPLE_BLOCK if conf.device.type == "cpu" else max(1, conf.numel())
        for start in range(0, conf.numel(), step):
            c = conf[start:start + step]
            gap = correct[start:start + step].to(torch.float64).sub_(c)
            yield _cells(c, bin_counts, closed).view(-1), gap if s == 1 else gap.repeat(s)
        return
    r, flat = rows.shape[0], rows.view(-1)
    shift = sum(bin_counts) * torch.arange(r, device=conf.device)[:, None]
    gap = correct.to(torch.float64).sub_(conf)
    yield ((_cells(conf, bin_counts, closed).index_select(1, flat).view(s, *rows.shape) + shift).view(-1),
           gap.index_select(0, flat).repeat(s))


def _ece_of(conf: Tensor, correct: Tensor, n_bins: int, closed: str) -> float:
    """ECE of top-label confidences and correctness (see :func:`ece`)."""
    return float(_errors(conf, correct, [n_bins], closed, with_mce=False)[0])


@torch.no_grad()
def ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Expected calibration error of the top label over ``n_bins`` equal-width bins.

    ``ECE = sum_m |B_m|/N |acc(B_m) - conf(B_m)| = (1/N) sum_m |sum_{i in B_m} (pi_i - c_i)|``
    (Naeini et al. 2015; Guo et al. 2017; Mukhoti et al. (2020) section 2; Wang &
    Golebiowski (2024) section 3.1), with ``B_m`` the samples whose confidence ``c_i``
    falls in bin ``m``. ``closed`` picks the bin convention (package docstring). Example
    (DESIGN.md section 5): confidences ``[.25, .3, .5, .6, 1, .9]``, correctness
    ``[0, 1, 1, 0, 1, 0]``, 4 bins: 0.491667 with ``(lo, hi]`` and 0.241667 with ``[lo, hi)``.
    """
    n_bins = check_n_bins(n_bins)
    check_closed(closed)
    c = checked(probs, labels)
    return c.result(_errors(c.conf, c.correct, [n_bins], closed, with_mce=False)[0])[0]


@torch.no_grad()
def mce(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Maximum calibration error ``max_m |acc(B_m) - conf(B_m)|`` over the non-empty bins.

    Naeini et al. (2015); Mukhoti et al. (2020) section 2. Same bins as :func:`ece`;
    MCE >= ECE (ECE is a weighted mean of the same gaps).
    """
    n_bins = check_n_bins(n_bins)
    check_closed(closed)
    c = checked(probs, labels)
    return c.result(_errors(c.conf, c.correct, [n_bins], closed)[1])[0]


def _adaptive_edges(conf: Tensor, n_bins: int) -> Tensor:
    """Equal-mass bin edges: the sorted confidences at positions ``j N / n_bins``,
    linearly interpolated (the AdaECE code of Mukhoti et al. 2020), in ``conf``'s dtype."""
    n = conf.numel()
    pos = torch.linspace(0, n, n_bins + 1, dtype=torch.float64, device=conf.device).clamp_(max=n - 1)
    i0 = pos.floor().long()
    s = torch.sort(conf).values.double()
    lo, hi = s[i0], s[(i0 + 1).clamp_(max=n - 1)]
    return (lo + (pos - i0) * (hi - lo)).to(conf.dtype)


def _adaece_of(conf: Tensor, correct: Tensor, n_bins: int) -> Tensor:
    idx = torch.bucketize(conf, _adaptive_edges(conf, n_bins)[1:-1])  # (lo, hi] bins
    _, hits, conf_sum = _sums(idx, correct, conf, n_bins)
    return (hits - conf_sum).abs().sum() / conf.numel()


@torch.no_grad()
def adaece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Adaptive ECE: the ECE formula over ``n_bins`` equal-mass bins (Mukhoti et al. (2020) section 2).

    Edges are the interpolated quantiles of the confidences (:func:`_adaptive_edges`);
    bins are ``(lo, hi]`` with the smallest confidence kept in the first bin (the code of
    Mukhoti et al. drops it). Assigning by value keeps tied confidences together, so the
    metric does not depend on sample order; with many ties the bins are only roughly
    equal in mass.
    """
    n_bins = check_n_bins(n_bins)
    c = checked(probs, labels)
    return c.result(_adaece_of(c.conf, c.correct, n_bins))[0]


def _classwise_of(p: Tensor, y: Tensor, n_bins: int, closed: str) -> Tensor:
    """``(1/(N K)) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)|``, a block of rows at a time."""
    n, k = p.shape
    cells = torch.zeros(2, k * n_bins, dtype=torch.float64, device=p.device)  # sum p_ik, hits
    first = torch.arange(k, device=p.device) * n_bins  # cell of (class k, bin 0)
    step = max(1, _BLOCK // k)
    for start in range(0, n, step):
        block, yb = p[start:start + step], y[start:start + step]
        cell = _bin_index(block, n_bins, closed) + first
        cells[0] += histogram(cell.reshape(-1), block.double().reshape(-1), k * n_bins)
        cells[1] += histogram(cell.gather(1, yb[:, None]).view(-1), None, k * n_bins)
    return (cells[1] - cells[0]).abs().sum() / (n * k)


@torch.no_grad()
def classwise_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> float:
    """Classwise ECE ``(1/K) sum_k ECE(p_{.k}, 1[y = k])`` (Kull et al. 2019; Nixon et al. 2019;
    Mukhoti et al. (2020) section 2).

    Each class ``k`` bins the probability ``p_ik`` of every sample (not only the top
    label) and compares the bin's mean ``p_ik`` with the frequency of ``y_i = k``:
    ``(1/K) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)| / N``. ``K`` is the width of
    ``probs``, so classes absent from ``labels`` still count.
    """
    n_bins = check_n_bins(n_bins, cells=width(probs))
    check_closed(closed)
    c = checked(probs, labels)
    return c.result(_classwise_of(c.p, c.y, n_bins, closed))[0]


# --------------------------------------------------------------------------- reliability diagram data


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
    counts, hits, conf_sum = (t.cpu().numpy() for t in _totals(conf, correct, n_bins, closed))
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(counts > 0, hits / counts, np.nan)
        cnf = np.where(counts > 0, conf_sum / counts, np.nan)
    for a in (acc, cnf):
        a.setflags(write=False)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype).double().numpy()
    return BinStats(edges, counts.astype(np.int64), acc, cnf, closed)


@torch.no_grad()
def bin_stats(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right") -> BinStats:
    """Counts, accuracy and mean confidence per equal-width bin of the top-label confidence.

    The data of a reliability diagram (Guo et al. 2017; Wang & Golebiowski (2024) Fig. 2).
    ``bin_stats(...).ece`` equals :func:`ece` with the same arguments.
    """
    n_bins = check_n_bins(n_bins)
    check_closed(closed)
    c = checked(probs, labels)
    c.result(torch.zeros(0, device=c.p.device))  # the value checks, before reading the bins
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
    n_bins = check_n_bins(n_bins)
    check_closed(closed)
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
    if ok.is_floating_point():
        raise TypeError(f"correct must be booleans or 0/1 integers, got dtype {ok.dtype}")
    if ok.shape != c.shape:
        raise ValueError(f"correct has shape {tuple(ok.shape)} but confidence has {tuple(c.shape)}")
    if bool(((ok != 0) & (ok != 1)).any()):
        raise ValueError("correct must hold only 0/1 (or booleans)")
    return _stats(c.detach(), ok.to(device=c.device).bool(), n_bins, closed)

