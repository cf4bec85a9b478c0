"""calib.losses: parity numbers (CONTRIBUTING.md, "Conventions"), gradients, the GRA identity, numerics, bad input.

Batch-level objectives (MMCE, DECE, SECE) are checked against naive loops written here from
the papers' definitions, independently of the vectorised code.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck, gradgradcheck

from calib import losses as L
from calib.losses import uncertainty as U

T = torch.tensor
EXPECTED_NAMES = [
    "brier", "bsce", "bsce_gra", "ce", "ce_dece", "ce_sece", "dece", "dual_focal", "dual_focal_gra",
    "entropy_reg", "flsd53", "flsd53_gra", "focal", "focal_gra", "inverse_focal", "label_smoothing", "logit_norm",
    "mmce", "sece",
]
def _u_flsd53(probs: torch.Tensor, y: torch.Tensor, gamma: object = None) -> torch.Tensor:
    """FLSD-53's weight written out: (1 − p_y)^5 if p_y < 0.2 else (1 − p_y)^3 (``gamma`` unused)."""
    p_y = probs.gather(1, y[:, None]).squeeze(1)
    return torch.where(p_y < 0.2, (1 - p_y) ** 5, (1 - p_y) ** 3)


GRA = {  # GRA loss: (its loss-weighted twin, its weight, default gamma)
    "focal_gra": ("focal", U.u_fl, 3.0),
    "flsd53_gra": ("flsd53", _u_flsd53, None),
    "dual_focal_gra": ("dual_focal", U.u_dfl, 5.0),
    "bsce_gra": ("bsce", U.u_gbs, 4.0),
}


def _has_metric_sece() -> bool:
    try:
        from calib.metrics import sece_loss  # noqa: F401
    except ImportError:
        return False
    return True


needs_sece = pytest.mark.skipif(not _has_metric_sece(), reason="calib.metrics.sece_loss is not there yet")


def _names(include_sece: bool = True) -> list[str]:
    return [n for n in L.names() if include_sece or "sece" not in n]


def _available() -> list:
    return [pytest.param(n, marks=needs_sece) if "sece" in n else n for n in L.names()]


def _batch(n=8, k=5, scale=2.0, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, k, generator=gen, dtype=torch.float64) * scale).to(dtype)
    return x, torch.randint(0, k, (n,), generator=gen)


# =========================================================================== registry
def test_registry_names_are_the_contract():
    assert L.names() == EXPECTED_NAMES


@pytest.mark.parametrize("name", _available())
def test_make_builds_a_module_that_matches_the_functional_form(name):
    x, y = _batch(seed=1)
    module = L.make(name)
    assert isinstance(module, torch.nn.Module)
    assert torch.allclose(module(x, y), L.functional(name)(x, y))


def test_make_accepts_the_cli_keys_that_apply_and_names_the_rest():
    L.make("focal", gamma=2.0)
    L.make("bsce_gra", gamma=4.0, norm=2.0)
    L.make("label_smoothing", epsilon=0.1)
    x, y = _batch(seed=3)
    assert torch.allclose(L.make("label_smoothing", alpha=0.1)(x, y), L.label_smoothing_loss(x, y, 0.1, "mukhoti"))
    with pytest.raises(TypeError, match="not both"):
        L.make("label_smoothing", epsilon=0.1, alpha=0.1)
    L.make("logit_norm", alpha=0.01)
    L.make("entropy_reg", alpha=0.1)
    for name in ("mmce", "ce_dece", "ce_sece"):
        L.make(name, lam=1.0)
    with pytest.raises(TypeError, match="norm"):
        L.make("focal", norm=2.0)
    with pytest.raises(TypeError, match="gamma"):
        L.make("ce", gamma=3.0)
    with pytest.raises(ValueError, match="bsce_gra.*focal"):
        L.make("bsce-gra")
    with pytest.raises(ValueError, match="gamma"):
        L.make("focal", gamma=-1.0)
    with pytest.raises(TypeError, match="name"):
        L.make(3)


def test_functional_losses_take_keyword_arguments():
    x, y = _batch(seed=4)
    assert torch.allclose(L.focal_loss(logits=x, targets=y, gamma=2.0), L.focal_loss(x, y, 2.0))


def test_modules_forward_per_sample_gamma_and_repr():
    x, y = _batch(seed=2)
    gamma = torch.linspace(0.0, 4.0, 8, dtype=torch.float64)
    assert torch.allclose(L.FocalLoss()(x, y, gamma=gamma), L.focal_loss(x, y, gamma=gamma))
    assert "gamma=4.0" in repr(L.make("bsce_gra")) and "norm=2.0" in repr(L.make("bsce_gra"))


# =========================================================================== parity (CONTRIBUTING.md, "Conventions")
@pytest.mark.parametrize(
    "logits, p_y, gamma, loss", [([2.0, 0.0, 0.0], 0.78699, 3, 0.0023153), ([0.0, 0.5, 1.0], 0.18632, 5, 0.59929)]
)
def test_flsd53_parity(logits, p_y, gamma, loss):
    x, y = T([logits]), T([0])
    assert x.softmax(1)[0, 0].item() == pytest.approx(p_y, abs=1e-5)
    assert L.flsd53_loss(x, y, reduction="sum").item() == pytest.approx(loss, rel=1e-4)
    assert L.focal_loss(x, y, gamma=float(gamma), reduction="sum").item() == pytest.approx(loss, rel=1e-4)


