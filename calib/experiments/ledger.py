"""The results ledger: sweeps too long for a chapter, run once and committed under ``results/``.

A chapter runs in minutes on one CPU thread; the full tables behind it take hours. Those
are run once with ``python -m calib ledger`` (``make ledger``) and committed, one folder
per sweep::

    results/<name>/sweep.json         the sweep's manifest (grid and every cell's settings)
    results/<name>/results.csv        one row per finished run; summary.csv, summary.md
    results/<name>/runs/<cell>/       config.json, history.jsonl (every epoch), metrics.json
    results/<name>/provenance.json  command, commits, torch, threads, machine, times

Checkpoints and logits stay out of git (``results/.gitignore``). Every ledger run uses
one thread per process, so a CPU run is deterministic on one kind of CPU
(:func:`rederivable_cells`): ``tests/test_ledger.py`` re-runs the first epochs of two
cells made on a CPU like this one from scratch and requires the numbers the ledger holds
to 1e-6, which proves the ledger came from this code and raises the alarm when the code
drifts from it. A sweep interrupted at any point resumes where it stopped (finished
cells are skipped, an interrupted one continues from its checkpoint), also in a later
session on a fresh clone, because the finished cells' records are committed.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .grid import cell_name_parts
from .machine import cpu_capability, git_commit, machine
from .results import RESULTS_FILE, load_results
from .sweep import MANIFEST_FILE, RUNS_DIR

__all__ = ["LedgerSweep", "SWEEPS", "ROOT", "PROVENANCE_FILE", "THREADS", "names", "command", "run",
           "record", "provenance", "load", "cell_dirs", "training_seconds", "histories", "refresh_command",
           "PROTOCOLS", "machine", "machines", "rederivable_cells", "diverged_cells", "paper_diverged",
           "PAPER_TABLES", "paper_runs", "method_table", "method_means", "method_runs", "available",
           "committed_root", "TABLE_COLUMNS", "REUSE", "REGIME_SIZES", "reuse", "keep_test_predictions",
           "test_predictions", "TEST_PREDICTIONS_FILE", "EQUAL_STEPS_EPOCHS", "REGIME_DRAW_SIZES",
           "REGIME_SPLIT_SEEDS"]

ROOT = "results"
PROVENANCE_FILE = "provenance.json"
THREADS = 1  # per process: the re-derivation test runs with the same count
PROFILE = "quick"  # every ledger cell's profile, on a GPU machine too

# Fashion-MNIST at the real CPU scale of the book (the book plan): 10,000 training images,
# 5,000 held out for temperature scaling, the 10,000 test images; cnn5 (width 16, ~98k
# parameters), SGD momentum 0.9, weight decay 5e-4, batch 128, 40 epochs with the learning
# rate divided by 10 at 20 and 30; test metrics recorded every epoch.
_FMNIST = ("--data", "fashion_mnist", "--model", "cnn5", "--train-size", "10000", "--val-size", "5000",
           "--epochs", "40", "--milestones", "20,30", "--batch-size", "128", "--momentum", "0.9",
           "--weight-decay", "5e-4", "--track", "test", "--no-progress")

# The three training protocols of the reduction study (issue: the authors' code sums the loss
# and clips the gradient norm at 2; calib averaged). C changes the learning rate and clipping
# but keeps the mean, so A -> C -> B separates the reduction from the other two factors.
PROTOCOLS = {
    "A": "lr=0.05",                                     # mean, lr 0.05, no clipping
    "C": "lr=0.1,clip_grad=2",                          # mean, lr 0.1, clip 2
    "B": "lr=0.1,clip_grad=2,loss_reduction=sum",       # sum, lr 0.1, clip 2: the authors' code
}
_LOSSES = ("ce", "focal:gamma=3", "bsce_gra:gamma=4,norm=2")


@dataclass(frozen=True)
class LedgerSweep:
    """One committed sweep: a name, why it exists, and the ``python -m calib sweep`` arguments."""

    name: str
    purpose: str
    args: tuple[str, ...]

    def arg(self, flag: str) -> str:
        """The value the sweep's arguments give ``flag`` (``"--epochs"`` -> ``"40"``)."""
        return self.args[self.args.index(flag) + 1]

    @property
    def n_cells(self) -> int:
        return self.args.count("--loss") * len(self.arg("--seeds").split(","))


def _losses(*specs: str) -> tuple[str, ...]:
    return tuple(a for spec in specs for a in ("--loss", spec))


