"""calib.data.DeviceLoader: shapes, normalisation, augmentation against a slow reference,
epoch coverage, determinism and exact resume from state_dict."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.data import DeviceLoader
from calib.data.loader import random_crop_flip


def images(n: int = 50, c: int = 3, h: int = 8, w: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def ids(n: int) -> torch.Tensor:
    """Labels equal to the example index, so a batch tells which examples it holds."""
    return torch.arange(n)


def collect(loader, batches=None):
    it = iter(loader) if batches is None else itertools.islice(iter(loader), batches)
    return [(x.clone(), y.clone()) for x, y in it]


def reference_crop_flip(img: torch.Tensor, oy: int, ox: int, flip: bool, padding: int) -> torch.Tensor:
    """torchvision's per-image ops (pad, crop, hflip): the slow reference."""
    h, w = img.shape[-2:]
    out = TF.crop(TF.pad(img, [padding]), oy, ox, h, w)
    return TF.hflip(out) if flip else out


# ------------------------------------------------------------------ shapes and values
def test_shapes_dtypes_and_length():
    loader = DeviceLoader(images(50), ids(50), 16, device="cpu")
    batches = collect(loader)
    assert len(loader) == len(batches) == 4
    assert [b[0].shape[0] for b in batches] == [16, 16, 16, 2]
    x, y = batches[0]
    assert x.shape == (16, 3, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert len(DeviceLoader(images(50), ids(50), 16, drop_last=True, device="cpu")) == 3


def test_normalisation_matches_formula():
    x, mean, std = images(10), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    loader = DeviceLoader(x, ids(10), 10, shuffle=False, mean=mean, std=std, device="cpu")
    (out, y), = collect(loader)
    expected = (x.double() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(y, ids(10))


def test_without_statistics_images_are_scaled_to_unit_interval():
    x = images(6)
    (out, _), = collect(DeviceLoader(x, ids(6), 6, shuffle=False, device="cpu"))
    torch.testing.assert_close(out, x.float() / 255)


def test_float_features_per_feature_normalisation():
    x = torch.randn(30, 4, dtype=torch.float64)
    loader = DeviceLoader(x, ids(30), 30, shuffle=False, mean=[1, 2, 3, 4], std=[1, 2, 4, 8], device="cpu")
    (out, _), = collect(loader)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), (x - torch.tensor([1., 2, 3, 4])) / torch.tensor([1., 2, 4, 8]),
                               rtol=1e-5, atol=1e-6)


def test_empty_statistics_mean_no_normalisation():
    x = torch.randn(5, 3)
    (out, _), = collect(DeviceLoader(x, ids(5), 5, shuffle=False, mean=(), std=(), device="cpu"))
    assert torch.equal(out, x)


def test_channels_last_output():
    (out, _), = collect(DeviceLoader(images(4), ids(4), 4, shuffle=False, channels_last=True, device="cpu"))
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, images(4).float() / 255)


def test_default_device_is_profile_device():
    from calib import profile

    loader = DeviceLoader(images(4), ids(4), 2)
    assert loader.device == profile.device()
    assert next(iter(loader))[0].device.type == profile.device().type


