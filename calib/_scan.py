"""One pass over an ``(N, K)`` probability matrix: validation and the top label.

Every metric in :mod:`calib.metrics` needs the same facts about its input: that it is a
probability matrix (finite, entries in [0, 1], rows summing to 1), and for each row the
top-label confidence ``c_i = max_k p_ik`` and correctness ``pi_i = 1[argmax_k p_ik = y_i]``.
Computed one after another, each is a pass over memory. Here they come from one pass:
the rows are cut into chunks of about 4 MiB, each chunk is read from memory once by the
row maximum, and the row sum, minimum and ``p[i, y_i]`` then read it from the cache.
A metric that needs more of each row (the per-class bins of classwise ECE) passes a
function that runs on each chunk while it is still in cache.

On CPU, where a compiler is at hand, the compiled kernel of :mod:`calib._native` reads
each row once and computes all of it (maximum, first argmax, sum, minimum) from the same
registers, in PyTorch's OpenMP threads. The PyTorch ops below define its results and are
used without it (the tests compare the two paths on every kind of input): the chunks
are shared between worker threads, one per intra-op thread of torch, each running its
ops single-threaded (PyTorch releases the GIL inside an op, and one thread per slab of
chunks scales where many short parallel ops would each wait for every thread of the
pool). With ``per_chunk`` the chunks go to the worker threads on either path. On CUDA
every step is one whole-array kernel (no per-chunk launches, no host syncs in the loop).
"""
from __future__ import annotations

import atexit
import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import torch

from . import _native
from ._checks import ArrayLike, as_tensor, check_labels, check_nk_shape, probs_error, row_sum_tolerance

Tensor = torch.Tensor


class Rows(NamedTuple):
    """A chunk of rows and what the pass found in it (views into the pass's outputs)."""

    p: Tensor  # (n, K) probabilities
    y: Tensor  # (n,) labels
    conf: Tensor  # (n,) max_k p_ik
    correct: Tensor  # (n,) bool, argmax_k p_ik == y_i
    p_true: Tensor  # (n,) p[i, y_i]


#: ``fn(rows)`` run on each chunk of rows while it is in cache.
PerChunk = Callable[[Rows], Any]

# Entries per chunk (4 MiB of float32): several chunks in flight still fit the last-level
# cache, and chunks are large enough that the cost of launching each op stays small.
CHUNK = 1 << 20
# Rows at or below this width get their sums from a matrix-vector product (about twice
# as fast as sum(dim=1) for narrow rows on CPU).
_MV_MAX_K = 32


@dataclass(frozen=True)
class Checked:
    """Validated predictions and their top label, from one pass (:func:`scan`)."""

    p: Tensor  # (N, K) probabilities (half precision promoted to float32), contiguous, detached
    y: Tensor  # (N,) int64 labels on p's device
    conf: Tensor  # (N,) top-label confidence max_k p_ik
    correct: Tensor  # (N,) bool, argmax_k p_ik == y_i (first of tied maxima, as argmax)


@contextlib.contextmanager
def serial(device: torch.device) -> Iterator[None]:
    """One intra-op thread on CPU for loops of many chunk-sized ops (restored afterwards).

    Each parallel region of a chunk-sized op waits for every pool thread; on a shared
    machine one descheduled thread costs a whole time slice per region.
    """
    n = torch.get_num_threads()
    if device.type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def tie_free(k: int, atol: float) -> float:
    """Above this confidence no row can have two maxima (half the largest valid row sum)."""
    return 0.5 * (1 + atol + k * 1e-6)


