"""Tests for calib.train.meta: gamma-Net (001 Eq. 3-4), the look-ahead hypergradient, meta-training."""
from __future__ import annotations

import json
import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from calib.train.meta import GammaNet, gamma_from_features, hypergradient, meta_split, meta_step, split_811


class Tiny(nn.Module):
    """A backbone with the calib.models protocol: forward = classifier(features(x))."""

    def __init__(self, d_in: int = 5, d: int = 6, k: int = 3, batchnorm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(d_in, d)]
        if batchnorm:
            layers.append(nn.BatchNorm1d(d))
        layers.append(nn.Tanh())
        self.body = nn.Sequential(*layers)
        self.classifier = nn.Linear(d, k)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _problem(seed: int = 0, dtype: torch.dtype = torch.float64, n: int = 24, n_meta: int = 20, k: int = 3):
    torch.manual_seed(seed)
    model = Tiny(k=k).to(dtype)
    gnet = GammaNet(6, k, generator=torch.Generator().manual_seed(seed)).to(dtype)
    x, xm = torch.randn(n, 5, dtype=dtype), torch.randn(n_meta, 5, dtype=dtype)
    y, ym = torch.randint(0, k, (n,)), torch.randint(0, k, (n_meta,))
    return model, gnet, x, y, xm, ym


def _meta_loss_at(model, gnet, A, W, batch, lr, bandwidth, objective="sece"):
    g2 = copy.deepcopy(gnet)
    with torch.no_grad():
        g2.A.copy_(A)
        g2.W.copy_(W)
    return float(hypergradient(model, g2, *batch, lr=lr, bandwidth=bandwidth, objective=objective)["meta_loss"])


# --------------------------------------------------------------------------- gamma-Net
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("init_gamma", [1.0, 2.5])
def test_gamma_net_starts_at_init_gamma_for_every_input(scale: float, init_gamma: float) -> None:
    gnet = GammaNet(16, 10, init_gamma=init_gamma, generator=torch.Generator().manual_seed(1))
    gamma = gnet(scale * torch.randn(64, 16))
    assert gamma.shape == (64,)
    assert bool((gamma > 0).all())
    torch.testing.assert_close(gamma, torch.full_like(gamma, init_gamma), rtol=1e-4, atol=1e-4)


def test_gamma_net_heads_differ_at_init() -> None:
    gnet = GammaNet(8, 4, generator=torch.Generator().manual_seed(0))
    # every head has the same projection on W (that is what pins gamma) ...
    proj = (gnet.W.T @ gnet.A).squeeze(0)
    torch.testing.assert_close(proj, torch.full_like(proj, gnet.tau))
    # ... but the heads are not all equal, so the attention weights matter once W moves.
    assert float(torch.cdist(gnet.A.T, gnet.A.T).max().detach()) > 0.1


def test_gamma_from_features_matches_equations_3_and_4() -> None:
    torch.manual_seed(0)
    x, A, W = torch.randn(7, 5), torch.randn(5, 3), torch.randn(5, 1)
    a = torch.einsum("bd,dk->bk", x, A)
    p = torch.exp(a) / torch.exp(a).sum(1, keepdim=True)
    x_tilde = torch.einsum("bk,dk->bd", p, A)
    expected = torch.einsum("bd,d->b", x_tilde, W[:, 0]).abs() / 0.01
    torch.testing.assert_close(gamma_from_features(x, A, W), expected)
    torch.testing.assert_close(gamma_from_features(x, A, W, tau=0.5), expected * 0.01 / 0.5)


@settings(max_examples=30, deadline=None)
@given(
    b=st.integers(1, 6), d=st.integers(1, 6), k=st.integers(1, 5),
    c=st.floats(-5, 5).filter(lambda v: abs(v) > 1e-3), seed=st.integers(0, 10_000),
)
def test_gamma_is_nonnegative_and_scales_with_w(b: int, d: int, k: int, c: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x, A, W = torch.randn(b, d, generator=g, dtype=torch.float64), torch.randn(d, k, generator=g, dtype=torch.float64), torch.randn(d, 1, generator=g, dtype=torch.float64)
    gamma = gamma_from_features(x, A, W)
    assert bool((gamma >= 0).all())
    torch.testing.assert_close(gamma_from_features(x, A, c * W), abs(c) * gamma)


def test_gamma_from_features_gradcheck_float64() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    W = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, A, W: gamma_from_features(x, A, W), (x, A, W))


