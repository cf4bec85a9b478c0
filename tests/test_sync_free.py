"""No host-device synchronisation in the training step (issue: sync-free training step).

On a GPU, reading a tensor's values on the host (``.item()``, ``bool(t)``, ``int(t)``,
``float(t)``) blocks until the device has caught up. The losses, the gamma-Net meta step
and the trainer validate their inputs' *values* only on the host (CPU tensors) or in
debug mode; splits are validated once when the trainer is built.

Without a GPU we check this two ways: the per-step value checks (the calls of
``calib._checks.reads_values`` that allow a read) are counted, and none may run when the
tensors are treated as device tensors; and the step runs with every host-reading method
of ``torch.Tensor`` made to raise. On CUDA the step also runs under
``torch.cuda.set_sync_debug_mode("error")``.
"""
from __future__ import annotations

import contextlib
import sys

import pytest
import torch

from calib import _checks, losses, profile
from calib.train.meta import GammaNet, meta_step
from calib.train import TrainConfig, Trainer

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def as_device_tensors(monkeypatch):
    """Treat every tensor as a device tensor: per-step value checks must skip it."""
    monkeypatch.setattr(_checks, "HOST_DEVICES", ())
    profile.set_debug(False)
    try:
        yield
    finally:
        profile.set_debug(None)


@contextlib.contextmanager
def no_host_reads(monkeypatch):
    """Any read of a tensor's value on the host raises (a sync on a GPU).

    Except reads by ``torch.optim``: Adam keeps its step counter on the CPU even for CUDA
    parameters (``capturable=False``), so reading it costs no synchronisation.
    """
    def refuser(name):
        original = getattr(torch.Tensor, name)

        def refuse(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            if "/torch/optim/" in caller:
                return original(self, *args, **kwargs)
            raise AssertionError(f"Tensor.{name} read a value on the host inside the training step")

        return refuse

    with monkeypatch.context() as m:
        for name in READS:
            m.setattr(torch.Tensor, name, refuser(name))
        yield


def tiny_trainer(**kw) -> Trainer:
    kw.setdefault("device", "cpu")  # CPU tensors pose as device tensors (as_device_tensors)
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": 16}, epochs=1, batch_size=32,
                      milestones=(), lr=0.05, progress=False, **kw)
    return Trainer(cfg)


def meta_problem():
    torch.manual_seed(0)
    from calib import models

    model = models.make("mlp", 3, in_features=5, hidden=8)
    gnet = GammaNet(model.classifier.in_features, 3, generator=torch.Generator().manual_seed(0))
    x, xm = torch.randn(16, 5), torch.randn(16, 5)
    y, ym = torch.randint(0, 3, (16,)), torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mopt = torch.optim.Adam(gnet.parameters(), lr=1e-3)
    return model, gnet, x, y, xm, ym, opt, mopt


@pytest.fixture
def count_checks(monkeypatch):
    """``count_checks(step)``: how many per-step value checks ``step()`` runs.

    Wraps ``reads_values`` in every calib module that holds it (they import it by name)
    and counts the calls that allow a read.
    """
    original = _checks.reads_values
    allowed = [0]

    def counting(t):
        ok = original(t)
        allowed[0] += ok
        return ok

    for module in list(sys.modules.values()):
        if module.__name__.startswith("calib") and getattr(module, "reads_values", None) is original:
            monkeypatch.setattr(module, "reads_values", counting)

    def count(step) -> int:
        before = allowed[0]
        step()
        return allowed[0] - before

    return count


@pytest.mark.parametrize("loss", ["ce", "focal", "flsd53", "bsce_gra", "dual_focal"])
def test_trainer_step_runs_no_value_check_on_a_device(monkeypatch, count_checks, loss):
    trainer = tiny_trainer(loss=loss)
    x, y = next(iter(trainer.train_loader))
    on_host = count_checks(lambda: trainer.train_step(x, y))
    assert 1 <= on_host <= 4, on_host  # CPU tensors: the checks run, a bounded number per step
    with as_device_tensors(monkeypatch):
        assert count_checks(lambda: trainer.train_step(x, y)) == 0
        with no_host_reads(monkeypatch):
            out = trainer.train_step(x, y)
        assert set(out) >= {"loss", "acc"} and out["loss"].ndim == 0


def test_meta_step_runs_no_value_check_on_a_device(monkeypatch, count_checks):
    problem = meta_problem()
    assert count_checks(lambda: meta_step(*problem)) >= 1
    with as_device_tensors(monkeypatch):
        assert count_checks(lambda: meta_step(*problem)) == 0
        with no_host_reads(monkeypatch):
            stats = meta_step(*problem)
        assert {"loss", "acc", "meta_loss", "gamma_mean"} <= set(stats)


def test_first_order_meta_step_does_not_read_the_norm(monkeypatch):
    problem = meta_problem()
    with as_device_tensors(monkeypatch), no_host_reads(monkeypatch):
        stats = meta_step(*problem, order="first")
    assert torch.isfinite(stats["loss"])


def test_debug_mode_turns_device_checks_back_on(monkeypatch):
    bad = torch.tensor([[float("nan"), 0.0], [1.0, 2.0]])
    y = torch.tensor([0, 1])
    monkeypatch.setattr(_checks, "HOST_DEVICES", ())
    try:
        profile.set_debug(False)
        losses.focal_loss(bad, y)  # a device tensor: not read, so no error (and no sync)
        profile.set_debug(True)
        with pytest.raises(ValueError, match="NaN"):
            losses.focal_loss(bad, y)
        with pytest.raises(ValueError, match="targets must lie"):
            losses.focal_loss(torch.zeros(2, 2), torch.tensor([0, 5]))
    finally:
        profile.set_debug(None)
    monkeypatch.setenv("CALIB_DEBUG", "1")
    assert profile.debug()
    monkeypatch.setenv("CALIB_DEBUG", "0")
    assert not profile.debug()
    with pytest.raises(TypeError, match="flag"):
        profile.set_debug("yes")


def test_cpu_tensors_are_always_checked():
    with pytest.raises(ValueError, match="NaN"):
        losses.focal_loss(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="targets must lie"):
        losses.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))


def test_trainer_checks_split_labels_once():
    from calib.data import digits

    data = digits()
    data.test_y[0] = 10
    with pytest.raises(ValueError, match="data.test_y"):
        Trainer(TrainConfig(data="digits", model="mlp", epochs=1, milestones=(), progress=False), data=data)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_steps_do_not_synchronise():
    trainer = tiny_trainer(loss="bsce_gra", device="cuda")
    x, y = next(iter(trainer.train_loader))
    trainer.train_step(x, y)  # warm-up: first-call allocations may sync
    model, gnet, *batch, opt, mopt = meta_problem()
    model, gnet = model.cuda(), gnet.cuda()
    batch = [t.cuda() for t in batch]
    opt, mopt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.Adam(gnet.parameters(), lr=1e-3)
    meta_step(model, gnet, *batch, opt, mopt)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.train_step(x, y)
        meta_step(model, gnet, *batch, opt, mopt)
    finally:
        torch.cuda.set_sync_debug_mode("default")
