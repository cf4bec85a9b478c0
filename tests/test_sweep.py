"""calib.experiments.sweep and `python -m calib sweep`; the trainer's protocol settings (select, clip, TS, epoch logits)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from calib import posthoc
from calib.experiments import sweep as sw
from calib.cli import main
from calib.train.presets import PAPER_SEEDS, PRESETS
from calib.train import (
    LOGITS_FILE,
    METRICS_FILE,
    TrainConfig,
    Trainer,
    TrainingInterrupted,
    load_config,
    load_epoch_logits,
    load_history,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(epochs=2, batch_size=64, lr=0.05, model_kwargs={"hidden": 16})
LOSSES = ["ce", "focal:gamma=3"]
# every column except the wall-clock one must be reproduced exactly
EXACT = [c for c in sw.RESULT_COLUMNS if c != "seconds"]


def tiny_config(out=None, **kw) -> TrainConfig:
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": 16}, epochs=2, batch_size=64,
                milestones=(1,), lr=0.05, progress=False, out=None if out is None else str(out))
    base.update(kw)
    return TrainConfig(**base)


class _StopAfter(Trainer):
    """A trainer that receives a (simulated) SIGTERM once ``stop_after`` epochs are done."""

    stop_after = 1

    def epoch_extras(self):
        if self.epoch + 1 >= self.stop_after:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler Trainer.fit installed sets a flag
        return super().epoch_extras()


def stop_after(cfg: TrainConfig, epochs: int, data=None) -> None:
    trainer = _StopAfter(cfg, data=data)
    trainer.stop_after = epochs
    with pytest.raises(TrainingInterrupted):
        trainer.fit()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its bytes (empty dict if it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def exact(rows):
    return [{k: r[k] for k in EXACT} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 2 losses x 2 seeds sweep, in process."""
    out = tmp_path_factory.mktemp("sweep") / "ref"
    res = sw.sweep(out, LOSSES, [0, 1], data="digits", model="mlp", progress=False, **TINY)
    return out, res


# ----------------------------------------------------------------------------- grid parsing


@pytest.mark.parametrize("spec, expected", [
    ("ce", ("ce", {})),
    ("focal:gamma=3", ("focal", {"gamma": 3})),
    ("bsce_gra:gamma=4,norm=2", ("bsce_gra", {"gamma": 4, "norm": 2})),
    (("bsce_gra", {"norm": 2.0, "gamma": 4.0}), ("bsce_gra", {"gamma": 4, "norm": 2})),
    ("focal:gamma=0.5", ("focal", {"gamma": 0.5})),
])
def test_parse_loss(spec, expected):
    assert sw.parse_loss(spec) == expected


@pytest.mark.parametrize("spec, word", [
    ("hinge", "not a loss"),
    ("focal:delta=1", "delta"),
    ("focal:gamma=-1", "gamma"),
    ("focal:gamma", "key=value"),
    (42, "NAME"),
])
def test_parse_loss_refuses(spec, word):
    with pytest.raises(sw.SweepError, match=word):
        sw.parse_loss(spec)


def test_format_loss_kwargs_round_trips_through_parse():
    name, kw = sw.parse_loss("bsce_gra:norm=2,gamma=4")
    assert sw.format_loss_kwargs(kw) == "gamma=4,norm=2"
    assert sw.parse_loss(f"{name}:{sw.format_loss_kwargs(kw)}") == (name, kw)


@pytest.mark.parametrize("spec, expected", [
    ("ce@mixup_alpha=1", ("ce", {}, {"mixup_alpha": 1})),
    ("focal:gamma=3@select=best_val,clip_grad=2", ("focal", {"gamma": 3}, {"clip_grad": 2, "select": "best_val"})),
    (("ce", {}, {"mixup_alpha": 1.0}), ("ce", {}, {"mixup_alpha": 1})),
    ("ce", ("ce", {}, {})),
])
def test_parse_method(spec, expected):
    assert sw.parse_method(spec) == expected


@pytest.mark.parametrize("spec, word", [("ce@seed=3", "seed"), ("ce@bogus=1", "bogus"), ("ce@mixup", "field=value")])
def test_parse_method_refuses(spec, word):
    with pytest.raises(sw.SweepError, match=word):
        sw.parse_method(spec)
    with pytest.raises(sw.SweepError, match="parse_method"):
        sw.parse_loss("ce@mixup_alpha=1")


