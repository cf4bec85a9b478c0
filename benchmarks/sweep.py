"""Per-cell overhead of the sweep runner on the offline data, side by side.

Three ways to train the same digits + MLP cell for ``--epochs`` epochs:

* ``train steps only``: the :meth:`calib.train.Trainer.train_step` calls of those epochs, nothing else;
* ``Trainer.fit, no run dir``: plus the per-epoch validation pass and the final metrics
  (both temperature fits);
* ``sweep cell``: a whole :func:`calib.experiments.sweep.sweep` cell: run directory, checkpoints,
  history, logits, ``metrics.json``, the results/summary tables.

Each is timed as the median over ``--repeat`` fresh cells (new seed, new directory) after a
warm-up, so imports and the data load (cached per process by the sweep) are excluded.
Ratios are against the bare train steps (>1 means slower). Run: ``python benchmarks/sweep.py``.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import header, median_time, row  # noqa: E402

from calib.experiments import sweep as sw  # noqa: E402
from calib.train import TrainConfig, Trainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    header(f"one sweep cell: digits + MLP({args.hidden}), {args.epochs} epochs, CPU")
    train = dict(epochs=args.epochs, batch_size=64, lr=0.05, model_kwargs={"hidden": args.hidden})
    seeds = itertools.count()
    tmp = Path(tempfile.mkdtemp(prefix="calib-bench-sweep-"))

    def config(**kw) -> TrainConfig:
        return TrainConfig.from_preset("cifar", "quick", data="digits", model="mlp", progress=False,
                                       seed=next(seeds), **train, **kw)

    data = sw._data_for(config())

    def steps_only() -> None:
        trainer = Trainer(config(), data=data)
        for _ in range(args.epochs):
            for x, y in trainer.train_loader:
                trainer.train_step(x, y)

    def fit_no_dir() -> None:
        Trainer(config(), data=data).fit()

    def sweep_cell() -> None:
        sw.sweep(tmp / f"s{next(seeds)}", ["ce"], [0], progress=False, **train)

    base = None
    for name, fn in (("train steps only", steps_only), ("Trainer.fit, no run dir", fit_no_dir),
                     ("sweep cell (run dir, checkpoints, tables)", sweep_cell)):
        sec = median_time(fn, repeat=args.repeat, warmup=1)
        base = base or sec
        print(row(name, sec, base, width=46))
    print(f"({torch.get_num_threads()} threads; the difference between the last two rows is the "
          "sweep's per-cell bookkeeping)")


if __name__ == "__main__":
    main()
