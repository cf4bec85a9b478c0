"""Verdicts: one comparison of two methods' per-seed values, and a family corrected together."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Sequence

import numpy as np

from .._optional import need

need("tables", "calib.evidence", "scipy")
from scipy import stats  # noqa: E402  (after the guard naming the extra)

Direction = Literal["greater", "less", "equivalent"]
OUTCOMES = ("holds", "contradicted", "undecided")
# the family corrections of :func:`decide`, as a verdict line names them
CORRECTIONS = {"holm": "Holm's correction", "bh": "the Benjamini–Hochberg correction",
               "by": "the Benjamini–Yekutieli correction"}


@dataclass(frozen=True)
class Verdict:
    """One tested claim: ``effect`` = mean(a) − mean(b) (in the caller's units) with its
    ``1 − alpha`` interval ``[low, high]`` (``1 − 2 alpha`` for an equivalence claim), the
    p-value of the test and, within a family, its adjusted value ``p_adjusted``.

    An equivalence claim carries a second p-value, ``p_beyond``: that of "the difference
    lies beyond the margin" (its ``contradicted``), adjusted in a family as ``p_beyond_adjusted``.
    ``p`` is NaN where nothing measured the noise (the outcome is then ``undecided``).
    ``test_se`` is the test-set noise :func:`compare` added to the seeds' (0: seeds only).
    """

    claim: str
    direction: Direction
    effect: float
    low: float
    high: float
    p: float
    p_adjusted: float
    outcome: str
    n_a: int
    n_b: int
    test: str
    alpha: float = 0.05
    margin: float | None = None
    unit: str = ""
    family_size: int = 1  # how many hypotheses :func:`decide` corrected together
    p_beyond: float | None = None  # equivalence only: p of |difference| > margin
    p_beyond_adjusted: float | None = None
    test_se: float = 0.0  # the test-set noise added to the seeds' (0: the seeds' noise only)
    correction: str = "holm"  # how :func:`decide` adjusted the family's p-values

    def __str__(self) -> str:
        u = self.unit
        interval = f"[{self.low:+.3g}, {self.high:+.3g}]{u}" if math.isfinite(self.low) else "[no interval]"
        adjusted = self.family_size > 1 and math.isfinite(self.p)  # untested: not one of them
        # spelled out, so a reader meets no "CI" or "adj." to look up
        after = f"after {CORRECTIONS[self.correction]} for {self.family_size} tests"
        if self.direction == "equivalent":
            # two tests, each named by the claim its small p would show
            p = (f"p {_p_is(self.p_adjusted, self.alpha)} for \"within ±{self.margin:g}{u}\", "
                 f"{_p_text(self.p_beyond_adjusted, self.alpha)} for \"beyond\""
                 + (f", both {after}" if adjusted else ""))
        else:
            p = f"p {_p_is(self.p_adjusted, self.alpha)}" + (f" {after}" if adjusted else "")
        # the interval is per comparison; in a family the verdict follows the adjusted p
        level = (f"{100 * self.ci_level:.0f}% confidence interval"
                 + (" per comparison" if self.family_size > 1 and math.isfinite(self.low) else ""))
        return (f"{self.outcome}: {self.claim} (difference {self.effect:+.3g}{u}, "
                f"{level} {interval}, {p}, {self.test})")

    @property
    def ci_level(self) -> float:
        """The interval's confidence: 1 − alpha, or 1 − 2 alpha for an equivalence claim (the
        two one-sided tests at alpha each read the 1 − 2 alpha interval)."""
        return 1 - (2 * self.alpha if self.direction == "equivalent" else self.alpha)

    @property
    def p_outcome(self) -> float:
        """The adjusted p-value the outcome was decided by (an equivalence claim's
        ``contradicted``: ``p_beyond_adjusted``; otherwise ``p_adjusted``)."""
        if self.direction == "equivalent" and self.outcome == "contradicted":
            return float(self.p_beyond_adjusted)
        return self.p_adjusted

    def as_row(self) -> dict[str, object]:
        """The verdict as a table row (``pandas.DataFrame([v.as_row() for v in vs])``)."""
        return {"claim": self.claim, "verdict": self.outcome, "difference": self.effect,
                "interval low": self.low, "interval high": self.high, "p (adjusted)": self.p_outcome,
                "seeds": f"{self.n_a} vs {self.n_b}" if self.n_b else str(self.n_a), "test": self.test}


P_FLOOR = 1e-10  # smaller p-values print as "< 1e-10": their digits are model tails, not evidence


def _p_text(p: float | None, alpha: float) -> str:
    """p to two significant digits, or more where two would round it onto or across alpha
    (0.0498, 0.04999);
    "< 1e-10" below :data:`P_FLOOR`, 0 included (a t or normal tail past the floating-point
    range, e.g. a difference 40 test-set standard errors wide: a real test, never a measured
    0); "n/a" where no test could be made (NaN)."""
    if p is None or not math.isfinite(p):
        return "n/a"
    if p < P_FLOOR:
        return f"< {P_FLOOR:g}"
    for digits in range(2, 8):  # as few as keep p on its side of alpha (0.049995: "0.04999")
        text = f"{p:.{digits}g}"
        if (float(text) < alpha) == (p < alpha):
            return text
    return text


def _p_is(p: float | None, alpha: float) -> str:
    """:func:`_p_text` as it follows "p" in a sentence: "= 0.034", "< 1e-10", "= n/a"."""
    text = _p_text(p, alpha)
    return text if text.startswith("<") else f"= {text}"


def _values(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(x).__name__}") from None
    if arr.size == 0:
        raise ValueError(f"{name} is empty: give one value per seed")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or inf: {arr.tolist()}")
    return arr


def _outcome(direction: str, effect: float, p: float, alpha: float) -> str:
    if not p < alpha:  # NaN too: nothing measured
        return "undecided"
    return "holds" if (effect > 0) == (direction == "greater") else "contradicted"


def _check_compare(direction: str, alpha: float, margin: float | None, test_se: float,
                   resolution: float, seed_sd: float | None, seed_df: float, test_df: float) -> None:
    if direction not in ("greater", "less", "equivalent"):
        raise ValueError(f"direction must be 'greater', 'less' or 'equivalent', got {direction!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    if (direction == "equivalent") != (margin is not None):
        raise ValueError("margin is given exactly when direction='equivalent'")
    if margin is not None and not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    for name, v in (("test_se", test_se), ("resolution", resolution)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if seed_sd is not None and not (math.isfinite(seed_sd) and seed_sd >= 0):
        raise ValueError(f"seed_sd must be a finite number >= 0 or None, got {seed_sd!r}")
    for name, v in (("seed_df", seed_df), ("test_df", test_df)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0 (math.inf: known exactly), got {v!r}")
    if seed_sd is None and seed_df != math.inf:
        raise ValueError("seed_df is the degrees of freedom of seed_sd: give seed_sd too")


def compare(a: Sequence[float], b: Sequence[float] | float, claim: str = "", *,
            direction: Direction = "greater", alpha: float = 0.05, paired: bool | None = None,
            test_se: float = 0.0, margin: float | None = None, unit: str = "",
            seed_sd: float | None = None, seed_df: float = math.inf, resolution: float = 0.0,
            test_df: float = math.inf) -> Verdict:
    """Test the claim "a > b" (``direction="greater"``), "a < b" (``"less"``) or
    ``|a − b| < margin`` (``"equivalent"``) on per-seed values.

    ``a``, ``b``: one value per seed (``b`` may be a constant: a one-sample test).
    ``paired``: None pairs by position when both have the same length (the same seeds).
    ``test_se``: the test-set sampling noise of mean(a) − mean(b) (:func:`test_se`),
    added to the seed noise; 0 counts the seed noise only. Adding it to the spread of
    the per-seed differences counts the runs' own test noise twice, so the variance is
    conservative (most where the runs' test errors are little correlated).
    ``test_df``: the degrees of freedom of ``test_se`` (a bootstrap of B resamples: B − 1),
    so a tiny seed spread cannot make the test noise count as exactly known. With it the
    degrees of freedom are Welch–Satterthwaite's over both parts: where the test noise is
    comparable to the seeds', they exceed the seeds' n − 1, and the interval can come out
    narrower (and p smaller) than the seed noise alone would give.
    ``resolution``: the values are rounded to this step (a temperature from a 0.1 grid):
    each value's variance is at least the rounding's ``resolution² / 12``, so seeds that all
    round to the same number do not make the noise look like zero.

    A side with a single run has no seed spread of its own. Without ``seed_sd`` the verdict
    is then ``undecided`` with p = NaN. ``seed_sd`` is the per-run seed standard deviation
    of both methods (assumed common), e.g. from a pilot with more seeds; it gives the
    difference of means the variance ``seed_sd² (1/n_a + 1/n_b)`` (paired: ``2 seed_sd² / n``,
    one-sample: ``seed_sd² / n``). ``seed_df``: its degrees of freedom (a pilot of k seeds:
    k − 1; default: known exactly), so the t quantile counts its uncertainty (Welch 1947,
    Satterthwaite 1946, with ``test_se``). To borrow the other side's measured spread, pass
    ``seed_sd=np.std(b, ddof=1), seed_df=len(b) - 1``: the t-test of one new run against a
    sample. ``seed_sd=0`` makes the verdict conditional on the runs at hand (said in ``test``),
    as does a ``seed_sd`` of float64 rounding only (16 ulps of the values, as a measured spread).
    Where both sides have two or more runs, ``seed_sd`` is not used.

    Outcome, for ``greater``/``less``: the two-sided test at level ``alpha`` rejects "no
    difference" and the effect has the claimed sign (``holds``) or the opposite one
    (``contradicted``); else ``undecided``, so ``holds`` means the ``1 − alpha`` interval lies
    on the claimed side of 0. For ``equivalent``: ``holds`` when the two one-sided tests
    (Schuirmann 1987) reject at ``alpha``, i.e. the ``1 − 2 alpha`` interval lies inside
    ``(−margin, margin)`` (p = the larger one-sided p); ``contradicted`` when the ``1 − alpha``
    interval lies wholly beyond one margin (``p_beyond`` = twice the smaller one-sided p
    against the margins, below alpha). Zero measured spread (or float64 rounding only) and no
    test noise: p = NaN.
    """
    _check_compare(direction, alpha, margin, test_se, resolution, seed_sd, seed_df, test_df)
    xa = _values(a, "a")
    one_sample = np.ndim(b) == 0
    xb = _values([b] if one_sample else b, "b")
    if paired is None:
        paired = not one_sample and xa.size == xb.size
    if paired and xa.size != xb.size:
        raise ValueError(f"paired=True needs as many values in a as in b, got {xa.size} and {xb.size}")
    n_b = 0 if one_sample else int(xb.size)
    effect, seed_var, df, test = _seed_noise(xa, xb, one_sample, paired, resolution)
    if seed_var is None:  # a side with one run: its seed noise is not measured
        if seed_sd is None:
            return _untested(claim, direction, effect, int(xa.size), n_b,
                             test + " (one run on a side: seed noise unknown, give seed_sd)", alpha, margin, unit)
        sizes = 1 / xa.size + (0 if one_sample else 1 / xb.size)
        scale = max(np.abs(xa).max(), np.abs(xb).max())
        if seed_sd <= 16 * np.finfo(float).eps * scale:  # the rounding rule of _sample_var
            seed_sd = 0.0
        seed_var, df = seed_sd ** 2 * sizes, seed_df
        if resolution > 0:
            seed_var = max(seed_var, resolution ** 2 / 12 * sizes)
        test += f", seed sd {seed_sd:.3g} given" + (f" ({seed_df:g} df)" if math.isfinite(seed_df) else "")
        if seed_sd == 0:
            test += " (conditional on these runs)"
    var = seed_var + test_se ** 2
    if test_se > 0:  # Welch-Satterthwaite over the seed and the bootstrap variances
        den = (seed_var ** 2 / df if seed_var > 0 and math.isfinite(df) else 0.0) + (
            test_se ** 4 / test_df if math.isfinite(test_df) else 0.0)
        df = var ** 2 / den if den > 0 else math.inf
        test += " + test-set bootstrap"
    verdict = _decide_one(claim, direction, effect, var, df, alpha, margin, unit, int(xa.size), n_b, test)
    return replace(verdict, test_se=float(test_se))


def _untested(claim: str, direction: Direction, effect: float, n_a: int, n_b: int, test: str, alpha: float,
              margin: float | None, unit: str) -> Verdict:
    """Nothing measured the noise: no interval, p = NaN, undecided (and so no hypothesis for
    :func:`decide` to correct)."""
    nan = math.nan if direction == "equivalent" else None
    return Verdict(claim, direction, effect, math.nan, math.nan, math.nan, math.nan, "undecided",
                   n_a, n_b, test, alpha, margin, unit, p_beyond=nan, p_beyond_adjusted=nan)


def _decide_one(claim: str, direction: Direction, effect: float, var: float, df: float, alpha: float,
                margin: float | None, unit: str, n_a: int, n_b: int, test: str) -> Verdict:
    """The verdict from the effect, its variance and degrees of freedom."""
    eq = direction == "equivalent"
    if var == 0:  # every value the same and no test noise: nothing measures the noise
        return _untested(claim, direction, effect, n_a, n_b, test + " (zero spread: noise not measured)",
                         alpha, margin, unit)
    se = math.sqrt(var)
    ppf, sf = (stats.norm.ppf, stats.norm.sf) if math.isinf(df) else (
        lambda q: stats.t.ppf(q, df), lambda x: stats.t.sf(x, df))  # unfrozen: 10x faster
    half = ppf(1 - (2 * alpha if eq else alpha) / 2) * se
    low, high = effect - half, effect + half
    beyond = None
    if eq:  # sf(-x) = cdf(x): the distributions are symmetric
        p = max(sf((effect + margin) / se), sf((margin - effect) / se))
        beyond = float(min(1.0, 2 * min(sf((effect - margin) / se), sf(-(effect + margin) / se))))
        outcome = "holds" if p < alpha else "contradicted" if beyond < alpha else "undecided"
    else:
        p = 2 * sf(abs(effect) / se)
        outcome = _outcome(direction, effect, p, alpha)
    return Verdict(claim, direction, effect, low, high, float(p), float(p), outcome, n_a, n_b, test,
                   alpha, margin, unit, p_beyond=beyond, p_beyond_adjusted=beyond)


def _seed_noise(a: np.ndarray, b: np.ndarray, one_sample: bool, paired: bool,
                resolution: float) -> tuple[float, float | None, float, str]:
    """(mean difference, its variance from the seeds or None where a side has one run,
    degrees of freedom, test name), the rounding's variance as a floor."""
    floor = resolution ** 2 / 12  # one rounded value's variance
    if one_sample or paired:
        d = a - b[0] if one_sample else a - b
        n = d.size
        name = f"{'one-sample' if one_sample else 'paired'} t, {n} seed{'s' * (n > 1)}"
        if n < 2:
            return float(d.mean()), None, math.inf, name
        scale = max(np.abs(a).max(), np.abs(b).max())
        var, least = _sample_var(d, scale) / n, (1 if one_sample else 2) * floor / n
        if var < least:
            var, name = least, name + f", rounding to {resolution:g} as the floor"
        return float(d.mean()), var, n - 1, name
    name = f"Welch t, {a.size} vs {b.size} seeds"
    if min(a.size, b.size) < 2:
        return float(a.mean() - b.mean()), None, math.inf, name
    va, vb = (_sample_var(x, np.abs(x).max()) / x.size for x in (a, b))
    fa, fb = floor / a.size, floor / b.size
    if va < fa or vb < fb:
        va, vb, name = max(va, fa), max(vb, fb), name + f", rounding to {resolution:g} as the floor"
    var = va + vb
    den = va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1)
    return float(a.mean() - b.mean()), var, var ** 2 / den if den > 0 else math.inf, name


