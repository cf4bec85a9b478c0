"""calib.train.mixup: the mix, the mixed loss, determinism, and the trainer hook (mixup_alpha) with resume."""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from calib import losses
from calib.train.mixup import check_alpha, mix_batch, mixup_loss, sample_lambda


def _batch(n=16, k=4, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.randint(0, k, (n,), generator=g)


def test_mix_is_the_convex_combination_with_a_permutation():
    x, y = _batch()
    m = mix_batch(x, y, 1.0, seed=7)
    assert 0 < m.lam < 1
    assert sorted(m.perm.tolist()) == list(range(16))
    torch.testing.assert_close(m.x, m.lam * x + (1 - m.lam) * x[m.perm])
    assert torch.equal(m.y_a, y) and torch.equal(m.y_b, y[m.perm])


def test_mixup_loss_equals_the_convex_combination_of_the_two_losses():
    x, y = _batch()
    logits = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    m = mix_batch(x, y, 1.0, seed=3)
    for name, kw in (("ce", {}), ("focal", {"gamma": 3.0}), ("bsce_gra", {})):
        crit = losses.make(name, **kw)
        expected = m.lam * crit(logits, y) + (1 - m.lam) * crit(logits, y[m.perm])
        torch.testing.assert_close(m.loss(crit, logits), expected)
    # for CE it is the cross-entropy against the mixed one-hot target λ e_y + (1 − λ) e_y[π]
    target = m.lam * F.one_hot(y, 4) + (1 - m.lam) * F.one_hot(y[m.perm], 4)
    soft_ce = -(target * logits.log_softmax(1)).sum(1).mean()
    torch.testing.assert_close(mixup_loss(losses.cross_entropy, logits, y, y[m.perm], m.lam), soft_ce)


def test_same_seed_same_mix_other_seed_other_mix():
    x, y = _batch()
    a, b, c = mix_batch(x, y, 1.0, seed=11), mix_batch(x, y, 1.0, seed=11), mix_batch(x, y, 1.0, seed=12)
    assert a.lam == b.lam and torch.equal(a.x, b.x) and torch.equal(a.perm, b.perm)
    assert a.lam != c.lam


def test_alpha_zero_does_not_mix_and_lambda_follows_beta():
    import numpy as np

    x, y = _batch()
    m = mix_batch(x, y, 0.0, seed=1)
    assert m.lam == 1.0 and torch.equal(m.x, x)
    rng = np.random.default_rng(0)
    draws = np.array([sample_lambda(1.0, rng) for _ in range(4000)])
    assert abs(draws.mean() - 0.5) < 0.02 and abs(draws.var() - 1 / 12) < 0.01  # Beta(1, 1) = U(0, 1)


@pytest.mark.parametrize("alpha,exc", [(-1.0, ValueError), (float("nan"), ValueError), ("1", TypeError),
                                       (True, TypeError)])
def test_bad_alpha(alpha, exc):
    with pytest.raises(exc, match="alpha"):
        check_alpha(alpha)


def test_bad_batches():
    x, y = _batch()
    with pytest.raises(TypeError, match="floating"):
        mix_batch(torch.ones(4, 2, dtype=torch.long), y[:4], 1.0, seed=0)
    with pytest.raises(ValueError, match="batch"):
        mix_batch(x, y[:3], 1.0, seed=0)
    with pytest.raises(TypeError, match="seed"):
        mix_batch(x, y, 1.0, seed=1.5)
    with pytest.raises(ValueError, match="lam"):
        mixup_loss(losses.cross_entropy, torch.zeros(2, 3), torch.zeros(2, dtype=torch.long),
                   torch.zeros(2, dtype=torch.long), 1.5)


# --------------------------------------------------------------------------- trainer hook
def _splits(seed: int = 0, k: int = 3):
    from calib.data import Splits

    g = torch.Generator().manual_seed(seed)
    means = 2.0 * torch.eye(k, 4)

    def draw(n: int):
        y = torch.randint(0, k, (n,), generator=g)
        return (means[y] + torch.randn(n, 4, generator=g)).float(), y

    (tx, ty), (vx, vy), (sx, sy) = draw(160), draw(30), draw(60)
    return Splits(tx, ty, vx, vy, sx, sy, num_classes=k, mean=(), std=(), name="toy", image=False)


def _config(out, **kw):
    from calib.train import TrainConfig

    base = dict(data="toy", model="mlp", model_kwargs={"hidden": [8]}, epochs=3, batch_size=32, milestones=(2,),
                lr=0.05, out=str(out), progress=False, mixup_alpha=1.0)
    return TrainConfig(**{**base, **kw})


def test_config_validates_mixup_alpha():
    from calib.train import TrainConfig

    with pytest.raises(ValueError, match="mixup_alpha"):
        TrainConfig(mixup_alpha=-0.5)
    with pytest.raises(ValueError, match="mixup_alpha"):
        TrainConfig(mixup_alpha=1.0, meta="gamma_net")


def test_trainer_with_mixup_differs_from_plain_training_and_is_seeded(tmp_path):
    from calib.train import Trainer

    data = _splits()
    torch.manual_seed(0)
    runs = {}
    for name, alpha, seed in (("a", 1.0, 0), ("b", 1.0, 0), ("plain", 0.0, 0)):
        t = Trainer(_config(tmp_path / name, mixup_alpha=alpha, seed=seed), data=data)
        t.fit()
        runs[name] = [p.detach().clone() for p in t.model.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(runs["a"], runs["b"]))
    assert not all(torch.equal(p, q) for p, q in zip(runs["a"], runs["plain"]))


def test_trainer_with_mixup_resumes_mid_epoch_bit_identically(tmp_path, interrupted_after):
    from calib.train import Trainer, TrainingInterrupted, load_history

    data = _splits(1)
    straight = Trainer(_config(tmp_path / "a"), data=data)
    straight.fit()

    Stopping = interrupted_after(Trainer, 7)  # mid-way through epoch 2 (5 batches per epoch)

    with pytest.raises(TrainingInterrupted):
        Stopping(_config(tmp_path / "b"), data=data).fit()
    resumed = Trainer(_config(tmp_path / "b"), data=data)
    resumed.fit(resume=True)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    drop = lambda h: {k: v for k, v in h.items() if k != "seconds"}  # noqa: E731
    assert [drop(h) for h in load_history(tmp_path / "a")] == [drop(h) for h in load_history(tmp_path / "b")]
