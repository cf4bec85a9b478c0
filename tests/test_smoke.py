"""Smoke mode, CALIB_DATA and the fake datasets; download errors; the Colab setup cell; T4 estimates."""
from __future__ import annotations

import ast
import json
import pathlib
import sys
import types

import pytest
import torch

from calib import profile, runtimes
from calib.cli import main
from calib.data import DownloadError, load
from calib.data.splits import Splits
from calib.train import TrainConfig, make_trainer, smoke_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake")
    assert main(["fake-data", str(root)]) == 0
    return root


@pytest.fixture
def smoke_on(monkeypatch, fake_root):
    monkeypatch.setenv("CALIB_SMOKE", "1")
    monkeypatch.setenv("CALIB_DATA", str(fake_root))
    return fake_root


# ------------------------------------------------------------------ fake data + CALIB_DATA
@pytest.mark.parametrize("name,k,size", [("cifar10", 10, 32), ("cifar100", 100, 32), ("svhn", 10, 32),
                                         ("tiny_imagenet", 200, 64), ("fashion_mnist", 10, 28)])
def test_fake_data_loads_through_calib_data(monkeypatch, fake_root, name, k, size):
    monkeypatch.setenv("CALIB_DATA", str(fake_root))
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    val = 200 if name == "tiny_imagenet" else 20
    s = load(name, val_size=val)   # root left at its default: $CALIB_DATA
    channels = 1 if name == "fashion_mnist" else 3
    assert s.num_classes == k and s.train_x.shape[1:] == (channels, size, size) and s.val_x.shape[0] == val
    assert s.train_x.dtype == torch.uint8 and 0 <= int(s.train_y.min()) and int(s.train_y.max()) < k