def test_methods_with_training_settings(tmp_path):
    out = tmp_path / "m"
    res = sw.sweep(out, ["ce", "ce@mixup_alpha=1"], [0], progress=False, **TINY)
    assert [(r["loss"], r["settings"]) for r in res.rows] == [("ce", ""), ("ce", "mixup_alpha=1")]
    assert [s["settings"] for s in res.summary] == ["", "mixup_alpha=1"]
    run = res.run_dir("ce@mixup_alpha=1", 0)
    assert run.name == "digits__mlp__ce@mixup_alpha=1__s0"
    assert load_config(run).mixup_alpha == 1.0 and load_config(res.run_dir("ce", 0)).mixup_alpha == 0.0
    assert res.rows[0]["ece"] != res.rows[1]["ece"]
    assert "ce @ mixup_alpha=1" in (out / "summary.md").read_text()
    with pytest.raises(sw.SweepError, match="mixup_alpha"):
        sw.sweep(tmp_path / "bad", ["ce@mixup_alpha=-1"], [0], progress=False, **TINY)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("shard, expected", [("1/3", (1, 3)), ((2, 2), (2, 2)), (None, None)])
def test_parse_shard(shard, expected):
    assert sw.parse_shard(shard) == expected


@pytest.mark.parametrize("shard", ["0/2", "3/2", "a/b", "2", "1/0"])
def test_parse_shard_refuses(shard):
    with pytest.raises(sw.SweepError, match="shard"):
        sw.parse_shard(shard)


def test_grid_order_and_names():
    cells = sw.grid_cells(["ce", "focal:gamma=3"], [0, 1], data="digits", model="mlp")
    assert [(c.loss, c.seed) for c in cells] == [("ce", 0), ("ce", 1), ("focal", 0), ("focal", 1)]
    assert cells[2].name == "digits__mlp__focal-gamma=3__s0"
    assert len({c.name for c in cells}) == 4
    two = sw.grid_cells(["ce"], "0,1", data=["digits", "gaussian"], model="mlp")
    assert [c.data for c in two] == ["digits", "digits", "gaussian", "gaussian"]


def test_cell_names_read_back_into_loss_settings_and_seed():
    """The one reader of Cell.name, which the ledger's readers (ledger, reduction_ledger) share."""
    from calib.experiments import ledger, reduction_ledger
    from calib.experiments.grid import cell_name_parts

    specs = ["ce", "focal:gamma=3@clip_grad=2,lr=0.1",
             'focal@meta=gamma_net,meta_kwargs={"meta_lr":0.0001},meta_objective=sece']
    cells = sw.grid_cells(specs, [0, 12], data="fashion_mnist", model="cnn5")
    got = [cell_name_parts(c.name) for c in cells]
    assert got[:4] == [("ce", "", 0), ("ce", "", 12), ("focal", "clip_grad=2,lr=0.1", 0), ("focal", "clip_grad=2,lr=0.1", 12)]
    assert got[5][0] == "focal" and got[5][2] == 12 and "__" in cells[5].name  # the slugged JSON's "__"
    assert cell_name_parts("digits__mlp__ce") is None and cell_name_parts("notes") is None
    assert ledger._cell_loss(cells[5].name) == "focal" and ledger._cell_loss("notes") == ""
    assert reduction_ledger._cell_key("reduction", cells[2].name) == ("focal", "C", 10000, 0, 0)


def test_paper_seeds(monkeypatch):
    assert PAPER_SEEDS["lin2024"] == (1, 42, 71)
    assert [c.seed for c in sw.grid_cells(["ce"], "paper", preset="lin2024")] == [1, 42, 71]
    monkeypatch.setenv("CALIB_SMOKE", "1")  # smoke mode: the first two, the same code path
    assert [c.seed for c in sw.grid_cells(["ce"], "paper", preset="lin2024")] == [1, 42]
    monkeypatch.delenv("CALIB_SMOKE")
    with pytest.raises(sw.SweepError, match="paper"):
        sw.grid_cells(["ce"], "paper", preset="cifar")


@pytest.mark.parametrize("kwargs, word", [
    (dict(losses=["ce"], seeds=[]), "seeds is empty"),
    (dict(losses=[], seeds=[0]), "losses is empty"),
    (dict(losses=["ce", "ce"], seeds=[0]), "twice"),
    (dict(losses=["ce"], seeds=[0, 0]), "repeat"),
    (dict(losses=["ce"], seeds=[-1]), ">= 0"),
    (dict(losses=["ce"], seeds=[0], data="mnist"), "not a dataset"),
    (dict(losses=["ce"], seeds=[0], model="vgg"), "not a model"),
    (dict(losses=["ce"], seeds=[0], model="small_cnn", data="gaussian"), "needs images"),
    (dict(losses=["ce"], seeds=[0], epochs=0), "epochs"),
    (dict(losses=["ce"], seeds=[0], bogus=1), "bogus"),
    (dict(losses=["ce"], seeds=[0], seed=3), "set by the sweep"),
    (dict(losses=["ce"], seeds=[0], shard="5/2"), "shard"),
    (dict(losses=["ce"], seeds=[0], preset="nope"), "preset"),
])
def test_bad_grid_refused_before_anything_is_written(tmp_path, kwargs, word):
    with pytest.raises(sw.SweepError, match=word):
        sw.sweep(tmp_path / "s", progress=False, **kwargs)
    assert not (tmp_path / "s").exists()


