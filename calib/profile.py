"""One switch for scale: the ``CALIB_PROFILE`` environment variable.

* ``quick``: CPU, minutes per chapter, offline data (default without CUDA; CI and
  ``make book``).
* ``colab``: one GPU (a free Colab T4 is the yardstick), real CIFAR, under an hour a
  chapter (default when CUDA is present).
* ``paper``: the papers' exact protocols (350 epochs, 45k/5k split, ...).

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


SMOKE_VAR = "CALIB_SMOKE"


def smoke() -> bool:
    """True when ``$CALIB_SMOKE`` asks for smoke mode: the profile's code path, capped work.

    Smoke mode exists so CI can execute the ``colab`` and ``paper`` branches of every chapter
    on a CPU in seconds (tiny synthetic data in the real formats, a few steps). Numbers it
    produces mean nothing; chapters report their claims instead of asserting them.
    """
    value = os.environ.get(SMOKE_VAR, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"{SMOKE_VAR}={os.environ[SMOKE_VAR]!r}: use 1 (smoke mode) or 0")


def asserts_claims() -> bool:
    """Whether chapters assert their claims: at the ``quick`` profile, outside smoke mode.

    The quick profile is the scale CI runs and the claims were checked at; at ``colab`` and
    ``paper`` scale (or in smoke mode) a claim that fails is a finding, not a broken chapter.
    """
    return current() == "quick" and not smoke()


def claim(ok: bool, text: str) -> bool:
    """Print a chapter's claim with its outcome; assert it where :func:`asserts_claims`."""
    ok = bool(ok)
    print(("holds: " if ok else "DOES NOT HOLD: ") + text)
    if not ok and asserts_claims():
        raise AssertionError(text)
    return ok