def _sample_var(x: np.ndarray, scale: float) -> float:
    """x's sample variance; 0 where the spread is float64 rounding of the values (16 ulps of
    ``scale``; a float32 computation's noise is larger and stays a spread):
    ``0.1 + 0.2`` beside ``0.3`` is one value, and a test on that spread would print
    "holds, p < 1e-10" for a difference nothing measured."""
    var = float(x.var(ddof=1))
    return 0.0 if var <= (16 * np.finfo(float).eps * float(scale)) ** 2 else var


def _adjust(p: np.ndarray, method: str) -> np.ndarray:
    if method == "holm":
        order = np.argsort(p, kind="stable")
        scaled = np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p))))
        adjusted = np.empty_like(p)
        adjusted[order] = np.minimum(scaled, 1.0)
        return adjusted
    return stats.false_discovery_control(p, method=method)


def decide(verdicts: Sequence[Verdict], method: Literal["holm", "bh", "by"] = "holm") -> list[Verdict]:
    """A family of verdicts with their p-values adjusted together, outcomes re-decided.

    ``holm``: Holm's step-down (controls the family-wise error rate, Holm 1979); ``bh``/``by``:
    Benjamini–Hochberg / –Yekutieli false discovery rate (``scipy.stats.false_discovery_control``).
    An equivalence claim brings two hypotheses, "within the margin" (``p``, its ``holds``) and
    "beyond it" (``p_beyond``, its ``contradicted``), and both are adjusted with the rest. A
    verdict with p = NaN (nothing measured its noise) is no test: it stays ``undecided`` and
    does not count in the family. Intervals stay per comparison.
    """
    if method not in ("holm", "bh", "by"):
        raise ValueError(f"method must be 'holm', 'bh' or 'by', got {method!r}")
    if not verdicts:
        return []
    if any(not isinstance(v, Verdict) for v in verdicts):
        raise TypeError("verdicts must be Verdict objects (from compare)")
    eq = [i for i, v in enumerate(verdicts) if v.direction == "equivalent"]
    p = np.array([v.p for v in verdicts] + [verdicts[i].p_beyond for i in eq], dtype=float)
    tested = np.isfinite(p)
    adjusted = np.full_like(p, math.nan)
    if tested.any():
        adjusted[tested] = _adjust(p[tested], method)
    beyond = dict(zip(eq, adjusted[len(verdicts):]))
    out = []
    for i, (v, q) in enumerate(zip(verdicts, adjusted)):
        if v.direction == "equivalent":
            qb = float(beyond[i])
            outcome = "holds" if q < v.alpha else "contradicted" if qb < v.alpha else "undecided"
            out.append(replace(v, p_adjusted=float(q), p_beyond_adjusted=qb, outcome=outcome,
                               family_size=int(tested.sum()), correction=method))
        else:
            out.append(replace(v, p_adjusted=float(q), outcome=_outcome(v.direction, v.effect, float(q), v.alpha),
                               family_size=int(tested.sum()), correction=method))
    return out


