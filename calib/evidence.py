"""The book's statistics: is a difference between two training methods real at this scale?

A chapter trains each method with a few seeds and evaluates every run on one test set.
Two sources of noise stand between its numbers and the truth:

* **seed noise**: another initialisation and batch order gives another network;
* **test-set noise**: another draw of test images gives another estimate of the same
  network's ECE or NLL (a perfectly calibrated model has a 15-bin ECE of about 3 % at
  1,000 test images, :func:`noise_floor`).

:func:`compare` takes two methods' per-seed values of a metric and returns a
:class:`Verdict`: the mean difference with a confidence interval, a p-value and one of
``holds`` / ``contradicted`` / ``undecided`` for the stated direction. Seeds pair when
both methods ran the same seeds (``scipy.stats.ttest_rel``), else Welch's test
(``ttest_ind(equal_var=False)``); a constant ``b`` gives a one-sample test
(``ttest_1samp``). Given ``test_se`` (from :func:`test_se`, a bootstrap over test
examples), the interval counts both noises: ``se² = s_d²/n + test_se²`` with
Welch–Satterthwaite degrees of freedom. :func:`decide` corrects a family of verdicts
together (Holm 1979, or Benjamini–Hochberg via ``scipy.stats.false_discovery_control``).

:func:`detectable_difference` answers the planning question: the smallest true
difference that ``n_seeds`` seeds and ``n_test`` test images decide at a given power.

>>> from calib import evidence
>>> ce, focal = [7.1, 8.0, 7.6], [2.0, 2.9, 1.7]
>>> v = evidence.compare(ce, focal, "CE's ECE above focal's", unit="%")
>>> v.outcome
'holds'
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Literal, Sequence

import numpy as np

from . import metrics
from ._optional import need

need("tables", "calib.evidence", "scipy")
from scipy import stats  # noqa: E402  (after the guard naming the extra)


Direction = Literal["greater", "less", "equivalent"]
OUTCOMES = ("holds", "contradicted", "undecided")

__all__ = ["Verdict", "Family", "compare", "decide", "test_se", "compare_runs", "noise_floor",
           "detectable_difference", "table", "tally", "entropy_of_wrong", "nll_of_wrong", "OUTCOMES"]


@dataclass(frozen=True)
class Verdict:
    """One tested claim: ``effect`` = mean(a) − mean(b) (in the caller's units) with its
    ``1 − alpha`` interval ``[low, high]`` (``1 − 2 alpha`` for an equivalence claim), the
    p-value of the test and, within a family, its adjusted value ``p_adjusted``."""

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
    family_size: int = 1  # how many verdicts :func:`decide` corrected together

    def __str__(self) -> str:
        u = self.unit
        interval = f"[{self.low:+.3g}, {self.high:+.3g}]{u}" if math.isfinite(self.low) else "[no interval]"
        adjusted = self.family_size > 1
        p = f"p = {_p_text(self.p_adjusted, self.alpha)}" + (" adj." if adjusted else "")
        # the interval is per comparison; in a family the verdict follows the adjusted p
        level = f"{100 * (1 - self._level()):.0f}% CI" + (" per comparison" if adjusted else "")
        return (f"{self.outcome}: {self.claim} (difference {self.effect:+.3g}{u}, "
                f"{level} {interval}, {p}, {self.test})")

    def _level(self) -> float:
        return 2 * self.alpha if self.direction == "equivalent" else self.alpha

    def as_row(self) -> dict[str, object]:
        """The verdict as a table row (``pandas.DataFrame([v.as_row() for v in vs])``)."""
        return {"claim": self.claim, "verdict": self.outcome, "difference": self.effect,
                "CI low": self.low, "CI high": self.high, "p (adjusted)": self.p_adjusted,
                "seeds": f"{self.n_a} vs {self.n_b}" if self.n_b else str(self.n_a), "test": self.test}


def _p_text(p: float, alpha: float) -> str:
    """p to two significant digits, or three where two would round it across alpha (0.0498)."""
    text = f"{p:.2g}"
    return text if (float(text) < alpha) == (p < alpha) else f"{p:.3g}"


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
    if not p < alpha:
        return "undecided"
    return "holds" if (effect > 0) == (direction == "greater") else "contradicted"


def compare(a: Sequence[float], b: Sequence[float] | float, claim: str = "", *,
            direction: Direction = "greater", alpha: float = 0.05, paired: bool | None = None,
            test_se: float = 0.0, margin: float | None = None, unit: str = "",
            seed_sd: float | None = None, resolution: float = 0.0, test_df: float = math.inf) -> Verdict:
    """Test the claim "a > b" (``direction="greater"``), "a < b" (``"less"``) or
    ``|a − b| < margin`` (``"equivalent"``) on per-seed values.

    ``a``, ``b``: one value per seed (``b`` may be a constant: a one-sample test).
    ``paired``: None pairs by position when both have the same length (the same seeds).
    ``test_se``: the test-set sampling noise of mean(a) − mean(b) (:func:`test_se`),
    added to the seed noise; 0 counts the seed noise only. Adding it to the spread of
    the per-seed differences counts the runs' own test noise twice: conservative, it
    widens the interval, never narrows it.
    ``test_df``: the degrees of freedom of ``test_se`` (a bootstrap of B resamples: B − 1),
    so a tiny seed spread cannot make the test noise count as exactly known.
    ``resolution``: the values are rounded to this step (a temperature from a 0.1 grid):
    each value's variance is at least the rounding's ``resolution² / 12``, so seeds that all
    round to the same number do not make the noise look like zero.
    ``seed_sd``: with one seed the seed noise cannot be measured, and the verdict is
    ``undecided`` unless a per-run seed standard deviation (e.g. from a pilot with more
    seeds) is given; it then enters as ``2 seed_sd² / n`` (two independent runs).

    Outcome, for ``greater``/``less``: the two-sided test at level ``alpha`` rejects "no
    difference" and the effect has the claimed sign (``holds``) or the opposite one
    (``contradicted``); else ``undecided``, so ``holds`` means the ``1 − alpha`` interval lies
    on the claimed side of 0. For ``equivalent`` (two one-sided tests, Schuirmann 1987):
    ``holds`` when the ``1 − 2 alpha`` interval lies inside ``(−margin, margin)``,
    ``contradicted`` when it lies wholly outside, else ``undecided``.
    """
    if direction not in ("greater", "less", "equivalent"):
        raise ValueError(f"direction must be 'greater', 'less' or 'equivalent', got {direction!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    if (direction == "equivalent") != (margin is not None):
        raise ValueError("margin is given exactly when direction='equivalent'")
    if margin is not None and not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    if not (math.isfinite(test_se) and test_se >= 0):
        raise ValueError(f"test_se must be a finite number >= 0, got {test_se!r}")
    xa = _values(a, "a")
    one_sample = np.ndim(b) == 0
    xb = _values([b] if one_sample else b, "b")
    if paired is None:
        paired = not one_sample and xa.size == xb.size
    if paired and xa.size != xb.size:
        raise ValueError(f"paired=True needs as many values in a as in b, got {xa.size} and {xb.size}")
    if not (math.isfinite(resolution) and resolution >= 0):
        raise ValueError(f"resolution must be a finite number >= 0, got {resolution!r}")
    effect, seed_var, df, test = _difference(xa, xb, one_sample, paired)
    if resolution > 0:  # the rounding's variance, per value: 1 (one-sample) or 2 per difference
        floor = (1 if one_sample else 2) * resolution ** 2 / 12 / max(xa.size, 1)
        if seed_var < floor:
            seed_var, test = floor, test + f", rounding to {resolution:g} as the floor"
    if df == 0 or min(xa.size, xb.size if not one_sample else 2) < 2:  # a side with one seed
        if seed_sd is None:
            return Verdict(claim, direction, effect, math.nan, math.nan, 1.0, 1.0, "undecided",
                           int(xa.size), 0 if one_sample else int(xb.size),
                           test + " (one seed: seed noise unknown)", alpha, margin, unit)
        seed_var, df = (1 if one_sample else 2) * seed_sd ** 2 / max(xa.size, 1), math.inf
    var = seed_var + test_se ** 2
    if test_se > 0:  # Welch-Satterthwaite over the seed and the bootstrap variances
        den = (seed_var ** 2 / df if seed_var > 0 and math.isfinite(df) else 0.0) + test_se ** 4 / test_df
        df = var ** 2 / den if den > 0 else math.inf
        test += " + test-set bootstrap"
    level = 2 * alpha if direction == "equivalent" else alpha
    if var == 0:  # one seed and no test noise: nothing measures the noise
        low = high = math.nan
        p, outcome = 1.0, "undecided"
    else:
        se = math.sqrt(var)
        dist = stats.t(df) if math.isfinite(df) else stats.norm()
        half = dist.ppf(1 - level / 2) * se
        low, high = effect - half, effect + half
        if direction == "equivalent":
            p = max(dist.sf((effect + margin) / se), dist.cdf((effect - margin) / se))
            inside, outside = -margin < low and high < margin, low >= margin or high <= -margin
            outcome = "holds" if inside else "contradicted" if outside else "undecided"
        else:
            p = 2 * dist.sf(abs(effect) / se)
            outcome = _outcome(direction, effect, p, alpha)
    return Verdict(claim, direction, effect, low, high, float(p), float(p), outcome, int(xa.size),
                   0 if one_sample else int(xb.size), test, alpha, margin, unit)


def _difference(a: np.ndarray, b: np.ndarray, one_sample: bool, paired: bool) -> tuple[float, float, float, str]:
    """(mean difference, its variance from the seeds, degrees of freedom, test name)."""
    if one_sample or paired:
        d = a - b[0] if one_sample else a - b
        n = d.size
        var = float(d.var(ddof=1)) / n if n > 1 else 0.0
        name = "one-sample t" if one_sample else "paired t"
        return float(d.mean()), var, n - 1, f"{name}, {n} seed{'s' * (n > 1)}"
    va, vb = (float(x.var(ddof=1)) / x.size if x.size > 1 else 0.0 for x in (a, b))
    var = va + vb
    den = (va ** 2 / (a.size - 1) if a.size > 1 else 0.0) + (vb ** 2 / (b.size - 1) if b.size > 1 else 0.0)
    df = var ** 2 / den if den > 0 else 0.0
    return float(a.mean() - b.mean()), var, df, f"Welch t, {a.size} vs {b.size} seeds"


def decide(verdicts: Sequence[Verdict], method: Literal["holm", "bh", "by"] = "holm") -> list[Verdict]:
    """A family of verdicts with their p-values adjusted together, outcomes re-decided.

    ``holm``: Holm's step-down (controls the family-wise error rate); ``bh``/``by``:
    Benjamini–Hochberg / –Yekutieli false discovery rate (``scipy.stats.false_discovery_control``).
    Intervals stay per comparison; an equivalence verdict keeps its own two-test decision.
    """
    if method not in ("holm", "bh", "by"):
        raise ValueError(f"method must be 'holm', 'bh' or 'by', got {method!r}")
    if not verdicts:
        return []
    if any(not isinstance(v, Verdict) for v in verdicts):
        raise TypeError("verdicts must be Verdict objects (from compare)")
    p = np.array([v.p for v in verdicts])
    if method == "holm":
        order = np.argsort(p, kind="stable")
        scaled = np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p))))
        adjusted = np.empty_like(p)
        adjusted[order] = np.minimum(scaled, 1.0)
    else:
        adjusted = stats.false_discovery_control(p, method=method)
    out = []
    for v, q in zip(verdicts, adjusted):
        if v.direction == "equivalent":
            outcome = v.outcome if q < v.alpha or v.outcome != "holds" else "undecided"
        else:
            outcome = _outcome(v.direction, v.effect, float(q), v.alpha)
        out.append(replace(v, p_adjusted=float(q), outcome=outcome, family_size=len(verdicts)))
    return out


Metric = Callable[..., float]


def _as_numpy(probs: object) -> np.ndarray:
    return probs.detach().cpu().numpy() if hasattr(probs, "detach") else np.asarray(probs)


def test_se(metric: Metric, probs_a: Sequence[object], labels: object, probs_b: Sequence[object] = (),
            *, n_boot: int = 200, seed: int = 0) -> float:
    """Bootstrap standard error, over test examples, of mean(metric(a)) − mean(metric(b)).

    ``probs_a``/``probs_b``: each seed's ``(N, K)`` test probabilities, all on the same test
    set with ``labels``. One resample draws N test indices with replacement and applies them
    to every run, so the test images shared by all runs are resampled once (Efron and
    Tibshirani 1993, ch. 6). Without ``probs_b``: the standard error of mean(metric(a)).
    """
    if not isinstance(n_boot, int) or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}")
    if len(probs_a) == 0:
        raise ValueError("probs_a is empty: give each seed's test probabilities")
    y = _as_numpy(labels)
    runs = [_as_numpy(p) for p in (*probs_a, *probs_b)]
    if bad := [i for i, p in enumerate(runs) if p.ndim != 2 or p.shape[0] != y.shape[0]]:
        raise ValueError(f"every run's probabilities must have shape (N, K) with N = {y.shape[0]} "
                         f"(the labels); run {bad[0]} has shape {runs[bad[0]].shape}")
    sign = np.array([1 / len(probs_a)] * len(probs_a) + [-1 / max(len(probs_b), 1)] * len(probs_b))
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, y.shape[0], y.shape[0])
        draws[i] = sign @ np.array([metric(p[idx], y[idx]) for p in runs])
    return float(draws.std(ddof=1))


def _wrong(probs: object, labels: object) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    wrong = p.argmax(1) != y
    return p[wrong], y[wrong]


def entropy_of_wrong(probs: object, labels: object) -> float:
    """Mean entropy ``−Σ_k p_k log p_k`` of the wrong predictions (Mukhoti et al. 2020, Fig. 1b);
    NaN if none is wrong. A test-set statistic for :func:`compare_runs`."""
    p, _ = _wrong(probs, labels)
    return float(-(p * np.log(np.clip(p, 1e-300, 1))).sum(1).mean()) if len(p) else math.nan


def nll_of_wrong(probs: object, labels: object) -> float:
    """Mean NLL ``−log p_y`` of the wrong predictions (Mukhoti et al. 2020, Fig. 1c); NaN if none."""
    p, y = _wrong(probs, labels)
    return float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-300, 1)).mean()) if len(p) else math.nan


def compare_runs(metric: Metric, probs_a: Sequence[object], probs_b: Sequence[object], labels: object,
                 claim: str = "", *, scale: float = 1.0, n_boot: int = 200, seed: int = 0,
                 **kwargs: object) -> Verdict:
    """:func:`compare` of ``metric`` over two methods' runs, seed and test-set noise both counted.

    ``probs_a``/``probs_b``: each seed's test probabilities (same seeds in the same order to
    pair them); ``scale`` multiplies the values (100 for percent); ``kwargs`` go to
    :func:`compare` (``direction``, ``alpha``, ``margin``, ``unit``, ``paired``).
    """
    y = _as_numpy(labels)
    a = [scale * metric(_as_numpy(p), y) for p in probs_a]
    b = [scale * metric(_as_numpy(p), y) for p in probs_b]
    se = scale * test_se(metric, probs_a, y, probs_b, n_boot=n_boot, seed=seed)
    kwargs.setdefault("test_df", n_boot - 1)
    return compare(a, b, claim, test_se=se, **kwargs)


def _calibrated_sample(rng: np.random.Generator, conf: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities (top class 0 with confidence c, the rest spread evenly) and labels drawn
    from them: a model calibrated in every sense."""
    c = rng.choice(conf, size=n)
    probs = np.repeat(((1 - c) / (k - 1))[:, None], k, axis=1)
    probs[:, 0] = c
    labels = (rng.random(n)[:, None] > np.cumsum(probs, axis=1)).sum(1).clip(max=k - 1)
    return probs, labels


