"""Figures of the derivation chapters: g(p, gamma), the FLSD schedule, the binary focal
optimum, simplex weight maps and the GRA fixed point.

Every function computes through :mod:`calib.theory` (and the weight functions it is
given), returns a matplotlib :class:`~matplotlib.figure.Figure` and never calls
``plt.show()``; figures are built without pyplot, so they work under the Agg backend.
:mod:`calib.theory` (and with it sympy) is imported on first use, so ``import
calib.plots`` stays light for chapters that draw no theory figure.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.tri import Triangulation

__all__ = [
    "plot_gradient_factor",
    "plot_flsd_schedule",
    "plot_binary_focal_optimum",
    "plot_simplex_weight_maps",
    "plot_gra_fixed_point",
]

WeightFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _check_gammas(gammas: Sequence[float], name: str = "gammas") -> list[float]:
    if isinstance(gammas, (str, bytes)) or not isinstance(gammas, Sequence) or len(gammas) == 0:
        raise ValueError(f"{name} must be a non-empty sequence of numbers")
    return [float(g) for g in gammas]


def _check_resolution(resolution: int, minimum: int = 2) -> int:
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise TypeError(f"resolution must be an int, got {type(resolution).__name__}")
    if resolution < minimum:
        raise ValueError(f"resolution must be >= {minimum}, got {resolution}")
    return int(resolution)


def _check_weights(weights: Mapping[str, WeightFn]) -> None:
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError("weights must be a non-empty mapping {label: weight function}")
    for label, fn in weights.items():
        if not callable(fn):
            raise TypeError(f"weights[{label!r}] must be callable (probs, targets) -> (N,)")


def plot_gradient_factor(
    gammas: Sequence[float] = (1.0, 2.0, 3.0, 5.0),
    *,
    resolution: int = 400,
    show_weight: bool = False,
) -> Figure:
    """Lin et al. 2024, Fig. 1: ``g(p, gamma)`` against the true-class probability, peak ``p0`` marked.

    The dashed line ``g = 1`` is cross-entropy. With ``show_weight=True`` the focal weight
    ``u_FL = (1 - p)^gamma`` is drawn dotted in the same colour: the factor a *gradient*-
    weighted loss (FL-GRA) puts on the CE gradient, for comparison (Lin et al. 2024, §4.2).
    """
    from .. import theory

    gs = _check_gammas(gammas)
    n = _check_resolution(resolution)
    fig = Figure(figsize=(6.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for i, g in enumerate(gs):
        colour = f"C{i}"
        p = np.linspace(0.0, 1.0 if g >= 1 else 1.0 - 1e-6, n)  # g(1, gamma) is infinite for gamma < 1
        label = rf"$\gamma={g:g}$"
        if g > 0:  # the peak p_star goes in the legend: labels on the curves would overlap
            p_star = theory.gradient_factor_peak(g)
            ax.plot([p_star], theory.gradient_factor([p_star], g), "o", color=colour, ms=5)
            label += rf", $p_\star={p_star:.3f}$"
        ax.plot(p, theory.gradient_factor(p, g), color=colour, label=label)
        if show_weight:
            ax.plot(p, (1 - p) ** g, color=colour, ls=":", label=rf"$(1-p)^{{{g:g}}}$ (GRA)")
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="cross-entropy ($g=1$)")
    ax.set_xlabel(r"true-class probability $p$")
    ax.set_ylabel(r"$g(p,\gamma)$")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_title(r"Gradient factor of focal loss, $\nabla L_{FL} = g(p,\gamma)\,\nabla L_{CE}$")
    ax.legend(fontsize=9)
    return fig


def plot_flsd_schedule(
    p_range: tuple[float, float] = (0.1, 0.45),
    marks: Sequence[float] = (0.2, 0.25, 0.3),
    *,
    resolution: int = 200,
) -> Figure:
    """The Lambert-W schedule ``gamma(p0)`` solving ``g(p0, gamma) = 1`` beside FLSD-53.

    Left: ``gamma(p0)`` (:func:`calib.theory.lambert_gamma`) with the 5/3 rule of FLSD-53
    (:func:`calib.theory.flsd53_gamma`) and the values at ``marks`` annotated. Right:
    ``g(p, 5)`` and ``g(p, 3)`` with their ``g = 1`` crossings, the thresholds the two
    FLSD gammas actually correspond to.
    """
    from .. import theory

    lo, hi = float(p_range[0]), float(p_range[1])
    if not 0 < lo < hi < 0.5:
        raise ValueError(f"p_range must satisfy 0 < low < high < 0.5, got {p_range}")
    n = _check_resolution(resolution)
    p0 = np.linspace(lo, hi, n)
    fig = Figure(figsize=(7.0, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(p0, theory.lambert_gamma(p0), label=r"Lambert-W: $g(p_0,\gamma)=1$")
    left.step(p0, theory.flsd53_gamma(p0), where="post", color="C3", ls="--", label="FLSD-53 (5 / 3)")
    ms = np.asarray([m for m in marks if lo <= m <= hi], dtype=float)
    if ms.size:
        gm = theory.lambert_gamma(ms)
        left.plot(ms, gm, "ko", ms=4)
        for m, g in zip(ms, gm):
            left.annotate(rf"$\gamma={g:.2f}$", (m, g), textcoords="offset points", xytext=(5, 5), fontsize=9)
    left.set_xlabel(r"threshold $p_0$")
    left.set_ylabel(r"$\gamma$")
    left.set_title(r"$\gamma$ with $g(p_0,\gamma)=1$", fontsize=10)
    left.legend(fontsize=9)
    p = np.linspace(0.0, 1.0, 400)
    # FLSD's gamma = 5 region as a band, each crossing as a marker on its curve: two
    # vertical lines at 0.197 and 0.2 could not be told apart.
    right.axvspan(0.0, 0.2, color="C3", alpha=0.12, lw=0, label=r"FLSD uses $\gamma=5$ ($p<0.2$)")
    for i, (g, marker) in enumerate(((5.0, "o"), (3.0, "s"))):
        cross = theory.gradient_factor_unit_crossing(g)
        right.plot(p, theory.gradient_factor(p, g), color=f"C{i}", label=rf"$\gamma={g:g}$")
        right.plot([cross], [1.0], marker, color=f"C{i}", ms=6, mfc="white", mew=1.5,
                   label=rf"$g(p,{g:g})=1$ at $p={cross:.3f}$")
    right.axhline(1.0, color="k", ls="--", lw=0.8)
    right.set_xlabel(r"true-class probability $p$")
    right.set_ylabel(r"$g(p,\gamma)$")
    right.set_xlim(0, 1)
    right.set_title(r"where $g$ falls below 1", fontsize=10)
    right.legend(fontsize=9)
    return fig


def plot_binary_focal_optimum(gammas: Sequence[float] = (0.0, 1.0, 2.0, 3.0), *, resolution: int = 99) -> Figure:
    """Mukhoti et al. 2020, Fig. A.1: the prediction ``x*`` minimising the binary focal objective, against ``q``.

    ``gamma = 0`` is cross-entropy (``x* = q``, the diagonal); larger gamma pulls ``x*``
    toward 1/2: a higher-entropy, less confident optimum.
    """
    from .. import theory

    gs = _check_gammas(gammas)
    n = _check_resolution(resolution)
    q = np.linspace(0.0, 1.0, n + 2)[1:-1]
    fig = Figure(figsize=(5.0, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for i, g in enumerate(gs):
        label = r"$\gamma=0$ (cross-entropy)" if g == 0 else rf"$\gamma={g:g}$"
        ax.plot(q, theory.binary_focal_optimum(q, g), color=f"C{i}", label=label)
    ax.set_xlabel(r"target probability $q$")
    ax.set_ylabel(r"optimal prediction $\hat p$")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_title("Binary focal optimum (Mukhoti et al. 2020, Fig. A.1)")
    ax.legend(fontsize=9)
    return fig


def plot_simplex_weight_maps(
    weights: Mapping[str, WeightFn],
    *,
    true_class: int = 0,
    fixed: float = 0.1,
    resolution: int = 60,
) -> Figure:
    """Lin et al. 2024, Fig. 2: sample-wise weights over a slice of the 4-class simplex.

    ``weights`` maps a label to ``u(probs, targets) -> (N,)`` (e.g. ``calib.losses.uncertainty.u_fl``
    with its gamma bound). The slice (:func:`calib.theory.simplex_slice`) fixes ``p_3 =
    fixed`` and spreads the rest over classes 0, 1, 2; every point has label ``true_class``.
    Lines of equal colour show which coordinates a weight responds to.
    """
    from .. import theory

    _check_weights(weights)
    n = _check_resolution(resolution)
    if isinstance(true_class, bool) or not isinstance(true_class, (int, np.integer)) or not 0 <= true_class < 4:
        raise ValueError(f"true_class must be an int in [0, 4), got {true_class!r}")
    probs, xy = theory.simplex_slice(n, fixed=fixed)
    tri = Triangulation(xy[:, 0], xy[:, 1])
    targets = torch.full((probs.shape[0],), int(true_class), dtype=torch.long)
    fig = Figure(figsize=(min(7.0, 2.4 * len(weights)), 2.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(weights)))
    corners = [(0.0, 0.0), (1.0, 0.0), (0.5, np.sqrt(3) / 2)]
    # short corner labels outside the triangle (the corner value is in the title) and
    # horizontal colour bars below, so the triangles keep the width of their column
    offsets = [((-3, -3), "right", "top"), ((3, -3), "left", "top"), ((0, 3), "center", "bottom")]
    for ax, (label, fn) in zip(axes, weights.items()):
        values = torch.as_tensor(fn(probs, targets), dtype=torch.float64).reshape(-1).numpy()
        if values.shape[0] != probs.shape[0]:
            raise ValueError(f"weights[{label!r}] returned {values.shape[0]} values for {probs.shape[0]} points")
        cs = ax.tricontourf(tri, values, levels=20, cmap="viridis")
        ax.tricontour(tri, values, levels=10, colors="w", linewidths=0.4)
        cbar = fig.colorbar(cs, ax=ax, orientation="horizontal", shrink=0.85, pad=0.02)
        cbar.ax.tick_params(labelsize=9)
        cbar.locator = __import__("matplotlib").ticker.MaxNLocator(4)
        cbar.update_ticks()
        for k, ((cx, cy), (off, ha, va)) in enumerate(zip(corners, offsets)):
            text = rf"$\hat p_{k}$" + (" (label)" if k == true_class else "")
            ax.annotate(text, (cx, cy), ha=ha, va=va, xytext=off, textcoords="offset points", fontsize=9)
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylim(-0.1, np.sqrt(3) / 2 + 0.12)
        ax.set_title(label, fontsize=10, pad=12)
        ax.set_aspect("equal")
        ax.set_axis_off()
    fig.suptitle(rf"Weights on the slice $\hat p_3 = {fixed:g}$; at each corner $\hat p_k = {1 - fixed:g}$",
                 fontsize=10)
    return fig


def plot_gra_fixed_point(
    weights: Mapping[str, WeightFn],
    *,
    eta_range: tuple[float, float] = (0.5, 0.99),
    resolution: int = 25,
    extra: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> Figure:
    """Binary fixed point ``q_1`` of each gradient weighting against the true ``eta_1``.

    For every ``eta_1`` in ``eta_range`` solves ``q_k ∝ eta_k u(q, e_k)``
    (:func:`calib.theory.gra_fixed_point`). The diagonal is perfect calibration (CE).
    ``extra`` adds precomputed curves ``{label: (eta_1 values, q_1 values)}``, e.g. the
    focal-loss optimum of :func:`calib.theory.binary_focal_optimum`.
    """
    from .. import theory

    _check_weights(weights)
    n = _check_resolution(resolution)
    lo, hi = float(eta_range[0]), float(eta_range[1])
    if not 0 < lo < hi < 1:
        raise ValueError(f"eta_range must satisfy 0 < low < high < 1, got {eta_range}")
    etas = np.linspace(lo, hi, n)
    fig = Figure(figsize=(5.0, 4.5), layout="constrained")
    ax = fig.add_subplot()
    # the calibrated diagonal as a wide light band underneath, so a weighting that lands on
    # it (CE) is drawn on top of it and both stay visible
    ax.plot([lo, hi], [lo, hi], color="0.6", lw=7, alpha=0.35, solid_capstyle="butt", zorder=1,
            label=r"calibrated ($q=\eta$)")
    for i, (label, fn) in enumerate(weights.items()):
        q1 = [float(theory.gra_fixed_point([e, 1 - e], fn)[0]) for e in etas]
        ax.plot(etas, q1, color=f"C{i}", marker="o" if i == 0 else None, ms=3, zorder=3, label=label)
    for j, (label, (xs, ys)) in enumerate((extra or {}).items()):
        ax.plot(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), color=f"C{len(weights) + j}", ls="-.", label=label)
    ax.set_xlabel(r"true posterior $\eta_1$")
    ax.set_ylabel(r"stationary prediction $q_1$")
    ax.set_title("Where training settles under label noise (binary)")
    ax.legend(fontsize=9)
    return fig
