"""DistributedDataParallel on CPU: 2 gloo processes under torchrun follow the 1-process trajectory.

Every rank walks the same seeded permutation and trains on its half of each global batch
(calib.data.DeviceLoader with rank/world_size); DDP averages the gradients, which for a
per-rank mean loss over equal halves is the gradient of the global batch mean. The two runs
therefore agree up to float summation order. Stated tolerance: per-epoch train loss and
validation NLL within 1e-5 relative, final weights within 1e-5 absolute.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
RTOL, ATOL = 1e-5, 1e-5

WORKER = textwrap.dedent(
    """
    import sys
    import torch
    from sklearn.datasets import load_digits
    from calib.data import Splits
    from calib.train import TrainConfig, Trainer

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    tr, va, te = perm[:1024], perm[1024:1280], perm[1280:1536]   # even sizes: no sample is trimmed
    data = Splits(x[tr], y[tr], x[va], y[va], x[te], y[te], num_classes=10, mean=(), std=(),
                  name="digits", image=False)
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": 32}, epochs=3, batch_size=64,
                      milestones=(), lr=0.1, seed=5, progress=False, out=sys.argv[1], device="cpu")
    Trainer(cfg, data=data).fit()
    """
)


def run(cmd: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CALIB_PROFILE": "quick"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available")
def test_two_gloo_processes_match_one(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    run([sys.executable, str(worker), str(tmp_path / "single")], tmp_path)
    run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(worker),
         str(tmp_path / "ddp")], tmp_path)
    one, two = history(tmp_path / "single"), history(tmp_path / "ddp")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two):
        for key in ("train_loss", "train_acc", "val_nll", "val_acc"):
            assert b[key] == pytest.approx(a[key], rel=RTOL), (a["epoch"], key)
    w1 = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=True)["model"]
    w2 = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)["model"]
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=ATOL)
    # the trajectory moved (so the agreement above is not trivial)
    assert one[-1]["train_loss"] < 0.75 * one[0]["train_loss"]
    m1 = json.loads((tmp_path / "single" / "metrics.json").read_text())
    m2 = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert m2["pre_ts"]["accuracy"] == pytest.approx(m1["pre_ts"]["accuracy"], abs=1 / 256)