_METRICS = {"ece": lambda p, y: metrics.ece(p, y, 15), "nll": metrics.nll}


def _confidences(confidences: Sequence[float] | None, k: int) -> np.ndarray:
    if confidences is None:  # a spread like a trained 10-class network's: most mass near 1
        return 1 - (1 - 1 / k) * np.linspace(0.005, 0.995, 200) ** 3
    conf = _values(confidences, "confidences")
    if ((conf < 1 / k) | (conf > 1)).any():
        raise ValueError(f"confidences must lie in [1/K, 1] = [{1 / k:.3g}, 1]")
    return conf


def noise_floor(n_test: int, *, metric: str = "ece", confidences: Sequence[float] | None = None,
                n_classes: int = 10, sims: int = 400, seed: int = 0) -> tuple[float, float]:
    """Mean and standard deviation of ``metric`` ("ece", 15 bins, or "nll") for a perfectly
    calibrated model scored on ``n_test`` test examples, by simulation.

    The model's top-label confidences are drawn from ``confidences`` (e.g. a trained
    network's test confidences; default: a spread with most mass near 1); each label is
    drawn from the model's own probabilities, so any ECE above 0 is estimation noise.
    """
    for name, v, lo in (("n_test", n_test, 2), ("n_classes", n_classes, 2), ("sims", sims, 2)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {sorted(_METRICS)}, got {metric!r}")
    conf, rng = _confidences(confidences, n_classes), np.random.default_rng(seed)
    values = np.array([_METRICS[metric](*_calibrated_sample(rng, conf, n_test, n_classes)) for _ in range(sims)])
    return float(values.mean()), float(values.std(ddof=1))


def detectable_difference(n_test: int, n_seeds: int, *, metric: str = "ece", seed_sd: float = 0.0,
                          power: float = 0.8, alpha: float = 0.05, confidences: Sequence[float] | None = None,
                          n_classes: int = 10, sims: int = 400, seed: int = 0) -> float:
    """The smallest true difference in ``metric`` between two methods that a paired test on
    ``n_seeds`` seeds, each scored on ``n_test`` test examples, detects with probability
    ``power`` at two-sided level ``alpha``.

    Each run's value is its method's true value plus seed noise (standard deviation
    ``seed_sd``, e.g. a pilot's spread over seeds) plus test noise (the standard deviation
    of :func:`noise_floor`), independent between runs, so the per-seed difference has
    ``σ_d² = 2 (seed_sd² + σ_test²)``. With ``n_seeds >= 2`` the power is that of the paired
    t-test (noncentral t); with one seed σ_d counts as known (a z-test on one difference).
    Units are the metric's (a fraction for ECE).
    """
    if not isinstance(n_seeds, (int, np.integer)) or isinstance(n_seeds, bool) or n_seeds < 1:
        raise ValueError(f"n_seeds must be an integer >= 1, got {n_seeds!r}")
    if not 0 < power < 1 or not 0 < alpha < 0.5:
        raise ValueError(f"power must lie in (0, 1) and alpha in (0, 0.5), got {power!r} and {alpha!r}")
    if not (math.isfinite(seed_sd) and seed_sd >= 0):
        raise ValueError(f"seed_sd must be a finite number >= 0, got {seed_sd!r}")
    test_sd = noise_floor(n_test, metric=metric, confidences=confidences, n_classes=n_classes,
                          sims=sims, seed=seed)[1]
    sd = math.sqrt(2 * (seed_sd ** 2 + test_sd ** 2))
    if n_seeds == 1:
        return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * sd)
    df, crit = n_seeds - 1, stats.t.ppf(1 - alpha / 2, n_seeds - 1)

    def power_at(delta: float) -> float:
        nc = delta * math.sqrt(n_seeds) / sd
        return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))

    from scipy.optimize import brentq

    hi = sd
    while power_at(hi) < power:
        hi *= 2
    return float(brentq(lambda d: power_at(d) - power, 0.0, hi, xtol=1e-10 * sd))


