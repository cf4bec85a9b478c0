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
    # from the run's lowest (0.1 at epoch 51, at the high rate): 1.4 for both seeds
    assert rl.nll_rise("equal_steps", "B", 10_000, root=tmp_path, whole_run=True).tolist() == pytest.approx([1.4, 1.4])
    assert rl.epoch_curves("equal_steps", "test_nll", tmp_path, split_seed=1) == {}


def test_test_noise_bootstraps_the_kept_predictions_as_the_probability_path_does(tmp_path):
    from calib import evidence, metrics

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 500)
    cells = [(loss, f"{B},split_seed=1", seed, 1.0, [1.0]) for loss in ("ce", "focal") for seed in (0, 1, 2)]
    fake_sweep(tmp_path, "regime_draws", cells)
    probs = {}
    for loss, settings, seed, *_ in cells:
        logits = (rng.normal(size=(500, 10)) * (3 if loss == "ce" else 1)).astype(np.float32)
        logits[np.arange(500), labels] += 2.0  # mostly right, so the ECE has something to measure
        cell = tmp_path / "regime_draws" / ledger.RUNS_DIR / f"fashion_mnist__cnn5__{loss}@{settings}__s{seed}"
        np.savez_compressed(cell / ledger.TEST_PREDICTIONS_FILE, logits=logits, labels=labels)
        z = logits.astype(np.float64)
        probs.setdefault(loss, []).append(np.exp(z) / np.exp(z).sum(1, keepdims=True))
    got = rl.test_noise("regime_draws", "focal", "ce", "B", 10_000, split_seed=1, n_boot=30, root=tmp_path)
    # the same resamples (seed 0) through calib.metrics.ece on the probabilities
    want = evidence.test_se(metrics.ece, probs["focal"], labels, probs["ce"], n_boot=30)
    assert got["test_se"] == pytest.approx(100 * want, rel=1e-9) and got["test_se"] > 0
    assert got["test_df"] == 29
    # a finished cell that results.csv does not list yet (merged later) takes no part
    extra = tmp_path / "regime_draws" / ledger.RUNS_DIR / f"fashion_mnist__cnn5__focal@{B},split_seed=1__s3"
    extra.mkdir()
    (extra / "metrics.json").write_text("{}")
    np.savez_compressed(extra / ledger.TEST_PREDICTIONS_FILE, logits=np.zeros((500, 10), np.float32), labels=labels)
    assert rl.test_noise("regime_draws", "focal", "ce", "B", 10_000, split_seed=1, n_boot=30, root=tmp_path) == got
    assert rl.test_noise("regime_draws", "focal", "ce", "B", 10_000, split_seed=2, root=tmp_path) == {}  # no such draw
    assert rl.test_noise("regime_draws", "focal", "ce", "A", 10_000, split_seed=1, root=tmp_path) == {}
    with pytest.raises(ValueError, match="protocol"):
        rl.test_noise("regime_draws", "focal", "ce", "D", 10_000, root=tmp_path)
    # a run without kept predictions (trained before the ledger kept them): seed noise only
    (tmp_path / "regime_draws" / ledger.RUNS_DIR / f"fashion_mnist__cnn5__ce@{B},split_seed=1__s2"
     / ledger.TEST_PREDICTIONS_FILE).unlink()
    assert rl.test_noise("regime_draws", "focal", "ce", "B", 10_000, split_seed=1, root=tmp_path) == {}


def test_test_noise_needs_the_same_seeds_on_both_sides(tmp_path):
    cells = [("ce", f"{B},split_seed=1", seed, 1.0, [1.0]) for seed in (0, 1)]
    cells += [("focal", f"{B},split_seed=1", seed, 1.0, [1.0]) for seed in (0, 1, 2)]
    fake_sweep(tmp_path, "regime_draws", cells)
    for loss, settings, seed, *_ in cells:
        cell = tmp_path / "regime_draws" / ledger.RUNS_DIR / f"fashion_mnist__cnn5__{loss}@{settings}__s{seed}"
        np.savez_compressed(cell / ledger.TEST_PREDICTIONS_FILE, logits=np.eye(10, dtype=np.float32),
                            labels=np.arange(10))
    # seeds {0, 1, 2} against {0, 1}: a bootstrap over other runs than the t-test's
    assert rl.test_noise("regime_draws", "focal", "ce", "B", 10_000, split_seed=1, root=tmp_path) == {}


def test_the_kept_predictions_give_the_recorded_ece():
    from calib.experiments import scores

    if not ledger.available("regime_draws", quiet=True):
        pytest.skip("no committed regime_draws ledger in this checkout")
    recorded = {rl._row_key("regime_draws", r): float(r["ece"]) for r in ledger.load("regime_draws")[0]}
    checked = 0
    for cell in ledger.cell_dirs("regime_draws"):
        key = rl._cell_key("regime_draws", cell.name)
        if key not in recorded or (kept := ledger.test_predictions(cell)) is None:
            continue
        logits, labels = (t.double() for t in kept)
        conf = logits.softmax(1).max(1).values
        rows = np.stack([conf.numpy(), (logits.argmax(1) == labels).numpy()], 1)
        assert scores.score_ece(rows) == pytest.approx(recorded[key], abs=1e-9), cell.name
        checked += 1
    assert checked >= 0.9 * len(recorded)  # nearly every merged cell keeps its predictions


def test_machine_kind_names_a_run_s_cpu_or_gpu_for_prose():
    from calib.experiments.reduction_ledger import machine_kind

    assert machine_kind("x86_64, AMD EPYC") == "AMD EPYC CPU"
    assert machine_kind("x86_64, Intel(R) Xeon(R) Processor") == "Intel Xeon CPU"
    assert machine_kind("x86_64, Intel(R) Xeon(R) Processor, NVIDIA H200", "cuda") == "NVIDIA H200 GPU"
    assert machine_kind("unrecorded", "cuda:0") == "unrecorded GPU"
    assert machine_kind("unrecorded") == "unrecorded CPU"