@pytest.mark.parametrize(
    "logits, target, loss",
    [([2.0, 1.0, 0.0], 0, 0.026636), ([0.0, 1.0, 2.0], 1, 0.60749), ([0.0, 1.0, 2.0], 0, 1.50217)],
)
def test_dual_focal_parity(logits, target, loss):
    value = L.dual_focal_loss(T([logits]), T([target]), gamma=5.0, reduction="sum")
    assert value.item() == pytest.approx(loss, rel=1e-4)


def test_dual_focal_tie_excludes_the_tied_class():
    x, y = T([[1.0, 1.0, 0.0]], dtype=torch.float64), T([0])
    p = x.softmax(1)[0]
    expected = -((1 - p[0] + p[2]) ** 5) * torch.log(p[0])  # not the tied class 1 (largest non-target)
    assert L.dual_focal_loss(x, y, reduction="sum").item() == pytest.approx(expected.item(), rel=1e-12)


@pytest.mark.parametrize(
    "logits, target, weight, loss",
    [([2.0, 1.0, 0.0], 0, 0.032422, 0.013215), ([0.0, 1.0, 2.0], 1, 1.042617, 1.467594)],
)
def test_bsce_parity(logits, target, weight, loss):
    x, y = T([logits]), T([target])
    # CONTRIBUTING.md prints six decimals: agree to within rounding (5e-7) plus float32 error
    assert U.u_gbs(x.softmax(1), y, 4.0, 2.0).item() == pytest.approx(weight, abs=1e-6)
    assert L.bsce_loss(x, y, gamma=4.0, norm=2.0, reduction="sum").item() == pytest.approx(loss, abs=1e-6)
    assert L.bsce_gra_loss(x, y, gamma=4.0, norm=2.0, reduction="sum").item() == pytest.approx(loss, abs=1e-6)


# =========================================================================== definitions
def test_special_cases_reduce_to_cross_entropy():
    x, y = _batch(n=16, seed=3)
    ce = F.cross_entropy(x, y)
    for value in (
        L.cross_entropy(x, y),
        L.focal_loss(x, y, gamma=0.0),
        L.focal_gra_loss(x, y, gamma=0.0),
        L.dual_focal_loss(x, y, gamma=0.0),
        L.inverse_focal_loss(x, y, gamma=0.0),
        L.bsce_loss(x, y, gamma=0.0),
        L.flsd53_loss(x, y, gamma_low=0.0, gamma_high=0.0),
        L.label_smoothing_loss(x, y, epsilon=0.0),
        L.label_smoothing_loss(x, y, epsilon=0.0, convention="mukhoti"),
        L.logit_norm_loss(x, y, alpha=0.0),
        L.entropy_reg_loss(x, y, alpha=0.0),
        L.mmce_loss(x, y, lam=0.0),
        L.ce_dece_loss(x, y, lam=0.0),
    ):
        assert torch.allclose(value, ce)


@pytest.mark.parametrize("convention", ["uniform", "mukhoti"])
def test_label_smoothing_is_ce_against_the_smoothed_target(convention):
    x, y = _batch(n=10, k=6, seed=4)
    eps, k = 0.1, 6
    q = F.one_hot(y, k).double()
    s = (1 - eps) * q + (eps / k if convention == "uniform" else eps * (1 - q) / (k - 1))
    expected = -(s * x.log_softmax(1)).sum(1)
    assert torch.allclose(L.label_smoothing_loss(x, y, eps, convention, reduction="none"), expected)


def test_closed_forms_of_the_simple_losses():
    x, y = _batch(n=10, k=4, seed=5)
    p, ce = x.softmax(1), F.cross_entropy(x, y, reduction="none")
    p_y = p.gather(1, y[:, None]).squeeze(1)
    entropy = -(p * p.log()).sum(1)
    brier = ((p - F.one_hot(y, 4)) ** 2).sum(1)
    assert torch.allclose(L.logit_norm_loss(x, y, 0.3, 1.0, reduction="none"), ce + 0.3 * x.abs().sum(1))
    assert torch.allclose(L.logit_norm_loss(x, y, 0.3, 2.0, reduction="none"), ce + 0.3 * x.norm(dim=1))
    assert torch.allclose(L.entropy_reg_loss(x, y, 0.2, reduction="none"), ce - 0.2 * entropy)
    assert torch.allclose(L.brier_loss(x, y, reduction="none"), brier)
    assert torch.allclose(L.inverse_focal_loss(x, y, 2.0, reduction="none"), (1 + p_y) ** 2 * ce)
    assert torch.allclose(L.focal_loss(x, y, 2.0, reduction="none"), (1 - p_y) ** 2 * ce)


