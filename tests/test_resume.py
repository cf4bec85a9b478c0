"""Reliability of calib.train: kill and resume, atomic checkpoints, corrupt or foreign checkpoints.

The kill tests run the real CLI (``python -m calib train``) on digits with a small MLP in a
subprocess, stop it once a checkpoint exists (SIGKILL: no chance to clean up; SIGTERM: the
trainer finishes its step and checkpoints mid-epoch), resume it, and demand *bit-identical*
final weights, metrics and loss history compared with an uninterrupted run of the same seed.
The uninterrupted run and the resumptions run in this process (one thread, like the
subprocess) with the configuration the CLI builds from the same arguments.
"""
from __future__ import annotations

import contextlib

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import calib.train.checkpoint as ct
from calib.cli import build_parser, config_from_args
from calib.train import CHECKPOINT_FILE, METRICS_FILE, CheckpointError, TrainConfig, Trainer, TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 20


def cli_args(out: Path) -> list[str]:
    return [sys.executable, "-m", "calib", "train", "--data", "digits", "--model", "mlp", "--model-arg", "hidden=32",
            "--loss", "focal", "--gamma", "2", "--epochs", str(EPOCHS), "--milestones", "10,15", "--batch-size", "64",
            "--lr", "0.05", "--seed", "3", "--no-progress", "--out", str(out)]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CALIB_PROFILE": "quick",
            "PYTHONPATH": str(ROOT)}


@contextlib.contextmanager
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def run_in_process(out: Path, resume: bool) -> None:
    """What ``python -m calib train ARGS [--resume]`` does, in this process."""
    config = config_from_args(build_parser().parse_args(cli_args(out)[3:]))
    with one_thread():
        Trainer(config).fit(resume=resume)


def start_and_stop(out: Path, sig: int) -> subprocess.Popen:
    """Start a run and send ``sig`` as soon as its first checkpoint exists."""
    proc = subprocess.Popen(cli_args(out), env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (out / CHECKPOINT_FILE).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no checkpoint appeared; stderr:\n{proc.communicate()[1]}")
        time.sleep(0.005)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    return proc


def final_state(out: Path) -> tuple[dict, dict, list[float]]:
    ckpt = torch.load(out / CHECKPOINT_FILE, weights_only=True)
    metrics = json.loads((out / METRICS_FILE).read_text())
    losses = [json.loads(line)["train_loss"] for line in (out / "history.jsonl").read_text().splitlines()]
    return ckpt["model"], metrics, losses


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, dict, list[float]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    run_in_process(out, resume=False)
    return final_state(out)


def assert_identical(out: Path, reference) -> None:
    weights, metrics, losses = final_state(out)
    ref_weights, ref_metrics, ref_losses = reference
    assert weights.keys() == ref_weights.keys()
    for k in weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    assert metrics == ref_metrics
    assert losses == ref_losses and len(losses) == EPOCHS


@pytest.mark.slow
def test_sigkill_then_resume_is_identical(tmp_path, reference):
    proc = start_and_stop(tmp_path, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    ckpt = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)
    assert 1 <= ckpt["epoch"] < EPOCHS, "the run finished before it could be killed"
    assert not (tmp_path / METRICS_FILE).exists()
    run_in_process(tmp_path, resume=True)
    assert_identical(tmp_path, reference)


@pytest.mark.slow
def test_sigterm_checkpoints_and_resume_is_identical(tmp_path, reference):
    proc = start_and_stop(tmp_path, signal.SIGTERM)
    err = proc.stderr.read()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "checkpoint saved" in err and "--resume" in err
    ckpt = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)
    assert ckpt["epoch"] < EPOCHS
    run_in_process(tmp_path, resume=True)
    assert_identical(tmp_path, reference)


# ----------------------------------------------------------------------------- in-process


def tiny(out: Path, **kw) -> TrainConfig:
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": 16}, epochs=3, batch_size=64, milestones=(2,),
                lr=0.05, progress=False, out=str(out))
    base.update(kw)
    return TrainConfig(**base)


class StopAt(Trainer):
    """Simulates a SIGTERM arriving during step ``stop_at`` (the handler only sets a flag)."""

    stop_at = 30

    def train_step(self, x, y):
        out = super().train_step(x, y)
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler Trainer.fit installed sets a flag
        return out


