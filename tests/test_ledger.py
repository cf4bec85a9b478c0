"""The results ledger (results/, calib.experiments.ledger): its sweeps, provenance, and proof.

The proof that the committed numbers came from this code: two ledger cells made on a CPU
like this one are re-run from scratch on CPU, one thread (as the ledger ran), for their
first epochs, and every number those epochs recorded must come out the same to 1e-6.
"""
from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch

from calib.experiments import cell_origin, ledger, machine, plans, reduction_ledger
from calib.train import TrainConfig, Trainer

ROOT = pathlib.Path(__file__).resolve().parents[1] / ledger.ROOT
EPOCHS = 2  # epochs re-derived per cell: about 20 s each on one thread
KEYS = ("train_loss", "train_acc", "val_acc", "val_nll", "val_ece", "test_acc", "test_nll", "test_ece")


def test_every_sweep_is_a_valid_sweep_command(tmp_path):
    from calib.cli import build_parser

    for name in ledger.names():
        cmd = ledger.command(name, tmp_path)
        args = build_parser().parse_args(cmd[3:])
        assert args.run.__name__ == "cmd_sweep"
        assert ledger.SWEEPS[name].n_cells == len(args.loss) * len(args.seeds)
    with pytest.raises(ValueError, match="unknown ledger sweep 'nope'"):
        ledger.command("nope")
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        ledger.run("reduction", tmp_path, jobs=0)


def test_the_reduction_sweep_separates_the_three_factors():
    args = ledger.SWEEPS["reduction"].args
    specs = [args[i + 1] for i, a in enumerate(args) if a == "--loss"]
    assert len(specs) == 9 and {s.split("@")[1] for s in specs} == set(ledger.PROTOCOLS.values())
    assert "--seeds" in args and args[args.index("--seeds") + 1] == "0,1,2"


def _committed_cells() -> list[pathlib.Path]:
    return [d for name in ledger.names() for d in ledger.cell_dirs(name, ROOT)]


def test_committed_sweeps_have_provenance():
    swept = [name for name in ledger.names() if (ROOT / name / "results.csv").exists()]
    if not swept:
        pytest.skip("no ledger sweep committed yet (make ledger)")
    for name in swept:
        prov = json.loads((ROOT / name / ledger.PROVENANCE_FILE).read_text())
        for key in ("command", "sessions", "torch", "threads_per_process", "machine", "training_seconds"):
            assert prov[key] not in (None, ""), f"{name}: provenance lacks {key}"
        assert prov["threads_per_process"] == ledger.THREADS
        assert all(session.get("commit") for session in prov["sessions"])
        rows, _ = ledger.load(name, ROOT)
        assert len(rows) == prov["cells_finished"] == len(ledger.cell_dirs(name, ROOT))


def _fake_sweep(root: pathlib.Path, name: str, sessions: list[dict], machine: str) -> None:
    """A committed sweep with one finished cell and the given provenance sessions."""
    out = root / name
    (out / "runs" / "cell__s0").mkdir(parents=True)
    (out / "runs" / "cell__s0" / "metrics.json").write_text("{}")
    (out / "sweep.json").write_text("{}")
    (out / "results.csv").write_text("loss,seed\nce,0\n")
    (out / ledger.PROVENANCE_FILE).write_text(json.dumps({"machine": machine, "sessions": sessions}))


def test_rederivable_cells_are_those_of_sweeps_made_wholly_on_this_cpu(tmp_path, monkeypatch):
    here, there = "x86_64, Intel Xeon, 2 cores", "x86_64, AMD EPYC, 2 cores"
    monkeypatch.setattr(ledger, "machine", lambda: here)
    monkeypatch.setattr(ledger, "cpu_capability", lambda: "unknown")  # sessions record none
    _fake_sweep(tmp_path, "reduction", [{"commit": "a"}], there)  # old sessions: the provenance's machine
    _fake_sweep(tmp_path, "bench", [{"commit": "a"}, {"commit": "b", "machine": "x86_64, Intel Xeon, 8 cores"}], here)
    _fake_sweep(tmp_path, "lin2024_t1", [{"commit": "a", "machine": here}, {"commit": "b", "machine": there}], here)
    assert ledger.machines("reduction", tmp_path) == {"x86_64, AMD EPYC"}
    assert ledger.machines("lin2024_t1", tmp_path) == {"x86_64, Intel Xeon", "x86_64, AMD EPYC"}
    # the core count does not matter; a sweep with a session on another CPU is left out
    assert [c.parents[1].name for c in ledger.rederivable_cells(tmp_path)] == ["bench"]


