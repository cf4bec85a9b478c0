"""calib.train: configs and presets, the trainer, run records, hooks; calib.plots.training."""
from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from calib import plots
from calib.train import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    HISTORY_FILE,
    LOGITS_FILE,
    METRICS_FILE,
    PRESETS,
    TrainConfig,
    Trainer,
    evaluate_run,
    load_config,
    load_history,
    load_logits,
    mean_history,
    scaled_milestones,
    split_stats,
)

matplotlib.use("Agg")

SUMMARY_KEYS = {"accuracy", "nll", "brier", "ece", "adaece", "classwise_ece", "mce"}


def tiny(out=None, **kw) -> TrainConfig:
    """Digits + a small MLP: a whole run takes well under a second on one core."""
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": 32}, epochs=2, batch_size=64,
                milestones=(1,), lr=0.05, progress=False, out=None if out is None else str(out))
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    trainer = Trainer(tiny(out, epochs=3, milestones=(1, 2), track=("train", "test")))
    metrics = trainer.fit()
    return out, trainer, metrics


# ----------------------------------------------------------------------------- config


def test_config_json_round_trip():
    cfg = tiny(loss="focal", loss_kwargs={"gamma": 3.0}, milestones=(1,), track=("test",))
    again = TrainConfig.from_json(cfg.to_json())
    assert again == cfg
    assert json.loads(cfg.to_json())["milestones"] == [1]


@pytest.mark.parametrize(
    "kw, exc, word",
    [
        (dict(epochs=0), ValueError, "epochs"),
        (dict(epochs=2.5), TypeError, "epochs"),
        (dict(batch_size=-1), ValueError, "batch_size"),
        (dict(lr=0.0), ValueError, "lr"),
        (dict(lr=float("nan")), ValueError, "lr"),
        (dict(weight_decay=-1e-4), ValueError, "weight_decay"),
        (dict(gamma_lr=2.0), ValueError, "gamma_lr"),
        (dict(milestones=(5, 3)), ValueError, "milestones"),
        (dict(milestones=(0,)), ValueError, "milestones"),
        (dict(optimizer="lbfgs"), ValueError, "optimizer"),
        (dict(amp="fp8"), ValueError, "amp"),
        (dict(track=("val2",)), ValueError, "track"),
        (dict(ts_method="ece"), ValueError, "ts_method"),
        (dict(preset="imagenet"), ValueError, "preset"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(loss=""), TypeError, "loss"),
        (dict(loss_kwargs={"gamma": object()}), TypeError, "loss_kwargs"),
    ],
)
def test_config_rejects_bad_values(kw, exc, word):
    with pytest.raises(exc, match=word):
        tiny(**kw)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({**tiny().to_dict(), "learning_rate": 0.1})


def test_cifar_preset_is_the_paper_protocol():
    # 004 App. B / 000 §5: SGD 0.1, momentum 0.9, wd 5e-4, batch 128, lr /10 at 150 and 250 of 350.
    cfg = TrainConfig.from_preset("cifar", "paper", data="cifar10", model="resnet50")
    assert (cfg.epochs, cfg.milestones, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.batch_size) == (
        350, (150, 250), 0.1, 0.9, 5e-4, 128)
    assert (cfg.gamma_lr, cfg.optimizer, cfg.val_size, cfg.preset, cfg.profile) == (0.1, "sgd", 5000, "cifar", "paper")


def test_tiny_imagenet_preset_and_profile_scaling():
    paper = TrainConfig.from_preset("tiny_imagenet", "paper")
    assert (paper.epochs, paper.milestones, paper.batch_size, paper.val_size) == (100, (40, 60), 128, 10000)
    assert TrainConfig.from_preset("cifar", "colab").milestones == (13, 21)
    assert TrainConfig.from_preset("cifar", "colab").epochs == 30
    quick = TrainConfig.from_preset("cifar", "quick")
    assert (quick.epochs, quick.milestones) == (3, (1, 2))
    # an explicit epoch count rescales the milestones; explicit milestones win
    assert TrainConfig.from_preset("cifar", "paper", epochs=35).milestones == (15, 25)
    assert TrainConfig.from_preset("cifar", "paper", epochs=35, milestones=(30,)).milestones == (30,)
    with pytest.raises(ValueError, match="preset"):
        TrainConfig.from_preset("imagenet")
    with pytest.raises(ValueError, match="profile"):
        TrainConfig.from_preset("cifar", "huge")


@settings(max_examples=200, deadline=None)
@given(preset=st.sampled_from(sorted(PRESETS)), epochs=st.integers(1, 400))
def test_scaled_milestones_properties(preset, epochs):
    paper = PRESETS[preset]
    ms = scaled_milestones(paper["milestones"], paper["epochs"], epochs)
    assert list(ms) == sorted(set(ms))
    assert len(ms) <= len(paper["milestones"])
    if epochs >= paper["epochs"]:
        assert ms == paper["milestones"]
    else:
        assert all(1 <= m < epochs for m in ms)
        if epochs >= 2 * len(paper["milestones"]) + 1:  # room for every drop: all of them survive
            assert len(ms) == len(paper["milestones"])


# ----------------------------------------------------------------------------- the run record


def test_run_directory_holds_every_record(finished_run):
    out, trainer, metrics = finished_run
    for name in (CONFIG_FILE, HISTORY_FILE, METRICS_FILE, LOGITS_FILE, CHECKPOINT_FILE):
        assert (out / name).is_file(), name
    assert load_config(out) == trainer.config
    assert not list(out.glob(".*.tmp"))  # no temp file left behind


def test_history_has_one_line_per_epoch(finished_run):
    out, trainer, _ = finished_run
    hist = load_history(out)
    assert [h["epoch"] for h in hist] == [1, 2, 3]
    assert hist == trainer.history
    for key in ("train_loss", "train_acc", "val_acc", "val_nll", "val_ece", "lr", "classifier_norm",
                "train_nll", "test_nll", "test_ece", "test_entropy_correct", "test_entropy_wrong"):
        assert key in hist[0], key
    # lr 0.05, /10 at epoch 1 and again at 2 (the lr logged is the one each epoch trained with)
    assert [h["lr"] for h in hist] == pytest.approx([0.05, 0.005, 0.0005])
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert all(0 <= h["val_ece"] <= 1 and 0 <= h["val_acc"] <= 1 for h in hist)


def test_logits_file_loads_with_weights_only(finished_run):
    out, trainer, _ = finished_run
    record = torch.load(out / LOGITS_FILE, weights_only=True)
    assert set(record) == {"val_logits", "val_labels", "test_logits", "test_labels", "selected_epoch"}
    assert int(record["selected_epoch"]) == 3  # select="last" keeps the final epoch
    n_test, n_val = trainer.data.test_y.shape[0], trainer.data.val_y.shape[0]
    assert record["test_logits"].shape == (n_test, 10) and record["val_logits"].shape == (n_val, 10)
    assert record["test_logits"].dtype == torch.float32 and record["test_labels"].dtype == torch.int64
    assert torch.equal(record["test_labels"], trainer.data.test_y)
    torch.testing.assert_close(record["test_logits"], trainer.predict("test")[0])


def test_metrics_before_and_after_temperature_scaling(finished_run):
    out, _, metrics = finished_run
    assert json.loads((out / METRICS_FILE).read_text()) == metrics
    assert set(metrics["pre_ts"]) >= SUMMARY_KEYS and set(metrics["post_ts"]) >= SUMMARY_KEYS
    assert metrics["temperature"] > 0
    # TS rescales logits: accuracy unchanged; NLL is what the NLL fit minimises on val
    assert metrics["post_ts"]["accuracy"] == metrics["pre_ts"]["accuracy"]
    last = load_history(out)[-1]
    assert metrics["pre_ts"]["ece"] == pytest.approx(last["test_ece"], abs=1e-6)
    assert metrics["pre_ts"]["nll"] == pytest.approx(last["test_nll"], abs=1e-5)


def test_temperature_is_fitted_on_the_validation_split(finished_run):
    """T comes from the saved *validation* logits only; post-TS metrics are the test logits / T."""
    from calib import metrics as cm
    from calib import posthoc

    out, _, metrics = finished_run
    record = load_logits(out)
    ts = posthoc.TemperatureScaling(method="nll").fit(record["val_logits"], record["val_labels"])
    assert metrics["temperature"] == pytest.approx(float(ts.temperature), rel=1e-9)
    on_test = posthoc.TemperatureScaling(method="nll").fit(record["test_logits"], record["test_labels"])
    assert abs(float(on_test.temperature) - metrics["temperature"]) > 1e-3  # a test-fitted T would differ
    post = cm.summary(torch.softmax(record["test_logits"].double() / ts.temperature, 1), record["test_labels"])
    for k in SUMMARY_KEYS:
        assert metrics["post_ts"][k] == pytest.approx(float(post[k]), rel=1e-6, abs=1e-9), k
    assert (metrics["n_val"], metrics["n_test"]) == (record["val_labels"].shape[0], record["test_labels"].shape[0])


