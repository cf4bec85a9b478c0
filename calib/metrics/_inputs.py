"""Checked inputs of every metric: validation and the top label.

A metric receives ``probs`` ``(N, K)`` and ``labels`` ``(N,)`` and needs, besides the
checked tensors, each row's top-label confidence ``c_i = max_k p_ik`` and correctness
``pi_i = 1[argmax_k p_ik = y_i]``. ``p.max(dim=1)`` gives both in one read of the array,
and its index is the first of tied maxima, as ``argmax``'s (a tie is a hit only when the
label is the first tied class).

The verdict on the values (finite, in [0, 1], rows summing to 1, labels in range) needs
a few numbers on the host. On a GPU reading them would stall the device, so
:func:`checked` only computes them, and the metric reads them together with its result
in one transfer (:meth:`Checked.result`): a call costs one host sync on any device, and
invalid input raises the same one-line ``ValueError`` there.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import ArrayLike, as_tensor, check_nk_shape, check_positive_int, label_tensor, probs_error
from .._checks import row_sum_tolerance

Tensor = torch.Tensor

#: Bin conventions: ``"right"`` = ``(lo, hi]`` bins, ``"left"`` = ``[lo, hi)`` bins.
CLOSED = ("right", "left")
# Most bins (times classes, for classwise ECE) a metric allocates: 2^24 float64 cells
# are 128 MiB; beyond that n_bins is refused instead of exhausting memory.
MAX_BIN_CELLS = 1 << 24


@dataclass(frozen=True)
class Checked:
    """Predictions, their top label and the pending value checks.

    ``p`` (N, K) float (half precision promoted to float32), detached; ``y`` (N,) int64 on
    ``p``'s device; ``conf`` and ``correct`` the top label; ``stats`` the smallest and
    largest row sum, entry and label (float64), None when not validated.
    """

    p: Tensor
    y: Tensor
    conf: Tensor
    correct: Tensor
    stats: Tensor | None = None
    name: str = "probs"
    tol: float = 0.0

    def result(self, values: Tensor) -> list[float]:
        """``values`` as Python floats, read with the value checks in one transfer."""
        values = values.double().reshape(-1)
        if self.stats is None:
            return values.tolist()
        numbers = torch.cat([self.stats, values]).tolist()
        _raise_if_bad(numbers[:6], self.name, self.tol, self.p.shape[1])
        return numbers[6:]

    def verify(self) -> None:
        """Raise now if the values are bad (one host read)."""
        self.result(self.p.new_zeros(0))


def checked(probs: ArrayLike, labels: ArrayLike, name: str = "probs", *, validate: bool = True,
            top_label: bool = True) -> Checked:
    """Check the type and shape of ``probs``/``labels``, find the top label, queue the value checks.

    The contract: a real ``(N, K)`` array, N >= 1, K >= 2, finite, entries in [0, 1]
    (1e-6 slack), rows summing to 1 within :func:`calib._checks.row_sum_tolerance`;
    integer labels in ``[0, K)``. A 1-D ``(N,)`` array is the probability of class 1 of a
    binary classifier, standing for the two columns ``[1 - p, p]`` (:func:`two_columns`),
    with labels in {0, 1}: what :mod:`calib.metrics.streaming`'s metrics take by default. ``validate=False`` skips the value checks (three passes
    over the data) for inputs known to be valid; ``top_label=False`` skips finding the top
    label (one more pass; ``conf`` and ``correct`` are then empty) for a metric without it.
    """
    p = as_tensor(probs, name)
    if p.ndim == 1:  # a binary classifier's positive-class probability (the streaming metrics' binary input)
        p = two_columns(p)
    tol = row_sum_tolerance(p.dtype)
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    check_nk_shape(p, name)
    p = p.detach().contiguous()  # row reductions read rows; a column-major array is copied once
    y = label_tensor(labels, p.shape[0], "labels").to(p.device)
    if not validate:
        return Checked(p, y, *_top_label(p, y, top_label))
    k = p.shape[1]
    # NaN and inf show in the row sums; a matrix-vector product sums short rows ~5x faster
    # than sum(dim=1) on CPU.
    sums = p @ p.new_ones(k)
    stats = torch.cat([torch.stack([*sums.aminmax(), *p.aminmax()]).double(), torch.stack([*y.aminmax()]).double()])
    y = y.clamp(0, k - 1)  # until the verdict is read, never index with a bad label
    return Checked(p, y, *_top_label(p, y, top_label), stats, name, tol)


def _top_label(p: Tensor, y: Tensor, wanted: bool) -> tuple[Tensor, Tensor]:
    """Confidence and correctness of the top label (empty when not ``wanted``)."""
    if not wanted:
        return p.new_empty(0), y.new_empty(0, dtype=torch.bool)
    conf, pred = p.max(dim=1)  # the top label: value and (first) index in one read
    return conf, pred.eq(y)


def checked_confidence(confidence: ArrayLike, correct: ArrayLike, *,
                       validate: bool = True) -> tuple[Tensor, Tensor]:
    """``(confidence, correct)`` checked: a non-empty float ``(N,)`` in [0, 1] and 0/1 outcomes.

    ``confidence`` (half precision promoted to float32, detached) and ``correct`` as booleans
    on its device: the input of the ``*_from_confidence`` metrics, which measure forecasts
    that are not the top label of a probability vector. ``validate=False`` skips the checks
    of the values (not of the types and shapes).
    """
    c = as_tensor(confidence, "confidence")
    if not c.is_floating_point():
        raise TypeError(f"confidence must be floating point, got dtype {c.dtype}")
    if c.dtype in (torch.float16, torch.bfloat16):
        c = c.float()
    if c.ndim != 1 or c.numel() == 0:
        raise ValueError(f"confidence must be a non-empty 1-D array, got shape {tuple(c.shape)}")
    if validate and (not bool(torch.isfinite(c).all()) or float(c.min()) < 0 or float(c.max()) > 1):
        raise ValueError("confidence must be finite values in [0, 1]")
    ok = as_tensor(correct, "correct")
    if ok.is_floating_point():
        raise TypeError(f"correct must be booleans or 0/1 integers, got dtype {ok.dtype}")
    if ok.shape != c.shape:
        raise ValueError(f"correct has shape {tuple(ok.shape)} but confidence has {tuple(c.shape)}")
    if validate and bool(((ok != 0) & (ok != 1)).any()):
        raise ValueError("correct must hold only 0/1 (or booleans)")
    return c.detach(), ok.to(device=c.device).bool()


def _raise_if_bad(stats: list[float], name: str, tol: float, k: int) -> None:
    low, high, lo, hi, y_lo, y_hi = stats
    if y_lo < 0 or y_hi >= k:
        raise ValueError(f"labels must lie in [0, {k}); got values in [{int(y_lo)}, {int(y_hi)}]")
    problem = probs_error(name, (low, high), lo, hi, tol)
    if problem is not None:
        raise ValueError(problem)


def check_closed(closed: str) -> str:
    if closed not in CLOSED:
        raise ValueError(f'closed must be "right" ((lo, hi] bins) or "left" ([lo, hi) bins), got {closed!r}')
    return closed


def check_n_bins(n_bins: int, name: str = "n_bins", cells: int = 1) -> int:
    """A positive int whose bins (``cells`` per bin, e.g. K classes) fit in memory."""
    n_bins = check_positive_int(n_bins, name)
    if n_bins * cells > MAX_BIN_CELLS:
        per = f" x {cells} classes" if cells > 1 else ""
        raise ValueError(
            f"{name} = {n_bins:,} is too large: {n_bins:,}{per} bins would need "
            f"{8 * n_bins * cells / 2**30:.1f} GiB of float64 sums; use at most "
            f"{MAX_BIN_CELLS // cells:,} bins"
        )
    return n_bins


def width(probs: ArrayLike) -> int:
    """K of an (N, K) input, 2 of a binary (N,) one, 1 when the shape is not (yet) known."""
    shape = getattr(probs, "shape", None)
    if shape is not None and len(shape) == 1:
        return 2
    return int(shape[1]) if shape is not None and len(shape) == 2 and shape[1] > 0 else 1


def two_columns(p: Tensor) -> Tensor:
    """``(N, 2)`` ``[1 - p, p]`` of the positive-class probabilities ``p`` ``(N,)`` (detached;
    integers to the default float, half precision to float32)."""
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    p = p.detach()
    return torch.stack([1 - p, p], dim=1)
