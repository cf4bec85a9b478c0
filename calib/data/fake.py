"""Tiny synthetic datasets written in the real on-disk formats that :func:`calib.data.load` reads.

The pixels are random (CIFAR, SVHN) or flat colours that encode the class
(Tiny-ImageNet), so nothing learnt from them means anything; what they exercise is the
real reading code: Fashion-MNIST's (gzipped) IDX files, CIFAR's python-pickle batches, SVHN's MATLAB files with label 10 for
the digit 0, and Tiny-ImageNet's folder of JPEGs with ``val_annotations.txt``. The tests
of :mod:`calib.data.vision` and CI's smoke runs of the chapters (``CALIB_DATA=DIR
CALIB_SMOKE=1``) use them. From the shell::

    python -m calib fake-data DIR          # all five datasets under DIR

==============  ============================================================
fashion_mnist   ``fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``
cifar10         ``cifar-10-batches-py/data_batch_1..5``, ``test_batch``
cifar100        ``cifar-100-python/train``, ``test``
svhn            ``svhn/train_32x32.mat``, ``svhn/test_32x32.mat``
tiny_imagenet   ``tiny-imagenet-200/wnids.txt``, ``train/<wnid>/images/*.JPEG``,
                ``val/images/*.JPEG``, ``val/val_annotations.txt``
==============  ============================================================
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Sequence

import numpy as np

from .._checks import check_positive_int
from .idx import FOLDER as _FASHION_FOLDER
from .idx import write_idx

__all__ = ["write_fashion_mnist", "write_cifar", "write_svhn", "write_tiny_imagenet", "write_all", "class_colour", "FAKE_WRITERS"]


def _root(root: str | os.PathLike) -> Path:
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a path, got {type(root).__name__}")
    return Path(root).expanduser()


def write_fashion_mnist(
    root: str | os.PathLike, *, n_train: int = 60, n_test: int = 20, seed: int = 0, compress: bool = True
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Fashion-MNIST's four IDX files under ``root/fashion-mnist`` (``.gz`` when ``compress``).

    Images are random ``(n, 28, 28)`` uint8, labels cycle through 0..9 (so every class is
    present). Returns ``{"train": (images, labels), "t10k": (images, labels)}``.
    """
    check_positive_int(n_train, "n_train")
    check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    folder = _root(root) / _FASHION_FOLDER
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        gz = ".gz" if compress else ""
        write_idx(folder / f"{prefix}-images-idx3-ubyte{gz}", x)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{gz}", y)
        out[prefix] = (x, y)
    return out


