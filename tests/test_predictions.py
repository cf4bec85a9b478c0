"""calib.data.cifar_predictions: the shipped float16 CIFAR records against netcal's float32 originals."""
from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from calib import metrics
from calib.data import CIFAR_PREDICTIONS, cifar_prediction_names, cifar_predictions
from calib.data.predictions import FOLDER

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "calib" / "data" / FOLDER
NAMES = cifar_prediction_names()
# float16: 11 significant bits (relative step 2**-11 above 2**-14), absolute step 2**-24 below.
REL, ABS = 2.0 ** -11, 2.0 ** -24


def original(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(folder / CIFAR_PREDICTIONS[name].source) as d:
        return d["predictions"].astype(np.float64), d["ground_truth"]


def test_names_and_shapes():
    assert NAMES == ["wrn16_4_cifar10", "lenet5_cifar10", "wrn16_4_cifar100", "densenet_bc100_cifar100",
                     "lenet5_cifar100"]
    for name in NAMES:
        probs, labels = cifar_predictions(name)
        k = CIFAR_PREDICTIONS[name].num_classes
        assert probs.shape == (10_000, k) and probs.dtype == torch.float32
        assert labels.shape == (10_000,) and labels.dtype == torch.int64
        assert int(labels.min()) == 0 and int(labels.max()) == k - 1
        torch.testing.assert_close(probs.sum(1), torch.ones(10_000), atol=1e-6, rtol=0)   # renormalised
        assert bool((probs > 0).all())                  # floored at 2**-24: log(probs) is finite


def test_unknown_names_and_types():
    with pytest.raises(ValueError, match="wrn16_4_cifar10.*lenet5_cifar100"):
        cifar_predictions("resnet50_cifar10")
    with pytest.raises(TypeError, match="name"):
        cifar_predictions(3)


def test_shipped_rows_sum_to_one_within_float16():
    for name in NAMES:
        with np.load(SHIPPED / f"{name}.npz") as d:
            h, y = d["probs"], d["labels"]
        assert h.dtype == np.float16 and y.dtype == np.uint8
        k = h.shape[1]
        # each entry is within half a float16 step of a row that summed to 1 (to float32 precision)
        assert np.abs(h.astype(np.float64).sum(1) - 1).max() <= REL + k * ABS + 1e-6


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_against_netcal_originals(netcal_records, name):
    p, y = original(netcal_records, name)
    probs, labels = cifar_predictions(name)
    q = probs.double().numpy()
    assert np.array_equal(labels.numpy(), y)
    # half a float16 step (relative <= 2**-11), one more step (<= 2**-10) where a tie was broken,
    # the 2**-24 floor, and renormalisation (relative ~1e-4): within 3 * 2**-11 relative + 2 * 2**-24
    err = np.abs(q - p)
    assert (err <= 3 * REL * p + 2 * ABS).all(), float((err / (REL * p + ABS)).max())
    assert np.array_equal(q.argmax(1), p.argmax(1))          # every row keeps its prediction
    assert (q.argmax(1) == y).mean() == (p.argmax(1) == y).mean()
    # the calibration numbers the book shows do not move
    ours = metrics.ece(probs, labels, n_bins=15)
    theirs = metrics.ece(torch.from_numpy(p).float(), torch.from_numpy(y), n_bins=15)
    assert abs(float(ours) - float(theirs)) < 1e-3


def test_the_records_are_over_confident_real_networks():
    """DenseNet-BC-100 on CIFAR-100: 75% accurate at 90% mean confidence (Guo et al. 2017's observation)."""
    probs, labels = cifar_predictions("densenet_bc100_cifar100")
    conf, acc = probs.max(1).values.mean(), (probs.argmax(1) == labels).float().mean()
    assert float(acc) == pytest.approx(0.7541) and float(conf) > float(acc) + 0.1
    assert metrics.ece(probs, labels) > 0.1


def test_package_data_ships_files_notice_and_licence():
    pkg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["calib.data"]
    for pattern in (f"{FOLDER}/*.npz", f"{FOLDER}/NOTICE.md", f"{FOLDER}/LICENSE-Apache-2.0.txt"):
        assert pattern in pkg
    notice = (SHIPPED / "NOTICE.md").read_text()
    assert "Apache License" in notice and "EFS-OpenSource/calibration-framework" in notice
    assert all(CIFAR_PREDICTIONS[n].source in notice for n in NAMES)
    assert "Version 2.0" in (SHIPPED / "LICENSE-Apache-2.0.txt").read_text()
    assert sorted(p.stem for p in SHIPPED.glob("*.npz")) == sorted(NAMES)
    assert sum(p.stat().st_size for p in SHIPPED.glob("*.npz")) < 5e6       # the wheel stays small
