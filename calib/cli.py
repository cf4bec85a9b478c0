"""Command line: ``python -m calib train ...``, ``evaluate RUN_DIR`` and ``sweep ...``.

Examples::

    # ResNet-50 with BSCE-GRA on CIFAR-10, the paper protocol
    # (Lin et al. (2024) §5: 350 epochs, ...)
    python -m calib train --data cifar10 --model resnet50 \\
        --loss bsce_gra --gamma 4 --norm 2 --profile paper --out runs/r50-bsce
    # continue it after a disconnect
    python -m calib train ... --out runs/r50-bsce --resume
    # recompute metrics.json from the saved logits (no retraining)
    python -m calib evaluate runs/r50-bsce
    # two GPUs
    torchrun --standalone --nproc_per_node 2 -m calib train ...
    # a grid: 3 losses x 3 seeds, resumable, shardable (calib.experiments.sweep)
    python -m calib sweep --data digits --model mlp --loss ce --loss focal:gamma=3 \\
        --loss bsce_gra:gamma=4,norm=2 --seeds 0,1,2 --out runs/grid [--shard 1/2]

Exit codes: 0 done, 1 the run failed (diverged, disk full, ...), 2 bad arguments or an
unusable run directory (with a message naming the problem), 130/143 stopped by
SIGINT/SIGTERM (after writing a checkpoint once training runs: rerun with ``--resume``).
Every failure is one line on stderr; ``--debug`` or ``CALIB_DEBUG=1`` shows the traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from typing import Any, Sequence

from . import profile as _profile

DEBUG_ENV = "CALIB_DEBUG"

LOSS_OPTIONS = ("gamma", "norm", "epsilon", "alpha", "lam")
# the keys of calib.train.TRAINERS, spelled out so `--help` needs no torch import (a test keeps them equal)
META_SETTINGS = ("none", "gamma_net", "l2_reg")


def _key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE parsed as JSON where possible (numbers, lists, true/false)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    if not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{key!r} is not a valid keyword name")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _milestones(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"milestones must be comma-separated epochs like 150,250, got {text!r}") from None


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _seed_list(text: str) -> list[int]:
    if text.strip() == "paper":
        return "paper"  # type: ignore[return-value]  # resolved from --preset by calib.experiments.sweep
    try:
        seeds = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be comma-separated integers like 0,1,2 (or 'paper'), "
                                         f"got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("seeds is empty: give at least one seed, e.g. --seeds 0,1,2")
    return seeds


def add_training_arguments(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """The training options shared by ``train`` and ``sweep`` (``sweep=True``: the grid variants).

    ``sweep`` makes ``--data``/``--model`` repeatable lists, ``--loss`` a repeatable
    ``NAME[:key=value,...]``, replaces ``--seed`` by ``--seeds`` and drops the per-loss options
    (``--gamma``, ``--loss-arg``, ...; they go into each ``--loss``) and ``--resume``.
    """
    from .train.presets import PRESETS

    g = p.add_argument_group("what to train")
    data_help = "dataset: fashion_mnist, cifar10, cifar100, svhn, tiny_imagenet, digits or gaussian"
    if sweep:
        g.add_argument("--data", action="append", default=None,
                       help=data_help + "; repeatable or comma-separated for a grid over datasets (default: digits)")
    else:
        g.add_argument("--data", default="cifar10", help=data_help)
    g.add_argument("--data-root", default="data",
                   help="folder holding the dataset files ($CALIB_DATA, if set, replaces the default)")
    g.add_argument("--download", action="store_true", help="download the dataset where the network allows")
    g.add_argument("--val-size", type=_positive(int), default=None,
                   help="training examples held out for validation/temperature scaling (preset: 5000 CIFAR)")
    g.add_argument("--train-size", type=_positive(int), default=None,
                   help="train on this many training examples, class-balanced, chosen by --split-seed (default: all)")
    g.add_argument("--test-size", type=_positive(int), default=None,
                   help="evaluate on this many test examples, class-balanced, chosen by --split-seed (default: all)")
    g.add_argument("--split-seed", type=int, default=0, help="seed of the train/val split")
    model_help = ("model name from calib.models.names(); resnet110 is He et al.'s 1.7M-parameter CIFAR net "
                  "(Wang et al. (2021)), resnet110_bottleneck the 45.9M-parameter net behind the ResNet-110 "
                  "numbers of Mukhoti et al. (2020) and Lin et al. (2024), resnet50_tiny_imagenet their "
                  "Tiny-ImageNet ResNet-50 (2x2-pooled head); calib.models.DESCRIPTIONS lists every model")
    if sweep:
        g.add_argument("--model", action="append", default=None,
                       help=model_help + "; repeatable or comma-separated (default: mlp)")
    else:
        g.add_argument("--model", default="resnet50", help=model_help)
    g.add_argument("--model-arg", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="extra keyword for calib.models.make, e.g. hidden=256 (repeatable)")
    if sweep:
        g.add_argument("--loss", action="append", required=True, metavar="NAME[:KEY=VALUE,...]",
                       help="a loss of the grid, e.g. ce, focal:gamma=3, bsce_gra:gamma=4,norm=2 (repeatable); "
                            "training settings of its cells after @, e.g. ce@mixup_alpha=1 or "
                            "ce@meta=l2_reg,meta_objective=dece")
    else:
        g.add_argument("--loss", default="ce",
                       help="loss name from calib.losses (ce, focal, flsd53, dual_focal, bsce, bsce_gra, ...)")
        g.add_argument("--gamma", type=float, default=None, help="loss exponent gamma (focal family, BSCE)")
        g.add_argument("--norm", type=float, default=None,
                       help="norm order beta of the generalised Brier weight (BSCE)")
        g.add_argument("--epsilon", type=float, default=None, help="label-smoothing epsilon")
        g.add_argument("--alpha", type=float, default=None,
                       help="loss alpha (e.g. label smoothing, Mukhoti et al. (2020) convention)")
        g.add_argument("--lam", type=float, default=None, help="regulariser weight lambda (e.g. MMCE, DECE)")
        g.add_argument("--loss-arg", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="any other keyword for calib.losses.make (repeatable)")
    g.add_argument("--meta", choices=META_SETTINGS, default="none",
                   help="meta-regularisation: gamma_net learns a focal gamma per sample (Wang & Golebiowski (2024)); "
                        "l2_reg learns an L2 penalty on the classifier (Bohdal et al. (2021); with --loss ce the "
                        "CE-DECE / CE-SECE baselines of Wang & Golebiowski (2024))")
    g.add_argument("--meta-objective", choices=("sece", "dece"), default="sece",
                   help="calibration objective of the meta step")
    g.add_argument("--mixup", type=float, default=None, metavar="ALPHA",
                   help="train on mixup batches, lambda ~ Beta(ALPHA, ALPHA) (Zhang et al. (2018); "
                        "Wang & Golebiowski (2024) use 1.0); default off")
    g.add_argument("--meta-arg", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="gamma-Net setting (meta_lr, bandwidth, order, tau, init_gamma), e.g. meta_lr=1e-4 (repeatable)")

    s = p.add_argument_group("schedule (defaults: the preset scaled to --profile)")
    s.add_argument("--profile", choices=_profile.PROFILES, default=None,
                   help="scale: quick | colab | paper (default: $CALIB_PROFILE, else colab with CUDA, else quick)")
    s.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="protocol: cifar / tiny_imagenet schedules (default: tiny_imagenet for that data, else "
                        "cifar), or a paper's: lin2024 (Lin et al. (2024): grid TS, clip 2), mukhoti2020 "
                        "(Mukhoti et al. (2020): grid TS, clip 2), wang2024 (Wang & Golebiowski (2024): "
                        "best-val selection), wang2021 (Wang et al. (2021): grid TS step 0.01)")
    s.add_argument("--epochs", type=_positive(int), default=None, help="epochs (milestones rescale unless given)")
    s.add_argument("--milestones", type=_milestones, default=None,
                   help="epochs where lr is multiplied by --gamma-lr, e.g. 150,250")
    s.add_argument("--gamma-lr", type=float, default=None, help="lr decay factor at each milestone")
    s.add_argument("--batch-size", type=_positive(int), default=None, help="global batch size")
    s.add_argument("--lr", type=_positive(float), default=None, help="initial learning rate")
    s.add_argument("--momentum", type=float, default=None, help="SGD momentum")
    s.add_argument("--weight-decay", type=float, default=None, help="weight decay")
    s.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=None, help="optimiser")
    if sweep:
        s.add_argument("--seeds", type=_seed_list, required=True,
                       help="comma-separated seeds, e.g. 0,1,2; 'paper' for the preset's (lin2024: 1,42,71)")
    else:
        s.add_argument("--seed", type=int, default=0, help="seed of weights, shuffling and augmentation")
    s.add_argument("--augment", action=argparse.BooleanOptionalAction, default=None,
                   help="random crop + flip (default: on for CIFAR and Tiny-ImageNet)")
    s.add_argument("--clip-grad", type=_positive(float), default=None, metavar="NORM",
                   help="clip the gradient norm to NORM before each step (the authors' code of Lin et al. (2024) "
                        "and Mukhoti et al. (2020): 2; default: the preset's, else off)")
    s.add_argument("--loss-reduction", choices=("mean", "sum"), default=None,
                   help="train on the batch mean or the batch sum of the loss (the authors' code of Lin et al. "
                        "(2024) and Mukhoti et al. (2020): sum; default: the preset's, else mean)")

    r = p.add_argument_group("running")
    if sweep:
        r.add_argument("--out", required=True, metavar="DIR",
                       help="sweep directory: DIR/runs/<cell>/, results.csv, summary.csv, summary.md")
        r.add_argument("--shard", default=None, metavar="I/N",
                       help="run only cells I-1, I-1+N, ... of the grid (1 <= I <= N), to share a sweep")
        r.add_argument("--merge", action="store_true", help="train nothing: collect the finished runs into the tables")
        r.add_argument("--dry-run", action="store_true",
                       help="check the grid and print its runs and protocol; train and write nothing")
    else:
        r.add_argument("--out", required=True, help="run directory to write")
        r.add_argument("--resume", action="store_true",
                       help="continue the run in --out (which must exist; starts afresh if it holds no checkpoint)")
        r.add_argument("--overwrite", action="store_true",
                       help="train again over a run of the same configuration in --out (never another one's)")
    r.add_argument("--amp", nargs="?", const="auto", default="off", choices=("off", "auto", "bf16", "fp16"),
                   help="mixed precision on CUDA (bare --amp = bf16 where supported, else fp16); loss stays float32")
    r.add_argument("--compile", action="store_true", help="torch.compile the model")
    r.add_argument("--channels-last", action="store_true", help="channels_last memory format (faster convs on GPU)")
    r.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: CUDA when present)")
    r.add_argument("--n-bins", type=_positive(int), default=15, help="bins of the calibration errors")
    r.add_argument("--ts-method", choices=("nll", "grid"), default=None,
                   help="temperature fit reported as post-TS: NLL (Guo et al.) or grid search on validation "
                        "ECE (both are always recorded; default: the preset's, else nll)")
    r.add_argument("--ts-grid-step", type=_positive(float), default=None,
                   help="step of the temperature grid step, 2*step, ..., 10 (default: the preset's, else 0.1; "
                        "Wang et al. (2021): 0.01)")
    r.add_argument("--select", choices=("last", "best_val"), default=None,
                   help="weights to evaluate: the last epoch's or the lowest validation error's "
                        "(Wang & Golebiowski (2024)); default: the preset's, else last")
    r.add_argument("--keep-epoch-logits", action="store_true",
                   help="save val/test logits after every epoch under epoch_logits/ (post-TS ECE over epochs)")
    r.add_argument("--track", choices=("train", "test"), action="append", default=[],
                   help="also evaluate this split every epoch (training-dynamics plots; repeatable)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars (also: CALIB_PROGRESS=0)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m calib",
        description="Train and evaluate calibrated classifiers (the calib textbook's trainer).",
        epilog="Run 'python -m calib train --help' for every training option.",
    )
    parser.add_argument("--debug", action="store_true",
                        help=f"show the full traceback of a failure (also: {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", metavar="{train,evaluate,sweep,fake-data,ledger,audit,grade}")
    sub.required = True

    t = sub.add_parser("train", help="train a model and write a run directory",
                       description="Train one model; writes config.json, history.jsonl, checkpoint.pt, "
                                   "logits.pt and metrics.json under --out.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_training_arguments(t)
    t.set_defaults(run=cmd_train, subparser=t)

    e = sub.add_parser("evaluate", help="recompute metrics.json of a run from its saved logits",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by 'train'")
    e.add_argument("--n-bins", type=_positive(int), default=None, help="bins (default: the run's)")
    e.add_argument("--ts-method", choices=("nll", "grid"), default=None,
                   help="temperature fit reported as post-TS (default: the run's; both are recorded)")
    e.add_argument("--ts-grid-step", type=_positive(float), default=None,
                   help="step of the temperature grid (default: the run's)")
    e.set_defaults(run=cmd_evaluate, subparser=e)

    w = sub.add_parser(
        "sweep", help="train a grid of losses x seeds (x datasets x models) and tabulate it",
        description="Train every cell of losses x seeds x datasets x models (one run directory each under "
                    "DIR/runs/) and write DIR/results.csv, DIR/summary.csv and DIR/summary.md (mean ± std "
                    "over seeds). Re-running skips finished runs and resumes an interrupted one; the same "
                    "DIR with other arguments is refused (exit 2). Example, the quick version of the "
                    "Lin et al. (2024) table: python -m calib sweep --data digits --model mlp --loss ce "
                    "--loss focal:gamma=3 --loss bsce_gra:gamma=4,norm=2 --seeds 1,42,71 --out runs/lin",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_training_arguments(w, sweep=True)
    w.set_defaults(run=cmd_sweep, subparser=w)

    f = sub.add_parser("fake-data", help="write tiny synthetic datasets in the real on-disk formats",
                       description="Write tiny random Fashion-MNIST (IDX), CIFAR-10/100 (python pickles), SVHN (.mat) and "
                                   "Tiny-ImageNet (JPEG folders) under DIR, in the layout calib.data.load "
                                   "reads; with CALIB_DATA=DIR CALIB_SMOKE=1 the chapters' colab and paper "
                                   "branches run on them without a download.")
    f.add_argument("dir", metavar="DIR", help="folder to write into (created if missing)")
    f.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="write only this dataset: fashion_mnist, cifar10, cifar100, svhn or tiny_imagenet (repeatable)")
    f.set_defaults(run=cmd_fake_data, subparser=f)

    g = sub.add_parser("ledger", help="run or resume the committed results ledger (results/)",
                       description="Run (or resume) the ledger's sweeps, one thread per process so the numbers "
                                   "are deterministic, and write each sweep's provenance.json (calib.experiments.ledger).")
    g.add_argument("names", nargs="*", metavar="NAME", help="ledger sweeps to run (default: all)")
    g.add_argument("--root", default="results", help="the ledger's folder")
    g.add_argument("--jobs", type=_positive(int), default=2, help="one-thread shards run in parallel")
    g.add_argument("--device", default=None,
                   help="where the shards train: cpu, cuda, ... (default: CUDA when present); recorded per session")
    g.set_defaults(run=cmd_ledger, subparser=g)

    a = sub.add_parser("audit", help="execute the training chapters at several seed offsets and thread "
                                     "counts and record every claim's outcome (results/audit/)",
                       description="The claims audit (calib.experiments.audit): each chapter x seed offset x "
                                   "thread count runs once at the quick profile; finished records are kept.")
    a.add_argument("chapters", nargs="*", metavar="CHAPTER", help="e.g. 02_overconfidence (default: all training chapters)")
    a.add_argument("--offsets", default=None, help="comma-separated seed offsets (default: 100,200,300,400,500)")
    a.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1,2)")
    a.set_defaults(run=cmd_audit, subparser=a)

    r = sub.add_parser("grade", help="grade coursework submissions outside the students' code",
                       description="Grade an LMS download (a folder of notebooks, one folder per student, "
                                   "a zip of either, or one notebook) against an assignment built by "
                                   "tools/build_assignments.py: each notebook runs in a fresh kernel, the "
                                   "tests in a separate process (calib.grading). Writes OUT/<student>/"
                                   "results.json, the executed notebook and its tables, and OUT/grades.csv.")
    r.add_argument("autograder", metavar="AUTOGRADER",
                   help="the built assignment (<out>/<name>), its autograder/ folder or its zip")
    r.add_argument("submissions", metavar="SUBMISSIONS", help="the download: folder, zip or notebook")
    r.add_argument("--out", required=True, help="where the grades go (keep it outside the repository)")
    r.add_argument("--smoke", action="store_true",
                   help="CALIB_SMOKE=1 in the kernel: Assignment 6 trains its short version (flagged FAST)")
    r.add_argument("--timeout", type=_positive(int), default=1800, help="seconds per notebook cell and test run")
    r.set_defaults(run=cmd_grade, subparser=r)
    return parser


def cmd_grade(args: argparse.Namespace) -> int:
    import pathlib

    from .grading import grade_all

    rows = grade_all(pathlib.Path(args.autograder), pathlib.Path(args.submissions), pathlib.Path(args.out),
                     smoke=args.smoke, timeout=args.timeout)
    print(f"{len(rows)} submissions; grades in {pathlib.Path(args.out).resolve() / 'grades.csv'}")
    return 0 if all(r["status"] == "graded" for r in rows) else 1


def cmd_audit(args: argparse.Namespace) -> int:
    from .experiments import audit

    def ints(text: str | None, default: tuple[int, ...], what: str) -> tuple[int, ...]:
        if text is None:
            return default
        try:
            values = tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            values = ()
        if not values or min(values) < 0:
            _fail(args.subparser, f"{what} must be comma-separated integers >= 0, got {text!r}")
        return values

    offsets = ints(args.offsets, audit.OFFSETS, "--offsets")
    threads = ints(args.threads, audit.THREADS, "--threads")
    try:
        written = audit.run(args.chapters or audit.TRAINING_CHAPTERS, offsets, threads)
    except ValueError as exc:
        _fail(args.subparser, str(exc))
    print(f"audit: {len(written)} executions recorded under results/{audit.AUDIT_DIR}/")
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from .experiments import ledger

    for name in args.names or ledger.names():
        prov = ledger.run(name, args.root, args.jobs, device=args.device)
        print(f"ledger {name}: {prov['cells_finished']}/{prov['cells_planned']} cells, "
              f"{prov['training_seconds'] / 3600:.2f} hours of one-thread training")
    return 0


def cmd_fake_data(args: argparse.Namespace) -> int:
    """Write the synthetic datasets; a bad name or an unwritable folder exits 2."""
    from .data import fake

    try:
        names = fake.write_all(args.dir, args.only)
    except (ValueError, TypeError, OSError) as exc:
        _fail(args.subparser, str(exc))
    print(f"wrote {', '.join(names)} under {args.dir}")
    return 0


_SCHEDULE = ("epochs", "milestones", "gamma_lr", "batch_size", "lr", "momentum", "weight_decay", "optimizer",
             "val_size", "train_size", "test_size", "clip_grad", "loss_reduction", "ts_method", "ts_grid_step", "select")


def training_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """TrainConfig fields set by the shared training options (not data/model/loss/seed/out)."""
    overrides: dict[str, Any] = dict(
        model_kwargs=dict(args.model_arg), split_seed=args.split_seed, data_root=args.data_root,
        download=args.download, augment=args.augment, amp=args.amp, channels_last=args.channels_last,
        compile=args.compile, device=args.device, n_bins=args.n_bins, track=tuple(dict.fromkeys(args.track)),
        progress=False if args.no_progress else None, meta=args.meta, meta_objective=args.meta_objective,
        meta_kwargs=dict(args.meta_arg), keep_epoch_logits=args.keep_epoch_logits,
    )
    for name in _SCHEDULE:
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.mixup is not None:
        overrides["mixup_alpha"] = args.mixup
    return overrides


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`calib.train.TrainConfig` the parsed ``train`` arguments describe."""
    from .train import DEFAULT_PRESET, TrainConfig

    loss_kwargs = {k: getattr(args, k) for k in LOSS_OPTIONS if getattr(args, k) is not None}
    loss_kwargs.update(dict(args.loss_arg))
    overrides = training_overrides(args)
    overrides.update(data=args.data, model=args.model, loss=args.loss, loss_kwargs=loss_kwargs, seed=args.seed,
                     out=args.out)
    preset = args.preset or DEFAULT_PRESET.get(args.data, "cifar")
    if args.val_size is None and args.data not in DEFAULT_PRESET:
        overrides["val_size"] = None  # toy data: the loader's own split
    return TrainConfig.from_preset(preset, args.profile, **overrides)


