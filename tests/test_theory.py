"""calib.theory: every claim of chapters 04-07, checked symbolically and numerically.

A change that breaks a derivation (or the loss it describes) fails here even if nobody
opens the book. Sections follow the chapters: focal entropy bound (04), gradient factor
and FLSD (05), Brier identity (06), BSCE-GRA optimum and fixed point (07), plus 002 Thm 1
and 003 Eq. (1).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from calib import losses, theory
from calib.losses import uncertainty
from calib import plots

FAST = settings(max_examples=40, deadline=None)


def _random_simplex(rng: np.random.Generator, n: int, k: int, concentration: float) -> torch.Tensor:
    p = rng.dirichlet(np.full(k, concentration), size=n)
    p = np.clip(p, 1e-12, None)
    return torch.as_tensor(p / p.sum(1, keepdims=True))


@pytest.fixture(scope="module")
def g_derivation() -> theory.Derivation:
    return theory.gradient_factor_derivation()


@pytest.fixture(scope="module")
def lambert() -> theory.Derivation:
    return theory.lambert_gamma_derivation()


# =========================================================================== 04 focal bound


def test_bernoulli_inequality_is_proved_by_sympy():
    d = theory.bernoulli_inequality_proof()
    assert d["gap_at_0"] == 0
    assert d["slope_at_0"] == 0
    assert d["curvature_nonnegative"] == sp.true
    p = sp.Symbol("p", real=True)
    assert p not in d["curvature_substituted"].free_symbols  # fully rewritten in a, m


@pytest.mark.parametrize("gamma", [1.0, 1.5, 2.0, 3.0, 5.0, 10.0])
def test_bernoulli_gap_nonnegative_on_grid(gamma):
    gap = theory.bernoulli_gap(np.linspace(0, 1, 2001), gamma)
    assert gap.min() >= -1e-12


def test_bernoulli_needs_gamma_at_least_one():
    gap = theory.bernoulli_gap(np.linspace(0, 1, 201), 0.5)
    assert gap.min() < -0.1  # the hypothesis gamma >= 1 is not decoration


@FAST
@given(p=st.floats(0, 1), gamma=st.floats(1, 30))
def test_bernoulli_property(p, gamma):
    assert theory.bernoulli_gap([p], gamma)[0] >= -1e-9


@pytest.mark.parametrize("k", [2, 3, 10, 100])
@pytest.mark.parametrize("one_hot", [True, False])
def test_focal_bound_chain_random_distributions(k, one_hot):
    rng = np.random.default_rng(k)
    n = 200
    p = torch.cat([_random_simplex(rng, n // 2, k, 0.3), _random_simplex(rng, n // 2, k, 3.0)])
    q = torch.nn.functional.one_hot(torch.as_tensor(rng.integers(0, k, n)), k).double() if one_hot else _random_simplex(rng, n, k, 1.0)
    for gamma in rng.uniform(1, 10, size=3):
        c = theory.focal_bound_chain(q, p, float(gamma))
        tol = 1e-9
        assert bool((c["focal"] >= c["bernoulli"] - tol).all())
        assert bool((c["bernoulli"] >= c["holder"] - tol).all())
        assert bool((c["holder"] >= c["entropy"] - tol).all())
        torch.testing.assert_close(c["entropy"], c["kl_form"], rtol=1e-10, atol=1e-10)


def test_focal_bound_lines_are_the_stated_formulas():
    """Each line is its own formula, not just some value in between (the Hoelder line has
    max_j q_j; for a soft target it lies strictly above the entropy line)."""
    rng = np.random.default_rng(7)
    q, p = _random_simplex(rng, 50, 6, 1.0), _random_simplex(rng, 50, 6, 1.0)
    gamma = 2.5
    c = theory.focal_bound_chain(q, p, gamma)
    ce = -(q * p.log()).sum(1)
    h_p = -(p * p.log()).sum(1)
    torch.testing.assert_close(c["cross_entropy"], ce)
    torch.testing.assert_close(c["bernoulli"], ce - gamma * (q * (p * p.log()).abs()).sum(1))
    torch.testing.assert_close(c["holder"], ce - gamma * q.max(1).values * h_p)
    torch.testing.assert_close(c["entropy"], ce - gamma * h_p)
    assert bool((c["holder"] > c["entropy"] + 1e-6).all())  # max_j q_j < 1 for a soft target


@FAST
@given(seed=st.integers(0, 10_000), k=st.integers(2, 12), gamma=st.floats(1, 20))
def test_focal_bound_property(seed, k, gamma):
    rng = np.random.default_rng(seed)
    q, p = _random_simplex(rng, 4, k, 0.7), _random_simplex(rng, 4, k, 0.7)
    c = theory.focal_bound_chain(q, p, gamma)
    assert bool((c["focal"] >= c["kl_form"] - 1e-9).all())


def test_focal_bound_first_line_is_the_implemented_focal_loss():
    torch.manual_seed(1)
    z, y = torch.randn(16, 5, dtype=torch.float64) * 3, torch.randint(0, 5, (16,))
    q = torch.nn.functional.one_hot(y, 5).double()
    c = theory.focal_bound_chain(q, torch.softmax(z, 1), 3.0)
    torch.testing.assert_close(c["focal"], losses.focal_loss(z, y, gamma=3.0, reduction="none"))
    torch.testing.assert_close(c["cross_entropy"], losses.cross_entropy(z, y, reduction="none"))


def test_focal_bound_slack_grows_with_entropy():
    k = 10
    q = torch.nn.functional.one_hot(torch.zeros(3, dtype=torch.long), k).double()
    p = torch.tensor([[0.95] + [0.05 / 9] * 9, [0.5] + [0.5 / 9] * 9, [0.05] + [0.95 / 9] * 9], dtype=torch.float64)
    c = theory.focal_bound_chain(q, p, 3.0)
    slack = c["focal"] - c["kl_form"]
    assert bool((slack >= 0).all())
    assert torch.equal(torch.argsort(slack), torch.argsort(theory.entropy(p)))


def test_binary_focal_stationarity_sympy():
    d = theory.binary_focal_stationarity()
    q = next(s for s in d["objective"].free_symbols if s.name == "q")
    assert d["cross_entropy_roots"] == sp.FiniteSet(q)


def test_binary_focal_objective_is_unimodal():
    x = np.linspace(1e-6, 1 - 1e-6, 20001)
    for gamma in (0.0, 1.0, 2.0, 3.0, 5.0):
        for q in (0.01, 0.2, 0.5, 0.8, 0.99):
            v = theory.binary_focal_objective(x, q, gamma)
            minima = np.sum((v[1:-1] < v[:-2]) & (v[1:-1] < v[2:]))
            assert minima == 1


def test_binary_focal_optimum_claims():
    q = np.linspace(0.02, 0.98, 49)
    np.testing.assert_allclose(theory.binary_focal_optimum(q, 0.0), q, atol=1e-7)  # CE: x* = q
    previous = q
    for gamma in (1.0, 2.0, 3.0):
        x = theory.binary_focal_optimum(q, gamma)
        np.testing.assert_allclose(x + theory.binary_focal_optimum(1 - q, gamma), 1.0, atol=1e-7)  # symmetry
        upper = q > 0.5 + 1e-9
        assert np.all((x[upper] > 0.5) & (x[upper] < q[upper]))  # pulled toward 1/2
        assert np.all(x[upper] < previous[upper])  # more so for larger gamma
        previous = x
    # the optimum minimises the objective: no grid point does better
    x3 = theory.binary_focal_optimum([0.9], 3.0)[0]
    grid = np.linspace(1e-4, 1 - 1e-4, 9999)
    assert theory.binary_focal_objective([x3], 0.9, 3.0)[0] <= theory.binary_focal_objective(grid, 0.9, 3.0).min() + 1e-12


# =========================================================================== 05 gradient factor


def test_gradient_factor_sympy_matches_paper(g_derivation):
    assert g_derivation["difference"] == 0
    assert g_derivation["peak_gamma_1"] == sp.FiniteSet(sp.exp(-2))


def test_gradient_factor_numeric_matches_sympy(g_derivation):
    sym = {s.name: s for s in g_derivation["g_derived"].free_symbols}
    f = sp.lambdify((sym["p"], sym["gamma"]), g_derivation["g_derived"], "numpy")
    p = np.linspace(0.001, 0.999, 999)
    for gamma in (0.5, 1.0, 2.0, 3.0, 5.0):
        np.testing.assert_allclose(theory.gradient_factor(p, gamma), f(p, gamma), rtol=1e-12, atol=1e-14)
    assert theory.gradient_factor([0.0], 3.0)[0] == 1.0  # CE-like for hopeless samples
    assert theory.gradient_factor([1.0], 3.0)[0] == 0.0


@pytest.mark.parametrize("gamma", [1.0, 2.0, 3.0, 5.0])
def test_gradient_factor_equals_autograd_ratio(gamma):
    torch.manual_seed(int(gamma))
    z, y = torch.randn(32, 6, dtype=torch.float64) * 2, torch.randint(0, 6, (32,))
    ratio = theory.gradient_ratio(
        functools.partial(losses.focal_loss, gamma=gamma, reduction="sum"),
        functools.partial(losses.cross_entropy, reduction="sum"), z, y)
    p_y = torch.softmax(z, 1)[torch.arange(32), y].numpy()
    expected = torch.as_tensor(theory.gradient_factor(p_y, gamma))[:, None].expand_as(ratio)
    torch.testing.assert_close(ratio, expected, rtol=1e-9, atol=1e-12)


@FAST
@given(seed=st.integers(0, 10_000), gamma=st.floats(0.5, 8))
def test_gradient_factor_autograd_property(seed, gamma):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(4, 3, dtype=torch.float64, generator=gen) * 3
    y = torch.randint(0, 3, (4,), generator=gen)
    ratio = theory.gradient_ratio(
        functools.partial(losses.focal_loss, gamma=gamma, reduction="sum"),
        functools.partial(losses.cross_entropy, reduction="sum"), z, y)
    p_y = torch.softmax(z, 1)[torch.arange(4), y].numpy()
    np.testing.assert_allclose(ratio.numpy(), np.repeat(theory.gradient_factor(p_y, gamma)[:, None], 3, 1), rtol=1e-7, atol=1e-9)


PEAKS = {1.0: 0.1353, 2.0: 0.1041, 3.0: 0.0855, 5.0: 0.0639}  # computed here; three decimals: .136/.104/.086/.064


@pytest.mark.parametrize("gamma", sorted(PEAKS))
def test_gradient_factor_peak_and_monotonicity(gamma):
    p0 = theory.gradient_factor_peak(gamma)
    assert p0 == pytest.approx(PEAKS[gamma], abs=1e-4)
    assert abs(p0 - {1.0: 0.136, 2.0: 0.104, 3.0: 0.086, 5.0: 0.064}[gamma]) < 1e-3  # the three-decimal figures
    rise = np.linspace(1e-6, p0, 500)[:-1]
    fall = np.linspace(p0, 1 - 1e-6, 2000)[1:]
    assert np.all(theory.gradient_factor_slope(rise, gamma) > 0)
    assert np.all(theory.gradient_factor_slope(fall, gamma) < 0)
    assert theory.gradient_factor([p0], gamma)[0] > 1  # focal out-pushes CE near the peak


def test_gradient_factor_peak_gamma_one_is_exp_minus_two():
    assert theory.gradient_factor_peak(1.0) == pytest.approx(math.exp(-2), abs=1e-12)
    peaks = [theory.gradient_factor_peak(g) for g in (1.0, 2.0, 3.0, 5.0)]
    assert peaks == sorted(peaks, reverse=True)


def test_lambert_derivation_steps(lambert):
    assert lambert["factor_check"] == 0
    assert lambert["exponent_check"] == 0
    assert lambert["u_principal_branch"].rhs.has(sp.LambertW)


def test_lambert_gamma_values_and_branches():
    p0 = np.array([0.2, 0.25, 0.3])
    gam = theory.lambert_gamma(p0)
    np.testing.assert_allclose(gam, [4.8506, 3.0702, 1.9572], atol=1e-4)
    np.testing.assert_allclose(theory.lambert_gamma(p0, exact=True), gam, rtol=1e-10)  # sympy closed form
    np.testing.assert_allclose(theory.lambert_gamma(p0, branch=0), 0.0, atol=1e-12)  # trivial root
    for p, g in zip(p0, gam):
        assert theory.gradient_factor([p], g)[0] == pytest.approx(1.0, abs=1e-12)
        below, above = theory.gradient_factor([p * 0.9], g)[0], theory.gradient_factor([p * 1.1], g)[0]
        assert below > 1 > above  # focal pushes harder than CE below p0, less above
    assert np.all(np.diff(theory.lambert_gamma(np.linspace(0.05, 0.45, 50))) < 0)


def test_unit_crossing_gamma_one_is_one_over_e():
    assert theory.gradient_factor_unit_crossing(1.0) == pytest.approx(math.exp(-1), abs=1e-10)


def test_flsd53_approximates_lambert_schedule():
    assert abs(theory.lambert_gamma([0.2])[0] - 5) < 0.2  # gamma = 5 below p = 0.2
    assert abs(theory.lambert_gamma([0.25])[0] - 3) < 0.1  # gamma = 3 for p0 = 0.25
    assert theory.gradient_factor_unit_crossing(5.0) == pytest.approx(0.1968, abs=1e-4)
    assert theory.gradient_factor_unit_crossing(3.0) == pytest.approx(0.2526, abs=1e-4)
    assert theory.gradient_factor([0.22], 3.0)[0] > 1  # between the switch and the gamma = 3 crossing
    np.testing.assert_array_equal(theory.flsd53_gamma([0.0, 0.1999, 0.2, 0.9]), [5, 5, 3, 3])


def test_flsd53_gamma_matches_the_implemented_loss():
    torch.manual_seed(3)
    z, y = torch.randn(64, 4, dtype=torch.float64) * 2, torch.randint(0, 4, (64,))
    p_y = torch.softmax(z, 1)[torch.arange(64), y].numpy()
    gam = torch.as_tensor(theory.flsd53_gamma(p_y))
    expected = losses.focal_loss(z, y, gamma=gam, reduction="none")
    torch.testing.assert_close(losses.flsd53_loss(z, y, reduction="none"), expected)


# =========================================================================== 06 Brier identity


@pytest.mark.parametrize("k", [2, 3, 4])
def test_brier_identity_fixed_k(k):
    d = theory.brier_identity(k)
    assert d["residual"] == 0
    assert d["residual_without_constraint"] != 0  # sum(eta) = 1 is needed


def test_brier_identity_general_k():
    assert theory.brier_identity_coordinate()["residual"] == 0
    assert theory.brier_identity_indexed()["residual"] == 0


@FAST
@given(seed=st.integers(0, 10_000), k=st.integers(2, 20))
def test_brier_identity_numeric(seed, k):
    rng = np.random.default_rng(seed)
    p, eta = _random_simplex(rng, 5, k, 0.5), _random_simplex(rng, 5, k, 0.5)
    parts = theory.brier_decomposition(p, eta)
    torch.testing.assert_close(theory.expected_brier(p, eta), parts["distance_to_eta"] + parts["irreducible"])


def test_brier_identity_monte_carlo_with_metrics():
    from calib import metrics

    p = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], dtype=torch.float64)
    eta = torch.tensor([[0.5, 0.4, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)
    n = 40_000
    mc = theory.monte_carlo_brier(p, eta, n, seed=0)
    exact = theory.expected_brier(p, eta)
    assert torch.all((mc - exact).abs() < 0.02)
    gen = torch.Generator().manual_seed(1)
    labels = torch.multinomial(eta[0], n, replacement=True, generator=gen)
    score = metrics.brier_score(p[0].expand(n, 3), labels)
    assert score == pytest.approx(float(exact[0]), abs=0.02)


def test_brier_weight_is_the_per_sample_brier_score_and_contains_fl():
    torch.manual_seed(4)
    p = torch.softmax(torch.randn(20, 4, dtype=torch.float64), 1)
    y = torch.randint(0, 4, (20,))
    onehot = torch.nn.functional.one_hot(y, 4).double()
    torch.testing.assert_close(uncertainty.u_gbs(p, y, gamma=2.0, norm=2.0), ((p - onehot) ** 2).sum(1))
    torch.testing.assert_close(uncertainty.u_gbs(p, y, gamma=3.0, norm=1.0, support="true"), uncertainty.u_fl(p, y, gamma=3.0))
    torch.testing.assert_close(uncertainty.u_gbs(p, y, gamma=3.0, norm=1.0, support="true_and_rival"), uncertainty.u_dfl(p, y, gamma=3.0))
    # binary: the Brier weight is twice the focal weight with gamma = 2 (000 §3.3)
    p2, y2 = torch.softmax(torch.randn(20, 2, dtype=torch.float64), 1), torch.randint(0, 2, (20,))
    torch.testing.assert_close(uncertainty.u_gbs(p2, y2, gamma=2.0, norm=2.0), 2 * uncertainty.u_fl(p2, y2, gamma=2.0))


def test_simplex_slice():
    probs, xy = theory.simplex_slice(10, fixed=0.1)
    assert probs.shape == (66, 4) and xy.shape == (66, 2)
    torch.testing.assert_close(probs.sum(1), torch.ones(66, dtype=torch.float64))
    assert torch.allclose(probs[:, 3], torch.full((66,), 0.1, dtype=torch.float64))


def test_weight_map_claims():
    grid, _ = theory.simplex_slice(30, fixed=0.1)
    y = torch.zeros(grid.shape[0], dtype=torch.long)
    p0 = grid[:, 0]
    pj = grid.masked_fill(grid >= grid[:, :1], 0.0).amax(1)
    u_dfl = uncertainty.u_dfl(grid, y, gamma=2.0)
    assert theory.spread_within(uncertainty.u_fl(grid, y, gamma=2.0), p0) < 1e-12
    assert theory.spread_within(u_dfl, p0, pj) < 1e-12
    assert theory.spread_within(u_dfl, p0) > 0.01  # u_DFL needs p_j as well
    assert theory.spread_within(uncertainty.u_gbs(grid, y, gamma=2.0, norm=2.0), p0) > 0.1


# =========================================================================== 07 BSCE-GRA


@pytest.mark.parametrize("k", [2, 3, 4])
def test_paper_lagrangian_gives_eta(k):
    d = theory.paper_lagrangian_optimum(k)
    assert all(v == 0 for v in d["q_minus_eta"])


def test_gra_fixed_point_derivation():
    d = theory.gra_fixed_point_derivation(3)
    assert all(v == 0 for v in d["gradient_at_candidate"])
    sol = d["simplex_solution"]
    sym = {s.name: s for s in d["expected_surrogate"].free_symbols}
    total = sum(sym[f"eta_{i}"] * sym[f"w_{i}"] for i in (1, 2, 3))
    q1 = next(v for k_, v in sol.items() if k_.name == "q_1")
    assert sp.simplify(q1 - sym["eta_1"] * sym["w_1"] / total) == 0


def test_binary_gra_fixed_point_closed_form():
    d = theory.binary_gra_fixed_point_derivation()
    sym = {s.name: s for s in d["q_1"].free_symbols}
    q1 = float(d["q_1"].subs({sym["eta_1"]: sp.Rational(4, 5), sym["gamma"]: 2}))
    assert q1 == pytest.approx(4 ** (1 / 3) / (1 + 4 ** (1 / 3)), abs=1e-12)
    assert q1 == pytest.approx(0.614, abs=5e-4)  # the GRA fixed point (chapter 7)
    assert "beta" not in sym  # the norm order drops out


def test_gra_fixed_points_binary():
    eta = [0.8, 0.2]
    torch.testing.assert_close(theory.gra_fixed_point(eta, "ce"), torch.tensor(eta, dtype=torch.float64))
    q = theory.gra_fixed_point(eta, "gbs", gamma=2.0, norm=2.0)
    assert float(q[0]) == pytest.approx(4 ** (1 / 3) / (1 + 4 ** (1 / 3)), abs=1e-9)
    for gamma in (1.0, 3.0, 4.0):
        expected = 4 ** (1 / (1 + gamma)) / (1 + 4 ** (1 / (1 + gamma)))  # temperature 1 + gamma
        for name, kw in (("fl", {}), ("gbs", {"norm": 1.0}), ("gbs", {"norm": 2.0}), ("gbs", {"norm": 3.0})):
            assert float(theory.gra_fixed_point(eta, name, gamma=gamma, **kw)[0]) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_gra_fixed_points_multiclass_underconfident(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 7))
    eta = torch.as_tensor(rng.dirichlet(np.ones(k))) + 1e-3
    eta = eta / eta.sum()
    torch.testing.assert_close(theory.gra_fixed_point(eta, "ce"), eta)
    for name, kw in (("fl", {"gamma": 3.0}), ("gbs", {"gamma": 2.0, "norm": 2.0}), ("gbs", {"gamma": 4.0, "norm": 2.0})):
        q = theory.gra_fixed_point(eta, name, **kw)
        weights = theory.gra_label_weights(name, q, **kw)
        torch.testing.assert_close(q, eta * weights / (eta * weights).sum(), rtol=0, atol=1e-10)
        assert float(q.max()) < float(eta.max())
        assert float(theory.entropy(q)[0]) > float(theory.entropy(eta)[0])


def test_gra_factor_monotone_focal_factor_not():
    p = np.linspace(1e-6, 1 - 1e-6, 2001)
    for gamma in (1.0, 3.0):
        assert np.all(np.diff((1 - p) ** gamma) < 0)
        assert np.any(theory.gradient_factor_slope(p, gamma) > 0)


def test_eta_is_not_stationary_for_label_weighted_brier():
    eta = torch.tensor([0.8, 0.2], dtype=torch.float64)
    w = theory.gra_label_weights("gbs", eta, gamma=2.0, norm=2.0)
    assert float((eta * w).sum()) == pytest.approx(float(theory.expected_brier(eta, eta)[0]), abs=1e-12)
    grad = (eta * w).sum() * eta - eta * w
    assert float(grad.abs().max()) > 0.05 and float(grad[1]) < 0  # descent raises the minority logit
    torch.testing.assert_close(theory.gra_label_weights("ce", eta), torch.ones(2, dtype=torch.float64))


def test_gra_gradient_is_detached_weight_times_ce_gradient():
    torch.manual_seed(5)
    z, y = torch.randn(16, 4, dtype=torch.float64) * 2, torch.randint(0, 4, (16,))
    ce = functools.partial(losses.cross_entropy, reduction="sum")
    ratio = theory.gradient_ratio(functools.partial(losses.bsce_gra_loss, gamma=2.0, norm=2.0, reduction="sum"), ce, z, y)
    u = uncertainty.u_gbs(torch.softmax(z, 1), y, gamma=2.0, norm=2.0)
    torch.testing.assert_close(ratio, u[:, None].expand_as(ratio))
    loss_weighted = theory.gradient_ratio(functools.partial(losses.bsce_loss, gamma=2.0, norm=2.0, reduction="sum"), ce, z, y)
    assert (loss_weighted - u[:, None]).abs().max() > 1e-3  # differentiating through u changes the gradient


def test_free_logits_settle_at_the_fixed_point():
    eta = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    labels = torch.multinomial(eta, 1000, replacement=True, generator=torch.Generator().manual_seed(0))
    eta_hat = torch.bincount(labels, minlength=3).double() / labels.numel()
    q_ce = theory.fit_constant_logits(losses.cross_entropy, labels, 3, steps=400)
    torch.testing.assert_close(q_ce, eta_hat, rtol=0, atol=1e-6)
    for gamma in (2.0, 4.0):
        fit = theory.fit_constant_logits(functools.partial(losses.bsce_gra_loss, gamma=gamma, norm=2.0), labels, 3, steps=400)
        torch.testing.assert_close(fit, theory.gra_fixed_point(eta_hat, "gbs", gamma=gamma, norm=2.0), rtol=0, atol=1e-5)
        assert float(fit.max()) < float(eta_hat.max()) - 0.05


def test_linear_model_on_toy_data_settles_at_the_fixed_point_not_at_eta():
    """The GRA fixed point on the toy data of Lin et al. (2024) §4.3, where eta(x) is known.

    Two Gaussians with a shared covariance: log(eta_1/eta_2) is linear in x, and so is the
    binary GRA fixed point log(q_1/q_2) = log(eta_1/eta_2)/(1 + gamma). A linear model
    trained with CE recovers eta; trained with BSCE-GRA it lands on the fixed point.
    """
    from calib.data.toy import gaussian_mixture

    data = gaussian_mixture(1000, means=[[-1.0, 0.0], [1.0, 0.0]], scale=1.0, seed=0)
    log_eta = data.log_eta()
    true_log_odds = log_eta[:, 0] - log_eta[:, 1]
    for gamma, loss in (
        (0.0, losses.cross_entropy),
        (2.0, functools.partial(losses.bsce_gra_loss, gamma=2.0, norm=2.0)),
        (4.0, functools.partial(losses.bsce_gra_loss, gamma=4.0, norm=2.0)),
    ):
        model = theory.fit_linear_logits(loss, data.x, data.y, 2, steps=500)
        z = model(data.x.double())
        log_odds = z[:, 0] - z[:, 1]
        slope = float((log_odds * true_log_odds).sum() / true_log_odds.square().sum())
        assert slope == pytest.approx(1 / (1 + gamma), abs=0.02)  # temperature 1 + gamma on the log-odds
        fixed_point = torch.sigmoid(true_log_odds / (1 + gamma))
        assert float((torch.sigmoid(log_odds) - fixed_point).abs().max()) < 0.06
        # spot-check the closed form against the general solver at a few inputs
        for i in (0, 1, 2):
            q = theory.gra_fixed_point(data.eta[i], "ce" if gamma == 0 else "gbs",
                                       **({} if gamma == 0 else {"gamma": gamma, "norm": 2.0}))
            assert float(q[0]) == pytest.approx(float(fixed_point[i]), abs=1e-8)
        if gamma > 0:  # under-confident: the mean distance to eta is large, the confidence lower
            assert float((torch.sigmoid(log_odds) - data.eta[:, 0]).abs().mean()) > 0.1
            assert float(torch.sigmoid(log_odds.abs()).mean()) < float(data.eta.max(1).values.mean()) - 0.05


# =========================================================================== 002 Thm 1, 003 Eq. 1


@pytest.mark.parametrize("k", [2, 3])
def test_temperature_sharpening_proof(k):
    d = theory.temperature_sharpening_proof(k)
    assert d["difference"] == 0
    assert d["derivative_nonnegative"] == sp.true
    assert d["rewrite_check"] == 0


@FAST
@given(seed=st.integers(0, 10_000), t=st.floats(1.0, 20.0))
def test_temperature_sharpening_numeric(seed, t):
    z = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 3
    assert bool((theory.top_probability(z, t) >= theory.top_probability(z, 1.0) - 1e-12).all())
    assert bool((theory.top_probability(z, 1 / t) <= theory.top_probability(z, 1.0) + 1e-12).all())


@pytest.mark.parametrize("k", [2, 3, 5])
def test_label_smoothing_identity(k):
    d = theory.label_smoothing_identity(k)
    eps = sp.Symbol("epsilon", positive=True)
    assert d["residual"] == 0
    assert d["alpha_for_eps"] == sp.FiniteSet(eps * (k - 1) / k)
    assert all(v == 0 for v in d["conventions_agree"])


def test_label_smoothing_identity_matches_the_implemented_loss():
    torch.manual_seed(6)
    z, y = torch.randn(12, 5, dtype=torch.float64), torch.randint(0, 5, (12,))
    eps = 0.1
    ce = losses.cross_entropy(z, y, reduction="none")
    ce_uniform = -torch.log_softmax(z, 1).mean(1)
    ls = losses.label_smoothing_loss(z, y, epsilon=eps, convention="uniform", reduction="none")
    torch.testing.assert_close(ls, (1 - eps) * ce + eps * ce_uniform)
    other = losses.label_smoothing_loss(z, y, epsilon=eps * 4 / 5, convention="mukhoti", reduction="none")
    torch.testing.assert_close(other, ls)


# =========================================================================== validation


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: theory.bernoulli_gap([0.5, 1.2], 2.0), "p must lie"),
        (lambda: theory.bernoulli_gap([0.5, float("nan")], 2.0), "p contains NaN"),
        (lambda: theory.bernoulli_gap([], 2.0), "p is empty"),
        (lambda: theory.bernoulli_gap([0.5], -1.0), "gamma must be"),
        (lambda: theory.focal_bound_chain([[0.5, 0.5]], [[0.5, 0.5]], 0.5), "gamma must be >= 1"),
        (lambda: theory.focal_bound_chain([[0.5, 0.5]], [[1.0, 0.0]], 2.0), "p must be strictly positive"),
        (lambda: theory.focal_bound_chain([[0.5, 0.5]], [[0.2, 0.3, 0.5]], 2.0), "same shape"),
        (lambda: theory.focal_bound_chain([[0.5, 0.6]], [[0.5, 0.5]], 2.0), "q rows must sum to 1"),
        (lambda: theory.binary_focal_optimum([0.5], float("inf")), "gamma must be"),
        (lambda: theory.binary_focal_objective([0.0], 0.5, 1.0), r"x must lie in \(0, 1\)"),
        (lambda: theory.gradient_factor([1.0], 0.5), "gamma >= 1"),
        (lambda: theory.gradient_factor_peak(0.0), "gamma must be > 0"),
        (lambda: theory.lambert_gamma([0.6]), r"p0 must lie in \(0, 1/2\)"),
        (lambda: theory.lambert_gamma([0.2], branch=1), "branch must be"),
        (lambda: theory.brier_identity(1), "num_classes must be >= 2"),
        (lambda: theory.expected_brier([[0.5, 0.5]], [[0.2, 0.3, 0.5]]), "same shape"),
        (lambda: theory.monte_carlo_brier([[0.5, 0.5]], [[0.5, 0.5]], 0), "n_samples must be >= 1"),
        (lambda: theory.gra_fixed_point([0.9, 0.1, 0.0], "ce"), "eta must be strictly positive"),
        (lambda: theory.gra_fixed_point([0.9, 0.1], "nope"), "name must be one of"),
        (lambda: theory.gra_fixed_point([0.9, 0.1], "ce", gamma=2.0), "takes no parameters"),
        (lambda: theory.gradient_ratio(losses.cross_entropy, losses.cross_entropy, [[0.0, 1.0]], [2]), "targets must lie"),
        (lambda: theory.gradient_ratio(losses.cross_entropy, losses.cross_entropy, [[float("nan"), 1.0]], [0]), "NaN"),
        (lambda: theory.fit_constant_logits(losses.cross_entropy, [0, 1], 2, lr=-1.0), "lr must be"),
        (lambda: theory.fit_constant_logits(losses.cross_entropy, [], 2), "targets must be a non-empty"),
        (lambda: theory.fit_linear_logits(losses.cross_entropy, torch.zeros(3, 2), [0, 1, 2], 2), "targets must lie"),
        (lambda: theory.fit_linear_logits(losses.cross_entropy, torch.zeros(3), [0, 1, 0], 2), "x must have shape"),
        (lambda: theory.fit_linear_logits(losses.cross_entropy, torch.zeros(3, 2), [0, 1, 0], 2, momentum=1.0), "momentum"),
        (lambda: theory.simplex_slice(10, fixed=1.0), "fixed must be < 1"),
        (lambda: theory.gra_label_weights("ce", [[0.5, 0.5], [0.5, 0.5]]), "single distribution"),
        (lambda: theory.top_probability([[1.0, 2.0]], 0.0), "t must be finite and > 0"),
        (lambda: theory.top_probability([1.0, 2.0]), "logits must have shape"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: theory.bernoulli_gap(None, 2.0), "p must be a torch.Tensor"),
        (lambda: theory.bernoulli_gap([0.5], "2"), "gamma must be a number"),
        (lambda: theory.gra_fixed_point([0.5, 0.5], 3), "weight must be callable"),
        (lambda: theory.gra_weight(1), "name must be a str"),
        (lambda: theory.gradient_ratio(losses.cross_entropy, losses.cross_entropy, [[0.0, 1.0]], [0.5]), "integer"),
        (lambda: theory.brier_identity(2.0), "num_classes must be an int"),
        (lambda: theory.fit_linear_logits(losses.cross_entropy, torch.zeros(3, 2, dtype=torch.long), [0, 1, 0], 2), "x must be floating"),
    ],
)
def test_bad_types_raise_type_error(call, match):
    with pytest.raises(TypeError, match=match):
        call()


# =========================================================================== figures


def _fl(p, y):
    return uncertainty.u_fl(p, y, gamma=2.0)


def test_figures_are_returned_not_shown():
    figs = [
        plots.plot_gradient_factor((1.0, 3.0), resolution=50, show_weight=True),
        plots.plot_flsd_schedule(resolution=20),
        plots.plot_binary_focal_optimum((0.0, 2.0), resolution=9),
        plots.plot_simplex_weight_maps({"u_FL": _fl, "u_BS": functools.partial(uncertainty.u_gbs, gamma=2.0, norm=2.0)}, resolution=8),
        plots.plot_gra_fixed_point({"FL-GRA": _fl}, resolution=4, extra={"focal": ([0.6, 0.9], [0.55, 0.7])}),
    ]
    for fig in figs:
        assert isinstance(fig, Figure) and fig.axes
    assert len(figs[3].axes) == 4  # two maps, two colour bars


@pytest.mark.parametrize(
    "call, err",
    [
        (lambda: plots.plot_gradient_factor(()), ValueError),
        (lambda: plots.plot_gradient_factor(resolution=1), ValueError),
        (lambda: plots.plot_flsd_schedule(p_range=(0.1, 0.6)), ValueError),
        (lambda: plots.plot_simplex_weight_maps({}), ValueError),
        (lambda: plots.plot_simplex_weight_maps({"u": 3}), TypeError),
        (lambda: plots.plot_simplex_weight_maps({"u": _fl}, true_class=4), ValueError),
        (lambda: plots.plot_gra_fixed_point({"u": _fl}, eta_range=(0.5, 1.0)), ValueError),
    ],
)
def test_figure_bad_input(call, err):
    with pytest.raises(err):
        call()


# =========================================================================== issue 10 additions
from calib import experiments, metrics  # noqa: E402
from calib.theory import focal_bounds, gra_field, scoring

# --------------------------------------------------------------------------- focal bounds, every gamma


def test_exp_inequality_proof():
    d = focal_bounds.exp_inequality_proof()
    assert d["critical_points"] == sp.FiniteSet(0)
    assert d["gap_at_0"] == 0 and d["curvature_positive"] == sp.true
    assert d["rewritten"] == 0


def test_log_product_bound_proof_and_grid():
    d = focal_bounds.log_product_bound_proof()
    assert d["series_gap_at_0"] == 0
    p = sp.Symbol("p", positive=True)
    assert sp.simplify(d["series_slope"] - p**2 / (2 * (1 - p) ** 2)) == 0
    assert d["plogp_max_at"] == sp.FiniteSet(sp.exp(-1)) and d["plogp_max"] == sp.exp(-1)
    assert float(d["plogp_max"]) < float(d["rhs_min_on_half"])
    grid = np.concatenate([np.logspace(-12, -1, 500), np.linspace(0.1, 0.9, 2001), 1 - np.logspace(-12, -1, 500)])
    assert focal_bounds.log_product_gap(grid).min() >= 0


@pytest.mark.parametrize("gamma", [0.1, 0.5, 0.9, 1.0, 2.0, 3.0, 5.0])
def test_focal_bounds_chain_every_gamma(gamma):
    rng = np.random.default_rng(int(gamma * 10))
    p = _random_simplex(rng, 2000, 6, 0.5).clamp_min(1e-9)
    p = p / p.sum(1, keepdim=True)
    y = torch.as_tensor(rng.integers(0, 6, 2000))
    b = focal_bounds.focal_bounds_one_hot(p, y, gamma)
    tol = 1e-10
    assert bool((b["focal"] >= b["log_product"] - tol).all())
    assert bool((b["log_product"] >= b["binary"] - tol).all())
    assert bool((b["binary"] >= b["entropy"] - tol).all())
    assert bool((b["holder_slack"] >= -tol).all())
    if gamma >= 1:
        assert bool((b["focal"] >= b["true_class"] - tol).all())
        assert bool((b["true_class"] >= b["entropy"] - tol).all())
        torch.testing.assert_close(b["true_class"] - b["entropy"], gamma * b["holder_slack"])
    else:
        assert bool((b["focal"] < b["true_class"] - 1e-6).any())  # the Bernoulli route fails below 1


def test_true_class_bound_is_the_bernoulli_line_and_peaks_at_1_over_e():
    rng = np.random.default_rng(0)
    p = _random_simplex(rng, 50, 4, 1.0).clamp_min(1e-9)
    p = p / p.sum(1, keepdim=True)
    y = torch.as_tensor(rng.integers(0, 4, 50))
    q = torch.nn.functional.one_hot(y, 4).double()
    chain = theory.focal_bound_chain(q, p, 3.0)
    torch.testing.assert_close(focal_bounds.focal_bounds_one_hot(p, y, 3.0)["true_class"], chain["bernoulli"])
    d = focal_bounds.true_class_regulariser_peak()
    assert d["argmax"] == sp.FiniteSet(sp.exp(-1)) and d["max_value"] == sp.exp(-1)


# --------------------------------------------------------------------------- gradient factor, unimodal


def test_gradient_factor_unimodal_on_a_gamma_grid():
    p = np.concatenate([np.logspace(-10, -2, 400), np.linspace(0.01, 0.99, 3000), 1 - np.logspace(-2, -8, 300)])
    for gamma in np.concatenate([np.linspace(0.05, 1, 20), np.linspace(1.5, 30, 58)]):
        s = np.sign(theory.gradient_factor_slope(p, float(gamma)))
        s = s[s != 0]
        assert s[0] > 0 and s[-1] < 0
        assert np.count_nonzero(np.diff(s)) == 1, gamma  # one sign change: rises, then falls
        peak = theory.gradient_factor_peak(float(gamma))
        assert np.all(np.diff(theory.gradient_factor(p[p < peak], float(gamma))) > -1e-12)


# --------------------------------------------------------------------------- Brier decompositions


@pytest.mark.parametrize("m, k", [(1, 2), (2, 2), (3, 2), (2, 3)])
def test_murphy_decomposition_proof(m, k):
    d = scoring.murphy_decomposition_proof(m, k)
    assert d["residual"] == 0
    assert d["refinement_minus_unc_plus_res"] == 0
    assert d["residual_calibration_refinement"] == 0


@pytest.mark.parametrize("n, k", [(2, 2), (3, 3)])
def test_grouping_decomposition_proof(n, k):
    assert scoring.grouping_decomposition_proof(n, k)["residual"] == 0


def test_known_posterior_decomposition_adds_up_and_constant_forecast_is_calibrated():
    rng = np.random.default_rng(1)
    eta = _random_simplex(rng, 3000, 3, 1.0)
    p = torch.softmax(eta.log() * 1.7 + torch.as_tensor(rng.normal(0, 0.3, (3000, 3))), 1)
    for n_bins in (None, 4, 10):
        d = scoring.known_posterior_decomposition(p, eta, n_bins)
        assert d["distance"] == pytest.approx(d["reliability"] + d["grouping"], abs=1e-12)
        assert d["reliability"] >= 0 and d["grouping"] >= 0
    d = scoring.known_posterior_decomposition(p, eta)  # continuous forecast: singleton groups
    assert d["grouping"] == pytest.approx(0, abs=1e-20)
    # the constant forecast E[eta]: calibrated (reliability 0) yet far from eta
    const = eta.mean(0).expand_as(eta)
    d = scoring.known_posterior_decomposition(const, eta)
    assert d["reliability"] == pytest.approx(0, abs=1e-20)
    assert d["distance"] > 0.05 and d["distance"] == pytest.approx(d["grouping"], abs=1e-12)
    # Monte-Carlo labels: the metric's reliability estimates the population one
    labels = torch.multinomial(eta, 1, generator=torch.Generator().manual_seed(0))[:, 0]
    m = metrics.brier_decomposition(const, labels)
    assert m["reliability"] < 2e-3


def test_known_posterior_decomposition_bad_input():
    with pytest.raises(ValueError, match="eta"):
        scoring.known_posterior_decomposition(torch.full((3, 2), 0.5), torch.full((3, 3), 1 / 3))


def test_strict_properness_proof():
    d = scoring.strict_properness_proof(3)
    assert d["brier_rest_has_q"] == sp.false
    assert d["ce_minus_kl_minus_entropy"] == 0
    assert all(v == 0 for v in d["ce_stationary_minus_eta"])


def test_expected_score_minimisers():
    for eta in ([0.7, 0.3], [0.5, 0.3, 0.2], [0.4, 0.3, 0.2, 0.1]):
        e = torch.tensor(eta, dtype=torch.float64)
        for name in ("ce", "brier"):
            torch.testing.assert_close(scoring.expected_score_minimiser(name, e), e, atol=1e-6, rtol=0)
        f = scoring.expected_score_minimiser("focal", e, gamma=3.0)
        assert float(f.max()) < float(e.max()) - 0.02  # focal: not proper, under-confident
        assert scoring.expected_score("focal", f, e, gamma=3.0) < scoring.expected_score("focal", e, e, gamma=3.0)
    f2 = scoring.expected_score_minimiser("focal", [0.8, 0.2], gamma=3.0)
    assert float(f2[0]) == pytest.approx(float(theory.binary_focal_optimum([0.8], 3.0)[0]), abs=1e-6)
    with pytest.raises(ValueError, match="score"):
        scoring.expected_score_minimiser("hinge", [0.5, 0.5])
    with pytest.raises(TypeError, match="score"):
        scoring.expected_score(3, [0.5, 0.5], [0.5, 0.5])


# --------------------------------------------------------------------------- GRA update field


ETA3 = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
GBS2 = {"gamma": 2.0, "norm": 2.0}


def test_gra_field_vanishes_at_the_fixed_point():
    q = theory.gra_fixed_point(ETA3, "gbs", **GBS2)
    assert float(gra_field.gra_field(q.log(), ETA3, "gbs", **GBS2).abs().max()) < 1e-10
    assert float(gra_field.gra_field(ETA3.log(), ETA3, "gbs", **GBS2).abs().max()) > 0.01


def test_brier_gra_field_is_not_a_gradient_but_ce_and_fl_gra_are():
    d = gra_field.brier_field_curl()
    assert d["curl"] != 0 and d["curl_ce"] == 0
    z = [0.3, -0.2, 0.1]
    assert gra_field.field_asymmetry(z, ETA3, "gbs", **GBS2) > 1e-3
    assert gra_field.field_asymmetry(z, ETA3, "ce") < 1e-12
    assert gra_field.field_asymmetry(z, ETA3, "fl", gamma=3.0) < 1e-12
    circ = gra_field.circulation(ETA3, "gbs", radius=1.5, n_points=200, **GBS2)
    assert abs(circ) > 1e-3
    assert abs(gra_field.circulation(ETA3, "ce", radius=1.5, n_points=200)) < 1e-10
    assert abs(gra_field.circulation([0.7, 0.3], "gbs", n_points=200, **GBS2)) < 1e-10  # K = 2: a gradient
    pot = gra_field.fl_gra_potential()
    assert all(v == 0 for v in pot["chain_rule_residual"])
    p = sp.Symbol("p", positive=True)
    gamma = next(s for s in pot["dPhi_dp"].free_symbols if s.name == "gamma")
    assert sp.simplify(pot["dPhi_dp"] + (1 - p) ** gamma / p) == 0


def test_gra_fixed_point_stable_unique_and_inverse():
    rng = np.random.default_rng(0)
    for eta in _random_simplex(rng, 12, 3, 2.0).clamp_min(1e-3):
        eta = eta / eta.sum()
        q = theory.gra_fixed_point(eta, "gbs", **GBS2)
        ev = gra_field.fixed_point_eigenvalues(eta, "gbs", **GBS2)
        assert ev.real.min() > 0
        torch.testing.assert_close(gra_field.gra_inverse(q, "gbs", **GBS2), eta, atol=1e-9, rtol=0)
    reached = gra_field.descend(ETA3, "gbs", n_starts=6, steps=1500, **GBS2)
    q = theory.gra_fixed_point(ETA3, "gbs", **GBS2)
    assert float((reached - q).abs().max()) < 1e-6


def test_gra_uniform_eta_is_the_exception():
    for K in (2, 3, 5):
        u = torch.full((K,), 1 / K, dtype=torch.float64)
        torch.testing.assert_close(theory.gra_fixed_point(u, "gbs", **GBS2), u)
    rng = np.random.default_rng(3)
    for eta in _random_simplex(rng, 20, 4, 1.0).clamp_min(1e-3):
        eta = eta / eta.sum()
        q = theory.gra_fixed_point(eta, "gbs", **GBS2)
        assert float(q.max()) < float(eta.max())
        assert float(theory.entropy(q)[0]) > float(theory.entropy(eta)[0])


def test_app9_checks():
    d = gra_field.app9_checks(3)
    assert d["C_at_optimum"] == 0
    eta = {s.name: s for s in d["CE_at_optimum"].free_symbols}
    val = d["CE_at_optimum"].subs({eta["eta_1"]: 0.6, eta["eta_2"]: 0.3, eta["eta_3"]: 0.1})
    assert float(val) == pytest.approx(float(theory.entropy([0.6, 0.3, 0.1])[0]))
    mu = sp.Symbol("mu", real=True)
    assert all(sp.simplify(v - mu) == 0 for v in d["weighted_stationarity"])


def test_gra_field_bad_input():
    with pytest.raises(ValueError, match="z"):
        gra_field.gra_field([0.0, 1.0], ETA3, "ce")
    with pytest.raises(ValueError, match="plane"):
        gra_field.circulation(ETA3, "ce", plane=(0, 0))
    with pytest.raises(ValueError, match="radius"):
        gra_field.circulation(ETA3, "ce", radius=-1.0)
    with pytest.raises(ValueError, match="q must be a single distribution"):
        gra_field.gra_inverse(torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "ce")
    with pytest.raises(ValueError, match="eta must be a single distribution"):
        gra_field.gra_field([0.0, 0.0], torch.full((2, 2), 0.5), "ce")


# --------------------------------------------------------------------------- toy ordering study


def test_toy_ordering_study_small():
    rows = experiments.toy_ordering_study([{"hidden": 8, "epochs": 1}], seeds=(0,), errors=("l2", "sq"),
                                          n_train_per_class=200, n_test_per_class=50)
    assert len(rows) == 4
    for r in rows:
        assert set(r["order"].split(" > ")) == {"FL", "DFL", "gBS"}
        assert r["paper_order"] == (r["order"] == "gBS > DFL > FL")
        assert all(-1 <= r[k] <= 1 for k in ("FL", "DFL", "gBS"))
    assert experiments.ordering({"a": 0.1, "b": 0.3}) == "b > a"
    with pytest.raises(ValueError, match="errors"):
        experiments.toy_ordering_study([{"hidden": 8}], seeds=(0,), errors=("l1",))


# --------------------------------------------------------------------------- new figures


def test_derivation_figures_fit_the_column():
    figs = [
        plots.plot_true_logit_push((1.0, 3.0), resolution=50),
        plots.plot_focal_bounds((0.5, 3.0), resolution=40),
        plots.plot_brier_terms({"a": {"reliability": 0.1, "grouping": 0.2, "irreducible": 0.3}}),
        plots.plot_gra_field([0.6, 0.3, 0.1], {"CE": theory.gra_weight("ce")}, resolution=5),
        plots.plot_flsd_schedule(),
        plots.plot_simplex_weight_maps({"u": functools.partial(uncertainty.u_fl, gamma=2.0),
                                        "v": functools.partial(uncertainty.u_fl, gamma=1.0),
                                        "w": functools.partial(uncertainty.u_fl, gamma=3.0)},
                                       resolution=10),
    ]
    for fig in figs:
        assert isinstance(fig, Figure)
        assert fig.get_size_inches()[0] <= 7.0 + 1e-9
    with pytest.raises(ValueError, match="gammas"):
        plots.plot_true_logit_push((0.0,))
    with pytest.raises(ValueError, match="eta"):
        plots.plot_gra_field([0.5, 0.5], {"CE": theory.gra_weight("ce")})


def test_true_logit_push_peak_precedes_the_factor_peak():
    for gamma in (0.5, 1.0, 2.0, 3.0, 5.0, 10.0):
        p_dag, p_star = theory.true_logit_push_peak(gamma), theory.gradient_factor_peak(gamma)
        assert 0 < p_dag < p_star
        grid = np.linspace(0, p_star, 4001)
        push = theory.gradient_factor(grid, gamma) * (1 - grid)
        assert abs(grid[np.argmax(push)] - p_dag) < 1e-3
    with pytest.raises(ValueError, match="gamma"):
        theory.true_logit_push_peak(0.0)