# Every trainable method of a paper's Table 1 (calib.experiments.plans builds the same specs
# from calib/paper_results.csv; tests/test_ledger.py checks they agree), at the scale above
# under the paper's preset: its reduction, clipping and temperature fit, 40 epochs.
PAPER_TABLES = {
    "lin2024_t1": ("lin2024", "Lin et al. (2024) Table 1",
                   ("ce", "brier", "mmce:normalization=code", "flsd53", "dual_focal", "bsce", "bsce_gra")),
    "mukhoti2020_t1": ("mukhoti2020", "Mukhoti et al. (2020) Table 1",
                       ("ce", "brier", "mmce:normalization=code", "label_smoothing:alpha=0.05", "focal")),
    "wang2024_t1": ("wang2024", "Wang & Golebiowski (2024) Table 1",
                    ("ce", "focal:gamma=1.0", "flsd53", "label_smoothing", "label_smoothing:epsilon=0.1",
                     "ce@mixup_alpha=1.0", "mmce", "ce@meta=l2_reg,meta_objective=dece",
                     "ce@meta=l2_reg,meta_objective=sece", "focal@meta=gamma_net,meta_objective=dece",
                     "focal@meta=gamma_net,meta_objective=sece")),
}
# Wang et al. (2021) Tables 1-2 (chapter 9: CIFAR-10 coefficients, plus inverse focal loss)
# and the coefficient grids of chapter 10, under the wang2021 preset.
_WANG2021 = ("ce", "label_smoothing:epsilon=0.05", "logit_norm:alpha=0.05", "focal:gamma=3",
             "inverse_focal:gamma=1", "inverse_focal:gamma=2")
_BENCH = ("ce", *(f"label_smoothing:epsilon={c}" for c in (0.01, 0.05, 0.09)),
          *(f"logit_norm:alpha={c}" for c in (0.01, 0.05, 0.1)),
          *(f"entropy_reg:alpha={c}" for c in (0.1, 0.3, 0.5)), *(f"focal:gamma={c}" for c in (1.0, 3.0, 5.0)))

# The γ-Net meta learning rate of the gamma_net_lr sweep: a tenth of calib's default (Adam's 1e-3),
# under which the mean learned γ passes 19 within fifteen epochs on every wang2024_t1 run.
GAMMA_NET_LR = 1e-4

# The regime map (issue 33): how the training-set size changes what a calibration loss does.
# Sizes 2,500, 10,000 and all 55,000 (the training split left after 5,000 for validation);
# under protocol B (the authors' summed loss) CE, focal, BSCE-GRA and dual focal, under
# protocol A (mean) the first three. The 10,000-image cells carry no train_size setting, so
# they are the reduction sweep's cells by name and identity and are copied, not retrained
# (REUSE); the cheap sizes come first in grid order, so a stopped sweep has them.
REGIME_SIZES = (2_500, 10_000, 55_000)
_REGIME_METHODS = (*(f"{loss}@{PROTOCOLS['B']}" for loss in (*_LOSSES, "dual_focal")),
                   *(f"{loss}@{PROTOCOLS['A']}" for loss in _LOSSES))


def _at_size(method: str, size: int) -> str:
    return method if size == 10_000 else f"{method},train_size={size}"


REUSE = {"regime": "reduction"}  # sweep -> the sweep whose identical finished cells it copies

# Chapter 14's controls (issue 42). At a fixed 40 epochs the size also sets the number of SGD
# steps (79 a epoch at 10,000 images, 430 at 55,000): the equal-steps arm trains 10,000 images
# for 220 epochs (17,380 steps, about those of 55,000 x 40) with the milestones scaled, so
# "more data" and "longer training after the drop" can be told apart. The subset draws train
# the smaller sizes on two more draws of their training and validation images (split seeds
# 1 and 2), so a trend over sizes is not one draw of images.
EQUAL_STEPS_EPOCHS, EQUAL_STEPS_MILESTONES = 220, "110,165"
REGIME_DRAW_SIZES, REGIME_SPLIT_SEEDS = (2_500, 10_000), (1, 2)


def _with_epochs(args: tuple[str, ...], epochs: int, milestones: str) -> tuple[str, ...]:
    out = list(args)
    out[out.index("--epochs") + 1], out[out.index("--milestones") + 1] = str(epochs), milestones
    return tuple(out)