def test_a_sweep_made_on_two_cpus_gives_the_cells_its_sessions_here_made(tmp_path, monkeypatch):
    here, there = "x86_64, Intel Xeon, 2 cores", "x86_64, AMD EPYC, 2 cores"
    monkeypatch.setattr(ledger, "machine", lambda: here)
    monkeypatch.setattr(ledger, "cpu_capability", lambda: "AVX512")
    cells = ["d__m__ce@lr=0.1__s0", "d__m__ce@lr=0.1__s1", "d__m__ce@lr=0.1__s2"]
    _fake_sweep(tmp_path, "bench", [{"machine": there, "cpu_capability": "AVX2", "cells": cells[:1]},
                                    {"machine": here, "cpu_capability": "AVX512", "cells": cells[1:2]},
                                    {"machine": here, "cpu_capability": "AVX2", "cells": cells[2:]}], there)
    for cell in cells:
        (tmp_path / "bench" / "runs" / cell).mkdir()
        (tmp_path / "bench" / "runs" / cell / "metrics.json").write_text("{}")
    assert [c.name for c in ledger.rederivable_cells(tmp_path)] == cells[1:2]


def test_cell_machines_names_the_machine_of_the_session_that_made_each_cell(tmp_path, monkeypatch):
    intel, amd, gpu = "x86_64, Intel Xeon, 2 cores", "x86_64, AMD EPYC, 16 cores", "x86_64, Xeon, H200, 16 cores"
    monkeypatch.setattr(ledger, "REUSE", {"bench": "reduction"})
    _fake_sweep(tmp_path, "reduction", [{"commit": "a"}], amd)  # one machine: every cell's
    _fake_sweep(tmp_path, "bench", [{"machine": intel}, {"machine": gpu, "device": "cuda"},
                                    {"machine": intel, "cells": ["b"]}], amd)
    for cell, device in (("b", None), ("c", "cuda"), ("d", None)):
        (tmp_path / "bench" / "runs" / cell).mkdir()
        (tmp_path / "bench" / "runs" / cell / "metrics.json").write_text("{}")
        (tmp_path / "bench" / "runs" / cell / "config.json").write_text(json.dumps({"device": device}))
    assert cell_origin.cell_machines("reduction", tmp_path) == {"cell__s0": "x86_64, AMD EPYC"}
    assert cell_origin.cell_machines("bench", tmp_path) == {
        "b": "x86_64, Intel Xeon",  # listed by its session
        "c": "x86_64, Xeon, H200",  # a GPU cell: the one cell-less session on a GPU
        "cell__s0": "x86_64, AMD EPYC",  # copied from the reused sweep, same metrics
        "d": "x86_64, Intel Xeon"}  # a CPU cell: the one cell-less session on a CPU
    (tmp_path / "bench" / "runs" / "cell__s0" / "metrics.json").write_text('{"ece": 1}')
    assert cell_origin.cell_machines("bench", tmp_path)["cell__s0"] == "x86_64, Intel Xeon"  # not a copy
    _fake_sweep(tmp_path, "lin2024_t1", [{"machine": intel}, {"machine": amd}], amd)
    assert cell_origin.cell_machines("lin2024_t1", tmp_path) == {"cell__s0": "unrecorded"}


