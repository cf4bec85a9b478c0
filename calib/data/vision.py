"""Real datasets from their standard on-disk formats, split into train / validation / test.

``load(name, root)`` returns a :class:`Splits` holding every split as tensors: images as
``uint8`` tensors of shape ``(N, C, H, W)``, labels as ``int64``. Normalisation and
augmentation happen later, on the device, in :class:`calib.data.DeviceLoader`.

Protocol (Mukhoti et al. (2020) App. B; Lin et al. (2024) §5 "Training Setup"): the official test set is the test split;
``val_size`` training images (5,000 for CIFAR, giving 45k/5k) are carved out of the
training set by a seeded permutation and serve for model selection and for fitting the
temperature. For Tiny-ImageNet the official validation set (10,000 images with
``val_annotations.txt``) is the test split and 50 training images per class (10,000)
form the validation split, as in Mukhoti et al. (2020) App. B. Fashion-MNIST (60,000
training and 10,000 test images, 1 x 28 x 28) is split like CIFAR: 55,000 / 5,000.
``train_size`` then keeps a class-balanced seeded subset of the training split
(:func:`stratified_subset`), e.g. the 10,000 images the quick-profile chapters train on.

Files each loader expects under ``root`` (``download=True`` fetches them where the
network allows; otherwise the error message says where to put which file):

==============  ==========================================================================
fashion_mnist   ``fashion-mnist/train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
                ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (IDX, ``.gz`` or plain;
                also found in torchvision's ``FashionMNIST/raw/`` and in Debian's
                ``/usr/share/datasets/fashion-mnist/``, see :mod:`calib.data.idx`)
cifar10         ``cifar-10-batches-py/data_batch_1..5``, ``test_batch`` (python pickles)
cifar100        ``cifar-100-python/train``, ``test`` (python pickles, fine labels)
svhn            ``svhn/train_32x32.mat``, ``svhn/test_32x32.mat`` (MATLAB, label 10 = digit 0)
tiny_imagenet   ``tiny-imagenet-200/wnids.txt``, ``train/<wnid>/images/*.JPEG``,
                ``val/images/*.JPEG``, ``val/val_annotations.txt`` (decoded once, then
                cached as ``calib_uint8.pt`` in the same folder; delete it to re-decode)
==============  ==========================================================================

``digits``, ``gaussian`` and ``gaussian_overlap`` are the offline toy data of
:mod:`calib.data.toy` (no files).
"""
from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import profile as _profile
from .._checks import check_positive_int
from .._optional import need
from . import idx as _idx
from .splits import Splits, smoke_subset

__all__ = ["DownloadError", "load", "datasets", "split_indices", "stratified_subset", "channel_stats",
           "DATASET_STATS"]

Tensor = torch.Tensor

# Per-channel mean and standard deviation of the training images in [0, 1], the values in
# common use for each dataset. The focal-loss code lineage (Mukhoti et al. (2020)) normalises CIFAR-10,
# CIFAR-100 and SVHN alike with std (0.2023, 0.1994, 0.2010), which is not the pixel std
# of any of them; we use each dataset's own statistics. Tiny-ImageNet follows that
# lineage's choice, the ImageNet statistics. Fashion-MNIST's are those of its 60,000 training
# images (computed with channel_stats: 0.28604, 0.35302).
DATASET_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "tiny_imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