def scan(
    probs: ArrayLike, labels: ArrayLike, name: str = "probs", per_chunk: PerChunk | None = None
) -> tuple[Checked, list]:
    """Validate ``probs``/``labels`` and find the top label in one pass over ``(N, K)``.

    The contract of :func:`calib._checks.check_probs_fast`: finite, entries in [0, 1] up
    to 1e-6, rows summing to 1 within :func:`calib._checks.row_sum_tolerance`. NaN
    propagates through the row maxima and sums and inf through the range, so no separate
    finiteness pass is needed. Returns the checked input and ``per_chunk``'s results, one
    per chunk in row order (empty without ``per_chunk``). On CPU they are computed before
    the verdict (skipping chunks with NaN), so an invalid input raises ``ValueError`` and
    its results are dropped; on other devices ``per_chunk`` runs once, on valid input.
    """
    p, y, tol = _prepare(probs, labels, name)
    free = tie_free(p.shape[1], tol)
    if p.device.type == "cpu":
        conf, correct, sums, lo, hi, results = _scan_cpu(p, y, free, per_chunk)
    else:
        conf, correct, p_true, sums, lo, hi = _scan_device(p, y, free)
    problem = probs_error(name, sums, lo, hi, tol)
    if problem is not None:
        raise ValueError(problem)
    if p.device.type != "cpu":
        results = [] if per_chunk is None else [per_chunk(Rows(p, y, conf, correct, p_true))]
    return Checked(p, y, conf, correct), results


def _prepare(probs: ArrayLike, labels: ArrayLike, name: str) -> tuple[Tensor, Tensor, float]:
    """``(p, y, row-sum tolerance)``: p a contiguous float (N, K) tensor, y int64 on its device."""
    p = as_tensor(probs, name)
    tol = row_sum_tolerance(p.dtype)
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    elif p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    check_nk_shape(p, name)
    p = p.detach().contiguous()  # Fortran-order arrays and transposes: one copy, then row passes
    y = check_labels(labels, p.shape[0], p.shape[1], "labels").to(p.device)
    return p, y, tol


# --------------------------------------------------------------------------- CPU: chunks in threads


@dataclass
class _Out:
    """What the workers write: per row (disjoint slices each) and per chunk."""

    conf: Tensor  # (N,) row maxima
    correct: Tensor  # (N,) bool
    stats: Tensor  # (chunks, 4) float64: smallest entry, smallest and largest row sum, largest entry


