"""Streaming metrics: ``update`` batch by batch, ``compute`` over all batches (and ranks).

Each class is named after its function (:class:`ECE` after :func:`~calib.metrics.ece`,
...) and takes the function's options. ``update(x, labels)`` adds a batch, ``compute()``
returns the function's value on the concatenation of every batch so far (to float64
rounding), and ``reset()`` forgets them. A class keeps what its formula needs:

* sufficient statistics, summed in float64, where they are exact: the count and the sum
  of per-sample terms (:class:`Accuracy`, :class:`NLL`, :class:`BrierScore`) and the
  per-bin totals of :func:`~calib.metrics.bin_totals` (:class:`ECE`, :class:`MCE`,
  :class:`ClasswiseECE`);
* the samples themselves where the estimator needs all of them: the top-label
  ``(confidence, correctness)`` pairs for :class:`AdaECE` (equal-mass bins) and
  :class:`SmoothECE` (its bandwidth), the whole probability rows for :class:`SECE`,
  :class:`SECEHard` and :class:`L2CE`.

States live on the device of the first batch. Under an initialised
``torch.distributed`` process group, ``compute()`` sums the statistics over the ranks
(``all_reduce``) or gathers the samples (``all_gather``, padded to the longest rank and
trimmed), so every rank gets the value on all ranks' data; a rank without data takes
part with empty states. Every rank must call ``compute()`` (it is a collective call).

Inputs
------
``x`` is ``probs`` ``(N, K)`` or, with ``from_logits=True``, logits, turned into
probabilities by a softmax in float64. ``labels`` ``(N,)`` are integer classes. The
values are checked as the functions check them (``validate=False`` skips that, and with
it one host read per batch).

Binary input: a 1-D ``x`` of shape ``(N,)`` is the probability (or, with
``from_logits=True``, the logit) of the positive class, with labels in {0, 1}; it stands
for the two columns ``[1 - p, p]`` (:func:`binary_probs`). The top-label metrics take
``binary=``:

``"top_label"`` (default)
    the calibration of the predicted class, confidence ``max(p, 1 - p)``, as every
    multiclass metric here: ``ECE(...)`` on ``p`` equals :func:`~calib.metrics.ece` of
    ``binary_probs(p)``, and with ``closed="left"`` torchmetrics'
    ``multiclass_calibration_error`` of the two columns.
``"positive"``
    the calibration of the positive-class probability ``p`` against ``1[y = 1]``
    (Kull et al. 2019's class-1 calibration). This is what torchmetrics'
    ``binary_calibration_error`` / ``BinaryCalibrationError`` compute, despite their
    "top-label" wording: its ECE and MCE equal theirs with ``closed="left"`` when no
    ``p`` is exactly 1 (torchmetrics gives 1 a bin of its own). It equals the
    :func:`~calib.metrics.bin_stats_from_confidence`,
    :func:`~calib.metrics.adaece_from_confidence` and
    :func:`~calib.metrics.smooth_ece_from_confidence` of ``(p, y == 1)``.

The two meanings agree when every ``p > 1/2`` (then the top label is the positive class).
For :class:`NLL`, :class:`BrierScore` (summed over both columns: twice the one-column
``(p - y)^2``), :class:`Accuracy` and :class:`ClasswiseECE` the two columns are used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

from .._checks import ArrayLike, as_tensor, check_positive, label_tensor
from ._inputs import check_closed, check_n_bins, checked, two_columns
from .binned import Closed, adaece_from_confidence, bin_index, bin_totals, _classwise_totals
from .debiased import Mode, l2_ce
from .scores import NLL_EPS
from .smooth import sece, sece_hard, smooth_ece_from_confidence

Tensor = torch.Tensor
Binary = Literal["top_label", "positive"]
_BINARY = ("top_label", "positive")


def binary_probs(p: ArrayLike, *, from_logits: bool = False) -> Tensor:
    """The two columns ``[1 - p, p]`` ``(N, 2)`` of a positive-class probability ``p`` ``(N,)``.

    With ``from_logits=True`` ``p`` is the logit ``z`` and the columns are
    ``[sigmoid(-z), sigmoid(z)]`` in float64 (the softmax of ``[0, z]``). The binary input
    of the streaming metrics means these columns (module docstring); e.g.
    ``ece(binary_probs(p), y)`` is the top-label ECE of a binary classifier.
    """
    t = as_tensor(p, "p")
    if t.ndim != 1:
        raise ValueError(f"p must have shape (N,), got shape {tuple(t.shape)}")
    if from_logits:
        z = t.detach().double()
        return torch.stack([torch.sigmoid(-z), torch.sigmoid(z)], dim=1)
    return two_columns(t)  # what every metric function makes of 1-D probabilities


@dataclass(frozen=True)
class _Batch:
    """A checked batch: probabilities ``p`` (N, K), labels ``y`` and the forecasts ``conf``
    with their outcomes ``correct`` (the top label, or the positive class)."""

    p: Tensor
    y: Tensor
    conf: Tensor
    correct: Tensor


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- torch.distributed


def _world(group: Any) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def _comm_device(group: Any) -> torch.device:
    """Where collectives run: the current GPU for NCCL, the host otherwise (gloo, mpi)."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_gather(t: Tensor, group: Any) -> list[Tensor]:
    out = [torch.empty_like(t) for _ in range(_world(group))]
    dist.all_gather(out, t.contiguous(), group=group)
    return out