@pytest.mark.parametrize(
    "features, exc, match",
    [
        (torch.randn(3, 4), ValueError, r"A must have shape \(d, k\) = \(4, k\)"),
        (torch.randn(0, 6), ValueError, "b >= 1"),
        (torch.randn(6), ValueError, "features must have shape"),
        (torch.full((2, 6), float("nan")), ValueError, "NaN"),
        (torch.ones(2, 6, dtype=torch.long), TypeError, "floating"),
    ],
)
def test_gamma_net_rejects_bad_features(features, exc, match) -> None:
    gnet = GammaNet(6, 3)
    with pytest.raises(exc, match=match):
        gnet(features)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(in_features=0, num_heads=3), ValueError, "in_features"),
        (dict(in_features=4, num_heads=0), ValueError, "num_heads"),
        (dict(in_features=4.0, num_heads=3), TypeError, "in_features"),
        (dict(in_features=4, num_heads=3, tau=0.0), ValueError, "tau"),
        (dict(in_features=4, num_heads=3, tau=float("inf")), ValueError, "tau"),
        (dict(in_features=4, num_heads=3, init_gamma=-1.0), ValueError, "init_gamma"),
    ],
)
def test_gamma_net_rejects_bad_hyperparameters(kwargs, exc, match) -> None:
    with pytest.raises(exc, match=match):
        GammaNet(**kwargs)


# --------------------------------------------------------------------------- hypergradient
@pytest.mark.parametrize("objective, bandwidth", [("sece", 0.01), ("sece", 0.3), ("dece", 0.01)])
def test_exact_hypergradient_matches_finite_difference(objective: str, bandwidth: float) -> None:
    model, gnet, *batch = _problem()
    lr = 0.5
    out = hypergradient(model, gnet, *batch, lr=lr, bandwidth=bandwidth, objective=objective)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        uA = torch.randn(gnet.A.shape, generator=g, dtype=torch.float64)
        uW = torch.randn(gnet.W.shape, generator=g, dtype=torch.float64)
        e = 1e-6
        up = _meta_loss_at(model, gnet, gnet.A + e * uA, gnet.W + e * uW, batch, lr, bandwidth, objective)
        down = _meta_loss_at(model, gnet, gnet.A - e * uA, gnet.W - e * uW, batch, lr, bandwidth, objective)
        numeric = (up - down) / (2 * e)
        analytic = float((out["grads"][0] * uA).sum() + (out["grads"][1] * uW).sum())
        assert abs(numeric) > 1e-6  # the check is not vacuous
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-9)


def test_first_order_hypergradient_approximates_exact() -> None:
    model, gnet, *batch = _problem(seed=1)
    exact = hypergradient(model, gnet, *batch, lr=0.5, order="second")["grads"]
    approx = hypergradient(model, gnet, *batch, lr=0.5, order="first", fd_eps=1e-4)["grads"]
    for e, a in zip(exact, approx):
        assert float(e.norm()) > 0
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-7)


def test_hypergradient_is_a_descent_direction_for_the_lookahead_meta_loss() -> None:
    model, gnet, *batch = _problem(seed=2)
    out = hypergradient(model, gnet, *batch, lr=0.5, bandwidth=0.3)
    gA, gW = out["grads"]
    step = 1e-3 / float(torch.sqrt((gA**2).sum() + (gW**2).sum()))
    after = _meta_loss_at(model, gnet, gnet.A - step * gA, gnet.W - step * gW, batch, 0.5, 0.3)
    assert after < float(out["meta_loss"])


