"""Figures of the reproduction chapters: curves over epochs, coefficient sweeps, grouped histograms.

``epoch_band_curves``   a metric over training epochs, mean over runs with a min-max band
                        (Wang et al. (2021) Fig. 4: the "optimal ECE" over epochs)
``coefficient_curves``  a metric against a loss's strength coefficient, mean ± std over seeds,
                        one panel per loss (Wang et al. (2021) Fig. 1a-c)
``grouped_histograms``  stacked histograms of one quantity split into groups, one panel per
                        model (Wang et al. (2021) Fig. 5: maximum logits by learned epoch)

Every function returns a matplotlib Figure at most 7 in wide with fonts of at least 9 pt, and
never calls ``plt.show()``. A curve whose label names a loss (``"CE"``, ``"focal γ=3"``) takes
its colour from :mod:`calib.plots.palette`; other series and groups follow matplotlib's
default cycle in the order they are given. Seed-level statistics from tidy tables (points
per seed with intervals, heatmaps) are in :mod:`calib.plots.stats`.
"""
from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .palette import series_color

__all__ = ["epoch_band_curves", "coefficient_curves", "grouped_histograms"]

_MAX_WIDTH = 7.0
_FONT = 9


def _colors() -> list[str]:
    return list(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"])


def _check_mapping(value: object, name: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of label -> data, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def _finite_2d(values: object, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError(f"{name} must be a (runs, epochs) array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or inf values")
    return a


def _band_lines(ax, curves: Mapping[str, object], scale: float, epochs: Sequence[float] | None,
                milestones: Sequence[float] | Mapping[str, Sequence[float]],
                per_epoch: Mapping[str, float], xlabel: str, colors: Mapping[str, str]) -> None:
    for label, values in curves.items():
        color = colors[label]
        a = scale * _finite_2d(values, f"curves[{label!r}]")
        x = np.arange(1, a.shape[1] + 1) if epochs is None else np.asarray(epochs, float)
        if x.shape != (a.shape[1],):
            raise ValueError(f"epochs has {x.size} entries but curves[{label!r}] has "
                             f"{a.shape[1]} evaluations")
        x = x * per_epoch.get(label, 1.0)
        ax.plot(x, a.mean(0), color=color, lw=1.6, label=f"{label} (n={a.shape[0]})")
        if a.shape[0] > 1:
            ax.fill_between(x, a.min(0), a.max(0), color=color, alpha=0.2, lw=0)
        for m in milestones.get(label, ()) if isinstance(milestones, Mapping) else ():
            ax.axvline(m * per_epoch.get(label, 1.0), color=color, ls=":", lw=1)
    for m in () if isinstance(milestones, Mapping) else milestones:
        ax.axvline(m, color="0.5", ls=":", lw=1)
    ax.set_xlabel(xlabel, fontsize=_FONT + 1)
    ax.tick_params(labelsize=_FONT)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=_FONT, frameon=False)


def epoch_band_curves(
    curves: Mapping[str, object],
    *,
    ylabel: str,
    title: str | None = None,
    milestones: Sequence[float] | Mapping[str, Sequence[float]] = (),
    scale: float = 1.0,
    epochs: Sequence[float] | None = None,
    per_epoch: Mapping[str, float] | None = None,
    xlabel: str = "epoch",
) -> Figure:
    """One line per entry: the mean over runs of a per-epoch metric, with a min-max band.

    ``curves[label]`` is a ``(runs, evaluations)`` array; ``epochs`` gives the epoch of
    each evaluation (default 1, 2, ...). ``scale`` multiplies the values (100 for %).
    ``milestones`` draws dotted lines at the learning-rate drops. The style of Wang et
    al. (2021) Fig. 4 (mean of 5 runs, band from min to max). Labels naming a loss get its
    palette colour. ``curves`` may also map panel titles to such mappings: one panel each,
    side by side, on a shared y axis (e.g. one panel per training protocol).

    ``per_epoch[label]`` puts that curve on another x unit, e.g. SGD steps per epoch, so runs
    of different lengths share one axis (name it with ``xlabel``; ``milestones`` are then in
    that unit too). ``milestones`` may instead map a label to its own drops, in its epochs:
    each is drawn in the curve's colour at ``epoch * per_epoch[label]``.
    """
    curves = _check_mapping(curves, "curves")
    per_epoch = dict(per_epoch or {})
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and v > 0 for v in per_epoch.values()):
        raise ValueError(f"per_epoch must map labels to positive numbers, got {per_epoch!r}")
    panels = curves if all(isinstance(v, Mapping) for v in curves.values()) else {title or "": curves}
    fig = Figure(figsize=(min(_MAX_WIDTH, 6.0 if len(panels) == 1 else 3.4 * len(panels)), 3.4),
                 layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
    panels = {name: _check_mapping(panel, f"curves[{name!r}]") for name, panel in panels.items()}
    cycle = _colors()  # a label keeps its colour in every panel, in the order labels first appear
    labels = dict.fromkeys(label for panel in panels.values() for label in panel)
    colors = {label: series_color(str(label), default=cycle[i % len(cycle)]) for i, label in enumerate(labels)}
    for ax, (name, panel) in zip(axes, panels.items()):
        _band_lines(ax, panel, scale, epochs, milestones, per_epoch, xlabel, colors)
        if name:
            ax.set_title(name, fontsize=_FONT + 1)
    axes[0].set_ylabel(ylabel, fontsize=_FONT + 1)
    return fig


def coefficient_curves(
    panels: Mapping[str, Mapping[str, tuple[object, object, object]]],
    *,
    ylabel: str,
    xlabels: Mapping[str, str] | None = None,
    logx: Sequence[str] = (),
    scale: float = 1.0,
    ncols: int = 3,
) -> Figure:
    """One panel per loss: a metric against the loss's coefficient, mean ± std over seeds.

    ``panels[loss][series] = (coefficients, means, stds)``; each series (e.g. "before TS",
    "after TS") gets one colour, the same in every panel. ``xlabels[loss]`` names the
    coefficient (default: the panel name); panels named in ``logx`` get a log x axis.
    The layout of Wang et al. (2021) Fig. 1a-c.
    """
    panels = _check_mapping(panels, "panels")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be an int >= 1, got {ncols!r}")
    xlabels = dict(xlabels or {})
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    width = min(_MAX_WIDTH, 2.4 * ncols)
    fig = Figure(figsize=(width, 2.5 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    series_names: list[str] = []
    for ax, (name, series) in zip(axes, panels.items()):
        series = _check_mapping(series, f"panels[{name!r}]")
        for s_name, triple in series.items():
            if s_name not in series_names:
                series_names.append(s_name)
            color = _colors()[series_names.index(s_name) % len(_colors())]
            xs, mean, std = (np.asarray(v, dtype=float) for v in triple)
            if not (xs.shape == mean.shape == std.shape) or xs.ndim != 1 or xs.size == 0:
                raise ValueError(f"panels[{name!r}][{s_name!r}] needs three 1-D arrays of one length")
            ax.errorbar(xs, scale * mean, yerr=scale * std, color=color, marker="o", ms=4, lw=1.4,
                        capsize=3, label=s_name)
        if name in logx:
            ax.set_xscale("log")
        ax.set_title(name, fontsize=_FONT + 1)
        ax.set_xlabel(xlabels.get(name, "coefficient"), fontsize=_FONT)
        ax.set_ylabel(ylabel, fontsize=_FONT)
        ax.tick_params(labelsize=_FONT)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=max(1, len(labels)), fontsize=_FONT,
               frameon=False)
    return fig


def grouped_histograms(
    panels: Mapping[str, tuple[object, object]],
    *,
    group_labels: Sequence[str],
    xlabel: str,
    bins: int = 30,
    ncols: int = 3,
) -> Figure:
    """Stacked histograms, one panel per entry, one colour per group.

    ``panels[name] = (values, groups)``: a 1-D array of values and an integer array of the
    same length giving each value's group in ``0 .. len(group_labels) - 1``. All panels
    share the bin edges, so their spreads compare directly (Wang et al. (2021) Fig. 5).
    A panel with no values (e.g. no test sample learned by a short run) is drawn empty,
    marked "no samples".
    """
    panels = _check_mapping(panels, "panels")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an int >= 1, got {bins!r}")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be an int >= 1, got {ncols!r}")
    n_groups = len(group_labels)
    if n_groups < 1:
        raise ValueError("group_labels must name at least one group")
    data = {}
    for name, (values, groups) in panels.items():
        v, g = np.asarray(values, dtype=float).ravel(), np.asarray(groups).ravel()
        if v.shape != g.shape:
            raise ValueError(f"panels[{name!r}]: values and groups must be of one length")
        if not np.isfinite(v).all():
            raise ValueError(f"panels[{name!r}]: values contain NaN or inf")
        if v.size and (not np.issubdtype(g.dtype, np.integer) or g.min() < 0 or g.max() >= n_groups):
            raise ValueError(f"panels[{name!r}]: groups must be integers in [0, {n_groups})")
        data[name] = (v, g)
    filled = [v for v, _ in data.values() if v.size]
    lo = min((v.min() for v in filled), default=0.0)
    hi = max((v.max() for v in filled), default=1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    ncols = min(ncols, len(data))
    nrows = -(-len(data) // ncols)
    fig = Figure(figsize=(min(_MAX_WIDTH, 2.4 * ncols), 2.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True).ravel()
    colors = _colors()
    for ax, (name, (v, g)) in zip(axes, data.items()):
        stacks = [v[g == k] for k in range(n_groups)]
        if not v.size:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes,
                    fontsize=_FONT)
        ax.hist(stacks, bins=edges, stacked=True, color=[colors[k % len(colors)] for k in range(n_groups)],
                label=list(group_labels))
        ax.set_title(name, fontsize=_FONT + 1)
        ax.set_xlabel(xlabel, fontsize=_FONT)
        ax.tick_params(labelsize=_FONT)
        ax.grid(alpha=0.3)
    for ax in axes[len(data):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(n_groups, 4), fontsize=_FONT,
               frameon=False)
    return fig
