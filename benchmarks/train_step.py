"""ResNet-20 training step (batch 128): eager vs channels_last vs torch.compile, side by side.

Times :meth:`calib.train.Trainer.train_step` (forward, float32 loss, backward, SGD step) on
a CIFAR-shaped random batch already on the device, so only the step is measured. Each
variant gets ``--warmup`` untimed steps first; for ``torch.compile`` these absorb the
compilation (reported separately as "first step"), which is excluded from the median.
Ratios are against eager in the same run (>1 means slower). Run: ``python benchmarks/train_step.py``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import header, median_time, row  # noqa: E402

from calib import profile  # noqa: E402
from calib.data import Splits  # noqa: E402
from calib.train import TrainConfig, Trainer  # noqa: E402


def fake_cifar(n: int) -> Splits:
    """CIFAR-shaped uint8 images and labels (only shapes matter for timing)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return Splits(x, y, x[:256], y[:256], x[:256], y[:256], num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3,
                  name="fake_cifar", image=True)


def make_step(variant: str, batch: int, data: Splits):
    cfg = TrainConfig(data="fake_cifar", model="resnet20", loss="ce", epochs=1, batch_size=batch, milestones=(),
                      channels_last=variant == "channels_last", compile=variant == "compile", progress=False)
    trainer = Trainer(cfg, data=data)
    x = (data.train_x[:batch].float() / 255).to(trainer.device)
    if cfg.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = data.train_y[:batch].to(trainer.device)
    return lambda: trainer.train_step(x, y)["loss"].item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--variants", default="eager,channels_last,compile")
    args = ap.parse_args()
    header(f"ResNet-20 train step, batch {args.batch}, {profile.device()}")
    data = fake_cifar(max(args.batch, 256))
    base = None
    for variant in args.variants.split(","):
        try:
            step = make_step(variant, args.batch, data)
            t0 = time.perf_counter()
            step()
            first = time.perf_counter() - t0
            sec = median_time(step, repeat=args.repeat, warmup=max(args.warmup - 1, 0))
        except Exception as exc:  # e.g. torch.compile without a working C++ compiler
            print(f"{variant:<44} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            if os.environ.get("CALIB_BENCH_TRACEBACK"):
                traceback.print_exc()
            continue
        base = base or sec
        print(row(f"{variant} (first step {first:.1f} s, excluded)", sec, base, width=52),
              f"  {args.batch / sec:7.0f} img/s")


if __name__ == "__main__":
    main()
