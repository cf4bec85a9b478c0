"""Post-hoc calibrators side by side, and the calibration estimators' bias by simulation.

``compare_calibrators``     fit every calibrator on validation logits, measure it on test
                            logits: ECE, debiased ℓ2 CE, smooth ECE, NLL with bootstrap intervals
``validation_size_study``   the same fits on validation sets of several sizes over seeds:
                            when a richer map overfits (Kull et al. 2019, §5; Guo et al. 2017, §5)
``estimator_bias``          binned ECE, debiased ℓ2 CE and smooth ECE against the true values on
                            a two-class Gaussian mixture whose posterior η is known
``floor_table``             how much of each shipped CIFAR record sits at its float16
                            floor 2^-24
``true_class_below``        the share of examples whose true class gets a probability
                            below a level
``true_class_view``         ``[p_y, 1 - p_y]``: the NLL at a fraction of the cost of all
                            K columns
``paired_verdicts``         methods against each other on the same test examples, NLL
                            and ECE

What we chose for the simulation (so its numbers can be judged): two Gaussian classes
(:func:`calib.data.gaussian_mixture`, ``dim=2``) and a model whose logits are
``log η(x) / T``. With two classes the top-label confidence ``c = σ(|s| / T)`` and the
posterior of the predicted class ``η_ŷ = σ(|s|)`` (``s = log η_1 - log η_0``) are both
functions of ``|s|``, so ``P(Y = ŷ | c) = η_ŷ`` exactly and the true calibration errors are
expectations over ``x`` alone, computed on ``n_reference`` fresh points with no label noise:

* true top-label ECE ``E |η_ŷ(X) - c(X)|`` (Guo et al. 2017, Eq. 3; no bins);
* true ℓ2 calibration error ``sqrt(E (η_ŷ(X) - c(X))^2)`` (Kumar et al. 2019, §2);
* the population smooth ECE: Błasiok & Nakkiran (2023)'s kernel residual
  ``r(t) = Σ K(t, c_i)(c_i - y_i) / Σ K(t, c_i)`` is linear in the outcomes, so its
  population value replaces each 0/1 outcome with its expectation ``η_ŷ(x_i)``.

The debiased ℓ2 estimator targets the *binned* ℓ2 error, which lies below the true one
by the within-bin variation of the calibration gap (Kumar et al. 2019, §3); with few bins
that difference is part of what the simulation shows.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from .. import evidence, metrics, posthoc, profile
from .._checks import ArrayLike, check_labels, check_logits, check_positive_int
from ..data.toy import gaussian_mixture

__all__ = [
    "default_calibrators",
    "compare_calibrators",
    "validation_size_study",
    "estimator_bias",
    "true_binary_errors",
    "floor_table",
    "true_class_below",
    "true_class_view",
    "paired_verdicts",
    "METRICS",
    "FLOOR",
]

# name -> (metric, extra keyword arguments); every metric takes (probs, labels)
METRICS: dict[str, Callable[..., float]] = {
    "ECE": metrics.ece,
    "l2 CE (debiased)": metrics.l2_ce,
    "smooth ECE": metrics.smooth_ece,
    "NLL": metrics.nll,
}
_FAST = {"ECE", "NLL", "l2 CE (debiased)"}  # cheap enough for n_boot replicates each
# Smoke mode (calib.profile.smoke) runs a chapter's colab/paper branch on a CPU in seconds:
# samples per split, bootstrap replicates and smooth-ECE replicates are capped to these.
SMOKE_SAMPLES, SMOKE_BOOT, SMOKE_BOOT_SMOOTH = 200, 20, 2


# The shipped CIFAR records (calib.data.cifar_predictions) store every probability below
# 2**-24 as 2**-24, so their log-probabilities are clipped at -16.6.
FLOOR = 2.0 ** -24


def _smoke(value: int, cap: int) -> int:
    return min(value, cap) if profile.smoke() else value


def default_calibrators(num_classes: int, *, odir: float = 1e4, max_iter: int = 1000,
                        ets_loss: str = "mse") -> dict[str, Callable[[], Any]]:
    """Factories of every calibrator of :mod:`calib.posthoc` that outputs full probability vectors.

    ``ets_loss``: the loss the ensemble-TS weights minimise, ``"mse"`` (Brier) by default,
    as in Zhang et al. (2020)'s reference code; unlike that code, which fits the temperature
    by MSE too, the temperature here is always fitted by NLL. With ``"nll"`` the weights are
    fitted by the same loss as the temperature on the same set, and they often stay at the
    boundary optimum ``(1, 0, 0)``, where ensemble TS is temperature scaling (not always:
    they can move onto the uncalibrated softmax).

    ``odir`` is the off-diagonal and intercept weight of the regularised Dirichlet
    calibration (Kull et al. 2019, §3, whose penalty divides by ``K(K - 1)`` and ``K``, so
    a useful weight grows with ``K``). :class:`~calib.posthoc.PlattScaling` joins for two
    classes; :class:`~calib.posthoc.HistogramBinning` is left out (it recalibrates only the
    top-label confidence, so it has no NLL).
    """
    num_classes = check_positive_int(num_classes, "num_classes", minimum=2)
    if isinstance(odir, bool) or not isinstance(odir, (int, float)) or not odir > 0:
        raise ValueError(f"odir must be a positive number, got {odir!r}")
    if ets_loss not in ("nll", "mse"):
        raise ValueError(f'ets_loss must be "nll" or "mse", got {ets_loss!r}')
    out: dict[str, Callable[[], Any]] = {
        "temperature": posthoc.TemperatureScaling,
        "ensemble TS": lambda: posthoc.EnsembleTemperatureScaling(loss=ets_loss),
        "vector": lambda: posthoc.VectorScaling(max_iter=max_iter),
        "matrix": lambda: posthoc.MatrixScaling(max_iter=max_iter),
        "Dirichlet": lambda: posthoc.DirichletCalibration(max_iter=max_iter),
        "Dirichlet ODIR": lambda: posthoc.DirichletCalibration(odir, odir, max_iter=max_iter),
        "isotonic": posthoc.IsotonicCalibration,
    }
    if num_classes == 2:
        out["Platt"] = posthoc.PlattScaling
    return out


def _check_factories(calibrators: Mapping[str, Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
    if not isinstance(calibrators, Mapping) or not calibrators:
        raise TypeError("calibrators must be a non-empty mapping name -> factory of an unfitted calibrator")
    bad = [n for n, f in calibrators.items() if not callable(f)]
    if bad:
        raise TypeError(f"calibrators must map names to callables; not callable: {bad}")
    return dict(calibrators)


def _fit(make: Callable[[], Any], gv: Tensor, yv: Tensor) -> tuple[Any, dict[str, Any]]:
    """A fitted calibrator and what its fit warned about: ``warnings`` (the number of
    RuntimeWarnings: a class absent from the validation labels, a separable set, no
    convergence), ``unconverged`` (the optimiser stopped at ``max_iter`` with a gradient
    above tolerance) and ``separable`` (the map classifies every validation example
    correctly, so an unregularised NLL has no finite minimiser)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        cal = make().fit(gv, yv)
    raised = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    return cal, {"warnings": len(raised),
                 "unconverged": any("did not converge" in str(w.message) for w in raised),
                 "separable": any(issubclass(w.category, posthoc.SeparationWarning) for w in raised)}