SWEEPS: dict[str, LedgerSweep] = {
    "reduction": LedgerSweep(
        "reduction",
        "What the loss reduction changes (issue 24): CE, focal (γ = 3) and BSCE-GRA (γ = 4, β = 2) "
        "under protocols A (mean, lr 0.05), C (mean, lr 0.1, clip 2) and B (sum, lr 0.1, clip 2: "
        "the authors' code), 3 seeds; the per-epoch test ECE gives the curve against training length.",
        _FMNIST + ("--seeds", "0,1,2")
        + tuple(a for loss in _LOSSES for p in PROTOCOLS.values() for a in ("--loss", f"{loss}@{p}")),
    ),
    **{name: LedgerSweep(name, f"{title}: every method calib trains, at the real CPU scale under the "
                               f"{preset} preset, 3 seeds.",
                         _FMNIST + ("--preset", preset, "--seeds", "0,1,2") + _losses(*specs))
       for name, (preset, title, specs) in PAPER_TABLES.items()},
    "wang2021_t12": LedgerSweep(
        "wang2021_t12", "Wang et al. (2021) Tables 1-2 (chapter 9): CE, label smoothing, the L1 logit penalty "
        "and focal loss with their CIFAR-10 coefficients, and inverse focal loss, under the wang2021 preset, "
        "3 seeds.", _FMNIST + ("--preset", "wang2021", "--seeds", "0,1,2") + _losses(*_WANG2021)),
    "gamma_net_lr": LedgerSweep(
        "gamma_net_lr", "γ-Net's meta learning rate (chapter 11): γ-Net with SECE and with DECE as in "
        "wang2024_t1, but with the γ-Net's Adam at 1e-4 instead of calib's default 1e-3 (Wang & "
        "Golebiowski (2024) give none), 3 seeds.",
        _FMNIST + ("--preset", "wang2024", "--seeds", "0,1,2")
        + _losses(*(f'focal@meta=gamma_net,meta_objective={o},meta_kwargs={{"meta_lr":{GAMMA_NET_LR}}}'
                    for o in ("sece", "dece")))),
    "regime": LedgerSweep(
        "regime", "When calibration losses help (issue 33): CE, focal (γ = 3), BSCE-GRA (γ = 4, β = 2) "
        "and dual focal under the authors' protocol B (sum, lr 0.1, clip 2), and the first three under "
        "protocol A (mean, lr 0.05), at 2,500, 10,000 and all 55,000 training images, 3 seeds; the "
        "10,000-image cells of the reduction sweep are reused.",
        _FMNIST + ("--seeds", "0,1,2")
        + _losses(*(_at_size(m, n) for n in REGIME_SIZES for m in _REGIME_METHODS))),
    "device_check": LedgerSweep(
        "device_check", "Does the device change a ledger cell? (issue 33): six cells of the reduction sweep "
        "(protocol A, 10,000 images, CE and focal loss, 3 seeds), made on a CPU, trained again on the GPU "
        "that made the regime sweep's protocol-A cells at 55,000 images (python -m calib ledger "
        "device_check --device cuda).",
        _FMNIST + ("--seeds", "0,1,2") + _losses(*(f"{loss}@{PROTOCOLS['A']}" for loss in _LOSSES[:2]))),
    "regime_draws": LedgerSweep(
        "regime_draws", "Chapter 14's subset draws (issue 42): the regime sweep's methods at 2,500 and 10,000 "
        "training images on two more draws of the training and validation images (split seeds 1 and 2), "
        "3 seeds each; the 2,500-image cells first.",
        _FMNIST + ("--seeds", "0,1,2")
        + _losses(*(f"{_at_size(m, n)},split_seed={s}" for n in REGIME_DRAW_SIZES for s in REGIME_SPLIT_SEEDS
                    for m in _REGIME_METHODS))),
    "equal_steps": LedgerSweep(
        "equal_steps", "Chapter 14's equal-steps arm (issue 42): the regime sweep's methods at 10,000 images "
        f"for {EQUAL_STEPS_EPOCHS} epochs (milestones {EQUAL_STEPS_MILESTONES}), the SGD steps of 55,000 "
        "images x 40 epochs, 3 seeds.",
        _with_epochs(_FMNIST, EQUAL_STEPS_EPOCHS, EQUAL_STEPS_MILESTONES) + ("--seeds", "0,1,2")
        + _losses(*_REGIME_METHODS)),
    "bench": LedgerSweep(
        "bench", "Chapter 10's coefficient grids (label smoothing, L1 logit penalty, entropy regulariser, "
        "focal loss) beside CE, under the wang2021 preset, 3 seeds.",
        _FMNIST + ("--preset", "wang2021", "--seeds", "0,1,2") + _losses(*_BENCH)),
}


