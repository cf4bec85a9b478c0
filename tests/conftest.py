"""Shared test configuration: CPU, few threads, deterministic seeds, headless plots."""
from __future__ import annotations

import os
import pathlib

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = pathlib.Path(__file__).resolve().parents[1]
# ../shared beside the checkout; CALIB_SHARED overrides it (a git worktree elsewhere).
REFERENCE = pathlib.Path(os.environ.get("CALIB_SHARED", ROOT.parent / "shared")) / "reference" / "netcal-records"


@pytest.fixture(autouse=True)
def _seed_everything():
    import numpy as np
    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    yield


@pytest.fixture
def interrupted_after():
    """``interrupted_after(base, n)``: a subclass of trainer class ``base`` whose run stops
    after ``n`` training steps as if it had received SIGTERM (checkpoint, then
    ``TrainingInterrupted``), for resume tests."""
    import signal

    def make(base: type, n: int) -> type:
        class Stopping(base):
            steps = 0

            def train_step(self, x, y):
                out = super().train_step(x, y)
                Stopping.steps += 1
                if Stopping.steps == n:
                    os.kill(os.getpid(), signal.SIGTERM)  # the handler Trainer.fit installed sets a flag
                return out

        return Stopping

    return make


@pytest.fixture
def netcal_records() -> pathlib.Path:
    """Folder of real CIFAR prediction files (tests only); skipped with a reason when absent."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference predictions not found at {REFERENCE} (they live in ../shared/reference)")
    return REFERENCE


os.environ.setdefault("CALIB_PROFILE", "quick")
