"""Verdicts in words a reader takes in at once: signed numbers, intervals, "rise shown"."""
from __future__ import annotations

import math

from .verdict import Verdict, _p_is


MAX_DECIMALS = 6  # below a millionth an effect or a bound is round-off: it prints as 0


def _decimals(x: float) -> int:
    """Decimals that give ``x`` two significant digits after rounding (none for |x| >= 10),
    at most :data:`MAX_DECIMALS`."""
    return min(MAX_DECIMALS, max(0, 1 - int(f"{abs(x):.1e}".split("e")[1]))) if x else 0


def number(x: float, unit: str = "", decimals: int | None = None) -> str:
    """``x`` signed, with a true minus sign and no exponent, to ``decimals`` places or by
    default to two significant digits: ``-0.0337`` -> ``"−0.034"``, ``0.0999`` ->
    ``"+0.10"``, ``142.3`` -> ``"+142"``."""
    if not math.isfinite(x):
        return "n/a"
    text = f"{abs(x):.{_decimals(x) if decimals is None else decimals}f}"
    if float(text) == 0:
        return "0" + unit
    return ("+" if x > 0 else "−") + text + unit


def p_value(p: float | None, alpha: float = 0.05) -> str:
    """``p`` as a sentence quotes it: ``"p = 0.034"`` to two significant digits (three where
    two would round it across ``alpha``), ``"p < 1e-10"`` below the print floor, ``"p = n/a"``
    where no test was made; the rule of every verdict line (:class:`Verdict`)."""
    return f"p {_p_is(p, alpha)}"


def interval(low: float, high: float, unit: str = "") -> str:
    """``"[−0.14, +0.07]"``: both ends to the decimals that give the wider end two
    significant digits, one more while the two ends would print alike, and an end that
    would round to 0 with its own two digits; ``"[no interval]"`` when there is none."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "[no interval]"
    d = _decimals(max(abs(low), abs(high)))
    while d < MAX_DECIMALS and low != high and number(low, decimals=d) == number(high, decimals=d):
        d += 1  # "[−10, −10]" hides a real width: one more decimal, "[−10.4, −9.7]"
    ends = [number(x, decimals=d) for x in (low, high)]
    # an end that rounds to 0 but is not 0 keeps its own two digits: "[−1.0, −0.0098]"
    ends = [number(x) if e == "0" and x != 0 else e for x, e in zip((low, high), ends)]
    return f"[{ends[0]}, {ends[1]}]{unit}"


def shown(v: Verdict, up: str = "rise", down: str = "fall") -> str:
    """What a directional verdict shows, in words: for the claim "a rises" (``greater``,
    ``up="rise"``) *holds* reads "rise shown", *contradicted* "fall shown" and *undecided*
    "no rise shown" (the claim's own direction is the one not shown). For ``less`` the roles
    swap ("fall shown" / "rise shown" / "no fall shown"); an equivalence claim reads
    "equal within ±margin shown" / "difference beyond ±margin shown" / "neither shown"."""
    if not isinstance(v, Verdict):
        raise TypeError(f"v must be a Verdict (from compare or decide), got {type(v).__name__}")
    if v.direction == "equivalent":
        m = f"±{v.margin:g}{v.unit}"  # the margin as the claim states it
        return {"holds": f"equal within {m} shown", "contradicted": f"difference beyond {m} shown",
                "undecided": "neither shown"}[v.outcome]
    claimed, other = (up, down) if v.direction == "greater" else (down, up)
    return {"holds": f"{claimed} shown", "contradicted": f"{other} shown",
            "undecided": f"no {claimed} shown"}[v.outcome]


def verdict_line(v: Verdict, label: str, up: str = "rise", down: str = "fall") -> str:
    """A verdict as a sentence a reader takes in at once: the quantity, its difference with
    the interval, and what that shows (:func:`shown`), e.g.
    ``"CE's test NLL after the drop: −0.034 [−0.14, +0.07]: no rise shown"``."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must name the quantity compared, got {label!r}")
    return f"{label}: {number(v.effect)} {interval(v.low, v.high, v.unit)}: {shown(v, up, down)}"