def test_hypergradient_vanishes_linearly_with_the_lookahead_step() -> None:
    """SECE does not depend on phi directly (001 §3.3): only through theta' = theta - alpha g,
    so the hypergradient is alpha times a fixed vector as alpha -> 0."""
    model, gnet, *batch = _problem(seed=5)
    g1 = hypergradient(model, gnet, *batch, lr=1e-5)["grads"]
    g2 = hypergradient(model, gnet, *batch, lr=2e-5)["grads"]
    for a, b in zip(g1, g2):
        assert float(a.norm()) > 0
        torch.testing.assert_close(b, 2 * a, rtol=1e-3, atol=1e-12)


# --------------------------------------------------------------------------- meta_step
def test_meta_step_backbone_update_uses_the_new_gamma() -> None:
    model, gnet, x, y, xm, ym = _problem(seed=4)
    ref_model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    mopt = torch.optim.SGD(gnet.parameters(), lr=1e-4)
    stats = meta_step(model, gnet, x, y, xm, ym, opt, mopt)
    # gamma-Net moved, and the backbone took exactly one SGD step on focal(gamma_new)
    assert not torch.allclose(gnet.W, GammaNet(6, 3, generator=torch.Generator().manual_seed(4)).W.double())
    from calib.losses import focal_loss

    feats = ref_model.features(x)
    with torch.no_grad():
        gamma_new = gnet(feats.detach())
    loss = focal_loss(ref_model.classifier(feats), y, gamma=gamma_new, reduction="mean")
    grads = torch.autograd.grad(loss, list(ref_model.parameters()))
    for p, p0, g in zip(model.parameters(), ref_model.parameters(), grads):
        torch.testing.assert_close(p, p0 - 0.3 * g)
    assert float(stats["gamma_mean"]) == pytest.approx(float(gamma_new.mean()))
    assert float(stats["gamma_std"]) > 0
    assert set(stats) == {"loss", "acc", "meta_loss", "gamma_mean", "gamma_std"}


@pytest.mark.parametrize("order", ["second", "first"])
def test_meta_step_leaves_batchnorm_statistics_to_the_training_batch(order: str) -> None:
    torch.manual_seed(0)
    model, ref = Tiny(batchnorm=True), None
    ref = copy.deepcopy(model)
    gnet = GammaNet(6, 3)
    x, xm = torch.randn(16, 5), 3 + torch.randn(16, 5)
    y, ym = torch.randint(0, 3, (16,)), torch.randint(0, 3, (16,))
    meta_step(model, gnet, x, y, xm, ym, torch.optim.SGD(model.parameters(), lr=0.1),
              torch.optim.Adam(gnet.parameters(), lr=1e-4), order=order)
    ref(x)  # one forward on the training batch, in train mode
    bn, bn_ref = model.body[1], ref.body[1]
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert int(bn.num_batches_tracked) == 1


def test_meta_training_lowers_meta_val_sece_and_spreads_gamma() -> None:
    from calib.metrics import sece_loss

    torch.manual_seed(0)
    k, n = 4, 800
    means = 3.0 * torch.eye(k, 2 * k)[:, :6]
    y_all = torch.randint(0, k, (n,))
    x_all = means[y_all] + torch.randn(n, 6)
    (x, y), _, (xm, ym) = meta_split(x_all, y_all, seed=0)
    model = Tiny(d_in=6, d=16, k=k)
    gnet = GammaNet(16, k, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    mopt = torch.optim.Adam(gnet.parameters(), lr=1e-3)

    def meta_val_sece() -> float:
        with torch.no_grad():
            return float(sece_loss(torch.softmax(model(xm), 1), ym, bandwidth=0.01))

    with torch.no_grad():
        start_std = float(gnet(model.features(x)).std())
    start = meta_val_sece()
    gen = torch.Generator().manual_seed(1)
    for _ in range(8):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), 32):
            b = perm[i : i + 32]
            mb = torch.randint(0, len(xm), (32,), generator=gen)
            stats = meta_step(model, gnet, x[b], y[b], xm[mb], ym[mb], opt, mopt)
            assert math.isfinite(float(stats["loss"])) and math.isfinite(float(stats["meta_loss"]))
    with torch.no_grad():
        end_std = float(gnet(model.features(x)).std())
    assert meta_val_sece() < 0.75 * start
    assert start_std < 1e-5 < 1e-2 < end_std


