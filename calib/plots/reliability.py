"""Reliability diagrams, confidence histograms and binned metrics against the bin count.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (so
nothing is shown or kept in global state; safe under the Agg backend). Pass ``ax`` to
draw into an existing Axes, e.g. one panel of a grid.

Reliability diagram (Guo et al. 2017; 001 Fig. 2): the accuracy of each equal-width
confidence bin as a bar, the gap between it and the bin's mean confidence shaded, the
diagonal ``accuracy = confidence`` dashed (a perfectly calibrated model's bars reach it),
and, beneath, the share of samples per bin. ECE against the number of bins is 001 Fig. 5.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import metrics
from .._checks import ArrayLike
from ..metrics import FIG5_BINS, BinStats

__all__ = ["reliability_diagram", "plot_bin_stats", "confidence_histogram", "ece_vs_bins"]

_BAR = "#4878a8"
_GAP = "#d1495b"


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def plot_bin_stats(stats: BinStats, *, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Draw a reliability diagram from :class:`calib.metrics.BinStats` (any binning).

    The title ends with the ECE (and MCE) of ``stats``; the panel beneath shows the share
    of samples in each bin with the overall accuracy and mean confidence marked.
    """
    if not isinstance(stats, BinStats):
        raise TypeError(f"stats must be a calib.metrics.BinStats, got {type(stats).__name__}")
    if ax is None:
        fig = Figure(figsize=(4.6, 5.6), layout="constrained")
        ax, hist = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 1)})
    else:
        # Under a given Axes the histogram is an inset below it, so it follows the Axes into
        # any grid (leave some room beneath, or save with bbox_inches="tight").
        fig, hist = ax.figure, ax.inset_axes((0.0, -0.37, 1.0, 0.3), sharex=ax)
    lo, hi = stats.edges[:-1], stats.edges[1:]
    width, full = hi - lo, stats.counts > 0
    acc = np.where(full, stats.accuracy, 0.0)
    conf = np.where(full, stats.confidence, 0.0)
    ax.bar(lo, acc, width=width, align="edge", color=_BAR, edgecolor="white", linewidth=0.5, label="accuracy")
    ax.bar(
        lo[full], (conf - acc)[full], bottom=acc[full], width=width[full], align="edge",
        color=_GAP, alpha=0.35, edgecolor=_GAP, hatch="//", linewidth=0.5, label="gap to confidence",
    )
    ax.plot([0, 1], [0, 1], "--", color="0.3", linewidth=1, label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), ylabel="accuracy")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    head = f"{title}\n" if title else ""
    ax.set_title(f"{head}ECE = {100 * stats.ece:.2f}%, MCE = {100 * stats.mce:.2f}%", fontsize=10)
    ax.tick_params(labelbottom=False)

    share = stats.counts / max(stats.n_samples, 1)
    hist.bar(lo, share, width=width, align="edge", color="0.55", edgecolor="white", linewidth=0.5)
    w = stats.counts[full]
    hist.axvline(float(np.average(stats.accuracy[full], weights=w)), color=_BAR, linewidth=1.5, label="accuracy")
    mean_conf = float(np.average(stats.confidence[full], weights=w))
    hist.axvline(mean_conf, color=_GAP, linestyle="--", linewidth=1.5, label="mean confidence")
    hist.set(xlim=(0, 1), xlabel="confidence", ylabel="share")
    hist.legend(loc="upper left", fontsize=7, frameon=False)
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

    The shape 004 section 3 tracks during training: an over-confident model piles its
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
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
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
    """A binned metric against the number of bins for each model (001 Fig. 5).

    ``results`` maps a model name to its ``(probs, labels)``. Each model gets a line of
    :func:`calib.metrics.ece_sweep` over ``n_bins_list`` (log scale) and, when
    ``sece_bandwidth`` is set, a dashed horizontal line at its SECE in the same colour,
    a reference that has no bin count. Values are shown in percent.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping name -> (probs, labels)")
    fig, ax = _figure(ax, (5.6, 3.8))
    for i, (name, pair) in enumerate(results.items()):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"results[{name!r}] must be a (probs, labels) pair")
        probs, labels = pair
        sweep = metrics.ece_sweep(probs, labels, n_bins_list, metric, closed=closed)
        colour = f"C{i % 10}"
        ax.plot(list(sweep), [100 * v for v in sweep.values()], "o-", color=colour, label=f"{name}: {metric}")
        if sece_bandwidth is not None:
            s = metrics.sece(probs, labels, sece_bandwidth)
            ax.axhline(100 * s, color=colour, linestyle="--", linewidth=1, label=f"{name}: SECE (h={sece_bandwidth:g})")
    ax.set_xscale("log")
    ax.set(xlabel="number of bins", ylabel=f"{metric} (%)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig
