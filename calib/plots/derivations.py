"""Figures for the derivations added with the notation page: the true-logit push of focal
loss, the focal lower bounds for every gamma, the Brier terms, and the GRA update field.

Colours of these figures are set in :data:`COLOURS`, one place, so they follow the book
palette by editing one dictionary. Functions return a matplotlib
:class:`~matplotlib.figure.Figure` built without pyplot, at most 7 in wide.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

__all__ = ["COLOURS", "plot_true_logit_push", "plot_focal_bounds", "plot_brier_terms", "plot_gra_field"]

#: Colour per series of these figures (gamma values by index; terms and losses by name).
COLOURS: dict[str, str] = {
    "gamma0": "#9ecae1", "gamma1": "#4292c6", "gamma2": "#2171b5", "gamma3": "#08519c", "gamma4": "#08306b",
    "ce": "#000000", "focal": "#0072b2", "true_class": "#d55e00", "log_product": "#cc79a7",
    "binary": "#e69f00", "entropy": "#009e73",
    "reliability": "#d55e00", "grouping": "#56b4e9", "irreducible": "#999999", "resolution": "#009e73",
    "bsce_gra": "#009e73",
}
_FONT = 9


def _gamma_colour(i: int) -> str:
    return COLOURS[f"gamma{min(i, 4)}"]


def plot_true_logit_push(gammas: Sequence[float] = (1.0, 2.0, 3.0, 5.0), *, resolution: int = 600) -> Figure:
    """``g(p, gamma)`` (left) and the true-logit push ``g(p, gamma) (1 - p)`` (right).

    Left: the factor on the CE gradient, peak ``p_star`` (:func:`calib.theory.gradient_factor_peak`).
    Right: ``-dL/dz_y`` itself, CE's ``1 - p`` in black; its peak ``p_dagger``
    (:func:`calib.theory.true_logit_push_peak`) lies left of ``p_star``.
    """
    from .. import theory

    gs = [float(g) for g in gammas]
    if not gs or any(g <= 0 for g in gs):
        raise ValueError(f"gammas must be a non-empty sequence of numbers > 0, got {gammas!r}")
    p = np.linspace(0.0, 1.0 - 1e-9, int(resolution))
    fig = Figure(figsize=(7.0, 3.2), layout="constrained")
    left, right = fig.subplots(1, 2, sharex=True)
    right.plot(p, 1 - p, color=COLOURS["ce"], ls="--", lw=1, label="CE: $1-p$")
    left.axhline(1.0, color=COLOURS["ce"], ls="--", lw=1, label="CE: $g=1$")
    for i, g in enumerate(gs):
        c = _gamma_colour(i)
        gp = theory.gradient_factor(p, g)
        ps, pd = theory.gradient_factor_peak(g), theory.true_logit_push_peak(g)
        left.plot(p, gp, color=c, label=rf"$\gamma={g:g}$, $p_\star={ps:.3f}$")
        left.plot([ps], theory.gradient_factor([ps], g), "o", color=c, ms=4)
        right.plot(p, gp * (1 - p), color=c, label=rf"$\gamma={g:g}$, $p_\dagger={pd:.3f}$")
        right.plot([pd], theory.gradient_factor([pd], g) * (1 - pd), "s", color=c, ms=4)
    left.set_ylabel(r"$g(p,\gamma)$", fontsize=_FONT)
    right.set_ylabel(r"push on the true logit, $-\partial L/\partial z_y$", fontsize=_FONT)
    for ax, title in ((left, "factor on the CE gradient"), (right, "true-logit gradient")):
        ax.set_xlabel(r"true-class probability $p$", fontsize=_FONT)
        ax.set_xlim(0, 1)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=_FONT + 1)
        ax.legend(fontsize=_FONT, frameon=False)
        ax.tick_params(labelsize=_FONT)
    return fig


def plot_focal_bounds(gammas: Sequence[float] = (0.5, 3.0), *, num_classes: int = 4, resolution: int = 400) -> Figure:
    """Focal loss and its lower bounds against ``p_y`` (other classes share ``1 - p_y``).

    One panel per ``gamma``: focal loss, the true-class bound (``gamma >= 1`` only), the
    log-product and binary-entropy bounds (every ``gamma``) and the entropy bound, from
    :func:`calib.theory.focal_bounds.focal_bounds_one_hot`.
    """
    from ..theory import focal_bounds

    gs = [float(g) for g in gammas]
    if not gs:
        raise ValueError("gammas must be non-empty")
    K = int(num_classes)
    p = np.linspace(0.02, 0.98, int(resolution))
    probs = np.column_stack([p] + [(1 - p) / (K - 1)] * (K - 1))
    labels = np.zeros(len(p), dtype=np.int64)
    fig = Figure(figsize=(7.0, 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(gs), sharey=True))
    names = {"focal": "focal loss", "true_class": r"CE $-\gamma(-p_y\log p_y)$",
             "log_product": r"CE $-\gamma\log p_y\log(1-p_y)$", "binary": r"CE $-\gamma h_2(p_y)$",
             "entropy": r"CE $-\gamma H(\hat p)$"}
    for ax, g in zip(axes, gs):
        b = focal_bounds.focal_bounds_one_hot(torch.as_tensor(probs), torch.as_tensor(labels), g)
        for key, label in names.items():
            if key == "true_class" and g < 1:
                continue
            ax.plot(p, b[key].numpy(), color=COLOURS[key], lw=2 if key == "focal" else 1.2,
                    ls="-" if key == "focal" else "--", label=label)
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set_title(rf"$\gamma={g:g}$, $K={K}$", fontsize=_FONT + 1)
        ax.set_xlabel(r"true-class probability $p_y$", fontsize=_FONT)
        ax.tick_params(labelsize=_FONT)
    axes[0].set_ylabel("loss (nats)", fontsize=_FONT)
    handles, labels = axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=_FONT, frameon=False)
    return fig


def plot_brier_terms(terms: Mapping[str, Mapping[str, float]]) -> Figure:
    """Stacked bars of ``reliability + grouping + irreducible`` per forecast.

    ``terms`` maps a forecast's name to a dict from
    :func:`calib.theory.scoring.known_posterior_decomposition`; the bar height is the expected
    Brier score.
    """
    if not terms:
        raise ValueError("terms must be a non-empty mapping")
    fig = Figure(figsize=(6.0, 3.0), layout="constrained")
    ax = fig.add_subplot()
    names = list(terms)
    bottom = np.zeros(len(names))
    for key, label in (("reliability", "reliability (calibration)"), ("grouping", "grouping loss"),
                       ("irreducible", r"$\sum_k\eta_k(1-\eta_k)$ (irreducible)")):
        vals = np.array([float(terms[n][key]) for n in names])
        ax.barh(names, vals, left=bottom, color=COLOURS[key], label=label)
        bottom += vals
    ax.set_xlabel("expected Brier score", fontsize=_FONT)
    ax.tick_params(labelsize=_FONT)
    ax.invert_yaxis()
    ax.legend(fontsize=_FONT, frameon=False, loc="lower right")
    return fig


def plot_gra_field(eta: Sequence[float], weights: Mapping[str, object], *, span: float = 4.0, radius: float = 1.5,
                   resolution: int = 21) -> Figure:
    """The expected update ``-G(z)`` of each weighting in the logit plane ``(z_1, z_2)``, ``z_3 = 0``.

    One panel per weighting (``{label: weight name or callable}``, kwargs bound). Arrows
    point the way gradient descent moves; the circle is the loop of
    :func:`calib.theory.gra_field.circulation` and the dot the fixed point.
    """
    from .. import theory
    from ..theory import gra_field

    if not weights:
        raise ValueError("weights must be a non-empty mapping")
    et = torch.as_tensor(eta, dtype=torch.float64)
    if et.shape != (3,):
        raise ValueError(f"eta must have 3 classes, got shape {tuple(et.shape)}")
    axis = np.linspace(-span, span, int(resolution))
    fig = Figure(figsize=(7.0, 3.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(weights)))
    t = np.linspace(0, 2 * np.pi, 200)
    for ax, (label, w) in zip(axes, weights.items()):
        U = np.zeros((len(axis), len(axis)))
        V = np.zeros_like(U)
        for i, b in enumerate(axis):
            for j, a in enumerate(axis):
                g = gra_field.gra_field([a, b, 0.0], et, w)
                U[i, j], V[i, j] = -float(g[0]), -float(g[1])
        ax.streamplot(axis, axis, U, V, color="0.45", density=0.8, linewidth=0.7, arrowsize=0.8)
        ax.plot(radius * np.cos(t), radius * np.sin(t), color=COLOURS["bsce_gra"], lw=1.2)
        q = theory.gra_fixed_point(et, w)
        z = (q.log() - q.log()[2]).numpy()
        ax.plot([z[0]], [z[1]], "o", color="k", ms=5)
        ax.set_title(label, fontsize=_FONT + 1)
        ax.set_xlabel(r"$z_1$ (with $z_3=0$)", fontsize=_FONT)
        ax.set_ylabel(r"$z_2$", fontsize=_FONT)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=_FONT)
    return fig
