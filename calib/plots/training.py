"""Figures: training dynamics read from run histories (Mukhoti et al. 2020, §3, Figs. 1 and 2).

A *history* is the list of per-epoch dicts a :class:`calib.train.Trainer` writes to
``history.jsonl`` (``calib.train.load_history(run_dir)``). Every function returns a
matplotlib Figure and never calls ``plt.show()``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib

from matplotlib.figure import Figure

from .palette import series_color

__all__ = ["training_curves", "LABELS"]

# Readable axis titles for the keys a Trainer logs.
LABELS: dict[str, str] = {
    "train_loss": "train loss",
    "train_acc": "train accuracy",
    "train_nll": "train NLL",
    "val_nll": "validation NLL",
    "test_nll": "test NLL",
    "val_ece": "validation ECE",
    "test_ece": "test ECE",
    "val_acc": "validation accuracy",
    "test_acc": "test accuracy",
    "test_nll_correct": "test NLL, correct",
    "test_nll_wrong": "test NLL, wrong",
    "test_entropy_correct": "test entropy, correct",
    "test_entropy_wrong": "test entropy, wrong",
    "classifier_norm": "last-layer weight norm",
    "lr": "learning rate",
}
_STYLES = ("-", "--", ":", "-.")
_FONT = 9  # smallest font in a figure (points)

Panel = str | Sequence[str]


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of one key, skipping epochs where it is missing or None."""
    xs, ys = [], []
    for i, line in enumerate(history):
        v = line.get(key)
        if v is not None:
            xs.append(int(line.get("epoch", i + 1)))
            ys.append(float(v))
    return xs, ys


def _check(histories: Mapping[str, Sequence[Mapping[str, Any]]], panels: Sequence[Panel]) -> list[tuple[str, ...]]:
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError("histories must be a non-empty mapping {run label: history list}")
    for label, h in histories.items():
        if not isinstance(h, Sequence) or not h or not all(isinstance(line, Mapping) for line in h):
            raise ValueError(f"histories[{label!r}] must be a non-empty list of per-epoch dicts")
    if isinstance(panels, str) or not panels:
        raise ValueError("panels must be a non-empty list of keys (or tuples of keys sharing a panel)")
    out = [(p,) if isinstance(p, str) else tuple(p) for p in panels]
    known = {k for h in histories.values() for line in h for k in line}
    if missing := sorted({k for p in out for k in p} - known):
        raise ValueError(f"keys {missing} are in no history; available: {sorted(known)}")
    return out


def training_curves(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    panels: Sequence[Panel],
    *,
    ncols: int = 2,
    milestones: Sequence[int] = (),
    logy: Sequence[str] = (),
    titles: Mapping[str, str] | None = None,
    panel_size: tuple[float, float] | None = None,
    percent: Sequence[str] = (),
) -> Figure:
    """One panel per entry of ``panels``, one colour per run, epochs on the x axis.

    A panel is a history key (``"test_ece"``) or a tuple of keys drawn in the same panel
    with different line styles (``("train_nll", "test_nll")``, as in Mukhoti et al.
    (2020), Fig. 1a; ``("test_entropy_correct", "test_entropy_wrong")``, Fig. 1b).
    ``milestones`` draws dotted vertical lines at the learning-rate drops; keys in ``logy``
    get a log axis. Runs take their palette colour (:mod:`calib.plots.palette`) when their
    label names a loss. By default the figure is 7 in wide (the book's column), whatever
    ``ncols``; ``panel_size`` overrides the size of one panel in inches. Keys in
    ``percent`` (fractions such as ``"test_ece"``) are drawn times 100, their title ending
    "(%)", as the book's tables print them.
    """
    groups = _check(histories, panels)
    if ncols < 1:
        raise ValueError(f"ncols must be >= 1, got {ncols}")
    titles = dict(titles or {})
    ncols = min(ncols, len(groups))
    nrows = -(-len(groups) // ncols)
    if panel_size is None:
        panel_size = (7.0 / ncols, 2.3)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = [series_color(label, default=cycle[i % len(cycle)]) for i, label in enumerate(histories)]
    for ax, keys in zip(axes, groups):
        for r, (label, hist) in enumerate(histories.items()):
            for s, key in enumerate(keys):
                xs, ys = _series(hist, key)
                ys = [100 * y for y in ys] if key in percent else ys
                ax.plot(xs, ys, _STYLES[s % len(_STYLES)], color=colors[r % len(colors)], label=label, lw=1.4)
        if len(keys) > 1:
            ax.legend(*_style_legend(keys), fontsize=_FONT)
        for m in milestones:
            ax.axvline(m, color="0.6", ls=":", lw=1)
        if any(k in logy for k in keys):
            ax.set_yscale("log")
        title = " / ".join(LABELS.get(k, k) for k in keys) + (" (%)" if set(keys) & set(percent) else "")
        ax.set_title(titles.get(keys[0], title), fontsize=_FONT + 1)
        ax.set_xlabel("epoch", fontsize=_FONT)
        ax.tick_params(labelsize=_FONT)
        ax.grid(alpha=0.3)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    fig.legend(*_run_legend(histories, colors), loc="outside lower center", ncols=min(len(histories), 4), fontsize=_FONT, frameon=False)
    return fig


def _style_legend(keys: Sequence[str]) -> tuple[list[Any], list[str]]:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.3", ls=_STYLES[i % len(_STYLES)]) for i in range(len(keys))]
    return handles, [LABELS.get(k, k) for k in keys]


def _run_legend(histories: Mapping[str, Any], colors: Sequence[str]) -> tuple[list[Any], list[str]]:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[i % len(colors)], lw=2) for i in range(len(histories))]
    return handles, list(histories)
