"""Cost of one gamma-Net meta-training step against a plain focal-loss step (issue 6, item 4).

For each model, on one batch of the same shape, three steps:

* ``focal step``: forward, focal loss (gamma = 1), backward, SGD step (the baseline);
* ``meta step, exact``: :func:`calib.train.meta.meta_step` with ``order="second"`` (look-ahead
  with ``create_graph=True``, SECE on a meta-validation batch, hypergradient through the
  inner gradient, gamma-Net step, then the real backbone step);
* ``meta step, first order``: the same with ``order="first"`` (the mixed second derivative
  by a central difference of first derivatives: two extra forward passes instead of a
  double backward).

Run: ``python benchmarks/meta.py [--batch 128] [--repeat 5]``. Prints the median time per
step and the ratio to the focal step. Models: the MLP on digit-sized inputs and the small
CNN on 32x32 images; on a GPU also the CIFAR ResNet-20 and ResNet-18 (001's backbone).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import header, median_time, row  # noqa: E402

from calib import models, profile  # noqa: E402
from calib.losses import focal_loss  # noqa: E402
from calib.train.meta import GammaNet, meta_step  # noqa: E402


def _cases(device: torch.device) -> list[tuple[str, torch.nn.Module, tuple[int, ...]]]:
    cases = [
        ("mlp (64-128-10)", models.make("mlp", 10, in_features=64, hidden=128), (64,)),
        ("small_cnn (32x32)", models.make("small_cnn", 10), (3, 32, 32)),
    ]
    if device.type == "cuda":
        cases += [("resnet20 (CIFAR)", models.make("resnet20", 10), (3, 32, 32)),
                  ("resnet18 (CIFAR, 001's backbone)", models.make("resnet18", 10), (3, 32, 32))]
    return cases


def bench(batch: int, repeat: int) -> None:
    device = profile.device()
    header(f"gamma-Net meta step vs focal step, batch {batch}, on {device}")
    for name, model, shape in _cases(device):
        model = model.to(device).train()
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(batch, *shape, generator=g).to(device)
        xm = torch.randn(batch, *shape, generator=g).to(device)
        y = torch.randint(0, 10, (batch,), generator=g).to(device)
        ym = torch.randint(0, 10, (batch,), generator=g).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        gnet = GammaNet(model.classifier.in_features, 10).to(device)
        mopt = torch.optim.Adam(gnet.parameters(), lr=1e-4)

        def focal_step() -> None:
            loss = focal_loss(model(x), y, gamma=1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        base = median_time(focal_step, repeat=repeat)
        print(f"-- {name}")
        print(row("focal step (baseline)", base, base))
        for order, label in (("second", "meta step, exact second order"), ("first", "meta step, first order (FD)")):
            t = median_time(lambda: meta_step(model, gnet, x, y, xm, ym, opt, mopt, order=order), repeat=repeat)
            print(row(label, t, base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bench(args.batch, args.repeat)


if __name__ == "__main__":
    main()
