"""Fashion-MNIST from its IDX files: a strict reader and the folders searched.

Fashion-MNIST (Xiao et al. 2017, "Fashion-MNIST: a novel image dataset for benchmarking
machine learning algorithms") holds 60,000 training and 10,000 test greyscale 28 x 28
images of 10 kinds of clothing, MIT licence. It ships as four IDX files (LeCun's MNIST
format, the files torchvision's ``FashionMNIST`` reads), gzip-compressed or plain::

    train-images-idx3-ubyte  train-labels-idx1-ubyte
    t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte

An IDX file is a 4-byte magic number ``00 00 TT DD`` (``TT`` the element type, ``08`` for
unsigned bytes; ``DD`` the number of dimensions), ``DD`` big-endian uint32 sizes, then the
elements in row-major order: images ``0x00000803`` with sizes ``(N, 28, 28)``, labels
``0x00000801`` with ``(N,)``. :func:`read_idx` checks every part of that and raises
:class:`IDXError` (a ``ValueError``) with one line naming the file and the problem.

The download lives with the other datasets' in :mod:`calib.data.vision` (this module
knows the files, not the network). Folders searched, first complete one wins (:func:`find_fashion_mnist`): ``ROOT/fashion-mnist/``
and torchvision's ``ROOT/FashionMNIST/raw/`` for the data root ``ROOT`` (the ``root``
argument, else ``$CALIB_DATA``, else ``data``); then Debian's package
``dataset-fashion-mnist`` (:data:`SYSTEM_DIRS`); then ``data/`` if ``ROOT`` was another folder.
"""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import torch

__all__ = ["IDXError", "read_idx", "write_idx", "find_fashion_mnist", "FASHION_MNIST_FILES",
           "FASHION_MNIST_CLASSES", "FASHION_MNIST_URL", "FASHION_MNIST_MD5", "SYSTEM_DIRS", "file_in",
           "fashion_mnist_arrays"]

Tensor = torch.Tensor