def test_flsd53_picks_gamma_from_the_true_class_probability():
    x = T([[0.0, 2.0, 2.0], [3.0, 0.0, 0.0]], dtype=torch.float64)  # p_y = 0.06 and 0.91
    y = T([0, 0])
    per_sample = L.flsd53_loss(x, y, reduction="none")
    assert torch.allclose(per_sample[0], L.focal_loss(x[:1], y[:1], 5.0))
    assert torch.allclose(per_sample[1], L.focal_loss(x[1:], y[1:], 3.0))


def test_flsd53_gamma_carries_no_gradient():
    """The gradient equals focal loss's at the fixed gamma: the switch contributes nothing."""
    x, y = _batch(n=12, k=4, scale=1.5, seed=6)
    x.requires_grad_(True)
    (g1,) = torch.autograd.grad(L.flsd53_loss(x, y, reduction="sum"), x)
    p_y = x.detach().softmax(1).gather(1, y[:, None]).squeeze(1)
    gamma = torch.where(p_y < 0.2, 5.0, 3.0).double()
    (g2,) = torch.autograd.grad(L.focal_loss(x, y, gamma, reduction="sum"), x)
    assert torch.allclose(g1, g2)


def test_focal_tensor_gamma_equals_float_gamma_and_receives_gradient():
    x, y = _batch(n=6, seed=7)
    gamma = torch.full((6,), 2.5, dtype=torch.float64, requires_grad=True)
    value = L.focal_loss(x, y, gamma=gamma)
    assert torch.allclose(value, L.focal_loss(x, y, gamma=2.5))
    value.backward()
    p_y = x.softmax(1).gather(1, y[:, None]).squeeze(1)
    expected = (1 - p_y) ** 2.5 * torch.log(1 - p_y) * -torch.log(p_y) / 6  # dL/dgamma_i
    assert torch.allclose(gamma.grad, expected)


def test_focal_gradient_is_g_times_the_ce_gradient_on_the_true_logit():
    """000 §4.1: dL_FL = g(p, γ) dL_CE with g = (1 − p)^γ − γ p (1 − p)^(γ−1) log p."""
    p = torch.linspace(0.02, 0.98, 25, dtype=torch.float64)
    for gamma in (1.0, 3.0):
        _, grad_fl = L.true_logit_response("focal", p, 10, gamma=gamma)
        _, grad_ce = L.true_logit_response("ce", p, 10)
        g = (1 - p) ** gamma - gamma * p * (1 - p) ** (gamma - 1) * torch.log(p)
        assert torch.allclose(grad_ce, p - 1)
        assert torch.allclose(grad_fl, g * grad_ce)


def test_inverse_focal_pushes_confident_samples_harder_than_ce():
    p = torch.linspace(0.5, 0.99, 10, dtype=torch.float64)
    _, g_inv = L.true_logit_response("inverse_focal", p, 10, gamma=2.0)
    _, g_ce = L.true_logit_response("ce", p, 10)
    _, g_fl = L.true_logit_response("focal", p, 10, gamma=3.0)
    assert bool((g_inv.abs() > g_ce.abs()).all()) and bool((g_fl.abs() < g_ce.abs()).all())


# =========================================================================== gradient weighting
@pytest.mark.parametrize("name", sorted(GRA))
def test_gra_gradient_is_detached_weight_times_ce_gradient(name):
    loss_weighted, weight_fn, gamma = GRA[name]
    x, y = _batch(n=10, k=5, seed=8)
    x.requires_grad_(True)
    (grad,) = torch.autograd.grad(L.functional(name)(x, y, reduction="sum"), x)
    (grad_ce,) = torch.autograd.grad(F.cross_entropy(x, y, reduction="sum"), x)
    u = weight_fn(x.detach().softmax(1), y, gamma)
    assert torch.allclose(grad, u[:, None] * grad_ce)
    # same value as the loss-weighted twin, different gradient: the weight really is detached
    assert torch.allclose(L.functional(name)(x, y), L.functional(loss_weighted)(x, y))
    (grad_lw,) = torch.autograd.grad(L.functional(loss_weighted)(x, y, reduction="sum"), x)
    assert not torch.allclose(grad, grad_lw)


