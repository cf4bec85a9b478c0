"""Timing helpers shared by the benchmarks: medians of repeated runs, printed as ratios.

Speed is reported as ratios against a baseline run side by side in the same process,
never as absolute thresholds in tests.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_time(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(name: str, seconds: float, baseline: float | None = None, width: int = 44) -> str:
    """One table line: name, time in ms, and the ratio to ``baseline`` (>1 means slower)."""
    ratio = "" if baseline is None else f"{seconds / baseline:8.2f}x"
    return f"{name:<{width}} {seconds * 1e3:10.2f} ms {ratio}"


def header(title: str) -> None:
    print(f"\n== {title} (torch {torch.__version__}, {torch.get_num_threads()} threads)")