def _sum_over_ranks(sums: Tensor | None, group: Any) -> Tensor | None:
    """Every rank's float64 statistics summed; a rank without any takes part with zeros."""
    dev = _comm_device(group)
    size = torch.tensor([0 if sums is None else sums.numel()], device=dev)
    sizes = {int(s) for s in _all_gather(size, group)} - {0}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise ValueError(f"the ranks' states differ in size ({sorted(sizes)}): every rank must "
                         "pass the same number of classes")
    if sums is None:
        total = torch.zeros(sizes.pop(), dtype=torch.float64, device=dev)
    else:
        total = sums.to(dev, copy=True)
    dist.all_reduce(total, group=group)
    return total if sums is None else total.to(sums.device)


def _gather_rows(rows: Tensor | None, is_double: bool, group: Any) -> tuple[Tensor, bool] | None:
    """Every rank's float64 rows ``(n_r, W)`` concatenated in rank order, and whether any
    rank's forecasts were float64; ranks differ in ``n_r`` (padded, gathered, trimmed)."""
    dev = _comm_device(group)
    n, w = (0, 0) if rows is None else rows.shape
    header = torch.tensor([n, w, int(is_double)], device=dev)
    headers = [h.tolist() for h in _all_gather(header, group)]
    widths = {h[1] for h in headers if h[0] > 0}
    if not widths:
        return None
    if len(widths) > 1:
        raise ValueError(f"the ranks' predictions differ in width ({sorted(widths)}): every rank "
                         "must pass the same number of classes")
    width, longest = widths.pop(), max(h[0] for h in headers)
    padded = torch.zeros(longest, width, dtype=torch.float64, device=dev)
    if rows is not None:
        padded[:n] = rows.to(dev)
    parts = _all_gather(padded, group)
    out = torch.cat([part[:h[0]] for part, h in zip(parts, headers)])
    return (out if rows is None else out.to(rows.device)), any(h[0] > 0 and h[2] for h in headers)


# --------------------------------------------------------------------------- the base classes


class StreamingMetric:
    """Base of the streaming metrics: checks and converts a batch, keeps and gathers states.

    ``from_logits``: ``x`` holds logits (softmax, or sigmoid for 1-D input, in float64).
    ``validate``: check the values of every batch as the functions do. ``distributed``:
    under an initialised ``torch.distributed``, compute over every rank of
    ``process_group`` (default: the world); ``False`` computes on this rank's data only.
    """

    _binary: str = "top_label"
    #: Whether the metric reads the top label (``_Batch.conf``, ``correct``); a pass over the batch.
    _top_label = True

    def __init__(self, *, from_logits: bool = False, validate: bool = True,
                 distributed: bool = True, process_group: Any = None) -> None:
        self.from_logits = _check_flag(from_logits, "from_logits")
        self.validate = _check_flag(validate, "validate")
        self.distributed = _check_flag(distributed, "distributed")
        self.process_group = process_group
        self.reset()

    def reset(self) -> None:
        """Forget every batch."""
        raise NotImplementedError

    def compute(self) -> float:
        """The metric on every batch since the last :meth:`reset` (on every rank's batches)."""
        raise NotImplementedError

    @torch.no_grad()
    def update(self, x: ArrayLike, labels: ArrayLike) -> None:
        """Add a batch: ``x`` probabilities ``(N, K)`` (logits with ``from_logits=True``) or a
        positive-class probability (logit) ``(N,)``, and integer ``labels`` ``(N,)``. An empty
        batch (N = 0, as a rank's last shard can be) adds nothing."""
        t = as_tensor(x, "logits" if self.from_logits else "probs")
        if t.ndim in (1, 2) and t.shape[0] == 0:
            label_tensor(labels, 0, "labels")
            return
        self._add(self._batch(t, labels))

    def _add(self, batch: _Batch) -> None:
        raise NotImplementedError

    def _sync(self) -> bool:
        return self.distributed and _world(self.process_group) > 1

    def _batch(self, x: ArrayLike, labels: ArrayLike) -> _Batch:
        name = "logits" if self.from_logits else "probs"
        t = as_tensor(x, name)
        if t.ndim == 1:
            p = binary_probs(t, from_logits=self.from_logits)
        elif self.from_logits:
            p = torch.softmax(t.detach().double(), dim=-1) if t.ndim == 2 else t
        else:
            p = t
        c = checked(p, labels, name, validate=self.validate, top_label=self._top_label)
        if self.validate:
            c.verify()
        if self._binary == "top_label":
            return _Batch(c.p, c.y, c.conf, c.correct)
        if c.p.shape[1] != 2:
            raise ValueError('binary="positive" needs the probability of the positive class (N,) '
                             f"or two columns (N, 2); got {c.p.shape[1]} columns")
        return _Batch(c.p, c.y, c.p[:, 1], c.y.eq(1))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n_samples} samples)"

    @property
    def n_samples(self) -> int:
        """Samples added on this rank since the last :meth:`reset`."""
        raise NotImplementedError


