"""Training throughput: an epoch of :class:`calib.train.Trainer` against a minimal hand-written loop.

Default run (``python benchmarks/train_step.py``, part of ``make bench``): the book's real-data
quick scale, Fashion-MNIST + ``cnn5`` (width 16), SGD (momentum 0.9, weight decay 5e-4),
batch 128, cross-entropy, float32, on a class-balanced ``--train-size`` subset (2,560 images
= 20 batches), one thread on CPU like the results ledger (``--threads``). In one process,
the variants taking turns round after round (``_timing.interleaved_times``):

* ``forward+backward only``: the model alone on the batches, no optimiser step (the
  physical limit of any loop);
* ``minimal loop``: what a researcher writes with the data already on the device
  (normalised float batches made once): ``model(x)``, ``F.cross_entropy``, ``zero_grad``,
  ``backward``, ``step``; no logging;
* ``minimal loop, deterministic``: the same under ``torch.use_deterministic_algorithms``,
  which :meth:`Trainer.fit` switches on for a CPU run (reproducibility, not speed);
* ``Trainer epoch``: the trainer's epoch as :meth:`Trainer.fit` runs it: its loader,
  its steps through ``progress.Monitor`` (sums, NaN/inf flag, bars), ``scheduler.step``.

Ratios are the median over rounds of same-round pairs against the minimal loop (>1 means
slower; goal for the trainer <= 1.05). Then each thing the trainer adds per step is timed
alone over one epoch's steps, and their sum is set against the measured gap; the per-epoch
extras the minimal loop has no counterpart for (validation pass, checkpoint write) get
rows of their own. ``--data fake`` (or missing Fashion-MNIST files) uses random images of
the same shape; ``--model``/``--batch``/``--amp``/``--channels-last`` run the same comparison
elsewhere (e.g. ``--data fake_cifar --model resnet20 --amp bf16`` on a GPU).

``--resnet20``: the earlier comparison instead: ResNet-20 train steps (CIFAR shapes, batch
128) eager vs channels_last vs ``torch.compile``.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import header, interleaved_times, median_time, paired_ratio, row  # noqa: E402

from calib import profile  # noqa: E402
from calib.data import Splits  # noqa: E402
from calib.experiments.grid import parse_loss  # noqa: E402
from calib.train import TrainConfig, Trainer  # noqa: E402
from calib.train.distributed import deterministic as fit_mode  # noqa: E402
from calib.train.progress import Monitor, tqdm_class  # noqa: E402

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def fake_images(n: int, shape: tuple[int, ...], n_eval: int = 1024) -> Splits:
    """Random uint8 images and labels of the given ``(C, H, W)`` (only shapes matter for timing)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    c = shape[0]
    xe, ye = x[:n_eval], y[:n_eval]
    return Splits(x, y, xe, ye, xe, ye, num_classes=10, mean=(0.5,) * c, std=(0.25,) * c, name="fake", image=True)


def load_data(name: str, train_size: int, val_size: int) -> Splits:
    if name == "fake_cifar":
        return fake_images(train_size, (3, 32, 32))
    if name == "fashion_mnist":
        from calib.data import load

        try:
            return load("fashion_mnist", train_size=train_size, val_size=val_size)
        except (FileNotFoundError, OSError) as exc:
            print(f"Fashion-MNIST not found ({str(exc).splitlines()[0][:100]}); timing random images "
                  "of its shape instead (make fashion-mnist installs the files)")
    return fake_images(train_size, (1, 28, 28), n_eval=val_size)


# -- the loops ------------------------------------------------------------------------------


def minimal_epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, batches: Batches,
                  amp: torch.dtype | None, scaler: torch.amp.GradScaler | None = None) -> None:
    """The hand-written loop: forward (autocast when ``amp``), float32 CE, backward, step
    (through ``scaler`` for float16, which needs loss scaling)."""
    model.train()
    for x, y in batches:
        with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()


def forward_backward(model: torch.nn.Module, batches: Batches, amp: torch.dtype | None) -> None:
    """Forward and backward of every batch, gradients dropped: no optimiser step."""
    model.train()
    for x, y in batches:
        with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
            logits = model(x)
        F.cross_entropy(logits.float(), y).backward()
        model.zero_grad(set_to_none=True)


def trainer_epoch(trainer: Trainer, devnull) -> None:
    """One epoch as ``Trainer.fit`` runs it: its steps through :class:`Monitor` (sums, the
    NaN/inf flag, the bar as the run's config shows it), then the scheduler's step."""
    with fit_mode(trainer.device), Monitor(trainer) as monitor:
        for x, y in monitor.batches(trainer.train_loader):
            monitor.record(trainer.train_step(x, y), y.shape[0])
        monitor.epoch_means()
        trainer.scheduler.step()


