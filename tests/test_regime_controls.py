"""Chapter 14's controls read from the ledger: SGD steps, the interaction of a loss's T with
CE's, the NLL rise after the drop, and the subset draws (issue 42), on a fake ledger."""
import csv
import json
import math
import pathlib

import numpy as np
import pytest

from calib.experiments import ledger
from calib.experiments import reduction_ledger as rl

B = ledger.PROTOCOLS["B"]
COLUMNS = ["loss", "settings", "seed", "accuracy", "nll", "ece", "ece_ts", "nll_ts", "temperature", "seconds"]


def fake_sweep(root: pathlib.Path, name: str, cells: list[tuple[str, str, int, float, list[float]]]) -> None:
    """A committed sweep with ``(loss, settings, seed, temperature, test-NLL curve)`` cells."""
    out = root / name
    (out / ledger.RUNS_DIR).mkdir(parents=True)
    (out / ledger.MANIFEST_FILE).write_text("{}")
    with open(out / ledger.RESULTS_FILE, "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        for loss, settings, seed, t, curve in cells:
            writer.writerow({"loss": loss, "settings": settings, "seed": seed, "accuracy": 0.9, "nll": 0.3,
                             "ece": 0.05, "ece_ts": 0.01, "nll_ts": 0.28, "temperature": t, "seconds": 1.0})
            cell = out / ledger.RUNS_DIR / f"fashion_mnist__cnn5__{loss}@{settings}__s{seed}"
            cell.mkdir()
            (cell / "metrics.json").write_text("{}")
            (cell / "config.json").write_text(json.dumps({"device": None}))
            (cell / "history.jsonl").write_text("\n".join(json.dumps({"test_nll": v}) for v in curve))


def test_sgd_steps_come_from_the_sweeps_batch_and_epochs():
    # the loader keeps the last partial batch: ceil(n / 128) steps an epoch
    assert rl.sgd_steps("regime", 10_000) == 79 * 40 == 3_160
    assert rl.sgd_steps("regime", 55_000) == 430 * 40 == 17_200
    assert rl.sgd_steps("regime", 2_500) == 20 * 40
    assert rl.sgd_steps("regime") == rl.sgd_steps("regime", 10_000)  # the sweep's --train-size
    assert rl.sgd_steps("equal_steps") == 79 * 220
    assert rl.first_drop("regime") == 20 and rl.first_drop("equal_steps") == 110
    assert rl.sgd_steps("regime", 10_000, after_epoch=rl.first_drop("regime")) == 79 * 20
    with pytest.raises(ValueError, match="after_epoch"):
        rl.sgd_steps("regime", 10_000, after_epoch=41)
    with pytest.raises(ValueError, match="train_size"):
        rl.sgd_steps("regime", 0)


def test_a_draw_is_read_apart_from_the_protocol_and_grouped_in_the_grid():
    assert rl.protocol_of(f"{B},train_size=2500,split_seed=2") == "B"
    assert rl.draw_of(f"{B},split_seed=2") == 2 and rl.draw_of(B) == 0
    grid = rl.grid("regime_draws")
    assert len(grid) == len(set(grid)) == 7 * 2  # seven methods at two sizes, the draws one group
    assert {n for *_, n in grid} == set(ledger.REGIME_DRAW_SIZES)


def test_log_t_ratio_pairs_each_loss_with_ce_on_the_same_seed_and_draw(tmp_path):
    curve = [1.0] * 40
    cells = [(loss, f"{B},split_seed={draw}", seed, t * (1 + seed) * (1 + draw), curve)
             for draw in (1, 2) for seed in (0, 1) for loss, t in (("ce", 2.0), ("focal", 1.0))]
    cells.append(("focal", f"{B},split_seed=1", 2, 0.5, curve))  # no CE partner: left out
    fake_sweep(tmp_path, "regime_draws", cells)
    runs = rl.protocol_runs("regime_draws", tmp_path)
    assert sorted(set(runs["split_seed"])) == [1, 2]
    ratio = rl.log_t_ratio(runs)
    assert len(ratio) == 4 and set(ratio["loss"]) == {"focal"}
    assert np.allclose(ratio["log_ratio"], math.log(0.5))  # the seed's and draw's factors cancel
    with pytest.raises(ValueError, match="temperature"):
        rl.log_t_ratio(runs.drop(columns="temperature"))


def test_nll_rise_starts_at_the_last_epoch_before_the_first_drop(tmp_path):
    def curve(low_before: float, low_after: float, last: float) -> list[float]:
        c = [3.0] * 220
        c[50], c[109], c[150], c[-1] = low_before, 1.0, low_after, last
        return c

    fake_sweep(tmp_path, "equal_steps", [
        ("ce", B, 1, 2.0, curve(0.1, 0.8, 1.5)),  # lowest after epoch 110: 0.8 -> rise 0.7
        ("ce", B, 0, 2.0, curve(0.1, 1.2, 1.5)),  # lowest at epoch 110 (index 109): 1.0 -> 0.5
    ])
    assert rl.nll_rise("equal_steps", "B", 10_000, root=tmp_path).tolist() == pytest.approx([0.5, 0.7])  # seed order
    assert rl.nll_rise("equal_steps", "A", 10_000, root=tmp_path).shape == (0,)  # not run yet
    assert rl.epoch_curves("equal_steps", "test_nll", tmp_path, split_seed=1) == {}