def test_evaluate_run_recomputes_metrics_from_logits(finished_run):
    out, _, metrics = finished_run
    (out / METRICS_FILE).unlink()
    assert evaluate_run(out) == metrics
    assert json.loads((out / METRICS_FILE).read_text()) == metrics
    other = evaluate_run(out, n_bins=5)
    assert other["n_bins"] == 5
    evaluate_run(out)  # restore the run's own numbers for the other tests


def test_evaluate_run_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_run(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        evaluate_run(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(tiny().to_json())
    with pytest.raises(FileNotFoundError, match="logits"):
        load_logits(tmp_path)


def test_training_is_deterministic_per_seed():
    a, b, c = (Trainer(tiny(seed=s)) for s in (0, 0, 1))
    for t in (a, b, c):
        t.fit()
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k
    assert any(not torch.equal(v, c.model.state_dict()[k]) for k, v in a.model.state_dict().items())
    assert a.history[-1]["train_loss"] == b.history[-1]["train_loss"]


def test_run_without_out_writes_nothing_and_returns_metrics(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = Trainer(tiny(epochs=1, milestones=()))
    metrics = t.fit()
    assert set(metrics["pre_ts"]) >= SUMMARY_KEYS and len(t.history) == 1
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="resume"):
        Trainer(tiny(epochs=1, milestones=())).fit(resume=True)


def test_existing_checkpoint_needs_resume(finished_run):
    out, _, _ = finished_run
    with pytest.raises(FileExistsError, match="resume"):
        Trainer(tiny(out, epochs=3, milestones=(1, 2), track=("train", "test"))).fit()


def test_resume_of_a_finished_run_only_recomputes(finished_run):
    out, trainer, metrics = finished_run
    again = Trainer(tiny(out, epochs=3, milestones=(1, 2), track=("train", "test")))
    assert again.fit(resume=True) == metrics
    assert again.epoch == 3 and again.history == trainer.history


def test_losses_and_optimisers_from_the_registry():
    t = Trainer(tiny(loss="bsce_gra", loss_kwargs={"gamma": 4.0, "norm": 2.0}, optimizer="adam", lr=1e-3,
                     epochs=1, milestones=()))
    t.fit()
    assert isinstance(t.optimizer, torch.optim.Adam)
    assert math.isfinite(t.history[0]["train_loss"])
    with pytest.raises(ValueError, match="unknown"):
        Trainer(tiny(loss="no_such_loss"))
    with pytest.raises(TypeError, match="delta"):
        Trainer(tiny(loss="focal", loss_kwargs={"delta": 1.0}))


def test_amp_is_cuda_only_and_loss_stays_float32(capsys):
    t = Trainer(tiny(amp="bf16", device="cpu", epochs=1, milestones=()))
    assert t.amp_dtype is None and not t.scaler.is_enabled()
    assert "CUDA only" in capsys.readouterr().err
    x, y = t.data.train_x[:8], t.data.train_y[:8]
    out = t.train_step(x, y)
    assert out["loss"].dtype == torch.float32 and out["loss"].ndim == 0


def fake_images(n: int = 48, channels: int = 1, side: int = 8):
    from calib.data import Splits

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, channels, side, side), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return Splits(x, y, x[:16], y[:16], x[:16], y[:16], num_classes=3, mean=(0.5,) * channels,
                  std=(0.25,) * channels, name="fake", image=True)


@pytest.mark.parametrize("channels_last", [False, True])
def test_image_models_get_the_input_channels(channels_last):
    t = Trainer(tiny(data="fake", model="small_cnn", model_kwargs={"width": 4}, batch_size=16, epochs=1,
                     milestones=(), channels_last=channels_last), data=fake_images(channels=2))
    t.fit()
    assert t.model(torch.zeros(2, 2, 8, 8, device=t.device)).shape == (2, 3)  # in_channels=2 from the data
    assert t.augment is False  # augmentation is on by default only for CIFAR / Tiny-ImageNet
    x, _ = next(iter(t.train_loader))
    assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last) == channels_last
    augmented = Trainer(tiny(data="cifar10", model="small_cnn", model_kwargs={"width": 4}, batch_size=16,
                             epochs=1, milestones=()), data=fake_images(channels=3))
    assert augmented.augment is True
    augmented.fit()  # random crop + flip on the device, end to end
    assert math.isfinite(augmented.history[0]["train_loss"])