def test_flsd53_gra_parity_derived_by_hand():
    """Logits [2, 0, 0], y = 0: p_y = e²/(e² + 2) = 0.786986 ≥ 0.2, so γ = 3 and
    u = (1 − p_y)³ = 0.0096655; value u·CE = u·(−log p_y) = 0.0023153 (FLSD-53's value, CONTRIBUTING.md, "Conventions");
    gradient u·(p̂ − y) = u·(p_y − 1, (1 − p_y)/2, (1 − p_y)/2) = (−0.0020589, 0.0010294, 0.0010294).
    Logits [0, .5, 1], y = 0: p_y = 0.186324 < 0.2, so γ = 5, u = 0.356663, value 0.599290 and
    gradient u·(p̂ − y) = (−0.290208, 0.109565, 0.180643)."""
    e2 = math.exp(2.0)
    p_y = e2 / (e2 + 2)
    u = (1 - p_y) ** 3
    assert p_y == pytest.approx(0.786986, abs=1e-6) and u == pytest.approx(0.0096655, abs=1e-7)
    x = T([[2.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    value = L.flsd53_gra_loss(x, T([0]))
    assert value.item() == pytest.approx(0.0023153, abs=1e-7)
    assert value.item() == pytest.approx(u * -math.log(p_y), rel=1e-12)
    (grad,) = torch.autograd.grad(value, x)
    expected = T([[u * (p_y - 1), u * (1 - p_y) / 2, u * (1 - p_y) / 2]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad, T([[-0.0020589, 0.0010294, 0.0010294]], dtype=torch.float64), rtol=0, atol=1e-7)
    x = T([[0.0, 0.5, 1.0]], dtype=torch.float64, requires_grad=True)
    value = L.flsd53_gra_loss(x, T([0]))
    assert value.item() == pytest.approx(0.599290, abs=1e-6)
    (grad,) = torch.autograd.grad(value, x)
    torch.testing.assert_close(grad, T([[-0.290208, 0.109565, 0.180643]], dtype=torch.float64), rtol=0, atol=1e-6)
    # the loss-weighted FLSD-53 differentiates through the weight: another gradient
    (grad_lw,) = torch.autograd.grad(L.flsd53_loss(x, T([0])), x)
    assert not torch.allclose(grad, grad_lw)


def test_flsd53_gra_is_registered_with_the_schedule_keywords():
    x, y = _batch(n=7, seed=21)
    module = L.make("flsd53_gra", gamma_low=2.0, gamma_high=4.0, threshold=0.3)
    assert torch.allclose(module(x, y), L.flsd53_loss(x, y, gamma_low=2.0, gamma_high=4.0, threshold=0.3))
    with pytest.raises(ValueError, match="threshold"):
        L.flsd53_gra_loss(x, y, threshold=1.5)
    with pytest.raises(TypeError, match="gamma"):
        L.make("flsd53_gra", gamma=3.0)


def test_uncertainty_gra_wraps_any_weight():
    x, y = _batch(n=9, seed=9)
    x.requires_grad_(True)
    loss = L.uncertainty_gra(functools.partial(U.u_gbs, gamma=4.0, norm=2.0), name="gbs")
    assert "gbs" in loss.__name__
    (g1,) = torch.autograd.grad(loss(x, y, reduction="sum"), x)
    (g2,) = torch.autograd.grad(L.bsce_gra_loss(x, y, reduction="sum"), x)
    assert torch.allclose(g1, g2)
    module = L.UncertaintyGRALoss(functools.partial(U.u_fl, gamma=3.0))
    assert torch.allclose(module(x, y), L.focal_gra_loss(x, y))
    with pytest.raises(ValueError, match="shape"):
        L.uncertainty_gra(lambda p, t: p)(x, y)
    with pytest.raises(ValueError, match=">= 0"):
        L.uncertainty_gra(lambda p, t: -p[:, 0])(x, y)
    with pytest.raises(TypeError, match="callable"):
        L.uncertainty_gra(3.0)


# =========================================================================== batch-level objectives
def _naive_mmce(x: torch.Tensor, y: torch.Tensor, width: float, weighted: bool) -> float:
    """Kumar et al. 2018 §3-4, one pair at a time."""
    p = x.softmax(1)
    r = p.max(1).values.tolist()
    c = (p.argmax(1) == y).tolist()
    k = lambda a, b: math.exp(-abs(a - b) / width)  # noqa: E731
    m = len(r)
    if not weighted:
        total = sum((c[i] - r[i]) * (c[j] - r[j]) * k(r[i], r[j]) for i in range(m) for j in range(m))
        return math.sqrt(total / m**2)
    C = [i for i in range(m) if c[i]]
    W = [i for i in range(m) if not c[i]]
    cc = sum((1 - r[i]) * (1 - r[j]) * k(r[i], r[j]) for i in C for j in C) / len(C) ** 2
    ww = sum(r[i] * r[j] * k(r[i], r[j]) for i in W for j in W) / len(W) ** 2
    cw = sum((1 - r[i]) * r[j] * k(r[i], r[j]) for i in C for j in W) / (len(C) * len(W))
    return math.sqrt(cc + ww - 2 * cw)


@pytest.mark.parametrize("weighted", [True, False])
def test_mmce_matches_the_pairwise_definition(weighted):
    x, y = _batch(n=12, k=3, scale=1.5, seed=10)
    assert 0 < (y == x.argmax(1)).sum() < 12
    expected = _naive_mmce(x, y, 0.4, weighted)
    assert L.mmce(x, y, width=0.4, weighted=weighted).item() == pytest.approx(expected, rel=1e-9)
    ce = F.cross_entropy(x, y)
    assert L.mmce_loss(x, y, lam=2.0, weighted=weighted).item() == pytest.approx(
        ce.item() + 2.0 * _naive_mmce(x, y, 0.4, weighted), rel=1e-9
    )


def _naive_mmce_code(x: torch.Tensor, y: torch.Tensor, width: float, weighted: bool) -> float:
    """The authors' code's procedure (Mukhoti et al. 2020's MMCE_weighted, MMCE), one pair at a time:
    each kernel block is *averaged* (divided by its number of pairs) and the average is then
    divided by the counts again; the unweighted version returns the square (no root)."""
    p = x.softmax(1)
    r = p.max(1).values.tolist()
    c = (p.argmax(1) == y).tolist()
    k = lambda a, b: math.exp(-abs(a - b) / width)  # noqa: E731
    m = len(r)
    if not weighted:
        return sum((c[i] - r[i]) * (c[j] - r[j]) * k(r[i], r[j]) for i in range(m) for j in range(m)) / m**2
    C = [i for i in range(m) if c[i]]
    W = [i for i in range(m) if not c[i]]
    mean_cc = sum((1 - r[i]) * (1 - r[j]) * k(r[i], r[j]) for i in C for j in C) / (len(C) * len(C))
    mean_ww = sum(r[i] * r[j] * k(r[i], r[j]) for i in W for j in W) / (len(W) * len(W))
    mean_cw = sum((1 - r[i]) * r[j] * k(r[i], r[j]) for i in C for j in W) / (len(C) * len(W))
    total = mean_cc / len(C) ** 2 + mean_ww / len(W) ** 2 - 2 * mean_cw / (len(C) * len(W))
    return math.sqrt(total)


@pytest.mark.parametrize("weighted", [True, False])
def test_mmce_code_normalization_matches_the_authors_procedure(weighted):
    x, y = _batch(n=12, k=3, scale=1.5, seed=10)
    expected = _naive_mmce_code(x, y, 0.4, weighted)
    got = L.mmce(x, y, width=0.4, weighted=weighted, normalization="code")
    assert got.item() == pytest.approx(expected, rel=1e-9)
    ce = F.cross_entropy(x, y).item()
    module = L.make("mmce", lam=2.0, weighted=weighted, normalization="code")
    assert module(x, y).item() == pytest.approx(ce + 2.0 * expected, rel=1e-9)
    assert L.mmce(x, y, weighted=weighted).item() == pytest.approx(_naive_mmce(x, y, 0.4, weighted), rel=1e-9)


def test_mmce_code_normalization_is_smaller_and_default_is_the_paper():
    """With n correct and m − n wrong samples (both ≥ 2) the code's MMCE_w is below the paper's."""
    x, y = _batch(n=32, k=3, scale=1.5, seed=11)
    n_c = int((x.argmax(1) == y).sum())
    assert 2 <= n_c <= 30
    paper, code = L.mmce(x, y), L.mmce(x, y, normalization="code")
    assert 0 < code.item() < paper.item()
    assert L.mmce(x, y, normalization="paper").item() == paper.item()
    assert L.make("mmce").hparams["normalization"] == "paper"
    with pytest.raises(ValueError, match="normalization"):
        L.mmce(x, y, normalization="authors")
    with pytest.raises(ValueError, match="normalization"):
        L.make("mmce", normalization="Paper")


def test_mmce_weighted_is_zero_when_one_group_is_empty():
    x = T([[3.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    assert L.mmce(x, T([0, 1])).item() == 0.0


def _naive_dece(x: torch.Tensor, y: torch.Tensor, n_bins: int, t_b: float, t_a: float) -> float:
    """Bohdal et al. 2021 §3.1 with bins as W·c + b (W = 1..M, b = cumsum of −edges) and bin means."""
    p = x.softmax(1).tolist()
    n, k = len(p), len(p[0])
    edges = [j / n_bins for j in range(n_bins)]
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    conf, acc, member = [], [], []
    for i in range(n):
        c, t = max(p[i]), int(y[i])
        rank = 1 + sum(sig((p[i][j] - p[i][t]) / t_a) for j in range(k) if j != t)
        h = [((m + 1) * c - sum(edges[: m + 1])) / t_b for m in range(n_bins)]
        top = max(h)
        e = [math.exp(v - top) for v in h]
        member.append([v / sum(e) for v in e])
        conf.append(c)
        acc.append(max(0.0, 2 - rank))
    ece = 0.0
    for m in range(n_bins):
        size = sum(member[i][m] for i in range(n))
        bin_acc = sum(member[i][m] * acc[i] for i in range(n)) / size
        bin_conf = sum(member[i][m] * conf[i] for i in range(n)) / size
        ece += size / n * abs(bin_acc - bin_conf)
    return ece


@pytest.mark.parametrize("t_b, t_a", [(0.01, 0.01), (0.1, 0.05)])
def test_dece_matches_the_binwise_definition(t_b, t_a):
    x, y = _batch(n=14, k=4, scale=2.0, seed=11)
    got = L.dece(x, y, n_bins=15, bin_temperature=t_b, acc_temperature=t_a).item()
    assert got == pytest.approx(_naive_dece(x, y, 15, t_b, t_a), rel=1e-9, abs=1e-12)


def test_dece_approaches_the_hard_ece_as_temperatures_vanish():
    x, y = _batch(n=40, k=4, scale=2.0, seed=12)
    conf, pred = x.softmax(1).max(1)
    correct = (pred == y).double()
    ece = 0.0
    for m in range(15):
        inside = (conf > m / 15) & (conf <= (m + 1) / 15)
        if inside.any():
            ece += inside.double().mean().item() * abs(correct[inside].mean().item() - conf[inside].mean().item())
    assert L.dece(x, y, bin_temperature=1e-6, acc_temperature=1e-6).item() == pytest.approx(ece, abs=1e-9)


@needs_sece
def test_sece_wraps_the_metric_on_softmax_and_is_differentiable():
    from calib.metrics import sece_loss as metric_sece

    x, y = _batch(n=16, k=4, seed=13)
    x.requires_grad_(True)
    value = L.sece_loss(x, y, bandwidth=0.05)
    assert torch.allclose(value, metric_sece(x.softmax(1), y, bandwidth=0.05))
    (grad,) = torch.autograd.grad(value, x)
    assert torch.isfinite(grad).all() and bool((grad != 0).any())
    assert torch.allclose(L.ce_sece_loss(x, y, lam=0.5, bandwidth=0.05), F.cross_entropy(x, y) + 0.5 * value)
    assert value.item() == pytest.approx(_naive_sece(x.detach(), y, 0.05), rel=1e-9)


def _naive_sece(x: torch.Tensor, y: torch.Tensor, h: float) -> float:
    """001 §4.2, Eq. 5-7: SACC_i = Σ_j a_j K(z_i, z_j) / Σ_j K(z_i, z_j), SECE = mean |SACC_i − z_i|, with the
    all-pairs soft accuracy a_j = relu(1 − Σ_{k≠y_j} σ((p_jk − p_jy)/0.01)) (as in meta-calibration)."""
    p = x.softmax(1)
    z = p.max(1).values.tolist()
    sig = lambda t: 1 / (1 + math.exp(-t))  # noqa: E731
    pi = [max(0.0, 1 - sum(sig((row[k] - row[int(c)]) / 0.01) for k in range(len(row)) if k != int(c)))
          for row, c in zip(p.tolist(), y)]
    kernel = lambda a, b: math.exp(-((a - b) ** 2) / (2 * h**2))  # noqa: E731
    total = 0.0
    for zi in z:
        weights = [kernel(zi, zj) for zj in z]
        total += abs(sum(w * c for w, c in zip(weights, pi)) / sum(weights) - zi)
    return total / len(z)


# =========================================================================== gradcheck (float64)
GRADCHECK_KW = {
    "dece": {"bin_temperature": 0.1, "acc_temperature": 0.1},
    "ce_dece": {"bin_temperature": 0.1, "acc_temperature": 0.1},
    "sece": {"bandwidth": 0.2},
    "ce_sece": {"bandwidth": 0.2},
}


def _frozen_weight_gradcheck(loss, weight_fn, x: torch.Tensor, y: torch.Tensor, eps: float = 1e-6) -> bool:
    """gradcheck for a GRA loss, whose value is not the antiderivative of its gradient (000 Eq. 10, 14).

    Its backward at x must equal the central-difference gradient of the surrogate
    ``z -> u(x) · CE(z)`` at z = x, the weight frozen at the point where the gradient is taken.
    """
    x = x.detach().requires_grad_(True)
    (analytic,) = torch.autograd.grad(loss(x, y, reduction="sum"), x)
    u = weight_fn(x.detach().softmax(1), y)
    numeric = torch.zeros_like(x)
    for idx in torch.cartesian_prod(torch.arange(x.shape[0]), torch.arange(x.shape[1])):
        step = torch.zeros_like(x)
        step[tuple(idx)] = eps
        up = F.cross_entropy(x.detach() + step, y, reduction="none")
        down = F.cross_entropy(x.detach() - step, y, reduction="none")
        numeric[tuple(idx)] = (u * (up - down)).sum() / (2 * eps)
    return torch.allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", _available())
def test_gradcheck_every_loss(name):
    x, y = _batch(n=6, k=4, scale=1.5, seed=14)
    x.requires_grad_(True)
    fn = L.functional(name)
    if name in GRA:
        weight_fn = functools.partial(GRA[name][1], gamma=GRA[name][2])
        assert _frozen_weight_gradcheck(fn, weight_fn, x, y)
        return
    kw = GRADCHECK_KW.get(name, {})
    assert gradcheck(lambda z: fn(z, y, reduction="none", **kw), (x,), eps=1e-6, atol=1e-6)


def test_gradcheck_dece_at_its_default_temperatures():
    x, y = _batch(n=6, k=4, scale=1.5, seed=15)
    x.requires_grad_(True)
    assert gradcheck(lambda z: L.dece(z, y), (x,), eps=1e-7, atol=1e-5)


def test_gradcheck_and_gradgradcheck_focal_in_logits_and_gamma():
    """gamma-Net (001) differentiates the focal loss in gamma, through a look-ahead step."""
    x, y = _batch(n=5, k=4, seed=16)
    x.requires_grad_(True)
    gamma = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.3], dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda z, g: L.focal_loss(z, y, g, reduction="none"), (x, gamma))
    assert gradgradcheck(lambda z, g: L.focal_loss(z, y, g), (x, gamma))


def test_gradcheck_uncertainty_gra():
    x, y = _batch(n=6, k=4, seed=17)
    weight_fn = functools.partial(U.u_dfl, gamma=2.0)
    assert _frozen_weight_gradcheck(L.uncertainty_gra(weight_fn), weight_fn, x, y)
    assert not _frozen_weight_gradcheck(L.dual_focal_loss, weight_fn, x, y)  # the check has teeth


# =========================================================================== numerics
EXTREME = T(
    [[1e4, -1e4, 0.0, 5.0], [-1e4, 1e4, 0.0, 0.0], [30.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1e4, 1e4, -1e4, 0.0]]
)
EXTREME_Y = T([0, 0, 0, 3, 1])


@pytest.mark.parametrize("name", _available())
def test_values_and_gradients_are_finite_at_extreme_logits(name):
    x = EXTREME.clone().requires_grad_(True)
    value = L.make(name, reduction="sum")(x, EXTREME_Y)
    (grad,) = torch.autograd.grad(value, x)
    assert torch.isfinite(value) and torch.isfinite(grad).all()


WEIGHTED = ["focal", "dual_focal", "bsce", "focal_gra", "dual_focal_gra", "bsce_gra", "inverse_focal"]


@pytest.mark.parametrize("name", WEIGHTED)
@pytest.mark.parametrize("gamma", [0.1, 0.5, 0.9])
def test_fractional_gamma_is_finite_and_accurate_as_p_y_goes_to_one(name, gamma):
    """(1 − p)^γ has an infinite slope at p = 1 for γ < 1; float32 values and gradients stay finite.

    Accuracy against float64: relative where float32 CE still resolves 1 − p_y (logits [8, 0, 0],
    1 − p_y = 6.7e-4), absolute (1e-7) where p_y rounds to 1 and CE itself rounds to 0.
    """
    x32 = T([[8.0, 0.0, 0.0], [20.0, 0.0, 0.0], [40.0, 0.0, 1.0], [1e4, 0.0, 0.0]], requires_grad=True)
    y = T([0, 0, 0, 0])
    value = L.functional(name)(x32, y, gamma=gamma, reduction="none")
    (grad,) = torch.autograd.grad(value.sum(), x32)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    x64 = x32.detach().double().requires_grad_(True)
    ref = L.functional(name)(x64, y, gamma=gamma, reduction="none")
    (ref_grad,) = torch.autograd.grad(ref.sum(), x64)
    assert value[0].item() == pytest.approx(ref[0].item(), rel=2e-3)
    assert torch.allclose(grad[0].double(), ref_grad[0], rtol=2e-3, atol=1e-9)
    assert torch.allclose(value.double(), ref, rtol=2e-3, atol=1e-7)
    assert torch.allclose(grad.double(), ref_grad, rtol=2e-3, atol=1e-7)


@pytest.mark.parametrize("name", _available())
def test_autocast_bf16_computes_the_loss_in_float32(name):
    """Tolerance: identical (rtol 1e-6) for float32 logits; 3% for logits rounded to bf16 by autocast."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 5)
    inputs, y = torch.randn(32, 16), torch.randint(0, 5, (32,))
    x32 = layer(inputs)
    reference = L.functional(name)(x32, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same = L.functional(name)(x32, y)
        x16 = layer(inputs)
        rounded = L.functional(name)(x16, y)
    assert x16.dtype == torch.bfloat16
    assert same.dtype == rounded.dtype == torch.float32
    assert torch.allclose(same, reference, rtol=1e-6, atol=1e-7)
    assert torch.allclose(rounded, reference, rtol=3e-2, atol=1e-3)


# =========================================================================== properties
rows = st.lists(st.floats(-8, 8, allow_nan=False), min_size=4, max_size=4)
batches = st.lists(rows, min_size=2, max_size=7)
NONNEGATIVE = [n for n in EXPECTED_NAMES if n != "entropy_reg"]


@settings(max_examples=25, deadline=None)
@given(batches, st.sampled_from([n for n in EXPECTED_NAMES if "sece" not in n]))
def test_reductions_agree_and_losses_are_nonnegative(batch, name):
    x = T(batch, dtype=torch.float64)
    if bool(((x >= 0) & (x <= 1)).all()):  # would be refused as probabilities
        x = x + 2
    y = torch.arange(x.shape[0]) % 4
    fn = L.functional(name)
    none, mean, total = fn(x, y, reduction="none"), fn(x, y, reduction="mean"), fn(x, y, reduction="sum")
    assert none.shape == (x.shape[0],)
    assert torch.allclose(mean, total / x.shape[0]) and torch.allclose(mean, none.mean())
    if name in NONNEGATIVE:
        assert bool((none >= 0).all())


@settings(max_examples=25, deadline=None)
@given(batches, st.floats(0.0, 5.0))
def test_focal_family_is_bounded_by_ce(batch, gamma):
    x = T(batch, dtype=torch.float64) - 10  # all negative: never mistaken for probabilities
    y = torch.arange(x.shape[0]) % 4
    ce = F.cross_entropy(x, y, reduction="none")
    assert bool((L.focal_loss(x, y, gamma, reduction="none") <= ce * (1 + 1e-12)).all())
    assert bool((L.inverse_focal_loss(x, y, gamma, reduction="none") >= ce * (1 - 1e-12)).all())
    focal = L.focal_loss(x, y, gamma, reduction="none")
    assert bool((L.dual_focal_loss(x, y, gamma, reduction="none") >= focal * (1 - 1e-12)).all())


# =========================================================================== bad input
def test_bad_input_raises_clear_errors():
    x, y = _batch(n=4, k=3)
    with pytest.raises(ValueError, match="logits.*shape"):
        L.focal_loss(x[0], y)
    with pytest.raises(ValueError, match="targets must be integer labels of shape \\(1, 3\\)"):
        L.cross_entropy(x[None], y)  # (1, 4, 3) logits are a 1 x 3 map of 4 classes
    with pytest.raises(ValueError, match="K >= 2"):
        L.cross_entropy(x[:, :1], y)
    with pytest.raises(ValueError, match="empty"):
        L.cross_entropy(x[:0], y[:0])
    with pytest.raises(ValueError, match="NaN"):
        L.bsce_gra_loss(torch.full((4, 3), float("nan")), y)
    with pytest.raises(ValueError, match="probabilities"):
        L.focal_loss(x.softmax(1), y)
    with pytest.raises(ValueError, match="targets"):
        L.focal_loss(x, y + 3)
    with pytest.raises(ValueError, match="targets"):
        L.focal_loss(x, T([0, 1, 2]))
    with pytest.raises(TypeError, match="targets"):
        L.focal_loss(x, y.float())
    with pytest.raises(ValueError, match="gamma"):
        L.focal_loss(x, y, gamma=-0.5)
    with pytest.raises(ValueError, match="gamma"):
        L.focal_loss(x, y, gamma=torch.ones(5))
    with pytest.raises(ValueError, match="gamma_high"):
        L.flsd53_loss(x, y, gamma_high=-5.0)
    with pytest.raises(ValueError, match="norm"):
        L.bsce_loss(x, y, norm=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        L.label_smoothing_loss(x, y, epsilon=1.5)
    with pytest.raises(ValueError, match="convention"):
        L.label_smoothing_loss(x, y, convention="muller")
    with pytest.raises(ValueError, match="p "):
        L.logit_norm_loss(x, y, p=0.5)
    with pytest.raises(ValueError, match="width"):
        L.mmce(x, y, width=0.0)
    with pytest.raises(ValueError, match="n_bins"):
        L.dece(x, y, n_bins=0)
    with pytest.raises(ValueError, match="bin_temperature"):
        L.dece_loss(x, y, bin_temperature=-1.0)
    with pytest.raises(ValueError, match="reduction"):
        L.cross_entropy(x, y, reduction="avg")
    with pytest.raises(ValueError, match="batch-level"):
        L.true_logit_response("mmce", [0.5])
    with pytest.raises(ValueError, match="p_y"):
        L.true_logit_response("ce", [0.0, 0.5])


# =========================================================================== device and plots
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_losses_run_on_cuda():
    x, y = _batch(n=8, k=4)
    for name in _names(include_sece=_has_metric_sece()):
        got = L.make(name)(x.cuda(), y.cuda())
        assert got.device.type == "cuda"
        assert torch.allclose(got.cpu(), L.make(name)(x, y), rtol=1e-6, atol=1e-8)


def test_loss_and_gradient_curves_are_figures():
    from matplotlib.figure import Figure

    from calib.plots import gradient_curves, loss_curves

    for fig in (loss_curves(n_points=20), gradient_curves(n_points=20)):
        assert isinstance(fig, Figure)
        lines = fig.axes[0].get_lines()
        assert len(lines) == 9 and all(len(line.get_xdata()) == 20 for line in lines)
    fig = gradient_curves([("CE", "ce", {})], n_points=11, num_classes=3)
    (line,) = fig.axes[0].get_lines()
    p = torch.as_tensor(line.get_xdata())
    assert torch.allclose(torch.as_tensor(line.get_ydata()), 1 - p)  # plotted as -dL/dg_y


def test_source_never_takes_the_log_of_a_softmax():
    """Issue 3 §4: work from log_softmax; log(softmax(x)) underflows to -inf for large logits."""
    import importlib
    import inspect
    import io
    import pkgutil
    import re
    import tokenize

    modules = [importlib.import_module(f"calib.losses.{m.name}") for m in pkgutil.iter_modules(L.__path__)]
    assert U in modules and len(modules) >= 8
    for module in modules:
        tokens = tokenize.generate_tokens(io.StringIO(inspect.getsource(module)).readline)
        code = "".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        if module.__name__.endswith("._core"):  # every per-sample loss gets its lp from here
            assert "log_softmax(" in code
        assert not re.search(r"softmax\([^()]*\)\.log\(", code)
        assert not re.search(r"log\((F\.|torch\.)?softmax", code)
