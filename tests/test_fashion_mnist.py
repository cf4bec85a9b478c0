"""Fashion-MNIST: the IDX reader, the folders searched, corrupt files, train_size subsets, cnn5, the trainer."""
from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib import models
from calib.data import DATASET_STATS, IDXError, channel_stats, fake, idx, load, split_indices, stratified_subset
from calib.data.vision import DownloadError

DEBIAN = Path(idx.SYSTEM_DIRS[0])


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No Debian folder, no $CALIB_DATA, and a working directory without data/: only what a test writes."""
    monkeypatch.setattr(idx, "SYSTEM_DIRS", ())
    monkeypatch.delenv("CALIB_DATA", raising=False)
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def folder(root: Path) -> Path:
    return root / "fashion-mnist"


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("compress", [True, False])
def test_round_trip(isolated, compress):
    raw = fake.write_fashion_mnist(isolated, n_train=40, n_test=12, compress=compress)
    s = load("fashion_mnist", isolated, val_size=10, split_seed=3)
    assert s.name == "fashion_mnist" and s.image and s.num_classes == 10
    assert s.train_x.shape == (30, 1, 28, 28) and s.val_x.shape == (10, 1, 28, 28) and s.test_x.shape == (12, 1, 28, 28)
    assert s.train_x.dtype == torch.uint8 and s.train_y.dtype == torch.int64
    tr, va = split_indices(40, 10, 3)
    x, y = (torch.from_numpy(a) for a in raw["train"])
    assert torch.equal(s.train_x[:, 0], x[tr]) and torch.equal(s.val_x[:, 0], x[va])
    assert torch.equal(s.train_y, y[tr].long()) and torch.equal(s.test_y, torch.from_numpy(raw["t10k"][1]).long())
    assert (s.mean, s.std) == DATASET_STATS["fashion_mnist"]


def test_read_idx_is_the_inverse_of_write_idx(tmp_path):
    a = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    for name in ("a.idx", "a.idx.gz"):
        assert np.array_equal(idx.read_idx(idx.write_idx(tmp_path / name, a), 3), a)
    assert (tmp_path / "a.idx.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert (tmp_path / "a.idx").read_bytes()[:8] == bytes([0, 0, 8, 3, 0, 0, 0, 2])
    with pytest.raises(TypeError, match="uint8"):
        idx.write_idx(tmp_path / "b", a.astype(np.int32))


def test_torchvision_layout_is_found(isolated):
    fake.write_fashion_mnist(isolated / "tv", compress=False)
    (isolated / "FashionMNIST").mkdir()
    folder(isolated / "tv").rename(isolated / "FashionMNIST" / "raw")
    assert idx.find_fashion_mnist(isolated) == isolated / "FashionMNIST" / "raw"
    assert load("fashion_mnist", isolated, val_size=5).train_x.shape[0] == 55


# ------------------------------------------------------------------ where the files are looked for
def test_search_order(isolated, monkeypatch):
    env, system, cwd_data = isolated / "env", isolated / "system", isolated / "data"
    fake.write_fashion_mnist(env, n_train=20)
    fake.write_fashion_mnist(system, n_train=30)
    fake.write_fashion_mnist(cwd_data, n_train=40)
    monkeypatch.setattr(idx, "SYSTEM_DIRS", (str(folder(system)),))
    monkeypatch.setenv("CALIB_DATA", str(env))
    n = lambda: load("fashion_mnist", val_size=5).train_x.shape[0] + 5  # noqa: E731
    assert n() == 20                              # $CALIB_DATA first
    monkeypatch.delenv("CALIB_DATA")
    (cwd_data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz").rename(isolated / "aside")  # data/ incomplete
    assert n() == 30                              # then Debian's folder
    monkeypatch.setattr(idx, "SYSTEM_DIRS", ())
    with pytest.raises(FileNotFoundError):
        n()                                       # an incomplete folder never counts
    (isolated / "aside").rename(cwd_data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz")
    assert n() == 40                              # then data/
    monkeypatch.setattr(idx, "SYSTEM_DIRS", (str(folder(system)),))
    assert load("fashion_mnist", env, val_size=5).train_x.shape[0] == 15   # an explicit root first


def test_missing_files_say_how_to_get_them(isolated):
    with pytest.raises(FileNotFoundError) as info:
        load("fashion_mnist", isolated / "nowhere")
    msg = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "--download" in msg
    assert str(isolated / "nowhere" / "fashion-mnist") in msg and "train-images-idx3-ubyte" in msg


def test_download_fetches_the_four_files_or_reports_failure(isolated, monkeypatch):
    from calib.data import vision

    calls = []

    def fake_download(url, root, filename, md5):
        calls.append((url, filename, md5))
        if len(calls) == 1:            # write all four at the first call; later files already exist
            fake.write_fashion_mnist(Path(root).parent, n_train=20)

    monkeypatch.setattr(vision, "_download_url", fake_download)
    s = load("fashion_mnist", isolated, val_size=5, download=True)
    assert s.train_x.shape[0] == 15 and calls[0][0] == idx.FASHION_MNIST_URL + "train-images-idx3-ubyte.gz"
    assert len(calls[0][2]) == 32       # the MD5 of the official file

    def offline(url, root, filename, md5):
        raise OSError("no network")

    monkeypatch.setattr(vision, "_download_url", offline)
    with pytest.raises(DownloadError, match="no network") as info:
        load("fashion_mnist", isolated / "other", download=True)
    assert idx.FASHION_MNIST_URL in str(info.value)


def test_the_download_needs_no_torchvision_and_checks_the_md5(tmp_path, monkeypatch):
    """The course extra leaves torchvision out: Assignment 6 downloads with urllib alone."""
    import hashlib
    import sys

    from calib.data import vision

    monkeypatch.setitem(sys.modules, "torchvision", None)  # importing it would raise
    src = tmp_path / "served.gz"
    src.write_bytes(b"fashion" * 1000)
    md5 = hashlib.md5(src.read_bytes()).hexdigest()
    vision._download_url(src.as_uri(), str(tmp_path / "got"), "f.gz", md5)
    assert (tmp_path / "got" / "f.gz").read_bytes() == src.read_bytes()
    with pytest.raises(OSError, match="MD5"):
        vision._download_url(src.as_uri(), str(tmp_path / "bad"), "f.gz", "0" * 32)
    assert list((tmp_path / "bad").iterdir()) == []  # no partial file left behind


# ------------------------------------------------------------------ corrupt files: one line naming the file
def _labels(root: Path) -> Path:
    return folder(root) / "train-labels-idx1-ubyte.gz"


def _images(root: Path) -> Path:
    return folder(root) / "train-images-idx3-ubyte.gz"


def _gz_corrupt_crc(path: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[-8] ^= 0xFF                      # the CRC32 in the gzip trailer
    path.write_bytes(bytes(blob))


CORRUPTIONS = {
    "bad magic": (lambda r: idx.write_idx(_images(r), np.zeros(60, np.uint8)), "train-images", "bad magic number"),
    "truncated data": (lambda r: _images(r).write_bytes(gzip.compress(gzip.decompress(_images(r).read_bytes())[:-100])),
                       "train-images", "wrong length.*truncated"),
    "trailing bytes": (lambda r: _labels(r).write_bytes(gzip.compress(gzip.decompress(_labels(r).read_bytes()) + b"xx")),
                       "train-labels", "trailing bytes"),
    "truncated gzip": (lambda r: _images(r).write_bytes(_images(r).read_bytes()[:500]), "train-images", "gzip"),
    "bad gzip crc": (lambda r: _gz_corrupt_crc(_labels(r)), "train-labels", "not a valid gzip"),
    "plain file named .gz": (lambda r: _labels(r).write_bytes(gzip.decompress(_labels(r).read_bytes())),
                             "train-labels", "not gzip-compressed"),
    "empty file": (lambda r: _labels(r).write_bytes(b""), "train-labels", "empty file"),
    "too short": (lambda r: _labels(r).write_bytes(gzip.compress(b"\0\0")), "train-labels", "too short"),
    "header cut short": (lambda r: _images(r).write_bytes(gzip.compress(bytes([0, 0, 8, 3, 0, 0]))), "train-images",
                         "header cut short"),
    "labels out of range": (lambda r: idx.write_idx(_labels(r), np.r_[np.zeros(59), 12].astype(np.uint8)),
                            "train-labels", "0..9, got 12 at position 59"),
    "count mismatch": (lambda r: idx.write_idx(_labels(r), np.zeros(59, np.uint8)), "train-images.*59 labels",
                       "59 labels"),
    "wrong image size": (lambda r: idx.write_idx(_images(r), np.zeros((60, 28, 27), np.uint8)), "train-images",
                         "28 x 27"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_file_is_one_line_naming_it(isolated, case):
    corrupt, names, problem = CORRUPTIONS[case]
    fake.write_fashion_mnist(isolated)
    corrupt(isolated)
    with pytest.raises(IDXError) as info:
        load("fashion_mnist", isolated, val_size=5)
    msg = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in msg
    assert re.search(names, msg) and re.search(problem, msg), msg


def test_corrupt_file_through_the_cli_is_one_line(isolated, capsys):
    from calib.cli import main

    fake.write_fashion_mnist(isolated)
    _images(isolated).write_bytes(_images(isolated).read_bytes()[:300])
    with pytest.raises(SystemExit) as info:
        main(["train", "--data", "fashion_mnist", "--model", "cnn5", "--data-root", str(isolated),
              "--val-size", "5", "--epochs", "1", "--no-progress", "--out", str(isolated / "run")])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and "train-images-idx3-ubyte.gz" in err, err
    assert "Traceback" not in err


# ------------------------------------------------------------------ training-set size
def test_train_size_is_a_balanced_seeded_subset(isolated):
    fake.write_fashion_mnist(isolated, n_train=200)
    full = load("fashion_mnist", isolated, val_size=20, split_seed=1)
    s = load("fashion_mnist", isolated, val_size=20, split_seed=1, train_size=50)
    assert s.train_x.shape[0] == 50 and torch.equal(s.val_x, full.val_x) and torch.equal(s.test_y, full.test_y)
    assert torch.bincount(s.train_y, minlength=10).tolist() == [5] * 10
    rows = {bytes(r.numpy().tobytes()) for r in full.train_x}
    assert all(bytes(r.numpy().tobytes()) in rows for r in s.train_x)    # drawn from the training split only
    again = load("fashion_mnist", isolated, val_size=20, split_seed=1, train_size=50)
    other = load("fashion_mnist", isolated, val_size=20, split_seed=2, train_size=50)
    assert torch.equal(again.train_x, s.train_x) and not torch.equal(other.train_x, s.train_x)
    with pytest.raises(ValueError, match="train_size must be <= 180"):
        load("fashion_mnist", isolated, val_size=20, train_size=181)
    with pytest.raises(TypeError, match="train_size"):
        load("fashion_mnist", isolated, train_size=2.5)
    with pytest.raises(ValueError, match="train_size does not apply"):
        load("digits", train_size=10)


def test_test_size_is_a_balanced_seeded_subset_of_the_test_split(isolated):
    fake.write_fashion_mnist(isolated, n_train=200, n_test=60)
    full = load("fashion_mnist", isolated, val_size=20, split_seed=1)
    s = load("fashion_mnist", isolated, val_size=20, split_seed=1, test_size=30)
    assert s.test_x.shape[0] == 30 and torch.equal(s.train_x, full.train_x) and torch.equal(s.val_x, full.val_x)
    assert torch.bincount(s.test_y, minlength=10).tolist() == [3] * 10
    rows = {bytes(r.numpy().tobytes()) for r in full.test_x}
    assert all(bytes(r.numpy().tobytes()) in rows for r in s.test_x)     # drawn from the test split only
    again = load("fashion_mnist", isolated, val_size=20, split_seed=1, test_size=30)
    assert torch.equal(again.test_x, s.test_x) and torch.equal(again.test_y, s.test_y)
    n_test = full.test_y.numel()
    with pytest.raises(ValueError, match=f"test_size must be <= {n_test} \\(the test examples\\)"):
        load("fashion_mnist", isolated, val_size=20, test_size=n_test + 1)
    with pytest.raises(ValueError, match="test_size does not apply"):
        load("digits", test_size=10)


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 30), min_size=2, max_size=6), frac=st.floats(0, 1), seed=st.integers(0, 99))
def test_stratified_subset_property(counts, frac, seed):
    labels = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    labels = labels[torch.randperm(labels.numel(), generator=torch.Generator().manual_seed(seed))]
    n = labels.numel()
    if n == 0:
        return
    size = max(1, round(frac * n))
    sub = stratified_subset(labels, size, seed)
    assert sub.numel() == size and sub.unique().numel() == size and torch.equal(sub, sub.sort().values)
    got = torch.bincount(labels[sub], minlength=len(counts))
    have = torch.tensor(counts)
    # balanced: a class short of the largest share has given all it has
    assert bool(((got >= got.max() - 1) | (got == have)).all()), (got, have)
    assert torch.equal(stratified_subset(labels, size, seed), sub)


def test_smoke_mode_caps_fashion_mnist(isolated, monkeypatch):
    from calib import profile

    fake.write_all(isolated, ["fashion_mnist"])
    monkeypatch.setenv("CALIB_SMOKE", "1")
    s = load("fashion_mnist", isolated, train_size=10_000)
    caps = profile.SMOKE_CAPS
    assert s.train_x.shape[0] <= caps["train"] and s.val_x.shape[0] <= caps["eval"] and s.test_x.shape[0] <= caps["eval"]
    assert s.val_x.shape[0] > 0


# ------------------------------------------------------------------ the real files, where installed
@pytest.mark.skipif(not (DEBIAN / "train-images-idx3-ubyte.gz").is_file(),
                    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist(monkeypatch):
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    monkeypatch.delenv("CALIB_DATA", raising=False)
    s = load("fashion_mnist", "/nonexistent-root", train_size=10_000)
    assert (s.train_x.shape[0], s.val_x.shape[0], s.test_x.shape[0]) == (10_000, 5_000, 10_000)
    assert torch.bincount(s.train_y).tolist() == [1000] * 10
    assert torch.bincount(s.test_y).tolist() == [1000] * 10
    full = load("fashion_mnist", "/nonexistent-root")
    mean, std = channel_stats(torch.cat([full.train_x, full.val_x]))
    assert mean == pytest.approx(DATASET_STATS["fashion_mnist"][0], abs=1e-4)
    assert std == pytest.approx(DATASET_STATS["fashion_mnist"][1], abs=1e-4)


# ------------------------------------------------------------------ models for 1 x 28 x 28 and the trainer
def test_cnn5_and_one_channel_resnets():
    net = models.make("cnn5", 10)
    assert models.count_parameters(net) == 98_042        # the ~100k-parameter net of the quick profile
    x = torch.randn(3, 1, 28, 28)
    assert net(x).shape == (3, 10) and net.features(x).shape == (3, 64)
    assert models.count_parameters(models.make("cnn5", 10, width=8)) < 30_000
    for name in ("resnet20", "resnet110", "resnet18"):
        assert models.make(name, 10, in_channels=1)(x).shape == (3, 10)
    with pytest.raises(ValueError, match="width"):
        models.make("cnn5", 10, width=0)


def test_trainer_on_fashion_mnist_with_train_size(isolated):
    from calib.train import TrainConfig, Trainer

    fake.write_fashion_mnist(isolated, n_train=80, n_test=20)
    cfg = TrainConfig(data="fashion_mnist", model="cnn5", model_kwargs={"width": 4}, data_root=str(isolated),
                      val_size=20, train_size=30, test_size=10, epochs=1, milestones=(), batch_size=10, lr=0.05,
                      progress=False)
    trainer = Trainer(cfg)
    assert trainer.data.train_x.shape == (30, 1, 28, 28) and not trainer.augment
    assert trainer.data.test_x.shape[0] == 10 and torch.bincount(trainer.data.test_y).max() <= 1
    metrics = trainer.fit()
    assert 0 <= metrics["pre_ts"]["accuracy"] <= 1 and np.isfinite(metrics["pre_ts"]["nll"])
    for name in ("train_size", "test_size"):
        with pytest.raises(ValueError, match=name):
            TrainConfig(**{name: 0})


def test_sweep_loads_the_train_size_subset(isolated):
    from calib.experiments import sweep
    from calib.train import TrainConfig

    fake.write_fashion_mnist(isolated, n_train=80, n_test=20)
    base = dict(data="fashion_mnist", model="cnn5", data_root=str(isolated), val_size=20, epochs=1, milestones=())
    assert sweep._data_for(TrainConfig(**base, train_size=30)).train_x.shape[0] == 30
    assert sweep._data_for(TrainConfig(**base, test_size=10)).test_x.shape[0] == 10
    assert sweep._data_for(TrainConfig(**base)).test_x.shape[0] == 20  # a different split size, not the cache
    assert sweep._data_for(TrainConfig(**base)).train_x.shape[0] == 60      # cached apart
