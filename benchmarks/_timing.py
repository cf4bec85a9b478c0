"""Timing helpers shared by the benchmarks: medians of repeated runs, printed as ratios.

Speed is reported as ratios against a baseline run side by side in the same process,
never as absolute thresholds in tests.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_time(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Median time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs (wall time by default)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = clock()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(clock() - t0)
    return statistics.median(times)


def row(name: str, seconds: float, baseline: float | None = None, width: int = 44) -> str:
    """One table line: name, time in ms, and the ratio to ``baseline`` (>1 means slower)."""
    ratio = "" if baseline is None else f"{seconds / baseline:8.2f}x"
    return f"{name:<{width}} {seconds * 1e3:10.2f} ms {ratio}"


def header(title: str) -> None:
    print(f"\n== {title} (torch {torch.__version__}, {torch.get_num_threads()} threads)")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def interleaved_times(fns: dict[str, Callable[[], object]], *, rounds: int = 5, warmup: int = 1,
                      clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Times of each ``fns[name]()`` over ``rounds`` rounds, the variants taking turns.

    Every round runs each variant once, in an order rotated by one each round, so a load
    that comes and goes (another job on the machine) falls on all of them alike; the
    ``warmup`` rounds are not recorded. ``clock`` is wall time by default;
    ``time.process_time`` (CPU seconds of this process, all its threads) is far less
    disturbed by other processes on a shared CPU. Returns ``{name: [seconds per round]}``.
    """
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            _sync()
            t0 = clock()
            fns[name]()
            _sync()
            if r >= warmup:
                times[name].append(clock() - t0)
    return times


def paired_ratio(times: list[float], baseline: list[float]) -> tuple[float, float, float]:
    """Median, min and max over rounds of ``times[i] / baseline[i]`` (same-round pairs)."""
    ratios = [t / b for t, b in zip(times, baseline)]
    return statistics.median(ratios), min(ratios), max(ratios)