def names() -> list[str]:
    return list(SWEEPS)


def _sweep(name: str) -> LedgerSweep:
    if name not in SWEEPS:
        raise ValueError(f"unknown ledger sweep {name!r}; the ledger holds: {', '.join(SWEEPS)}")
    return SWEEPS[name]


def command(name: str, root: str | os.PathLike = ROOT, shard: tuple[int, int] | None = None,
            device: str | None = None) -> list[str]:
    """The ``python -m calib sweep`` command line of a ledger sweep (one shard of it, if given).

    ``device`` is a runtime setting: it changes where the cells train, not which cells
    they are, so a sweep's cells may come from several machines.
    """
    cmd = ["python", "-m", "calib", "sweep", *_sweep(name).args, "--out", str(Path(root) / name)]
    return cmd + (["--shard", f"{shard[0]}/{shard[1]}"] if shard else []) + (["--device", device] if device else [])


def refresh_command(name: str) -> str:
    return f"make ledger LEDGER={name}   (python -m calib ledger {name})"


def _thread_env() -> dict[str, str]:
    # The ledger's cells are the same runs wherever they train: the quick profile (with CUDA
    # present the default would be colab, a different cell identity) in float32 (without
    # NVIDIA_TF32_OVERRIDE=0, cuDNN's convolutions round their inputs to TF32, a 10-bit mantissa).
    return {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS), "CALIB_PROGRESS": "0",
            "CALIB_PROFILE": PROFILE, "NVIDIA_TF32_OVERRIDE": "0"}


def run(name: str, root: str | os.PathLike = ROOT, jobs: int = 2, log: Any = sys.stderr,
        device: str | None = None) -> dict[str, Any]:
    """Run (or resume) a ledger sweep in ``jobs`` one-thread shards, merge, write its provenance.

    ``device`` (default: CUDA when present, else the CPU) is passed to every shard; on a
    GPU the shards share it. The session names the GPU, so cells made there are never
    re-derived on a CPU (:func:`rederivable_cells`). Returns the provenance.

    Finished cells are skipped, so this is also how an interrupted ledger continues.
    Ctrl+C (SIGINT) or SIGTERM stops it cleanly: each shard checkpoints its cell, the finished cells
    are merged into ``results.csv`` and the session is recorded as stopped, so what is
    there can be committed and ``make ledger`` resumes it later.
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    if device is None:
        from .. import profile

        device = str(profile.device())  # what the shards will pick, named in the provenance
    start, commit = time.time(), git_commit()
    if name in REUSE:
        reuse(name, REUSE[name], root, log)
    procs = []
    for i in range(1, jobs + 1):
        cmd = command(name, root, (i, jobs) if jobs > 1 else None, device)
        print(f"ledger {name}: {shlex.join(cmd)}", file=log, flush=True)
        procs.append(subprocess.Popen([sys.executable, *cmd[1:]], env=_thread_env()))
    # SIGTERM stops it as Ctrl+C does: a ledger started in the background from a script
    # inherits an ignored SIGINT, and kill's default signal is SIGTERM
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # a shard checkpoints its cell and stops
        for p in procs:
            p.wait()
        record(name, root, jobs, commit, start, stopped=True, device=device)
        print(f"ledger {name}: stopped; finished cells merged, {refresh_command(name)} resumes it",
              file=log, flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if any(codes):
        raise RuntimeError(f"ledger sweep {name!r}: a shard exited with {codes}; re-run to resume")
    return record(name, root, jobs, commit, start, device=device)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def reuse(name: str, source: str, root: str | os.PathLike = ROOT, log: Any = sys.stderr) -> list[str]:
    """Copy into sweep ``name`` the finished cells of sweep ``source`` that it plans identically.

    A cell is reused when its directory name and its training identity
    (:meth:`calib.train.TrainConfig.identity`, which leaves out where it ran) both match
    the manifest: the records are the same run, so retraining it would only spend hours.
    Returns the names of the cells copied now.
    """
    import shutil

    from ..train import load_config

    out = Path(root) / name
    _merge(name, root, quiet=True)  # writes the manifest (trains nothing)
    planned = json.loads((out / MANIFEST_FILE).read_text())["runs"]
    copied = []
    for src in cell_dirs(source, root):
        dst = out / RUNS_DIR / src.name
        if src.name not in planned or (dst / "metrics.json").exists():
            continue
        if load_config(src).identity() != planned[src.name]:
            continue
        dst.mkdir(parents=True, exist_ok=True)
        for f in ("config.json", "history.jsonl", "metrics.json"):  # metrics.json last: it marks the cell done
            shutil.copy2(src / f, dst / f)
        copied.append(src.name)
    if copied:
        print(f"ledger {name}: {len(copied)} cells reused from {source}", file=log, flush=True)
    return copied


# A finished cell's test predictions, committed (its logits.pt is not): float32 logits and the
# labels, compressed, so a ledger verdict can add the test set's sampling noise to the seeds'.
TEST_PREDICTIONS_FILE = "test_predictions.npz"


def keep_test_predictions(name: str, root: str | os.PathLike = ROOT) -> list[str]:
    """Write ``test_predictions.npz`` (``logits`` float32 (N, K), ``labels`` int64 (N,)) into
    every finished cell of sweep ``name`` whose ``logits.pt`` is here and that has none yet.
    Returns the cells written now."""
    import numpy as np

    from ..train import load_logits

    written = []
    for cell in cell_dirs(name, root):
        target = cell / TEST_PREDICTIONS_FILE
        if target.exists() or not (cell / "logits.pt").exists():
            continue
        record = load_logits(cell)
        tmp = cell / (TEST_PREDICTIONS_FILE + ".tmp")
        with open(tmp, "wb") as f:
            np.savez_compressed(f, logits=record["test_logits"].float().numpy(),
                                labels=record["test_labels"].long().numpy())
        os.replace(tmp, target)
        written.append(cell.name)
    return written


def test_predictions(cell: str | os.PathLike) -> tuple[Any, Any] | None:
    """A ledger cell's committed test ``(logits, labels)`` as float32/int64 tensors, or None."""
    import numpy as np
    import torch

    path = Path(cell) / TEST_PREDICTIONS_FILE
    if not path.exists():
        return None
    with np.load(path) as f:
        return torch.from_numpy(f["logits"]), torch.from_numpy(f["labels"])