def test_mid_epoch_interrupt_resumes_exactly(tmp_path):
    ref = Trainer(tiny(tmp_path / "ref"))
    ref.fit()
    stopped = StopAt(tiny(tmp_path / "run"))
    with pytest.raises(TrainingInterrupted, match="SIGTERM") as info:
        stopped.fit()
    assert info.value.path == tmp_path / "run" / CHECKPOINT_FILE
    ckpt = torch.load(info.value.path, weights_only=True)
    assert ckpt["step"] > 0, "the interrupt should land inside an epoch"
    resumed = Trainer(tiny(tmp_path / "run"))
    assert resumed.fit(resume=True) == ref.metrics
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in ref.history]


class Noisy(Trainer):
    """Draws from the global torch RNG every step (as dropout or input noise would)."""

    stop_at = 0

    def train_step(self, x, y):
        out = super().train_step(x + 0.3 * torch.randn_like(x), y)
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler Trainer.fit installed sets a flag
        return out


def test_resume_restores_the_global_rng(tmp_path):
    """Without the RNG state in the checkpoint the resumed run would draw other noise."""
    ref = Noisy(tiny(tmp_path / "ref"))
    ref.fit()
    stopped = Noisy(tiny(tmp_path / "run"))
    stopped.stop_at = 30
    with pytest.raises(TrainingInterrupted):
        stopped.fit()
    torch.manual_seed(12345)  # whatever happened in between must not matter
    resumed = Noisy(tiny(tmp_path / "run"))
    assert resumed.fit(resume=True) == ref.metrics
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_half_written_checkpoint_never_replaces_a_good_one(tmp_path, monkeypatch):
    t = Trainer(tiny(tmp_path, epochs=1, milestones=()))
    t.fit()
    path = tmp_path / CHECKPOINT_FILE
    good = path.read_bytes()

    def dies_mid_write(obj, fh, *a, **k):
        fh.write(good[: len(good) // 3])  # part of a checkpoint, then the disk fills up
        raise OSError("No space left on device")

    monkeypatch.setattr(ct.torch, "save", dies_mid_write)
    with pytest.raises(OSError, match="No space"):
        t.save_checkpoint()
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert not list(tmp_path.glob(".*.tmp"))
    # a temp file left by a SIGKILL during the write is ignored, then overwritten
    (tmp_path / f".{CHECKPOINT_FILE}.tmp").write_bytes(good[:100])
    same = Trainer(tiny(tmp_path, epochs=1, milestones=()))
    same.fit(resume=True)
    assert same.epoch == 1
    assert not list(tmp_path.glob(".*.tmp"))


def test_corrupt_checkpoint_gives_a_clear_error(tmp_path):
    Trainer(tiny(tmp_path, epochs=1, milestones=())).fit()
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        Trainer(tiny(tmp_path, epochs=1, milestones=())).fit(resume=True)


def test_foreign_files_are_refused(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a calib checkpoint"):
        ct.load_checkpoint(path)
    torch.save({"format": 1, "config": "{}", "obj": Path("/")}, path)  # an unsafe global: refused
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        ct.load_checkpoint(path)


@pytest.mark.parametrize("change, word", [({"lr": 0.1}, "lr"), ({"model_kwargs": {"hidden": 8}}, "model_kwargs"),
                                          ({"loss": "focal"}, "loss"), ({"seed": 1}, "seed")])
def test_mismatched_checkpoint_names_the_difference(tmp_path, change, word):
    Trainer(tiny(tmp_path, epochs=1, milestones=())).fit()
    other = Trainer(tiny(tmp_path, epochs=1, milestones=(), **change))
    with pytest.raises(CheckpointError, match=f"different run.*{word}"):
        other.fit(resume=True)


def test_runtime_fields_may_change_on_resume(tmp_path):
    Trainer(tiny(tmp_path, epochs=1, milestones=())).fit()
    t = Trainer(tiny(tmp_path, epochs=1, milestones=(), eval_batch_size=7, device="cpu"))
    t.fit(resume=True)
    assert t.epoch == 1


def test_state_that_does_not_fit_the_model(tmp_path):
    Trainer(tiny(tmp_path, epochs=1, milestones=())).fit()
    path = tmp_path / CHECKPOINT_FILE
    ckpt = torch.load(path, weights_only=True)
    ckpt["model"] = {k: v[:1] for k, v in ckpt["model"].items()}
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match="does not fit"):
        Trainer(tiny(tmp_path, epochs=1, milestones=())).fit(resume=True)