def table(verdicts: Sequence[Verdict], digits: int = 2) -> object:
    """The verdicts as a pandas DataFrame, one row each (difference and interval rounded)."""
    import pandas as pd

    frame = pd.DataFrame([v.as_row() for v in verdicts])
    for col in ("difference", "interval low", "interval high"):
        frame[col] = frame[col].round(digits)
    frame["p (adjusted)"] = [_p_text(v.p_outcome, v.alpha) for v in verdicts]  # never 0.0496 as 0.05
    return frame.set_index("claim")


def tally(verdicts: Sequence[Verdict]) -> str:
    """``"2 of 4 hold, 0 are contradicted and 2 are undecided"``: a family's outcomes for prose.

    Each verb agrees with its count, the number of verdicts: "1 of 4 holds", "1 is undecided".
    No verdicts: ``"none tested"``."""
    if not verdicts:
        return "none tested"
    n = {o: sum(v.outcome == o for v in verdicts) for o in OUTCOMES}
    held, contra, undecided = n["holds"], n["contradicted"], n["undecided"]
    return (f"{held} of {len(verdicts)} {_agree(held, 'holds', 'hold')}, "
            f"{contra} {_agree(contra, 'is', 'are')} contradicted and "
            f"{undecided} {_agree(undecided, 'is', 'are')} undecided")