_NO_FIT = {"warnings": 0, "unconverged": False, "separable": False}


def _scores(p: Tensor, y: Tensor, n_boot: int, n_boot_smooth: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for name, fn in METRICS.items():
        reps = n_boot if name in _FAST else n_boot_smooth
        if reps > 0:
            low, value, high = metrics.bootstrap_ci(fn, p, y, n_boot=reps, seed=seed)
        else:
            low, value, high = math.nan, fn(p, y), math.nan
        rows.append({"metric": name, "value": value, "low": low, "high": high})
    return rows


def compare_calibrators(
    calibrators: Mapping[str, Callable[[], Any]],
    val_logits: ArrayLike,
    val_labels: ArrayLike,
    test_logits: ArrayLike,
    test_labels: ArrayLike,
    *,
    n_boot: int = 200,
    n_boot_smooth: int = 0,
    seed: int = 0,
    return_probs: bool = False,
) -> Any:
    """Fit each calibrator on the validation logits and score it on the test logits.

    Returns a tidy pandas DataFrame with columns ``method`` (``"none"`` first: the
    uncalibrated softmax), ``metric`` (the keys of :data:`METRICS`), ``value``, a 95%
    percentile bootstrap interval ``low``/``high`` over the test samples
    (:func:`calib.metrics.bootstrap_ci`, ``n_boot`` replicates; the smooth ECE, whose
    bandwidth search costs ~0.5 s a call, gets ``n_boot_smooth``, and NaN bounds at 0)
    ``warnings``, the number of RuntimeWarnings the method's fit raised (a class absent
    from the validation labels, a separable validation set, no convergence),
    ``unconverged``, whether the fit stopped at its ``max_iter`` with a gradient above
    tolerance, and ``separable``, whether the fitted map classifies every validation
    example correctly (an unregularised NLL then has no finite minimiser). The bootstrap holds
    the fitted map fixed: it measures test-set noise, not the validation set's.
    ``return_probs``: also return each method's test probabilities (float64) and the
    test labels, ``(frame, {method: probs}, labels)``, for paired comparisons
    (:func:`calib.evidence.compare_runs`). In smoke mode both splits keep their first
    :data:`SMOKE_SAMPLES` rows and the replicates are capped.
    """
    import pandas as pd

    factories = _check_factories(calibrators)
    gv = check_logits(val_logits, "val_logits", refuse_probs=True)
    gt = check_logits(test_logits, "test_logits", refuse_probs=True)
    yv = check_labels(val_labels, gv.shape[0], gv.shape[1], "val_labels")
    yt = check_labels(test_labels, gt.shape[0], gt.shape[1], "test_labels")
    n_boot = check_positive_int(n_boot, "n_boot")
    if isinstance(n_boot_smooth, bool) or not isinstance(n_boot_smooth, int) or n_boot_smooth < 0:
        raise ValueError(f"n_boot_smooth must be an int >= 0, got {n_boot_smooth!r}")
    n_boot, n_boot_smooth = _smoke(n_boot, SMOKE_BOOT), _smoke(n_boot_smooth, SMOKE_BOOT_SMOOTH)
    gv, yv = gv[:_smoke(len(yv), SMOKE_SAMPLES)], yv[:_smoke(len(yv), SMOKE_SAMPLES)]
    gt, yt = gt[:_smoke(len(yt), SMOKE_SAMPLES)], yt[:_smoke(len(yt), SMOKE_SAMPLES)]
    probs, warned = {"none": torch.softmax(gt.double(), dim=1)}, {"none": _NO_FIT}
    for name, make in factories.items():
        cal, warned[name] = _fit(make, gv, yv)
        probs[name] = cal.predict_proba(gt).double()
    rows = [{"method": m, **r, **warned[m]}
            for m, p in probs.items() for r in _scores(p, yt, n_boot, n_boot_smooth, seed)]
    frame = pd.DataFrame(rows)
    return (frame, probs, yt) if return_probs else frame


def validation_size_study(
    calibrators: Mapping[str, Callable[[], Any]],
    logits: ArrayLike,
    labels: ArrayLike,
    sizes: Sequence[int] = (500, 1000, 5000),
    seeds: Iterable[int] = (0, 1, 2),
    n_test: int = 5000,
    *,
    split_seed: int = 0,
    return_probs: bool = False,
) -> Any:
    """Test NLL and ECE of each calibrator fitted on validation sets of each size.

    One shuffle (``torch.Generator().manual_seed(split_seed)``) sets the test set, its
    last ``n_test`` samples, for every seed, size and method; the rest is the pool the
    validation sets come from. Each seed draws its validation sets from the pool (the
    first ``size`` of a seeded permutation of it), so the spread over seeds is the
    validation set's noise alone. A size equal to the pool is the whole pool for every
    seed: fitted once, its rows repeat. Returns a tidy DataFrame ``seed, size, method,
    NLL, ECE, val NLL, warnings, unconverged, separable`` (``method="none"``: the
    uncalibrated softmax; ``val NLL``: the fitted map's NLL on its own validation set;
    the last three as in :func:`compare_calibrators`). ``return_probs``: also return the test
    probabilities (float32) ``{(size, method): [one per seed]}`` and the test labels, for
    :func:`calib.evidence.compare_runs`. In smoke mode seeds are capped and the sizes and
    ``n_test`` cut to :data:`SMOKE_SAMPLES` (the rows keep the sizes asked for).
    """
    import pandas as pd

    factories = _check_factories(calibrators)
    g = check_logits(logits, "logits", refuse_probs=True)
    y = check_labels(labels, g.shape[0], g.shape[1], "labels").to(g.device)
    n_test = _smoke(check_positive_int(n_test, "n_test"), SMOKE_SAMPLES)
    split_seed = check_positive_int(split_seed, "split_seed", minimum=0)
    sizes = [check_positive_int(s, "sizes", minimum=2) for s in sizes]
    if not sizes or _smoke(max(sizes), SMOKE_SAMPLES) + n_test > g.shape[0]:
        raise ValueError(f"sizes (max {max(sizes, default=0)}) plus n_test = {n_test} exceed the N = {g.shape[0]} samples")
    seeds = list(seeds)
    seeds = seeds[: profile.smoke_cap("seeds", len(seeds))]
    order = torch.randperm(g.shape[0], generator=torch.Generator().manual_seed(split_seed)).to(g.device)
    pool, test = order[:-n_test], order[-n_test:]
    yt = y[test]
    base = torch.softmax(g[test].double(), dim=1)
    rows, probs, whole = [], {}, {}  # whole: fits on the whole pool, shared by every seed
    for seed in seeds:
        draw = torch.randperm(len(pool), generator=torch.Generator().manual_seed(int(seed))).to(g.device)
        for size in sizes:
            m = _smoke(size, SMOKE_SAMPLES)  # the row keeps the size asked for
            val = pool if m == len(pool) else pool[draw[:m]]
            fits = {"none": (base, metrics.nll(torch.softmax(g[val].double(), dim=1), y[val]), _NO_FIT)}
            for name, make in factories.items():
                if m == len(pool) and name in whole:
                    fits[name] = whole[name]
                    continue
                cal, warned = _fit(make, g[val], y[val])
                fits[name] = (cal.predict_proba(g[test]).double(),
                              metrics.nll(cal.predict_proba(g[val]).double(), y[val]), warned)
                if m == len(pool):
                    whole[name] = fits[name]
            for name, (p, val_nll, warned) in fits.items():
                rows.append({"seed": seed, "size": size, "method": name, "NLL": metrics.nll(p, yt),
                             "ECE": metrics.ece(p, yt), "val NLL": val_nll, **warned})
                if return_probs:
                    probs.setdefault((size, name), []).append(p.float())
    frame = pd.DataFrame(rows)
    return (frame, probs, yt) if return_probs else frame


def floor_table(names: Sequence[str] | None = None) -> Any:
    """How much of each shipped CIFAR record sits at the float16 floor :data:`FLOOR` = 2^-24.

    One row per record (default: all of :func:`calib.data.cifar_prediction_names`):
    ``classes``, ``entries at floor (%)`` (of all N x K probabilities), ``rows with one
    (%)`` (images with at least one floored class) and ``true class at floor`` (images
    whose true class is floored: their log-probability, and so their NLL term, is clipped
    at -log 2^-24 = 16.6 nats). Renormalising a row in float32 moves the floor by under
    one part in a thousand, so an entry counts as floored below 1.01 x 2^-24.
    """
    import pandas as pd

    from ..data import cifar_prediction_names, cifar_predictions

    rows = []
    for name in cifar_prediction_names() if names is None else list(names):
        p, y = cifar_predictions(name)
        at = p <= 1.01 * FLOOR
        rows.append({"record": name, "classes": p.shape[1], "entries at floor (%)": 100 * at.double().mean().item(),
                     "rows with one (%)": 100 * at.any(1).double().mean().item(),
                     "true class at floor": int(at[torch.arange(len(y)), y].sum()),
                     "smallest p": float(p.min())})
    return pd.DataFrame(rows).set_index("record")


def true_class_below(probs: ArrayLike, labels: ArrayLike, level: float = 1e-3) -> float:
    """Share of examples whose true class gets a probability below ``level``: the examples
    that cost the NLL more than ``-log level`` nats each (a metric for
    :func:`calib.evidence.compare_runs`)."""
    p = torch.as_tensor(probs)
    y = torch.as_tensor(labels, device=p.device).long()
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"probs must be (N, K) and labels (N,), got {tuple(p.shape)} and {tuple(y.shape)}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    return float((p[torch.arange(len(y)), y] < level).double().mean())


def true_class_view(probs: ArrayLike, labels: ArrayLike) -> Tensor:
    """``(N, 2)`` probabilities ``[p_y, 1 - p_y]`` whose true class is column 0.

    Any metric of the true class's probability alone (the NLL, :func:`true_class_below`)
    takes the same value on the view with all-zero labels, at a fraction of the cost of
    the ``K`` columns: what a bootstrap that recomputes the NLL thousands of times needs
    (:func:`calib.evidence.test_se`). Not for the ECE, which needs the top class.
    """
    p = torch.as_tensor(probs)
    y = torch.as_tensor(labels, device=p.device).long()
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"probs must be (N, K) and labels (N,), got {tuple(p.shape)} and {tuple(y.shape)}")
    q = p[torch.arange(len(y), device=p.device), y]
    return torch.stack([q, 1 - q], dim=1)