def record(name: str, root: str | os.PathLike = ROOT, jobs: int = 1, commit: str | None = None,
           start: float | None = None, *, stopped: bool = False, device: str | None = None) -> dict[str, Any]:
    """Merge the finished cells into ``results.csv``, keep their test predictions
    (:func:`keep_test_predictions`) and add this session to the provenance."""
    import torch

    _merge(name, root)
    made_here = keep_test_predictions(name, root)  # a cell's logits.pt exists where it was trained
    prov = provenance(name, root)
    session: dict[str, Any] = {"jobs": jobs, "commit": commit or git_commit(), "machine": machine(device),
                               "cpu_capability": cpu_capability(), "torch": torch.__version__,
                               "python": platform.python_version(), "cells": sorted(made_here)}
    if device and device != "cpu":
        session["device"] = device
    if start is not None:
        session["wall_seconds"] = round(time.time() - start, 1)
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    session.update({"stopped": now, "note": "stopped before the end; make ledger resumes it"} if stopped
                   else {"finished": now})
    prov["sessions"] = prov.get("sessions", []) + [session]
    (Path(root) / name / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
    return prov


def _merge(name: str, root: str | os.PathLike, *, quiet: bool = False) -> None:
    """Merge sweep ``name``'s finished cells into ``results.csv`` and write its manifest
    (``python -m calib sweep ... --merge``, which trains nothing)."""
    subprocess.run([sys.executable, *command(name, root)[1:], "--merge"], env=_thread_env(), check=True,
                   stdout=subprocess.DEVNULL if quiet else None)


def _cpu(machine_name: str) -> str:
    """The architecture and CPU model of a provenance's machine (the core count dropped)."""
    return machine_name.rsplit(", ", 1)[0]


def machines(name: str, root: str | os.PathLike | None = None) -> set[str]:
    """The CPUs (architecture, model) a committed sweep's sessions ran on.

    A session recorded before sessions named their machine ran on the provenance's.
    """
    prov = _provenance(name, root)
    return {_cpu(s.get("machine", prov.get("machine", "unknown"))) for s in prov.get("sessions", [{}])}


def rederivable_cells(root: str | os.PathLike | None = None) -> list[Path]:
    """Finished cells of the sweeps run wholly on this machine's CPU model and instruction
    set, of losses whose kernels have not changed since (:func:`capabilities`).

    One thread makes a CPU run deterministic on one kind of CPU, not across kinds: the
    math libraries pick their kernels by instruction set (AVX2, AVX-512, ...), the last
    bits of a convolution differ, and over an epoch of SGD the runs drift apart (measured:
    a summed-loss cell made on an AMD EPYC re-run on an Intel Xeon with AVX-512 gives a
    test ECE of 0.108 instead of 0.036 after one epoch). So a re-derivation to 1e-6
    compares only cells made on a CPU like this one. A sweep whose sessions ran on several
    kinds of CPU gives the cells that its sessions on this kind list as made there (sessions
    record their ``cells`` since 2026-12-04).
    """
    here, isa = _cpu(machine()), cpu_capability()
    out = []
    for n in names():
        if not available(n, root, quiet=True):
            continue
        fused_current = _fused_current(n, root)
        cells = [d for d in cell_dirs(n, root) if fused_current or _cell_loss(d.name) not in FUSED_LOSSES]
        if machines(n, root) == {here} and capabilities(n, root) == {isa}:
            out += cells
        else:
            out += [d for d in cells if d.name in _made_on(n, here, isa, root)]
    return out


def _made_on(name: str, cpu: str, isa: str, root: str | os.PathLike | None) -> set[str]:
    """The cells that sweep ``name``'s sessions on ``cpu`` with instruction set ``isa`` made."""
    prov = _provenance(name, root)
    return {c for s in prov.get("sessions", []) if s.get("cpu_capability") == isa
            and _cpu(s.get("machine", prov.get("machine", ""))) == cpu for c in s.get("cells", [])}


def capabilities(name: str, root: str | os.PathLike | None = None) -> set[str]:
    """The instruction sets (torch's ``cpu_capability``: AVX2, AVX512, ...) a sweep's sessions
    ran with; ``"unknown"`` for a session that did not record it. One CPU model name covers
    several generations (an AVX2 and an AVX-512 AMD EPYC), whose kernels differ in the last
    bits: a CE cell of the reduction sweep, made on an AMD EPYC of unrecorded capability,
    re-ran on an AVX2 EPYC at a train loss of 0.8854 against 0.8733 after one epoch."""
    return {s.get("cpu_capability", "unknown") for s in _provenance(name, root).get("sessions", [{}])}


# The losses whose float32 last bits changed when they moved to one fused kernel
# (calib.losses._fused, commit b84ba7d, 2026-12-02 02:37 UTC): a cell of one of them made
# before re-derives to within SGD's amplification of those bits, not to 1e-6 (measured: a
# reduction-sweep BSCE-GRA cell on AMD EPYC, train loss 0.5780 against 0.5730 after one
# epoch). Refresh such a sweep (make ledger) to make its cells re-derivable again.
FUSED_LOSSES = ("focal", "flsd53", "dual_focal", "inverse_focal", "bsce", "focal_gra", "flsd53_gra",
                "dual_focal_gra", "bsce_gra")
FUSED_SINCE = "2026-12-02 02:37"


def _fused_current(name: str, root: str | os.PathLike | None) -> bool:
    """Whether every session of sweep ``name`` stopped after the losses moved to the fused
    kernels (:data:`FUSED_SINCE`), so its cells of :data:`FUSED_LOSSES` used this code's."""
    sessions = _provenance(name, root).get("sessions", [])
    return bool(sessions) and all(s.get("stopped", "") >= FUSED_SINCE for s in sessions)


def _cell_loss(cell: str) -> str:
    """The loss of a cell directory (:func:`cell_name_parts`; "" for a name of another form)."""
    parts = cell_name_parts(cell)
    return parts[0] if parts else ""


def provenance(name: str, root: str | os.PathLike = ROOT) -> dict[str, Any]:
    """Where a ledger sweep's numbers came from: command, commit, versions, threads, machine, times."""
    import torch

    out = Path(root) / name
    old = json.loads((out / PROVENANCE_FILE).read_text()) if (out / PROVENANCE_FILE).exists() else {}
    rows = load_results(out) if (out / RESULTS_FILE).exists() else []
    return {
        **old,
        "sweep": name,
        "purpose": _sweep(name).purpose,
        "command": shlex.join(command(name, root)),
        "threads_per_process": THREADS,
        "torch": old.get("torch", torch.__version__),  # of its first session, like machine
        "python": old.get("python", platform.python_version()),
        "machine": old.get("machine", machine()),  # of its first session; each session names its own
        "cells_finished": len(rows),
        "cells_diverged": len(diverged_cells(name, root)),
        "cells_planned": _sweep(name).n_cells,
        "training_seconds": round(training_seconds(name, root), 1),
        **({"cells_reused_from": REUSE[name]} if name in REUSE else {}),
    }


def cell_dirs(name: str, root: str | os.PathLike | None = None) -> list[Path]:
    """Run directories of the sweep's finished cells, sorted by name (root: the committed ledger)."""
    out = _root(root) / name
    if not (out / MANIFEST_FILE).exists():
        return []
    return sorted(p for p in (out / RUNS_DIR).iterdir() if (p / "metrics.json").exists())


def diverged_cells(name: str, root: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """The sweep's cells whose training diverged (no row): ``{cell: {"epoch", "step", ...}}``."""
    from .sweep import diverged

    runs = _root(root) / name / RUNS_DIR
    found = {d.name: diverged(d) for d in sorted(runs.iterdir())} if runs.is_dir() else {}
    return {cell: record for cell, record in found.items() if record is not None}


def training_seconds(name: str, root: str | os.PathLike | None = None) -> float:
    """Training time of every finished or diverged cell: the epochs' wall ``seconds`` in
    ``history.jsonl`` (a diverged cell's up to its last good epoch).

    Each cell runs on one thread, so on an idle machine this is its CPU time; on a shared
    machine it is longer (the provenance's machine and sessions say where it ran).
    """
    runs = [*histories(name, root).values(), *histories(name, root, diverged=True).values()]
    return sum(float(epoch.get("seconds", 0.0)) for history in runs for epoch in history)


def load(name: str, root: str | os.PathLike | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of ``results.csv`` and the provenance of a committed ledger sweep."""
    prov = _provenance(name, root)
    return load_results(_root(root) / _sweep(name).name), prov


def _provenance(name: str, root: str | os.PathLike | None) -> dict[str, Any]:
    """The provenance of sweep ``name`` that :func:`load` returns beside its rows, without
    parsing ``results.csv``; like :func:`load`, FileNotFoundError where it has no rows."""
    out = _root(root) / _sweep(name).name
    if not (out / RESULTS_FILE).exists():
        raise FileNotFoundError(f"{out / RESULTS_FILE} not found: run {refresh_command(name)}")
    return json.loads((out / PROVENANCE_FILE).read_text()) if (out / PROVENANCE_FILE).exists() else {}


def histories(name: str, root: str | os.PathLike | None = None, *,
              diverged: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Per-epoch history of every finished cell (``diverged=True``: of every diverged cell
    instead, up to its last good epoch), by cell directory name."""
    dirs = ([_root(root) / name / RUNS_DIR / c for c in diverged_cells(name, root)] if diverged
            else cell_dirs(name, root))
    return {d.name: [json.loads(x) for x in (d / "history.jsonl").read_text().splitlines()] for d in dirs}


# -- reading a committed sweep (what the chapters show) ------------------------------------


def committed_root() -> Path:
    """The committed ledger: ``results/`` of the repository that holds this ``calib``.

    It is part of a clone (or an editable install), not of the pip package: the chapters
    read it from a clone of the repository.
    """
    return Path(__file__).resolve().parents[2] / ROOT


def available(name: str, root: str | os.PathLike | None = None, *, quiet: bool = False) -> bool:
    """Whether sweep ``name`` has committed rows here; if not, say in one line where they are.

    The ledger is part of the repository, not of the pip package: after ``pip install``
    (Colab) a chapter's ledger section has nothing to read unless the repository is cloned.
    """
    folder = _root(root)
    if (folder / _sweep(name).name / RESULTS_FILE).exists():
        return True
    if quiet:
        return False
    import textwrap

    if folder.is_dir():  # a clone whose ledger does not hold this sweep yet
        text = (f"The results ledger has no rows of the sweep {name!r} yet "
                f"({_sweep(name).n_cells} cells): {refresh_command(name)} runs it.")
    else:
        text = (f"The results ledger ({ROOT}/{name}) is not here: it is part of the "
                "repository, not of the pip package. Clone the repository to see this section.")
    print(textwrap.fill(text, width=80))
    return False


def paper_runs(name: str, plan: Any, root: str | os.PathLike | None = None) -> dict[tuple[str, str, str], Any]:
    """The committed runs of a paper-table sweep, keyed like a chapter's own results.

    ``name`` is a key of :data:`PAPER_TABLES`; ``plan`` the chapter's
    :class:`calib.experiments.plans.PlannedRun` list. Returns ``{run.key: DataFrame}`` for
    every planned run of that table whose spec has rows in ``results.csv`` (a method the
    ledger has not reached yet is absent, so :func:`calib.experiments.plans.beside_paper`
    prints it as "not run").
    """
    import pandas as pd

    if name not in PAPER_TABLES:
        raise ValueError(f"{name!r} is not a paper-table sweep; those are: {', '.join(PAPER_TABLES)}")
    return _planned(pd.DataFrame(load(name, root)[0]), name, plan)


def paper_diverged(name: str, plan: Any, root: str | os.PathLike | None = None) -> dict[tuple[str, str, str], int]:
    """How many seeds of each planned run of a paper-table sweep diverged (only those with any)."""
    frame = _diverged_frame(name, root)
    if frame.empty:
        return {}
    return {key: len(runs) for key, runs in _planned(frame, name, plan).items()}


def _diverged_frame(name: str, root: str | os.PathLike | None) -> Any:
    """The diverged cells' key columns (data, model, loss, loss_kwargs, settings, seed, as a
    results row has them) as a DataFrame; empty where none diverged."""
    import pandas as pd

    frame = pd.DataFrame(list(diverged_cells(name, root).values()))
    return frame if {"loss", "loss_kwargs"} <= set(frame.columns) else pd.DataFrame()


def _planned(frame: Any, name: str, plan: Any) -> dict[tuple[str, str, str], Any]:
    """``{run.key: its rows of frame}`` for the runs of ``plan`` in paper table ``name`` that
    have any rows there."""
    from .tables import runs_of

    title = PAPER_TABLES[name][1]
    found = {r.key: runs_of(frame, r.spec) for r in plan if r.table == title}
    return {key: runs for key, runs in found.items() if len(runs)}


# (column, heading, scale) of the ledger's tables: percentages for accuracy and ECE, T as is
TABLE_COLUMNS = (("accuracy", "accuracy (%)", 100.0), ("ece", "ECE (%)", 100.0), ("temperature", "T", 1.0),
                 ("ece_ts", "ECE after TS (%)", 100.0))


def method_table(name: str, methods: Mapping[str, Any], root: str | os.PathLike | None = None) -> Any:
    """``mean ± std`` over the seeds of a sweep's committed rows, one row per method.

    ``methods`` is ``{label: loss spec}`` as a chapter names its losses. Columns
    (:data:`TABLE_COLUMNS`): ``n``, the accuracy and the ECE before and after temperature
    scaling (the sweep's own T fit) in percent, and ``T``. A method without rows has
    ``n`` = 0 and says why in its cells: "diverged" where its runs diverged (loss NaN or
    inf, kept without a row), "not yet run" where the ledger has not reached it.
    """
    import pandas as pd

    from .tables import mean_std, runs_of

    blown = _diverged_frame(name, root)
    rows = {}
    for label, runs in method_runs(name, methods, root).items():
        why = "diverged" if not blown.empty and len(runs_of(blown, methods[label])) else "not yet run"
        rows[label] = {"n": len(runs), **{head: mean_std(runs[col], scale) if len(runs) else why
                                          for col, head, scale in TABLE_COLUMNS}}
    return pd.DataFrame(rows).T.rename_axis(f"ledger: {name}")


def method_means(name: str, methods: Mapping[str, Any], column: str,
                 root: str | os.PathLike | None = None) -> Any:
    """The mean over seeds of one metric ``column`` (e.g. ``"ece"``, ``"ece_ts"``) per method.

    ``methods`` as in :func:`method_table`; a Series indexed by its labels, NaN for a
    method the ledger has not reached yet, so a chapter can test an ordering on it.
    """
    import pandas as pd

    return pd.Series({label: runs[column].mean() if len(runs) else float("nan")
                      for label, runs in method_runs(name, methods, root).items()}, name=column)


def method_runs(name: str, methods: Mapping[str, Any], root: str | os.PathLike | None = None) -> dict[str, Any]:
    """The committed rows of each method (``{label: loss spec}``): ``{label: DataFrame}``, one row a seed."""
    import pandas as pd

    from .tables import runs_of

    frame = pd.DataFrame(load(name, root)[0])
    return {label: runs_of(frame, spec) for label, spec in methods.items()}


def _root(root: str | os.PathLike | None) -> Path:
    return committed_root() if root is None else Path(root)
