"""Device-resident loader vs torchvision's DataLoader with PIL transforms (issue 5, item 9).

One epoch of CIFAR-shaped synthetic uint8 images (default 10,000, batch 128) with the
CIFAR training augmentation (random crop with 4-pixel padding, horizontal flip,
normalisation) three ways:

* ``DataLoader``: ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``,
  ``Normalize`` on PIL images in 2 worker processes (persistent, warmed up);
* ``DeviceLoader``: :class:`calib.data.DeviceLoader` with ``augment=True`` on
  :func:`calib.profile.device`;
* floor: one pass of ``torch.randperm`` indexing and float conversion, no augmentation:
  the least any loader that touches every image must do.

Run: ``python benchmarks/data.py [--n 10000] [--batch 128]``. Prints images per second
and the speed-up over the DataLoader.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import header, median_time  # noqa: E402

from calib import profile  # noqa: E402
from calib.data import DeviceLoader  # noqa: E402

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class _PILDataset(torch.utils.data.Dataset):
    """CIFAR-style dataset: HWC uint8 array -> PIL image -> torchvision transforms."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        import torchvision.transforms as T

        self.images, self.labels = images, labels
        self.transform = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                                    T.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def _epoch(loader) -> None:
    for x, _ in loader:
        pass
    if x.is_cuda:
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="images per epoch (default 10000)")
    ap.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    ap.add_argument("--repeat", type=int, default=3, help="timed epochs per loader (median)")
    args = ap.parse_args(argv)
    header(f"data loading: one epoch of {args.n} CIFAR-shaped images, batch {args.batch}, on {profile.device()}")

    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (args.n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.n)
    chw = torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous()

    baseline = torch.utils.data.DataLoader(_PILDataset(hwc, labels), batch_size=args.batch, shuffle=True,
                                           num_workers=2, persistent_workers=True)
    t_base = median_time(lambda: _epoch(baseline), repeat=args.repeat, warmup=1)

    dev = profile.device()
    ours = DeviceLoader(chw, torch.from_numpy(labels), args.batch, augment=True, mean=MEAN, std=STD, device=dev)
    t_ours = median_time(lambda: _epoch(ours), repeat=args.repeat, warmup=1)

    x_dev = chw.to(dev)

    def floor() -> None:
        perm = torch.randperm(args.n).to(dev)
        for i in range(0, args.n, args.batch):
            out = x_dev.index_select(0, perm[i:i + args.batch]).float()
        if out.is_cuda:
            torch.cuda.synchronize()

    t_floor = median_time(floor, repeat=args.repeat, warmup=1)

    print(f"{'loader':<52} {'images/s':>12} {'speed-up':>9}")
    for name, t in (("torchvision DataLoader + PIL transforms, 2 workers", t_base),
                    ("calib DeviceLoader (crop+flip+normalise on device)", t_ours),
                    ("floor: randperm indexing + float conversion", t_floor)):
        print(f"{name:<52} {args.n / t:12,.0f} {t_base / t:8.1f}x")
    return {"dataloader_s": t_base, "deviceloader_s": t_ours, "floor_s": t_floor, "speedup": t_base / t_ours}


if __name__ == "__main__":
    main()
