"""Figures for meta-regularisation (paper 001): the per-sample gamma a gamma-Net learns.

``gamma_over_epochs``  mean and standard deviation of gamma per epoch, one line per run
                        (001 Fig. 3c-d)
``gamma_scatter``      each sample's gamma against its confidence, correct vs wrong

Both return a :class:`matplotlib.figure.Figure` built without pyplot (safe under Agg,
nothing accumulates in pyplot's figure manager); a notebook shows it when it is the
value of the last line of a cell.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from .._checks import as_tensor

__all__ = ["gamma_over_epochs", "gamma_scatter"]

History = Sequence[Mapping[str, float]]


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


def gamma_over_epochs(
    histories: Mapping[str, History],
    *,
    mean_key: str = "gamma_mean",
    std_key: str = "gamma_std",
    title: str | None = None,
) -> Figure:
    """Mean (with a +-1 std band) and std of the learned gamma per epoch (001 Fig. 3c-d).

    Args:
        histories: run name -> list of per-epoch dicts (e.g. the rows of a run's
            ``history.jsonl``) holding ``mean_key`` and ``std_key``; an ``epoch`` key, when
            present, gives the x axis (else 1, 2, ...).
        mean_key, std_key: the keys to read.
        title: optional figure title.
    """
    if not isinstance(histories, Mapping) or len(histories) == 0:
        raise ValueError("histories must be a non-empty mapping of run name -> per-epoch dicts")
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax_mean, ax_std = fig.subplots(1, 2)
    for name, history in histories.items():
        mean = _series(history, mean_key, name)
        std = _series(history, std_key, name)
        if (std < 0).any():
            raise ValueError(f"histories[{name!r}][{std_key!r}] has negative values")
        epochs = np.array([float(row.get("epoch", i + 1)) for i, row in enumerate(history)])
        (line,) = ax_mean.plot(epochs, mean, marker="o", ms=3, label=name)
        ax_mean.fill_between(epochs, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        ax_std.plot(epochs, std, marker="o", ms=3, color=line.get_color(), label=name)
    ax_mean.set(xlabel="epoch", ylabel=r"mean $\gamma$ ($\pm$1 std)", title=r"mean of $\gamma$")
    ax_std.set(xlabel="epoch", ylabel=r"std of $\gamma$", title=r"spread of $\gamma$ across samples")
    ax_std.set_ylim(bottom=0)
    ax_mean.legend(fontsize="small")
    if title:
        fig.suptitle(title)
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
    fig = Figure(figsize=(4.6, 3.4), layout="constrained")
    ax = fig.subplots()
    ax.scatter(c[ok], g[ok], s=8, alpha=0.6, label="correct")
    ax.scatter(c[~ok], g[~ok], s=12, alpha=0.8, marker="x", label="wrong")
    ax.set(xlabel="confidence", ylabel=r"learned $\gamma$", title=title or r"$\gamma$ per sample")
    ax.legend(fontsize="small")
    return fig
