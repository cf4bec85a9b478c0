"""Rebuild calib/data/cifar_softmax/*.npz from the netcal project's float32 prediction records.

    python tools/build_cifar_predictions.py [SOURCE_DIR]   # default ../shared/reference/netcal-records

Each source file holds ``predictions`` (N x K float32 softmax outputs) and ``ground_truth``
(N int64 labels) of one network on the 10,000 CIFAR test images. The package keeps
``probs`` as float16 and ``labels`` as uint8, compressed, after two changes that keep the
data usable (NOTICE.md in that folder says the same):

* probabilities below float16's smallest positive value 2**-24 (6e-8) are stored as 2**-24
  rather than 0, so ``log(probs)`` stays finite (a change below float16's resolution there);
* where float16 rounding creates a tie or a new maximum, the original top class is raised by
  one float16 step until it is the strict maximum again, so every row predicts the class it
  predicted in float32 and the accuracy is unchanged.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from calib.data.predictions import CIFAR_PREDICTIONS, FOLDER  # noqa: E402

FLOOR = np.float16(2.0 ** -24)


def to_float16(p: np.ndarray) -> np.ndarray:
    """``p`` rounded to float16, floored at 2**-24, with every row's argmax kept."""
    h = np.maximum(p.astype(np.float16), FLOOR)
    top = p.argmax(1)
    for _ in range(8):
        bad = np.nonzero(h.argmax(1) != top)[0]
        if bad.size == 0:
            return h
        h[bad, top[bad]] = np.nextafter(h[bad, top[bad]], np.float16(np.inf))
    raise RuntimeError(f"could not keep the argmax of rows {bad[:5]} within 8 float16 steps")


def main(source: Path) -> None:
    out = ROOT / "calib" / "data" / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, info in CIFAR_PREDICTIONS.items():
        with np.load(source / info.source) as d:
            p, y = d["predictions"].astype(np.float32), d["ground_truth"].astype(np.int64)
        h = to_float16(p)
        assert y.min() >= 0 and y.max() < 256 and (h.astype(np.float32).argmax(1) == p.argmax(1)).all()
        path = out / f"{name}.npz"
        np.savez_compressed(path, probs=h, labels=y.astype(np.uint8))
        total += path.stat().st_size
        print(f"{path.relative_to(ROOT)}: {h.shape}, accuracy {(p.argmax(1) == y).mean():.4f}, "
              f"{path.stat().st_size / 1e6:.2f} MB")
    print(f"total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "reference" / "netcal-records")
