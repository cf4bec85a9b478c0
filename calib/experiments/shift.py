"""Calibration under dataset shift: a model's logits over corruptions x severities, as a tidy table.

Ovadia et al. (2019), §4's protocol at book scale: train on clean images, then measure
accuracy, ECE and NLL on the test images under each corruption of :mod:`calib.data.shift`
at severities 0 (clean) to 5, with and without a temperature fitted on *clean* validation
data (Ovadia et al. (2019) fit it the same way: the shift is unknown when calibrating).

>>> from calib.experiments import shift  # doctest: +SKIP
>>> predict = shift.predictor(model, mean=splits.mean, std=splits.std)  # doctest: +SKIP
>>> logits = shift.shift_logits(predict, splits.test_x)  # doctest: +SKIP
>>> # logits: {(corruption, severity): logits}
>>> rows = shift.shift_table(logits, splits.test_y, temperature=1.7,
...                          loss="ce", seed=0)  # doctest: +SKIP

``ensemble_logits`` averages the softmax of several models' logits (a deep ensemble,
Lakshminarayanan et al. (2017), §2.4) and returns its log, so an ensemble goes through
``shift_table`` like one model. ``corrupt_grid`` corrupts the test images once for every
model. ``scores`` and ``cell_mean`` turn a model's logits over a set of cells into
per-image summaries and a metric on them (the mean over the cells of ECE, NLL, accuracy
or confidence minus accuracy, or its change from a clean cell) for :func:`calib.evidence.compare_runs`: its bootstrap over test images then
resamples each image with all its corrupted copies, and is fast.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from .. import metrics
from ..metrics import bin_index
from ..metrics.scores import NLL_EPS
from .._checks import check_labels, check_positive, check_positive_int
from ..data.shift import CORRUPTIONS, corrupt

__all__ = ["Cell", "predictor", "corrupt_grid", "shift_logits", "ensemble_logits", "shift_table",
           "evaluate_shift", "scores", "cell_mean"]

Cell = tuple[str, int]  # (corruption, severity)
DEFAULT_SEVERITIES = (0, 1, 2, 3, 4, 5)


def predictor(model: torch.nn.Module, mean: Sequence[float], std: Sequence[float], *,
              batch_size: int = 1024) -> Callable[[Tensor], Tensor]:
    """A function ``uint8 images -> float32 CPU logits`` that normalises ``(x/255 − mean)/std``
    as :class:`calib.data.DeviceLoader` does and runs ``model`` in eval mode, in batches,
    on the model's device."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    batch_size = check_positive_int(batch_size, "batch_size")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)

    @torch.no_grad()
    def predict(images: Tensor) -> Tensor:
        model.eval()
        outs = [model((x.to(device).float() / 255.0 - m) / s).float().cpu() for x in images.split(batch_size)]
        return torch.cat(outs)

    return predict


def _check_grid(corruptions: Sequence[str], severities: Sequence[int]) -> None:
    if isinstance(corruptions, str) or not corruptions:
        raise ValueError(f"corruptions must be a non-empty list of names from {', '.join(CORRUPTIONS)}")
    if bad := [c for c in corruptions if c not in CORRUPTIONS]:
        raise ValueError(f"unknown corruption {bad[0]!r}; choose from {', '.join(CORRUPTIONS)}")
    if not severities or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= 5 for s in severities):
        raise ValueError(f"severities must be a non-empty list of ints in 0..5, got {list(severities)}")


def corrupt_grid(images: Tensor, *, corruptions: Sequence[str] = tuple(CORRUPTIONS),
                 severities: Sequence[int] = DEFAULT_SEVERITIES, seed: int = 0) -> dict[Cell, Tensor]:
    """``{(corruption, severity): corrupt(corruption, images, severity, seed=seed)}``, made once
    so that several models are evaluated on the same corrupted images without redoing the
    corruption (blurring 10,000 images costs about as much as a small CNN's forward pass).
    Severity 0 is ``images`` itself, the same tensor for every corruption."""
    _check_grid(corruptions, severities)
    return {(name, s): images if s == 0 else corrupt(name, images, s, seed=seed)
            for name in corruptions for s in severities}


