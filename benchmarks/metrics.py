"""Speed of calib.metrics on N = 10^6 predictions, against torchmetrics and a loop over bins.

Run: ``python benchmarks/metrics.py`` (``make bench``). For K = 10 and K = 100 it times

* the one-pass floor: ``probs.amax(1)`` on the same array (no metric can avoid this pass),
  and the memory limit, one flat reduction over the same bytes (``probs.view(-1).amin()``:
  for narrow rows the row maximum is bound by compute, not memory);
* ``calib.metrics.ece`` / ``adaece`` / ``classwise_ece`` (input validation included),
  and ECE once more with the compiled kernel off (``calib._native``: PyTorch ops only,
  what a machine without a C compiler runs);
* torchmetrics' ``MulticlassCalibrationError`` (l1 norm, 15 bins; ``[lo, hi)`` bins, so
  calib is timed with ``closed="left"`` there), validation included as it ships;
* a loop over bins written here in the style of the source papers' code (one boolean
  mask per bin, ``(lo, hi]``), the baseline the papers' numbers were produced with.

Every time is the median of repeated runs in one process, taken round-robin (one call of
each implementation per round) so that a change in machine load hits all of them alike;
each is printed with its ratio to the floor, and speed-ups are ratios of these medians.
The adaptive loop baseline drops the smallest confidence (as the papers' code does), so
its value may differ from calib's in the last digits. The values of the different
implementations are compared as well, so a fast wrong answer shows up here too.
Targets (issue 14), all as ratios in this one run: ECE <= 2.5x the floor at K = 10 and
K = 100 and >= 3x faster than torchmetrics; Classwise-ECE <= 10x the floor at K = 100;
AdaECE <= 5x. Both floors' bandwidths (bytes read / time) are printed as the
physical reference. Last, the first ``TemperatureScaling.fit`` in a fresh process is
timed against the second one on the same data (target <= 2x: no optimiser stack to
import).
"""
from __future__ import annotations

import pathlib
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks._timing import header, row  # noqa: E402
from calib import _native, metrics  # noqa: E402

N = 10**6
N_BINS = 15
FLOOR = "floor: probs.amax(1)"
TM = "torchmetrics MulticlassCalibrationError"
LOOP = "loop-over-bins ece (papers' style)"
NO_KERNEL = "calib ece (lo,hi], PyTorch ops only"
FLAT = "memory: probs.view(-1).amin()"


def _without_kernel(fn: Callable, *args: object) -> float:
    with _native.off():
        return fn(*args)


# ----------------------------------------------------------------- loop-over-bins baseline


