"""Run directories and CLI failures (issue 14): ownership, the lock, and one-line errors.

The CLI checks run the real ``python -m calib`` in a subprocess (a tiny MLP on the
bundled digits, 1-2 epochs); the fault injections that need to reach inside the trainer
(NaN at a chosen step, disk full on the second checkpoint) run in-process.
"""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from calib.train import rundir
from calib.train import CHECKPOINT_FILE, TrainConfig, Trainer, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def tiny(out, *extra: str, epochs: int = 1) -> list[str]:
    return ["train", "--data", "digits", "--model", "mlp", "--model-arg", "hidden=16", "--epochs", str(epochs),
            "--batch-size", "64", "--lr", "0.05", "--no-progress", "--out", str(out), *extra]


def cli(*argv: str, env: dict | None = None, preexec=None, timeout: int = 300) -> subprocess.CompletedProcess:
    full = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CALIB_PROFILE": "quick", **(env or {})}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CALIB_DEBUG"):
        if not env or k not in env:
            full.pop(k, None)
    return subprocess.run([sys.executable, "-m", "calib", *argv], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec)


def one_line_failure(done: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = done.stderr
    assert done.returncode == code, (done.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    for w in words:
        assert w in err, (w, err[-2000:])
    return err


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != rundir.LOCK_FILE}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished tiny run, copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    done = cli(*tiny(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def copy_run(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


# ----------------------------------------------------------------------------- ownership


def test_foreign_directory_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my thesis")
    before = snapshot(out)
    err = one_line_failure(cli(*tiny(out)), 2, "holds no calib run", "notes.txt")
    assert snapshot(out) == before and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert err.count("\n") == 1  # one line


def test_finished_run_needs_overwrite_and_another_config_is_never_replaced(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    before = snapshot(out)
    one_line_failure(cli(*tiny(out)), 2, "finished run", "--overwrite")
    assert snapshot(out) == before
    # a different configuration in the same directory: refused even with --overwrite
    one_line_failure(cli(*tiny(out, "--seed", "7", "--overwrite")), 2, "holds another run", "seed")
    assert snapshot(out) == before
    done = cli(*tiny(out, "--overwrite"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["n_test"] > 0


def test_empty_out_and_impossible_out(tmp_path):
    one_line_failure(cli(*tiny("")), 2, "--out must name a run directory, got an empty name")
    assert "blank name ('  ')" in str(pytest.raises(rundir.RunDirError, rundir.check_out, "  ").value)
    afile = tmp_path / "file"
    afile.write_text("x")
    one_line_failure(cli(*tiny(afile / "run")), 2, "which is a file")
    one_line_failure(cli(*tiny("/proc/calib-run")), 2, "cannot create run directory /proc/calib-run")


def test_resume_of_a_missing_directory_is_refused(tmp_path):
    one_line_failure(cli(*tiny(tmp_path / "nope", "--resume")), 2, "does not exist")
    assert not (tmp_path / "nope").exists()


def test_corrupt_config_is_named(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    cfg = out / "config.json"
    cfg.write_text(cfg.read_text()[:40])  # truncated
    one_line_failure(cli(*tiny(out, "--resume")), 2, str(cfg), "corrupt")
    one_line_failure(cli("evaluate", str(out)), 2, str(cfg), "corrupt")


def test_check_owner_unit(tmp_path):
    ident = {"a": 1}
    same = lambda d: {"a": d["a"]}  # noqa: E731
    assert rundir.check_owner(tmp_path / "new", ident, identity_of=same) == "new"
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text('{"a": 1}')
    assert rundir.check_owner(tmp_path / "r", ident, identity_of=same) == "new"  # no checkpoint yet
    (tmp_path / "r" / "checkpoint.pt").write_bytes(b"x")
    with pytest.raises(rundir.RunDirError, match="--resume"):
        rundir.check_owner(tmp_path / "r", ident, identity_of=same)
    assert rundir.check_owner(tmp_path / "r", ident, identity_of=same, resume=True) == "resume"
    assert rundir.check_owner(tmp_path / "r", ident, identity_of=same, overwrite=True) == "overwrite"
    with pytest.raises(rundir.RunDirError, match="another run"):
        rundir.check_owner(tmp_path / "r", {"a": 2}, identity_of=same, overwrite=True)
    (tmp_path / "r" / "extra.txt").write_text("kept")
    rundir.clear_run(tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["extra.txt"]


# ----------------------------------------------------------------------------- the lock


def test_second_process_on_a_locked_directory_exits_2_at_once(tmp_path):
    out = tmp_path / "run"
    with rundir.lock(out, what="sweep"):
        t0 = time.monotonic()
        err = one_line_failure(cli(*tiny(out)), 2, "is in use by process", str(os.getpid()), "sweep")
        assert time.monotonic() - t0 < 120  # fails at start-up, does not wait for the holder
    assert not (out / "history.jsonl").exists() and "Traceback" not in err


def test_lock_is_exclusive_in_process_and_released(tmp_path):
    out = tmp_path / "run"
    with rundir.lock(out):
        (out / "config.json").write_text("{}")
        with pytest.raises(rundir.RunDirError, match="in use"):
            with rundir.lock(out):
                pass
    with rundir.lock(out):  # released: free again
        pass


def test_stale_lock_of_a_killed_process_is_taken_over(tmp_path):
    out = tmp_path / "run"
    # a holder killed with SIGKILL: its flock is gone, its lock file remains
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]); from calib.train import rundir\n"
        "with rundir.lock(sys.argv[1]):\n    print('locked', flush=True); time.sleep(600)"),
        str(out), str(ROOT)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(rundir.RunDirError, match=f"process {holder.pid}"):
            with rundir.lock(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((out / rundir.LOCK_FILE).read_text())["pid"] == holder.pid  # stale file left behind
    with rundir.lock(out):
        assert json.loads((out / rundir.LOCK_FILE).read_text())["pid"] == os.getpid()


def test_stale_pid_detection_without_flock(tmp_path, monkeypatch):
    import socket

    lock_file = tmp_path / rundir.LOCK_FILE
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock_file.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    assert rundir._stale(rundir._holder(lock_file))
    lock_file.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    assert not rundir._stale(rundir._holder(lock_file))
    lock_file.write_text(json.dumps({"pid": os.getpid(), "host": "elsewhere"}))
    assert not rundir._stale(rundir._holder(lock_file))  # another host's live lock is respected


# ----------------------------------------------------------------------------- failures in a run


def _config(out: Path, epochs: int = 2) -> TrainConfig:
    return TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": 16}, epochs=epochs, batch_size=64,
                       milestones=(), lr=0.05, seed=0, progress=False, out=str(out))


def test_divergence_stops_with_epoch_and_step_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    from calib.train import TrainingDiverged

    trainer = Trainer(_config(tmp_path / "run", epochs=3))
    steps_per_epoch = len(trainer.train_loader)
    calls = {"n": 0}
    real = Trainer.train_step

    def step(self, x, y):
        out = real(self, x, y)
        calls["n"] += 1
        if calls["n"] == steps_per_epoch + 3:  # epoch 2, step 3
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(Trainer, "train_step", step)
    with pytest.raises(TrainingDiverged, match="epoch 2, step 3") as info:
        trainer.fit()
    assert "lower learning rate" in str(info.value) and "last good checkpoint" in str(info.value)
    ckpt = load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)
    assert ckpt["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())


def test_divergence_from_the_cli_is_one_line_and_debug_shows_the_traceback(tmp_path):
    args = tiny(tmp_path / "run", "--lr", "1e30", "--optimizer", "sgd")
    one_line_failure(cli(*args), 1, "training diverged", "epoch 1, step", "lower learning rate")
    # following the advice in the same --out works: the diverged run left no results to protect
    done = cli(*tiny(tmp_path / "run", "--lr", "0.05", "--optimizer", "sgd"))
    assert done.returncode == 0, done.stderr[-2000:]
    shutil.rmtree(tmp_path / "run")
    done = cli(*args, env={"CALIB_DEBUG": "1"})
    assert done.returncode == 1 and "Traceback" in done.stderr and "TrainingDiverged" in done.stderr


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    from calib.train import trainer as T

    trainer = Trainer(_config(tmp_path / "run", epochs=2))
    real_save = torch.save
    saves = {"n": 0}

    def full_disk(obj, fh, *a, **k):
        saves["n"] += 1
        if saves["n"] == 2:
            fh.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, fh, *a, **k)

    monkeypatch.setattr(T.torch, "save", full_disk)
    with pytest.raises(OSError, match=f"could not write .*{CHECKPOINT_FILE}: No space left"):
        trainer.fit()
    assert load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)["epoch"] == 1  # still loadable
    assert not (tmp_path / "run" / f".{CHECKPOINT_FILE}.tmp").exists()


def test_archive_writer_failure_is_named_as_a_write_error(tmp_path, monkeypatch):
    """torch's zip writer reports a full disk as RuntimeError('... inline_container.cc ...')."""
    from calib.train import records

    def short_write(obj, fh, *a, **k):
        fh.write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 534")

    monkeypatch.setattr(records.torch, "save", short_write)
    target = tmp_path / "x.pt"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="could not write .*x.pt: the disk is full or a file-size limit") as info:
        records.atomic_save({"a": 1}, target)
    assert info.value.errno == errno.ENOSPC and target.read_bytes() == b"old"
    assert not (tmp_path / ".x.pt.tmp").exists()
    monkeypatch.setattr(records.torch, "save", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):  # anything else is not disguised
        records.atomic_save({"a": 1}, target)


def test_failed_text_write_leaves_no_temp_file(tmp_path, monkeypatch):
    from calib.train import records

    def full(self, text, *a, **k):
        with open(self, "w") as fh:
            fh.write(text[:3])
        raise OSError(errno.EFBIG, "File too large", str(self))

    monkeypatch.setattr(records.Path, "write_text", full)
    target = tmp_path / "history.jsonl"
    with pytest.raises(OSError, match="could not write .*history.jsonl: File too large"):
        records.atomic_write_text(target, "0123456789")
    assert not target.exists() and not list(tmp_path.iterdir())


def test_file_too_large_from_the_cli_is_one_line(tmp_path):
    def limit():  # writes beyond 64 KiB fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    out = tmp_path / "run"
    one_line_failure(cli(*tiny(out, "--model-arg", "hidden=256"), preexec=limit), 1, "calib: error:",
                     "could not write", str(out))
    assert not (out / f".{CHECKPOINT_FILE}.tmp").exists()


def test_schedule_and_result_warnings(tmp_path):
    done = cli(*tiny(tmp_path / "run", "--milestones", "1,5", "--batch-size", "5000", "--lr", "1e-9"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--milestones 1,5 at or beyond --epochs 1" in done.stderr
    assert "--batch-size 5000 is larger than the training set" in done.stderr
    assert "at chance level" in done.stderr


def test_ctrl_c_during_start_up_exits_130_quietly(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CALIB_PROFILE": "quick"}
    for delay in (0.3, 1.5):
        proc = subprocess.Popen([sys.executable, "-m", "calib", *tiny(tmp_path / f"run{delay}", epochs=50)],
                                env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err, err[-2000:]


def test_resume_with_another_process_count_is_a_checkpoint_error(tmp_path):
    from calib.train import CheckpointError

    Trainer(_config(tmp_path / "run", epochs=1)).fit()
    other = Trainer(_config(tmp_path / "run", epochs=1))
    other.train_loader.batch_size = 32  # what each of 2 processes holds for a global batch of 64
    with pytest.raises(CheckpointError, match="number of processes"):
        other.load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)


def test_temperature_at_its_clip_limit_is_a_warning(capsys):
    from calib.cli import _result_warnings

    base = {"pre_ts": {"accuracy": 0.9}}
    _result_warnings({**base, "temperature": 1000.0}, 10)
    _result_warnings({**base, "temperature": 1e-3}, 10)
    _result_warnings({**base, "temperature": 1.5}, 10)
    err = capsys.readouterr().err
    assert err.count("clip limit") == 2 and "chance" not in err
    grid = types.SimpleNamespace(ts_method="grid", ts_grid_step=0.1)  # the grid search's ends: 0.1 and 10
    for t in (10.0, 0.1, 2.3):
        _result_warnings({**base, "temperature": t}, 10, grid)
    err = capsys.readouterr().err
    assert err.count("grid's end [0.1, 10]") == 2