FASHION_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                       "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")
# The official mirror (Zalando Research's README) and the MD5 sums of its .gz files.
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_MNIST_MD5 = {"train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}
# Where `apt-get install dataset-fashion-mnist` puts the files (Debian, Ubuntu).
SYSTEM_DIRS: tuple[str, ...] = ("/usr/share/datasets/fashion-mnist",)
FOLDER = "fashion-mnist"
HOW_TO_GET = ("Install them with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu, as root), or pass "
              "download=True (CLI: --download) where the network allows, or put the four files (.gz or "
              f"plain) from {FASHION_MNIST_URL} into DATA_ROOT/{FOLDER}/.")

_GZIP_MAGIC = b"\x1f\x8b"
_UBYTE = 0x08


class IDXError(ValueError):
    """An IDX file that is not what its name promises (bad gzip, magic number, sizes, length
    or labels); the message is one line that names the file and the problem."""


def _raw_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic number."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IDXError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not data:
        raise IDXError(f"{path}: empty file (0 bytes); the download or copy may have failed")
    if data[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; truncation an EOFError
            raise IDXError(f"{path}: not a valid gzip file ({exc}); the download may be truncated") from None
    if path.suffix == ".gz":
        raise IDXError(f"{path}: named .gz but not gzip-compressed (it starts with {data[:4].hex()})")
    return data


def read_idx(path: str | os.PathLike, ndim: int | None = None) -> np.ndarray:
    """The ``uint8`` array stored in IDX file ``path`` (gzip-compressed or plain).

    Checks: the magic number is ``00 00 08 DD`` (unsigned bytes) with ``DD`` = ``ndim`` when
    given; the header holds ``DD`` sizes; the data after it is exactly ``prod(sizes)``
    bytes. Any failure raises :class:`IDXError` naming ``path`` and the problem.
    """
    path = Path(path)
    raw = _raw_bytes(path)
    if len(raw) < 4:
        raise IDXError(f"{path}: {len(raw)} bytes, too short for an IDX header (4-byte magic number)")
    magic = int.from_bytes(raw[:4], "big")
    dims = raw[3]
    want = f"0x000008{ndim:02x}" if ndim is not None else "0x000008DD"
    if raw[0] or raw[1] or raw[2] != _UBYTE or dims == 0 or (ndim is not None and dims != ndim):
        raise IDXError(f"{path}: bad magic number 0x{magic:08x} (expected {want}, an IDX file of unsigned "
                       f"bytes{f' with {ndim} dimensions' if ndim else ''}); not an IDX file or the wrong file")
    header = 4 + 4 * dims
    if len(raw) < header:
        raise IDXError(f"{path}: header cut short ({len(raw)} bytes; {dims} sizes need {header})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    expected = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != expected:
        what = "truncated" if len(raw) - header < expected else "has trailing bytes"
        raise IDXError(f"{path}: wrong length, {len(raw) - header} data bytes where the header's sizes "
                       f"{shape} need {expected} ({what})")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def write_idx(path: str | os.PathLike, array: np.ndarray, *, compress: bool | None = None) -> Path:
    """Write ``uint8`` ``array`` as an IDX file; gzip-compressed when ``compress`` (default:
    when ``path`` ends in ``.gz``). The inverse of :func:`read_idx`; returns ``path``."""
    path = Path(path)
    a = np.ascontiguousarray(array)
    if a.dtype != np.uint8 or not 1 <= a.ndim <= 255:
        raise TypeError(f"array must be uint8 with 1 to 255 dimensions, got {a.dtype} with {a.ndim}")
    blob = bytes([0, 0, _UBYTE, a.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in a.shape) + a.tobytes()
    if compress if compress is not None else path.suffix == ".gz":
        blob = gzip.compress(blob, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    return path


# --------------------------------------------------------------------------- Fashion-MNIST
def file_in(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists first, else ``None``."""
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _candidates(root: Path) -> list[Path]:
    from .. import profile as _profile

    folders = [root / FOLDER, root / "FashionMNIST" / "raw", *(Path(d) for d in SYSTEM_DIRS)]
    default = Path(_profile.DEFAULT_DATA_ROOT)
    folders += [default / FOLDER, default / "FashionMNIST" / "raw"]
    return list(dict.fromkeys(folders))


def find_fashion_mnist(root: str | os.PathLike) -> Path | None:
    """The first folder holding all four Fashion-MNIST files (``.gz`` or plain), or ``None``.

    Searched in order: ``root/fashion-mnist``, ``root/FashionMNIST/raw`` (torchvision's
    layout), each of :data:`SYSTEM_DIRS` (Debian's ``dataset-fashion-mnist``), then the same
    two under ``data/``.
    """
    for folder in _candidates(Path(root).expanduser()):
        if all(file_in(folder, stem) for stem in FASHION_MNIST_FILES):
            return folder
    return None


def _read_split(folder: Path, prefix: str) -> tuple[Tensor, Tensor]:
    img_path = file_in(folder, f"{prefix}-images-idx3-ubyte")
    lab_path = file_in(folder, f"{prefix}-labels-idx1-ubyte")
    assert img_path is not None and lab_path is not None  # find_fashion_mnist checked both
    images, labels = read_idx(img_path, 3), read_idx(lab_path, 1)
    if images.shape[1:] != (28, 28):
        raise IDXError(f"{img_path}: images of size {images.shape[1]} x {images.shape[2]}, Fashion-MNIST's are 28 x 28")
    if images.shape[0] != labels.shape[0]:
        raise IDXError(f"{img_path.name} holds {images.shape[0]} images but {lab_path.name} {labels.shape[0]} "
                       f"labels (in {folder}); one of the two files is wrong or cut short")
    if labels.size and int(labels.max()) >= len(FASHION_MNIST_CLASSES):
        bad = int(np.argmax(labels >= len(FASHION_MNIST_CLASSES)))
        raise IDXError(f"{lab_path}: labels must lie in 0..9, got {int(labels[bad])} at position {bad}")
    x = torch.from_numpy(images.copy()).unsqueeze(1)          # (N, 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


def fashion_mnist_arrays(root: Path) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Training and test images ``(N, 1, 28, 28)`` uint8 and labels, from the first complete
    folder of :func:`find_fashion_mnist` (the download is :mod:`calib.data.vision`'s)."""
    folder = find_fashion_mnist(root)
    if folder is None:
        searched = "\n".join(f"  {f}" for f in _candidates(root))
        raise FileNotFoundError(f"Fashion-MNIST not found: no folder below holds the four files "
                                f"{', '.join(FASHION_MNIST_FILES)} (.gz or plain).\n{searched}\n{HOW_TO_GET}")
    return (*_read_split(folder, "train"), *_read_split(folder, "t10k"))