# -- what the trainer adds, piece by piece --------------------------------------------------


def trainer_parts(trainer: Trainer, batches: Batches, devnull) -> dict[str, Callable[[], object]]:
    """Each piece of per-step work the minimal loop does not do, over one epoch's steps."""
    with torch.no_grad():
        trainer.model.eval()
        logits = [trainer.model(x).float() for x, _ in batches]
    losses = [F.cross_entropy(g, y) for g, (_, y) in zip(logits, batches)]
    steps = len(batches)

    def loader() -> None:  # index_select + float + normalise, per batch
        for _ in trainer.train_loader:
            pass

    def calib_ce_checks() -> None:  # calib.losses' CE (input checks) minus torch's, forward only
        for g, (_, y) in zip(logits, batches):
            trainer.criterion(g, y)

    def torch_ce() -> None:
        for g, (_, y) in zip(logits, batches):
            F.cross_entropy(g, y)

    def sums_and_nonfinite_flag() -> None:  # Monitor.record per step, epoch_means once
        monitor = Monitor(trainer)
        for g, loss, (_, y) in zip(logits, losses, batches):
            monitor.record({"loss": loss.detach(), "acc": (g.detach().argmax(1) == y).float().mean()},
                           y.shape[0])
        monitor.epoch_means()

    def progress_bar() -> None:
        with tqdm_class(True)(total=steps, leave=False, mininterval=1.0, file=devnull) as bar:
            for _ in range(steps):
                bar.update(1)

    def train_mode_and_scaler() -> None:  # net.train() and the (disabled on CPU) GradScaler per step
        for loss in losses:
            trainer.net.train()
            trainer.scaler.scale(loss)
            trainer.scaler.update()

    return {"loader (index_select, scale; the minimal loop's batches are ready)": loader,
            "calib CE with its input checks": calib_ce_checks, "  torch F.cross_entropy": torch_ce,
            "train loss/accuracy sums and the NaN/inf flag (Monitor)": sums_and_nonfinite_flag,
            "progress bar (update per step, drawn <= 1/s)": progress_bar,
            "net.train() + GradScaler per step": train_mode_and_scaler}


def per_epoch_extras(trainer: Trainer, out: Path) -> dict[str, Callable[[], object]]:
    """The per-epoch work of ``Trainer.fit`` outside the epoch of steps (validation at two eval batch sizes)."""
    trainer.config.out = str(out)  # where save_checkpoint writes (fsync as configured)
    n_val, default_bs = trainer.data.val_x.shape[0], trainer.config.eval_batch_size

    def validation(batch: int) -> Callable[[], object]:
        def run() -> object:
            if trainer.config.eval_batch_size != batch:  # rebuild the cached loader at this batch size
                trainer.config.eval_batch_size = batch
                trainer._eval_loaders.clear()
            return trainer.evaluate("val")
        return run

    return {f"validation pass, {n_val:,} images, eval batch {default_bs} (default)": validation(default_bs),
            f"validation pass, {n_val:,} images, eval batch 256": validation(256),
            "checkpoint write (atomic, fsync)": trainer.save_checkpoint,
            "classifier norm, epoch_extras() (empty for CE)": lambda: (trainer.classifier_norm(), trainer.epoch_extras())}


# -- the report -----------------------------------------------------------------------------


def step_flops(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, amp: torch.dtype | None) -> int:
    """Floating-point operations of one forward + backward on the batch ``(x, y)`` (PyTorch's
    FlopCounterMode: matrix products and convolutions, the work that can reach the peak)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        forward_backward(model, [(x, y)], amp)
    return counter.get_total_flops()


def matmul_peak(device: torch.device, n: int = 8192, repeat: int = 10) -> float:
    """FLOP/s of an ``n``-cubed bf16 matrix product on ``device``, the ceiling a training step is set against."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    return 2 * n**3 / median_time(lambda: a @ b, repeat=repeat, warmup=3)


def trainer_variant(cfg: TrainConfig, data: Splits, **change: object) -> Trainer:
    """Another trainer on the same data with some settings changed (another loss, torch.compile)."""
    return Trainer(dataclasses.replace(cfg, **change), data=data)


