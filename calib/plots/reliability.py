"""Reliability diagrams, confidence histograms and binned metrics against the bin count.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (so
nothing is shown or kept in global state; safe under the Agg backend). Pass ``ax`` to
draw into an existing Axes, e.g. one panel of a grid.

Reliability diagram (Guo et al. 2017; Wang & Golebiowski 2024, Fig. 2): the accuracy of each equal-width
confidence bin as a bar, the gap between it and the bin's mean confidence shaded, the
diagonal ``accuracy = confidence`` dashed (a perfectly calibrated model's bars reach it),
and, beneath, the share of samples per bin. ECE against the number of bins is Wang & Golebiowski (2024), Fig. 5.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import metrics
from .._checks import ArrayLike
from ..metrics import FIG5_BINS, BinStats
from .palette import series_color

__all__ = ["reliability_diagram", "reliability_diagrams", "plot_bin_stats", "confidence_histogram", "ece_vs_bins"]

_BAR = "#4878a8"
# The gap is drawn as red hatching with no fill: a translucent red fill over the blue
# accuracy bar turned purple where the model is under-confident, a colour the legend never
# showed, and an opaque fill would hide the top of the bar. Hatching reads the same over
# white (over-confident bins) and over blue (under-confident bins), as in the legend. The
# histogram marks the mean confidence in the same red.
_GAP = "#c0392b"
_GAP_FACE = "none"
_FONT = 9  # the smallest font of any figure in the book (points)


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _draw_bars(ax: Axes, stats: BinStats, legend: bool) -> None:
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
    if legend:
        ax.legend(loc="upper left", fontsize=_FONT, frameon=False)


def _draw_share(hist: Axes, stats: BinStats, legend: bool) -> None:
    lo, width, full = stats.edges[:-1], np.diff(stats.edges), stats.counts > 0
    share = stats.counts / max(stats.n_samples, 1)
    hist.bar(lo, share, width=width, align="edge", color="0.6", edgecolor="white", linewidth=0.5)
    w = stats.counts[full]
    hist.axvline(float(np.average(stats.accuracy[full], weights=w)), color=_BAR, linewidth=1.5, label="accuracy")
    mean_conf = float(np.average(stats.confidence[full], weights=w))
    hist.axvline(mean_conf, color=_GAP, linestyle="--", linewidth=1.5, label="mean confidence")
    hist.set(xlim=(0, 1), xlabel="confidence")
    hist.tick_params(labelsize=_FONT)
    if legend:
        hist.legend(loc="upper left", fontsize=_FONT, frameon=False)


def _title(stats: BinStats, title: str | None) -> str:
    head = f"{title}\n" if title else ""
    return f"{head}ECE = {100 * stats.ece:.2f}%, MCE = {100 * stats.mce:.2f}%"


def plot_bin_stats(stats: BinStats, *, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Draw a reliability diagram from :class:`calib.metrics.BinStats` (any binning).

    Bars: the accuracy of each bin; hatched: the gap from it to the bin's mean confidence;
    dashed: the diagonal accuracy = confidence. The title ends with the ECE and MCE of
    ``stats``; the panel beneath shows the share of samples in each bin with the overall
    accuracy and mean confidence marked.
    """
    if not isinstance(stats, BinStats):
        raise TypeError(f"stats must be a calib.metrics.BinStats, got {type(stats).__name__}")
    if ax is None:
        fig = Figure(figsize=(4.2, 4.8), layout="constrained")
        ax, hist = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 1)})
    else:
        # Under a given Axes the histogram is an inset below it, so it follows the Axes into
        # any grid (leave some room beneath, or save with bbox_inches="tight").
        fig, hist = ax.figure, ax.inset_axes((0.0, -0.37, 1.0, 0.3), sharex=ax)
    _draw_bars(ax, stats, legend=True)
    ax.set_ylabel("accuracy", fontsize=_FONT)
    ax.set_title(_title(stats, title), fontsize=_FONT + 1)
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
) -> Figure:
    """Reliability diagrams of several models side by side, at most ``width`` inches wide.

    ``results`` maps a model name to ``(probs, labels)``. One column per model: the
    reliability diagram on top (as :func:`plot_bin_stats`), the share of samples per bin
    beneath; axes are shared, and one legend below the grid serves every panel, so the
    panels stay wide enough to read at column width.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping name -> (probs, labels)")
    if not 2.0 <= float(width) <= 7.0:
        raise ValueError(f"width must lie in [2, 7] inches, got {width!r}")
    n = len(results)
    fig = Figure(figsize=(float(width), 4.4 if n > 1 else 4.8), layout="constrained")
    axes = fig.subplots(2, n, sharex=True, sharey="row", squeeze=False,
                        gridspec_kw={"height_ratios": (3, 1)})
    for j, (name, pair) in enumerate(results.items()):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"results[{name!r}] must be a (probs, labels) pair")
        stats = metrics.bin_stats(pair[0], pair[1], n_bins, closed=closed)
        top, hist = axes[0, j], axes[1, j]
        _draw_bars(top, stats, legend=False)
        top.set_title(_title(stats, name), fontsize=_FONT)
        top.tick_params(labelbottom=False, labelsize=_FONT)
        _draw_share(hist, stats, legend=False)
    axes[0, 0].set_ylabel("accuracy", fontsize=_FONT)
    axes[1, 0].set_ylabel("share", fontsize=_FONT)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    h2, l2 = axes[1, 0].get_legend_handles_labels()
    names = [*labels, *("overall " + lab for lab in l2)]
    fig.legend([*handles, *h2], names, loc="outside lower center", ncols=3, fontsize=_FONT, frameon=False)
    return fig


def reliability_diagram(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins: int = 15,
    *,
    closed: str = "right",
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Reliability diagram of top-label confidences with a confidence histogram beneath.

    Bins and ECE as in :func:`calib.metrics.bin_stats` / :func:`calib.metrics.ece`
    (``n_bins`` equal-width bins, ``closed`` convention). Returns the Figure.
    """
    return plot_bin_stats(metrics.bin_stats(probs, labels, n_bins, closed=closed), ax=ax, title=title)


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
        ax.set_title(title, fontsize=_FONT + 1)
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
    ``sece_bandwidth`` is set, a dashed horizontal line at its SECE in the same colour,
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
            s = metrics.sece(probs, labels, sece_bandwidth)
            ax.axhline(100 * s, color=colour, linestyle="--", linewidth=1, label=f"{name}: SECE (h={sece_bandwidth:g})")
    ax.set_xscale("log")
    ax.set_xlabel("number of bins", fontsize=_FONT)
    ax.set_ylabel(f"{metric.upper()} (%)", fontsize=_FONT)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        ax.set_title(title, fontsize=_FONT + 1)
    return fig