def loop_ece(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> float:
    """ECE the way the papers' code computes it: one mask per ``(lo, hi]`` bin."""
    conf, pred = probs.max(1)
    hit = pred.eq(labels).float()
    return _loop_bins(conf, hit, torch.linspace(0, 1, n_bins + 1))


def _loop_bins(conf: torch.Tensor, hit: torch.Tensor, edges: torch.Tensor) -> float:
    total = torch.zeros(())
    for lo, hi in zip(edges[:-1], edges[1:]):
        mask = (conf > lo) & (conf <= hi)
        share = mask.float().mean()
        if share > 0:
            total += (conf[mask].mean() - hit[mask].mean()).abs() * share
    return float(total)


def loop_adaece(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> float:
    """AdaECE with interpolated equal-mass edges and a mask per bin (papers' style)."""
    conf, pred = probs.max(1)
    hit = pred.eq(labels).float()
    s = conf.sort().values
    pos = torch.linspace(0, len(s), n_bins + 1).clamp(max=len(s) - 1)
    i0 = pos.floor().long()
    i1 = (i0 + 1).clamp(max=len(s) - 1)
    edges = s[i0] + (pos - i0) * (s[i1] - s[i0])
    return _loop_bins(conf, hit, edges)


def loop_classwise(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> float:
    """Classwise ECE: a loop over classes and, inside, over bins (papers' style)."""
    edges = torch.linspace(0, 1, n_bins + 1)
    per_class = [
        _loop_bins(probs[:, k].contiguous(), labels.eq(k).float(), edges) for k in range(probs.shape[1])
    ]
    return sum(per_class) / len(per_class)


# ----------------------------------------------------------------- the benchmark


def _data(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(k)
    probs = torch.softmax(3 * torch.randn(N, k, generator=gen), dim=1)
    labels = torch.multinomial(probs, 1, generator=gen).squeeze(1)  # a calibrated-ish model
    return probs, labels


def _torchmetrics(k: int):
    try:
        from torchmetrics.classification import MulticlassCalibrationError
    except ImportError:  # pragma: no cover - torchmetrics is a test/bench dependency
        return None
    metric = MulticlassCalibrationError(num_classes=k, n_bins=N_BINS, norm="l1")

    def run(probs: torch.Tensor, labels: torch.Tensor) -> float:
        metric.reset()
        metric.update(probs, labels)
        return float(metric.compute())

    return run


def _interleaved(candidates: dict[str, tuple[Callable[[], object], int]]) -> tuple[dict, dict]:
    """Median time of each candidate, timed round-robin so that load changes hit all alike.

    ``candidates`` maps a name to ``(fn, rounds)``; each takes one warm-up call (which also
    gives its value) unless it runs a single round.
    """
    values: dict[str, float] = {}
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for name, (fn, rounds) in candidates.items():
        if rounds > 1:
            out = fn()
            values[name] = out if isinstance(out, float) else float("nan")
    for r in range(max(rounds for _, rounds in candidates.values())):
        for name, (fn, rounds) in candidates.items():
            if r < rounds:
                t0 = time.perf_counter()
                out = fn()
                samples[name].append(time.perf_counter() - t0)
                values.setdefault(name, out if isinstance(out, float) else float("nan"))
    return {name: statistics.median(s) for name, s in samples.items()}, values


def bench(k: int, rounds: int = 7) -> dict[str, float]:
    probs, labels = _data(k)
    header(f"N = {N:,}, K = {k}, {N_BINS} bins")
    print(_native.status())
    candidates: dict[str, tuple[Callable[[], object], int]] = {
        FLOOR: (lambda: probs.amax(1), rounds),
        FLAT: (lambda: probs.view(-1).amin(), rounds),
        "calib ece (lo,hi]": (lambda: metrics.ece(probs, labels, N_BINS), rounds),
        "calib ece [lo,hi)": (lambda: metrics.ece(probs, labels, N_BINS, closed="left"), rounds),
        NO_KERNEL: (lambda: _without_kernel(metrics.ece, probs, labels, N_BINS), rounds),
    }
    tm = _torchmetrics(k)
    if tm is not None:
        candidates[TM] = (lambda: tm(probs, labels), rounds)
    candidates.update({
        LOOP: (lambda: loop_ece(probs, labels), rounds),
        "calib adaece": (lambda: metrics.adaece(probs, labels, N_BINS), rounds),
        "loop-over-bins adaece": (lambda: loop_adaece(probs, labels), 3),
        "calib classwise_ece": (lambda: metrics.classwise_ece(probs, labels, N_BINS), 3),
        "loop-over-bins classwise_ece": (lambda: loop_classwise(probs, labels), 1),
    })
    times, values = _interleaved(candidates)
    floor = times[FLOOR]

    print(f"{'':<44} {'time':>13} {'x floor':>9}   value")
    for name, sec in times.items():
        print(f"{row(name, sec, floor)}   {values[name]:.6f}")

    def speedup(slow: str, fast: str) -> str:
        return f"{times[slow] / times[fast]:6.2f}x faster"

    def x_floor(name: str) -> str:
        return f"{times[name] / floor:6.2f}x"

    mb = probs.numel() * probs.element_size() / 1e6
    print(f"floor: one read of {mb:.0f} MB by the row maximum in {floor * 1e3:.2f} ms = {mb / floor / 1e3:.1f} GB/s; "
          f"as one flat reduction (the memory limit) in {times[FLAT] * 1e3:.2f} ms = {mb / times[FLAT] / 1e3:.1f} GB/s")
    print("ratios (timed side by side, round-robin, same process):")
    if tm is not None:
        print(f"  ECE vs torchmetrics:        {speedup(TM, 'calib ece [lo,hi)')}  (target >= 3)")
    print(f"  ECE vs loop over bins:      {speedup(LOOP, 'calib ece (lo,hi]')}")
    print(f"  ECE / floor:                {x_floor('calib ece (lo,hi]')}          (target <= 2.5)")
    print(f"  ECE [lo,hi) / floor:        {x_floor('calib ece [lo,hi)')}          (target <= 2.5)")
    print(f"  ECE, PyTorch ops / floor:   {x_floor(NO_KERNEL)}          (no compiled kernel)")
    print(f"  ECE / memory limit:         {times['calib ece (lo,hi]'] / times[FLAT]:6.2f}x")
    print(f"  AdaECE / floor:             {x_floor('calib adaece')}          (target <= 5)")
    print(f"  Classwise-ECE / floor:      {x_floor('calib classwise_ece')}          (target <= 10 at K = 100)")
    print(f"  AdaECE vs loop over bins:   {speedup('loop-over-bins adaece', 'calib adaece')}")
    print(f"  Classwise vs loop:          {speedup('loop-over-bins classwise_ece', 'calib classwise_ece')}")
    diffs = {
        "ece vs loop": abs(values["calib ece (lo,hi]"] - values[LOOP]),
        "ece kernel vs PyTorch ops": abs(values["calib ece (lo,hi]"] - values[NO_KERNEL]),
        "adaece vs loop": abs(values["calib adaece"] - values["loop-over-bins adaece"]),
        "classwise vs loop": abs(values["calib classwise_ece"] - values["loop-over-bins classwise_ece"]),
    }
    if tm is not None:
        diffs["ece [lo,hi) vs torchmetrics"] = abs(values["calib ece [lo,hi)"] - values[TM])
    print("  |difference| of values: " + ", ".join(f"{n} {v:.1e}" for n, v in diffs.items()))
    return times


_FIRST_FIT = """
import time, torch
from calib.posthoc import TemperatureScaling
g = torch.randn(5000, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
y = torch.multinomial(torch.softmax(g / 2, 1), 1, generator=torch.Generator().manual_seed(1)).squeeze(1)
t0 = time.perf_counter(); TemperatureScaling().fit(g, y); t1 = time.perf_counter()
TemperatureScaling().fit(g, y); t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def first_fit(runs: int = 5) -> None:
    """First vs second ``TemperatureScaling.fit`` in fresh processes (median of ``runs``)."""
    header("TemperatureScaling.fit (NLL), N = 5,000, K = 10, first call in a fresh process")
    root = str(pathlib.Path(__file__).resolve().parents[1])
    pairs = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _FIRST_FIT], capture_output=True, text=True, check=True,
                             cwd=root, env={**__import__("os").environ, "PYTHONPATH": root})
        pairs.append([float(v) for v in out.stdout.split()])
    first = statistics.median(p[0] for p in pairs)
    second = statistics.median(p[1] for p in pairs)
    print(f"first fit {first * 1e3:.2f} ms, second {second * 1e3:.2f} ms: first / second = "
          f"{first / second:.2f}x (target <= 2)")


def main() -> None:
    for k in (10, 100):
        bench(k)
    first_fit()


if __name__ == "__main__":
    main()