def compare(args: argparse.Namespace) -> None:
    data = load_data(args.data, args.train_size, args.val_size)
    cfg = TrainConfig(data=data.name, model=args.model, loss="ce", epochs=10**6, milestones=(),
                      batch_size=args.batch, lr=0.05, momentum=0.9, weight_decay=5e-4, amp=args.amp,
                      channels_last=args.channels_last, progress=True, device=args.device)
    trainer = Trainer(cfg, data=data)
    amp, device = trainer.amp_dtype, trainer.device
    batches = [(x.clone(), y.clone()) for x, y in trainer.train_loader]  # one epoch, on the device
    model = copy.deepcopy(trainer.model)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if amp == torch.float16 else None
    bare = copy.deepcopy(trainer.model)
    n_img = sum(y.shape[0] for _, y in batches)
    cpu_clock = args.clock == "cpu" or (args.clock == "auto" and device.type == "cpu" and torch.get_num_threads() == 1)
    clock, unit = (time.process_time, "CPU") if cpu_clock else (time.perf_counter, "wall")
    header(f"{cfg.model} on {data.name}, {len(batches)} batches of {cfg.batch_size} ({n_img:,} images), "
           f"SGD, CE, {amp or 'float32'}, {device}, {unit} time")

    def minimal_det() -> None:
        with fit_mode(device):
            minimal_epoch(model, opt, batches, amp, scaler)

    devnull = open(os.devnull, "w")
    trainer_row = "Trainer epoch (as fit: loader, bar, flag, sums)"
    loops = {"forward+backward only (no optimiser step)": lambda: forward_backward(bare, batches, amp),
             "minimal loop": lambda: minimal_epoch(model, opt, batches, amp, scaler),
             "minimal loop, deterministic (fit on CPU)": minimal_det,
             trainer_row: lambda: trainer_epoch(trainer, devnull)}
    if device.type != "cpu":
        del loops["minimal loop, deterministic (fit on CPU)"]
    for spec in args.also_loss:
        name, kwargs = parse_loss(spec)
        other = trainer_variant(cfg, data, loss=name, loss_kwargs=kwargs)
        loops[f"Trainer epoch, loss {spec}"] = lambda t=other: trainer_epoch(t, devnull)
    if args.compile:  # the first (warm-up) round compiles
        compiled = trainer_variant(cfg, data, compile=True)
        loops["Trainer epoch, torch.compile"] = lambda: trainer_epoch(compiled, devnull)
    t_wall = time.perf_counter()
    times = interleaved_times(loops, rounds=args.rounds, warmup=1, clock=clock)
    t_wall = time.perf_counter() - t_wall
    base = statistics.median(times["minimal loop"])
    print(f"{f'one epoch ({len(batches)} steps)':<50} {unit + ' ms':>9}  {'ratio':>7}  (range)  {'img/s':>7}"
          "   ratio: median over rounds of same-round pairs, vs the minimal loop")
    for name, t in times.items():
        med, lo, hi = paired_ratio(t, times["minimal loop"])
        sec = statistics.median(t)
        print(f"{name:<50} {sec * 1e3:9.0f}  {med:6.3f}x  ({lo:.2f}-{hi:.2f}) {n_img / sec:7.0f}")
    flops = step_flops(bare, *batches[0], amp) * len(batches)
    peak = matmul_peak(device) if device.type == "cuda" else None
    for name in ("minimal loop", trainer_row):
        rate = flops / statistics.median(times[name])
        share = f", {rate / peak:.1%} of the bf16 matrix-product peak measured here ({peak / 1e12:.0f} TFLOP/s)" \
            if peak else ""
        print(f"{name}: {flops / len(batches) / 1e9:.2f} GFLOP per step (forward + backward), "
              f"{rate / 1e12:.3f} TFLOP/s{share}")
    if cpu_clock:
        print(f"(wall / CPU time over these epochs: {t_wall / sum(map(sum, times.values())):.2f}; "
              "above 1 the machine is shared, which CPU time largely discounts)")
    gaps = {k: statistics.median(t - b for t, b in zip(times[trainer_row], times[k]))
            for k in loops if k.startswith("minimal loop")}

    print(f"\n-- what the trainer adds, each alone over {len(batches)} steps ({unit} time, median of {args.repeat})")
    parts = {k: median_time(fn, repeat=args.repeat, warmup=1, clock=clock)
             for k, fn in trainer_parts(trainer, batches, devnull).items()}
    parts["calib CE with its input checks"] -= parts.pop("  torch F.cross_entropy")
    for name, sec in parts.items():
        print(f"{name:<66} {sec * 1e3:7.2f} ms {sec / base:7.2%}")
    total = sum(parts.values())
    print(f"{'sum of the parts':<66} {total * 1e3:7.2f} ms {total / base:7.2%}")
    for k, gap in gaps.items():
        print(f"{'  measured gap to the ' + k:<66} {gap * 1e3:+7.0f} ms {gap / base:+7.2%}   (noise included)")
    print("not timed (nothing to time): a signal-flag test per step (checkpoint on SIGTERM); "
          "no loss has epoch hooks")

    print("\n-- per epoch, outside the steps (fit runs these after every epoch; median of 3)")
    default_bs = cfg.eval_batch_size
    extras: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="calib-bench-") as tmp:
        for name, fn in per_epoch_extras(trainer, Path(tmp)).items():
            extras[name] = both_clocks(fn, clock)
            print(f"{name:<66} {extras[name][0] * 1e3:7.1f} ms {extras[name][0] / base:7.2%}"
                  f"   (wall {extras[name][1] * 1e3:.0f} ms)")
    devnull.close()
    if (data.name, cfg.model) != ("fashion_mnist", "cnn5"):
        return
    val_s = next(iter(extras.values()))[0] / data.val_x.shape[0]
    epoch_s = statistics.median(times[trainer_row]) / n_img
    print(f"at the ledger's scale (10,000 training images; validation 5,000 + tracked test 10,000 at "
          f"eval batch {default_bs}): evaluation ~ {15000 * val_s / (10000 * epoch_s):.0%} "
          "of the training epoch's time")


