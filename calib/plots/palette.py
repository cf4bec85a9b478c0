"""One colour per loss and one per focal parameter γ, the same in every figure of the book.

A reader who has learnt that cross-entropy is black and BSCE-GRA is green in one chapter
should find them so in every other. Figures of :mod:`calib.plots` take their colours
from here; a chapter that draws a series of its own asks here too::

    from calib.plots import palette
    palette.color_for("focal")        # the loss's colour
    palette.color_for("FLSD-53")      # display names work as well as registry names
    palette.gamma_color(3)            # focal loss with γ = 3
    palette.series_color("focal γ=2") # a legend label: the loss, or its γ if any

Losses get colours from the Okabe–Ito and Tableau palettes, chosen to stay apart for
readers with the common colour-vision deficiencies; γ gets a fixed step of a sequential
map (light to dark as γ grows), so "more focal" always reads as "darker".
"""
from __future__ import annotations

import re

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex

__all__ = ["LOSS_COLORS", "GAMMA_COLORS", "color_for", "gamma_color", "series_color", "NEUTRAL"]

#: Registry name (as in :func:`calib.losses.make`) -> colour. Methods that are not a loss
#: on their own (temperature scaling, the γ-Net variants) have entries too.
LOSS_COLORS: dict[str, str] = {
    "ce": "#000000",
    "ce_ts": "#7f7f7f",
    "focal": "#0072b2",
    "flsd53": "#56b4e9",
    "dual_focal": "#cc79a7",
    "inverse_focal": "#d55e00",
    "brier": "#8c564b",
    "bsce": "#e69f00",
    "focal_gra": "#1f77b4",
    "flsd53_gra": "#393b79",
    "dual_focal_gra": "#9467bd",
    "bsce_gra": "#009e73",
    "label_smoothing": "#bcbd22",
    "logit_norm": "#17becf",
    "entropy_reg": "#ff7f0e",
    "mmce": "#e377c2",
    "dece": "#b8a000",
    "ce_dece": "#b8a000",
    "sece": "#2ca02c",
    "ce_sece": "#2ca02c",
    "mixup": "#6b6ecf",
    "gamma_net_dece": "#a55194",
    "gamma_net_sece": "#009e73",
}

#: Display names and spellings used in the book -> registry name of :data:`LOSS_COLORS`.
_ALIASES: dict[str, str] = {
    "cross-entropy": "ce",
    "cross entropy": "ce",
    "nll": "ce",
    "ce (ts)": "ce_ts",
    "ce+ts": "ce_ts",
    "fl": "focal",
    "focal loss": "focal",
    "flsd": "flsd53",
    "flsd-53": "flsd53",
    "dfl": "dual_focal",
    "dual focal": "dual_focal",
    "inverse focal": "inverse_focal",
    "brier score": "brier",
    "fl-gra": "focal_gra",
    "fl_gra": "focal_gra",
    "flsd-53-gra": "flsd53_gra",
    "flsd53-gra": "flsd53_gra",
    "dfl-gra": "dual_focal_gra",
    "dfl_gra": "dual_focal_gra",
    "bsce-gra": "bsce_gra",
    "ls": "label_smoothing",
    "label smoothing": "label_smoothing",
    "l1": "logit_norm",
    "logit penalty": "logit_norm",
    "entropy": "entropy_reg",
    "fl_γ-dece": "gamma_net_dece",
    "fl_γ-sece": "gamma_net_sece",
    "flγ-dece": "gamma_net_dece",
    "flγ-sece": "gamma_net_sece",
    "ce-dece": "ce_dece",
    "ce-sece": "ce_sece",
}

#: Fixed colours for the values of γ the book uses (0 is cross-entropy's γ).
_GAMMA_MAP = colormaps["plasma"]
_GAMMA_MAX = 6.0
GAMMA_COLORS: dict[float, str] = {
    g: to_hex(_GAMMA_MAP(0.85 - 0.8 * g / _GAMMA_MAX)) for g in (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
}
GAMMA_COLORS[0.0] = LOSS_COLORS["ce"]

#: Colour for reference lines (diagonals, g = 1, ...), never a series.
NEUTRAL = "#555555"


def _key(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip().lower()
    if not key:
        raise ValueError("name must be a non-empty loss name")
    return _ALIASES.get(key, key.replace("-", "_").replace(" ", "_"))


def color_for(name: str) -> str:
    """The colour of a loss or method, by registry name (``"bsce_gra"``) or display name
    (``"BSCE-GRA"``, ``"FLSD-53"``, ``"CE (TS)"``). Raises ``ValueError`` for unknown names.
    """
    key = _key(name)
    if key not in LOSS_COLORS:
        raise ValueError(f"name {name!r} has no colour; known: {', '.join(sorted(LOSS_COLORS))}")
    return LOSS_COLORS[key]


def gamma_color(gamma: float) -> str:
    """The colour of focal loss with parameter γ: fixed for 0, 0.5, 1, 2, …, 6; other values
    in ``[0, 6]`` take the same sequential map (γ = 0 is cross-entropy, black)."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)):
        raise TypeError(f"gamma must be a number, got {type(gamma).__name__}")
    g = float(gamma)
    if not np.isfinite(g) or g < 0 or g > _GAMMA_MAX:
        raise ValueError(f"gamma must lie in [0, {_GAMMA_MAX:g}], got {gamma!r}")
    if g in GAMMA_COLORS:
        return GAMMA_COLORS[g]
    return to_hex(_GAMMA_MAP(0.85 - 0.8 * g / _GAMMA_MAX))


_GAMMA_IN_LABEL = re.compile(r"(?:γ|gamma)\s*=\s*([0-9]*\.?[0-9]+)")


def series_color(label: str, default: str | None = None) -> str | None:
    """Colour of a legend label such as ``"CE"``, ``"focal γ=3"`` or ``"FL_γ-SECE (seed 1)"``.

    A focal label with ``γ=…`` gets :func:`gamma_color`; otherwise the part before a
    space-separated qualifier (``" (seed 1)"``, ``" γ=5"``) names the loss. Labels that
    match nothing get ``default``.
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    base = re.sub(r"\s*\(seed[^)]*\)\s*$", "", label.strip())
    match = _GAMMA_IN_LABEL.search(base)
    head = _GAMMA_IN_LABEL.sub("", base).strip(" ,:").lower()
    if match and head in ("focal", "fl", "focal loss"):
        try:
            return gamma_color(float(match.group(1)))
        except ValueError:
            return default
    for candidate in (base, head, head.split(" ")[0] if head else ""):
        if candidate:
            try:
                return color_for(candidate)
            except ValueError:
                continue
    return default
