"""What users repeat: a metric for many bin counts, bootstrap intervals, the standard report.

:func:`ece_sweep` and :func:`bootstrap_ci` are vectorised: all bin counts, and all
resamples of ECE/MCE and of the means (accuracy, NLL, Brier), go through one weighted
bincount (:func:`_errors`) or one gather, and a call reads its results back from the
device once.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Callable, Sequence

import numpy as np
import torch

from .._checks import ArrayLike, check_positive_int
from ._inputs import check_closed, check_n_bins, checked, width
from .binned import Closed, _adaece_of, _classwise_of, bin_index, bin_totals, ece, mce
from .scores import _brier_terms, _nll_terms, accuracy, brier_score, nll

Tensor = torch.Tensor

#: Bin counts of Wang & Golebiowski (2024) Fig. 5 (ECE and MCE against the number of bins).
FIG5_BINS = (10, 20, 50, 100, 200, 500, 1000)
_SWEEPABLE = ("ece", "mce", "adaece", "classwise_ece")
# Resampled sample indices held at once (bounds the bootstrap's memory: 2^25 of them
# take about 1 GiB with their cells and weights).
_BOOT_BLOCK = 1 << 25


def _errors(conf: Tensor, correct: Tensor, bin_counts: Sequence[int], closed: str,
            rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """ECE and MCE (:func:`~calib.metrics.ece`, :func:`~calib.metrics.mce`), each ``(R, S)``,
    for each of S bin counts and each of R resamples.

    ``rows`` ``(R, N)`` holds the sample indices of the resamples (None: the data once,
    R = 1). Bin m of bin count s in resample r is cell ``r C + offset_s + m``, with C the
    total of the bin counts, so all the totals are one :func:`~calib.metrics.bin_totals`
    (no Python loop over resamples or bins).
    """
    offsets = [0, *accumulate(bin_counts)]
    cells = torch.stack([bin_index(conf, m, closed) + o for m, o in zip(bin_counts, offsets)])  # (S, N)
    if rows is not None:
        shift = offsets[-1] * torch.arange(rows.shape[0], device=conf.device)[:, None]
        cells, conf, correct = cells[:, rows].add_(shift), conf[rows], correct[rows]  # (S, R, N), (R, N)
    r = 1 if rows is None else rows.shape[0]
    totals = bin_totals(cells.reshape(-1), r * offsets[-1], correct.expand_as(cells).reshape(-1),
                        conf.expand_as(cells).reshape(-1)).view(3, r, offsets[-1])
    errors = []
    for lo, hi in zip(offsets, offsets[1:]):
        counts, hits, confs = totals[:, :, lo:hi]
        errors.append(((hits - confs).abs().sum(1) / conf.shape[-1],
                       torch.where(counts > 0, (hits - confs).abs() / counts.clamp_min(1), 0.0).amax(1)))
    ece_rs, mce_rs = zip(*errors)
    return torch.stack(ece_rs, 1), torch.stack(mce_rs, 1)


@torch.no_grad()
def ece_sweep(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins_list: Sequence[int] = FIG5_BINS,
    metric: str = "ece",
    *,
    closed: Closed = "right",
    validate: bool = True,
) -> dict[int, float]:
    """A binned metric for each bin count in ``n_bins_list``: ``{n_bins: value}``.

    Wang & Golebiowski (2024) Fig. 5 plots ECE and MCE for 10 ... 1000 bins (the default
    list) to show that binned estimates depend on the binning; :func:`~calib.metrics.sece`
    has no such knob. ``metric`` is one of ``"ece"``, ``"mce"``, ``"adaece"``,
    ``"classwise_ece"``. ECE and MCE for all bin counts come from one bincount.
    ``validate=False`` skips the checks of the values.
    """
    if metric not in _SWEEPABLE:
        raise ValueError(f"metric must be one of {', '.join(_SWEEPABLE)}, got {metric!r}")
    if isinstance(n_bins_list, (int, np.integer)) or len(n_bins_list) == 0:
        raise ValueError("n_bins_list must be a non-empty sequence of bin counts")
    cells = width(probs) if metric == "classwise_ece" else 1
    counts = [check_n_bins(b, "n_bins_list entry", cells) for b in n_bins_list]
    check_closed(closed)
    c = checked(probs, labels, validate=validate)
    if metric in ("ece", "mce"):
        return dict(zip(counts, c.result(_errors(c.conf, c.correct, counts, closed)[metric == "mce"][0])))
    if metric == "adaece":
        return dict(zip(counts, c.result(torch.stack([_adaece_of(c.conf, c.correct, b) for b in counts]))))
    return dict(zip(counts, c.result(torch.stack([_classwise_of(c.p, c.y, b, closed) for b in counts]))))


def _resampler(metric_fn: Callable, p: Tensor, y: Tensor, conf: Tensor, correct: Tensor,
               kw: dict) -> Callable[[Tensor], Tensor] | None:
    """For the metrics that resample in one batch, ``rows (B, N) -> values (B,)``
    (``rows=None``: the value on the data themselves, computed as the metric computes it)."""
    means = {accuracy: lambda: correct.double(), nll: lambda: _nll_terms(p, y), brier_score: lambda: _brier_terms(p, y)}
    if metric_fn in means and not kw:
        v = means[metric_fn]()
        return lambda rows: v.mean()[None] if rows is None else v[rows].mean(dim=1)
    if metric_fn in (ece, mce) and set(kw) <= {"n_bins", "closed"}:
        n_bins = check_n_bins(kw.get("n_bins", 15))
        closed = check_closed(kw.get("closed", "right"))
        return lambda rows: _errors(conf, correct, [n_bins], closed, rows)[metric_fn is mce][:, 0]
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
    """Percentile bootstrap interval ``(low, point, high)`` for any metric (Efron 1979).

    ``point = metric_fn(probs, labels, **kw)``; ``n_boot`` replicates resample the N
    samples with replacement (a ``torch.Generator`` on the inputs' device seeded with
    ``seed``, so CPU and GPU draw different resamples); ``low``/``high`` are the
    ``alpha/2`` and ``1 - alpha/2`` quantiles of the replicates. :func:`accuracy`,
    :func:`nll`, :func:`brier_score`, :func:`ece` and :func:`mce` evaluate all replicates
    at once (one gather and one bincount, one host sync per call); any other callable is
    called once per replicate on the same resampled indices, so both give the same numbers.

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
    c = checked(probs, labels)
    n, device = c.p.shape[0], c.p.device
    gen = torch.Generator(device=device).manual_seed(int(seed))
    block = max(1, _BOOT_BLOCK // n)  # usually one block: all replicates at once
    blocks = [torch.randint(n, (min(block, n_boot - s), n), generator=gen, device=device)
              for s in range(0, n_boot, block)]
    batch = _resampler(metric_fn, c.p, c.y, c.conf, c.correct, kw)
    if batch is None:  # any other metric: one call per replicate
        c.verify()
        reps = [float(metric_fn(c.p[r], c.y[r], **kw)) for rows in blocks for r in rows]
        reps = torch.tensor(reps, dtype=torch.float64)
        low, high = (float(torch.quantile(reps, q)) for q in (alpha / 2, 1 - alpha / 2))
        return low, float(metric_fn(c.p, c.y, **kw)), high
    reps = torch.cat([batch(rows) for rows in blocks])
    point = batch(None)
    low, high = (torch.quantile(reps, q) for q in (alpha / 2, 1 - alpha / 2))  # float q: no copy to the device
    low, point, high = c.result(torch.stack([low, point[0], high]))
    return low, point, high


@torch.no_grad()
def summary(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, validate: bool = True) -> dict[str, float]:
    """The standard report of a set of predictions, as written to a run's ``metrics.json``.

    Keys: ``accuracy``, ``nll``, ``brier``, ``ece``, ``adaece``, ``classwise_ece``,
    ``mce`` (bins ``(lo, hi]``, ``n_bins`` of them; 15 as in Mukhoti et al. (2020) and Lin
    et al. (2024)). Inputs are validated (unless ``validate=False``) and the top label
    found once for all of them.
    """
    n_bins = check_n_bins(n_bins, cells=width(probs))
    c = checked(probs, labels, validate=validate)
    e, m = _errors(c.conf, c.correct, [n_bins], "right")
    values = torch.stack([c.correct.double().mean(), _nll_terms(c.p, c.y).mean(), _brier_terms(c.p, c.y).mean(),
                          e[0, 0], _adaece_of(c.conf, c.correct, n_bins), _classwise_of(c.p, c.y, n_bins, "right"),
                          m[0, 0]])
    return dict(zip(("accuracy", "nll", "brier", "ece", "adaece", "classwise_ece", "mce"), c.result(values)))