def paired_verdicts(probs: Mapping[str, ArrayLike], labels: ArrayLike, pairs: Sequence[tuple[str, str]],
                    prefix: str, *, n_boot: int = 200, seed: int = 0, **kwargs: Any) -> list[Any]:
    """For each ``(a, b)`` in ``pairs``, the verdicts "``prefix``: a has a lower test NLL than
    b" and "... test ECE than b" (:func:`calib.evidence.compare_runs`, ``direction="less"``).

    ``probs``: each method's test probabilities on the same test examples ``labels`` (as
    :func:`compare_calibrators` returns them). One run per method: the noise counted is
    the test set's, by a bootstrap that resamples the same examples for both methods
    (paired), with the maps held fixed. The NLL is computed on :func:`true_class_view`
    (the same values); the ECE in percentage points. ``kwargs`` go to
    :func:`calib.evidence.compare` (e.g. ``seed_sd=0``: with one fit per method the
    library leaves a verdict undecided unless told what the fit's own noise is; 0 makes
    the verdict conditional on the fitted maps). Uncorrected: pass the family through
    :func:`calib.evidence.decide`.
    """
    y = torch.as_tensor(labels)
    view = {m: true_class_view(probs[m], y) for pair in pairs for m in pair}
    zeros = torch.zeros_like(y)
    out = []
    for a, b in pairs:
        out.append(evidence.compare_runs(metrics.nll, [view[a]], [view[b]], zeros,
                                         f"{prefix}: {a} has a lower test NLL than {b}",
                                         direction="less", n_boot=n_boot, seed=seed, **kwargs))
        out.append(evidence.compare_runs(metrics.ece, [probs[a]], [probs[b]], y,
                                         f"{prefix}: {a} has a lower test ECE than {b}",
                                         direction="less", scale=100, unit=" pt", n_boot=n_boot,
                                         seed=seed, **kwargs))
    return out