# --------------------------------------------------------------------------- validation
def test_hypergradient_rejects_bad_arguments() -> None:
    model, gnet, x, y, xm, ym = _problem()
    with pytest.raises(TypeError, match="y must be integer"):
        hypergradient(model, gnet, x, y.double(), xm, ym, lr=0.1)
    with pytest.raises(ValueError, match=r"y_meta must lie in \[0, 3\)"):
        hypergradient(model, gnet, x, y, xm, ym + 5, lr=0.1)
    with pytest.raises(ValueError, match="y has 3 entries"):
        hypergradient(model, gnet, x, y[:3], xm, ym, lr=0.1)
    with pytest.raises(ValueError, match="x_meta contains NaN"):
        hypergradient(model, gnet, x, y, xm * float("nan"), ym, lr=0.1)
    with pytest.raises(ValueError, match="x is empty"):
        hypergradient(model, gnet, x[:0], y[:0], xm, ym, lr=0.1)
    with pytest.raises(ValueError, match="order"):
        hypergradient(model, gnet, x, y, xm, ym, lr=0.1, order="third")
    with pytest.raises(ValueError, match="objective"):
        hypergradient(model, gnet, x, y, xm, ym, lr=0.1, objective="brier")
    with pytest.raises(ValueError, match="look-ahead step"):
        hypergradient(model, gnet, x, y, xm, ym, lr=0.0)
    with pytest.raises(ValueError, match="fd_eps"):
        hypergradient(model, gnet, x, y, xm, ym, lr=0.1, order="first", fd_eps=-1.0)
    with pytest.raises(TypeError, match="features"):
        hypergradient(nn.Linear(5, 3).double(), gnet, x, y, xm, ym, lr=0.1)


# --------------------------------------------------------------------------- 8:1:1 split
@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 3000), seed=st.integers(0, 100))
def test_split_811_is_a_partition_in_proportion(n: int, seed: int) -> None:
    tr, va, mv = split_811(n, seed=seed)
    all_idx = torch.cat([tr, va, mv]).sort().values
    assert torch.equal(all_idx, torch.arange(n))
    assert min(len(tr), len(va), len(mv)) >= 1
    if n >= 100:
        assert abs(len(va) - n / 10) <= 1 and abs(len(mv) - n / 10) <= 1


def test_split_811_is_seeded_and_meta_split_keeps_pairs() -> None:
    a, b = split_811(50, seed=3), split_811(50, seed=3)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(split_811(50, seed=4)[0], a[0])
    x = torch.arange(50.0)[:, None]
    y = torch.arange(50)
    for xs, ys in meta_split(x, y, seed=0):
        assert torch.equal(xs[:, 0].long(), ys)
    with pytest.raises(ValueError, match="n must be >= 3"):
        split_811(2)
    with pytest.raises(ValueError, match="rows"):
        meta_split(x, y[:10])


# --------------------------------------------------------------------------- plots
def test_gamma_plots_return_figures_and_validate() -> None:
    from matplotlib.figure import Figure

    from calib.plots import gamma_over_epochs, gamma_scatter

    hist = [{"epoch": e, "gamma_mean": 1 + 0.1 * e, "gamma_std": 0.05 * e} for e in range(1, 5)]
    fig = gamma_over_epochs({"FL-SECE": hist, "FL-DECE": hist[:2]})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert len(fig.axes[0].lines) == 2
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [0.05, 0.1, 0.15, 0.2])
    with pytest.raises(ValueError, match="key 'gamma_std'"):
        gamma_over_epochs({"run": [{"gamma_mean": 1.0}]})
    with pytest.raises(ValueError, match="non-empty"):
        gamma_over_epochs({})
    fig = gamma_scatter(torch.rand(20), torch.rand(20), torch.rand(20) > 0.5)
    assert isinstance(fig, Figure)
    with pytest.raises(ValueError, match="confidence must lie"):
        gamma_scatter(torch.rand(5), torch.rand(5) + 1, torch.ones(5))
    with pytest.raises(ValueError, match="same length"):
        gamma_scatter(torch.rand(5), torch.rand(4), torch.ones(5))