def _check_binary(binary: str) -> str:
    if binary not in _BINARY:
        raise ValueError(f'binary must be "top_label" or "positive", got {binary!r}')
    return binary


class _SumMetric(StreamingMetric):
    """States: one float64 vector ``[n, statistics...]``, summed over batches and ranks."""

    def reset(self) -> None:
        self._sums: Tensor | None = None

    def _add(self, batch: _Batch) -> None:
        n = torch.full((1,), batch.y.numel(), dtype=torch.float64, device=batch.y.device)
        stats = torch.cat([n, self._stats(batch).reshape(-1)])
        if self._sums is None:
            self._sums = stats
        elif stats.shape != self._sums.shape:
            raise ValueError(f"x has {batch.p.shape[1]} classes, unlike the earlier batches")
        else:
            self._sums = self._sums + stats.to(self._sums.device)

    @property
    def n_samples(self) -> int:
        return 0 if self._sums is None else int(self._sums[0])

    def compute(self) -> float:
        sums = _sum_over_ranks(self._sums, self.process_group) if self._sync() else self._sums
        if sums is None or float(sums[0]) == 0:
            raise ValueError(f"{type(self).__name__}.compute() needs data: call update() first")
        return float(self._value(sums[0], sums[1:]))

    def _stats(self, batch: _Batch) -> Tensor:
        raise NotImplementedError

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        raise NotImplementedError


class _SampleMetric(StreamingMetric):
    """States: the batches' forecasts ``(n, W)`` and targets ``(n,)``, concatenated at compute."""

    def reset(self) -> None:
        self._parts: list[tuple[Tensor, Tensor]] = []

    def _add(self, batch: _Batch) -> None:
        # copies: a batch may be (a view of) the caller's tensor, which a loop can overwrite
        values, targets = (t.contiguous().clone() for t in self._keep(batch))
        if self._parts:
            first = self._parts[0][0]
            if values.shape[1:] != first.shape[1:]:
                raise ValueError(f"x has {batch.p.shape[1]} classes, unlike the earlier batches")
            values, targets = values.to(first.device), targets.to(first.device)
        self._parts.append((values, targets))

    @property
    def n_samples(self) -> int:
        return sum(v.shape[0] for v, _ in self._parts)

    def compute(self) -> float:
        values = torch.cat([v for v, _ in self._parts]) if self._parts else None
        targets = torch.cat([t for _, t in self._parts]) if self._parts else None
        if self._sync():
            rows = None if values is None else torch.cat([values.reshape(len(values), -1).double(),
                                                          targets.double()[:, None]], dim=1)
            is_double = values is not None and values.dtype == torch.float64
            gathered = _gather_rows(rows, is_double, self.process_group)
            if gathered is None:
                values = None
            else:
                rows, is_double = gathered
                dtype = torch.float64 if is_double else torch.float32
                # columns of the gathered rows are strided views: copied, so the metric gets
                # contiguous tensors (torch.bucketize warned on every rank otherwise)
                values, targets = rows[:, :-1].to(dtype).contiguous(), rows[:, -1].contiguous()
                if self._rows:  # probability rows and integer labels
                    targets = targets.long()
                else:  # forecasts and 0/1 outcomes
                    values, targets = values.squeeze(1), targets.bool()
        if values is None or values.shape[0] == 0:
            raise ValueError(f"{type(self).__name__}.compute() needs data: call update() first")
        return float(self._value(values, targets))

    #: Whether the states are probability rows ``(n, K)`` with labels (else forecasts ``(n,)``
    #: with 0/1 outcomes).
    _rows = False

    def _keep(self, batch: _Batch) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _value(self, values: Tensor, targets: Tensor) -> float:
        raise NotImplementedError


