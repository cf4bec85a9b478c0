"""Each test example's outcome in a sweep's run, for the test-set noise of :mod:`calib.evidence`.

:func:`calib.evidence.compare_runs` resamples the test examples of every run together
(a bootstrap), so it needs each run's per-example outcome, not just its ECE. For the
top-label ECE that outcome is a pair: the confidence of the prediction and whether it is
correct. :func:`run_scores` reads a run directory's saved logits (``logits.pt``) and
returns those pairs before post-hoc calibration, after temperature scaling with a given
T, or after histogram binning fitted on the run's validation logits; :func:`score_ece`
is the matching metric::

    from calib import evidence
    from calib.experiments import scores
    a = [scores.run_scores(d, "ts", temperature=t) for d, t in runs_a]
    b = [scores.run_scores(d, "ts", temperature=t) for d, t in runs_b]
    evidence.compare_runs(scores.score_ece, a, b, scores.labels_of(a),
                          "a's ECE after TS above b's", scale=100)
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._checks import check_positive_int

__all__ = ["POST", "run_scores", "top_label_scores", "score_ece", "labels_of"]

#: What :func:`run_scores` applies to the logits first.
POST = ("raw", "ts", "hb")


def run_scores(run_dir: str | os.PathLike, post: str = "raw", *, temperature: float | None = None,
                n_bins: int = 15) -> np.ndarray:
    """``(N, 2)`` float64: each test example's top-label confidence and correctness (0/1).

    ``post``: ``"raw"``, the softmax of the test logits; ``"ts"``, the softmax of
    ``logits / temperature`` (Guo et al. 2017; ``temperature`` required, e.g. a run's
    ``temperature_grid`` or ``temperature_nll``); ``"hb"``, histogram binning with
    ``n_bins`` equal-width bins fitted on the run's validation logits (Zadrozny and Elkan
    2001; Wang et al. (2021) §2), which replaces each confidence by its bin's validation
    accuracy and keeps the predictions. Temperature scaling keeps them too.
    """
    from ..posthoc import HistogramBinning
    from ..train import load_logits

    if post not in POST:
        raise ValueError(f"post must be one of {POST}, got {post!r}")
    n_bins = check_positive_int(n_bins, "n_bins")
    if (post == "ts") != (temperature is not None):
        raise ValueError("temperature is given exactly when post='ts'")
    if temperature is not None and not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    rec = load_logits(run_dir)
    rows = top_label_scores(rec["test_logits"], rec["test_labels"], temperature or 1.0)
    if post == "hb":  # the same predictions, each confidence replaced by its bin's accuracy
        hb = HistogramBinning(n_bins=n_bins).fit(rec["val_logits"], rec["val_labels"])
        rows[:, 0] = hb.predict_confidence(rec["test_logits"].double()).double().numpy()
    return rows


def top_label_scores(logits: Any, labels: Any, temperature: float = 1.0) -> np.ndarray:
    """``(N, 2)`` float64 rows (confidence, correct) of ``(N, K)`` logits: the largest entry of
    ``softmax(logits / temperature)`` and whether the argmax equals the label. Accepts tensors
    or arrays (e.g. a ledger cell's committed float32 test predictions)."""
    import torch

    z = torch.as_tensor(logits).double()
    y = torch.as_tensor(labels)
    if z.ndim != 2 or y.shape != z.shape[:1]:
        raise ValueError(f"logits must be (N, K) and labels (N,), got {tuple(z.shape)} and {tuple(y.shape)}")
    conf = torch.softmax(z / temperature, 1).max(1).values
    return torch.stack([conf, (z.argmax(1) == y).double()], 1).numpy()


def score_ece(scores: Any, labels: Any = None, n_bins: int = 15) -> float:
    """Top-label ECE (``n_bins`` equal-width bins ``(lo, hi]``) of :func:`run_scores` rows.

    ``ECE = (1/N) Σ_m |Σ_{i in B_m} (correct_i − conf_i)|``, as :func:`calib.metrics.ece`
    computes it from probabilities (Naeini et al. 2015; Guo et al. 2017), in numpy for the
    thousands of resamples of a bootstrap. ``labels`` is ignored: the signature of a
    :mod:`calib.evidence` metric.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.shape[1] != 2 or s.shape[0] == 0:
        raise ValueError(f"scores must have shape (N, 2) with N > 0 (confidence, correct), got {s.shape}")
    conf, correct = s[:, 0], s[:, 1]
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # the bin (lo, hi] of each confidence; floor(c M) is off by one at most, at an edge
    idx = np.clip(np.floor(conf * n_bins).astype(np.int64), 0, n_bins - 1)
    idx = idx - ((conf <= edges[idx]) & (idx > 0)) + ((conf > edges[idx + 1]) & (idx < n_bins - 1))
    gaps = np.bincount(idx, weights=correct - conf, minlength=n_bins)
    return float(np.abs(gaps).sum() / conf.size)


def labels_of(runs: Any) -> np.ndarray:
    """Placeholder labels for :func:`calib.evidence.compare_runs` on score rows: one per example."""
    first = np.asarray(runs[0])
    return np.zeros(first.shape[0], dtype=np.int64)
