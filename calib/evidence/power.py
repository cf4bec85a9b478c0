"""Planning: the smallest true difference a comparison, run as the chapters run it, decides."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats
from scipy.optimize import brentq

from .noise import _check_int, noise_floor

_NODES = 160  # quantile nodes per estimated variance in the power integral


def _check(n_seeds: int, seed_sd: float, seed_df: float, power: float, alpha: float,
           test_sd: float | None, shared: float, n_boot: int) -> None:
    _check_int("n_seeds", n_seeds, 1)
    _check_int("n_boot", n_boot, 2)
    if not 0 < power < 1 or not 0 < alpha < 0.5:
        raise ValueError(f"power must lie in (0, 1) and alpha in (0, 0.5), got {power!r} and {alpha!r}")
    for name, v in (("seed_sd", seed_sd), ("test_sd", 0.0 if test_sd is None else test_sd)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if not seed_df > 0:
        raise ValueError(f"seed_df must be > 0 (math.inf: known exactly), got {seed_df!r}")
    if not 0 <= shared <= 1:
        raise ValueError(f"shared must lie in [0, 1], got {shared!r}")


def _scaled_chi2(var: float, df: float) -> np.ndarray:
    """Quantile nodes (equal weights) of an estimate of ``var`` with ``df`` degrees of freedom."""
    if var == 0 or not math.isfinite(df):
        return np.array([var])
    u = (np.arange(_NODES) + 0.5) / _NODES
    return var * stats.chi2.ppf(u, df) / df


def detectable_difference(n_test: int, n_seeds: int, *, metric: str = "ece", seed_sd: float = 0.0,
                          seed_df: float = math.inf, power: float = 0.8, alpha: float = 0.05,
                          test_sd: float | None = None, shared: float = 0.0, test_term: bool = True,
                          n_boot: int = 200, confidences: Sequence[float] | None = None,
                          n_classes: int = 10, sims: int = 400, seed: int = 0) -> float:
    """The smallest true difference in ``metric`` between two methods that the chapters'
    procedure detects with probability ``power`` (two-sided level ``alpha``, the claimed sign):
    ``n_seeds`` seeds per method, paired, every run scored on one test set of ``n_test``
    examples, and :func:`compare_runs`'s test-noise term (``test_term``) with ``n_boot − 1``
    degrees of freedom. Units are the metric's (a fraction for ECE).

    Each run's value is its method's true value, plus seed noise (standard deviation
    ``seed_sd``), plus test noise (``test_sd``; default: the standard deviation of
    :func:`noise_floor`, a calibrated model's, which understates a miscalibrated one's: pass
    a pilot's :func:`ece_noise` of one run). Of the per-seed difference's test-noise variance
    ``2 test_sd²`` the fraction ``shared`` is common to all seeds (the same test images
    favour one method for every seed; 0: independent between runs). So the per-seed
    differences ``d_s = Δ + w_s + g`` have ``Var w = 2 seed_sd² + 2 test_sd² (1 − shared)``,
    ``Var g = 2 test_sd² shared``; the verdict divides ``mean(d)`` by
    ``sqrt(s_d²/n + test_se²)`` with ``test_se²`` the bootstrap's estimate of the test part
    of ``Var mean(d)``, Welch–Satterthwaite degrees of freedom. The power is that statistic's
    exact rejection probability under this Gaussian model, an integral over the two
    chi-square variance estimates (noncentral t when the test term is off and ``shared = 0``).
    With one seed the seed noise is ``seed_sd`` given to :func:`compare` (``seed_df``).
    """
    _check(n_seeds, seed_sd, seed_df, power, alpha, test_sd, shared, n_boot)
    if test_sd is None:
        test_sd = noise_floor(n_test, metric=metric, confidences=confidences, n_classes=n_classes,
                              sims=sims, seed=seed)[1]
    n = int(n_seeds)
    within = 2 * seed_sd ** 2 + 2 * test_sd ** 2 * (1 - shared)
    common = 2 * test_sd ** 2 * shared
    sd_mean = math.sqrt(within / n + common)  # the true standard deviation of mean(d)
    if sd_mean == 0:
        raise ValueError("seed_sd and test_sd are both 0: every difference is decided exactly")
    if n >= 2:
        seed_part, df_seed = _scaled_chi2(within / n, n - 1), n - 1
    else:
        seed_part, df_seed = _scaled_chi2(2 * seed_sd ** 2, seed_df), seed_df
    test_part = _scaled_chi2(common + 2 * test_sd ** 2 * (1 - shared) / n, n_boot - 1) if test_term else np.zeros(1)
    if n >= 2 and not test_term and shared == 0:  # the paired t-test: noncentral t, exactly
        return _solve(lambda d: _nct_power(d, n, sd_mean, alpha), power, sd_mean)
    s, t = np.meshgrid(seed_part, test_part, indexing="ij")
    den = s + t
    terms = (s ** 2 / df_seed if math.isfinite(df_seed) else 0 * s) + (t ** 2 / (n_boot - 1) if test_term else 0 * t)
    df = np.where(terms > 0, den ** 2 / np.where(terms > 0, terms, 1), np.inf)
    crit = np.where(np.isfinite(df), stats.t.ppf(1 - alpha / 2, np.where(np.isfinite(df), df, 1)),
                    stats.norm.ppf(1 - alpha / 2)) * np.sqrt(den)

    def power_at(delta: float) -> float:
        return float(np.mean(stats.norm.sf((crit - delta) / sd_mean) + stats.norm.cdf((-crit - delta) / sd_mean)))

    return _solve(power_at, power, sd_mean)


def _nct_power(delta: float, n: int, sd: float, alpha: float) -> float:
    crit, nc = stats.t.ppf(1 - alpha / 2, n - 1), delta / sd
    # the wrong-sign tail P(T < −crit) as P(T' > crit), T' of noncentrality −nc: scipy's
    # nct.cdf returns NaN there once nc is large (near 8 at 9 df), the sf does not
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.sf(crit, n - 1, -nc))


def _solve(power_at, power: float, scale: float) -> float:  # noqa: ANN001  (a callable of one float)
    hi = scale
    while power_at(hi) < power:
        hi *= 2
    return float(brentq(lambda d: power_at(d) - power, 0.0, hi, xtol=1e-10 * scale))