def _binary_model(n_per_class: int, temperature: float, scale: float, seed: int, means: Tensor | None):
    """(probs, labels, conf, eta_top) of the model ``softmax(log η / T)`` on fresh mixture points."""
    data = gaussian_mixture(n_per_class, num_classes=2, dim=2, scale=scale, seed=seed, means=means)
    p = torch.softmax(data.log_eta() / temperature, dim=1)
    top = p.argmax(1, keepdim=True)
    return p, data.y, p.gather(1, top).squeeze(1), data.eta.gather(1, top).squeeze(1), data.means


def true_binary_errors(temperature: float, *, scale: float = 3.0, n_reference: int = 200_000,
                       means: ArrayLike | None = None, seed: int = 0) -> dict[str, float]:
    """True top-label ECE, ℓ2 CE and population smooth ECE of ``softmax(log η / T)`` (module docstring)."""
    _, _, c, eta_top, _ = _binary_model(check_positive_int(n_reference, "n_reference") // 2, temperature,
                                        scale, seed, None if means is None else torch.as_tensor(means))
    gap = eta_top - c
    return {"ECE": float(gap.abs().mean()), "l2 CE": float(gap.pow(2).mean().sqrt()),
            "smooth ECE": metrics.smooth_ece_from_confidence(c, eta_top)}


