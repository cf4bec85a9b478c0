"""Post-hoc calibration on held-out logits.

Every calibrator follows scikit-learn's shape: construct with hyper-parameters,
``fit(logits, labels)`` on a validation split (returns ``self``), then
``predict_proba(test_logits)`` (:class:`HistogramBinning` recalibrates the top-label
confidence only: ``predict_confidence``). All take logits ``(N, K)`` and refuse inputs that look
like probabilities (every row in [0, 1] summing to 1); pass ``log(probs)`` when only
probabilities are at hand. Using a calibrator before ``fit`` raises
:class:`NotFittedError`, a subclass of ``ValueError`` and ``AttributeError`` (as in
scikit-learn), naming the calibrator and the call.

Every calibrator is a :class:`Calibrator`: tensors in give tensors out (on their device),
NumPy arrays in give NumPy arrays; ``as_module()`` returns the fitted map as a
:class:`CalibrationModule` (a :class:`torch.nn.Module` whose ``returns`` says whether it
gives calibrated logits, probabilities or the top-label confidence, equal to
``predict_proba`` or ``predict_confidence``); ``state_dict()`` and ``load_state_dict()`` save
and restore a fitted calibrator, hyper-parameters included, through ``torch.save`` and
``torch.load(path, weights_only=True)``.

The calibrators, their maps of the logits ``g`` and their number of parameters:

* :class:`TemperatureScaling`: ``softmax(g / T)``; 1.
* :class:`EnsembleTemperatureScaling`: ``w1 softmax(g / T) + w2 softmax(g) + w3 / K``; 3.
* :class:`PlattScaling` (K = 2): ``sigmoid(a (g_1 - g_0) + b)``; 2.
* :class:`VectorScaling`: ``softmax(w * g + b)``; 2K.
* :class:`MatrixScaling`: ``softmax(W g + b)``; K^2 + K.
* :class:`DirichletCalibration`: ``softmax(W log softmax(g) + b)``; K^2 + K.
* :class:`IsotonicCalibration`: a monotone step function per class, rows renormalised;
  non-parametric.
* :class:`HistogramBinning`: top-label confidence -> its bin's accuracy; ``n_bins``.

Sources: temperature scaling, vector and matrix scaling (Guo et al. 2017, section 4.2);
Dirichlet calibration and the ODIR regulariser (Kull et al. 2019, section 3); ensemble
temperature scaling (Zhang et al. 2020); Platt scaling (Platt 1999); isotonic regression
(Zadrozny & Elkan 2002); histogram binning (Zadrozny & Elkan 2001; Wang et al. (2021)
section 2).
"""
from __future__ import annotations

from .._optional import need

need("posthoc", "calib.posthoc")

from ._base import CalibrationModule, Calibrator, NotFittedError, SeparationWarning
from .binning import HistogramBinning, HistogramBinningModule
from .ensemble import EnsembleTemperatureScaling, EnsembleTemperatureScalingModule
from .isotonic import IsotonicCalibration, IsotonicCalibrationModule
from .platt import PlattScaling, PlattScalingModule
from .scaling import AffineScalingModule, DirichletCalibration, MatrixScaling, VectorScaling
from .temperature import (
    T_LIMIT,
    TemperatureScaling,
    TemperatureScalingModule,
    default_grid,
    fit_temperature,
    temperature_scale,
)

__all__ = [
    "NotFittedError",
    "SeparationWarning",
    "T_LIMIT",
    "default_grid",
    "temperature_scale",
    "fit_temperature",
    "TemperatureScaling",
    "HistogramBinning",
    "VectorScaling",
    "MatrixScaling",
    "DirichletCalibration",
    "IsotonicCalibration",
    "EnsembleTemperatureScaling",
    "PlattScaling",
    "Calibrator",
    "CalibrationModule",
    "TemperatureScalingModule",
    "AffineScalingModule",
    "PlattScalingModule",
    "EnsembleTemperatureScalingModule",
    "IsotonicCalibrationModule",
    "HistogramBinningModule",
]
