"""Figures for meta-regularisation (Wang & Golebiowski 2024): the per-sample gamma a gamma-Net learns.

* ``gamma_over_epochs``: mean and standard deviation of gamma per epoch, one colour per
  method, seeds as thin lines (Wang & Golebiowski 2024, Fig. 3c-d).
* ``gamma_scatter``: each sample's gamma against its confidence, correct vs wrong.

Both return a :class:`matplotlib.figure.Figure` built without pyplot (safe under Agg,
nothing accumulates in pyplot's figure manager); a notebook shows it when it is the
value of the last line of a cell.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from .._checks import as_tensor
from .palette import series_color

__all__ = ["gamma_over_epochs", "gamma_scatter"]

History = Sequence[Mapping[str, float]]
_FONT = 9  # smallest font in a figure (points)


def _series(history: History, key: str, name: str) -> np.ndarray:
    if isinstance(history, (str, bytes)) or not isinstance(history, Sequence):
        raise TypeError(f"histories[{name!r}] must be a sequence of per-epoch dicts")
    if len(history) == 0:
        raise ValueError(f"histories[{name!r}] is empty")
    try:
        values = np.array([float(row[key]) for row in history])
    except KeyError:
        raise ValueError(f"histories[{name!r}] has an epoch without the key {key!r}") from None
    if not np.isfinite(values).all():
        raise ValueError(f"histories[{name!r}][{key!r}] contains NaN or inf values")
    return values


def _group_of(name: str) -> str:
    """``"FL_γ-SECE (seed 1)"`` -> ``"FL_γ-SECE"``: runs that differ only in the seed."""
    return re.sub(r"\s*\(seed[^)]*\)\s*$", "", name)


def gamma_over_epochs(
    histories: Mapping[str, History],
    *,
    mean_key: str = "gamma_mean",
    std_key: str = "gamma_std",
    title: str | None = None,
) -> Figure:
    """Mean and spread of the learned γ per epoch (Wang & Golebiowski 2024, Fig. 3c-d).

    Left: the mean γ over the evaluated samples; right: its standard deviation across
    samples. Runs whose names differ only in a trailing ``" (seed …)"`` form one method:
    each seed is a thin line, the average over seeds a thick one, all in the method's
    palette colour (:func:`calib.plots.palette.series_color`). A method with a single run
    gets a ±1 std band around its mean instead. No band is drawn for several seeds: bands
    of several runs overlap until none can be read.

    Args:
        histories: run name -> list of per-epoch dicts (e.g. the rows of a run's
            ``history.jsonl``) holding ``mean_key`` and ``std_key``; an ``epoch`` key, when
            present, gives the x axis (else 1, 2, ...).
        mean_key, std_key: the keys to read.
        title: optional figure title.
    """
    if not isinstance(histories, Mapping) or len(histories) == 0:
        raise ValueError("histories must be a non-empty mapping of run name -> per-epoch dicts")
    groups: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for name, history in histories.items():
        mean = _series(history, mean_key, name)
        std = _series(history, std_key, name)
        if (std < 0).any():
            raise ValueError(f"histories[{name!r}][{std_key!r}] has negative values")
        epochs = np.array([float(row.get("epoch", i + 1)) for i, row in enumerate(history)])
        groups.setdefault(_group_of(name), []).append((epochs, mean, std))
    fig = Figure(figsize=(7.0, 3.0), layout="constrained")
    ax_mean, ax_std = fig.subplots(1, 2, sharex=True)
    for i, (group, runs) in enumerate(groups.items()):
        colour = series_color(group, default=f"C{i % 10}")
        seeds = f" ({len(runs)} seeds)" if len(runs) > 1 else ""
        if len(runs) == 1:
            epochs, mean, std = runs[0]
            ax_mean.plot(epochs, mean, color=colour, lw=1.8, label=group)
            ax_mean.fill_between(epochs, mean - std, mean + std, color=colour, alpha=0.2, lw=0)
            ax_std.plot(epochs, std, color=colour, lw=1.8, label=group)
            continue
        for epochs, mean, std in runs:
            ax_mean.plot(epochs, mean, color=colour, lw=0.8, alpha=0.45)
            ax_std.plot(epochs, std, color=colour, lw=0.8, alpha=0.45)
        n = min(len(r[0]) for r in runs)
        x = runs[0][0][:n]
        ax_mean.plot(x, np.mean([r[1][:n] for r in runs], 0), color=colour, lw=2.0, label=group + seeds)
        ax_std.plot(x, np.mean([r[2][:n] for r in runs], 0), color=colour, lw=2.0, label=group + seeds)
    ax_mean.set_ylabel(r"mean of $\gamma$", fontsize=_FONT)
    ax_std.set_ylabel(r"std of $\gamma$ across samples", fontsize=_FONT)
    for ax in (ax_mean, ax_std):
        ax.set_xlabel("epoch", fontsize=_FONT)
        ax.tick_params(labelsize=_FONT)
        ax.grid(alpha=0.3)
    ax_std.set_ylim(bottom=0)
    handles, labels = ax_mean.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(groups), 3),
               fontsize=_FONT, frameon=False)
    if title:
        fig.suptitle(title, fontsize=_FONT + 1)
    return fig


def gamma_scatter(gamma: object, confidence: object, correct: object, *, title: str | None = None) -> Figure:
    """Each sample's learned gamma against its confidence, correct and wrong predictions apart.

    Args:
        gamma: ``(N,)`` non-negative gammas.
        confidence: ``(N,)`` top-label confidences in [0, 1].
        correct: ``(N,)`` booleans (or 0/1), whether the prediction was right.
    """
    g = as_tensor(gamma, "gamma").detach().double().cpu().numpy()
    c = as_tensor(confidence, "confidence").detach().double().cpu().numpy()
    ok = as_tensor(correct, "correct").detach().cpu().numpy().astype(bool)
    for arr, name in ((g, "gamma"), (c, "confidence"), (ok, "correct")):
        if arr.ndim != 1 or arr.shape[0] == 0:
            raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not (g.shape == c.shape == ok.shape):
        raise ValueError(f"gamma, confidence and correct must have the same length, got {g.shape}, {c.shape}, {ok.shape}")
    if not (np.isfinite(g).all() and np.isfinite(c).all()):
        raise ValueError("gamma and confidence must be finite")
    if (g < 0).any():
        raise ValueError("gamma must be non-negative")
    if (c < 0).any() or (c > 1).any():
        raise ValueError("confidence must lie in [0, 1]")
    fig = Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = fig.subplots()
    ax.scatter(c[ok], g[ok], s=8, alpha=0.6, color="#4878a8", label="correct")
    ax.scatter(c[~ok], g[~ok], s=14, alpha=0.8, marker="x", color="#c0392b", label="wrong")
    ax.set_xlabel("confidence", fontsize=_FONT)
    ax.set_ylabel(r"learned $\gamma$", fontsize=_FONT)
    ax.set_title(title or r"$\gamma$ per sample", fontsize=_FONT + 1)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT)
    return fig
