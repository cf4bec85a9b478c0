"""Calibration metrics: pure functions of predicted probabilities and labels.

Inputs everywhere: ``probs`` of shape ``(N, K)`` (torch tensor or numpy array, rows on
the simplex) and integer ``labels`` of shape ``(N,)``, on CPU or a GPU (the computation
runs where the inputs are). A binary classifier may pass ``probs`` of shape ``(N,)``, the
probability of class 1 with labels in {0, 1}: it stands for the columns ``[1 - p, p]``
(:func:`binary_probs`), as in the streaming metrics, so :func:`ece` is then the top-label
ECE; the calibration of ``p`` itself against ``1[y = 1]`` is
``bin_stats_from_confidence(p, y == 1).ece``. Results are Python floats, except :func:`sece_loss` and
:func:`soft_accuracy`, which return differentiable tensors for training. Bad input
raises a one-line ``ValueError``/``TypeError`` naming the argument (NaN, inf, negative
entries, rows not summing to 1, logits passed as probabilities, labels out of range,
empty input).

Notation (the book's notation page; CONTRIBUTING.md, "Conventions every layer shares"):
confidence ``c_i = max_k p_ik``, prediction ``yhat_i = argmax_k p_ik`` (the first of tied
maxima), correctness ``pi_i = 1[yhat_i = y_i]``.

Which calibration is measured
-----------------------------
A classifier can be calibrated in three nested senses (Vaicenavicius et al. 2019;
Kull et al. 2019; Kumar et al. 2019):

*Top-label* (confidence) calibration, ``P(Y = yhat | c = t) = t``: the probability of the
predicted class is right on average. :func:`ece`, :func:`mce`, :func:`adaece`,
:func:`sece`, :func:`sece_hard`, :func:`smooth_ece`, :func:`bin_stats`, and
:func:`l2_ce` with ``mode="top_label"`` measure it.

*Classwise* (marginal) calibration, ``P(Y = k | p_k = t) = t`` for every class ``k``:
every entry of the vector, one class at a time. :func:`classwise_ece` and
:func:`l2_ce` with ``mode="classwise"`` measure it.

*Canonical* (full-vector) calibration, ``P(Y = k | p) = p_k``: the whole vector is the
conditional distribution of the label. It implies the other two. Binning the simplex
needs exponentially many cells in K, so it is estimated only where forecasts take few
distinct values: the ``reliability`` term of :func:`brier_decomposition` is the plug-in
estimate of ``E ||E[onehot(Y) | p] - p||^2``.

Bin conventions (``closed``)
----------------------------
``"right"`` (default)
    bins ``(lo, hi]``, with a confidence of exactly 0 kept in the first bin. This is the
    convention of the papers' code (Mukhoti et al. (2020) section 2 writes the bins as
    ``((i-1)/M, i/M]``).
``"left"``
    bins ``[lo, hi)``, with a confidence of exactly 1 kept in the last bin. torchmetrics
    (``MulticlassCalibrationError``) and netcal use ``[lo, hi)``; note that torchmetrics
    gives a confidence of exactly 1 a bin of its own, ``[1, 1]``, which matters for MCE
    when some confidences saturate at 1.

Every binned estimator is one bin index per sample (:func:`bin_index`, ``torch.bucketize``
against the edges) and one weighted bincount of the per-bin totals (:func:`bin_totals`):
no Python loop over bins, bin counts or bootstrap resamples.

Streaming
---------
Every metric that makes sense batch by batch has a class named after its function:
:class:`Accuracy`, :class:`NLL`, :class:`BrierScore`, :class:`ECE`, :class:`MCE`,
:class:`ClasswiseECE`, :class:`AdaECE`, :class:`SmoothECE`, :class:`SECE`,
:class:`SECEHard` and :class:`L2CE` (bases :class:`StreamingMetric`), with
``update(probs_or_logits, labels)``, ``compute()`` and ``reset()``, as torchmetrics'
``Metric``. ``compute()`` equals the function on the concatenated batches, gathered over
the ranks under ``torch.distributed``; ``from_logits=True`` takes logits, and a 1-D input
is the probability of the positive class of a binary classifier (:func:`binary_probs`;
top-label or positive-class meaning: :mod:`~calib.metrics.streaming`).
:func:`adaece_from_confidence` and :func:`smooth_ece_from_confidence` measure forecasts
that are not a top label, as :func:`bin_stats_from_confidence` does for the binned ECE.

Validation
----------
The metrics check their inputs' values (the contract above) by default; a call reads
the device once, the verdict travelling with the result. ``validate=False`` (as
torchmetrics' ``validate_args``) skips those checks, for inputs known to be valid.

Modules: :mod:`~calib.metrics._inputs` (validation, top label), :mod:`~calib.metrics.binned`
(ECE, MCE, AdaECE, classwise ECE, reliability-diagram data), :mod:`~calib.metrics.scores`
(accuracy, NLL, Brier and its decomposition), :mod:`~calib.metrics.smooth` (SECE, soft
accuracy, smooth ECE), :mod:`~calib.metrics.debiased` (ℓ2 calibration error and its
debiased estimate), :mod:`~calib.metrics.resample` (sweeps, bootstrap, summary),
:mod:`~calib.metrics.streaming` (the streaming classes).
"""
from __future__ import annotations

from .binned import (
    BinStats,
    adaece,
    adaece_from_confidence,
    bin_index,
    bin_stats,
    bin_stats_from_confidence,
    bin_totals,
    classwise_ece,
    ece,
    mce,
)
from .debiased import l2_ce, l2_ce_bias
from .resample import FIG5_BINS, bootstrap_ci, ece_sweep, summary
from .scores import (
    NLL_EPS,
    accuracy,
    brier_decomposition,
    brier_score,
    forecast_groups,
    nll,
)
from .smooth import (
    sece,
    sece_hard,
    sece_loss,
    smooth_ece,
    smooth_ece_bandwidth,
    smooth_ece_from_confidence,
    soft_accuracy,
)
from .streaming import (
    ECE,
    L2CE,
    MCE,
    NLL,
    SECE,
    Accuracy,
    AdaECE,
    BrierScore,
    ClasswiseECE,
    SECEHard,
    SmoothECE,
    StreamingMetric,
    binary_probs,
)

__all__ = [
    "accuracy",
    "nll",
    "brier_score",
    "ece",
    "mce",
    "adaece",
    "classwise_ece",
    "sece",
    "sece_hard",
    "sece_loss",
    "soft_accuracy",
    "smooth_ece",
    "smooth_ece_bandwidth",
    "l2_ce",
    "l2_ce_bias",
    "BinStats",
    "bin_stats",
    "bin_stats_from_confidence",
    "bin_index",
    "bin_totals",
    "ece_sweep",
    "bootstrap_ci",
    "summary",
    "NLL_EPS",
    "FIG5_BINS",
    "forecast_groups",
    "brier_decomposition",
    "adaece_from_confidence",
    "smooth_ece_from_confidence",
    "binary_probs",
    "StreamingMetric",
    "Accuracy",
    "NLL",
    "BrierScore",
    "ECE",
    "MCE",
    "ClasswiseECE",
    "AdaECE",
    "SmoothECE",
    "SECE",
    "SECEHard",
    "L2CE",
]
