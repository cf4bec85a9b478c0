"""Softmax outputs of real CIFAR networks, shipped with the package: calibration on real data, offline.

Five records from the examples of the netcal library (github.com/EFS-OpenSource/
calibration-framework, Apache License 2.0): the softmax outputs of three networks on the
10,000 CIFAR-10 or CIFAR-100 test images, with the true labels. They are over-confident in
the way Guo et al. (2017, §3) describe, so ECE, reliability diagrams and temperature
scaling can be shown on real networks without training one.

===========================  ===============  =========  ========
name                         network          data       accuracy
===========================  ===============  =========  ========
``wrn16_4_cifar10``          WRN-16-4         CIFAR-10   91.09 %
``lenet5_cifar10``           LeNet-5          CIFAR-10   53.08 %
``wrn16_4_cifar100``         WRN-16-4         CIFAR-100  75.43 %
``densenet_bc100_cifar100``  DenseNet-BC-100  CIFAR-100  75.41 %
``lenet5_cifar100``          LeNet-5          CIFAR-100  12.46 %
===========================  ===============  =========  ========

Stored as float16 (``calib/data/cifar_softmax/NAME.npz``: ``probs`` N x K, ``labels`` uint8;
4.2 MB in all): every probability is within float16 rounding (relative 2**-11) of netcal's
float32 value, values below 2**-24 are stored as 2**-24 so ``log(probs)`` is finite, and
every row keeps its float32 top class, so accuracies are exact. ``NOTICE.md`` beside the
files carries the attribution and the licence; ``tools/build_cifar_predictions.py`` rebuilds
them from netcal's files.

``log(probs)`` serve as logits: a temperature rescales them, ``softmax(log p / T)``
(Guo et al. 2017, §4.2), since log-probabilities differ from the network's logits only by a
constant per row.
"""
from __future__ import annotations

from importlib import resources
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["cifar_predictions", "cifar_prediction_names", "CIFAR_PREDICTIONS", "PredictionRecord"]

Tensor = torch.Tensor
FOLDER = "cifar_softmax"


class PredictionRecord(NamedTuple):
    """One shipped record: the network, the dataset, its classes and netcal's file name."""

    network: str
    data: str
    num_classes: int
    source: str


CIFAR_PREDICTIONS: dict[str, PredictionRecord] = {
    "wrn16_4_cifar10": PredictionRecord("WRN-16-4", "cifar10", 10, "wideresnet-16-4-cifar-10.npz"),
    "lenet5_cifar10": PredictionRecord("LeNet-5", "cifar10", 10, "lenet-5-cifar-10.npz"),
    "wrn16_4_cifar100": PredictionRecord("WRN-16-4", "cifar100", 100, "wideresnet-16-4-cifar-100.npz"),
    "densenet_bc100_cifar100": PredictionRecord("DenseNet-BC-100", "cifar100", 100, "densenet-bc-100-cifar-100.npz"),
    "lenet5_cifar100": PredictionRecord("LeNet-5", "cifar100", 100, "lenet-5-cifar-100.npz"),
}
"""Every shipped record by name (:func:`cifar_prediction_names`)."""


def cifar_prediction_names() -> list[str]:
    """Names :func:`cifar_predictions` accepts, in the order of the table above."""
    return list(CIFAR_PREDICTIONS)


def cifar_predictions(name: str, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``(probs, labels)`` of record ``name`` on the 10,000 CIFAR test images.

    ``probs`` is ``float32`` ``(10000, K)``, the stored float16 values renormalised so every
    row sums to 1 in float32; ``labels`` is ``int64`` ``(10000,)``. Both on ``device``
    (default CPU). Unknown names raise ``ValueError`` listing the names.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in CIFAR_PREDICTIONS:
        raise ValueError(f"unknown prediction record {name!r}; choose one of {', '.join(CIFAR_PREDICTIONS)}")
    path = resources.files(__package__).joinpath(FOLDER, f"{name}.npz")
    try:
        with path.open("rb") as fh, np.load(fh) as d:
            h, y = d["probs"], d["labels"]
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing from this installation of calib (it ships in the "
                                f"package data; reinstall calib)") from None
    probs = torch.from_numpy(h.astype(np.float32))
    probs /= probs.sum(1, keepdim=True)
    labels = torch.from_numpy(y.astype(np.int64))
    return probs.to(device or "cpu"), labels.to(device or "cpu")