def write_cifar(
    root: str | os.PathLike, *, hundred: bool = False, per_batch: int = 12, n_test: int = 8, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 (five training batches of ``per_batch``) or CIFAR-100 (one ``train`` file of
    ``5 * per_batch``) as python pickles under ``root``, plus a test batch of ``n_test``.

    Each batch is a dict with ``b"data"``, ``(n, 3072)`` uint8 rows (the R, G and B planes,
    each 32 x 32 row-major), and ``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` and
    ``b"coarse_labels"`` (CIFAR-100). Returns all training rows and labels in file order.
    """
    check_positive_int(per_batch, "per_batch")
    check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    folder = _root(root) / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    k = 100 if hundred else 10
    train_names = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    test_name = "test" if hundred else "test_batch"
    rows, labels = [], []
    for name in train_names + [test_name]:
        n = n_test if name == test_name else per_batch * (5 if hundred else 1)
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = rng.integers(0, k, n).tolist()
        batch = {b"data": data, b"batch_label": name.encode()}
        if hundred:
            batch.update({b"fine_labels": y, b"coarse_labels": [v // 5 for v in y]})
        else:
            batch[b"labels"] = y
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)
        if name != test_name:
            rows.append(data)
            labels += y
    return np.concatenate(rows), np.array(labels)


def write_svhn(
    root: str | os.PathLike, *, n_train: int = 30, n_test: int = 10, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """SVHN cropped digits (format 2) as ``svhn/{train,test}_32x32.mat`` under ``root``.

    ``X`` is ``(32, 32, 3, n)`` uint8 and ``y`` is ``(n, 1)`` in 1..10, 10 standing for the
    digit 0 (labels cycle through 1..10). Returns ``{"train": (X, y), "test": (X, y)}``.
    """
    import scipy.io

    check_positive_int(n_train, "n_train")
    check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    folder = _root(root) / "svhn"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.arange(n).reshape(n, 1) % 10 + 1
        scipy.io.savemat(str(folder / f"{split}_32x32.mat"), {"X": x, "y": y})
        out[split] = (x, y)
    return out


def class_colour(c: int) -> tuple[int, int, int]:
    """The flat RGB colour of class ``c`` in :func:`write_tiny_imagenet` (JPEG keeps flat colours)."""
    return ((40 + 80 * c) % 256, (200 - 60 * c) % 256, (30 * c) % 256)


def write_tiny_imagenet(
    root: str | os.PathLike,
    *,
    wnids: Sequence[str] | None = None,
    per_class: int = 3,
    n_val: int = 5,
    size: int = 8,
) -> Path:
    """The Tiny-ImageNet folder layout under ``root/tiny-imagenet-200`` with flat-coloured JPEGs.

    ``wnids`` (default 200 names ``n00000000``, ...) are written to ``wnids.txt`` in the
    order given; class ``c`` is the ``c``-th wnid in sorted order, as the loader numbers
    them, and its images have the colour :func:`class_colour` ``(c)``. The first training
    image of every class is saved greyscale (the real set has some). ``n_val`` validation
    images cycle through the wnids in the given order and are listed in
    ``val/val_annotations.txt`` (file, wnid, box). The real images are 64 x 64; ``size``
    keeps the fake ones small. Returns the ``tiny-imagenet-200`` folder.
    """
    from PIL import Image

    names = [f"n{i:08d}" for i in range(200)] if wnids is None else [str(w) for w in wnids]
    if not names or len(set(names)) != len(names):
        raise ValueError("wnids must be a non-empty sequence of distinct names")
    for value, name in ((per_class, "per_class"), (n_val, "n_val"), (size, "size")):
        check_positive_int(value, name)
    folder = _root(root) / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("\n".join(names) + "\n")
    order = sorted(names)
    for w in names:
        d = folder / "train" / w / "images"
        d.mkdir(parents=True, exist_ok=True)
        img = Image.new("RGB", (size, size), class_colour(order.index(w)))
        for i in range(per_class):
            (img.convert("L") if i == 0 else img).save(d / f"{w}_{i}.JPEG", quality=95)
    lines = []
    for i in range(n_val):
        w = names[i % len(names)]
        Image.new("RGB", (size, size), class_colour(order.index(w))).save(
            folder / "val" / "images" / f"val_{i}.JPEG", quality=95)
        lines.append(f"val_{i}.JPEG\t{w}\t0\t0\t{size - 1}\t{size - 1}")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return folder


FAKE_WRITERS = {
    "fashion_mnist": lambda root: write_fashion_mnist(root, n_train=200, n_test=64),
    "cifar10": lambda root: write_cifar(root, hundred=False, per_batch=40, n_test=64),
    "cifar100": lambda root: write_cifar(root, hundred=True, per_batch=40, n_test=64),
    "svhn": lambda root: write_svhn(root, n_train=200, n_test=64),
    "tiny_imagenet": lambda root: write_tiny_imagenet(root, per_class=2, n_val=64, size=64),
}


def write_all(root: str | os.PathLike, names: Sequence[str] | None = None) -> list[str]:
    """Write each dataset in ``names`` (default: all of :data:`FAKE_WRITERS`) under ``root``.

    Sizes are the smoke-mode ones: Fashion-MNIST, CIFAR and SVHN 200 training and 64 test images,
    Tiny-ImageNet two 64 x 64 training images for each of the 200 classes and 64
    validation images. Returns the names written.
    """
    chosen = list(FAKE_WRITERS) if names is None else list(names)
    if bad := [n for n in chosen if n not in FAKE_WRITERS]:
        raise ValueError(f"names must be among {', '.join(FAKE_WRITERS)}, got {bad}")
    for n in chosen:
        FAKE_WRITERS[n](root)
    return chosen