def _agree(count: int, one: str, many: str) -> str:
    """The verb for a subject of ``count`` things: singular for exactly one."""
    return one if count == 1 else many


class Family:
    """A family of claims tested over a grid of conditions and corrected together.

    Each claim is a row and each condition (a training-set size, a protocol) a column, as
    in a regime map. :meth:`add` tests one cell with :func:`compare`, or, while a side has
    fewer than ``min_n`` values (runs still to come), notes how many it has, so a sweep
    that is still running leaves blanks rather than one-seed guesses. :meth:`verdicts`
    corrects the tested cells together with :func:`decide`; :meth:`table` lays the cells
    out ("+1.42 holds", "1 of 3 seeds", "not run yet") and :meth:`tally` counts them for
    prose. The correction covers the cells tested when it is called, so adjusted p-values
    move as a sweep fills in: read the family once the sweep is complete.

    >>> fam = Family(["small", "large"], min_n=3)
    >>> fam.add("CE over-confident", "small", [1.4, 1.5, 1.3], 1.0, "T > 1 (small)")
    >>> fam.add("CE over-confident", "large", [1.2], 1.0, "T > 1 (large)")
    >>> fam.tally()
    '1 of 1 holds, 0 are contradicted and 0 are undecided (1 more not tested yet)'
    """

    def __init__(self, columns: Sequence[str], *, min_n: int = 2,
                 method: Literal["holm", "bh", "by"] = "holm") -> None:
        if isinstance(min_n, bool) or not isinstance(min_n, int) or min_n < 2:
            raise ValueError(f"min_n must be an int >= 2 (a test needs two values a side), got {min_n!r}")
        if method not in ("holm", "bh", "by"):
            raise ValueError(f"method must be 'holm', 'bh' or 'by', got {method!r}")
        self.columns, self.min_n, self.method = list(columns), min_n, method
        self._cells: dict[tuple[str, str], Verdict | str] = {}

    def add(self, row: str, column: str, a: Sequence[float], b: Sequence[float] | float,
            claim: str, **compare_kwargs: object) -> None:
        """Test ``claim`` on ``a`` against ``b`` (:func:`compare`'s arguments) in cell (row, column)."""
        if column not in self.columns:
            raise ValueError(f"column {column!r} is not one of {self.columns}")
        n = min(np.size(x) for x in (a, b) if np.ndim(x))  # a constant b: a one-sample test
        self._cells[row, column] = (compare(a, b, claim, **compare_kwargs) if n >= self.min_n
                                    else f"{n} of {self.min_n} seeds" if n else "not run yet")

    def put(self, row: str, column: str, verdict: Verdict | str) -> None:
        """Place a verdict tested elsewhere (e.g. by :func:`compare_runs`) in cell (row, column),
        or a note for a cell with no test ("same method"), which the correction leaves out.

        :func:`decide` adjusts the raw ``p``, so a verdict already corrected in its own family
        gets the same outcome here when the family holds the same verdicts."""
        if column not in self.columns:
            raise ValueError(f"column {column!r} is not one of {self.columns}")
        if not isinstance(verdict, (Verdict, str)):
            raise TypeError(f"verdict must be a Verdict (from compare) or a note, got {type(verdict).__name__}")
        self._cells[row, column] = verdict

    @classmethod
    def of(cls, verdicts: Sequence[Verdict], cells: Sequence[tuple[str, str]],
           columns: Sequence[str] | None = None,
           method: Literal["holm", "bh", "by"] = "holm") -> Family:
        """A family from verdicts computed elsewhere (e.g. the list :func:`decide` returned):
        ``cells[i]`` is the (row, column) of ``verdicts[i]``; ``columns`` default to the
        order they first appear in. The correction is :func:`decide`'s again, which reads
        each verdict's unadjusted p, so a list already decided keeps its outcomes."""
        if len(verdicts) != len(cells):
            raise ValueError(f"verdicts and cells must have the same length, got {len(verdicts)} and {len(cells)}")
        if len(set(cells)) != len(cells):
            raise ValueError("cells must be distinct (row, column) pairs")
        fam = cls(columns if columns is not None else list(dict.fromkeys(c for _, c in cells)),
                  method=method)
        for v, (row, column) in zip(verdicts, cells):
            fam.put(row, column, v)
        return fam

    def verdicts(self) -> list[Verdict]:
        """The tested cells' verdicts, corrected together, in the order they were added."""
        return decide([v for v in self._cells.values() if isinstance(v, Verdict)], self.method)

    def table(self, digits: int = 2) -> object:
        """A pandas DataFrame: one row per claim, one column per condition; a cell never
        added (a condition outside the design, e.g. a loss one protocol does not train)
        reads "—", a planned cell whose runs are missing "not run yet"."""
        import pandas as pd

        rows: dict[str, dict[str, str]] = {}
        for (row, column), cell in self.cells().items():
            text = f"{cell.effect:+.{digits}f}{cell.unit} {cell.outcome}" if isinstance(cell, Verdict) else cell
            rows.setdefault(row, dict.fromkeys(self.columns, "—"))[column] = text
        return pd.DataFrame.from_dict(rows, orient="index")

    def cells(self) -> dict[tuple[str, str], Verdict | str]:
        """``{(row, column): cell}`` in the order added: a tested cell's :class:`Verdict` after
        the family's correction, an untested one's note ("1 of 3 seeds", "not run yet")."""
        decided = iter(self.verdicts())
        return {key: next(decided) if isinstance(cell, Verdict) else cell
                for key, cell in self._cells.items()}

    def outcomes(self) -> dict[tuple[str, str], str]:
        """``{(row, column): outcome}`` after the correction; an untested cell gives its note
        ("1 of 3 seeds"), a cell never added is absent. For checking what prose says of the map."""
        return {key: cell.outcome if isinstance(cell, Verdict) else cell for key, cell in self.cells().items()}

    def tally(self) -> str:
        """:func:`tally` of the corrected verdicts, and how many cells are not tested yet."""
        waiting = sum(not isinstance(v, Verdict) for v in self._cells.values())
        tested = self.verdicts()
        if not tested:
            return f"none of {waiting} tested yet" if waiting else "none tested"
        return tally(tested) + (f" ({waiting} more not tested yet)" if waiting else "")