# ----------------------------------------------------------------------------- layout and tables


def test_layout_and_columns(reference):
    out, res = reference
    manifest = json.loads((out / sw.MANIFEST_FILE).read_text())
    assert manifest["grid"] == {"data": ["digits"], "model": ["mlp"], "losses": ["ce", "focal:gamma=3"],
                                "seeds": [0, 1]}
    assert set(manifest["runs"]) == set(manifest["cells"]) and len(manifest["cells"]) == 4
    for name in ("results.csv", "summary.csv", "summary.md"):
        assert (out / name).is_file(), name
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == list(sw.RESULT_COLUMNS)
    for col in ("data", "model", "loss", "loss_kwargs", "seed", "accuracy", "nll", "brier", "ece", "adaece",
                "classwise_ece", "mce", "ece_ts", "mce_ts", "temperature", "seconds"):
        assert col in header
    assert len(res.rows) == 4 and res.missing == [] and len(res.trained) == 4
    assert [(r["loss"], r["loss_kwargs"], r["seed"]) for r in res.rows] == [
        ("ce", "", 0), ("ce", "", 1), ("focal", "gamma=3", 0), ("focal", "gamma=3", 1)]
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == sorted(c.name for c in sw.grid_cells(LOSSES, [0, 1]))
    for run in runs:  # ordinary run directories
        cfg = load_config(out / "runs" / run)
        assert (cfg.data, cfg.model, cfg.epochs) == ("digits", "mlp", 2)
        assert (out / "runs" / run / METRICS_FILE).is_file()
    # the row is the run's metrics.json
    m = json.loads((out / "runs" / "digits__mlp__focal-gamma=3__s1" / METRICS_FILE).read_text())
    row = res.rows[3]
    assert row["ece"] == m["pre_ts"]["ece"] and row["ece_ts"] == m["post_ts"]["ece"]
    assert row["temperature"] == m["temperature"] and row["temperature_grid"] == m["ts"]["grid"]["temperature"]


def test_run_dir_of_a_cell(reference):
    out, res = reference
    path = res.run_dir("focal:gamma=3.0", 1)
    assert path == out / "runs" / "digits__mlp__focal-gamma=3__s1" and path.is_dir()
    assert load_config(res.run_dir("ce", 0, data="digits", model="mlp")).seed == 0


def test_results_csv_round_trips_exactly(reference):
    out, res = reference
    assert sw.load_results(out) == res.rows


def test_summary_is_mean_and_sample_std(reference):
    out, res = reference
    assert [(s["loss"], s["n"]) for s in res.summary] == [("ce", 2), ("focal", 2)]
    for s in res.summary:
        vals = [r["ece"] for r in res.rows if r["loss"] == s["loss"]]
        assert s["ece_mean"] == pytest.approx(np.mean(vals), abs=1e-15)
        assert s["ece_std"] == pytest.approx(np.std(vals, ddof=1), abs=1e-15)
    md = (out / "summary.md").read_text()
    assert "±" in md and "focal (gamma=3)" in md and "ECE (%)" in md
    ce = res.summary[0]
    assert f"{100 * ce['ece_mean']:.2f} ± {100 * ce['ece_std']:.2f}" in md
    assert sw.summarize([res.rows[0]])[0]["ece_std"] == 0.0


def test_to_frame(reference):
    pd = pytest.importorskip("pandas")
    _, res = reference
    frame = res.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4
    assert list(res.to_frame("summary")["loss"]) == ["ce", "focal"]


def test_rerun_skips_finished_runs(reference):
    out, res = reference
    before = snapshot(out / "runs")
    again = sw.sweep(out, LOSSES, [0, 1], data="digits", model="mlp", progress=False, **TINY)
    assert again.trained == [] and again.rows == res.rows
    assert snapshot(out / "runs") == before


@pytest.mark.parametrize("change", [dict(losses=["ce"]), dict(seeds=[0, 2]), dict(epochs=3),
                                    dict(lr=0.1), dict(data="gaussian")])
def test_changed_grid_is_refused_and_nothing_touched(reference, change):
    out, _ = reference
    before = snapshot(out)
    args = dict(losses=LOSSES, seeds=[0, 1], data="digits", model="mlp", **TINY)
    args.update(change)
    with pytest.raises(sw.SweepError, match="another sweep"):
        sw.sweep(out, progress=False, **args)
    assert snapshot(out) == before


def test_runtime_settings_may_change(reference):
    out, res = reference
    again = sw.sweep(out, LOSSES, [0, 1], data="digits", model="mlp", progress=False, device="cpu", **TINY)
    assert again.rows == res.rows