def shift_logits(predict: Callable[[Tensor], Tensor], images: Tensor | Mapping[Cell, Tensor], *,
                 corruptions: Sequence[str] = tuple(CORRUPTIONS), severities: Sequence[int] = DEFAULT_SEVERITIES,
                 seed: int = 0) -> dict[Cell, Tensor]:
    """``{(corruption, severity): predict(corrupt(corruption, images, severity, seed=seed))}``.

    ``images``: the clean test images, or the grid :func:`corrupt_grid` made from them (then
    ``corruptions``, ``severities`` and ``seed`` are the grid's). Severity 0 (the clean
    images) is predicted once and shared by every corruption.
    """
    if isinstance(images, Mapping):
        out: dict[Cell, Tensor] = {}
        done: dict[int, Tensor] = {}  # one prediction per distinct tensor (the shared clean images)
        for cell, x in images.items():
            out[cell] = done[id(x)] if id(x) in done else done.setdefault(id(x), predict(x))
        return out
    _check_grid(corruptions, severities)
    out = {}
    clean = predict(images) if 0 in severities else None
    for name in corruptions:
        for s in severities:
            out[(name, s)] = clean if s == 0 else predict(corrupt(name, images, s, seed=seed))
    return out


def ensemble_logits(members: Sequence[Mapping[Cell, Tensor]]) -> dict[Cell, Tensor]:
    """Log of the members' mean softmax per cell: ``log (1/M) Σ_m softmax(z_m)``
    (Lakshminarayanan et al. (2017), §2.4: a uniformly weighted mixture)."""
    if not members:
        raise ValueError("members must hold at least one model's shift_logits")
    keys = set(members[0])
    if any(set(m) != keys for m in members):
        raise ValueError("every member must cover the same (corruption, severity) cells")
    n = torch.tensor(float(len(members)))
    return {k: torch.logsumexp(torch.stack([m[k].double().log_softmax(1) for m in members]), 0).sub(n.log().double())
            .float() for k in members[0]}


def shift_table(logits: Mapping[Cell, Tensor], labels: Tensor, *, temperature: float | None = None,
                n_bins: int = 15, **tags: Any) -> list[dict[str, Any]]:
    """One row per cell: ``tags``, corruption, severity, ``ts``, accuracy, confidence, ece, nll.

    Without ``temperature`` the rows have ``ts=False``; with one, each cell gets a second row
    (``ts=True``) on ``logits / temperature``. ECE is binned top-label ECE with ``n_bins``
    equal-width bins (:func:`calib.metrics.ece`); NLL in nats; confidence is the mean
    top-label probability (above the accuracy: over-confident on average).
    """
    if not logits:
        raise ValueError("logits is empty; pass the dict shift_logits returns")
    temps = [(False, 1.0)] + ([(True, check_positive(temperature, "temperature"))] if temperature is not None else [])
    rows = []
    for (name, severity), z in logits.items():
        y = check_labels(labels, z.shape[0], z.shape[1], "labels")
        for ts, t in temps:
            p = (z.double() / t).softmax(1)
            rows.append({**tags, "corruption": name, "severity": severity, "ts": ts,
                         "accuracy": metrics.accuracy(p, y), "confidence": float(p.max(1).values.mean()),
                         "ece": metrics.ece(p, y, n_bins),
                         "nll": metrics.nll(p, y)})
    return rows


def evaluate_shift(predict: Callable[[Tensor], Tensor] | torch.nn.Module, images: Tensor, labels: Tensor, *,
                   mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                   temperature: float | None = None, corruptions: Sequence[str] = tuple(CORRUPTIONS),
                   severities: Sequence[int] = DEFAULT_SEVERITIES, seed: int = 0, n_bins: int = 15,
                   **tags: Any) -> list[dict[str, Any]]:
    """:func:`shift_logits` then :func:`shift_table`; a model needs ``mean`` and ``std``."""
    if isinstance(predict, torch.nn.Module):
        if mean is None or std is None:
            raise ValueError("a model needs the normalisation mean and std (e.g. splits.mean, splits.std)")
        predict = predictor(predict, mean, std)
    z = shift_logits(predict, images, corruptions=corruptions, severities=severities, seed=seed)
    return shift_table(z, labels, temperature=temperature, n_bins=n_bins, **tags)


_SCORES = ("bin", "correct", "confidence", "log_likelihood")


