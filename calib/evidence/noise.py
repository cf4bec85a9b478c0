"""Test-set noise and the ECE's bias: bootstrap standard errors, a calibrated model's ECE.

Two different things are easily confused. A perfectly calibrated model scored on N test
images has a positive 15-bin ECE (about 3 % at 1,000 images, 1 % at 10,000): that is the
estimator's **bias** (:func:`ece_bias`, the mean of :func:`noise_floor`), the same sign for
every model, which shrinks the observed difference between a calibrated and a
miscalibrated model. The **noise** of a difference is its spread over test sets
(:func:`ece_noise`, :func:`test_se`; the standard deviation of :func:`noise_floor` for one
calibrated run), far smaller at 10,000 images (0.2–0.3 points per run).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .. import metrics
from .verdict import Verdict, _values, compare

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
    :func:`compare` (``direction``, ``alpha``, ``margin``, ``unit``, ``paired``, ``seed_sd``,
    ``seed_df``). For small ECEs, :func:`debiased_ce` as ``metric`` avoids the binned ECE's bias.
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


def _check_int(name: str, v: object, lo: int) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def noise_floor(n_test: int, *, metric: str = "ece", confidences: Sequence[float] | None = None,
                n_classes: int = 10, sims: int = 400, seed: int = 0) -> tuple[float, float]:
    """Mean and standard deviation of ``metric`` ("ece", 15 bins, or "nll") for a perfectly
    calibrated model scored on ``n_test`` test examples, by simulation.

    The model's top-label confidences are drawn from ``confidences`` (e.g. a trained
    network's test confidences; default: a spread with most mass near 1); each label is
    drawn from the model's own probabilities. For the ECE the mean is the estimator's
    **bias** (the true ECE is 0: :func:`ece_bias`), the standard deviation its **noise** on
    one run over test sets; a miscalibrated model's ECE is noisier (about 1.3 times at
    1,000 images), so for a difference measure the runs' own noise (:func:`ece_noise`).
    """
    for name, v, lo in (("n_test", n_test, 2), ("n_classes", n_classes, 2), ("sims", sims, 2)):
        _check_int(name, v, lo)
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {sorted(_METRICS)}, got {metric!r}")
    conf, rng = _confidences(confidences, n_classes), np.random.default_rng(seed)
    values = np.array([_METRICS[metric](*_calibrated_sample(rng, conf, n_test, n_classes)) for _ in range(sims)])
    return float(values.mean()), float(values.std(ddof=1))


def ece_bias(confidences: int | Sequence[float], n_bins: int = 15, *, n_classes: int = 10,
             sims: int = 1000, seed: int = 0) -> float:
    """The expected binned ECE of a perfectly calibrated model: the ECE estimator's bias.

    ``E[ECE] = (1/N) Σ_b E|Σ_{i in b} (π_i − c_i)|`` with each correctness ``π_i`` drawn as
    Bernoulli(``c_i``), equal-width bins ``(lo, hi]`` as :func:`calib.metrics.ece`, by
    simulation (``sims`` draws, vectorised). ``confidences``: a model's N test confidences
    (the bias of *its* ECE on this test set), or an integer N (confidences drawn, with
    replacement, from the spread of :func:`noise_floor`). It falls like ``1/sqrt(N)``: about
    3 % at 1,000 images and 1 % at 10,000 for 15 bins. It is a shift of the level, not the
    noise of a difference; it shrinks a calibrated-against-miscalibrated difference, whose
    true size the debiased estimate :func:`debiased_ce` approaches (Kumar, Liang & Ma 2019, §5).
    """
    _check_int("n_bins", n_bins, 1)
    _check_int("sims", sims, 2)
    rng = np.random.default_rng(seed)
    if isinstance(confidences, (int, np.integer)) and not isinstance(confidences, bool):
        _check_int("confidences", confidences, 2)
        conf = rng.choice(_confidences(None, n_classes), size=(sims, int(confidences)))
    else:
        one = _values(confidences, "confidences")
        if ((one < 0) | (one > 1)).any():
            raise ValueError("confidences must lie in [0, 1]")
        conf = np.broadcast_to(one, (sims, one.size))
    n = conf.shape[1]
    gap = (rng.random(conf.shape) < conf) - conf  # correct minus confidence
    cells = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], conf, side="left")
    cells = cells + n_bins * np.arange(sims)[:, None]
    totals = np.bincount(cells.ravel(), weights=gap.ravel(), minlength=sims * n_bins)
    return float(np.abs(totals).reshape(sims, n_bins).sum(1).mean() / n)


def ece_noise(probs_a: Sequence[object], labels: object, probs_b: Sequence[object] = (), *,
              n_bins: int = 15, n_boot: int = 200, seed: int = 0) -> float:
    """The test-set standard error of mean ECE(a) − mean ECE(b) (:func:`test_se` of the
    ``n_bins``-bin ECE, the same resamples for every run): the noise of an ECE difference,
    which :func:`compare_runs` adds to the seed noise. Not the bias (:func:`ece_bias`)."""
    _check_int("n_bins", n_bins, 1)
    return test_se(lambda p, y: metrics.ece(p, y, n_bins), probs_a, labels, probs_b, n_boot=n_boot, seed=seed)


def debiased_ce(probs: object, labels: object, n_bins: int = 15) -> float:
    """The debiased top-label ℓ2 calibration error (:func:`calib.metrics.l2_ce`, equal-mass
    bins; Kumar, Liang & Ma 2019, §5): ``sqrt(max(Σ_b w_b [(c̄_b − ā_b)² − ā_b(1 − ā_b)/(n_b − 1)], 0))``.

    Unbiased for the squared binned error, so a calibrated model scores near 0 at any N
    where the binned ECE scores its bias (:func:`ece_bias`). A metric for
    :func:`compare_runs` where a chapter compares small calibration errors; it is an ℓ2,
    not an ℓ1, error, so its values are not ECE values.
    """
    return metrics.l2_ce(probs, labels, n_bins, mode="top_label", debiased=True)
