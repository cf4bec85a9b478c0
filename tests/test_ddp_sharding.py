"""When W processes see exactly the batches of one process (issue 14, DDP statement).

Under ``torchrun`` every rank walks the same seeded permutation and keeps every W-th
index (``calib.data.DeviceLoader(rank=r, world_size=W)``), so global batch ``j`` is the
union of the ranks' ``j``-th batches. This is checked here exactly, on the samples
themselves: when the training-set size N divides by W, the union of the ranks' batches
equals the one-process batch, step by step and epoch by epoch (each rank holds an equal
share, so DDP's gradient average is the global batch mean: the trajectories agree up to
float reduction order, tests/test_ddp.py). When it does not, the last ``N mod W`` samples
of each epoch's permutation are left out on every rank (equal shares keep DDP's average
exact), so the run differs from one process in those samples.
"""
from __future__ import annotations

import pytest
import torch

from calib.data import DeviceLoader


def batches(n: int, batch: int, rank: int = 0, world: int = 1, epochs: int = 2) -> list[list[set[int]]]:
    x = torch.arange(n, dtype=torch.float32)[:, None]
    y = torch.zeros(n, dtype=torch.long)
    loader = DeviceLoader(x, y, batch // world, shuffle=True, seed=3, device="cpu", rank=rank, world_size=world)
    out = []
    for _ in range(epochs):
        out.append([set(int(v) for v in xb[:, 0].tolist()) for xb, _ in loader])
    return out


@pytest.mark.parametrize("n, batch, world", [(96, 16, 2), (100, 20, 4), (90, 12, 3), (64, 16, 2)])
def test_divisible_training_set_gives_the_one_process_batches(n, batch, world):
    one = batches(n, batch)
    ranks = [batches(n, batch, r, world) for r in range(world)]
    for e, epoch in enumerate(one):
        assert [len(r[e]) for r in ranks] == [len(epoch)] * world
        for j, b in enumerate(epoch):
            shares = [r[e][j] for r in ranks]
            assert set().union(*shares) == b  # the same samples in the same step
            assert len({len(s) for s in shares}) == 1  # equal shares: the DDP average is the global mean


@pytest.mark.parametrize("n, batch, world", [(97, 16, 2), (101, 20, 4)])
def test_otherwise_the_last_n_mod_w_samples_of_each_epoch_are_left_out(n, batch, world):
    one = batches(n, batch)
    ranks = [batches(n, batch, r, world) for r in range(world)]
    for e, epoch in enumerate(one):
        seen = set().union(*(b for r in ranks for b in r[e]))
        assert len(seen) == n - n % world  # dropped on every rank
        assert seen < set().union(*epoch)