# --------------------------------------------------------------------------- MetaTrainer
def _toy_splits(seed: int = 0, k: int = 3):
    from calib.data import Splits

    g = torch.Generator().manual_seed(seed)
    means = 2.0 * torch.eye(k, 4)

    def draw(n: int):
        y = torch.randint(0, k, (n,), generator=g)
        return (means[y] + torch.randn(n, 4, generator=g)).float(), y

    (tx, ty), (vx, vy), (sx, sy) = draw(240), draw(30), draw(60)
    return Splits(tx, ty, vx, vy, sx, sy, num_classes=k, mean=(), std=(), name="toy", image=False)


def _config(out=None, **kw):
    from calib.train import TrainConfig

    base = dict(data="toy", model="mlp", model_kwargs={"hidden": [8]}, epochs=3, batch_size=32,
                milestones=(2,), lr=0.05, meta="gamma_net", out=None if out is None else str(out),
                progress=False)
    base.update(kw)
    return TrainConfig(**base)


def test_meta_trainer_carves_an_811_split_and_records_gamma(tmp_path) -> None:
    from calib.train.meta import MetaTrainer
    from calib.train import load_history

    data = _toy_splits()
    trainer = MetaTrainer(_config(tmp_path / "run"), data=data, meta_lr=1e-3)
    d = trainer.data
    assert d.train_y.shape[0] == 210 and d.extra["meta_y"].shape[0] == d.val_y.shape[0] == 30
    # the meta split is carved from training examples and overlaps neither part
    rows = {tuple(r.tolist()) for r in d.train_x}
    assert not any(tuple(r.tolist()) in rows for r in d.extra["meta_x"])
    trainer.fit()
    hist = load_history(tmp_path / "run")
    assert [h["epoch"] for h in hist] == [1, 2, 3]
    for key in ("train_meta_loss", "train_gamma_mean", "train_gamma_std", "val_gamma_mean",
                "val_gamma_std", "test_gamma_mean", "test_gamma_std"):
        assert all(math.isfinite(h[key]) for h in hist), key
    assert hist[-1]["test_gamma_std"] > 1e-3  # gamma spread across samples
    assert (tmp_path / "run" / "metrics.json").exists()
    g = trainer.gammas("test")
    assert g.shape == (60,) and bool((g >= 0).all())
    assert float(g.std(unbiased=False)) == pytest.approx(hist[-1]["test_gamma_std"], rel=1e-5)


