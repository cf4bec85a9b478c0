"""One switch for scale: the ``CALIB_PROFILE`` environment variable.

``quick``  CPU, minutes per chapter, offline data (default without CUDA; CI and ``make book``).
``colab``  one GPU (a free Colab T4 is the yardstick), real CIFAR, under an hour a chapter
           (default when CUDA is present).
``paper``  the papers' exact protocols (350 epochs, 45k/5k split, ...).

Chapters read the profile once at the top::

    from calib import profile
    P = profile.current()              # "quick" | "colab" | "paper"
    epochs = profile.pick(quick=5, colab=60, paper=350)
"""
from __future__ import annotations

import os
from typing import TypeVar

import torch

PROFILES = ("quick", "colab", "paper")
ENV_VAR = "CALIB_PROFILE"
T = TypeVar("T")


def current() -> str:
    """The active profile: ``$CALIB_PROFILE`` if set, else ``colab`` with CUDA, else ``quick``."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if not value:
        return "colab" if torch.cuda.is_available() else "quick"
    if value not in PROFILES:
        raise ValueError(f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not a profile; choose one of {', '.join(PROFILES)}")
    return value


def pick(*, quick: T, colab: T, paper: T, profile: str | None = None) -> T:
    """Choose a value for the active (or given) profile."""
    name = current() if profile is None else profile
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {name!r}")
    return {"quick": quick, "colab": colab, "paper": paper}[name]


def device() -> torch.device:
    """The device to compute on, picked at run time: CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe() -> str:
    """One line for the top of a chapter: which profile and device ran it."""
    return f"CALIB_PROFILE={current()} on {device()} (torch {torch.__version__})"