def split_indices(n: int, val_size: int, seed: int, *, labels: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Carve ``val_size`` of ``n`` training indices into a validation set.

    A permutation drawn from ``torch.Generator().manual_seed(seed)``: its first
    ``val_size`` entries are the validation indices, the rest the training indices (the
    recipe of Mukhoti et al. (2020)'s code: shuffle the indices with a fixed seed, split off the head). With
    ``labels`` the split is stratified: the first ``val_size / K`` examples of each of the
    K classes in permutation order (Mukhoti et al. (2020) App. B takes 50 per class from Tiny-ImageNet).
    Both index sets are returned sorted; they depend only on ``(n, val_size, seed, labels)``.
    """
    check_positive_int(n, "n")
    if isinstance(val_size, bool) or not isinstance(val_size, (int, np.integer)):
        raise TypeError(f"val_size must be an int, got {type(val_size).__name__}")
    if not 0 <= val_size < n:
        raise ValueError(f"val_size must be in [0, {n}) (the training set has {n} examples), got {val_size}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"split_seed must be an int, got {type(seed).__name__}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    if labels is None:
        val = perm[:val_size]
        train = perm[val_size:]
    else:
        if not isinstance(labels, Tensor) or labels.shape != (n,) or labels.is_floating_point():
            raise ValueError(f"labels must be an integer tensor of shape ({n},) to stratify the split")
        val = _stratified_head(perm, labels.long(), val_size)
        keep = torch.ones(n, dtype=torch.bool)
        keep[val] = False
        train = keep.nonzero().view(-1)
    return train.sort().values, val.sort().values


def _stratified_head(perm: Tensor, labels: Tensor, val_size: int) -> Tensor:
    """The first ``val_size / K`` entries of ``perm`` from each class."""
    counts = torch.bincount(labels)
    k = int((counts > 0).sum())
    if val_size % k:
        raise ValueError(f"a stratified val_size must be a multiple of the {k} classes, got {val_size}")
    per_class = val_size // k
    if int(counts[counts > 0].min()) <= per_class:
        raise ValueError(f"val_size {val_size} leaves a class with no training examples")
    lab = labels[perm]
    order = torch.argsort(lab, stable=True)      # grouped by class, random order kept inside
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(perm.numel()) - starts[lab[order]]
    return perm[order[rank < per_class]]


def stratified_subset(labels: Tensor, size: int, seed: int, *, name: str = "train_size") -> Tensor:
    """``size`` indices into ``labels``, as class-balanced as the classes allow, chosen by ``seed``.

    The indices are shuffled by a seeded permutation, ranked within their class in that
    order, and taken by rank (every class's first example, then every class's second, ...;
    ties by permutation position), so each class gets ``size / K`` examples (±1) while it has
    them. Returned sorted; they depend only on ``(labels, size, seed)``. ``name`` is the
    argument named in the error messages.
    """
    n = labels.shape[0]
    check_positive_int(size, name)
    if size > n:
        left = ("the test examples" if name == "test_size"
                else "the training examples left after the validation split")
        raise ValueError(f"{name} must be <= {n} ({left}), got {size}")
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), 0x7EA1]).generate_state(1)[0]))
    perm = torch.randperm(n, generator=gen)
    lab = labels[perm].long()
    order = torch.argsort(lab, stable=True)
    counts = torch.bincount(lab)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = torch.arange(n) - starts[lab[order]]
    take = torch.argsort(rank * n + torch.arange(n))[:size]      # by rank, then by permutation position
    return perm[take].sort().values


def channel_stats(images: Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std (in [0, 1]) of ``uint8`` images ``(N, C, H, W)``.

    Useful to check :data:`DATASET_STATS` against your own copy of a dataset.
    """
    if not isinstance(images, Tensor) or images.dtype != torch.uint8 or images.ndim != 4:
        raise TypeError("images must be a uint8 tensor of shape (N, C, H, W)")
    if images.shape[0] == 0:
        raise ValueError("images is empty (N = 0)")
    x = images.transpose(0, 1).reshape(images.shape[1], -1).double() / 255.0
    return tuple(x.mean(1).tolist()), tuple(x.std(1, unbiased=False).tolist())


# --------------------------------------------------------------------------- readers
def _missing(what: str, where: Path, files: list[str], how: str) -> FileNotFoundError:
    listing = "\n".join(f"  {where / f}" for f in files)
    return FileNotFoundError(
        f"{what} not found. Expected these files:\n{listing}\n{how}\n"
        f"Or call calib.data.load(..., root={str(where.parent)!r}, download=True) "
        "(CLI: --download) where the network allows."
    )


class DownloadError(RuntimeError):
    """``download=True`` failed (usually: no network). The message names the dataset, its
    URL and the files to put under ``root`` by hand; the CLI turns it into exit status 2."""


def _download_failed(what: str, url: str, where: Path, how: str, exc: BaseException) -> DownloadError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DownloadError(
        f"downloading {what} from {url} failed ({reason}). Without network access, fetch {url} "
        f"on a machine that has it and {how} {where}, then run again without --download "
        "(download=False)."
    )


def _fashion_mnist(root: Path, download: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fashion-MNIST's four IDX files; with ``download`` missing ones are fetched into
    ``root/fashion-mnist`` first (only when no searched folder is complete)."""
    if download and _idx.find_fashion_mnist(root) is None:
        _download_fashion_mnist(root / _idx.FOLDER)
    return _idx.fashion_mnist_arrays(root)


def _download_url(url: str, root: str, filename: str, md5: str) -> None:
    """``url`` saved as ``root/filename`` once its MD5 is ``md5``, with the standard library
    alone: Assignment 6 downloads Fashion-MNIST where torchvision is not installed (the
    ``course`` extra leaves it out)."""
    import hashlib
    import urllib.request

    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(dir=folder, prefix=f".{filename}.", suffix=".part")
    try:
        digest = hashlib.md5(usedforsecurity=False)
        request = urllib.request.Request(url, headers={"User-Agent": "calib"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=60) as response:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != md5:
            raise OSError(f"{filename} has MD5 {digest.hexdigest()}, not the official {md5}")
        os.replace(part, folder / filename)
    finally:
        if os.path.exists(part):
            os.unlink(part)


def _download_fashion_mnist(folder: Path) -> None:
    for name, md5 in _idx.FASHION_MNIST_MD5.items():
        if _idx.file_in(folder, name[:-3]) is None:
            try:
                _download_url(_idx.FASHION_MNIST_URL + name, str(folder), name, md5)
            except Exception as exc:  # noqa: BLE001 - network errors come in many types
                raise _download_failed("Fashion-MNIST", _idx.FASHION_MNIST_URL + name, folder,
                                       f"save it as {name} in", exc) from None


def _read_cifar_pickle(path: Path, label_key: bytes) -> tuple[Tensor, Tensor]:
    """One CIFAR python batch: ``b'data'`` (N, 3072) uint8 rows (R, G, B planes) and labels."""
    with open(path, "rb") as fh:
        try:
            batch = pickle.load(fh, encoding="bytes")  # the official format is a pickle
        except Exception as exc:  # noqa: BLE001 - any unpickling error means a bad file
            raise ValueError(f"{path} is not a readable CIFAR pickle: {exc}") from None
    if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
        raise ValueError(f"{path} lacks the keys b'data' and {label_key!r} of the CIFAR format")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: b'data' must have shape (N, 3072), got {data.shape}")
    labels = np.asarray(batch[label_key], dtype=np.int64)
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: {data.shape[0]} images but {labels.shape} labels")
    return torch.from_numpy(data.reshape(-1, 3, 32, 32).copy()), torch.from_numpy(labels)


def _cifar(root: Path, download: bool, hundred: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    train_files = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    files = train_files + ["test" if hundred else "test_batch"]
    if not all((folder / f).is_file() for f in files):
        if download:
            _download_cifar(root, hundred)
        else:
            url = _cifar_url(hundred)
            raise _missing(
                "CIFAR-100" if hundred else "CIFAR-10", folder, files,
                f"Download {url} and extract it into {root} (it unpacks to {folder.name}/).",
            )
    key = b"fine_labels" if hundred else b"labels"
    parts = [_read_cifar_pickle(folder / f, key) for f in train_files]
    test_x, test_y = _read_cifar_pickle(folder / files[-1], key)
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), test_x, test_y


def _cifar_url(hundred: bool) -> str:
    return "https://www.cs.toronto.edu/~kriz/" + ("cifar-100-python.tar.gz" if hundred else "cifar-10-python.tar.gz")


def _download_cifar(root: Path, hundred: bool) -> None:
    need("vision", "the CIFAR download", "torchvision")
    import torchvision

    cls = torchvision.datasets.CIFAR100 if hundred else torchvision.datasets.CIFAR10
    try:
        cls(str(root), train=True, download=True)
    except Exception as exc:  # noqa: BLE001 - network errors come in many types
        name = "cifar-100-python" if hundred else "cifar-10-batches-py"
        raise _download_failed("CIFAR-100" if hundred else "CIFAR-10", _cifar_url(hundred), root,
                               f"extract it (it unpacks to {name}/) into", exc) from None


def _read_svhn_mat(path: Path) -> tuple[Tensor, Tensor]:
    """SVHN cropped digits: ``X`` (32, 32, 3, N) uint8 and ``y`` (N, 1) with 10 meaning 0."""
    need("vision", "the SVHN reader", "scipy")
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path))
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{path} is not a readable SVHN .mat file: {exc}") from None
    if "X" not in mat or "y" not in mat:
        raise ValueError(f"{path} lacks the variables X and y of the SVHN format")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1).astype(np.int64)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != y.shape[0]:
        raise ValueError(f"{path}: X must have shape (32, 32, 3, N) matching y, got {x.shape} and {y.shape}")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise ValueError(f"{path}: SVHN labels must lie in 1..10, got {y.min()}..{y.max()}")
    images = torch.from_numpy(np.ascontiguousarray(x.astype(np.uint8).transpose(3, 2, 0, 1)))
    return images, torch.from_numpy(y % 10)


def _svhn(root: Path, download: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    folder = root / "svhn"
    files = ["train_32x32.mat", "test_32x32.mat"]
    missing = [f for f in files if not (folder / f).is_file()]
    if missing and download:
        _download_svhn(folder, missing)
    elif missing:
        raise _missing(
            "SVHN", folder, files,
            "Download them from http://ufldl.stanford.edu/housenumbers/ (format 2, cropped digits).",
        )
    return (*_read_svhn_mat(folder / files[0]), *_read_svhn_mat(folder / files[1]))


def _download_svhn(folder: Path, files: list[str]) -> None:
    need("vision", "the SVHN download", "torchvision")
    import torchvision
    from torchvision.datasets.utils import download_url

    for split, (url, filename, md5) in torchvision.datasets.SVHN.split_list.items():
        if filename in files:
            try:
                download_url(url, str(folder), filename, md5)
            except Exception as exc:  # noqa: BLE001
                raise _download_failed(f"SVHN ({split})", url, folder, f"save it as {filename} in", exc) from None


def _read_jpegs(paths: list[Path]) -> Tensor:
    need("vision", "the Tiny-ImageNet reader", "PIL")
    from PIL import Image

    arrays = []
    for p in paths:
        with Image.open(p) as im:
            arrays.append(np.asarray(im.convert("RGB"), dtype=np.uint8))  # a few are greyscale
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"images under {paths[0].parent.parent} have differing sizes: {sorted(shapes)}")
    return torch.from_numpy(np.stack(arrays).transpose(0, 3, 1, 2).copy())


def _tiny_imagenet(root: Path, download: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    folder = root / "tiny-imagenet-200"
    needed = ["wnids.txt", "train/<wnid>/images/*.JPEG", "val/images/*.JPEG", "val/val_annotations.txt"]
    ok = (folder / "wnids.txt").is_file() and (folder / "val" / "val_annotations.txt").is_file()
    if not ok and download:
        _download_tiny(root)
    elif not ok:
        raise _missing("Tiny-ImageNet", folder, needed, f"Download {TINY_URL} and unzip it into {root}.")
    cache = folder / "calib_uint8.pt"
    if cache.is_file():
        d = torch.load(cache, weights_only=True)
        return d["train_x"], d["train_y"], d["test_x"], d["test_y"]
    out = _read_tiny_folder(folder)
    _try_cache(cache, dict(zip(("train_x", "train_y", "test_x", "test_y"), out)))
    return out


def _read_tiny_folder(folder: Path) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Decode the standard layout; classes numbered in sorted wnid order (as Mukhoti et al. (2020)'s code)."""
    wnids = sorted(w.strip() for w in (folder / "wnids.txt").read_text().split() if w.strip())
    index = {w: i for i, w in enumerate(wnids)}
    train_paths, train_labels = [], []
    for w in wnids:
        files = sorted((folder / "train" / w / "images").glob("*.JPEG"))
        if not files:
            raise FileNotFoundError(f"no training images in {folder / 'train' / w / 'images'}")
        train_paths += files
        train_labels += [index[w]] * len(files)
    val_paths, val_labels = [], []
    for line in (folder / "val" / "val_annotations.txt").read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        if parts[1] not in index:
            raise ValueError(f"val_annotations.txt names class {parts[1]!r}, which is not in wnids.txt")
        val_paths.append(folder / "val" / "images" / parts[0])
        val_labels.append(index[parts[1]])
    if not val_paths:
        raise ValueError(f"{folder / 'val' / 'val_annotations.txt'} lists no images")
    missing = [p for p in val_paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} validation images listed in val_annotations.txt are missing, e.g. {missing[0]}")
    as_y = lambda v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    return _read_jpegs(train_paths), as_y(train_labels), _read_jpegs(val_paths), as_y(val_labels)


def _try_cache(path: Path, tensors: dict[str, Tensor]) -> None:
    """Save decoded images next to the JPEGs (atomically) so the next load skips decoding."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        os.close(fd)
        torch.save(tensors, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        warnings.warn(f"could not cache decoded Tiny-ImageNet at {path}: {exc}", stacklevel=3)


def _download_tiny(root: Path) -> None:
    need("vision", "the Tiny-ImageNet download", "torchvision")
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(TINY_URL, str(root))
    except Exception as exc:  # noqa: BLE001
        raise _download_failed("Tiny-ImageNet", TINY_URL, root, "unzip it (it unpacks to tiny-imagenet-200/) into",
                               exc) from None


# --------------------------------------------------------------------------- public
_READERS: dict[str, Callable[[Path, bool], tuple[Tensor, Tensor, Tensor, Tensor]]] = {
    "fashion_mnist": lambda root, dl: _fashion_mnist(root, dl),
    "cifar10": lambda root, dl: _cifar(root, dl, hundred=False),
    "cifar100": lambda root, dl: _cifar(root, dl, hundred=True),
    "svhn": _svhn,
    "tiny_imagenet": _tiny_imagenet,
}
_CLASSES = {"fashion_mnist": 10, "cifar10": 10, "cifar100": 100, "svhn": 10, "tiny_imagenet": 200}
_VAL_SIZE = {"fashion_mnist": 5000, "cifar10": 5000, "cifar100": 5000, "svhn": 5000, "tiny_imagenet": 10_000}


_TOY_NAMES = ("digits", "gaussian", "gaussian_overlap")  # calib.data.toy: no files, fixed splits


def datasets() -> list[str]:
    """Names :func:`load` accepts."""
    return sorted([*_READERS, *_TOY_NAMES])


def load(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    val_size: int | None = None,
    split_seed: int = 0,
    download: bool = False,
    train_size: int | None = None,
    test_size: int | None = None,
) -> Splits:
    """Load dataset ``name`` from ``root`` as train / validation / test tensors.

    ``val_size`` training examples, chosen by :func:`split_indices` with ``split_seed``,
    become the validation split. ``None`` means the papers' protocol: 5,000 for CIFAR,
    Fashion-MNIST and SVHN (CIFAR: 50,000 -> 45,000 + 5,000; Mukhoti et al. (2020) App. B, Lin et al. (2024) §5 "Training Setup") and
    10,000 for Tiny-ImageNet, 50 per class (Mukhoti et al. (2020) App. B; its ``val_size`` must be a
    multiple of the number of classes). ``train_size`` (default: all) keeps that many of the
    remaining training examples, class-balanced and chosen by ``split_seed``
    (:func:`stratified_subset`); the validation and test splits do not depend on it.
    ``test_size`` (default: all) keeps that many test examples, class-balanced and chosen
    by ``split_seed`` in the same way (e.g. to evaluate the test split every epoch cheaply).
    Images stay ``uint8``; pass ``splits.mean`` and ``splits.std`` to
    :class:`calib.data.DeviceLoader` to normalise on the device.

    ``digits``, ``gaussian`` and ``gaussian_overlap`` build the offline toy data of :mod:`calib.data.toy` with
    ``seed=split_seed`` (``root`` and ``download`` do not apply to them; a ``val_size``,
    ``train_size`` or ``test_size`` is refused with ``ValueError`` rather than silently ignored).

    ``root`` defaults to ``$CALIB_DATA``, else ``"data"`` (:func:`calib.profile.data_root`;
    the conventional ``"data"`` also yields to ``$CALIB_DATA``). Fashion-MNIST is also looked
    for in Debian's ``/usr/share/datasets/fashion-mnist`` and then under ``data/``
    (:func:`calib.data.idx.find_fashion_mnist`). In smoke mode
    (``CALIB_SMOKE=1``) ``val_size`` is cut to a quarter of the training files at most
    and every split to :data:`calib.profile.SMOKE_CAPS` (:func:`calib.data.splits.smoke_subset`).

    Raises ``FileNotFoundError`` naming the expected files when they are missing and
    ``download`` is False, :class:`DownloadError` (one message: the dataset, its URL
    and where to put the files by hand) when ``download`` fails, and ``ValueError`` naming
    the file for a corrupt one (:class:`calib.data.idx.IDXError` for the IDX files).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.lower().replace("-", "_")
    if key in _TOY_NAMES:
        for arg, value in (("val_size", val_size), ("train_size", train_size), ("test_size", test_size)):
            if value is not None:
                flag = "--" + arg.replace("_", "-")
                raise ValueError(f"{arg} does not apply to {key!r}: its train/val/test split is fixed by "
                                 f"calib.data.toy; leave {arg}=None (CLI: no {flag})")
        return _toy(key, split_seed)
    if key not in _READERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(datasets())}")
    if not isinstance(download, bool):
        raise TypeError(f"download must be a bool, got {type(download).__name__}")
    if val_size is not None and (isinstance(val_size, bool) or not isinstance(val_size, (int, np.integer))):
        raise TypeError(f"val_size must be an int or None, got {type(val_size).__name__}")  # before slow reads
    if train_size is not None:
        check_positive_int(train_size, "train_size")
    if test_size is not None:
        check_positive_int(test_size, "test_size")
    root = _profile.data_root(root)
    train_x, train_y, test_x, test_y = _READERS[key](Path(root).expanduser(), download)
    k = _CLASSES[key]
    for nm, y in (("training", train_y), ("test", test_y)):
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= k):
            raise ValueError(f"{name} {nm} labels must lie in [0, {k}), got [{int(y.min())}, {int(y.max())}]")
    if val_size is None:
        val_size = _VAL_SIZE[key]
    stratify = train_y if key == "tiny_imagenet" else None
    if _profile.smoke():
        val_size = _smoke_val_size(val_size, train_y, stratify is not None)
    tr, va = split_indices(train_x.shape[0], val_size, split_seed, labels=stratify)
    if train_size is not None:
        if _profile.smoke():
            train_size = min(train_size, tr.numel())
        tr = tr[stratified_subset(train_y[tr], train_size, split_seed)]
    if test_size is not None:
        if _profile.smoke():
            test_size = min(test_size, test_y.numel())
        te = stratified_subset(test_y, test_size, split_seed, name="test_size")
        test_x, test_y = test_x[te], test_y[te]
    mean, std = DATASET_STATS[key]
    return smoke_subset(Splits(
        train_x[tr], train_y[tr], train_x[va], train_y[va], test_x, test_y,
        num_classes=k, mean=mean, std=std, name=key, image=True,
    ))


def _smoke_val_size(val_size: int, train_y: Tensor, stratified: bool) -> int:
    """Smoke mode: at most a quarter of the (tiny, synthetic) training files; stratified
    splits keep a multiple of the classes present (one per class at least)."""
    n = train_y.shape[0]
    if not stratified:
        return min(val_size, n // 4)
    k = int((torch.bincount(train_y) > 0).sum())
    return min(val_size, max(k, (n // 4) // k * k))


def _toy(key: str, seed: int) -> Splits:
    """Thin glue to :mod:`calib.data.toy` (no files, no network)."""
    from . import toy

    if key == "digits":
        return toy.digits_splits(seed=seed)
    if key == "gaussian_overlap":
        return toy.gaussian_overlap_splits(seed=seed)
    return toy.gaussian_splits(seed=seed)