def both_clocks(fn: Callable[[], object], clock: Callable[[], float], repeat: int = 3) -> tuple[float, float]:
    """Medians of ``clock`` and of wall time over ``repeat`` runs after one warm-up (the fsync waits on the disk)."""
    fn()
    by_clock, wall = [], []
    for _ in range(repeat):
        t0, w0 = clock(), time.perf_counter()
        fn()
        by_clock.append(clock() - t0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(by_clock), statistics.median(wall)


# -- the earlier ResNet-20 comparison --------------------------------------------------------


def resnet20_variants(args: argparse.Namespace) -> None:
    """Trainer.train_step of ResNet-20 on one CIFAR-shaped batch: eager vs channels_last vs compile.

    Each variant gets ``--warmup`` untimed steps first; for ``torch.compile`` these absorb the
    compilation (reported as "first step"), which is excluded from the median.
    """
    header(f"ResNet-20 train step, batch {args.batch}, {profile.device()}")
    data = fake_images(max(args.batch, 256), (3, 32, 32), n_eval=256)
    base = None
    for variant in ("eager", "channels_last", "compile"):
        try:
            cfg = TrainConfig(data="fake", model="resnet20", loss="ce", epochs=1, batch_size=args.batch, milestones=(),
                              channels_last=variant == "channels_last", compile=variant == "compile", progress=False)
            trainer = Trainer(cfg, data=data)
            x, y = next(iter(trainer.train_loader))

            def step() -> float:
                return trainer.train_step(x, y)["loss"].item()

            t0 = time.perf_counter()
            step()
            first = time.perf_counter() - t0
            sec = median_time(step, repeat=args.repeat, warmup=2)
        except Exception as exc:  # e.g. torch.compile without a working C++ compiler
            print(f"{variant:<44} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            if os.environ.get("CALIB_BENCH_TRACEBACK"):
                traceback.print_exc()
            continue
        base = base or sec
        print(row(f"{variant} (first step {first:.1f} s, excluded)", sec, base, width=52),
              f"  {args.batch / sec:7.0f} img/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resnet20", action="store_true", help="the ResNet-20 eager/channels_last/compile comparison")
    ap.add_argument("--data", default="fashion_mnist", choices=("fashion_mnist", "fake", "fake_cifar"))
    ap.add_argument("--model", default="cnn5")
    ap.add_argument("--train-size", type=int, default=2560, help="training images timed per epoch")
    ap.add_argument("--val-size", type=int, default=5000, help="images of the validation pass")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--amp", default="off", choices=("off", "auto", "bf16", "fp16"))
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--device", default=None, help="default: CUDA when present, else CPU")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on CPU (0: torch's default)")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds of the epoch comparison")
    ap.add_argument("--clock", default="auto", choices=("auto", "cpu", "wall"),
                    help="auto: CPU time of the process on a one-thread CPU run, else wall time")
    ap.add_argument("--repeat", type=int, default=5, help="repeats of each single-piece timing")
    ap.add_argument("--also-loss", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                    help="also time the trainer's epoch with this loss (e.g. bsce_gra:gamma=4,norm=2)")
    ap.add_argument("--compile", action="store_true", help="also time the trainer's epoch under torch.compile")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.resnet20:
        resnet20_variants(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
