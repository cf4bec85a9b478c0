"""calib.data.load on small files written in the datasets' real on-disk formats."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from calib.data import DATASET_STATS, Splits, channel_stats, datasets, fake, load, split_indices

# ------------------------------------------------------------------ writers (real formats)
# The public writers of calib.data.fake; these wrappers keep the tests' short calls.
def write_cifar(root: Path, hundred: bool, **kw) -> tuple[np.ndarray, np.ndarray]:
    return fake.write_cifar(root, hundred=hundred, **kw)


write_svhn = fake.write_svhn
WNIDS = ["n02", "n00", "n01"]       # deliberately unsorted in wnids.txt
colour = fake.class_colour


def write_tiny(root: Path) -> Path:
    return fake.write_tiny_imagenet(root, wnids=WNIDS, per_class=3, n_val=5, size=8)


# ------------------------------------------------------------------ CIFAR
@pytest.mark.parametrize("hundred", [False, True])
def test_cifar_round_trip(tmp_path, hundred):
    rows, labels = write_cifar(tmp_path, hundred)
    s = load("cifar100" if hundred else "cifar10", tmp_path, val_size=10, split_seed=4)
    n = rows.shape[0]
    assert isinstance(s, Splits) and s.image and s.num_classes == (100 if hundred else 10)
    assert s.train_x.shape == (n - 10, 3, 32, 32) and s.val_x.shape == (10, 3, 32, 32)
    assert s.test_x.shape == (8, 3, 32, 32)
    assert s.train_x.dtype == torch.uint8 and s.train_y.dtype == torch.int64
    tr, va = split_indices(n, 10, 4)
    # a CIFAR row is the R plane, then G, then B, each 32×32 row-major
    images = torch.from_numpy(rows).view(n, 3, 32, 32)
    assert torch.equal(s.train_x, images[tr]) and torch.equal(s.val_x, images[va])
    assert torch.equal(s.train_y, torch.from_numpy(labels)[tr])   # fine labels, not coarse ones
    assert (s.mean, s.std) == DATASET_STATS[s.name]


def test_cifar_pixel_layout(tmp_path):
    rows, _ = write_cifar(tmp_path, False, per_batch=2, n_test=2)
    s = load("cifar10", tmp_path, val_size=0)
    first = s.train_x[0]
    assert first[1, 0, 0] == rows[0, 1024] and first[2, 31, 31] == rows[0, 3071] and first[0, 1, 0] == rows[0, 32]


def test_cifar_missing_files_say_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load("cifar10", tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_1") in msg
    assert "cifar-10-python.tar.gz" in msg and "download=True" in msg


def test_cifar_corrupt_or_wrong_pickle(tmp_path):
    write_cifar(tmp_path, False)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="data_batch_3"):
        load("cifar10", tmp_path, val_size=5)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8)}, fh)
    with pytest.raises(ValueError, match="labels"):
        load("cifar10", tmp_path, val_size=5)


def test_cifar_labels_out_of_range(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(tmp_path, False)
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, fh)
    with pytest.raises(ValueError, match="labels must lie"):
        load("cifar10", tmp_path, val_size=5)


def test_download_uses_torchvision_and_reports_failure(tmp_path, monkeypatch):
    import torchvision

    class FakeCIFAR10:
        def __init__(self, root, train, download):
            assert download and root == str(tmp_path)
            write_cifar(Path(root), False)

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    assert load("cifar10", tmp_path, val_size=10, download=True).train_x.shape[0] == 50

    class Offline:
        def __init__(self, *a, **k):
            raise OSError("no network")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", Offline)
    with pytest.raises(RuntimeError, match="no network"):
        load("cifar100", tmp_path / "other", download=True)


# ------------------------------------------------------------------ SVHN
def test_svhn_round_trip(tmp_path):
    raw = write_svhn(tmp_path)
    s = load("svhn", tmp_path, val_size=5, split_seed=1)
    assert s.num_classes == 10 and s.train_x.shape == (25, 3, 32, 32) and s.test_x.shape == (10, 3, 32, 32)
    x, y = raw["test"]
    assert torch.equal(s.test_x[3].permute(1, 2, 0), torch.from_numpy(x[:, :, :, 3]))
    assert s.test_y.tolist() == [v % 10 for v in y.ravel().tolist()]     # label 10 is digit 0
    assert 0 in s.test_y.tolist() and int(s.test_y.max()) == 9
    tr, _ = split_indices(30, 5, 1)
    assert torch.equal(s.train_x, torch.from_numpy(raw["train"][0].transpose(3, 2, 0, 1).copy())[tr])


def test_svhn_missing_and_malformed(tmp_path):
    import scipy.io

    with pytest.raises(FileNotFoundError, match="train_32x32.mat"):
        load("svhn", tmp_path)
    write_svhn(tmp_path)
    scipy.io.savemat(str(tmp_path / "svhn" / "test_32x32.mat"), {"X": np.zeros((32, 32, 3, 2), np.uint8),
                                                                  "y": np.array([[0], [3]])})
    with pytest.raises(ValueError, match="1..10"):
        load("svhn", tmp_path, val_size=5)


# ------------------------------------------------------------------ Tiny-ImageNet
def test_tiny_imagenet_round_trip_and_cache(tmp_path):
    folder = write_tiny(tmp_path)
    s = load("tiny_imagenet", tmp_path, val_size=3, split_seed=0)
    assert s.num_classes == 200 and s.image
    assert s.train_x.shape == (6, 3, 8, 8) and s.val_x.shape == (3, 3, 8, 8) and s.test_x.shape == (5, 3, 8, 8)
    assert sorted(s.val_y.tolist()) == [0, 1, 2]      # stratified: one per class (004 App. B: 50 per class)
    # classes are numbered in sorted wnid order; the test split is the official val set
    assert s.test_y.tolist() == [sorted(WNIDS).index(WNIDS[i % 3]) for i in range(5)]
    for x, y in ((s.train_x, s.train_y), (s.test_x, s.test_y)):
        for img, c in zip(x, y.tolist()):
            if img[0].float().std() == 0 and (img[0] == img[1]).all() and (img[1] == img[2]).all():
                continue    # the greyscale training image: converted to 3 equal channels
            mean = img.float().mean((1, 2))
            assert torch.allclose(mean, torch.tensor(colour(c), dtype=torch.float32), atol=4), (mean, c)
    assert (folder / "calib_uint8.pt").is_file()
    # the second load reads the cache, so it no longer needs the JPEGs
    for f in (folder / "train").rglob("*.JPEG"):
        f.unlink()
    again = load("tiny_imagenet", tmp_path, val_size=3, split_seed=0)
    assert torch.equal(again.train_x, s.train_x) and torch.equal(again.test_y, s.test_y)


def test_tiny_imagenet_greyscale_becomes_three_channels(tmp_path):
    write_tiny(tmp_path)
    s = load("tiny_imagenet", tmp_path, val_size=0)
    assert s.train_x.shape[1] == 3
    with pytest.raises(ValueError, match="multiple"):
        load("tiny_imagenet", tmp_path, val_size=2)


def test_tiny_imagenet_missing_and_bad_annotations(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load("tiny_imagenet", tmp_path)
    assert "val_annotations.txt" in str(info.value) and "tiny-imagenet-200.zip" in str(info.value)
    folder = write_tiny(tmp_path)
    (folder / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99\t0\t0\t7\t7\n")
    with pytest.raises(ValueError, match="n99"):
        load("tiny_imagenet", tmp_path, val_size=3)
    (folder / "val" / "val_annotations.txt").write_text("val_9.JPEG\tn00\t0\t0\t7\t7\n")
    with pytest.raises(FileNotFoundError, match="val_9.JPEG"):
        load("tiny_imagenet", tmp_path, val_size=3)


# ------------------------------------------------------------------ splits
def test_cifar_protocol_split_sizes_deterministic_and_disjoint():
    tr, va = split_indices(50_000, 5_000, 0)
    assert (tr.numel(), va.numel()) == (45_000, 5_000)
    assert torch.equal(torch.cat([tr, va]).sort().values, torch.arange(50_000))
    tr2, va2 = split_indices(50_000, 5_000, 0)
    assert torch.equal(tr, tr2) and torch.equal(va, va2)
    _, va3 = split_indices(50_000, 5_000, 1)
    assert not torch.equal(va, va3)


def test_stratified_split():
    labels = torch.arange(1000) % 4
    tr, va = split_indices(1000, 200, 7, labels=labels)
    assert torch.bincount(labels[va]).tolist() == [50] * 4
    assert torch.equal(torch.cat([tr, va]).sort().values, torch.arange(1000))
    assert torch.equal(split_indices(1000, 200, 7, labels=labels)[1], va)
    assert not torch.equal(split_indices(1000, 200, 8, labels=labels)[1], va)
    with pytest.raises(ValueError, match="multiple"):
        split_indices(1000, 201, 7, labels=labels)
    with pytest.raises(ValueError, match="no training"):
        split_indices(8, 4, 0, labels=torch.tensor([0, 0, 0, 1, 1, 1, 2, 3]))
    with pytest.raises(ValueError, match="labels"):
        split_indices(10, 2, 0, labels=torch.zeros(9, dtype=torch.long))


def test_protocol_default_val_size(tmp_path):
    write_cifar(tmp_path, False, per_batch=1100, n_test=2)
    s = load("cifar10", tmp_path)
    assert (s.train_x.shape[0], s.val_x.shape[0]) == (500, 5000)


@pytest.mark.parametrize("val_size,err", [(-1, ValueError), (100, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_val_size(val_size, err):
    with pytest.raises(err, match="val_size"):
        split_indices(100, val_size, 0)


def test_bad_split_seed():
    with pytest.raises(TypeError, match="split_seed"):
        split_indices(100, 10, 0.5)


def test_unknown_dataset_and_names():
    assert {"fashion_mnist", "cifar10", "cifar100", "svhn", "tiny_imagenet", "digits", "gaussian",
            "gaussian_overlap"} == set(datasets())
    with pytest.raises(ValueError, match="cifar10"):
        load("imagenet")
    with pytest.raises(TypeError, match="name"):
        load(10)
    with pytest.raises(TypeError, match="val_size"):
        load("cifar10", "/nonexistent", val_size=0.1)


def test_splits_checks_and_repr():
    x, y = torch.zeros(4, 3, 2, 2, dtype=torch.uint8), torch.zeros(4, dtype=torch.long)
    s = Splits(x, y, x, y, x, y, num_classes=2, mean=(0.5,) * 3, std=(0.5,) * 3, name="t", image=True)
    assert "train=(4, 3, 2, 2)" in repr(s)
    with pytest.raises(ValueError, match="val_x"):
        Splits(x, y, x[:2], y, x, y, num_classes=2, mean=(), std=(), name="t", image=True)
    with pytest.raises(TypeError, match="test_y"):
        Splits(x, y, x, y, x, y.float(), num_classes=2, mean=(), std=(), name="t", image=True)


def test_dataset_statistics():
    for name, (mean, std) in DATASET_STATS.items():
        assert len(mean) == len(std) == (1 if name == "fashion_mnist" else 3) and all(0 < v < 1 for v in mean + std), name
    imgs = torch.stack([torch.full((3, 2, 2), 0, dtype=torch.uint8), torch.full((3, 2, 2), 255, dtype=torch.uint8)])
    mean, std = channel_stats(imgs)
    assert mean == pytest.approx((0.5,) * 3) and std == pytest.approx((0.5,) * 3)
    with pytest.raises(TypeError, match="uint8"):
        channel_stats(imgs.float())


# ------------------------------------------------------------------ offline toy data through load()
def test_digits_through_load():
    s = load("digits", split_seed=3)
    assert s.name == "digits" and not s.image and s.num_classes == 10
    assert s.train_x.dtype == torch.float32 and s.train_x.shape[1] == 64
    assert s.train_x.shape[0] + s.val_x.shape[0] + s.test_x.shape[0] == 1797
    assert torch.equal(load("digits", split_seed=3).val_y, s.val_y)
    assert not torch.equal(load("digits", split_seed=4).val_y, s.val_y)


def test_gaussian_through_load_carries_true_posterior():
    s = load("gaussian", split_seed=1)
    assert s.name == "gaussian" and not s.image and s.num_classes == 5 and s.train_x.shape[1] == 2
    eta = s.extra["test_eta"]
    assert eta.shape == (s.test_x.shape[0], 5)
    torch.testing.assert_close(eta.sum(1), torch.ones(eta.shape[0], dtype=eta.dtype))


def test_toy_splits_feed_the_device_loader_and_mlp():
    from calib import models
    from calib.data import DeviceLoader

    s = load("digits")
    loader = DeviceLoader(s.train_x, s.train_y, 64, mean=s.mean, std=s.std, device="cpu")
    x, y = next(iter(loader))
    model = models.make("mlp", s.num_classes, in_features=s.train_x.shape[1])
    assert model(x).shape == (64, 10) and y.dtype == torch.int64