# --------------------------------------------------------------------------- scores


class Accuracy(_SumMetric):
    """Streaming :func:`~calib.metrics.accuracy`: ``(1/N) sum_i 1[yhat_i = y_i]`` from the count
    and the number of hits (ties go to the first tied class, as ``argmax``)."""

    def _stats(self, batch: _Batch) -> Tensor:
        return batch.correct.double().sum()

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        return stats[0] / n


class NLL(_SumMetric):
    """Streaming :func:`~calib.metrics.nll`: ``-(1/N) sum_i log max(p_{i,y_i}, eps)`` in nats,
    ``eps = NLL_EPS``, from the count and the summed terms. With ``from_logits=True`` the
    softmax is taken in float64 before the clamp, as :func:`~calib.metrics.nll` of it."""

    def _stats(self, batch: _Batch) -> Tensor:
        p_y = batch.p.gather(1, batch.y[:, None]).squeeze(1).double()
        return -p_y.clamp_min(NLL_EPS).log().sum()

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        return stats[0] / n


class BrierScore(_SumMetric):
    """Streaming :func:`~calib.metrics.brier_score`: ``(1/N) sum_i sum_k (p_ik - 1[k = y_i])^2``
    (Brier 1950), summed over the classes (for binary input: both columns)."""

    def _stats(self, batch: _Batch) -> Tensor:
        p = batch.p.double()
        p_y = p.gather(1, batch.y[:, None]).squeeze(1)
        return (p.square().sum(dim=1) - 2 * p_y + 1).sum()

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        return stats[0] / n


# --------------------------------------------------------------------------- binned errors


class ECE(_SumMetric):
    """Streaming :func:`~calib.metrics.ece`: ``(1/N) sum_m |sum_{i in B_m} (pi_i - c_i)|`` over
    ``n_bins`` equal-width bins (Naeini et al. 2015; Guo et al. 2017; Mukhoti et al. (2020)
    section 2), from the per-bin totals of :func:`~calib.metrics.bin_totals`.

    ``closed`` is the bin convention of :func:`~calib.metrics.ece`; ``binary`` the meaning
    of 1-D input (module docstring): with ``binary="positive"`` and ``closed="left"``
    it is torchmetrics' ``BinaryCalibrationError`` (``norm="l1"``).
    """

    def __init__(self, n_bins: int = 15, *, closed: Closed = "right", binary: Binary = "top_label",
                 **options: Any) -> None:
        self.n_bins, self.closed = check_n_bins(n_bins), check_closed(closed)
        self._binary = _check_binary(binary)
        super().__init__(**options)

    def _stats(self, batch: _Batch) -> Tensor:
        bins = bin_index(batch.conf, self.n_bins, self.closed)
        return bin_totals(bins, self.n_bins, batch.correct, batch.conf)

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        _, hits, conf = stats.view(3, self.n_bins)
        return (hits - conf).abs().sum() / n


class MCE(ECE):
    """Streaming :func:`~calib.metrics.mce`: ``max_m |acc(B_m) - conf(B_m)|`` over the non-empty
    equal-width bins (Naeini et al. 2015), from the per-bin totals; options as :class:`ECE`
    (``binary="positive"``, ``closed="left"``: torchmetrics' binary ``norm="max"``)."""

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        counts, hits, conf = stats.view(3, self.n_bins)
        return torch.where(counts > 0, (hits - conf).abs() / counts.clamp_min(1), 0.0).max()


class ClasswiseECE(_SumMetric):
    """Streaming :func:`~calib.metrics.classwise_ece`:
    ``(1/(N K)) sum_k sum_m |sum_{i in B_km} (1[y_i = k] - p_ik)|`` (Kull et al. 2019; Nixon
    et al. 2019), from the totals of every (class, bin) cell. ``K`` is the width of the
    first batch; a later batch of another width raises ``ValueError``."""

    _top_label = False

    def __init__(self, n_bins: int = 15, *, closed: Closed = "right", **options: Any) -> None:
        self.n_bins, self.closed = check_n_bins(n_bins), check_closed(closed)
        super().__init__(**options)

    def _stats(self, batch: _Batch) -> Tensor:
        check_n_bins(self.n_bins, cells=batch.p.shape[1])
        return _classwise_totals(batch.p, batch.y, self.n_bins, self.closed)

    def _value(self, n: Tensor, stats: Tensor) -> Tensor:
        hits, p_sum = stats.view(2, -1)
        k = hits.numel() // self.n_bins
        return (hits - p_sum).abs().sum() / (n * k)