def test_foreign_directory_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    with pytest.raises(sw.SweepError, match="not a sweep"):
        sw.sweep(tmp_path / "s", ["ce"], [0], progress=False, **TINY)
    assert snapshot(tmp_path / "s") == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}


def test_a_shard_starting_beside_another_is_not_refused(tmp_path):
    # the moment between another shard's mkdir and its atomic link of the manifest: the
    # directory holds only that shard's temporary manifest (seen in make ledger's first run)
    out = tmp_path / "s"
    out.mkdir()
    (out / f".{sw.MANIFEST_FILE}.999.tmp").write_text("{}")
    res = sw.sweep(out, ["ce"], [0], progress=False, **TINY)
    assert res.trained and (out / sw.MANIFEST_FILE).exists()


def test_a_manifest_linked_between_the_two_looks_is_read_not_refused(tmp_path, monkeypatch):
    # the other moment (a fresh make test, session 21): this shard found no manifest, then
    # the other shard linked its own in before this one listed the directory
    first = tmp_path / "first"
    sw.sweep(first, ["ce"], [0], progress=False, **TINY)
    manifest = (first / sw.MANIFEST_FILE).read_text()
    out = tmp_path / "s"
    out.mkdir()
    looks = sw._holds_files

    def racing(d):
        (d / sw.MANIFEST_FILE).write_text(manifest)  # the other shard wins the race here
        return looks(d)

    monkeypatch.setattr(sw, "_holds_files", racing)
    sw._check_directory(out, json.loads(manifest))  # reads it: the same sweep, no error
    other = json.loads(manifest) | {"cells": ["another"]}
    with pytest.raises(sw.SweepError, match="holds another sweep"):
        sw._check_directory(out, other)


def test_shards_partition_the_grid_and_merge_to_the_same_results(tmp_path, reference):
    _, ref = reference
    out = tmp_path / "sharded"
    first = sw.sweep(out, LOSSES, [0, 1], shard="1/2", progress=False, **TINY)
    second = sw.sweep(out, LOSSES, [0, 1], shard=(2, 2), progress=False, **TINY)
    cells = [c.name for c in sw.grid_cells(LOSSES, [0, 1])]
    assert first.trained == cells[0::2] and second.trained == cells[1::2]
    assert not set(first.trained) & set(second.trained)
    merged = sw.sweep(out, LOSSES, [0, 1], merge=True, progress=False, **TINY)
    assert merged.trained == [] and merged.missing == []
    assert exact(merged.rows) == exact(ref.rows)
    assert exact(sw.load_results(out)) == exact(ref.rows)


def test_merge_reports_missing_cells(tmp_path):
    out = tmp_path / "part"
    sw.sweep(out, ["ce"], [0, 1], shard="1/2", progress=False, **TINY)
    merged = sw.sweep(out, ["ce"], [0, 1], merge=True, progress=False, **TINY)
    assert [r["seed"] for r in merged.rows] == [0] and merged.missing == ["digits__mlp__ce__s1"]
    assert "not finished" in (out / "summary.md").read_text()


def test_merge_refuses_a_finished_cell_of_another_configuration(tmp_path):
    # a cell copied in from a run at another profile (a GPU machine's default) is not this sweep's
    out = tmp_path / "s"
    sw.sweep(out, ["ce"], [0], progress=False, **TINY)
    config = out / "runs" / "digits__mlp__ce__s0" / "config.json"
    config.write_text(config.read_text().replace('"profile": "quick"', '"profile": "colab"'))
    with pytest.raises(sw.SweepError, match="another configuration"):
        sw.sweep(out, ["ce"], [0], merge=True, progress=False, **TINY)


def test_a_smoke_mode_sweep_merges_its_capped_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIB_SMOKE", "1")  # the cells are saved with smoke_config's caps
    out = tmp_path / "s"
    sw.sweep(out, ["ce"], [0], progress=False, **{**TINY, "epochs": 3})
    assert len(sw.sweep(out, ["ce"], [0], merge=True, progress=False, **{**TINY, "epochs": 3}).rows) == 1


def test_resume_of_an_interrupted_cell_in_process(tmp_path, reference):
    """A cell stopped after its first epoch (checkpoint only) is continued, not restarted."""
    _, ref = reference
    out = tmp_path / "resumed"
    sw.sweep(out, ["ce"], [0], merge=True, progress=False, **TINY)  # claims the directory, trains nothing
    cell = sw.grid_cells(["ce"], [0])[0]
    cfg = sw._cell_config(cell, out, None, None, TINY)
    stop_after(cfg, 1, data=sw._data_for(cfg))
    assert len(load_history(out / "runs" / cell.name)) == 1
    res = sw.sweep(out, ["ce"], [0], progress=False, **TINY)
    assert res.trained == [cell.name]
    assert len(load_history(out / "runs" / cell.name)) == 2
    assert exact(res.rows) == exact(ref.rows[:1])


