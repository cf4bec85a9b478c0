"""Which machine and commit produced a result: what the ledger's provenance and the claims
audit record beside every number.

One thread is deterministic on one kind of CPU only (the kernels PyTorch picks depend on
the instruction set), so a record names the CPU model and that instruction set as well as
the commit; a GPU run names the GPU.
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

__all__ = ["git_commit", "cpu_model", "cpu_capability", "machine"]


def git_commit() -> str:
    """HEAD (flagged when calib/ has uncommitted changes); ``$CALIB_COMMIT`` where git has no
    repository to read, e.g. a copy of the working tree sent to a GPU machine without ``.git``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "calib"], capture_output=True, text=True).stdout
        return sha + ("+uncommitted changes in calib/" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("CALIB_COMMIT", "unknown")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(device: str | None = None) -> str:
    """This machine as a provenance names it: architecture, CPU model, the GPU if ``device``
    is a CUDA device, core count."""
    gpu = ""
    if device and device.startswith("cuda"):
        import torch

        gpu = f", {torch.cuda.get_device_name(torch.device(device))}"
    return f"{platform.machine()}, {cpu_model()}{gpu}, {os.cpu_count()} cores"


def cpu_capability() -> str:
    """The instruction set PyTorch's CPU kernels use here (e.g. ``AVX2``, ``AVX512``)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()