# --------------------------------------------------------------------------- sample-based errors


class _ForecastMetric(_SampleMetric):
    """Keeps each sample's forecast (the top-label confidence or ``p``) and 0/1 outcome."""

    def _keep(self, batch: _Batch) -> tuple[Tensor, Tensor]:
        return batch.conf, batch.correct


class AdaECE(_ForecastMetric):
    """Streaming :func:`~calib.metrics.adaece`: the ECE formula over ``n_bins`` equal-mass bins
    (Mukhoti et al. (2020) section 2). The bins depend on every confidence, so the
    ``(confidence, correctness)`` pairs are kept (a float and a boolean a sample). ``binary``
    as :class:`ECE` (``"positive"``: :func:`~calib.metrics.adaece_from_confidence` of
    ``(p, y == 1)``)."""

    def __init__(self, n_bins: int = 15, *, binary: Binary = "top_label", **options: Any) -> None:
        self.n_bins, self._binary = check_n_bins(n_bins), _check_binary(binary)
        super().__init__(**options)

    def _value(self, values: Tensor, targets: Tensor) -> float:
        return adaece_from_confidence(values, targets, self.n_bins, validate=False)


class SmoothECE(_ForecastMetric):
    """Streaming :func:`~calib.metrics.smooth_ece` (Błasiok & Nakkiran 2023): the kernel-smoothed
    ECE at ``bandwidth``, or at its automatic fixed point when ``bandwidth`` is None. Keeps the
    ``(confidence, correctness)`` pairs; ``binary`` as :class:`ECE`."""

    def __init__(self, bandwidth: float | None = None, *, binary: Binary = "top_label",
                 **options: Any) -> None:
        self.bandwidth = None if bandwidth is None else check_positive(bandwidth, "bandwidth")
        self._binary = _check_binary(binary)
        super().__init__(**options)

    def _value(self, values: Tensor, targets: Tensor) -> float:
        return smooth_ece_from_confidence(values, targets, self.bandwidth, validate=False)


class _RowsMetric(_SampleMetric):
    """Keeps the probability rows and labels and calls the function on their concatenation."""

    _rows = True

    def _keep(self, batch: _Batch) -> tuple[Tensor, Tensor]:
        return batch.p, batch.y


class SECE(_RowsMetric):
    """Streaming :func:`~calib.metrics.sece` (Wang & Golebiowski (2024) section 4.2): the
    all-pairs soft accuracy needs whole rows, so the rows are kept; ``O(N^2)`` at compute."""

    def __init__(self, bandwidth: float = 0.01, *, tau: float = 0.01, **options: Any) -> None:
        self.bandwidth = check_positive(bandwidth, "bandwidth")
        self.tau = check_positive(tau, "tau")
        super().__init__(**options)

    def _value(self, values: Tensor, targets: Tensor) -> float:
        return sece(values, targets, self.bandwidth, tau=self.tau, validate=False)


class SECEHard(_RowsMetric):
    """Streaming :func:`~calib.metrics.sece_hard`: the kernel estimate of the top-label ECE
    with 0/1 correctness (Wang & Golebiowski (2024) Eq. 9-12); ``O(N^2)`` at compute."""

    def __init__(self, bandwidth: float = 0.01, **options: Any) -> None:
        self.bandwidth = check_positive(bandwidth, "bandwidth")
        super().__init__(**options)

    def _value(self, values: Tensor, targets: Tensor) -> float:
        return sece_hard(values, targets, self.bandwidth, validate=False)


class L2CE(_RowsMetric):
    """Streaming :func:`~calib.metrics.l2_ce`: the (debiased) ℓ2 calibration error over
    equal-mass bins (Kumar, Liang & Ma 2019, section 5), top-label or classwise (``mode``)."""

    def __init__(self, n_bins: int = 15, *, mode: Mode = "top_label", debiased: bool = True,
                 **options: Any) -> None:
        if mode not in ("top_label", "classwise"):
            raise ValueError(f'mode must be "top_label" or "classwise", got {mode!r}')
        self.n_bins, self.mode = check_n_bins(n_bins), mode
        self.debiased = _check_flag(debiased, "debiased")
        super().__init__(**options)

    def _value(self, values: Tensor, targets: Tensor) -> float:
        return l2_ce(values, targets, self.n_bins, mode=self.mode, debiased=self.debiased,
                     validate=False)