def scores(logits: Mapping[Cell, Tensor], labels: Tensor, cells: Sequence[Cell], *,
           temperature: float | None = None, n_bins: int = 15) -> np.ndarray:
    """Per test image, what each cell's ECE, NLL and accuracy are sums of: ``(N, 4 C)`` float64.

    For the ``C`` cells in order (softmax of ``logits[cell] / temperature``, in float64 as
    :func:`shift_table`): the confidence's bin among ``n_bins`` equal-width bins (the bins of
    :func:`calib.metrics.ece`), the correctness, the confidence, and the log-probability of
    the true label (clamped at :data:`calib.metrics.NLL_EPS` as :func:`calib.metrics.nll`);
    columns ``[k * C + c]`` for summary ``k`` of cell ``c``. Row ``i`` is test image ``i``
    in every cell, so resampling rows resamples images with all their corrupted copies.
    """
    if isinstance(cells, tuple) and len(cells) == 2 and isinstance(cells[0], str):
        raise TypeError("cells must be a list of (corruption, severity) cells, not one cell")
    if not cells:
        raise ValueError("cells is empty")
    if missing := [c for c in cells if c not in logits]:
        raise ValueError(f"cell {missing[0]} is not among the logits' cells")
    t = 1.0 if temperature is None else check_positive(temperature, "temperature")
    n_bins = check_positive_int(n_bins, "n_bins")
    out = []
    for cell in cells:
        z = logits[cell]
        y = check_labels(labels, z.shape[0], z.shape[1], "labels")
        p = (z.double() / t).softmax(1)
        conf, pred = p.max(1)
        out.append(torch.stack([bin_index(conf, n_bins, "right").double(), pred.eq(y).double(), conf,
                                p.gather(1, y.view(-1, 1)).squeeze(1).clamp(min=NLL_EPS).log()]))
    return torch.stack(out, 1).reshape(4 * len(cells), -1).T.contiguous().numpy()


def cell_mean(metric: str, n_bins: int = 15, *, change: bool = False) -> Callable[[np.ndarray, Any], float]:
    """``metric(scores, labels)``: the mean over the cells of ``"ece"`` (with ``n_bins`` bins,
    those of :func:`scores`), ``"nll"``, ``"accuracy"``, ``"confidence"`` (the mean
    top-label probability) or ``"gap"`` (confidence minus accuracy: > 0 is over-confident
    on average), from :func:`scores` rows; ``labels`` is not used (the rows hold the
    correctness). Equal to the mean of the :func:`shift_table` values over the cells,
    and a metric for :func:`calib.evidence.compare_runs` and :func:`calib.evidence.test_se`.

    ``change=True``: the mean over the cells after the first minus the first cell's value
    (scores over ``[clean cell, *shifted cells]``: how much the metric moves under shift),
    so that a bootstrap resamples each image with its clean and corrupted copies together.
    """
    if metric not in ("ece", "nll", "accuracy", "confidence", "gap"):
        raise ValueError(f"metric must be 'ece', 'nll', 'accuracy', 'confidence' or 'gap', got {metric!r}")
    n_bins = check_positive_int(n_bins, "n_bins")

    def mean_over_cells(rows: np.ndarray, labels: Any = None) -> float:
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] % 4:
            raise ValueError(f"rows must be scores(...) output of shape (N, 4 C), got {rows.shape}")
        n, c = rows.shape[0], rows.shape[1] // 4
        if change and c < 2:
            raise ValueError("change=True needs scores over two or more cells (the first is the baseline)")
        binned, correct, conf, loglik = (rows[:, k * c:(k + 1) * c] for k in range(4))
        if metric == "nll":
            per_cell = -loglik.mean(0)
        elif metric in ("accuracy", "confidence", "gap"):
            per_cell = {"accuracy": correct, "confidence": conf, "gap": conf - correct}[metric].mean(0)
        else:
            key = binned.astype(np.int64) + n_bins * np.arange(c)  # bin m of cell j: j * n_bins + m
            gaps = np.bincount(key.ravel(), weights=(correct - conf).ravel(), minlength=c * n_bins)
            per_cell = np.abs(gaps).reshape(c, n_bins).sum(1) / n
        return float(per_cell[1:].mean() - per_cell[0]) if change else float(per_cell.mean())

    mean_over_cells.__name__ = f"{'change' if change else 'mean'}_{metric}"
    return mean_over_cells
