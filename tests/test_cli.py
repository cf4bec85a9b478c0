"""The command line ``python -m calib``: help, argument errors (exit 2), train and evaluate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calib.cli import build_parser, config_from_args, main
from calib.train import METRICS_FILE, load_config

ROOT = Path(__file__).resolve().parents[1]

TRAIN_OPTIONS = ["--data", "--data-root", "--download", "--val-size", "--split-seed", "--model", "--model-arg",
                 "--loss", "--gamma", "--norm", "--epsilon", "--alpha", "--lam", "--loss-arg", "--meta",
                 "--meta-objective", "--meta-arg", "--profile", "--preset", "--epochs", "--milestones", "--gamma-lr",
                 "--batch-size", "--lr", "--momentum", "--weight-decay", "--optimizer", "--seed", "--augment",
                 "--out", "--resume", "--amp", "--compile", "--channels-last", "--device", "--n-bins",
                 "--ts-method", "--track", "--no-progress", "--select", "--clip-grad", "--ts-grid-step",
                 "--keep-epoch-logits"]


def exit_code(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


def tiny_args(out: Path, *extra: str) -> list[str]:
    return ["train", "--data", "digits", "--model", "mlp", "--model-arg", "hidden=16", "--epochs", "2",
            "--batch-size", "64", "--lr", "0.05", "--no-progress", "--out", str(out), *extra]


def test_module_entry_point_help():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "calib", "--help"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0
    assert "train" in done.stdout and "evaluate" in done.stdout and "sweep" in done.stdout


def test_train_help_documents_every_option():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    text = sub["train"].format_help()
    for opt in TRAIN_OPTIONS:
        assert opt in text, opt
    for action in sub["train"]._actions:  # every option has a help string
        assert action.help, action.option_strings
    assert "RUN_DIR" in sub["evaluate"].format_help()


@pytest.mark.parametrize(
    "argv, word",
    [
        (["train"], "--out"),
        (["train", "--out", "x", "--epochs", "0"], "must be > 0"),
        (["train", "--out", "x", "--lr", "fast"], "float"),
        (["train", "--out", "x", "--profile", "huge"], "invalid choice"),
        (["train", "--out", "x", "--milestones", "a,b"], "milestones"),
        (["train", "--out", "x", "--model-arg", "hidden"], "KEY=VALUE"),
        (["train", "--out", "x", "--bogus"], "unrecognized"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_parse_errors_exit_2(argv, word, capsys):
    code, err = exit_code(argv, capsys)
    assert code == 2 and word in err


@pytest.mark.parametrize(
    "extra, word",
    [
        (["--data", "mnist"], "not a dataset"),
        (["--model", "vgg"], "not a model"),
        (["--loss", "hinge"], "not a loss"),
        (["--gamma-lr", "3"], "gamma_lr"),
        (["--milestones", "5,2"], "milestones"),
        (["--loss", "focal", "--loss-arg", "delta=1"], "delta"),
        (["--device", "gpu"], "device 'gpu'"),
        (["--val-size", "100"], "val_size does not apply"),
        (["--data", "gaussian", "--model", "small_cnn"], "needs images"),
        (["--meta", "gamma_net", "--meta-arg", "bogus=1"], "unknown meta settings"),
        (["--meta", "gamma_net", "--loss", "flsd53"], "focal"),
    ],
)
def test_semantic_errors_exit_2(tmp_path, extra, word, capsys):
    code, err = exit_code(tiny_args(tmp_path / "r", *extra), capsys)
    assert code == 2 and word in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_exits_2(tmp_path, capsys):
    code, err = exit_code(tiny_args(tmp_path / "r", "--device", "cuda"), capsys)
    assert code == 2 and "no CUDA device" in err


def test_meta_choices_are_the_dispatch_table():
    """--meta offers exactly the settings calib.train.TRAINERS maps to a trainer."""
    from calib.cli import META_SETTINGS
    from calib.train import TRAINERS

    assert META_SETTINGS == tuple(TRAINERS)


def test_config_from_args_paper_profile():
    args = build_parser().parse_args(["train", "--data", "cifar10", "--model", "resnet50", "--loss", "bsce_gra",
                                      "--gamma", "4", "--norm", "2", "--profile", "paper", "--out", "runs/x"])
    cfg = config_from_args(args)
    assert (cfg.epochs, cfg.milestones, cfg.lr, cfg.batch_size, cfg.weight_decay, cfg.val_size) == (
        350, (150, 250), 0.1, 128, 5e-4, 5000)
    assert cfg.loss_kwargs == {"gamma": 4.0, "norm": 2.0}
    assert cfg.preset == "cifar" and cfg.profile == "paper" and cfg.out == "runs/x"
    tiny = config_from_args(build_parser().parse_args(
        ["train", "--data", "tiny_imagenet", "--profile", "colab", "--amp", "--out", "y", "--epochs", "10"]))
    assert (tiny.preset, tiny.epochs, tiny.milestones, tiny.amp) == ("tiny_imagenet", 10, (4, 6), "auto")


def test_config_from_args_paper_presets_and_protocol_flags():
    def cfg(*extra):
        return config_from_args(build_parser().parse_args(["train", "--data", "cifar10", "--out", "x", *extra]))

    lin = cfg("--preset", "lin2024", "--profile", "paper")
    assert (lin.ts_method, lin.ts_grid_step, lin.clip_grad, lin.select, lin.epochs) == ("grid", 0.1, 2.0, "last", 350)
    assert cfg("--preset", "lin2024", "--ts-method", "nll", "--clip-grad", "5").clip_grad == 5.0
    assert cfg("--preset", "lin2024", "--ts-method", "nll").ts_method == "nll"
    assert cfg("--preset", "wang2024").select == "best_val"
    assert (lin.loss_reduction, cfg("--preset", "wang2024").loss_reduction) == ("sum", "mean")
    assert cfg("--preset", "lin2024", "--loss-reduction", "mean").loss_reduction == "mean"
    plain = cfg()
    assert (plain.ts_method, plain.clip_grad, plain.select, plain.keep_epoch_logits) == ("nll", None, "last", False)
    flags = cfg("--select", "best_val", "--ts-grid-step", "0.01", "--keep-epoch-logits")
    assert (flags.select, flags.ts_grid_step, flags.keep_epoch_logits) == ("best_val", 0.01, True)


def test_train_then_evaluate(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_args(out, "--loss", "focal", "--gamma", "3", "--track", "test")) == 0
    printed = capsys.readouterr().out
    assert "ECE" in printed and "T =" in printed
    cfg = load_config(out)
    assert cfg.loss == "focal" and cfg.loss_kwargs == {"gamma": 3.0} and cfg.epochs == 2
    metrics = json.loads((out / METRICS_FILE).read_text())
    (out / METRICS_FILE).unlink()
    assert main(["evaluate", str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == metrics
    assert json.loads((out / METRICS_FILE).read_text()) == metrics


def test_existing_run_without_resume_exits_2(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_args(out)) == 0
    capsys.readouterr()
    code, err = exit_code(tiny_args(out), capsys)
    assert code == 2 and "--resume" in err
    assert main(tiny_args(out, "--resume")) == 0


def test_evaluate_corrupt_logits_exits_2(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_args(out)) == 0
    capsys.readouterr()
    (out / "logits.pt").write_bytes((out / "logits.pt").read_bytes()[:200])
    code, err = exit_code(["evaluate", str(out)], capsys)
    assert code == 2 and "corrupt" in err


def test_evaluate_missing_run_exits_2(tmp_path, capsys):
    code, err = exit_code(["evaluate", str(tmp_path / "nope")], capsys)
    assert code == 2 and "does not exist" in err