def _check_names(config: Any) -> None:
    """Refuse unknown data/model/loss names before any data is read."""
    from . import data, losses, models

    if config.data not in data.datasets():
        raise ValueError(f"--data {config.data!r} is not a dataset; choose one of {', '.join(data.datasets())}")
    if config.model not in models.names():
        raise ValueError(f"--model {config.model!r} is not a model; choose one of {', '.join(models.names())}")
    names = getattr(losses, "names", None)
    if callable(names) and config.loss not in names():
        raise ValueError(f"--loss {config.loss!r} is not a loss; choose one of {', '.join(names())}")


def _fail(sub: argparse.ArgumentParser, message: str) -> None:
    """Exit 2 with one line naming the problem (argparse's format, without the usage block)."""
    print(f"{sub.prog}: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(2)


def _warn(text: str) -> None:
    print(f"calib: warning: {text}", file=sys.stderr)


def _schedule_warnings(config: Any, trainer: Any) -> None:
    """Settings that run but probably do not do what was meant (warnings, not errors)."""
    if late := [m for m in config.milestones if m >= config.epochs]:
        _warn(f"--milestones {','.join(map(str, late))} at or beyond --epochs {config.epochs} never take effect")
    train_y = getattr(getattr(trainer, "data", None), "train_y", None)
    n_train = int(train_y.shape[0]) if train_y is not None else 0
    if n_train and config.batch_size > n_train:
        _warn(f"--batch-size {config.batch_size} is larger than the training set ({n_train} samples): "
              "one smaller batch per epoch")


def _result_warnings(metrics: dict[str, Any], num_classes: int | None, config: Any = None) -> None:
    from .posthoc import T_LIMIT, default_grid

    t = metrics["temperature"]
    low, high, what = 1 / T_LIMIT, T_LIMIT, "clip limit"
    if getattr(config, "ts_method", "nll") == "grid":  # the grid search's own ends
        grid = default_grid(config.ts_grid_step)
        low, high, what = float(grid[0]), float(grid[-1]), "grid's end"
    if t >= high * (1 - 1e-9) or t <= low * (1 + 1e-9):
        _warn(f"the fitted temperature {t:g} sits at its {what} [{low:g}, {high:g}]: the validation "
              "logits carry (almost) no information about the labels, or separate them perfectly")
    acc = metrics["pre_ts"]["accuracy"]
    if num_classes and acc <= 1.0 / num_classes + 0.01:
        _warn(f"test accuracy {acc:.4f} is at chance level (1/K = {1 / num_classes:.4f}): the model learned "
              "nothing; check the data, the learning rate and the number of epochs")


def cmd_train(args: argparse.Namespace) -> int:
    """Build the config and trainer (bad input: exit 2), train, print the headline numbers."""
    from .data import DownloadError
    from .train import CheckpointError, TrainingDiverged, TrainingInterrupted, make_trainer, rundir

    sub = args.subparser
    try:
        out = rundir.check_out(args.out)
        config = config_from_args(args)
        _check_names(config)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, CheckpointError, rundir.RunDirError) as exc:
        _fail(sub, str(exc))
    with contextlib.ExitStack() as stack:
        if int(os.environ.get("RANK", "0")) == 0:  # rank 0 owns the run directory
            try:
                if args.resume and not out.exists():  # before the lock creates it
                    rundir.check_owner(out, {}, identity_of=dict, resume=True)
                stack.enter_context(rundir.lock(out, what="train"))
                _claim(out, config, args)
            except rundir.RunDirError as exc:
                _fail(sub, str(exc))
        try:
            trainer = make_trainer(config)
        except (ValueError, TypeError, FileNotFoundError, FileExistsError, CheckpointError, DownloadError) as exc:
            _fail(sub, str(exc))
        _schedule_warnings(config, trainer)
        if config.progress is not False:
            print(_profile.describe(), file=sys.stderr)
        try:
            metrics = trainer.fit(resume=args.resume)
        except (FileExistsError, CheckpointError) as exc:
            _fail(sub, str(exc))
        except TrainingDiverged as exc:
            if _debug(args):
                raise
            print(f"calib: error: {exc}", file=sys.stderr)
            return 1
        except TrainingInterrupted as exc:
            print(f"calib: {exc}", file=sys.stderr)
            return 128 + int(exc.signum)
    if trainer.is_main:
        pre, post = metrics["pre_ts"], metrics["post_ts"]
        print(f"test accuracy {pre['accuracy']:.4f} | ECE {100 * pre['ece']:.2f}% -> "
              f"{100 * post['ece']:.2f}% after TS (T = {metrics['temperature']:.3f}) | run: {config.out}")
        _result_warnings(metrics, getattr(trainer, "num_classes", None), config)
    return 0


