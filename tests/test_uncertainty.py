"""calib.losses.uncertainty: the sample-wise weights u_FL, u_DFL, u_gBS (000 §4) and their special cases."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.losses import uncertainty as U

T = torch.tensor


def _case(logits, targets):
    g = T(logits, dtype=torch.float64)
    return g.softmax(1), g.log_softmax(1), T(targets)


def _random(n=12, k=5, scale=3.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, k, generator=gen, dtype=torch.float64) * scale
    return g.softmax(1), g.log_softmax(1), torch.randint(0, k, (n,), generator=gen)


# ----------------------------------------------------------------- parity (CONTRIBUTING.md, "Conventions")
def test_u_gbs_parity_gamma4_beta2():
    p, _, y = _case([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]], [0, 1])
    assert torch.allclose(U.u_gbs(p, y, gamma=4.0, norm=2.0), T([0.032422, 1.042617], dtype=torch.float64), atol=2e-6)


@pytest.mark.parametrize(
    "logits, target, p_j",
    [([2.0, 1.0, 0.0], 0, 0.24473), ([0.0, 1.0, 2.0], 1, 0.09003), ([0.0, 1.0, 2.0], 0, 0.0)],
)
def test_rival_is_largest_probability_strictly_below_p_y(logits, target, p_j):
    p, _, y = _case([logits], [target])
    # with gamma = 1, u_DFL - (1 - p_y) is p_j itself
    got = U.u_dfl(p, y, gamma=1.0) - (1 - p[0, target])
    assert got.item() == pytest.approx(p_j, abs=1e-5)


def test_rival_skips_a_class_tied_with_the_true_class():
    p, lp, y = _case([[1.0, 1.0, 0.0]], [0])
    expected = 1 - p[0, 0] + p[0, 2]  # class 1 ties with p_y, so p_j is class 2's probability
    assert U.u_dfl(p, y, gamma=1.0).item() == pytest.approx(expected.item(), rel=1e-12)
    assert U.log_u_dfl(lp, y, gamma=1.0).exp().item() == pytest.approx(expected.item(), rel=1e-12)


# ----------------------------------------------------------------- special cases (000 §4.3)
@pytest.mark.parametrize("gamma", [0.5, 1.0, 3.0])
def test_gbs_on_true_class_alone_is_u_fl(gamma):
    p, _, y = _random()
    for norm in (1.0, 2.0, 3.5):  # one entry: every norm order gives |1 - p_y|
        assert torch.allclose(U.u_gbs(p, y, gamma, norm, support="true"), U.u_fl(p, y, gamma))
    assert torch.allclose(U.u_fl(p, y, gamma), (1 - p.gather(1, y[:, None]).squeeze(1)) ** gamma)


@pytest.mark.parametrize("gamma", [0.5, 2.0, 5.0])
def test_gbs_l1_on_true_class_and_rival_is_u_dfl(gamma):
    p, _, y = _random(seed=1)
    assert torch.allclose(U.u_gbs(p, y, gamma, 1.0, support="true_and_rival"), U.u_dfl(p, y, gamma))


def test_gbs_beta_gamma_2_is_the_brier_score():
    p, _, y = _random(seed=2)
    brier = ((p - F.one_hot(y, p.shape[1])) ** 2).sum(1)
    assert torch.allclose(U.u_gbs(p, y, 2.0, 2.0), brier)


def test_binary_brier_is_twice_u_fl_gamma2():
    """000 §1: for K = 2 the focal weight (gamma = 2) and the Brier score agree up to a factor 2."""
    p, _, y = _random(k=2, seed=3)
    assert torch.allclose(U.u_gbs(p, y, 2.0, 2.0), 2 * U.u_fl(p, y, 2.0))


def test_gamma_zero_gives_weight_one_even_at_a_one_hot_prediction():
    p = T([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    y = T([0, 2])
    for fn in (U.u_fl, U.u_dfl):
        assert torch.equal(fn(p, y, 0.0), torch.ones(2, dtype=torch.float64))
    assert torch.equal(U.u_gbs(p, y, 0.0, 2.0), torch.ones(2, dtype=torch.float64))
    assert U.u_fl(p, y, 2.0)[0].item() == 0.0


# ----------------------------------------------------------------- log space = probability space
@pytest.mark.parametrize("support", U.SUPPORTS)
def test_log_space_matches_probability_space(support):
    p, lp, y = _random(n=20, k=6, seed=4)
    assert torch.allclose(U.log_u_fl(lp, y, 2.5).exp(), U.u_fl(p, y, 2.5))
    assert torch.allclose(U.log_u_dfl(lp, y, 5.0).exp(), U.u_dfl(p, y, 5.0))
    assert torch.allclose(U.log_u_gbs(lp, y, 4.0, 2.0, support).exp(), U.u_gbs(p, y, 4.0, 2.0, support))
    assert torch.allclose(U.log_u_gbs(lp, y, 1.5, 3.0, support).exp(), U.u_gbs(p, y, 1.5, 3.0, support))


def test_one_minus_p_y_keeps_its_digits_when_p_y_is_close_to_one():
    g = T([[40.0, 0.0, 0.0]])  # 1 - p_y = 2 e^-40 ~ 8.5e-18: lost by 1 - p_y in any float
    y = T([0])
    expected = (2 * math.exp(-40.0)) ** 0.5
    assert U.log_u_fl(g.log_softmax(1), y, 0.5).exp().item() == pytest.approx(expected, rel=1e-5)
    assert U.u_fl(g.double().softmax(1), y, 0.5).item() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("gamma", [0.1, 0.5, 2.0])
def test_log_space_gradients_are_finite_at_extreme_logits(gamma):
    g = T([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0], [30.0, 0.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    y = T([0, 0, 0, 2])
    for log_u in (
        U.log_u_fl(g.log_softmax(1), y, gamma),
        U.log_u_dfl(g.log_softmax(1), y, gamma),
        U.log_u_gbs(g.log_softmax(1), y, gamma, 2.0),
    ):
        u = log_u.exp()
        (grad,) = torch.autograd.grad((u * 1.7).sum(), g)
        assert torch.isfinite(u).all() and torch.isfinite(grad).all()


def test_tensor_gamma_gets_a_gradient():
    _, lp, y = _random(n=5, seed=5)
    gamma = torch.full((5,), 2.0, dtype=torch.float64, requires_grad=True)
    U.log_u_gbs(lp, y, gamma, 2.0).exp().sum().backward()
    assert gamma.grad is not None and bool((gamma.grad != 0).all())


def test_tensor_gamma_follows_the_dtype_of_the_probabilities():
    p, lp, y = _random(n=6, seed=6)
    as_float = U.u_gbs(p, y, 3.0, 2.0)
    for gamma in (torch.tensor(3.0), torch.full((6,), 3.0, dtype=torch.float32)):
        got = U.u_gbs(p, y, gamma, 2.0)
        assert got.dtype == torch.float64 and torch.allclose(got, as_float)
        assert torch.allclose(U.log_u_fl(lp, y, gamma).exp(), U.u_fl(p, y, 3.0))


# ----------------------------------------------------------------- properties
probs_rows = st.lists(st.floats(-6, 6), min_size=3, max_size=3)


@settings(max_examples=40, deadline=None)
@given(st.lists(probs_rows, min_size=1, max_size=6), st.floats(0.0, 6.0), st.floats(1.0, 4.0))
def test_weight_ranges_and_norm_order(rows, gamma, beta):
    g = T(rows, dtype=torch.float64)
    p, y = g.softmax(1), torch.arange(len(rows)) % 3
    fl = U.u_fl(p, y, gamma)
    assert bool(((fl >= 0) & (fl <= 1 + 1e-12)).all())
    dfl = U.u_dfl(p, y, gamma)
    assert bool((dfl >= fl - 1e-12).all()) and bool((dfl <= 2**gamma + 1e-9).all())
    # ||v||_beta is non-increasing in beta: the L1 weight bounds every other order
    assert bool((U.u_gbs(p, y, gamma, beta) <= U.u_gbs(p, y, gamma, 1.0) * (1 + 1e-9) + 1e-12).all())
    assert bool((U.u_gbs(p, y, gamma, 2.0) <= 2 ** (gamma / 2) + 1e-9).all())


# ----------------------------------------------------------------- bad input
def test_bad_input_raises_clear_errors():
    p, lp, y = _random(n=4, k=3)
    with pytest.raises(ValueError, match="gamma"):
        U.u_fl(p, y, -1.0)
    with pytest.raises(ValueError, match="gamma"):
        U.u_fl(p, y, T([1.0, -0.5, 1.0, 1.0]))
    with pytest.raises(ValueError, match="gamma"):
        U.u_fl(p, y, torch.ones(3))
    with pytest.raises(TypeError, match="gamma"):
        U.u_fl(p, y, "3")
    with pytest.raises(ValueError, match="norm"):
        U.u_gbs(p, y, 2.0, 0.0)
    with pytest.raises(ValueError, match="support"):
        U.u_gbs(p, y, 2.0, 2.0, support="rival")
    with pytest.raises(ValueError, match="probs"):
        U.u_fl(p * 2, y, 1.0)
    with pytest.raises(ValueError, match="log_probs"):
        U.log_u_fl(p + 1, y, 1.0)
    with pytest.raises(TypeError, match="targets"):
        U.u_fl(p, y.double(), 1.0)
    with pytest.raises(ValueError, match="targets"):
        U.u_fl(p, y + 3, 1.0)
    with pytest.raises(ValueError, match="targets"):
        U.u_fl(p, y[:2], 1.0)
    with pytest.raises(ValueError, match="NaN"):
        U.u_fl(torch.full((2, 3), float("nan")), y[:2], 1.0)
