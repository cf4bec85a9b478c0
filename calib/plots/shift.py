"""Metrics against corruption severity, from a tidy table (after the metric-against-shift
figures of Ovadia et al. (2019)).

* ``metric_under_shift``: one panel per corruption, a metric against severity, one line
  per method (mean over seeds) with a band of ± one standard deviation;
* ``corruption_examples``: one image under every corruption and severity, as a grid.

The table is what :func:`calib.experiments.shift.shift_table` returns (rows with
``corruption``, ``severity``, the metric, a method column and optionally ``seed``).
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..data.shift import CORRUPTIONS, SEVERITIES, corrupt
from .palette import series_color
from .stats import _frame, _metric_label, _numeric, _order

__all__ = ["metric_under_shift", "corruption_examples"]

_FONT = 9
_MAX_WIDTH = 7.0


def _distinct_colours(names: Sequence[str]) -> dict[str, str]:
    """Palette colours, with a cycle colour wherever two methods would share one."""
    cycle = [c for c in matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]]
    out: dict[str, str] = {}
    for i, name in enumerate(names):
        colour = series_color(str(name), default=None)
        if colour is None or colour in out.values():
            colour = next((c for c in cycle if c not in out.values()), cycle[i % len(cycle)])
        out[name] = colour
    return out


def metric_under_shift(data: Any, metric: str = "ece", *, by: str = "loss", scale: float = 100.0,
                       order: Sequence[str] | None = None, corruptions: Sequence[str] | None = None,
                       styles: dict[str, str] | None = None, ylabel: str | None = None) -> Figure:
    """``metric`` (times ``scale``) against severity, a panel per corruption, a line per ``by``.

    Each line is the mean over the rows of one method and severity (the seeds), the band
    ± one sample standard deviation (none for a single row). ``styles`` maps a method to a
    matplotlib line style (e.g. ``{"ensemble": "--"}``). Severity 0 is the clean test set.
    """
    frame = _frame(data, ["corruption", "severity", by, metric])
    frame = frame.assign(_value=scale * _numeric(frame, metric))
    names = _order(frame, by, order)
    panels = _order(frame, "corruption", corruptions)
    colours, styles = _distinct_colours(names), dict(styles or {})
    fig = Figure(figsize=(min(2.3 * len(panels) + 0.4, _MAX_WIDTH), 2.9), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, corruption in zip(axes, panels):
        part = frame[frame["corruption"] == corruption]
        for name in names:
            g = part[part[by] == name].groupby("severity")["_value"]
            mean, sd = g.mean(), g.std(ddof=1).fillna(0.0)
            if mean.empty:
                continue
            x = mean.index.to_numpy(dtype=float)
            ax.plot(x, mean.to_numpy(), marker="o", markersize=3, color=colours[name],
                    linestyle=styles.get(name, "-"), label=str(name))
            ax.fill_between(x, (mean - sd).to_numpy(), (mean + sd).to_numpy(), color=colours[name], alpha=0.18,
                            linewidth=0)
        ax.set_title(str(corruption).replace("_", " "), fontsize=_FONT + 1)
        ax.set_xlabel("severity (0 = clean)", fontsize=_FONT)
        ax.set_xticks(np.unique(part["severity"].to_numpy()))
        ax.tick_params(labelsize=_FONT)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel or _metric_label(metric, scale), fontsize=_FONT)
    axes[-1].legend(fontsize=_FONT, frameon=False, loc="upper left")
    return fig


def corruption_examples(image: Any, corruptions: Sequence[str] | None = None,
                        severities: Sequence[int] = (0, *SEVERITIES), *, seed: int = 0) -> Figure:
    """One ``uint8`` image ``(C, H, W)`` (first channel shown, grey) under each corruption
    of :mod:`calib.data.shift` (rows) at each severity (columns)."""
    names = list(corruptions or CORRUPTIONS)
    if image.dim() != 3:
        raise ValueError(f"image must be one image (C, H, W), got shape {tuple(image.shape)}")
    fig = Figure(figsize=(min(0.95 * len(severities) + 1.2, _MAX_WIDTH), 1.0 * len(names) + 0.4),
                 layout="constrained")
    axes = fig.subplots(len(names), len(severities), squeeze=False)
    for i, name in enumerate(names):
        for j, s in enumerate(severities):
            ax = axes[i, j]
            ax.imshow(corrupt(name, image[None], s, seed=seed)[0, 0].cpu().numpy(), cmap="gray", vmin=0, vmax=255)
            ax.set_xticks([]), ax.set_yticks([])
            if i == 0:
                ax.set_title(f"severity {s}", fontsize=_FONT)
            if j == 0:
                ax.set_ylabel(name.replace("_", " "), fontsize=_FONT)
    return fig
