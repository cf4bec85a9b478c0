"""Histogram binning of the top-label confidence (Zadrozny & Elkan 2001; Wang et al. (2021) section 2)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import metrics
from .._checks import ArrayLike, check_logits, check_positive_int
from ._base import CalibrationModule, Calibrator, _logits_labels, like_input, not_fitted

__all__ = ["HistogramBinning", "HistogramBinningModule"]

Tensor = torch.Tensor


class HistogramBinning(Calibrator):
    """Histogram binning of the top-label confidence (Zadrozny & Elkan 2001; Wang et al. (2021) §2).

    ``fit`` splits the validation confidences ``c = max softmax(g)`` into ``n_bins``
    equal-width bins ``(lo, hi]`` (0 kept in the first) and stores each bin's accuracy
    ``theta_m``; ``predict_confidence`` maps a confidence in bin ``m`` to ``theta_m``. A
    bin with no validation sample keeps its midpoint. The predicted class is unchanged,
    so only the top-label confidence is recalibrated (the rest of the probability
    vector has no defined recalibration here). On its own fitting set the binned ECE
    of the output, with the same bins, is exactly 0.
    """

    def __init__(self, n_bins: int = 15):
        self.n_bins = check_positive_int(n_bins, "n_bins")
        self._values: np.ndarray | None = None
        self._counts: np.ndarray | None = None
        self._num_classes: int | None = None

    def __repr__(self) -> str:
        return f"HistogramBinning(n_bins={self.n_bins}, {'unfitted' if self._values is None else 'fitted'})"

    @property
    def bin_values(self) -> np.ndarray:
        """Calibrated confidence ``theta_m`` of each bin (read-only)."""
        if self._values is None:
            raise not_fitted("HistogramBinning")
        return self._values

    @property
    def bin_counts(self) -> np.ndarray:
        """Validation samples per bin."""
        self.bin_values  # noqa: B018 - raises when unfitted
        return self._counts

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.n_bins + 1)

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "HistogramBinning":
        g, y = _logits_labels(logits, labels)
        conf, pred = torch.softmax(g.double(), dim=1).max(dim=1)
        bins = metrics.bin_stats_from_confidence(conf, pred.eq(y), self.n_bins, validate=False)
        values = np.where(bins.counts > 0, bins.accuracy, 0.5 * (self.edges[:-1] + self.edges[1:]))
        values.setflags(write=False)
        self._values, self._counts, self._num_classes = values, bins.counts, g.shape[1]
        return self

    def _params(self) -> dict[str, Any]:
        return {"n_bins": self.n_bins}

    def _state_keys(self) -> tuple[str, ...]:
        return ("bin_values", "bin_counts", "num_classes")

    def _state(self) -> dict[str, Tensor] | None:
        if self._values is None:
            return None
        return {"bin_values": torch.from_numpy(self._values.copy()), "bin_counts": torch.from_numpy(self._counts.copy()),
                "num_classes": torch.tensor(self._num_classes)}

    def _set_state(self, state: dict[str, Tensor]) -> None:
        values, counts = state["bin_values"].double(), state["bin_counts"]
        if values.shape != (self.n_bins,) or counts.shape != (self.n_bins,):
            raise ValueError(f"HistogramBinning state needs {self.n_bins} bin values and counts, "
                             f"got {tuple(values.shape)} and {tuple(counts.shape)}")
        self._values = values.numpy().copy()
        self._values.setflags(write=False)
        self._counts, self._num_classes = counts.numpy().copy(), int(state["num_classes"])

    def _module(self) -> "HistogramBinningModule":
        return HistogramBinningModule(torch.from_numpy(self._values.copy()))

    def _check_width(self, g: Tensor) -> Tensor:
        if g.shape[1] != self._num_classes:
            raise ValueError(f"logits have K = {g.shape[1]} classes but HistogramBinning was fitted "
                             f"on K = {self._num_classes}")
        return g

    def predict_confidence(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated top-label confidence ``theta_{bin(c)}`` for each row, float64 ``(N,)``."""
        self._fitted("predict_confidence")
        g = self._check_width(check_logits(logits, "logits", refuse_probs=True))
        return like_input(self._module().confidence(g.detach()), logits)

    def predict(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Predicted class (the arg-max, unchanged by binning)."""
        self._fitted("predict")
        return like_input(self._check_width(check_logits(logits, "logits", refuse_probs=True)).argmax(dim=1), logits)


class HistogramBinningModule(CalibrationModule):
    """Histogram binning as a module: ``g -> theta_{bin(max softmax(g))}`` (``returns = "confidence"``).

    The top-label confidence's bin (``n_bins`` equal-width ``(lo, hi]`` bins,
    :func:`calib.metrics.bin_index`) picks its calibrated value from the buffer
    ``bin_values`` (float64); ``forward`` gives :meth:`HistogramBinning.predict_confidence`,
    ``(N,)``, in the logits' dtype (the predicted class is the arg-max of the logits).
    """

    returns = "confidence"

    def __init__(self, bin_values: Tensor):
        super().__init__()
        self.register_buffer("bin_values", torch.as_tensor(bin_values, dtype=torch.float64).detach().clone())

    def confidence(self, logits: Tensor) -> Tensor:
        """The calibrated confidence in the buffer's dtype."""
        table = self.bin_values.to(logits.device)
        conf = torch.softmax(logits.to(table.dtype), dim=1).amax(dim=1)
        return table[metrics.bin_index(conf, table.numel())]

    def forward(self, logits: Tensor) -> Tensor:
        return self.confidence(logits).to(logits.dtype)

    def extra_repr(self) -> str:
        return f"n_bins={self.bin_values.numel()}, returns={self.returns!r}"