def test_cells_of_a_fused_loss_made_before_its_kernel_are_not_rederivable(tmp_path, monkeypatch):
    here = "x86_64, AMD EPYC, 2 cores"
    monkeypatch.setattr(ledger, "machine", lambda: here)
    monkeypatch.setattr(ledger, "cpu_capability", lambda: "AVX2")
    old = {"stopped": "2026-11-25 04:54:52 UTC", "cpu_capability": "AVX2"}
    new = {"stopped": "2026-12-02 14:28:00 UTC", "cpu_capability": "AVX2"}
    for name, sessions in (("reduction", [old]), ("bench", [new])):
        _fake_sweep(tmp_path, name, sessions, here)
        for cell in ("d__m__ce@lr=0.1__s0", "d__m__bsce_gra-gamma=4@lr=0.1__s0"):
            (tmp_path / name / "runs" / cell).mkdir()
            (tmp_path / name / "runs" / cell / "metrics.json").write_text("{}")
    cells = {(c.parents[1].name, c.name) for c in ledger.rederivable_cells(tmp_path)}
    assert ("reduction", "d__m__ce@lr=0.1__s0") in cells  # CE's numerics did not change
    assert ("reduction", "d__m__bsce_gra-gamma=4@lr=0.1__s0") not in cells
    assert ("bench", "d__m__bsce_gra-gamma=4@lr=0.1__s0") in cells  # made after the kernel
    monkeypatch.setattr(ledger, "cpu_capability", lambda: "AVX512")  # another generation
    assert ledger.rederivable_cells(tmp_path) == []


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(ledger.THREADS)
    yield
    torch.set_num_threads(before)


def _pick_two(cells: list[pathlib.Path]) -> list[pathlib.Path]:
    """Two cells that differ in as much as possible: the first, and the first of another protocol."""
    first = cells[0]
    other = next((c for c in cells[1:] if c.name.split("__s")[0] != first.name.split("__s")[0]), cells[-1])
    return [first, other]


@pytest.mark.slow
def test_two_ledger_cells_rederive_from_scratch(one_thread):
    cells = ledger.rederivable_cells(ROOT)
    if len(cells) < 2:
        made_on = {n: sorted(ledger.machines(n, ROOT)) for n in ledger.names() if (ROOT / n / "results.csv").exists()}
        pytest.skip(f"fewer than two finished ledger cells were made on this CPU ({ledger.machine()}), and "
                    f"the kernels' last bits differ between CPUs; the sweeps' CPUs: {made_on}. "
                    "make ledger here adds some")
    for cell in _pick_two(cells):
        config = json.loads((cell / "config.json").read_text())
        ledger_epochs = [json.loads(x) for x in (cell / "history.jsonl").read_text().splitlines()][:EPOCHS]
        config.update(epochs=EPOCHS, out=None, progress=False, device="cpu")
        trainer = Trainer(TrainConfig.from_dict(config))
        trainer.fit()
        sweep = cell.parents[1].name
        for old, new in zip(ledger_epochs, trainer.history, strict=True):
            for key in KEYS:
                assert new[key] == pytest.approx(old[key], abs=1e-6), (
                    f"ledger cell {sweep}/{cell.name}, epoch {old['epoch']}, {key}: ledger {old[key]!r}, "
                    f"re-run {new[key]!r}. The code no longer reproduces the ledger; if the change is "
                    f"intended, refresh it with {ledger.refresh_command(sweep)}"
                )


def test_protocol_of_reads_settings_in_any_order_and_refuses_others():
    for key, spec in ledger.PROTOCOLS.items():
        assert reduction_ledger.protocol_of(",".join(reversed(spec.split(",")))) == key
    with pytest.raises(ValueError, match="none of the protocols"):
        reduction_ledger.protocol_of("lr=0.3")


def test_the_chapters_read_the_ledger_they_were_given():
    if not (ROOT / "reduction" / "results.csv").exists():
        pytest.skip("the reduction sweep is not committed yet (make ledger)")
    runs = reduction_ledger.protocol_runs(root=ROOT)
    assert set(runs["protocol"]) <= set(ledger.PROTOCOLS) and runs.notna().all().all()
    table = reduction_ledger.protocol_table(runs)
    for (loss, protocol), group in runs.groupby(["loss", "protocol"]):
        assert table.loc[(loss, protocol), "n"] == len(group)
        assert table.loc[(loss, protocol), "ECE (%)"].startswith(f"{100 * group['ece'].mean():.2f}")
    last = reduction_ledger.last_epoch(root=ROOT)  # the same cells, one row each
    assert sorted(map(tuple, last[["loss", "protocol", "seed"]].values.tolist())) == sorted(
        map(tuple, runs[["loss", "protocol", "seed"]].values.tolist()))
    # a curve's last epoch is the run's final test ECE (the ledger runs keep the last epoch)
    curves = reduction_ledger.epoch_curves(root=ROOT)
    for (loss, protocol), values in curves.items():
        final = runs[(runs["loss"] == loss) & (runs["protocol"] == protocol)].sort_values("seed")["ece"]
        assert values.shape[0] == len(final)
        assert sorted(values[:, -1]) == pytest.approx(sorted(final), abs=1e-6)