# ------------------------------------------------------------------ augmentation
def test_crop_flip_against_torchvision_reference():
    x = images(12, h=10, w=7)
    oy = torch.randint(0, 9, (12,), generator=torch.Generator().manual_seed(1))
    ox = torch.randint(0, 9, (12,), generator=torch.Generator().manual_seed(2))
    flip = torch.arange(12) % 2 == 0
    out = random_crop_flip(x, oy, ox, flip, 4)
    for b in range(12):
        assert torch.equal(out[b], reference_crop_flip(x[b], int(oy[b]), int(ox[b]), bool(flip[b]), 4))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 4), c=st.integers(1, 3), h=st.integers(1, 6), w=st.integers(1, 6),
       padding=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_crop_flip_property(n, c, h, w, padding, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    oy, ox = (torch.randint(0, 2 * padding + 1, (n,), generator=g) for _ in range(2))
    flip = torch.randint(0, 2, (n,), generator=g).bool()
    out = random_crop_flip(x, oy, ox, flip, padding)
    for b in range(n):
        assert torch.equal(out[b], reference_crop_flip(x[b], int(oy[b]), int(ox[b]), bool(flip[b]), padding))


def test_centre_offset_without_flip_is_identity():
    x = images(5)
    four = torch.full((5,), 4)
    assert torch.equal(random_crop_flip(x, four, four, torch.zeros(5, dtype=torch.bool), 4), x)


def test_loader_augmentation_uses_its_draws_correctly():
    x = images(20)
    loader = DeviceLoader(x, ids(20), 8, augment=True, device="cpu", seed=5)
    order, aug = loader._draws(0)
    batches = collect(loader)
    out = torch.cat([b[0] for b in batches])
    assert torch.equal(torch.cat([b[1] for b in batches]), order)
    for k, i in enumerate(order.tolist()):
        ref = reference_crop_flip(x[i], int(aug[k, 0]), int(aug[k, 1]), bool(aug[k, 2]), 4)
        torch.testing.assert_close(out[k], ref.float() / 255)


def test_augmentation_draws_cover_every_offset_and_both_flips():
    loader = DeviceLoader(images(400), ids(400), 100, augment=True, device="cpu")
    _, aug = loader._draws(0)
    assert set(aug[:, 0].tolist()) == set(range(9)) == set(aug[:, 1].tolist())
    assert 0.4 < aug[:, 2].float().mean() < 0.6


# ------------------------------------------------------------------ epochs, seeds, resume
@pytest.mark.parametrize("augment", [False, True])
def test_every_sample_once_per_epoch(augment):
    loader = DeviceLoader(images(37), ids(37), 8, augment=augment, device="cpu")
    for _ in range(2):
        seen = torch.cat([y for _, y in loader])
        assert torch.equal(seen.sort().values, ids(37))
    assert loader.epoch == 2


def test_shuffle_changes_order_between_epochs_and_seeds():
    a = DeviceLoader(images(64), ids(64), 64, device="cpu", seed=0)
    e0, e1 = next(iter(a))[1], next(iter(a))[1]
    assert not torch.equal(e0, e1)
    b = DeviceLoader(images(64), ids(64), 64, device="cpu", seed=1)
    assert not torch.equal(next(iter(b))[1], e0)
    c = DeviceLoader(images(64), ids(64), 64, device="cpu", shuffle=False)
    assert torch.equal(next(iter(c))[1], ids(64))


def test_same_seed_same_batches():
    make = lambda: DeviceLoader(images(30), ids(30), 7, augment=True, device="cpu", seed=11)  # noqa: E731
    a, b = make(), make()
    for _ in range(3):
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_resume_mid_epoch_gives_identical_batches():
    make = lambda: DeviceLoader(images(40), ids(40), 6, augment=True, device="cpu", seed=3)  # noqa: E731
    a = make()
    collect(a)                             # epoch 0
    it = iter(a)
    for _ in range(3):                     # three batches into epoch 1 ...
        next(it)
    state = a.state_dict()                 # ... checkpoint here
    rest_a = [(x.clone(), y.clone()) for x, y in it] + collect(a)
    b = make()
    b.load_state_dict(state)
    rest_b = collect(b) + collect(b)
    assert len(rest_a) == len(rest_b) == (len(a) - 3) + len(a)
    for (xa, ya), (xb, yb) in zip(rest_a, rest_b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert a.epoch == b.epoch == 3


def test_resume_at_epoch_boundary():
    make = lambda: DeviceLoader(images(20), ids(20), 6, device="cpu", seed=9)  # noqa: E731
    a = make()
    collect(a)
    state = a.state_dict()
    assert state["epoch"] == 1 and state["position"] == 0
    b = make()
    b.load_state_dict(state)
    assert all(torch.equal(p[1], q[1]) for p, q in zip(collect(a), collect(b)))


def test_abandoned_iteration_starts_next_epoch():
    a = DeviceLoader(images(20), ids(20), 5, device="cpu")
    ref = DeviceLoader(images(20), ids(20), 5, device="cpu")
    collect(a, batches=2)                  # `break` after two batches of epoch 0
    collect(ref)
    assert torch.equal(torch.cat([y for _, y in a]), torch.cat([y for _, y in ref]))


def test_state_dict_mismatch_is_refused():
    a = DeviceLoader(images(20), ids(20), 5, device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        DeviceLoader(images(20), ids(20), 4, device="cpu").load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="position"):
        a.load_state_dict({"epoch": 0, "position": 99, "seed": 0})
    with pytest.raises(ValueError, match="epoch"):
        a.load_state_dict({"position": 0})


def test_data_parallel_shards_are_disjoint_and_equal_sized():
    shards = [DeviceLoader(images(23), ids(23), 4, device="cpu", rank=r, world_size=3) for r in range(3)]
    ys = [torch.cat([y for _, y in s]) for s in shards]
    assert len({len(s) for s in shards}) == 1 and all(len(y) == 7 for y in ys)
    union = torch.cat(ys)
    assert union.unique().numel() == 21   # 23 trimmed to a multiple of 3, no overlap


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs,err,match", [
    (dict(x=torch.randn(10, 3), augment=True), ValueError, "augment"),
    (dict(mean=(0.5, 0.5)), ValueError, "mean"),
    (dict(std=(0.2, 0.0, 0.2)), ValueError, "std"),
    (dict(y=torch.arange(10).float()), TypeError, "y"),
    (dict(y=torch.arange(9)), ValueError, "y"),
    (dict(y=torch.arange(10) - 1), ValueError, "y"),
    (dict(x=torch.full((10, 3), float("nan"))), ValueError, "NaN"),
    (dict(x=torch.zeros(0, 3, 4, 4, dtype=torch.uint8), y=torch.zeros(0, dtype=torch.long)), ValueError, "empty"),
    (dict(x=torch.zeros(10, 3, 4, 4, dtype=torch.int32)), TypeError, "dtype"),
    (dict(x=torch.zeros(10, 3, 4, dtype=torch.uint8)), ValueError, "shape"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(batch_size=2.0), TypeError, "batch_size"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(rank=2, world_size=2), ValueError, "rank"),
])
def test_bad_input(kwargs, err, match):
    args = dict(x=images(10, h=4, w=4), y=ids(10), batch_size=4, device="cpu")
    args.update(kwargs)
    with pytest.raises(err, match=match):
        DeviceLoader(args.pop("x"), args.pop("y"), args.pop("batch_size"), **args)


def test_numpy_input_is_accepted():
    x = np.random.default_rng(0).integers(0, 256, (6, 3, 4, 4), dtype=np.uint8)
    (out, y), = collect(DeviceLoader(x, np.arange(6), 6, shuffle=False, device="cpu"))
    torch.testing.assert_close(out, torch.from_numpy(x).float() / 255)