# ----------------------------------------------------------------------------- hooks


class Hooked(Trainer):
    """A subclass like calib.train.meta.MetaTrainer: an extra module + optimiser in the checkpoint."""

    def __init__(self, config, **kw):
        super().__init__(config, **kw)
        self.side = torch.nn.Linear(3, 1)
        self.side_opt = torch.optim.Adam(self.side.parameters(), lr=0.1)
        self.calls = 0

    def train_step(self, x, y):
        out = super().train_step(x, y)
        self.calls += 1
        loss = self.side(torch.ones(1, 3)).pow(2).sum()
        self.side_opt.zero_grad()
        loss.backward()
        self.side_opt.step()
        out["side_loss"] = float(loss.detach())
        return out

    def extra_state(self):
        return {"side": self.side.state_dict(), "side_opt": self.side_opt.state_dict(), "calls": self.calls}

    def load_extra_state(self, state):
        self.side.load_state_dict(state["side"])
        self.side_opt.load_state_dict(state["side_opt"])
        self.calls = state["calls"]

    def epoch_extras(self):
        return {"calls": self.calls}


def test_subclass_hooks(tmp_path):
    t = Hooked(tiny(tmp_path))
    t.fit()
    hist = load_history(tmp_path)
    steps = len(t.train_loader)
    assert [h["calls"] for h in hist] == [steps, 2 * steps]
    assert "train_side_loss" in hist[0]
    again = Hooked(tiny(tmp_path))
    again.fit(resume=True)
    assert again.calls == 2 * steps
    torch.testing.assert_close(again.side.weight, t.side.weight, rtol=0, atol=0)


# ----------------------------------------------------------------------------- split_stats


def test_split_stats_by_hand():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.0, 0.0]])
    labels = torch.tensor([0, 0, 0, 1])
    s = split_stats(logits, labels, n_bins=10)
    p = torch.softmax(logits.double(), 1)
    nll = -p[torch.arange(4), labels].log()
    ent = -(p * p.log()).sum(1)
    # argmax of the tie [0, 0] is class 0: predictions 0, 1, 0, 0 -> correct 1, 0, 1, 0
    assert s["acc"] == 0.5
    assert s["nll"] == pytest.approx(nll.mean().item(), rel=1e-6)
    assert s["nll_correct"] == pytest.approx(nll[[0, 2]].mean().item(), rel=1e-6)
    assert s["entropy_wrong"] == pytest.approx(ent[[1, 3]].mean().item(), rel=1e-6)
    all_right = split_stats(logits[[0, 2]], labels[[0, 2]])
    assert all_right["nll_wrong"] is None and all_right["entropy_wrong"] is None


def test_split_stats_validates():
    with pytest.raises(ValueError, match="logits"):
        split_stats(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="labels"):
        split_stats(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="labels"):
        split_stats(torch.zeros(2, 3), torch.tensor([0.0, 1.0]))