def estimator_bias(
    ns: Sequence[int] = (200, 1000, 5000),
    n_bins: Sequence[int] = (5, 15, 50),
    seeds: Iterable[int] = range(10),
    temperatures: Sequence[float] = (1.0, 0.5),
    *,
    scale: float = 3.0,
    n_reference: int = 200_000,
) -> Any:
    """Binned ECE, debiased ℓ2 CE and smooth ECE on samples of size N against their true values.

    Two Gaussian classes (means from seed 0, kept for every sample) and the models
    ``softmax(log η / T)`` for each ``T`` in ``temperatures`` (``T = 1`` is calibrated, so
    every true error is 0). For each ``N`` (total points, half per class), seed and bin
    count: ``metrics.ece`` (equal-width bins) against the true ECE, ``metrics.l2_ce``
    (debiased, equal-mass bins) against the true ℓ2 CE, and ``metrics.smooth_ece`` (no
    bins; repeated in every bin-count row) against the population smooth ECE. Returns a
    tidy DataFrame ``T, N, n_bins, seed, estimator, estimate, truth, error`` (an odd ``N``
    draws ``N - 1`` points; in smoke mode the rows keep the ``N`` asked for) with
    ``error = estimate - truth``; its mean over seeds is the bias. In smoke mode seeds are
    capped and every ``N`` cut to :data:`SMOKE_SAMPLES`.
    """
    import pandas as pd

    temps = [float(t) for t in temperatures]
    if not temps or any(not t > 0 for t in temps):
        raise ValueError(f"temperatures must be positive numbers, got {temperatures!r}")
    ns = [check_positive_int(n, "ns", minimum=4) for n in ns]
    bins = [check_positive_int(b, "n_bins") for b in n_bins]
    seeds = list(seeds)
    seeds = seeds[: profile.smoke_cap("seeds", len(seeds))]
    if not ns or not bins or not seeds:
        raise ValueError("ns, n_bins and seeds must each hold at least one value")
    means = gaussian_mixture(1, num_classes=2, dim=2, scale=scale, seed=0).means
    rows = []
    for t in temps:
        truth = true_binary_errors(t, scale=scale, n_reference=n_reference, means=means, seed=10_000)
        for n in ns:
            for seed in seeds:
                p, y, *_ = _binary_model(_smoke(n, SMOKE_SAMPLES) // 2, t, scale, 1 + int(seed), means)
                smooth = metrics.smooth_ece(p, y)
                for b in bins:
                    for est, value, key in (("binned ECE", metrics.ece(p, y, b), "ECE"),
                                            ("debiased l2 CE", metrics.l2_ce(p, y, b), "l2 CE"),
                                            ("smooth ECE", smooth, "smooth ECE")):
                        rows.append({"T": t, "N": n, "n_bins": b, "seed": seed, "estimator": est,
                                     "estimate": value, "truth": truth[key], "error": value - truth[key]})
    return pd.DataFrame(rows)