# ----------------------------------------------------------------------------- the CLI, in subprocesses


def _cli(args, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CALIB_PROGRESS": "0"}
    return subprocess.Popen([sys.executable, "-m", "calib", "sweep", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _sweep_args(out: Path, epochs: int = 2) -> list[str]:
    return ["--data", "digits", "--model", "mlp", "--model-arg", "hidden=16", "--loss", "ce",
            "--loss", "focal:gamma=3", "--seeds", "0,1", "--epochs", str(epochs), "--batch-size", "64",
            "--lr", "0.05", "--out", str(out)]


def test_cli_changed_grid_exits_2_and_touches_nothing(tmp_path, reference):
    out, _ = reference
    before = snapshot(out)
    args = _sweep_args(out)
    args[args.index("--epochs") + 1] = "3"
    proc = _cli(args)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 2 and "another sweep" in stderr
    assert snapshot(out) == before


@pytest.mark.parametrize("extra, word", [
    (["--loss", "hinge"], "not a loss"),
    (["--loss", "focal:delta=1"], "delta"),
    (["--shard", "3/2"], "shard"),
    (["--seeds", ","], "seeds is empty"),
    (["--data", "gaussian", "--model", "small_cnn"], "needs images"),
])
def test_cli_bad_grid_exits_2_before_training(tmp_path, extra, word, capsys):
    argv = ["sweep", "--data", "digits", "--model", "mlp", "--loss", "ce", "--seeds", "0", "--epochs", "1",
            "--no-progress", "--out", str(tmp_path / "s"), *extra]
    if "--model" in extra:
        argv[argv.index("--data"):argv.index("--loss")] = []  # the grid's data/model come from extra
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert word in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_cli_sigkill_then_rerun_gives_the_uninterrupted_results(tmp_path):
    """Stop the sweep mid-run twice (SIGTERM: checkpoint mid-epoch, exit 143; SIGKILL: no warning),
    re-run: the same results.csv numbers as a sweep that was never interrupted."""
    epochs = 6
    out = tmp_path / "killed"
    # the uninterrupted reference runs in process, so this also checks CLI == Python API
    # the CLI below runs on one thread: so does the reference (summation order is part of the result)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = sw.sweep(tmp_path / "ref", LOSSES, [0, 1], progress=False, **{**TINY, "epochs": epochs})
    finally:
        torch.set_num_threads(threads)

    stops = []
    for target, sig in (("digits__mlp__ce__s1", signal.SIGTERM), ("digits__mlp__focal-gamma=3__s0", signal.SIGKILL)):
        proc = _cli(_sweep_args(out, epochs))
        run_dir = out / "runs" / target
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            hist = run_dir / "history.jsonl"
            if hist.exists() and 1 <= len(hist.read_text().splitlines()) < epochs:
                break  # mid-run: some epochs done, the cell not finished
            time.sleep(0.005)
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            stops.append(sig)
        _, err = proc.communicate(timeout=120)
        if sig == signal.SIGTERM and stops:
            assert proc.returncode == 128 + signal.SIGTERM, err
            assert "rerun the same command" in err
        if sig == signal.SIGKILL and stops:
            assert proc.returncode == -signal.SIGKILL
        assert (out / "results.csv").exists() or sig == signal.SIGKILL
    assert len(stops) == 2, f"only {len(stops)} of 2 stops landed mid-run"
    final = _cli(_sweep_args(out, epochs))
    stdout, err = final.communicate(timeout=600)
    assert final.returncode == 0, err
    assert "4/4 runs finished" in stdout
    assert exact(sw.load_results(out)) == exact(ref.rows)
    assert len(sw.load_results(out)) == 4


# ----------------------------------------------------------------------------- trainer: protocol settings


def test_config_validates_protocol_fields():
    for bad in (dict(select="best"), dict(ts_grid_step=0), dict(ts_grid_step=11), dict(clip_grad=0),
                dict(clip_grad=-1.0), dict(clip_grad=float("inf"))):
        with pytest.raises(ValueError, match=next(iter(bad))):
            tiny_config(**bad)
    with pytest.raises(TypeError, match="keep_epoch_logits"):
        tiny_config(keep_epoch_logits="yes")
    with pytest.raises(TypeError, match="fsync"):
        tiny_config(fsync=1)
    # fsync is a runtime setting: a run may resume with it changed
    assert tiny_config(fsync=False).identity() == tiny_config().identity()
    assert tiny_config(select="best_val").identity() != tiny_config().identity()


def test_paper_presets():
    lin = TrainConfig.from_preset("lin2024", "paper", data="cifar10")
    assert (lin.epochs, lin.milestones, lin.ts_method, lin.ts_grid_step, lin.clip_grad) == (
        350, (150, 250), "grid", 0.1, 2.0)
    assert TrainConfig.from_preset("wang2024", "paper").select == "best_val"
    assert TrainConfig.from_preset("wang2021", "paper").ts_grid_step == 0.01
    assert TrainConfig.from_preset("mukhoti2020", "quick").epochs == 3
    assert set(("cifar", "tiny_imagenet", "lin2024", "mukhoti2020", "wang2024", "wang2021")) <= set(PRESETS)


def test_best_val_keeps_the_lowest_validation_error_epoch():
    trainer = Trainer(tiny_config(select="best_val"))
    for epoch, acc in enumerate([0.5, 0.8, 0.7, 0.8, 0.6], start=1):
        trainer.epoch = epoch
        with torch.no_grad():
            next(trainer.model.parameters()).fill_(float(epoch))  # weights that name their epoch
        trainer._update_best({"val_acc": acc})
    assert trainer.best["epoch"] == 2 and trainer.selected_epoch == 2  # first of the tied best
    assert float(next(iter(trainer.best["model"].values())).flatten()[0]) == 2.0
    last = Trainer(tiny_config(select="last"))
    last.epoch = 5
    last._update_best({"val_acc": 0.9})
    assert last.best is None and last.selected_epoch == 5


def test_best_val_run_record_holds_the_selected_epoch(tmp_path):
    out = tmp_path / "run"
    trainer = Trainer(tiny_config(out, epochs=5, milestones=(3,), lr=0.5, select="best_val",
                                  keep_epoch_logits=True))
    metrics = trainer.fit()
    hist = load_history(out)
    errors = [1 - h["val_acc"] for h in hist]
    expected = int(np.argmin(errors)) + 1  # first epoch with the lowest validation error
    assert metrics["selected_epoch"] == expected and metrics["select"] == "best_val"
    per_epoch = load_epoch_logits(out)
    assert per_epoch["epochs"] == [1, 2, 3, 4, 5]
    record = torch.load(out / LOGITS_FILE, weights_only=True)
    assert torch.equal(record["val_logits"], per_epoch["val_logits"][expected - 1])
    assert torch.equal(record["test_logits"], per_epoch["test_logits"][expected - 1])


def test_best_val_survives_resume(tmp_path):
    cfg = tiny_config(tmp_path / "a", epochs=4, milestones=(2,), lr=0.5, select="best_val")
    full = Trainer(cfg).fit()
    cut = TrainConfig.from_dict({**cfg.to_dict(), "out": str(tmp_path / "b")})
    stop_after(cut, 2)
    metrics = Trainer(cut).fit(resume=True)
    assert metrics["selected_epoch"] == full["selected_epoch"]
    assert metrics["pre_ts"] == full["pre_ts"]


def test_clip_grad_bounds_the_gradient_norm():
    def grad_norm(trainer):
        return float(torch.linalg.vector_norm(torch.stack(
            [p.grad.norm() for p in trainer.model.parameters() if p.grad is not None])))

    free = Trainer(tiny_config(lr=1e-9))
    x, y = free.data.train_x[:64].float(), free.data.train_y[:64]
    free.train_step(x, y)
    assert grad_norm(free) > 1e-2
    clipped = Trainer(tiny_config(lr=1e-9, clip_grad=1e-2))
    out = clipped.train_step(x, y)
    assert grad_norm(clipped) <= 1e-2 * (1 + 1e-5)
    assert float(out["grad_norm"]) == pytest.approx(grad_norm(free), rel=1e-5)  # the norm before clipping


def test_clip_grad_is_recorded_in_history(tmp_path):
    Trainer(tiny_config(tmp_path, clip_grad=0.5)).fit()
    hist = load_history(tmp_path)
    assert all(h["train_grad_norm"] > 0 for h in hist)


def test_both_temperature_fits_recorded(tmp_path):
    metrics = Trainer(tiny_config(tmp_path, ts_method="grid", ts_grid_step=0.01)).fit()
    assert set(metrics["ts"]) == {"nll", "grid"}
    record = torch.load(tmp_path / LOGITS_FILE, weights_only=True)
    t_nll = posthoc.fit_temperature(record["val_logits"], record["val_labels"], "nll")
    t_grid = posthoc.fit_temperature(record["val_logits"], record["val_labels"], "grid",
                                     grid=posthoc.default_grid(0.01))
    assert metrics["ts"]["nll"]["temperature"] == pytest.approx(t_nll)
    assert metrics["ts"]["grid"]["temperature"] == t_grid
    assert math.isclose(round(t_grid / 0.01) * 0.01, t_grid, abs_tol=1e-9)
    assert metrics["temperature"] == t_grid and metrics["post_ts"] == metrics["ts"]["grid"]["post_ts"]
    assert metrics["ts_method"] == "grid" and metrics["ts_grid_step"] == 0.01
    for fit in metrics["ts"].values():
        assert set(fit["post_ts"]) == set(sw.METRICS)


def test_default_grid_steps():
    assert len(posthoc.default_grid()) == 100 and posthoc.default_grid()[2] == 0.3
    g = posthoc.default_grid(0.01)
    assert len(g) == 1000 and g[0] == 0.01 and g[-1] == 10.0
    with pytest.raises(ValueError, match="step"):
        posthoc.default_grid(0)


class _CrashIn(Trainer):
    """A trainer that dies (like a kill, without a checkpoint) during epoch ``crash_in``."""

    crash_in = 4

    def epoch_extras(self):
        if self.epoch + 1 == self.crash_in:
            raise RuntimeError("simulated crash")
        return super().epoch_extras()


def test_checkpoint_every_resumes_to_the_same_run(tmp_path):
    cfg = tiny_config(tmp_path / "a", epochs=5, milestones=(3,), checkpoint_every=2)
    full = Trainer(cfg).fit()
    assert torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["epoch"] == 5  # the last is kept
    cut = TrainConfig.from_dict({**cfg.to_dict(), "out": str(tmp_path / "b")})
    with pytest.raises(RuntimeError, match="simulated"):
        _CrashIn(cut).fit()
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["epoch"] == 2
    assert len(load_history(tmp_path / "b")) == 3  # epoch 3 ran but was never checkpointed
    resumed = Trainer(TrainConfig.from_dict({**cut.to_dict(), "checkpoint_every": 3})).fit(resume=True)
    assert len(load_history(tmp_path / "b")) == 5
    assert resumed["pre_ts"] == full["pre_ts"] and resumed["ts"] == full["ts"]


def test_epoch_logits_resume_and_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="keep_epoch_logits"):
        load_epoch_logits(tmp_path)
    out = tmp_path / "run"
    Trainer(tiny_config(out, epochs=3, milestones=(2,), keep_epoch_logits=True)).fit()
    per_epoch = load_epoch_logits(out)
    assert per_epoch["val_logits"].shape[0] == 3
    record = torch.load(out / LOGITS_FILE, weights_only=True)
    assert torch.equal(per_epoch["test_logits"][-1], record["test_logits"])  # select="last"
    assert "train_logits" not in per_epoch
    tracked = tmp_path / "tracked"
    trainer = Trainer(tiny_config(tracked, epochs=2, keep_epoch_logits=True, track=("train",)))
    trainer.fit()
    per_epoch = load_epoch_logits(tracked)
    n_train = trainer.data.train_y.shape[0]
    assert per_epoch["train_logits"].shape == (2, n_train, 10)
    assert torch.equal(per_epoch["train_labels"], trainer.data.train_y)
    torch.testing.assert_close(per_epoch["train_logits"][-1], trainer.predict("train")[0])


class _CountingTrainer(Trainer):
    calls: list

    def predict(self, split):
        self.calls.append((self.epoch, split))
        return super().predict(split)


@pytest.mark.parametrize("select", ["last", "best_val"])
def test_each_split_is_predicted_once_an_epoch(tmp_path, select):
    trainer = _CountingTrainer(tiny_config(tmp_path / select, epochs=3, milestones=(2,),
                                           keep_epoch_logits=True, track=("test",), select=select))
    trainer.calls = []
    trainer.fit()
    # val and test once in each of the 3 epochs (the history line and the per-epoch logits
    # share them); finish() reuses the last epoch's unless it loads the best epoch's weights
    want = [(epoch, split) for epoch in range(3) for split in ("val", "test")]
    want += [(3, "val"), (3, "test")] if select == "best_val" else []
    assert trainer.calls == want
    record = torch.load(tmp_path / select / LOGITS_FILE, weights_only=True)
    trainer._predicted.clear()
    torch.testing.assert_close(record["test_logits"], trainer.predict("test")[0], rtol=0, atol=0)


def test_sweep_help_documents_every_option():
    from calib.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices
    text = sub["sweep"].format_help()
    for opt in ("--loss", "--seeds", "--out", "--shard", "--merge", "--data", "--model", "--epochs", "--profile",
                "--preset", "--select", "--clip-grad", "--ts-method", "--ts-grid-step", "--keep-epoch-logits"):
        assert opt in text, opt
    for action in sub["sweep"]._actions:
        assert action.help, action.option_strings
    assert "--resume" not in text and "--gamma " not in text  # per-loss options live in --loss
    for parser in (sub["sweep"], sub["train"]):  # papers by author-year, never by file number
        help_text = parser.format_help() + (parser.description or "")
        assert not re.search(r"(?<![\d.])00[0-4](?![\d])", help_text), help_text


def test_plan_checks_a_paper_command_without_touching_anything(tmp_path, capsys):
    out = tmp_path / "lin"
    planned = sw.plan(out, ["ce", "bsce_gra:gamma=4,norm=2"], "paper", data="cifar10", model="resnet50",
                      preset="lin2024", profile="paper")
    assert [c.seed for c, _ in planned] == [1, 42, 71, 1, 42, 71]
    cfg = planned[0][1]
    assert (cfg.epochs, cfg.ts_method, cfg.clip_grad, cfg.val_size) == (350, "grid", 2.0, 5000)
    assert "6 runs, 2100 epochs in all" in sw.describe_plan(planned)
    assert main(["sweep", "--data", "cifar10", "--model", "resnet50", "--loss", "ce", "--preset", "lin2024",
                 "--seeds", "paper", "--profile", "paper", "--out", str(out), "--dry-run"]) == 0
    assert "ts_method: \"grid\"" in capsys.readouterr().out
    assert not out.exists()
    with pytest.raises(SystemExit):
        main(["sweep", "--loss", "hinge", "--seeds", "0", "--out", str(out), "--dry-run"])
    assert not out.exists()


def test_a_sweep_cell_is_the_run_train_would_make(tmp_path, reference):
    """The cached data and the sweep's runtime defaults change nothing: a plain Trainer, loading
    its own data, reproduces a cell's numbers."""
    out, res = reference
    cfg = load_config(out / "runs" / "digits__mlp__focal-gamma=3__s1")
    alone = TrainConfig.from_dict({**cfg.to_dict(), "out": str(tmp_path / "alone"), "fsync": True,
                                   "checkpoint_every": 1})
    metrics = Trainer(alone).fit()
    row = res.rows[3]
    assert [metrics["pre_ts"][m] for m in sw.METRICS] == [row[m] for m in sw.METRICS]
    assert [metrics["post_ts"][m] for m in sw.METRICS] == [row[f"{m}_ts"] for m in sw.METRICS]


def test_evaluate_recomputes_with_another_grid_step(tmp_path, capsys):
    Trainer(tiny_config(tmp_path / "r", ts_method="grid")).fit()
    assert main(["evaluate", str(tmp_path / "r"), "--ts-grid-step", "0.01"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["ts_grid_step"] == 0.01
    record = torch.load(tmp_path / "r" / LOGITS_FILE, weights_only=True)
    assert metrics["temperature"] == posthoc.fit_temperature(
        record["val_logits"], record["val_labels"], "grid", grid=posthoc.default_grid(0.01))


def test_second_sweep_on_a_locked_directory_exits_2_at_once_and_shards_lock_cells(tmp_path):
    """The sweep takes calib.train.rundir's lock: a second unsharded process on the same DIR exits 2
    with one line; a shard does not lock DIR (shards share it) but locks the cell it trains."""
    from calib.train import rundir

    out = tmp_path / "grid"
    with rundir.lock(out, what="test"):
        proc = _cli(_sweep_args(out))
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "lock" in err.lower() and "Traceback" not in err
    assert not (out / sw.RESULTS_FILE).exists()
    assert not out.exists()  # the lock is gone and nothing was left behind
    proc = _cli([*_sweep_args(out), "--merge"])  # claims DIR (writes the manifest), trains nothing
    assert proc.communicate(timeout=300) and proc.returncode == 0
    first_cell = out / sw.RUNS_DIR / "digits__mlp__ce__s0"
    with rundir.lock(first_cell, what="test"):
        proc = _cli([*_sweep_args(out), "--shard", "1/2"])
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    proc = _cli(_sweep_args(out))
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "4/4 runs finished" in stdout


def test_a_diverged_cell_is_kept_as_diverged_and_the_sweep_goes_on(tmp_path):
    kw = dict(seeds=[0], data="digits", model="mlp", epochs=1, batch_size=64, milestones=(),
              optimizer="sgd", progress=False)
    res = sw.sweep(tmp_path, losses=["ce@lr=1e30", "ce"], **kw)  # the first cell's loss overflows
    assert len(res.rows) == 1 and res.rows[0]["settings"] == "" and len(res.diverged) == 1
    record = sw.diverged(tmp_path / "runs" / res.diverged[0])
    assert record["epoch"] == 1 and record["lr"] == 1e30 and "diverged" in record["message"]
    assert "Diverged (loss NaN or inf, no row)" in (tmp_path / "summary.md").read_text()
    again = sw.sweep(tmp_path, losses=["ce@lr=1e30", "ce"], **kw)  # resumed: nothing is trained again
    assert again.trained == [] and again.diverged == res.diverged and not again.missing


def test_progress_lines_name_a_diverged_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CALIB_PROGRESS", "1")  # a diverged cell has no metrics to print
    res = sw.sweep(tmp_path, losses=["ce@lr=1e30"], seeds=[0], data="digits", model="mlp", epochs=1,
                   batch_size=64, milestones=(), optimizer="sgd", progress=True)
    assert len(res.diverged) == 1
    assert "seed 0: diverged at epoch 1" in capsys.readouterr().err
