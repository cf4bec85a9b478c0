"""Reliability diagrams, confidence histograms and binned metrics against the bin count.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (so
nothing is shown or kept in global state; safe under the Agg backend). Pass ``ax`` to
draw into an existing Axes, e.g. one panel of a grid.

Reliability diagram (Guo et al. 2017; Wang & Golebiowski 2024, Fig. 2): the accuracy of each equal-width
confidence bin as a bar, the gap between it and the bin's mean confidence shaded, the
diagonal ``accuracy = confidence`` dashed (a perfectly calibrated model's bars reach it),
and, beneath, the share of samples per bin. ECE against the number of bins is Wang & Golebiowski (2024), Fig. 5.

How far from the diagonal is too far? :func:`reliability_intervals` answers by resampling,
in two ways a diagram can show (``band=`` of :func:`reliability_diagram` and
:func:`reliability_diagrams`): a *consistency band*, where the bars of a perfectly
calibrated model with the same confidences would fall (Bröcker & Smith 2007), and
*bootstrap intervals*, how much each bar moves when the test set is drawn again.
"""
from __future__ import annotations

import textwrap
from typing import Mapping, Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .. import metrics
from .._checks import ArrayLike, check_labels, check_positive_int, check_probs
from ..metrics import FIG5_BINS, BinStats
from .palette import series_color

__all__ = [
    "reliability_diagram",
    "reliability_diagrams",
    "reliability_intervals",
    "plot_bin_stats",
    "confidence_histogram",
    "ece_vs_bins",
]

_BAR = "#4878a8"
# The gap is drawn as red hatching with no fill: a translucent red fill over the blue
# accuracy bar turned purple where the model is under-confident, a colour the legend never
# showed, and an opaque fill would hide the top of the bar. Hatching reads the same over
# white (over-confident bins) and over blue (under-confident bins), as in the legend. The
# histogram marks the mean confidence in the same red.
_GAP = "#c0392b"
_GAP_FACE = "none"
_FONT = 9  # the smallest font of any figure in the book (points)


# --------------------------------------------------------------------------- resampled intervals

BANDS = ("consistency", "bootstrap")
_BAND = "0.55"  # grey: a reference like the diagonal, not a series
_BLOCK = 1 << 22  # resampled entries (resamples x N) per block: a few temporaries of ~32 MB each


