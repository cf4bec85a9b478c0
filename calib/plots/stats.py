"""Seed-level statistical figures, drawn with seaborn from tidy tables.

``metric_across_seeds``       a metric per loss: every seed as a point, mean ± confidence interval
``confidence_distributions``  top-label confidence per loss, correct against wrong (split violins)
``sweep_heatmap``             a metric over two hyper-parameters, averaged over seeds
``interval_panels``           a value per x and series in panels, with bootstrap bounds or mean ± std

Inputs are *tidy*: one row per observation, one column per variable, as a pandas
DataFrame or a list of dict rows, e.g. ``{"loss": "focal", "seed": 1, "ece": 0.021}``;
:func:`confidence_frame` turns ``{loss: (probs, labels)}`` into such a table. Losses take
their colours from :mod:`calib.plots.palette`. Every function returns a matplotlib
Figure built without pyplot, at most 7 in wide with fonts of at least 9 pt (as after
:func:`calib.plots.book_style`), or draws into ``ax``.

seaborn and pandas come with the ``plots`` extra (``pip install "torch-calib[plots]"``); they
are imported when a figure is drawn, so ``import calib.plots`` works without them.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter
from scipy import stats as _scipy_stats

from .._checks import ArrayLike, check_labels, check_probs
from .._optional import need
from .palette import series_color

__all__ = [
    "metric_across_seeds",
    "confidence_distributions",
    "confidence_frame",
    "sweep_heatmap",
    "t_interval",
    "interval_panels",
    "detectable_differences",
]

_FONT = 9  # smallest font in a figure (points)
_MAX_WIDTH = 7.0
_CORRECT, _WRONG = "#4878a8", "#c0392b"  # as in confidence_histogram
_ERRORBARS = ("t", "sd", "se", "ci")


def _libs() -> tuple[Any, Any]:
    need("plots", "calib.plots.stats", "seaborn", "pandas")
    import pandas as pd
    import seaborn as sns
    return pd, sns


def _frame(data: Any, columns: Sequence[str], name: str = "data") -> Any:
    """``data`` (DataFrame or list of dict rows) as a DataFrame holding ``columns``."""
    pd, _ = _libs()
    if isinstance(data, pd.DataFrame):
        frame = data
    elif isinstance(data, (list, tuple)) and all(isinstance(r, Mapping) for r in data):
        frame = pd.DataFrame(list(data))
    else:
        raise TypeError(f"{name} must be a pandas DataFrame or a list of dict rows, got {type(data).__name__}")
    if frame.empty:
        raise ValueError(f"{name} has no rows")
    if missing := [c for c in columns if c not in frame.columns]:
        raise ValueError(f"{name} has no column {missing[0]!r}; columns: {', '.join(map(str, frame.columns))}")
    return frame


def _numeric(frame: Any, column: str, name: str = "data") -> Any:
    """The column as float, refusing text, NaN and inf."""
    try:
        values = frame[column].astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}[{column!r}] must hold numbers") from None
    if not np.isfinite(values.to_numpy()).all():
        raise ValueError(f"{name}[{column!r}] contains NaN or inf values")
    return values


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(min(size[0], _MAX_WIDTH), size[1]), layout="constrained")
    return fig, fig.add_subplot()


def _order(frame: Any, by: str, order: Sequence[str] | None) -> list:
    present = list(dict.fromkeys(frame[by]))
    if order is None:
        return present
    if unknown := [o for o in order if o not in present]:
        raise ValueError(f"order names {unknown[0]!r}, which is not in data[{by!r}]")
    return list(order)


def _colours(names: Sequence) -> dict:
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return {n: series_color(str(n), default=cycle[i % len(cycle)]) for i, n in enumerate(names)}


def _metric_label(metric: str, scale: float) -> str:
    """``"ECE (%)"`` for a short metric name shown in percent, else the name as given."""
    name = metric.upper() if len(metric) <= 5 and metric.isalpha() else metric
    return f"{name} (%)" if scale == 100 else name


def _finish(ax: Axes, title: str | None) -> None:
    ax.tick_params(labelsize=_FONT)
    ax.xaxis.label.set_size(_FONT)
    ax.yaxis.label.set_size(_FONT)
    if title:
        ax.set_title(title, fontsize=_FONT + 1)


def t_interval(values: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean: ``m ± t_{(1+level)/2, n-1} s / sqrt(n)``.

    ``s`` is the sample standard deviation (``n - 1`` in the denominator). The interval
    for a mean over a handful of seeds, where a bootstrap over 3–5 values is too narrow
    (Student 1908). With one value there is no interval: ``(nan, nan)``.
    """
    v = np.asarray(values, dtype=float).ravel()
    if v.size < 2:
        return float("nan"), float("nan")
    half = _scipy_stats.t.ppf((1 + level) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return float(v.mean() - half), float(v.mean() + half)


def _errorbar(errorbar: str, level: float) -> Any:
    if errorbar not in _ERRORBARS:
        raise ValueError(f"errorbar must be one of {', '.join(_ERRORBARS)}, got {errorbar!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if errorbar == "t":
        return lambda v: t_interval(v, level)
    return ("ci", 100 * level) if errorbar == "ci" else (errorbar, 1)


def metric_across_seeds(
    data: Any,
    metric: str = "ece",
    *,
    by: str = "loss",
    errorbar: str = "t",
    level: float = 0.95,
    scale: float = 100.0,
    ylabel: str | None = None,
    order: Sequence[str] | None = None,
    seed: int = 0,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """A metric per loss across seeds: one point per seed, the mean with an interval beside.

    ``data`` holds one row per run with columns ``by`` (the loss) and ``metric``; a
    ``seed`` column, when present, must not repeat within a loss. Values are multiplied
    by ``scale`` (100: percent). The interval of the mean is ``errorbar``:

    * ``"t"`` (default): Student-t interval at ``level`` (:func:`t_interval`), right for
      the 3–10 seeds of a training study;
    * ``"ci"``: seaborn's percentile bootstrap at ``level`` (seeded by ``seed``);
    * ``"sd"`` / ``"se"``: ± one standard deviation / standard error.

    Seeds are seaborn strip points in the loss's palette colour, the mean a black diamond
    with the interval as a capped bar (``pointplot``); ``order`` fixes the order of the
    losses.
    """
    _, sns = _libs()
    frame = _frame(data, [by, metric])
    est = _errorbar(errorbar, level)
    if "seed" in frame.columns and frame.duplicated([by, "seed"]).any():
        loss, s = frame.loc[frame.duplicated([by, "seed"]), [by, "seed"]].iloc[0]
        raise ValueError(f"data has two rows for {by} {loss!r}, seed {s}")
    frame = frame.assign(_value=scale * _numeric(frame, metric))
    names = _order(frame, by, order)
    colours = _colours(names)
    fig, ax = _figure(ax, (1.6 + 0.75 * len(names), 3.4))
    sns.stripplot(frame, x=by, y="_value", hue=by, order=names, hue_order=names, palette=colours,
                  legend=False, jitter=0.15, size=5, alpha=0.75, zorder=1, ax=ax)
    sns.pointplot(frame, x=by, y="_value", order=names, color="black", errorbar=est, seed=seed, markers="D",
                  markersize=5, linestyle="none", capsize=0.3, err_kws={"linewidth": 1.3}, zorder=3, ax=ax)
    ax.set(xlabel="", ylabel=ylabel or _metric_label(metric, scale))
    ax.grid(axis="y", alpha=0.3)
    if len(names) > 5:
        ax.tick_params(axis="x", labelrotation=30)
    _finish(ax, title)
    return fig


def confidence_frame(results: Mapping[str, tuple[ArrayLike, ArrayLike]], *, by: str = "loss") -> Any:
    """``{name: (probs, labels)}`` as a tidy table: columns ``by``, ``confidence``, ``correct``.

    ``confidence`` is the top-label probability and ``correct`` whether the top label
    (the first maximum on ties, as in :mod:`calib.metrics`) is the label.
    """
    pd, _ = _libs()
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping name -> (probs, labels)")
    parts = []
    for name, pair in results.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"results[{name!r}] must be a (probs, labels) pair")
        p = check_probs(pair[0], f"results[{name!r}] probs")
        y = check_labels(pair[1], p.shape[0], p.shape[1], f"results[{name!r}] labels").to(p.device)
        pred = p.argmax(dim=1)
        conf = p.gather(1, pred[:, None]).squeeze(1)
        parts.append(pd.DataFrame({by: name, "confidence": conf.double().cpu().numpy(),
                                   "correct": (pred == y).cpu().numpy()}))
    return pd.concat(parts, ignore_index=True)


def confidence_distributions(
    data: Any,
    *,
    by: str = "loss",
    order: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Distributions of top-label confidence per loss, correct and wrong predictions apart.

    ``data`` is a tidy table with columns ``by``, ``confidence`` (in [0, 1]) and
    ``correct`` (booleans or 0/1), or a mapping ``{name: (probs, labels)}``
    (:func:`confidence_frame`). One split violin per loss: left half the correct
    predictions, right half the wrong ones, each scaled to the same width (so a loss with
    few errors still shows where they sit), kernel density cut at the data's range,
    quartiles dashed. Beneath each loss, its share of wrong predictions. An over-confident
    model puts its wrong half near 1 (Mukhoti et al. 2020, §3).
    """
    _, sns = _libs()
    if isinstance(data, Mapping):
        data = confidence_frame(data, by=by)
    frame = _frame(data, [by, "confidence", "correct"])
    conf = _numeric(frame, "confidence")
    if ((conf < 0) | (conf > 1)).any():
        raise ValueError(f"data['confidence'] must lie in [0, 1]; got [{conf.min():.4g}, {conf.max():.4g}]")
    ok = frame["correct"]
    if ok.dtype != bool and not ok.isin([0, 1]).all():
        raise ValueError("data['correct'] must hold booleans or 0/1")
    frame = frame.assign(confidence=conf, outcome=np.where(ok.astype(bool), "correct", "wrong"))
    names = _order(frame, by, order)
    fig, ax = _figure(ax, (1.6 + 0.9 * len(names), 3.6))
    sns.violinplot(frame, x=by, y="confidence", hue="outcome", order=names, hue_order=["correct", "wrong"],
                   palette={"correct": _CORRECT, "wrong": _WRONG}, split=True, inner="quart", cut=0,
                   density_norm="width", common_norm=False, linewidth=0.8, saturation=1, ax=ax)
    wrong = frame.groupby(by)["outcome"].apply(lambda s: (s == "wrong").mean())
    ax.set_xticks(range(len(names)), [f"{n}\n{100 * wrong[n]:.0f}% wrong" for n in names])
    ax.set(xlabel="", ylabel="top-label confidence", ylim=(0, 1.02))
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=_FONT, frameon=False, title=None)
    _finish(ax, title)
    return fig


def sweep_heatmap(
    data: Any,
    x: str,
    y: str,
    metric: str = "ece",
    *,
    agg: str = "mean",
    scale: float = 100.0,
    fmt: str = ".1f",
    cmap: str = "viridis",
    label: str | None = None,
    mark: str | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """A metric over a grid of two hyper-parameters, one cell per pair, annotated.

    ``data`` holds one row per run with columns ``x``, ``y`` and ``metric`` (e.g. a
    loss's coefficient and the epoch, or the number of bins and N); runs that share
    ``(x, y)`` (seeds) are combined by ``agg`` (``"mean"`` or ``"median"``) and multiplied
    by ``scale``. Larger ``y`` is drawn higher, as on a plot's axis; pairs with no run
    stay blank. ``mark="min"`` or ``"max"`` outlines the best cell.
    """
    _, sns = _libs()
    if x == y:
        raise ValueError(f"x and y must name two different columns, got {x!r} twice")
    if agg not in ("mean", "median"):
        raise ValueError(f'agg must be "mean" or "median", got {agg!r}')
    if mark not in (None, "min", "max"):
        raise ValueError(f'mark must be None, "min" or "max", got {mark!r}')
    frame = _frame(data, [x, y, metric])
    frame = frame.assign(_value=scale * _numeric(frame, metric))
    table = frame.pivot_table(index=y, columns=x, values="_value", aggfunc=agg).sort_index(ascending=False)
    rows, cols = table.shape
    fig, ax = _figure(ax, (1.8 + 0.65 * cols, 1.0 + 0.4 * rows))
    sns.heatmap(table, annot=rows * cols <= 200, fmt=fmt, cmap=cmap, annot_kws={"fontsize": _FONT},
                linewidths=0.5, cbar_kws={"label": label or f"{agg} {_metric_label(metric, scale)}"}, ax=ax)
    if mark is not None:
        values = table.to_numpy()
        i, j = np.unravel_index(np.nanargmin(values) if mark == "min" else np.nanargmax(values), values.shape)
        ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="white", linewidth=2.5))
    cbar = ax.collections[0].colorbar
    cbar.ax.tick_params(labelsize=_FONT)
    cbar.ax.yaxis.label.set_size(_FONT)
    ax.set(xlabel=x, ylabel=y)
    ax.tick_params(axis="y", labelrotation=0)
    _finish(ax, title)
    return fig


def _summarise(frame: Any, keys: list[str], y: str, low: str | None, high: str | None,
               level: float | None = None) -> Any:
    """One row per ``keys``: ``_y, _lo, _hi`` from the given bounds, or over the rows their mean
    ± std (``level`` None) or the Student-t interval of their mean (:func:`t_interval`)."""
    if low is not None and high is not None:
        if frame.duplicated(keys).any():
            raise ValueError(f"with low/high given, data must hold one row per {keys}")
        # a bound may be NaN (no interval computed): the point is drawn without a bar
        bounds = {k: frame[c].astype(float) for k, c in (("_lo", low), ("_hi", high))}
        return frame.assign(_y=_numeric(frame, y), **bounds)
    g = frame.assign(_v=_numeric(frame, y)).groupby(keys, sort=False)["_v"]
    if level is not None:
        out = g.agg(_y="mean", _lo=lambda v: t_interval(v, level)[0],
                    _hi=lambda v: t_interval(v, level)[1]).reset_index()
        return out
    out = g.agg(["mean", "std"]).fillna({"std": 0.0}).reset_index()
    return out.assign(_y=out["mean"], _lo=out["mean"] - out["std"], _hi=out["mean"] + out["std"])


def interval_panels(
    data: Any,
    x: str,
    y: str,
    *,
    hue: str,
    col: str | None = None,
    low: str | None = None,
    high: str | None = None,
    scale: float = 1.0,
    logx: bool = False,
    ylabel: str | None = None,
    hline: float | None = None,
    sharey: bool = False,
    ncols: int | None = None,
    level: float | None = None,
) -> Figure:
    """``y`` against ``x`` for each ``hue`` series, one panel per value of ``col``, with intervals.

    With ``low``/``high`` (e.g. bootstrap bounds) each row is one point and its bounds;
    without them the rows of one ``(col, hue, x)`` are seeds, drawn as their mean ± one
    standard deviation, or, given ``level`` (e.g. 0.95), with the Student-t interval of
    their mean (:func:`t_interval`; none for a single seed). A numeric ``x`` is drawn as lines (``logx`` for sizes); a
    categorical one as dots, the series side by side. Values are multiplied by ``scale``;
    ``hline`` marks a reference value (e.g. 0 for a bias). ``ncols`` panels a row (default:
    all in one row); a log axis with at most six distinct ``x`` values is labelled at them.
    """
    if ncols is not None and (isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1):
        raise ValueError(f"ncols must be an int >= 1 or None, got {ncols!r}")
    frame = _frame(data, [x, y, hue] + ([col] if col else []))
    keys = ([col] if col else []) + [hue, x]
    if level is not None and not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    table = _summarise(frame, keys, y, low, high, level)
    panels = list(dict.fromkeys(table[col])) if col else [None]
    series = list(dict.fromkeys(table[hue]))
    colours = _colours(series)
    numeric = np.issubdtype(np.asarray(table[x]).dtype, np.number)
    cats = list(dict.fromkeys(table[x]))
    ncols = min(ncols or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(min(1.2 + 2.3 * ncols, _MAX_WIDTH), 3.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey).ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes, panels):
        part = table if panel is None else table[table[col] == panel]
        for i, name in enumerate(series):
            s = part[part[hue] == name]
            if numeric:
                pos = s[x].to_numpy(dtype=float)
            else:
                pos = np.array([cats.index(v) for v in s[x]]) + 0.6 * (i + 0.5) / len(series) - 0.3
            v, lo, hi = (scale * s[c].to_numpy(dtype=float) for c in ("_y", "_lo", "_hi"))
            # a percentile bootstrap of a biased estimate can put the point outside its
            # interval (calib.metrics.bootstrap_ci): no bar on that side, and none for NaN
            err = np.nan_to_num(np.vstack([v - lo, hi - v]), nan=0.0).clip(min=0.0)
            ax.errorbar(pos, v, yerr=err, color=colours[name], label=str(name),
                        marker="o", markersize=4, capsize=2, linewidth=1.2 if numeric else 0, elinewidth=1)
        if logx and numeric:
            ax.set_xscale("log")
            ticks = sorted(set(table[x].astype(float)))
            if len(ticks) <= 6:  # label the measured values, not powers of ten
                ax.set_xticks(ticks, [f"{t:,g}" for t in ticks])
                ax.xaxis.set_minor_formatter(NullFormatter())
        if not numeric:
            ax.set_xticks(range(len(cats)), [str(c) for c in cats], rotation=40, ha="right")
        if hline is not None:
            ax.axhline(scale * hline, color="0.4", linestyle="--", linewidth=0.9)
        first = list(axes).index(ax) % ncols == 0
        ax.set(xlabel=x if numeric else "", ylabel=ylabel or y if first else "")
        ax.grid(axis="y", alpha=0.3)
        _finish(ax, None if panel is None else str(panel))
    axes[ncols - 1].legend(title=hue, fontsize=_FONT, title_fontsize=_FONT, frameon=False,
                    loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def detectable_differences(n_tests: Sequence[int], seed_counts: Sequence[int] = (3, 5, 10), *,
                           seed_sd: float = 0.0, metric: str = "ece", power: float = 0.8,
                           alpha: float = 0.05, sims: int = 200, ax: Axes | None = None) -> Figure:
    """The smallest difference a comparison can decide (:func:`calib.evidence.detectable_difference`)
    against the test-set size, one line per number of seeds, both axes logarithmic; ECE in points."""
    from .. import evidence

    fig, ax = _figure(ax, (6.0, 3.6))
    scale = 100.0 if metric == "ece" else 1.0
    for n_seeds in seed_counts:
        ys = [scale * evidence.detectable_difference(n, n_seeds, metric=metric, seed_sd=seed_sd,
                                                      power=power, alpha=alpha, sims=sims)
              for n in n_tests]
        ax.plot(n_tests, ys, marker="o", label=f"{n_seeds} seeds")
    ax.set(xscale="log", yscale="log", xlabel="test images",
           ylabel=f"detectable {'ECE (points)' if metric == 'ece' else metric.upper()} difference")
    ax.legend(title=f"power {power:g}, α = {alpha:g}", frameon=False)
    ax.grid(True, which="both", alpha=0.3)
    return fig
