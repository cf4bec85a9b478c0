"""The expected Colab time of a chapter: how long its ``colab`` profile takes on a free Colab T4,
measured or estimated.

No GPU is needed to estimate it. A chapter's time splits into training (the trainer's
forward and backward passes, which a GPU accelerates) and everything else (metrics,
sympy, plots, small numerical experiments, which run on the host CPU and are sized by
``calib.profile.pick`` alone). Smoke mode (``CALIB_SMOKE=1``) runs the ``colab`` branch with
the real ``calib.profile.pick`` sizes and only the trainer's work capped, so:

* ``other_seconds``: the wall time of the chapter's smoke run on a CPU (an upper bound
  on the non-training work: it includes the capped training and any CPU contention);
* ``train_flops``: the floating-point operations the *uncapped* training would do,
  counted by :func:`record_run` from each model's forward pass
  (``torch.utils.flop_counter``) times the real dataset sizes and epochs: a training
  example costs three forward passes (forward, and backward at about twice that), an
  evaluated example one, and a gamma-Net meta step about three training steps (its
  look-ahead, hypergradient and real update; Wang & Golebiowski (2024) §3.3);
* the estimate is ``other_seconds + train_flops / T4_SUSTAINED_FLOPS``.

``tools/estimate_runtimes.py`` runs every chapter this way and writes
:data:`RUNTIMES_FILE`; on a GPU it can record the measured time instead. A chapter shows
the result with ``print(profile.describe("02_overconfidence"))``
(:func:`calib.profile.describe`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["T4_SUSTAINED_FLOPS", "RUNTIMES_FILE", "LEDGER_VAR", "Estimate", "t4_estimate",
           "forward_flops", "full_sizes", "ledger_flops", "record_run"]

# An assumption, stated wherever an estimate is shown; a measured time replaces it.
T4_SUSTAINED_FLOPS = 1.5e12
RUNTIMES_FILE = Path(__file__).with_name("chapter_runtimes.json")
LEDGER_VAR = "CALIB_FLOP_LEDGER"  # a file each trainer appends its uncapped FLOP count to

# (training, test) images of the real datasets; the validation split is carved out of training.
_FULL = {"fashion_mnist": (60_000, 10_000), "cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000),
         "svhn": (73_257, 26_032), "tiny_imagenet": (100_000, 10_000)}
_DEFAULT_VAL = {"fashion_mnist": 5000, "cifar10": 5000, "cifar100": 5000, "svhn": 5000,
                "tiny_imagenet": 10_000}


@dataclass(frozen=True)
class Estimate:
    """A chapter's expected ``colab`` time on a free T4 (``seconds`` None when unknown)."""

    chapter: str
    seconds: float | None
    measured: bool
    train_flops: float = 0.0
    other_seconds: float = 0.0

    def describe(self) -> str:
        """Lines (at most 88 characters) for the top of the chapter."""
        head = "Expected time on a free Colab T4 (colab profile):"
        if self.seconds is None:
            return f"{head} not recorded yet\n  (python tools/estimate_runtimes.py records it)"
        if self.measured:
            return f"{head} {_minutes(self.seconds)}, measured on a T4"
        if self.train_flops == 0:
            return (f"{head} about {_minutes(self.seconds)}, estimated\n"
                    f"  (no training runs; {self.other_seconds:.0f} s of work timed on a CPU)")
        return (f"{head} about {_minutes(self.seconds)}, estimated\n"
                f"  ({_flops(self.train_flops)} of training at an assumed "
                f"{T4_SUSTAINED_FLOPS / 1e12:g} TFLOP/s + {self.other_seconds:.0f} s of other work)")


