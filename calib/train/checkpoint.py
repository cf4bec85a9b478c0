"""Checkpoints: seeds and RNG state, atomic save of everything a run needs to continue exactly,
loading with ``weights_only=True``, and refusing another run's checkpoint."""
from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from .config import TrainConfig

CHECKPOINT_FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, corrupt, or from a different run."""


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    """RNG states as tensors and primitives only, so ``weights_only=True`` can load them."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": {"version": py_version, "internal": torch.tensor(py_internal, dtype=torch.int64),
                   "gauss": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; raise :class:`CheckpointError` if unusable."""
    path = Path(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # truncated zip, bad pickle, unsafe global, ...
        raise CheckpointError(
            f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}: {str(exc)[:200]}); "
            "delete it to start the run afresh, or choose another --out (out= in Python)"
        ) from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "config" not in ckpt:
        raise CheckpointError(f"{path} is not a calib checkpoint (format {CHECKPOINT_FORMAT})")
    return ckpt


def _scheduler_state(s: torch.optim.lr_scheduler.LRScheduler) -> dict[str, Any]:
    sd = s.state_dict()
    if isinstance(sd.get("milestones"), Counter):  # Counter is not weights_only-loadable
        sd["milestones"] = dict(sd["milestones"])
    return sd


def _load_scheduler_state(s: torch.optim.lr_scheduler.LRScheduler, sd: dict[str, Any]) -> None:
    sd = dict(sd)
    if isinstance(sd.get("milestones"), dict):
        sd["milestones"] = Counter(sd["milestones"])
    s.load_state_dict(sd)


def trainer_state(trainer: Any, *, step: int = 0, sums: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything a :class:`~calib.train.Trainer` needs to continue exactly: weights, optimiser,
    scheduler, AMP scaler, RNG, loader position, history and a subclass's :meth:`extra_state`.
    Tensors and primitives only, so ``torch.load(weights_only=True)`` reads it back."""
    t = trainer
    return {
        "format": CHECKPOINT_FORMAT,
        "config": t.config.to_json(),
        "epoch": t.epoch,
        "step": step,
        "sums": {k: float(v) for k, v in (sums or {}).items()},
        "model": t.model.state_dict(),
        "optimizer": t.optimizer.state_dict(),
        "scheduler": _scheduler_state(t.scheduler),
        "scaler": t.scaler.state_dict(),
        "rng": _rng_state(),
        "loader": t.train_loader.state_dict(),
        "history": json.dumps(t.history),
        "extra": t.extra_state(),
        "best": dict(t.best) if t.best is not None else {},
    }


def restore(trainer: Any, path: str | os.PathLike) -> tuple[int, dict[str, float]]:
    """Load the checkpoint at ``path`` into ``trainer``, refusing one written by another run.

    Returns where in its epoch the checkpoint was taken: the step and the running sums of
    the epoch's outputs (``(0, {})`` at an epoch's end), for the loop to continue from."""
    t, ckpt = trainer, load_checkpoint(path)
    try:
        saved = TrainConfig.from_json(ckpt["config"]).identity()
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} holds an unreadable config: {exc}") from exc
    mine = t.config.identity()
    if diff := sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k)):
        detail = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {mine.get(k)!r}" for k in diff[:6])
        raise CheckpointError(f"checkpoint {path} belongs to a different run ({detail}); "
                              "use another out= or the same configuration")
    try:
        t.model.load_state_dict(ckpt["model"])
        t.optimizer.load_state_dict(ckpt["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this model/optimiser: {str(exc)[:300]}") from exc
    _load_scheduler_state(t.scheduler, ckpt["scheduler"])
    t.scaler.load_state_dict(ckpt["scaler"])
    try:
        t.train_loader.load_state_dict(ckpt["loader"])
    except (ValueError, KeyError) as exc:  # e.g. resumed under another number of processes
        raise CheckpointError(f"checkpoint {path} does not fit this run's data loader ({exc}); resume with "
                              f"the number of processes it was written with (now {t.world_size})") from exc
    t.load_extra_state(ckpt.get("extra", {}))
    t.best = dict(ckpt["best"]) if ckpt.get("best") else None
    t.epoch = int(ckpt["epoch"])
    t.history = json.loads(ckpt["history"])
    _set_rng_state(ckpt["rng"])
    return int(ckpt["step"]), dict(ckpt["sums"])