def _claim(out: Any, config: Any, args: argparse.Namespace) -> None:
    """Check that ``out`` is this run's to write (calib.train.rundir.check_owner); clear it for --overwrite."""
    from .train import TrainConfig, rundir

    state = rundir.check_owner(out, config.identity(), identity_of=lambda d: TrainConfig.from_dict(d).identity(),
                               resume=args.resume, overwrite=args.overwrite)
    if state == "overwrite":
        rundir.clear_run(out)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Recompute and print metrics.json of a run directory."""
    from .train import evaluate_run

    sub = args.subparser
    try:
        metrics = evaluate_run(args.run_dir, n_bins=args.n_bins, ts_method=args.ts_method,
                               ts_grid_step=args.ts_grid_step)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        _fail(sub, str(exc))
    print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run (or collect) a sweep; bad grids and foreign directories exit 2 before any training."""
    from .experiments import sweep as sw
    from .train import CheckpointError, TrainingInterrupted

    sub = args.subparser
    overrides = training_overrides(args)
    show = overrides.pop("progress") is not False
    if args.dry_run:
        try:
            planned = sw.plan(args.out, args.loss, args.seeds, data=args.data or ["digits"],
                              model=args.model or ["mlp"], preset=args.preset, profile=args.profile, **overrides)
            sw.parse_shard(args.shard)
        except sw.SweepError as exc:
            _fail(sub, str(exc))
        print(sw.describe_plan(planned))
        return 0
    if show:
        print(_profile.describe(), file=sys.stderr)
    try:
        result = sw.sweep(args.out, args.loss, args.seeds, data=args.data or ["digits"],
                          model=args.model or ["mlp"], shard=args.shard, merge=args.merge, progress=show,
                          preset=args.preset, profile=args.profile, **overrides)
    except (sw.SweepError, CheckpointError) as exc:
        _fail(sub, str(exc))
    except TrainingInterrupted as exc:
        print(f"calib: {exc}; rerun the same command to resume the sweep", file=sys.stderr)
        return 128 + int(exc.signum)
    done, total = len(result.rows), len(result.rows) + len(result.missing) + len(result.diverged)
    failed = f", {len(result.diverged)} diverged" if result.diverged else ""
    print(f"{done}/{total} runs finished{failed} ({len(result.trained)} trained now) | "
          f"{result.out / sw.RESULTS_FILE} | {result.out / 'summary.md'}")
    return 0


def _debug(args: argparse.Namespace | None) -> bool:
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
    return env or bool(getattr(args, "debug", False))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        text = f"{text}: {exc.filename}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; every failure becomes one line and an exit code.

    Argument and run-directory problems exit 2 (argparse style), a failed run exits 1, and
    Ctrl-C exits 130 without a traceback; ``--debug``/``CALIB_DEBUG=1`` re-raises instead.
    """
    if getattr(signal.getsignal(signal.SIGINT), "__name__", "") == "_startup_interrupt":
        signal.signal(signal.SIGINT, signal.default_int_handler)  # start-up is over (see calib.__main__)
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return args.run(args)
    except KeyboardInterrupt:
        if _debug(args):
            raise
        print("calib: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns failures into a line
        from .train.rundir import RunDirError

        if _debug(args):
            raise
        code = 2 if isinstance(exc, RunDirError) else 1
        kind = "" if isinstance(exc, (RunDirError, ValueError, OSError)) else f"{type(exc).__name__}: "
        hint = "" if code == 2 else f" (--debug or {DEBUG_ENV}=1 for the traceback)"
        print(f"calib: error: {kind}{_one_line(exc)}{hint}", file=sys.stderr)
        return code
    finally:
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()