def test_bad_device_and_mismatched_model_or_split_give_clear_errors():
    with pytest.raises(ValueError, match="device 'gpu'"):
        Trainer(tiny(device="gpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            Trainer(tiny(device="cuda"))
    with pytest.raises(ValueError, match="needs images"):
        Trainer(tiny(model="small_cnn", model_kwargs={}))
    with pytest.raises(ValueError, match="val_size does not apply"):
        Trainer(tiny(val_size=100))
    # the CIFAR preset's 5,000-image validation split is not forced on the toy data
    assert TrainConfig.from_preset("cifar", "quick", data="digits").val_size is None
    assert TrainConfig.from_preset("cifar", "quick", data="cifar10").val_size == 5000


def test_predict_rejects_unknown_split():
    t = Trainer(tiny(epochs=1, milestones=()))
    with pytest.raises(ValueError, match="split"):
        t.predict("validation")


# ----------------------------------------------------------------------------- plots


def test_training_curves_figure(finished_run):
    out, _, _ = finished_run
    hist = load_history(out)
    fig = plots.training_curves({"CE": hist, "copy": hist},
                                [("train_nll", "test_nll"), "test_ece",
                                 ("test_entropy_correct", "test_entropy_wrong"), "classifier_norm"],
                                ncols=2, milestones=(1, 2))
    assert isinstance(fig, Figure)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4
    assert len(visible[0].lines) == 2 * 2 + 2  # 2 runs x 2 keys + 2 milestone lines
    xs, ys = visible[1].lines[0].get_data()
    assert list(xs) == [1, 2, 3] and list(ys) == pytest.approx([h["test_ece"] for h in hist])


def test_training_curves_validates(finished_run):
    hist = load_history(finished_run[0])
    with pytest.raises(ValueError, match="no_such_key"):
        plots.training_curves({"CE": hist}, ["no_such_key"])
    with pytest.raises(ValueError, match="histories"):
        plots.training_curves({}, ["test_ece"])
    with pytest.raises(ValueError, match="panels"):
        plots.training_curves({"CE": hist}, "test_ece")


# ----------------------------------------------------------------------------- loss reduction


def _one_step(reduction: str, lr: float, loss: str = "focal") -> tuple[dict[str, torch.Tensor], float]:
    cfg = tiny(loss=loss, loss_kwargs={"gamma": 2.0} if loss == "focal" else {}, loss_reduction=reduction,
               lr=lr, momentum=0.0, weight_decay=0.0, epochs=1)
    trainer = Trainer(cfg)
    x, y = trainer.data.train_x[:64], trainer.data.train_y[:64]
    out = trainer.train_step(x, y)
    assert torch.isfinite(out["loss"])
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, float(out["loss"])


@pytest.mark.parametrize("loss", ["focal", "ce", "mmce"])
def test_summed_loss_is_the_mean_with_a_batch_size_larger_step(loss):
    """SGD on the batch sum with lr/N takes exactly the step of the batch mean with lr (no momentum, no decay)."""
    summed, reported_sum = _one_step("sum", 0.1 / 64, loss)
    mean, reported_mean = _one_step("mean", 0.1, loss)
    for k in mean:
        torch.testing.assert_close(summed[k], mean[k], rtol=1e-5, atol=1e-6)
    assert reported_sum == pytest.approx(reported_mean, rel=1e-6)  # the reported loss is the mean either way
    bigger, _ = _one_step("sum", 0.1, loss)  # same lr: a 64 times larger step
    start = Trainer(tiny(loss=loss, epochs=1)).model.state_dict()

    def moved(state):
        return sum(float((state[k] - start[k]).norm()) for k in state if state[k].is_floating_point())

    assert moved(bigger) > 10 * moved(mean)


def test_loss_reduction_is_validated_and_set_by_the_papers_presets():
    with pytest.raises(ValueError, match="loss_reduction must be one of"):
        tiny(loss_reduction="total")
    with pytest.raises(ValueError, match="loss_reduction='sum' is for the standard trainer"):
        tiny(loss_reduction="sum", meta="gamma_net")
    assert PRESETS["lin2024"]["loss_reduction"] == PRESETS["mukhoti2020"]["loss_reduction"] == "sum"
    assert TrainConfig.from_preset("lin2024", profile="quick").clip_grad == 2.0
    assert TrainConfig().loss_reduction == "mean"


def test_mean_history_averages_each_epoch_over_runs():
    a = [{"epoch": 1, "test_nll": 1.0, "lr": 0.1, "x": None}, {"epoch": 2, "test_nll": 3.0, "lr": 0.1}]
    b = [{"epoch": 1, "test_nll": 2.0, "lr": 0.1, "x": 1.0}, {"epoch": 2, "test_nll": 5.0, "lr": 0.1}]
    m = mean_history([a, b])  # "x" is None in one run: a gap, not a missing key
    assert m == [{"epoch": 1, "test_nll": 1.5, "lr": 0.1, "x": None}, {"epoch": 2, "test_nll": 4.0, "lr": 0.1}]
    assert mean_history([a]) == a
    with pytest.raises(ValueError, match="same number of epochs"):
        mean_history([a, b[:1]])
    with pytest.raises(ValueError, match="non-empty"):
        mean_history([])