def test_fake_data_cli_refuses_unknown_names(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fake-data", str(tmp_path), "--only", "mnist"])
    assert info.value.code == 2 and "mnist" in capsys.readouterr().err
    assert main(["fake-data", str(tmp_path), "--only", "svhn"]) == 0
    assert sorted(p.name for p in (tmp_path / "svhn").iterdir()) == ["test_32x32.mat", "train_32x32.mat"]


def test_data_root_resolution(monkeypatch):
    monkeypatch.delenv("CALIB_DATA", raising=False)
    assert profile.data_root() == "data" and profile.data_root("elsewhere") == "elsewhere"
    monkeypatch.setenv("CALIB_DATA", "/tmp/x")
    assert profile.data_root() == "/tmp/x" and profile.data_root("data") == "/tmp/x"
    assert profile.data_root("elsewhere") == "elsewhere"


# ------------------------------------------------------------------ smoke caps
def test_smoke_caps_every_split_and_the_validation_size(smoke_on):
    caps = profile.SMOKE_CAPS
    s = load("cifar10", val_size=5000)   # the paper's protocol, on 200 fake training images
    assert 0 < s.val_x.shape[0] <= caps["eval"] and 0 < s.train_x.shape[0] <= caps["train"]
    assert s.test_x.shape[0] <= caps["eval"]
    t = load("tiny_imagenet")           # stratified: one per class, a multiple of 200
    assert t.val_x.shape[0] <= caps["eval"] and t.train_x.shape[0] <= caps["train"]


def test_smoke_is_off_by_default(monkeypatch, fake_root):
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    s = load("cifar10", fake_root, val_size=50)
    assert s.train_x.shape[0] == 150 and s.val_x.shape[0] == 50 and s.test_x.shape[0] == 64
    cfg = TrainConfig.from_preset("cifar", "paper", data="cifar10", model="resnet20")
    assert smoke_config(cfg) is cfg


def test_smoke_config_keeps_the_code_path_and_cuts_the_work(monkeypatch):
    monkeypatch.setenv("CALIB_SMOKE", "1")
    cfg = TrainConfig.from_preset("cifar", "paper", data="cifar10", model="resnet50", amp="auto",
                                  channels_last=True, loss="focal", loss_kwargs={"gamma": 3.0})
    small = smoke_config(cfg)
    assert (small.epochs, small.milestones, small.batch_size) == (2, (1,), profile.SMOKE_CAPS["batch_size"])
    for field in ("model", "loss", "loss_kwargs", "amp", "channels_last", "optimizer", "lr", "data"):
        assert getattr(small, field) == getattr(cfg, field)
    assert smoke_config(TrainConfig(epochs=5, milestones=())).milestones == ()
    # the checkpoint is still written, once, at the last epoch, without fsync
    assert (small.checkpoint_every, small.fsync) == (2, False) and small.identity() == {
        **cfg.identity(), "epochs": 2, "milestones": [1], "batch_size": profile.SMOKE_CAPS["batch_size"]}


def test_trainer_in_smoke_mode_runs_a_few_steps(smoke_on, tmp_path):
    cfg = TrainConfig.from_preset("cifar", "paper", data="cifar10", model="mlp",
                                  model_kwargs={"hidden": 8}, progress=False, out=str(tmp_path / "run"))
    trainer = make_trainer(cfg)
    assert len(trainer.train_loader) <= 2 and trainer.config.epochs == 2
    trainer.fit()
    assert len(trainer.history) == 2
    assert json.loads((tmp_path / "run" / "config.json").read_text())["epochs"] == 2


def test_claims_are_reported_not_asserted_in_smoke(monkeypatch, capsys):
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    monkeypatch.setenv("CALIB_SMOKE", "1")
    assert profile.claim(False, "x") is False and "DOES NOT HOLD" in capsys.readouterr().out


# ------------------------------------------------------------------ download without network
def test_failed_download_names_dataset_url_and_destination(tmp_path, monkeypatch):
    import torchvision

    class Offline:
        def __init__(self, *a, **k):
            raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", Offline)
    with pytest.raises(DownloadError) as info:
        load("cifar10", tmp_path, download=True)
    msg = str(info.value)
    assert "CIFAR-10" in msg and "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg
    assert str(tmp_path) in msg and "name resolution" in msg


def test_cli_download_failure_exits_2_with_one_message(tmp_path, monkeypatch, capsys):
    import torchvision

    class Offline:
        def __init__(self, *a, **k):
            raise OSError("no network")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", Offline)
    with pytest.raises(SystemExit) as info:
        main(["train", "--data", "cifar100", "--download", "--data-root", str(tmp_path),
              "--model", "resnet20", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "Traceback" not in err and "CIFAR-100" in err and "cifar-100-python.tar.gz" in err
    (line,) = [s for s in err.splitlines() if "error:" in s]  # argparse's usage, then one message
    assert "CIFAR-100" in line and "cifar-100-python.tar.gz" in line and str(tmp_path) in line


# ------------------------------------------------------------------ package structure
def _module_imports(path: pathlib.Path, package: str) -> set[str]:
    """calib modules ``path`` imports at module level (function-level imports excluded)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
            out |= {mod} if node.module else {f"{mod}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("calib"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("calib")}
    return out


def test_data_modules_do_not_import_each_other_in_a_cycle():
    folder = ROOT / "calib" / "data"
    graph = {f"calib.data.{p.stem}": _module_imports(p, "calib.data") for p in folder.glob("*.py")
             if p.stem != "__init__"}
    assert "calib.data.vision" not in graph["calib.data.toy"]
    src = (folder / "toy.py").read_text()
    assert "from .vision" not in src and "calib.data.vision" not in src


# ------------------------------------------------------------------ describe, T4 estimates
def test_describe_warns_on_a_gpu_profile_without_a_gpu(monkeypatch):
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    monkeypatch.setenv("CALIB_PROFILE", "colab")
    text = profile.describe()
    assert ("WARNING" in text) == (not torch.cuda.is_available())
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    assert "WARNING" not in profile.describe()
    monkeypatch.setenv("CALIB_SMOKE", "1")
    assert "[smoke]" in profile.describe()


def test_t4_estimate_is_labelled_estimated_or_measured():
    table = {"chapters": {"a": {"train_flops": 8e12, "other_seconds": 10.0},
                          "b": {"t4_seconds": 600.0, "train_flops": 1.0, "other_seconds": 1.0}}}
    a = runtimes.t4_estimate("a", table)
    assert a.seconds == pytest.approx(10 + 8e12 / runtimes.T4_SUSTAINED_FLOPS) and not a.measured
    assert "estimated" in a.describe()
    b = runtimes.t4_estimate("b", table)
    assert b.measured and b.seconds == 600 and "measured" in b.describe() and "10 min" in b.describe()
    assert runtimes.t4_estimate("c", table).seconds is None
    with pytest.raises(TypeError, match="chapter"):
        runtimes.t4_estimate(3)


def test_every_chapter_has_a_recorded_estimate():
    table = json.loads(runtimes.RUNTIMES_FILE.read_text())
    for nb in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        if nb.stem in table["chapters"]:
            est = runtimes.t4_estimate(nb.stem)
            assert est.seconds is not None and est.seconds > 0


def test_flop_ledger_counts_the_uncapped_run(monkeypatch, tmp_path, smoke_on):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(runtimes.LEDGER_VAR, str(ledger))
    cfg = TrainConfig.from_preset("cifar", "colab", data="cifar10", model="mlp", model_kwargs={"hidden": 8},
                                  progress=False)
    trainer = make_trainer(cfg)
    (line,) = [json.loads(s) for s in ledger.read_text().splitlines()]
    per = runtimes.forward_flops(trainer.model, trainer.data.train_x)
    # 30 epochs of 45,000 training images (3 passes) and 5,000 validation images, then val + test
    expected = per * (30 * (3 * 45_000 + 5_000) + 5_000 + 10_000)
    assert line["flops"] == pytest.approx(expected) and line["epochs"] == 30
    assert per == pytest.approx(2 * (3072 * 8 + 8 * 10), rel=0.01)  # 2 FLOPs per multiply-add


def test_flop_ledger_counts_data_a_chapter_passes_at_its_own_size(monkeypatch, tmp_path, smoke_on):
    """Toy data is real in smoke mode: its run is counted at the size passed, not the cap."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(runtimes.LEDGER_VAR, str(ledger))
    n = profile.SMOKE_CAPS["train"] * 4
    x, y = torch.randn(n, 6), torch.arange(n) % 3
    splits = Splits(train_x=x, train_y=y, val_x=x[:50], val_y=y[:50], test_x=x[:60], test_y=y[:60],
                    num_classes=3, mean=(), std=(), name="toy", image=False)
    cfg = TrainConfig(data="toy", model="mlp", model_kwargs={"hidden": 4}, epochs=2,
                      progress=False)
    trainer = make_trainer(cfg, data=splits)
    assert trainer.data.train_x.shape[0] == profile.SMOKE_CAPS["train"]  # the run is capped
    (line,) = [json.loads(s) for s in ledger.read_text().splitlines()]
    per = runtimes.forward_flops(trainer.model, x)
    assert line["flops"] == pytest.approx(per * (2 * (3 * n + 50) + 50 + 60))
    assert runtimes.full_sizes("cifar10", 5000, (1, 1, 1), train_size=2500) == (2500, 5000, 10_000)
    assert runtimes.full_sizes("fashion_mnist", None, (16, 8, 8)) == (55_000, 5000, 10_000)


def test_flop_ledger_scales_in_the_seeds_smoke_mode_skips(monkeypatch, tmp_path, smoke_on):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(runtimes.LEDGER_VAR, str(ledger))
    kept = profile.smoke_cap("seeds", 5 * profile.SMOKE_CAPS["seeds"])
    assert kept == profile.SMOKE_CAPS["seeds"]
    ledger.write_text(ledger.read_text() + '{"flops": 10.0}\n{"flops": 20.0}\n')
    assert runtimes.ledger_flops(ledger) == pytest.approx(5 * 30.0)
    profile.smoke_cap("seeds", 1)  # nothing skipped: no line
    assert len(ledger.read_text().splitlines()) == 3


# ------------------------------------------------------------------ the Colab setup cell
def test_setup_cell_stops_with_one_message_when_pip_fails(monkeypatch, tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import sync_setup_cells

    real = sync_setup_cells.setup_source()
    assert "@main" in real and max(len(line) for line in real.splitlines()) <= 88
    src = sync_setup_cells.setup_source(url=f"file://{tmp_path}/no-such-repo")
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    with pytest.raises(SystemExit, match="Could not install calib from torch-calib\\[all\\] @ git\\+file://"):
        exec(compile(src, "setup", "exec"), {})


def test_smoke_cap(monkeypatch):
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    assert profile.smoke_cap("seeds", 5) == 5
    monkeypatch.setenv("CALIB_SMOKE", "1")
    assert profile.smoke_cap("seeds", 5) == profile.SMOKE_CAPS["seeds"] and profile.smoke_cap("seeds", 1) == 1
    with pytest.raises(ValueError, match="name"):
        profile.smoke_cap("steps", 3)


def test_sweep_grid_keeps_the_first_seeds_in_smoke_mode(monkeypatch):
    """Smoke mode: every loss, data and model of the grid, the first SMOKE_CAPS["seeds"] seeds."""
    from calib.experiments import sweep as sw

    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    full = sw.grid_cells(["ce", "focal:gamma=3"], "paper", "digits", "mlp", preset="wang2021")
    assert sorted({c.seed for c in full}) == [0, 1, 2, 3, 4]
    monkeypatch.setenv("CALIB_SMOKE", "1")
    capped = sw.grid_cells(["ce", "focal:gamma=3"], "paper", "digits", "mlp", preset="wang2021")
    n = profile.SMOKE_CAPS["seeds"]
    assert [c.seed for c in capped] == [*range(n), *range(n)] and len(capped) == 2 * n
    assert {c.loss for c in capped} == {"ce", "focal"}
    assert [c.seed for c in sw.grid_cells(["ce"], [42], "digits", "mlp")] == [42]
