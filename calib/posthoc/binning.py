"""Histogram binning of the top-label confidence (Zadrozny & Elkan 2001; Wang et al. (2021) section 2)."""
from __future__ import annotations

import numpy as np
import torch

from .. import metrics
from .._checks import ArrayLike, check_logits, check_positive_int
from ._base import NotFittedError, _logits_labels

__all__ = ["HistogramBinning"]

Tensor = torch.Tensor


class HistogramBinning:
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
            raise NotFittedError("HistogramBinning is not fitted yet; call .fit(logits, labels) first")
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

    def _check_width(self, g: Tensor) -> Tensor:
        if g.shape[1] != self._num_classes:
            raise ValueError(f"logits have K = {g.shape[1]} classes but HistogramBinning was fitted "
                             f"on K = {self._num_classes}")
        return g

    def predict_confidence(self, logits: ArrayLike) -> Tensor:
        """Calibrated top-label confidence ``theta_{bin(c)}`` for each row, float64 ``(N,)``."""
        values = self.bin_values
        g = self._check_width(check_logits(logits, "logits", refuse_probs=True))
        conf = torch.softmax(g.detach().double(), dim=1).amax(dim=1)
        table = torch.tensor(values, dtype=torch.float64, device=conf.device)
        return table[metrics.bin_index(conf, self.n_bins)]

    def predict(self, logits: ArrayLike) -> Tensor:
        """Predicted class (the arg-max, unchanged by binning)."""
        self.bin_values  # noqa: B018 - raises when unfitted
        return self._check_width(check_logits(logits, "logits", refuse_probs=True)).argmax(dim=1)