def _flops(flops: float) -> str:
    value, unit = (flops / 1e15, "PFLOP") if flops >= 1e15 else (flops / 1e12, "TFLOP")
    return f"{value:.2g} {unit}" if value < 100 else f"{value:.0f} {unit}"  # not 5.7e+02


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def t4_estimate(chapter: str, table: dict[str, Any] | None = None) -> Estimate:
    """The recorded time of ``chapter`` (e.g. ``"02_overconfidence"``) from :data:`RUNTIMES_FILE`.

    An entry with ``t4_seconds`` is a measurement; otherwise ``other_seconds`` and
    ``train_flops`` give ``other_seconds + train_flops / T4_SUSTAINED_FLOPS``.
    """
    if not isinstance(chapter, str) or not chapter:
        raise TypeError(f"chapter must be a chapter name such as '02_overconfidence', got {chapter!r}")
    if table is None:
        table = json.loads(RUNTIMES_FILE.read_text()) if RUNTIMES_FILE.is_file() else {}
    entry = table.get("chapters", {}).get(chapter)
    if entry is None:
        return Estimate(chapter, None, False)
    if entry.get("t4_seconds") is not None:
        return Estimate(chapter, float(entry["t4_seconds"]), True)
    flops, other = float(entry["train_flops"]), float(entry["other_seconds"])
    return Estimate(chapter, other + flops / T4_SUSTAINED_FLOPS, False, flops, other)


@torch.no_grad()
def forward_flops(model: torch.nn.Module, example: torch.Tensor) -> float:
    """FLOPs of one forward pass of ``model`` on one example shaped like ``example[0]``."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    device = next((p.device for p in model.parameters()), example.device)
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            model(example[:1].float().to(device))
    finally:
        model.train(was_training)
    return float(counter.get_total_flops())


def full_sizes(data: str, val_size: int | None, actual: tuple[int, int, int], *,
               train_size: int | None = None, test_size: int | None = None) -> tuple[int, int, int]:
    """(train, val, test) sizes of a run on the real dataset ``data``: the whole dataset, or
    the config's ``train_size``/``test_size`` subsets. A smoke run reads small synthetic
    files and caps them, so a chapter that takes its own subset (``data.load(...,
    train_size=n)``) is counted at the whole dataset: an upper bound. ``actual`` (the
    sizes before the smoke caps) for the toy data."""
    if data not in _FULL:
        return actual
    n_train, n_test = _FULL[data]
    val = _DEFAULT_VAL[data] if val_size is None else val_size
    train = n_train - val if train_size is None else min(train_size, n_train - val)
    return train, val, n_test if test_size is None else min(test_size, n_test)


def ledger_flops(path: str | os.PathLike) -> float:
    """The training FLOPs a chapter's FLOP ledger (``$CALIB_FLOP_LEDGER``) adds up to.

    Smoke mode trains only the first seeds (:func:`calib.profile.smoke_cap`), so the recorded runs are
    scaled by the largest ratio of seeds asked for to seeds kept: exact where every run is
    inside the seed loop, an upper bound where some are not.
    """
    lines = [json.loads(s) for s in Path(path).read_text().splitlines() if s.strip()]
    scale = max((r["seeds"] / r["kept"] for r in lines if "seeds" in r), default=1.0)
    return scale * sum(r["flops"] for r in lines if "flops" in r)


def record_run(config: Any, model: torch.nn.Module, data: Any) -> float | None:
    """Append the FLOPs of the uncapped run ``config`` describes to ``$CALIB_FLOP_LEDGER``.

    ``config`` is the :class:`calib.train.TrainConfig` as requested (before smoke caps),
    ``data`` the splits before the smoke caps (their sizes are the run's, and one example
    sets the shape). Returns the FLOPs, or None (and records nothing) when the variable is
    unset. Runs that smoke mode skips (seeds past its cap) are scaled in by
    :func:`ledger_flops`.
    """
    path = os.environ.get(LEDGER_VAR, "").strip()
    if not path:
        return None
    x = data.train_x
    per_example = forward_flops(model, x.to(next(model.parameters()).device))
    n_train, n_val, n_test = full_sizes(config.data, config.val_size,
                                        (x.shape[0], data.val_x.shape[0], data.test_x.shape[0]),
                                        train_size=config.train_size, test_size=config.test_size)
    sizes = {"train": n_train, "val": n_val, "test": n_test}
    train_passes = 3.0 * (3.0 if config.meta == "gamma_net" else 1.0)
    per_epoch = train_passes * n_train + sum(sizes[s] for s in ("val", *config.track))
    flops = per_example * (config.epochs * per_epoch + n_val + n_test)
    with open(path, "a") as fh:
        fh.write(json.dumps({"model": config.model, "data": config.data, "epochs": config.epochs,
                             "flops": flops}) + "\n")
    return flops
