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


def describe(chapter: str | None = None) -> str:
    """The lines at the top of a chapter: which profile and device ran it.

    Adds ``[smoke]`` in smoke mode, a warning when a GPU profile (``colab``/``paper``) runs
    without CUDA (on Colab: Runtime -> Change runtime type -> T4 GPU), and, given the
    chapter's name (e.g. ``"02_overconfidence"``), the expected time of its ``colab``
    profile on a free T4 from :func:`calib.runtime.t4_estimate` (marked measured or
    estimated).
    """
    name = current()
    lines = [f"CALIB_PROFILE={name}{' [smoke]' if smoke() else ''} on {device()} (torch {torch.__version__})"]
    if name != "quick" and not torch.cuda.is_available() and not smoke():
        lines += [f"WARNING: the {name} profile is meant for a GPU and this runtime has none;",
                  "  it will be very slow. On Colab: Runtime > Change runtime type > T4 GPU."]
    if chapter is not None:
        from . import runtime

        lines.append(runtime.t4_estimate(chapter).describe())
    return "\n".join(lines)


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


# Smoke mode's caps (see calib.data.splits.smoke_subset and calib.train.smoke_config):
# with 16 training images in batches of 8 an epoch is two optimisation steps (evaluation
# splits stay smaller than training: gamma-Net carves its meta split out of them). Small,
# because the paper profile's CIFAR ResNet-50 costs 2.6 GFLOP per image forward.
SMOKE_CAPS: dict[str, int] = {"epochs": 2, "batch_size": 8, "train": 16, "eval": 8,
                              "toy_points_per_class": 200, "seeds": 2}


def smoke_cap(name: str, value: T) -> T:
    """``min(value, SMOKE_CAPS[name])`` in smoke mode, else ``value`` unchanged.

    For experiment helpers, and for the rare chapter loop the library cannot see, e.g.
    ``for seed in range(profile.smoke_cap("seeds", n_seeds))``.
    """
    if name not in SMOKE_CAPS:
        raise ValueError(f"name must be one of {sorted(SMOKE_CAPS)}, got {name!r}")
    return min(value, SMOKE_CAPS[name]) if smoke() else value  # type: ignore[type-var]


DATA_VAR = "CALIB_DATA"
DEFAULT_DATA_ROOT = "data"


def data_root(root: str | os.PathLike | None = None) -> str:
    """Where dataset files live: ``root`` if given, else ``$CALIB_DATA``, else ``"data"``.

    The conventional default ``"data"`` also yields to ``$CALIB_DATA``, so a chapter or
    config that leaves the root at its default reads the folder the variable names (CI
    points it at synthetic datasets written by ``python -m calib fake-data DIR``).
    """
    env = os.environ.get(DATA_VAR, "").strip()
    if root is None or (env and os.fspath(root) == DEFAULT_DATA_ROOT):
        return env or DEFAULT_DATA_ROOT
    return os.fspath(root)


DEBUG_VAR = "CALIB_DEBUG"
_debug_override: bool | None = None


def set_debug(flag: bool | None) -> None:
    """Force debug checks on (True) or off (False); None returns to ``$CALIB_DEBUG``."""
    global _debug_override
    if flag is not None and not isinstance(flag, bool):
        raise TypeError(f"flag must be a bool or None, got {type(flag).__name__}")
    _debug_override = flag


def debug() -> bool:
    """Whether data-dependent checks also run on CUDA tensors (``CALIB_DEBUG=1``).

    Checks such as "labels lie in [0, K)" or "logits are finite" need the tensor's values
    on the host; on a GPU that forces a host-device synchronisation on every training
    step. They therefore run on CPU tensors always and on CUDA tensors only in debug mode
    (:func:`set_debug` or ``CALIB_DEBUG=1``); loaders validate whole splits once instead.
    """
    if _debug_override is not None:
        return _debug_override
    return os.environ.get(DEBUG_VAR, "").strip().lower() in ("1", "true", "yes")


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