def test_the_regime_sweep_is_read_by_size_and_protocol():
    # the grid: every (loss, protocol) of the sweep at each of the three sizes, as defined
    grid = reduction_ledger.grid("regime")
    assert len(grid) * 3 == ledger.SWEEPS["regime"].n_cells
    assert {n for *_, n in grid} == set(ledger.REGIME_SIZES)
    assert reduction_ledger.size_of("lr=0.05", "regime") == 10_000  # the sweep's --train-size
    assert reduction_ledger.size_of("lr=0.05,train_size=2500", "regime") == 2_500
    assert reduction_ledger.protocol_of("train_size=55000,lr=0.05") == "A"
    if not (ROOT / "regime" / "results.csv").exists():
        pytest.skip("the regime sweep is not committed yet (make ledger LEDGER=regime)")
    runs = reduction_ledger.protocol_runs("regime", root=ROOT)
    assert set(zip(runs["loss"], runs["protocol"], runs["train_size"])) <= set(grid)
    table = reduction_ledger.protocol_table(runs)  # one row per size as well
    assert table.index.names == ["loss", "protocol", "train_size"]
    assert table["n"].sum() == len(runs)
    for n in ledger.REGIME_SIZES:  # each size's curves are that size's runs, last epoch = result
        for (loss, protocol), values in reduction_ledger.epoch_curves(
                "regime", root=ROOT, train_size=n).items():
            final = runs[(runs["loss"] == loss) & (runs["protocol"] == protocol)
                         & (runs["train_size"] == n)]["ece"]
            assert sorted(values[:, -1]) == pytest.approx(sorted(final), abs=1e-6)


def test_paper_table_sweeps_train_every_method_the_plans_would():
    from calib.experiments import plans

    for name, (preset, title, specs) in ledger.PAPER_TABLES.items():
        paper, net = {"lin2024": ("lin2024uncertainty", "ResNet-50"), "mukhoti2020": ("mukhoti2020using", "ResNet-50"),
                      "wang2024": ("wang2024unbiased", "ResNet-18")}[preset]
        table = plans.paper_table(title, paper=paper, preset=preset, net=("cifar", net))
        planned, _ = plans.plan_runs([table])
        assert list(specs) == list(dict.fromkeys(r.spec for r in planned)), name