def _scan_cpu(p: Tensor, y: Tensor, free: float, per_chunk: PerChunk | None):
    fused = _native.scan_fn(p.dtype)
    if fused is not None and per_chunk is None:
        return _scan_whole(p, y, free, fused)
    n, k = p.shape
    step = max(1, CHUNK // k)
    starts = list(range(0, n, step))
    out = _Out(torch.empty(n, dtype=p.dtype), torch.empty(n, dtype=torch.bool),
               torch.empty(len(starts), 4, dtype=torch.float64))
    ones = torch.ones(k, dtype=p.dtype) if k <= _MV_MAX_K else None
    workers = min(torch.get_num_threads(), len(starts) // 2)

    def run(first: int, last: int) -> list:
        results = []
        for i in range(first, last):
            start, stop = starts[i], min(starts[i] + step, n)
            if fused is not None:
                rows = _fused_chunk(p, y, start, stop, out, out.stats[i], free, fused)
            else:
                rows = _torch_chunk(p, y, start, stop, out, out.stats[i], free, ones)
            # NaN input is refused after the pass: per_chunk skips it
            results.append(None if per_chunk is None or math.isnan(out.stats[i, 0]) else per_chunk(rows))
        return results

    with serial(p.device):
        if workers <= 1:
            results = run(0, len(starts))
        else:  # contiguous slabs of chunks, one per worker
            cuts = [len(starts) * w // workers for w in range(workers + 1)]
            futures = [_pool(workers).submit(_single_threaded, run, a, b) for a, b in zip(cuts, cuts[1:])]
            results = [r for f in futures for r in f.result()]
    return (out.conf, out.correct, *_verdict_stats(out.stats), results)


def _verdict_stats(stats: Tensor) -> tuple[tuple[float, float], float, float]:
    """``((min row sum, max row sum), min entry, max entry)`` from per-chunk :class:`_Out` stats."""
    lo, low = stats[:, :2].amin(0).tolist()  # NaN propagates
    high, top = stats[:, 2:].amax(0).tolist()
    return (low, high), lo, top


def _scan_whole(p: Tensor, y: Tensor, free: float, fn: Any):
    """The pass as one call of the compiled kernel (:mod:`calib._native`), which reads each
    row once, in PyTorch's OpenMP threads."""
    n, k = p.shape
    conf, correct = torch.empty(n, dtype=p.dtype), torch.empty(n, dtype=torch.bool)
    stats = torch.empty(1, 4, dtype=torch.float64)
    fn(p.data_ptr(), y.data_ptr(), n, k, free, conf.data_ptr(), correct.data_ptr(), None, stats.data_ptr(),
       _native.threads(p.numel()))
    return (conf, correct, *_verdict_stats(stats), [])


def _fused_chunk(p: Tensor, y: Tensor, start: int, stop: int, out: _Out, stats: Tensor, free: float, fn: Any) -> Rows:
    """Rows ``start:stop`` by the compiled kernel on this worker's thread (ctypes releases
    the GIL for the call), with ``p[i, y_i]`` in this thread's scratch buffer."""
    chunk, yc, conf, correct = p[start:stop], y[start:stop], out.conf[start:stop], out.correct[start:stop]
    p_true = _scratch("p_true", stop - start, p.dtype)
    fn(chunk.data_ptr(), yc.data_ptr(), stop - start, p.shape[1], free, conf.data_ptr(), correct.data_ptr(),
       p_true.data_ptr(), stats.data_ptr(), 1)
    return Rows(chunk, yc, conf, correct, p_true)


def _torch_chunk(
    p: Tensor, y: Tensor, start: int, stop: int, out: _Out, stats: Tensor, free: float, ones: Tensor | None
) -> Rows:
    """Rows ``start:stop`` by PyTorch ops (the reference for the kernel): read once from
    memory by the row max, then from the cache.

    Row sums and ``p[i, y_i]`` go to this thread's scratch buffers (reused across calls:
    fresh buffers cost a page fault per 4 KiB on every call); only their extremes and
    the row maxima and correctness are kept.
    """
    chunk, yc = p[start:stop], y[start:stop]
    m = stop - start
    conf = torch.amax(chunk, 1, out=out.conf[start:stop])
    sums = _scratch("sums", m, p.dtype)
    if ones is not None:
        torch.mv(chunk, ones, out=sums)
    else:
        torch.sum(chunk, 1, out=sums)
    low, high = torch.aminmax(sums)
    stats.copy_(torch.stack([chunk.amin(), low, high, conf.amax()]))
    p_true = torch.gather(chunk, 1, yc[:, None], out=_scratch("p_true", m, p.dtype)[:, None]).view(-1)
    correct = torch.eq(p_true, conf, out=out.correct[start:stop])
    _resolve_ties(chunk, yc, conf, correct, free, _scratch("rows", chunk.numel(), p.dtype))
    return Rows(chunk, yc, conf, correct, p_true)


_LOCAL = threading.local()


def _scratch(name: str, size: int, dtype: torch.dtype) -> Tensor:
    """This thread's reusable buffer ``name`` with at least ``size`` entries, first ``size`` returned."""
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.numel() < size or buf.dtype != dtype:
        buf = bufs[name] = torch.empty(max(size, CHUNK // 2), dtype=dtype)
    return buf[:size]


def _single_threaded(fn: Callable, *args: Any) -> Any:
    torch.set_num_threads(1)  # this worker's ops run inline, in this thread
    return fn(*args)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """A process-wide pool of worker threads, grown when more threads are asked for."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL, _POOL_SIZE = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="calib-scan"), workers
        return _POOL


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start a new pool when needed."""
    global _POOL, _POOL_SIZE
    _POOL, _POOL_SIZE = None, 0


_POOL_SIZE = 0
os.register_at_fork(after_in_child=_forget_pool)
atexit.register(lambda: _POOL is not None and _POOL.shutdown(wait=False))


def select_above(x: Tensor, threshold: float, inclusive: bool) -> tuple[Tensor, Tensor]:
    """Values and flat positions (int64) of the entries of ``x`` above ``threshold`` (or
    at it, when ``inclusive``), in order. On CPU the values and positions are views into
    this thread's scratch buffers, valid until its next call."""
    if x.device.type != "cpu":
        where = (torch.ge(x, threshold) if inclusive else torch.gt(x, threshold)).view(-1).nonzero().squeeze(1)
        return x.reshape(-1).index_select(0, where), where
    fn = _native.above_fn(x.dtype) if x.is_contiguous() else None
    if fn is None:  # numpy's flatnonzero is several times faster than torch.nonzero
        a = x.numpy()
        where = torch.from_numpy(np.flatnonzero(a >= threshold if inclusive else a > threshold))
        return x.reshape(-1).index_select(0, where), where
    n = x.numel()
    where, values = _scratch("above_at", n, torch.int64), _scratch("above", n, x.dtype)
    count = fn(x.data_ptr(), n, threshold, int(inclusive), where.data_ptr(), values.data_ptr())
    return values[:count], where[:count]


# --------------------------------------------------------------------------- CUDA and other devices


def _scan_device(p: Tensor, y: Tensor, free: float):
    """Whole-array reductions: one kernel each, two host syncs (ties, verdict)."""
    conf = p.amax(dim=1)
    rows = p.sum(dim=1)
    p_true = p.gather(1, y[:, None]).squeeze(1)
    correct = p_true.eq(conf)
    _resolve_ties(p, y, conf, correct, free)
    low, high, lo, hi = torch.stack([*rows.aminmax(), p.amin(), conf.amax()]).tolist()
    return conf, correct, p_true, (low, high), lo, hi


# --------------------------------------------------------------------------- ties


def top_label(p: Tensor, y: Tensor, atol: float) -> tuple[Tensor, Tensor]:
    """Top-label confidence and correctness of already validated ``p`` (no checks)."""
    conf = p.amax(dim=1)
    correct = p.gather(1, y[:, None]).squeeze(1).eq(conf)
    step = max(1, CHUNK // p.shape[1])  # bounds the rows copied to look for ties
    for start in range(0, p.shape[0], step):
        rows = slice(start, start + step)
        _resolve_ties(p[rows], y[rows], conf[rows], correct[rows], tie_free(p.shape[1], atol))
    return conf, correct


def _resolve_ties(
    p: Tensor, y: Tensor, conf: Tensor, correct: Tensor, free: float, scratch: Tensor | None = None
) -> None:
    """Set ``correct[i]`` to ``argmax_k p_ik == y_i`` where ``p[i, y_i] == c_i`` may be a tie.

    ``argmax`` returns the first of tied maxima. A tie needs two entries equal to
    ``c_i``, impossible above ``free`` (half the largest valid row sum). For the rows
    left, the largest entry other than ``p[i, y_i]`` equals ``c_i`` exactly when the
    maximum is tied, and only tied rows pay for an ``argmax``. ``scratch``: an optional
    buffer (p's dtype and device) for the copied rows.
    """
    cand = _where(correct, conf, free)
    if not cand.numel():
        return
    m, k = cand.numel(), p.shape[1]
    use = scratch is not None and scratch.numel() >= m * k
    sub = torch.index_select(p, 0, cand, out=scratch[:m * k].view(m, k)) if use else p.index_select(0, cand)
    y_cand = y.index_select(0, cand)
    label_at = torch.arange(0, m * k, k, device=p.device).add_(y_cand)
    others = sub.view(-1).index_fill_(0, label_at, -math.inf).view(m, k).amax(dim=1)
    tied = _where(others.eq(conf.index_select(0, cand)))
    if tied.numel():  # rare outside quantised data
        rows = cand.index_select(0, tied)
        first = p.index_select(0, rows).argmax(dim=1)
        correct.index_copy_(0, rows, first.eq(y_cand.index_select(0, tied)))


def _where(mask: Tensor, conf: Tensor | None = None, free: float = 0.0) -> Tensor:
    """Positions where ``mask`` (and ``conf <= free``, if given) holds, as int64.

    numpy's flatnonzero and comparisons are several times faster than torch's on CPU.
    """
    if mask.device.type == "cpu":
        m = mask.numpy() if conf is None else mask.numpy() & (conf.numpy() <= free)
        return torch.from_numpy(np.flatnonzero(m))
    m = mask if conf is None else mask & conf.le(free)
    return m.nonzero().squeeze(1)