def test_meta_trainer_resume_mid_epoch_matches_an_uninterrupted_run(tmp_path, interrupted_after) -> None:

    from calib.train.meta import MetaTrainer
    from calib.train import TrainingInterrupted, load_history

    data = _toy_splits(1)
    straight = MetaTrainer(_config(tmp_path / "a"), data=data, meta_lr=1e-3)
    straight.fit()

    Stopping = interrupted_after(MetaTrainer, 10)  # mid-way through epoch 2 (7 batches per epoch)

    with pytest.raises(TrainingInterrupted):
        Stopping(_config(tmp_path / "b"), data=data, meta_lr=1e-3).fit()
    resumed = MetaTrainer(_config(tmp_path / "b"), data=data, meta_lr=1e-3)
    resumed.fit(resume=True)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    for p, q in zip(straight.gamma_net.parameters(), resumed.gamma_net.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    drop = lambda h: {k: v for k, v in h.items() if k != "seconds"}  # noqa: E731
    assert [drop(h) for h in load_history(tmp_path / "a")] == [drop(h) for h in load_history(tmp_path / "b")]


def test_meta_trainer_refuses_a_checkpoint_with_other_meta_settings(tmp_path) -> None:
    from calib.train.meta import MetaTrainer
    from calib.train import CheckpointError

    data = _toy_splits()
    MetaTrainer(_config(tmp_path / "r", epochs=1, milestones=()), data=data).fit()
    with pytest.raises(CheckpointError, match="meta settings"):
        MetaTrainer(_config(tmp_path / "r", epochs=1, milestones=()), data=data, bandwidth=0.05).fit(resume=True)


@pytest.mark.parametrize(
    "kw, init, exc, match",
    [
        (dict(meta="none"), {}, ValueError, "meta='gamma_net'"),
        (dict(loss="flsd53"), {}, ValueError, "focal"),
        (dict(meta_objective="brier"), {}, ValueError, "meta_objective"),
        (dict(loss="focal", loss_kwargs={"gamma": 2.0}), {}, ValueError, "loss_kwargs"),
        ({}, dict(order="third"), ValueError, "order"),
        ({}, dict(meta_lr=0.0), ValueError, "meta_lr"),
        ({}, dict(bandwidth=-1.0), ValueError, "bandwidth"),
    ],
)
def test_meta_trainer_rejects_bad_settings(kw, init, exc, match) -> None:
    from calib.train.meta import MetaTrainer

    with pytest.raises(exc, match=match):
        MetaTrainer(_config(**kw), data=_toy_splits(), **init)


@pytest.mark.slow
def test_cli_trains_with_gamma_net_on_tiny_data(tmp_path, capsys) -> None:
    from calib.cli import main
    from calib.train import load_history

    out = tmp_path / "cli"
    rc = main(["train", "--data", "digits", "--model", "mlp", "--model-arg", "hidden=16", "--meta", "gamma_net",
               "--meta-objective", "sece", "--meta-arg", "meta_lr=0.002", "--epochs", "2", "--batch-size", "64",
               "--lr", "0.05", "--out", str(out), "--no-progress", "--profile", "quick"])
    assert rc == 0
    assert json.loads((out / "config.json").read_text())["meta_kwargs"] == {"meta_lr": 0.002}
    hist = load_history(out)
    assert len(hist) == 2 and "test_gamma_std" in hist[-1]
    assert "test accuracy" in capsys.readouterr().out
    # and the same command with --resume on a finished run leaves it as it is
    assert main(["train", "--data", "digits", "--model", "mlp", "--model-arg", "hidden=16", "--meta",
                 "gamma_net", "--meta-arg", "meta_lr=0.002", "--epochs", "2", "--batch-size", "64", "--lr", "0.05", "--out", str(out),
                 "--no-progress", "--profile", "quick", "--resume"]) == 0
    assert len(load_history(out)) == 2


# --------------------------------------------------------------------------- CE-DECE / CE-SECE baselines
def _toy_model(seed: int = 0, k: int = 3):
    from calib import models

    torch.manual_seed(seed)
    return models.make("mlp", k, in_features=4, hidden=8)


def test_l2_hypergradient_is_the_chain_rule_through_the_lookahead() -> None:
    """d meta/d omega = −lr · 2 W ⊙ ∇_{W'} meta: the penalty's gradient is 2 ω ⊙ W."""
    import torch.nn.functional as F

    from calib.train.meta import l2_hypergradient, meta_objective

    data = _toy_splits(2)
    model = _toy_model().double()
    x, y, xm, ym = data.train_x[:32].double(), data.train_y[:32], data.val_x.double(), data.val_y
    coefs = [torch.full_like(p, 0.01).requires_grad_() for p in (model.classifier.weight, model.classifier.bias)]
    lr = 0.1
    out = l2_hypergradient(model, coefs, x, y, xm, ym, lr=lr, criterion=F.cross_entropy, objective="sece",
                           bandwidth=0.2)
    # closed form: W' = W − lr (∇CE + 2 ω ⊙ W); ∂W'/∂ω = −2 lr W
    W, b = model.classifier.weight, model.classifier.bias
    gW, gb = torch.autograd.grad(F.cross_entropy(model(x), y), [W, b])
    fast = [(W - lr * (gW + 2 * coefs[0] * W)).detach().requires_grad_(), (b - lr * (gb + 2 * coefs[1] * b)).detach()
            .requires_grad_()]
    feats = model.features(xm).detach()
    logits = F.linear(feats, *fast)
    meta = F.cross_entropy(logits, ym) + 0.5 * meta_objective(logits, ym, "sece", bandwidth=0.2)
    vW, vb = torch.autograd.grad(meta, fast)
    torch.testing.assert_close(out["grads"][0], -2 * lr * W.detach() * vW)
    torch.testing.assert_close(out["grads"][1], -2 * lr * b.detach() * vb)
    assert out["meta_loss"].item() == pytest.approx(meta.item(), rel=1e-10)


@pytest.mark.parametrize("objective", ["dece", "sece"])
def test_l2_meta_steps_lower_the_meta_objective_on_a_toy_problem(objective) -> None:
    """With the backbone held fixed, Adam steps on omega lower the look-ahead meta-objective."""
    import torch.nn.functional as F

    from calib.train.meta import l2_hypergradient

    data = _toy_splits(3)
    model = _toy_model(1)
    x, y, xm, ym = data.train_x[:64], data.train_y[:64], data.val_x, data.val_y
    # an over-confident classifier: scale the last layer up
    with torch.no_grad():
        model.classifier.weight.mul_(8.0)
    coefs = [torch.zeros_like(p).requires_grad_() for p in (model.classifier.weight, model.classifier.bias)]
    opt = torch.optim.Adam(coefs, lr=0.05)
    kw = dict(lr=0.5, criterion=F.cross_entropy, objective=objective, bandwidth=0.1)
    losses_seen = []
    for _ in range(40):
        out = l2_hypergradient(model, coefs, x, y, xm, ym, **kw)
        losses_seen.append(out["meta_loss"].item())
        opt.zero_grad()
        for c, g in zip(coefs, out["grads"]):
            c.grad = g
        opt.step()
    final = l2_hypergradient(model, coefs, x, y, xm, ym, **kw)["meta_loss"].item()
    assert final < losses_seen[0] - 1e-3, (losses_seen[0], final)
    assert float(sum(c.detach().abs().sum() for c in coefs)) > 0


def _l2_config(out, **kw):
    return _config(out, **{"meta": "l2_reg", "meta_objective": "dece", **kw})


def test_l2_meta_trainer_is_what_make_trainer_builds_for_l2_reg(tmp_path) -> None:
    from calib.train.meta import L2MetaTrainer, MetaTrainer
    from calib.train import load_history, make_trainer

    data = _toy_splits()
    trainer = make_trainer(_l2_config(tmp_path / "run", meta_objective="sece"), data=data)
    assert type(trainer) is L2MetaTrainer
    assert trainer.data.extra["meta_y"].shape[0] == trainer.data.val_y.shape[0] == 30
    assert [c.shape for c in trainer.coefs] == [trainer.model.classifier.weight.shape,
                                                trainer.model.classifier.bias.shape]
    trainer.fit()
    hist = load_history(tmp_path / "run")
    for key in ("train_meta_loss", "train_penalty", "l2_coef_mean", "l2_coef_abs_mean"):
        assert all(math.isfinite(h[key]) for h in hist), key
    assert hist[-1]["l2_coef_abs_mean"] > 0  # the coefficients moved
    assert (tmp_path / "run" / "metrics.json").exists()
    with pytest.raises(ValueError, match="unknown meta settings"):
        L2MetaTrainer(_l2_config(tmp_path / "x", meta_kwargs={"tau": 0.1}), data=data)
    with pytest.raises(ValueError, match="make_trainer"):  # no silent swap of the class (issue 34)
        MetaTrainer(_l2_config(tmp_path / "y"), data=data)
    assert not hasattr(trainer, "gammas")  # no gamma-Net here: the coefficients are .coefs


def test_l2_meta_trainer_resume_mid_epoch_matches_an_uninterrupted_run(tmp_path, interrupted_after) -> None:

    from calib.train.meta import L2MetaTrainer
    from calib.train import CheckpointError, TrainingInterrupted, load_history

    data = _toy_splits(1)
    straight = L2MetaTrainer(_l2_config(tmp_path / "a"), data=data)
    straight.fit()

    Stopping = interrupted_after(L2MetaTrainer, 10)  # mid-way through epoch 2 (7 batches per epoch)

    with pytest.raises(TrainingInterrupted):
        Stopping(_l2_config(tmp_path / "b"), data=data).fit()
    resumed = L2MetaTrainer(_l2_config(tmp_path / "b"), data=data)
    resumed.fit(resume=True)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    for p, q in zip(straight.coefs, resumed.coefs):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    drop = lambda h: {k: v for k, v in h.items() if k != "seconds"}  # noqa: E731
    assert [drop(h) for h in load_history(tmp_path / "a")] == [drop(h) for h in load_history(tmp_path / "b")]
    with pytest.raises(CheckpointError, match="meta settings"):
        L2MetaTrainer(_l2_config(tmp_path / "b"), data=data, calib_weight=1.0).fit(resume=True)


def test_l2_meta_step_on_a_batchnorm_backbone_leaves_its_statistics_to_the_training_batch() -> None:
    """The look-ahead on the meta batch neither moves the running statistics nor breaks backward.

    Regression: restoring the BatchNorm buffers in place after the meta forward bumped their
    version, and the real update's backward (which saved them) failed on ResNets.
    """
    import torch.nn.functional as F

    from calib.train.meta import l2_meta_step

    torch.manual_seed(0)
    model = Tiny(batchnorm=True).train()
    reference = copy.deepcopy(model)
    x, xm = torch.randn(16, 5), 3 + torch.randn(12, 5)
    y, ym = torch.randint(0, 3, (16,)), torch.randint(0, 3, (12,))
    coefs = [torch.zeros_like(p).requires_grad_() for p in (model.classifier.weight, model.classifier.bias)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = l2_meta_step(model, coefs, x, y, xm, ym, opt, torch.optim.Adam(coefs, lr=1e-3),
                       criterion=F.cross_entropy)
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["meta_loss"])
    reference(x)  # the training batch alone moves the statistics
    bn, bn_ref = model.body[1], reference.body[1]
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert int(bn.num_batches_tracked) == 1


# --------------------------------------------------------------------------- chapter 8's check
def test_check_hypergradient_rows_agree_with_finite_differences() -> None:
    torch.manual_seed(0)
    from calib.train.meta import TinyBackbone, check_hypergradient

    model, gnet = TinyBackbone(5, 6, 3).double(), GammaNet(6, 3).double()
    batch = (torch.randn(24, 5, dtype=torch.float64), torch.randint(0, 3, (24,)),
             torch.randn(20, 5, dtype=torch.float64), torch.randint(0, 3, (20,)))
    A0, W0 = gnet.A.detach().clone(), gnet.W.detach().clone()
    rows = check_hypergradient(model, gnet, batch, lr=0.5, bandwidth=0.3, directions=4)
    assert len(rows) == 4 and all(set(r) == {"finite difference", "exact", "first order"} for r in rows)
    for r in rows:
        assert abs(r["finite difference"]) > 1e-6  # not vacuous
        assert r["exact"] == pytest.approx(r["finite difference"], rel=1e-5)
        assert r["first order"] == pytest.approx(r["finite difference"], rel=1e-3)
    assert torch.equal(gnet.A, A0) and torch.equal(gnet.W, W0)  # the probes leave gamma_net alone
    # the directions differ from one another and are reproducible
    assert len({round(r["exact"], 12) for r in rows}) == 4
    assert check_hypergradient(model, gnet, batch, lr=0.5, bandwidth=0.3, directions=4) == rows


def test_check_hypergradient_rejects_bad_arguments() -> None:
    from calib.train.meta import TinyBackbone, check_hypergradient

    model, gnet, *batch = _problem()
    assert isinstance(model, nn.Module) and isinstance(TinyBackbone(), nn.Module)
    with pytest.raises(ValueError, match="batch"):
        check_hypergradient(model, gnet, batch[:3], lr=0.5)
    with pytest.raises(ValueError, match="directions"):
        check_hypergradient(model, gnet, batch, lr=0.5, directions=0)
    with pytest.raises(ValueError, match="eps"):
        check_hypergradient(model, gnet, batch, lr=0.5, eps=-1.0)


def test_tiny_backbone_follows_the_model_protocol() -> None:
    from calib.train.meta import TinyBackbone

    m = TinyBackbone(4, 7, 2)
    x = torch.randn(3, 4)
    assert m.features(x).shape == (3, 7) and m(x).shape == (3, 2)
    assert torch.equal(m(x), m.classifier(m.features(x)))