def test_paper_runs_key_the_ledger_rows_like_the_chapters_results(tmp_path):
    import csv

    import pandas as pd

    from calib.experiments import plans

    table = plans.paper_table("Lin et al. (2024) Table 1", paper="lin2024uncertainty", preset="lin2024",
                              net=("cifar", "ResNet-50"))
    planned, _ = plans.plan_runs([table])
    rows = [dict(loss=loss, loss_kwargs=kw, seed=seed, ece=0.05 + seed / 100, ece_ts_grid=0.01, ece_ts=0.02,
                 accuracy=0.9, temperature=1.5)
            for loss, kw in (("ce", ""), ("mmce", "normalization=code")) for seed in (0, 1, 2)]
    (tmp_path / "lin2024_t1").mkdir()
    with open(tmp_path / "lin2024_t1" / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    got = ledger.paper_runs("lin2024_t1", planned, tmp_path)
    assert {key[1] for key in got} == {"ce", "mmce"} and all(len(v) == 3 for v in got.values())
    frame = plans.beside_paper(table, got, ours="ledger", missing="not yet")
    assert frame.loc["ce", "ECE % (ours)"].startswith("6.00") and frame.loc["bsce_gra", "ECE % (ours)"] == "not yet"
    assert isinstance(frame, pd.DataFrame)
    with pytest.raises(ValueError, match="not a paper-table sweep"):
        ledger.paper_runs("reduction", planned, tmp_path)
    summary = ledger.method_table("lin2024_t1", {"CE": "ce", "MMCE": "mmce:normalization=code", "focal": "focal"},
                                  tmp_path)
    assert summary["n"].tolist() == [3, 3, 0] and summary.loc["CE", "ECE (%)"] == "6.00 ± 1.00"
    assert summary.loc["MMCE", "T"] == "1.50 ± 0.00" and summary.loc["focal", "ECE (%)"] == "not yet run"
    means = ledger.method_means("lin2024_t1", {"CE": "ce", "focal": "focal"}, "ece", tmp_path)
    assert means["CE"] == pytest.approx(0.06) and math.isnan(means["focal"])


def test_run_and_a_stopped_session_leave_a_committable_ledger(tmp_path, monkeypatch):
    tiny = ledger.LedgerSweep("tiny", "a one-epoch test sweep",
                              ("--data", "digits", "--model", "mlp", "--epochs", "1", "--no-progress",
                               "--seeds", "0,1", "--loss", "ce"))
    monkeypatch.setitem(ledger.SWEEPS, "tiny", tiny)
    prov = ledger.run("tiny", tmp_path, jobs=2)
    assert prov["cells_finished"] == prov["cells_planned"] == 2
    assert len(ledger.load("tiny", tmp_path)[0]) == 2 and "finished" in prov["sessions"][-1]
    prov = ledger.record("tiny", tmp_path, stopped=True)  # what Ctrl+C leaves behind
    assert len(prov["sessions"]) == 2 and "stopped" in prov["sessions"][-1]
    assert json.loads((tmp_path / "tiny" / ledger.PROVENANCE_FILE).read_text()) == prov
    # each session names its own torch and python; the device only where it was not the CPU
    assert prov["sessions"][-1]["torch"] == torch.__version__ and "device" not in prov["sessions"][0]


def test_a_gpu_session_is_named_by_its_gpu_and_never_re_derived(tmp_path, monkeypatch):
    cmd = ledger.command("regime", tmp_path, (2, 11), "cuda")
    assert cmd[-4:] == ["--shard", "2/11", "--device", "cuda"]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    here = ledger.machine()
    gpu = ledger.machine("cuda")
    assert gpu.startswith(here.rsplit(", ", 1)[0]) and "NVIDIA H200" in gpu
    monkeypatch.setattr(ledger, "machine", lambda device=None: here)
    _fake_sweep(tmp_path, "bench", [{"commit": "a", "machine": here}, {"commit": "b", "machine": gpu}], here)
    assert ledger.rederivable_cells(tmp_path) == []  # a GPU's cells differ from a CPU's in the last bits
    env = ledger._thread_env()  # the same cells on a GPU: float32 convolutions, the quick profile
    assert env["NVIDIA_TF32_OVERRIDE"] == "0" and env["CALIB_PROFILE"] == "quick"


def test_the_commit_comes_from_the_environment_where_git_has_no_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("CALIB_COMMIT", "abc123")
    assert machine.git_commit() == "abc123"


def test_available_says_where_the_ledger_is_when_it_is_missing(tmp_path, capsys):
    assert not ledger.available("reduction", tmp_path / "absent")
    assert "not of the pip package" in capsys.readouterr().out
    assert not ledger.available("bench", tmp_path)  # a clone that has not run this sweep
    out = capsys.readouterr().out
    assert "no rows of the sweep 'bench' yet (39 cells)" in out and "LEDGER=bench" in " ".join(out.split())
    if (ROOT / "reduction" / "results.csv").exists():
        assert ledger.available("reduction", ROOT)


def test_diverged_cells_are_read_from_their_run_directories(tmp_path):
    from calib.experiments import sweep as sw

    runs = tmp_path / "wang2024_t1" / "runs"
    (runs / "a__s0").mkdir(parents=True)
    (runs / "b__s0").mkdir()
    record = {"data": "fashion_mnist", "model": "cnn5", "loss": "ce", "loss_kwargs": "",
              "settings": "meta=l2_reg,meta_objective=dece", "seed": 0, "epoch": 19, "step": 31}
    (runs / "b__s0" / sw.DIVERGED_FILE).write_text(json.dumps(record))
    assert ledger.diverged_cells("wang2024_t1", tmp_path) == {"b__s0": record}
    (runs / "b__s0" / "history.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    assert ledger.histories("wang2024_t1", tmp_path, diverged=True) == {"b__s0": [{"epoch": 1}, {"epoch": 2}]}
    assert ledger.diverged_cells("bench", tmp_path) == {}
    plan = [r for r in plans.plan_runs([plans.paper_table(
        "Wang & Golebiowski (2024) Table 1", paper="wang2024unbiased", preset="wang2024",
        net=("cifar", "ResNet-18"))])[0]]
    bad = ledger.paper_diverged("wang2024_t1", plan, tmp_path)
    assert list(bad.values()) == [1] and list(bad)[0][1] == "meta_l2_dece"


def test_chapter_14_controls_train_the_regime_methods_on_new_draws_and_at_equal_steps():
    from calib.experiments.grid import parse_method

    steps = -(-10_000 // 128) * ledger.EQUAL_STEPS_EPOCHS  # 10,000 images, 128 a batch, the last batch kept
    assert abs(steps - -(-55_000 // 128) * 40) / steps < 0.02  # the SGD steps of 55,000 images x 40 epochs
    args = ledger.SWEEPS["equal_steps"].args
    assert args[args.index("--epochs") + 1] == "220" and args[args.index("--milestones") + 1] == "110,165"
    specs = [args[i + 1] for i, a in enumerate(args) if a == "--loss"]
    assert len(specs) == 7 and all("train_size" not in s for s in specs)
    draws = ledger.SWEEPS["regime_draws"].args
    settings = [parse_method(draws[i + 1])[2] for i, a in enumerate(draws) if a == "--loss"]
    assert {(s.get("train_size", 10_000), s["split_seed"]) for s in settings} == {
        (n, k) for n in ledger.REGIME_DRAW_SIZES for k in ledger.REGIME_SPLIT_SEEDS}
    assert ledger.SWEEPS["regime_draws"].n_cells == 7 * 2 * 2 * 3


def test_finished_cells_keep_their_test_predictions(tmp_path):
    import numpy as np
    import torch

    cell = tmp_path / "s" / "runs" / "c__s0"
    cell.mkdir(parents=True)
    (tmp_path / "s" / "sweep.json").write_text("{}")
    (cell / "metrics.json").write_text("{}")
    logits, labels = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    torch.save({"val_logits": logits, "val_labels": labels, "test_logits": logits.double(), "test_labels": labels},
               cell / "logits.pt")
    assert ledger.keep_test_predictions("s", tmp_path) == ["c__s0"]
    assert ledger.keep_test_predictions("s", tmp_path) == []  # written once
    kept_logits, kept_labels = ledger.test_predictions(cell)
    assert kept_logits.dtype == torch.float32 and torch.equal(kept_logits, logits)
    assert torch.equal(kept_labels, labels)
    assert ledger.test_predictions(tmp_path) is None
    assert np.load(cell / ledger.TEST_PREDICTIONS_FILE)["logits"].shape == (6, 3)


def test_sigterm_stops_the_ledger_as_ctrl_c_does(monkeypatch, tmp_path):
    """A ledger started in the background inherits an ignored SIGINT; kill (SIGTERM) must
    still stop the shards, merge and record the session as stopped."""
    import io
    import os
    import signal
    import threading

    monkeypatch.setattr(ledger, "command", lambda *a, **k: ["python", "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(ledger, "REUSE", {})
    seen = {}
    monkeypatch.setattr(ledger, "record", lambda *a, **k: seen.update(k))
    before = signal.getsignal(signal.SIGTERM)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(KeyboardInterrupt):
        ledger.run("regime_draws", tmp_path, jobs=2, log=io.StringIO(), device="cpu")
    assert seen["stopped"] is True
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the caller's again
