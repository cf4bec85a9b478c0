"""Loss and gradient curves against the true-class probability p_y (Wang et al. 2021, Fig. 6a, extended).

Both figures evaluate the losses of :mod:`calib.losses` with autograd on a K-class logit
vector whose true class has probability ``p_y`` and whose other ``K − 1`` classes share
``1 − p_y`` uniformly (:func:`calib.losses.true_logit_response`). The gradient figure
shows ``−∂L/∂g_y``, the push a loss gives the true-class logit: CE gives ``1 − p_y``;
focal loss scales it by g(p, γ) (Lin et al. 2024, §4.1); inverse focal loss by more than 1
(Wang et al. 2021, §5.2). Colours come from :mod:`calib.plots.palette`: one per loss, one
per γ of focal loss.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .palette import series_color

__all__ = ["DEFAULT_CURVES", "gradient_curves", "loss_curves"]

Curve = tuple[str, str, Mapping[str, float]]  # (label, registry name, hyper-parameters)

DEFAULT_CURVES: tuple[Curve, ...] = (
    ("CE", "ce", {}),
    ("focal γ=1", "focal", {"gamma": 1.0}),
    ("focal γ=2", "focal", {"gamma": 2.0}),
    ("focal γ=3", "focal", {"gamma": 3.0}),
    ("focal γ=5", "focal", {"gamma": 5.0}),
    ("inverse focal γ̄=2", "inverse_focal", {"gamma": 2.0}),
    ("dual focal γ=5", "dual_focal", {"gamma": 5.0}),
    ("BSCE γ=4, β=2", "bsce", {"gamma": 4.0, "norm": 2.0}),
    ("Brier", "brier", {}),
)


def _grid(n_points: int) -> np.ndarray:
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
        raise ValueError(f"n_points must be an int >= 2, got {n_points!r}")
    return np.linspace(0.01, 0.99, n_points)


def _curves(curves: Sequence[Curve], p: np.ndarray, num_classes: int, grad: bool) -> list[tuple[str, np.ndarray]]:
    from calib.losses import true_logit_response

    out = []
    for label, name, kwargs in curves:
        values, grads = true_logit_response(name, p, num_classes, **dict(kwargs))
        out.append((label, (-grads if grad else values).numpy()))
    return out


def _figure(ax: Axes | None) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    return fig, fig.add_subplot()


def _draw(ax: Axes, p: np.ndarray, series: list[tuple[str, np.ndarray]], ylabel: str, title: str) -> None:
    for label, values in series:
        ax.plot(p, values, label=label, lw=1.8 if label == "CE" else 1.3, color=series_color(label))
    ax.set_xlabel("true-class probability $p_y$", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, ncol=2)


def loss_curves(
    curves: Sequence[Curve] = DEFAULT_CURVES,
    num_classes: int = 10,
    n_points: int = 199,
    ax: Axes | None = None,
    ylim: tuple[float, float] | None = (0.0, 5.0),
) -> Figure:
    """Each loss as a function of ``p_y`` (Wang et al. 2021, Fig. 6a). Returns the Figure (never shows it).

    Args:
        curves: ``(label, registry name, hyper-parameters)`` triples (per-sample losses only).
        num_classes: K; the non-target mass is spread uniformly over the other K − 1 classes.
        n_points: grid size on [0.01, 0.99].
        ax: draw into this Axes instead of a new Figure.
        ylim: y-axis limits (``None`` for matplotlib's choice).
    """
    p = _grid(n_points)
    fig, ax = _figure(ax)
    _draw(ax, p, _curves(curves, p, num_classes, grad=False), "loss $L$", f"Losses against $p_y$ (K = {num_classes})")
    if ylim is not None:
        ax.set_ylim(*ylim)
    return fig


def gradient_curves(
    curves: Sequence[Curve] = DEFAULT_CURVES,
    num_classes: int = 10,
    n_points: int = 199,
    ax: Axes | None = None,
) -> Figure:
    """``−∂L/∂g_y`` (the push on the true-class logit) against ``p_y``. Returns the Figure.

    Computed with autograd through :mod:`calib.losses`; arguments as in :func:`loss_curves`.
    """
    p = _grid(n_points)
    fig, ax = _figure(ax)
    series = _curves(curves, p, num_classes, grad=True)
    _draw(ax, p, series, r"$-\partial L / \partial g_y$", f"Gradient on the true-class logit (K = {num_classes})")
    return fig
