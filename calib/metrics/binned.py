"""Binned calibration errors of the top label (ECE, MCE, AdaECE), classwise ECE and the
per-bin data of a reliability diagram.

Every estimator is one bin index per sample (:func:`bin_index`: ``torch.bucketize``
against the edges) and one weighted bincount of the per-bin totals (:func:`bin_totals`),
in float64 on the inputs' device; the formula then reads the totals.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from .._checks import ArrayLike
from ._inputs import check_closed, check_n_bins, checked, checked_confidence, width

Tensor = torch.Tensor
Closed = Literal["right", "left"]

# Entries of (N, K) binned at once by classwise ECE (bounds the memory of its temporaries);
# on the CPU at most _CPU_BLOCK, so a block's temporaries stay in the cache.
_BLOCK = 1 << 22
_CPU_BLOCK = 1 << 16
# Classwise ECE bins only the entries above the first bin on the CPU when K exceeds this
# many times n_bins (measured: it pays from about K = 50 at 15 bins; benchmarks/metrics.py).
_SPARSE_CLASSES = 4


def bin_index(x: Tensor, n_bins: int, closed: Closed = "right") -> Tensor:
    """Equal-width bin of every entry of ``x`` among ``n_bins`` bins of [0, 1] (int64).

    The edges are ``torch.linspace(0, 1, n_bins + 1)`` in ``x``'s dtype. ``"right"``: bins
    ``(lo, hi]``, a value of exactly 0 in the first bin; ``"left"``: bins ``[lo, hi)``, a
    value of exactly 1 in the last bin. Values outside [0, 1] go to the end bins.
    """
    inner = torch.linspace(0, 1, n_bins + 1, dtype=x.dtype, device=x.device)[1:-1]
    return torch.bucketize(x.contiguous(), inner, right=closed == "left")


def bin_totals(bins: Tensor, n_bins: int, correct: Tensor, conf: Tensor) -> Tensor:
    """``(3, n_bins)`` float64: per bin the count, the hits ``sum pi_i`` and the confidence ``sum c_i``.

    ``bins`` (N,) in ``[0, n_bins)`` (e.g. :func:`bin_index`), ``correct`` (N,) 0/1 and
    ``conf`` (N,) the forecasts (for classwise ECE: ``1[y_i = k]`` and ``p_ik``). One
    weighted bincount per row; ``index_add_`` rather than ``torch.bincount``, which reads
    the largest bin on the host to size its output (a sync on a GPU).
    """
    totals = torch.zeros(3, n_bins, dtype=torch.float64, device=bins.device)
    for row, weight in zip(totals, (torch.ones_like(conf), correct, conf)):
        row.index_add_(0, bins, weight.double())
    return totals


@torch.no_grad()
def ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right",
        validate: bool = True) -> float:
    """Expected calibration error of the top label over ``n_bins`` equal-width bins.

    ``ECE = sum_m |B_m|/N |acc(B_m) - conf(B_m)| = (1/N) sum_m |sum_{i in B_m} (pi_i - c_i)|``
    (Naeini et al. 2015; Guo et al. 2017; Mukhoti et al. (2020) section 2), with ``B_m`` the
    samples whose confidence ``c_i`` falls in bin ``m``. ``closed`` picks the bin
    convention (package docstring); ``validate=False`` skips the checks of the values.
    Example (the parity numbers of CONTRIBUTING.md, "Conventions every layer shares"):
    confidences ``[.25, .3, .5, .6, 1, .9]``, correctness ``[0, 1, 1, 0, 1, 0]``, 4 bins:
    0.491667 with ``(lo, hi]`` and 0.241667 with ``[lo, hi)``.
    """
    n_bins, closed = check_n_bins(n_bins), check_closed(closed)
    c = checked(probs, labels, validate=validate)
    _, hits, conf = bin_totals(bin_index(c.conf, n_bins, closed), n_bins, c.correct, c.conf)
    return c.result((hits - conf).abs().sum() / c.conf.numel())[0]


@torch.no_grad()
def mce(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right",
        validate: bool = True) -> float:
    """Maximum calibration error ``max_m |acc(B_m) - conf(B_m)|`` over the non-empty bins.

    Naeini et al. (2015); Mukhoti et al. (2020) section 2. Same bins as :func:`ece`;
    MCE >= ECE (ECE is a weighted mean of the same gaps).
    """
    n_bins, closed = check_n_bins(n_bins), check_closed(closed)
    c = checked(probs, labels, validate=validate)
    counts, hits, conf = bin_totals(bin_index(c.conf, n_bins, closed), n_bins, c.correct, c.conf)
    return c.result(torch.where(counts > 0, (hits - conf).abs() / counts.clamp_min(1), 0.0).max())[0]


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
    bins = torch.bucketize(conf.contiguous(), _adaptive_edges(conf, n_bins)[1:-1])  # (lo, hi] bins
    _, hits, conf_sum = bin_totals(bins, n_bins, correct, conf)
    return (hits - conf_sum).abs().sum() / conf.numel()


@torch.no_grad()
def adaece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, validate: bool = True) -> float:
    """Adaptive ECE: the ECE formula over ``n_bins`` equal-mass bins (Mukhoti et al. (2020) section 2).

    Edges are the interpolated quantiles of the confidences (:func:`_adaptive_edges`);
    bins are ``(lo, hi]`` with the smallest confidence kept in the first bin (the code of
    Mukhoti et al. drops it). Assigning by value keeps tied confidences together, so the
    metric does not depend on sample order; with many ties the bins are only roughly
    equal in mass.
    """
    n_bins = check_n_bins(n_bins)
    c = checked(probs, labels, validate=validate)
    return c.result(_adaece_of(c.conf, c.correct, n_bins))[0]


@torch.no_grad()
def adaece_from_confidence(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15, *,
                           validate: bool = True) -> float:
    """:func:`adaece` of forecasts ``f_i`` with outcomes ``o_i`` that are not a top label.

    ``(1/N) sum_m |sum_{i in B_m} (o_i - f_i)|`` over the same equal-mass bins of the
    ``f_i`` (Mukhoti et al. (2020) section 2). ``confidence`` (N,) in [0, 1], ``correct``
    (N,) booleans or 0/1 integers; ``adaece(p, y)`` equals it on the top label of ``p``
    and, e.g., the probability of the positive class with ``y == 1`` is the positive-class
    AdaECE of a binary classifier.
    """
    n_bins = check_n_bins(n_bins)
    c, ok = checked_confidence(confidence, correct, validate=validate)
    return float(_adaece_of(c, ok, n_bins))


def _classwise_of(p: Tensor, y: Tensor, n_bins: int, closed: str) -> Tensor:
    """``(1/(N K)) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)|`` from :func:`_classwise_totals`."""
    hits, p_sum = _classwise_totals(p, y, n_bins, closed)
    return (hits - p_sum).abs().sum() / p.numel()


def _classwise_totals(p: Tensor, y: Tensor, n_bins: int, closed: str) -> Tensor:
    """``(2, K n_bins)`` float64: per (class ``k``, bin ``m``) cell ``k n_bins + m`` the hits
    ``sum_{i in B_km} 1[y_i = k]`` and the mass ``sum_{i in B_km} p_ik`` of classwise ECE.

    The hits touch one entry a row (the label's), so they cost O(N); the mass reads all
    N K entries (:func:`_mass_dense`, or :func:`_mass_sparse` on the CPU for many classes).
    """
    k = p.shape[1]
    inner = torch.linspace(0, 1, n_bins + 1, dtype=p.dtype, device=p.device)[1:-1]
    right = closed == "left"
    label_p = p.gather(1, y[:, None]).squeeze(1)
    totals = torch.zeros(2, k * n_bins, dtype=torch.float64, device=p.device)
    totals[0].index_add_(0, torch.bucketize(label_p, inner, right=right) + y * n_bins,
                         torch.ones_like(label_p, dtype=torch.float64))
    sparse = p.device.type == "cpu" and k > _SPARSE_CLASSES * n_bins
    (_mass_sparse if sparse else _mass_dense)(p, inner, right, totals[1])
    return totals


def _mass_dense(p: Tensor, inner: Tensor, right: bool, mass: Tensor) -> None:
    """Add every entry ``p_ik`` to its cell of ``mass`` (K n_bins,), a block of rows at a time."""
    k, n_bins = p.shape[1], inner.numel() + 1
    offsets = torch.arange(k, device=p.device) * n_bins
    rows = max(1, (_BLOCK if p.device.type != "cpu" else min(_BLOCK, _CPU_BLOCK)) // k)
    for block in p.split(rows):
        mass.index_add_(0, (torch.bucketize(block, inner, right=right) + offsets).view(-1), block.reshape(-1).double())


def _mass_sparse(p: Tensor, inner: Tensor, right: bool, mass: Tensor) -> None:
    """:func:`_mass_dense` with the binning only where it is needed.

    The column sums (float64) give each class's total; only the entries above the first
    bin's upper edge are binned and added to their cells, and the first bin takes what
    they leave of the total. A row on the simplex holds at most ``n_bins`` such entries,
    so the binning work does not grow with K (any other row is still right, only slower);
    what remains per entry is one read for the sums and one for the selection, in
    cache-sized blocks. Selecting reads the number of entries on the host (a sync on a
    GPU), hence the CPU only. The first bin's mass differs from :func:`_mass_dense`'s by
    rounding alone (float64).
    """
    k, n_bins = p.shape[1], inner.numel() + 1
    offsets = torch.arange(k, device=p.device) * n_bins
    column = torch.zeros(k, dtype=torch.float64, device=p.device)
    for block in p.split(max(1, min(_BLOCK, _CPU_BLOCK) // k)):
        column += block.sum(0, dtype=torch.float64)
        if n_bins > 1:
            flat = block.reshape(-1)
            idx = (flat >= inner[0] if right else flat > inner[0]).nonzero().squeeze(1)
            value = flat.index_select(0, idx)
            cells = torch.bucketize(value, inner, right=right) + offsets.index_select(0, idx % k)
            mass.index_add_(0, cells, value.double())
    grid = mass.view(k, n_bins)
    grid[:, 0] = column - grid[:, 1:].sum(1)


@torch.no_grad()
def classwise_ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right",
                  validate: bool = True) -> float:
    """Classwise ECE ``(1/K) sum_k ECE(p_{.k}, 1[y = k])`` (Kull et al. 2019; Nixon et al. 2019;
    Mukhoti et al. (2020) section 2).

    Each class ``k`` bins the probability ``p_ik`` of every sample (not only the top
    label) and compares the bin's mean ``p_ik`` with the frequency of ``y_i = k``:
    ``(1/K) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)| / N``. ``K`` is the width of
    ``probs``, so classes absent from ``labels`` still count.
    """
    n_bins, closed = check_n_bins(n_bins, cells=width(probs)), check_closed(closed)
    c = checked(probs, labels, validate=validate, top_label=False)
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
    counts, hits, conf_sum = bin_totals(bin_index(conf, n_bins, closed), n_bins, correct, conf).cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(counts > 0, hits / counts, np.nan)
        cnf = np.where(counts > 0, conf_sum / counts, np.nan)
    for a in (acc, cnf):
        a.setflags(write=False)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype).double().numpy()
    return BinStats(edges, counts.astype(np.int64), acc, cnf, closed)


@torch.no_grad()
def bin_stats(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, closed: Closed = "right",
              validate: bool = True) -> BinStats:
    """Counts, accuracy and mean confidence per equal-width bin of the top-label confidence.

    The data of a reliability diagram (Guo et al. 2017; Wang & Golebiowski (2024) Fig. 2).
    ``bin_stats(...).ece`` equals :func:`ece` with the same arguments.
    """
    n_bins, closed = check_n_bins(n_bins), check_closed(closed)
    c = checked(probs, labels, validate=validate)
    c.verify()
    return _stats(c.conf, c.correct, n_bins, closed)


@torch.no_grad()
def bin_stats_from_confidence(
    confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15, *, closed: Closed = "right", validate: bool = True
) -> BinStats:
    """:func:`bin_stats` for confidences that are not the max of a probability vector.

    ``confidence`` (N,) in [0, 1] and ``correct`` (N,) booleans or 0/1 integers, e.g. the
    output of :class:`calib.posthoc.HistogramBinning` with the unchanged predictions'
    correctness. ``.ece`` then gives the ECE of those confidences. ``validate=False``
    skips the checks of the values.
    """
    n_bins, closed = check_n_bins(n_bins), check_closed(closed)
    c, ok = checked_confidence(confidence, correct, validate=validate)
    return _stats(c, ok, n_bins, closed)