def _top_label(probs: ArrayLike, labels: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-label confidence and correctness, the first maximum winning ties (as :mod:`calib.metrics`)."""
    p = check_probs(probs, "probs")
    if p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    y = check_labels(labels, p.shape[0], p.shape[1], "labels").to(p.device)
    pred = p.argmax(dim=1)
    return p.gather(1, pred[:, None]).squeeze(1), pred == y


def _bin_means(bins: torch.Tensor, values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Per-row, per-bin mean of ``values`` ``(R, N)`` over bin indices ``bins`` ``(R, N)``:
    ``(R, n_bins)``, NaN where a row has no sample in a bin. One bincount for all rows."""
    rows = bins.shape[0]
    flat = (bins + n_bins * torch.arange(rows, device=bins.device)[:, None]).reshape(-1)
    sums = torch.bincount(flat, weights=values.reshape(-1).double(), minlength=rows * n_bins)
    counts = torch.bincount(flat, minlength=rows * n_bins)
    return (sums / counts).view(rows, n_bins)


def _check_interval_args(method: str, n_resamples: int, level: float, seed: int, closed: str) -> int:
    if method not in BANDS:
        raise ValueError(f"method must be one of {', '.join(BANDS)}, got {method!r}")
    if closed not in ("right", "left"):
        raise ValueError(f'closed must be "right" or "left", got {closed!r}')
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return check_positive_int(n_resamples, "n_resamples", minimum=2)


@torch.no_grad()
def reliability_intervals(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins: int = 15,
    *,
    method: str = "consistency",
    n_resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
    closed: str = "right",
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin ``(low, high)`` of the accuracy of a reliability diagram, by resampling.

    Bins as in :func:`calib.metrics.bin_stats` (``n_bins`` equal-width bins of the
    top-label confidence ``c_i``, ``closed`` convention); ``low``/``high`` are the
    ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the bin's accuracy over
    ``n_resamples`` resamples (5 % and 95 % by default), NaN for a bin no resample filled.

    ``method="consistency"`` (consistency resampling, Bröcker & Smith 2007, "Increasing
    the reliability of reliability diagrams"): keep the confidences, draw new labels
    ``z_i ~ Bernoulli(c_i)`` (correct with probability ``c_i``), i.e. simulate a perfectly
    calibrated model with the same confidences, and record each bin's accuracy
    ``mean(z_i)``. The band is where a calibrated model's bar falls; a bar outside it is
    evidence of miscalibration at that level, not noise. Bröcker & Smith also resample the
    forecasts before drawing labels; here they stay fixed, so the band is conditional on
    the test set's confidences (the bars it checks share them).

    ``method="bootstrap"`` (Efron's percentile bootstrap): draw N samples with replacement
    from ``(c_i, correct_i)`` and record each bin's accuracy; the interval says how much
    the observed bar would move with another test set of the same size.

    Resampling is vectorised (all resamples of a block in one ``bincount``, blocks of
    about 2^22 entries), on the inputs' device, with a ``torch.Generator`` seeded by
    ``seed``: the same inputs and seed give the same intervals on one device.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    n_resamples = _check_interval_args(method, n_resamples, level, seed, closed)
    conf, correct = _top_label(probs, labels)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype, device=conf.device)
    bins = torch.bucketize(conf, edges[1:-1], right=(closed == "left"))
    gen = torch.Generator(device=conf.device).manual_seed(int(seed))
    n = conf.numel()
    block = max(1, _BLOCK // n)
    blocks = []
    for start in range(0, n_resamples, block):
        r = min(block, n_resamples - start)
        if method == "consistency":
            z = torch.rand((r, n), generator=gen, device=conf.device, dtype=conf.dtype) < conf
            blocks.append(_bin_means(bins.expand(r, n), z, n_bins))
        else:
            idx = torch.randint(n, (r, n), generator=gen, device=conf.device)
            blocks.append(_bin_means(bins[idx], correct[idx], n_bins))
    acc = torch.cat(blocks)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=acc.dtype, device=acc.device)
    low, high = torch.nanquantile(acc, q, dim=0).cpu().numpy()
    return low, high


def _check_band(band: str | None) -> tuple[str, ...]:
    if band is None:
        return ()
    if band == "both":
        return BANDS
    if band not in BANDS:
        raise ValueError(f'band must be None, "consistency", "bootstrap" or "both", got {band!r}')
    return (band,)


#: Bins with fewer samples get no consistency band: with a handful of samples the band
#: spans most of [0, 1] and its box reads like a bar.
MIN_BAND_COUNT = 10


def _draw_intervals(ax: Axes, stats: BinStats, probs: ArrayLike, labels: ArrayLike, bands: Sequence[str],
                    min_count: int = MIN_BAND_COUNT, **kw) -> None:
    """Consistency band as grey boxes around the diagonal (bins with at least ``min_count``
    samples), bootstrap intervals as error bars."""
    lo, width, full = stats.edges[:-1], np.diff(stats.edges), stats.counts > 0
    pct = f"{100 * kw.get('level', 0.9):g}%"
    for method in bands:
        low, high = reliability_intervals(probs, labels, stats.n_bins, method=method, closed=stats.closed, **kw)
        if method == "consistency":
            dense = stats.counts >= max(min_count, 1)
            ax.bar(lo[dense], (high - low)[dense], bottom=low[dense], width=width[dense], align="edge",
                   color=_BAND, alpha=0.35, linewidth=0, label=f"{pct} consistency band", zorder=3)
        else:
            acc = stats.accuracy[full]
            # a percentile interval need not contain the observed mean: clip, never a negative bar
            yerr = np.clip(np.stack([acc - low[full], high[full] - acc]), 0, None)
            ax.errorbar((lo + width / 2)[full], acc, yerr=yerr,
                        fmt="none", ecolor="black", elinewidth=1, capsize=2, label=f"{pct} bootstrap interval",
                        zorder=4)


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _draw_bars(ax: Axes, stats: BinStats) -> None:
    lo, hi = stats.edges[:-1], stats.edges[1:]
    width, full = hi - lo, stats.counts > 0
    acc = np.where(full, stats.accuracy, 0.0)
    conf = np.where(full, stats.confidence, 0.0)
    ax.bar(lo, acc, width=width, align="edge", color=_BAR, edgecolor="white", linewidth=0.5, label="accuracy")
    ax.bar(
        lo[full], (conf - acc)[full], bottom=acc[full], width=width[full], align="edge",
        facecolor=_GAP_FACE, edgecolor=_GAP, hatch="///", linewidth=0.8, label="gap to confidence",
    )
    ax.plot([0, 1], [0, 1], "--", color="0.3", linewidth=1, label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1))


def _draw_share(hist: Axes, stats: BinStats, legend: bool) -> None:
    lo, width, full = stats.edges[:-1], np.diff(stats.edges), stats.counts > 0
    share = stats.counts / max(stats.n_samples, 1)
    hist.bar(lo, share, width=width, align="edge", color="0.6", edgecolor="white", linewidth=0.5)
    w = stats.counts[full]
    hist.axvline(float(np.average(stats.accuracy[full], weights=w)), color=_BAR, linewidth=1.5, label="accuracy")
    mean_conf = float(np.average(stats.confidence[full], weights=w))
    hist.axvline(mean_conf, color=_GAP, linestyle="--", linewidth=1.5, label="mean confidence")
    hist.set(xlim=(0, 1), xlabel="confidence")
    # no tick at the top of the share axis: its label would touch the 0.0 of the diagram above
    hist.yaxis.set_major_locator(MaxNLocator(3, prune="upper"))
    hist.tick_params(labelsize=_FONT)
    if legend:
        hist.legend(loc="upper left", fontsize=_FONT, frameon=False)


# Width of an average character of the book's sans-serif font, in ems (DejaVu Sans runs
# 0.55-0.65 em for mixed text; the upper end, so a wrapped line never outgrows its panel).
_CHAR_EM = 0.65


def _wrap(text: str, inches: float, fontsize: float) -> str:
    """``text`` with each line wrapped to fit ``inches`` at ``fontsize`` points (words kept
    whole where they fit; a longer token is split)."""
    chars = max(8, int(inches * 72 / (_CHAR_EM * fontsize)))
    return "\n".join(textwrap.fill(line, chars) if line else line for line in text.split("\n"))


def _axes_inches(ax: Axes, share: float = 0.85) -> float:
    """About the width of ``ax`` in inches once laid out (a share of its present width: the
    layout takes room for tick labels and legends)."""
    return share * ax.get_position().width * ax.figure.get_figwidth()


def _set_title(ax: Axes, text: str, fontsize: float, inches: float | None = None) -> None:
    """``ax``'s title, long lines wrapped to the panel's width (issue 43: clipped at the edge
    of the figure, or running into the next panel's)."""
    ax.set_title(_wrap(text, _axes_inches(ax) if inches is None else inches, fontsize), fontsize=fontsize)


def _title(stats: BinStats, title: str | None, mce: bool = True, narrow: bool = False) -> str:
    """``name``, then the ECE (and MCE: on its own line in a narrow panel)."""
    head = f"{title}\n" if title else ""
    tail = "" if not mce else ("\n" if narrow else ", ") + f"MCE = {100 * stats.mce:.2f}%"
    return f"{head}ECE = {100 * stats.ece:.2f}%{tail}"


def plot_bin_stats(stats: BinStats, *, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Draw a reliability diagram from :class:`calib.metrics.BinStats` (any binning).

    Bars: the accuracy of each bin; hatched: the gap from it to the bin's mean confidence;
    dashed: the diagonal accuracy = confidence. The title ends with the ECE and MCE of
    ``stats``; the panel beneath shows the share of samples in each bin with the overall
    accuracy and mean confidence marked.
    """
    if not isinstance(stats, BinStats):
        raise TypeError(f"stats must be a calib.metrics.BinStats, got {type(stats).__name__}")
    return _diagram(stats, ax, title, None)


def _diagram(stats: BinStats, ax: Axes | None, title: str | None, intervals: tuple | None,
             mce: bool = True) -> Figure:
    """:func:`plot_bin_stats`, with ``intervals = (probs, labels, bands, kw)`` drawn over the bars."""
    if ax is None:
        fig = Figure(figsize=(4.2, 4.8), layout="constrained")
        ax, hist = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 1)})
    else:
        # Under a given Axes the histogram is an inset below it, so it follows the Axes into
        # any grid (leave some room beneath, or save with bbox_inches="tight").
        fig, hist = ax.figure, ax.inset_axes((0.0, -0.37, 1.0, 0.3), sharex=ax)
    _draw_bars(ax, stats)
    if intervals is not None:
        _draw_intervals(ax, stats, *intervals[:3], **intervals[3])
    ax.legend(loc="upper left", fontsize=_FONT, frameon=False)
    ax.set_ylabel("accuracy", fontsize=_FONT)
    _set_title(ax, _title(stats, title, mce), _FONT + 1)
    ax.tick_params(labelbottom=False, labelsize=_FONT)
    _draw_share(hist, stats, legend=True)
    hist.set_ylabel("share", fontsize=_FONT)
    return fig


def reliability_diagrams(
    results: Mapping[str, tuple[ArrayLike, ArrayLike]],
    n_bins: int = 15,
    *,
    closed: str = "right",
    width: float = 7.0,
    band: str | None = None,
    n_resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
    mce: bool = True,
    min_count: int = MIN_BAND_COUNT,
) -> Figure:
    """Reliability diagrams of several models, at most ``width`` inches wide.

    ``results`` maps a model name to ``(probs, labels)``. One panel per model: the
    reliability diagram on top (as :func:`plot_bin_stats`), the share of samples per bin
    beneath; at most three panels a row (four models: two rows of two), so titles and
    ticks stay readable at column width; axes are shared and one legend below the grid
    serves every panel. ``mce=False`` leaves the MCE out of the titles. ``band`` adds
    resampled intervals to every panel, as in :func:`reliability_diagram`; bins with
    fewer than ``min_count`` samples get no consistency band.
    """
    bands = _check_band(band)
    kw = {"n_resamples": n_resamples, "level": level, "seed": seed}
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping name -> (probs, labels)")
    if not 2.0 <= float(width) <= 7.0:
        raise ValueError(f"width must lie in [2, 7] inches, got {width!r}")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0:
        raise ValueError(f"min_count must be an integer >= 0, got {min_count!r}")
    n = len(results)
    cols = n if n <= 3 else (2 if n == 4 else 3)
    rows = -(-n // cols)
    narrow = float(width) / cols < 2.6
    fig = Figure(figsize=(float(width), (4.4 if n > 1 else 4.8) * rows - 0.4 * (rows - 1)), layout="constrained")
    axes = fig.subplots(2 * rows, cols, sharex=True, sharey="row", squeeze=False,
                        gridspec_kw={"height_ratios": (3, 1) * rows})
    for j, (name, pair) in enumerate(results.items()):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"results[{name!r}] must be a (probs, labels) pair")
        stats = metrics.bin_stats(pair[0], pair[1], n_bins, closed=closed)
        top, hist = axes[2 * (j // cols), j % cols], axes[2 * (j // cols) + 1, j % cols]
        _draw_bars(top, stats)
        _draw_intervals(top, stats, pair[0], pair[1], bands, min_count, **kw)
        _set_title(top, _title(stats, name, mce, narrow), _FONT, float(width) / cols - 0.5)
        top.tick_params(labelbottom=False, labelsize=_FONT)
        _draw_share(hist, stats, legend=False)
        if j % cols == 0:
            top.set_ylabel("accuracy", fontsize=_FONT)
            hist.set_ylabel("share", fontsize=_FONT)
    for j in range(n, rows * cols):  # an incomplete last row: no empty frames
        axes[2 * (j // cols), j % cols].set_visible(False)
        axes[2 * (j // cols) + 1, j % cols].set_visible(False)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    h2, l2 = axes[1, 0].get_legend_handles_labels()
    names = [*labels, *("overall " + lab for lab in l2)]
    fig.legend([*handles, *h2], names, loc="outside lower center", ncols=3 + (len(bands) > 1), fontsize=_FONT,
               frameon=False)
    return fig


def reliability_diagram(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins: int = 15,
    *,
    closed: str = "right",
    ax: Axes | None = None,
    title: str | None = None,
    band: str | None = None,
    n_resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
    mce: bool = True,
    min_count: int = MIN_BAND_COUNT,
) -> Figure:
    """Reliability diagram of top-label confidences with a confidence histogram beneath.

    Bins and ECE as in :func:`calib.metrics.bin_stats` / :func:`calib.metrics.ece`
    (``n_bins`` equal-width bins, ``closed`` convention). Returns the Figure.

    ``band`` adds resampled intervals (:func:`reliability_intervals`, ``n_resamples``
    resamples, central ``level``, seeded by ``seed``): ``"consistency"`` draws grey boxes
    around the diagonal where a perfectly calibrated model's bars would fall (Bröcker &
    Smith 2007), ``"bootstrap"`` error bars on the bars (percentile bootstrap), ``"both"``
    both.
    """
    bands = _check_band(band)
    stats = metrics.bin_stats(probs, labels, n_bins, closed=closed)
    kw = {"n_resamples": n_resamples, "level": level, "seed": seed}
    return _diagram(stats, ax, title, (probs, labels, bands, {**kw, "min_count": min_count}), mce)


def confidence_histogram(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins: int = 20,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Histogram of top-label confidences, split into correct and wrong predictions.

    The shape Mukhoti et al. (2020), §3, track during training: an over-confident model piles its
    wrong predictions near confidence 1.
    """
    stats = metrics.bin_stats(probs, labels, n_bins)
    fig, ax = _figure(ax, (5.0, 3.4))
    lo, width = stats.edges[:-1], np.diff(stats.edges)
    right = np.rint(np.nan_to_num(stats.accuracy) * stats.counts)
    wrong = stats.counts - right
    ax.bar(lo, right, width=width, align="edge", color=_BAR, edgecolor="white", label="correct")
    ax.bar(lo, wrong, bottom=right, width=width, align="edge", color=_GAP, edgecolor="white", label="wrong")
    ax.set(xlim=(0, 1), xlabel="confidence", ylabel="samples")
    ax.legend(loc="upper left", fontsize=_FONT, frameon=False)
    if title:
        _set_title(ax, title, _FONT + 1)
    return fig


def ece_vs_bins(
    results: Mapping[str, tuple[ArrayLike, ArrayLike]],
    n_bins_list: Sequence[int] = FIG5_BINS,
    *,
    metric: str = "ece",
    closed: str = "right",
    sece_bandwidth: float | None = 0.01,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """A binned metric against the number of bins for each model (Wang & Golebiowski 2024, Fig. 5).

    ``results`` maps a model name to its ``(probs, labels)``. Each model gets a line of
    :func:`calib.metrics.ece_sweep` over ``n_bins_list`` (log scale) and, when
    ``sece_bandwidth`` is set, a dashed horizontal line at its SECE with the 0/1 correctness
    (:func:`calib.metrics.sece_hard`, the evaluation variant beside binned ECE) in the same colour,
    a reference that has no bin count. Values are shown in percent.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping name -> (probs, labels)")
    fig, ax = _figure(ax, (6.0, 3.8))
    for i, (name, pair) in enumerate(results.items()):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"results[{name!r}] must be a (probs, labels) pair")
        probs, labels = pair
        sweep = metrics.ece_sweep(probs, labels, n_bins_list, metric, closed=closed)
        colour = series_color(name, default=f"C{i % 10}")
        ax.plot(list(sweep), [100 * v for v in sweep.values()], "o-", color=colour, label=f"{name}: {metric}")
        if sece_bandwidth is not None:
            s = metrics.sece_hard(probs, labels, sece_bandwidth)
            ax.axhline(100 * s, color=colour, linestyle="--", linewidth=1, label=f"{name}: SECE (h={sece_bandwidth:g})")
    ax.set_xscale("log")
    ax.set_xlabel("number of bins", fontsize=_FONT)
    ax.set_ylabel(f"{metric.upper()} (%)", fontsize=_FONT)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        _set_title(ax, title, _FONT + 1)
    return fig
