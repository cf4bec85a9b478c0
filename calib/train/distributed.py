"""Devices and multi-GPU plumbing (DDP under ``torchrun``), AMP and deterministic kernels:
short functions the trainer calls.

Multi-GPU: under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in
DistributedDataParallel (NCCL on CUDA, gloo on CPU). Every rank walks the same seeded
permutation of the training set and takes its own slice of each global batch
(``batch[rank::world_size]``), so ``batch_size`` is the *global* batch size and, when the
training-set size N divides by W, a run on W processes sees exactly the batches of one
process and follows its trajectory (up to float reduction order; the tests check the
batches exactly and the trajectory to 1e-5 on CPU with a model without BatchNorm) for
losses that are means over samples (CE, focal, BSCE, ...). Batch-level terms (``mmce``,
``dece``, ``sece`` and the meta step of ``--meta``) are computed on each rank's share of
the batch, so those runs differ from one process even then. When N
does not divide by W, the last ``N mod W`` samples of each epoch's permutation are left out
on every rank, so the run differs from one process in those samples
(``tests/test_ddp_sharding.py``); choose N (``--val-size``) or W to make it divide. On CUDA, BatchNorm layers become
``SyncBatchNorm`` so their statistics, too, are those of the global batch; on CPU (gloo)
PyTorch has no SyncBatchNorm, so BatchNorm there uses each rank's share of the batch and the
trajectory differs from one process. Evaluation runs on every rank over the whole split; rank 0 writes the
files. A SIGTERM/SIGINT checkpoint under DDP assumes every rank receives the signal (torchrun
forwards it); a signal that reaches only some ranks is not coordinated.


The pieces around the loop live beside it: :mod:`~calib.train.config`, :mod:`~calib.train.checkpoint`,
:mod:`~calib.train.progress` and :mod:`~calib.train.distributed`.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

import torch
from torch import Tensor, nn

from .. import profile as _profile


def rank_and_world() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the torchrun environment (1 process if absent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def pick_device(name: str | None, world_size: int = 1, local_rank: int = 0) -> torch.device:
    """The device a run trains on: ``name`` if given (checked), else :func:`calib.profile.device`.

    Under DDP on CUDA each process takes the GPU of its local rank. A CUDA device always
    gets an index, because ``torch.cuda.set_device`` needs one.
    """
    if name:
        try:
            dev = torch.device(name)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {name!r} is not a device name such as 'cpu', 'cuda' or 'cuda:1' ({exc})") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asks for CUDA, but no CUDA device is available "
                             "here; leave device unset (CLI: no --device) to use the CPU")
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    else:
        dev = _profile.device()
    if dev.type == "cuda" and world_size > 1:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"local rank {local_rank} has no CUDA device: only {torch.cuda.device_count()} "
                             "are visible; start at most that many processes per node, or pass device='cpu'")
        dev = torch.device("cuda", local_rank)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    return dev


def init_process_group(device: torch.device, batch_size: int, world_size: int) -> None:
    """Join the torchrun process group (NCCL on CUDA, gloo on CPU); the global batch must split evenly."""
    if world_size <= 1:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if batch_size % world_size:
        raise ValueError(f"batch_size ({batch_size}, the global batch) must be divisible by WORLD_SIZE ({world_size})")


def wrap(model: nn.Module, device: torch.device, world_size: int, compile: bool) -> nn.Module:
    """What the forward pass calls: ``model`` in DistributedDataParallel and/or ``torch.compile``."""
    net = model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    return torch.compile(net) if compile else net


def barrier(world_size: int) -> None:
    if world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def all_reduce_sum(vec: Tensor, device: torch.device, world_size: int) -> Tensor:
    """``vec`` summed over the ranks (itself with one process), back on the CPU."""
    if world_size <= 1:
        return vec
    import torch.distributed as dist

    vec = vec.to(device)
    dist.all_reduce(vec)
    return vec.cpu()


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``TrainConfig.amp`` on ``device``: None off CUDA (a note if asked for)."""
    if mode == "off":
        return None
    if device.type != "cuda":
        if mode != "auto":
            print(f"calib.train: amp={mode!r} ignored: autocast is used on CUDA only", file=sys.stderr)
        return None
    if mode == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if mode == "bf16" else torch.float16


@contextlib.contextmanager
def deterministic(device: torch.device) -> Iterator[None]:
    """CPU: deterministic kernels while training (the ledger's numbers re-derive exactly), restored
    after; CUDA: cuDNN autotuning (fastest kernels, not bit-reproducible)."""
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
        # NaN-filling each new tensor only detects kernels reading uninitialised memory: +2% a step
        torch.utils.deterministic.fill_uninitialized_memory = False
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev_det)
        torch.utils.deterministic.fill_uninitialized_memory = prev_fill