def table(verdicts: Sequence[Verdict], digits: int = 2) -> object:
    """The verdicts as a pandas DataFrame, one row each (difference and interval rounded)."""
    import pandas as pd

    frame = pd.DataFrame([v.as_row() for v in verdicts])
    for col in ("difference", "CI low", "CI high"):
        frame[col] = frame[col].round(digits)
    frame["p (adjusted)"] = frame["p (adjusted)"].map(lambda p: f"{p:.2g}")
    return frame.set_index("claim")


def tally(verdicts: Sequence[Verdict]) -> str:
    """``"2 of 4 hold, 0 are contradicted and 2 are undecided"``: a family's outcomes for prose."""
    n = {o: sum(v.outcome == o for v in verdicts) for o in OUTCOMES}
    def are(k: int) -> str:
        return "is" if k == 1 else "are"

    return (f"{n['holds']} of {len(verdicts)} hold, {n['contradicted']} {are(n['contradicted'])} "
            f"contradicted and {n['undecided']} {are(n['undecided'])} undecided")


class Family:
    """A family of claims tested over a grid of conditions and corrected together.

    Each claim is a row and each condition (a training-set size, a protocol) a column, as
    in a regime map. :meth:`add` tests one cell with :func:`compare`, or, while a side has
    fewer than ``min_n`` values (runs still to come), notes how many it has, so a sweep
    that is still running leaves blanks rather than one-seed guesses. :meth:`verdicts`
    corrects the tested cells together with :func:`decide`; :meth:`table` lays the cells
    out ("+1.42 holds", "1 of 3 seeds", "not run yet"; "—" for a cell never added, one the
    design does not plan) and :meth:`tally` counts them for prose.

    >>> fam = Family(["small", "large"], min_n=3)
    >>> fam.add("CE over-confident", "small", [1.4, 1.5, 1.3], 1.0, "T > 1 (small)")
    >>> fam.add("CE over-confident", "large", [1.2], 1.0, "T > 1 (large)")
    >>> fam.tally()
    '1 of 1 hold, 0 are contradicted and 0 are undecided (1 not tested yet)'
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

    def verdicts(self) -> list[Verdict]:
        """The tested cells' verdicts, corrected together, in the order they were added."""
        return decide([v for v in self._cells.values() if isinstance(v, Verdict)], self.method)

    def table(self, digits: int = 2) -> object:
        """A pandas DataFrame: one row per claim, one column per condition.

        A cell :meth:`add` was never called for is not in the design (dual focal loss under a
        protocol that does not train it) and reads "—"; a planned cell without runs reads
        "not run yet"."""
        import pandas as pd

        decided = iter(self.verdicts())
        rows: dict[str, dict[str, str]] = {}
        for (row, column), cell in self._cells.items():
            if isinstance(cell, Verdict):
                v = next(decided)
                cell = f"{v.effect:+.{digits}f}{v.unit} {v.outcome}"
            rows.setdefault(row, dict.fromkeys(self.columns, "—"))[column] = cell
        return pd.DataFrame.from_dict(rows, orient="index")

    def outcomes(self) -> dict[tuple[str, str], str]:
        """``{(row, column): outcome}`` after the correction; an untested cell gives its note
        ("1 of 3 seeds"), a cell never added is absent. For checking what prose says of the map."""
        decided = iter(self.verdicts())
        return {key: next(decided).outcome if isinstance(cell, Verdict) else cell
                for key, cell in self._cells.items()}

    def tally(self) -> str:
        """:func:`tally` of the corrected verdicts, and how many cells are not tested yet."""
        waiting = sum(not isinstance(v, Verdict) for v in self._cells.values())
        return tally(self.verdicts()) + (f" ({waiting} not tested yet)" if waiting else "")
