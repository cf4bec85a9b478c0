"""calib.theory.gra and calib.theory.gra_field: the helpers the GRA and Brier-score chapters run on.

``spread_within`` (is a weight a function of these keys?), ``random_posteriors`` (the
posteriors the fixed-point checks sample) and ``stability_scan`` (the extreme eigenvalues
over them), each against a direct computation.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib import theory
from calib.losses import uncertainty
from calib.theory import gra_field

GBS2 = {"gamma": 2.0, "norm": 2.0}


def _spread_by_hand(values: torch.Tensor, *keys: torch.Tensor) -> float:
    groups: dict[tuple, list[float]] = {}
    for i in range(values.numel()):
        groups.setdefault(tuple(round(float(k[i]), 9) for k in keys), []).append(float(values[i]))
    return max(max(v) - min(v) for v in groups.values())


# --------------------------------------------------------------------------- spread_within
def test_spread_within_by_hand():
    v = torch.tensor([1.0, 3.0, 2.0, 2.0, 7.0])
    a = torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0])
    assert theory.spread_within(v, a) == 2.0  # group 0: 1..3; group 1: 2..2; group 2: 7
    b = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])
    assert theory.spread_within(v, a, b) == 0.0  # every (a, b) group is one value
    assert theory.spread_within(v, torch.zeros(5)) == 6.0  # one group: the whole range


def test_spread_within_rounds_float_noise_into_one_group():
    v = torch.tensor([1.0, 1.0, 5.0], dtype=torch.float64)
    key = torch.tensor([0.3, 0.1 + 0.2, 0.7], dtype=torch.float64)  # 0.1 + 0.2 != 0.3
    assert theory.spread_within(v, key) == 0.0
    assert theory.spread_within(v + torch.tensor([0.0, 1.0, 0.0]), key) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 4), st.integers(0, 2**16))
def test_spread_within_matches_a_loop_over_groups(n, n_keys, seed):
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n, dtype=torch.float64, generator=gen)
    keys = [torch.randint(0, n_keys, (n,), generator=gen).double() / 3 for _ in range(2)]
    assert theory.spread_within(v, *keys) == pytest.approx(_spread_by_hand(v, *keys), abs=0)
    assert theory.spread_within(v, *keys) <= float(v.max() - v.min())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: theory.spread_within(torch.ones(3)), "keys"),
        (lambda: theory.spread_within(torch.ones(3), torch.ones(4)), "shape of values"),
        (lambda: theory.spread_within(torch.ones(2, 2), torch.ones(2, 2)), "values must be"),
        (lambda: theory.spread_within(torch.ones(0), torch.ones(0)), "values must be"),
    ],
)
def test_spread_within_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- random_posteriors
def test_random_posteriors_are_the_clipped_dirichlet_draws_in_order():
    etas = gra_field.random_posteriors(5, (3, 4), seed=1)
    rng = np.random.default_rng(1)  # one generator for both class counts, K = 3 first
    expected = [e for k in (3, 4) for e in rng.dirichlet(np.ones(k), size=5)]
    assert [len(e) for e in etas] == [3] * 5 + [4] * 5
    for got, raw in zip(etas, expected):
        clipped = np.clip(raw, 1e-3, None)
        assert got.dtype == torch.float64
        np.testing.assert_array_equal(got.numpy(), clipped / clipped.sum())


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.integers(2, 6), st.sampled_from([0.0, 1e-3, 0.05]), st.integers(0, 1000))
def test_random_posteriors_lie_inside_the_simplex(n, k, floor, seed):
    etas = gra_field.random_posteriors(n, k, seed=seed, floor=floor)
    assert len(etas) == n
    for eta in etas:
        assert eta.shape == (k,)
        assert abs(float(eta.sum()) - 1) < 1e-12
        assert float(eta.min()) >= floor / (1 + k * floor) - 1e-15  # clipped, then renormalised
    again = gra_field.random_posteriors(n, k, seed=seed, floor=floor)
    assert all(torch.equal(a, b) for a, b in zip(etas, again))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=0, num_classes=3), "n"),
        (dict(n=2, num_classes=1), "num_classes"),
        (dict(n=2, num_classes=()), "num_classes"),
        (dict(n=2, num_classes=4, floor=0.25), "floor"),
        (dict(n=2, num_classes=4, floor=-0.1), "floor"),
    ],
)
def test_random_posteriors_reject_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gra_field.random_posteriors(**kwargs)


# --------------------------------------------------------------------------- stability_scan
def test_stability_scan_is_the_extremes_of_the_eigenvalues():
    etas = gra_field.random_posteriors(3, (3, 4), seed=5)
    scan = gra_field.stability_scan(etas, "gbs", **GBS2)
    spectra = [gra_field.fixed_point_eigenvalues(e, "gbs", **GBS2) for e in etas]
    assert scan["posteriors"] == 6
    assert scan["min_real"] == min(float(ev.real.min()) for ev in spectra)
    assert scan["max_abs_imag"] == max(float(np.abs(ev.imag).max()) for ev in spectra)
    assert scan["min_real"] > 0  # locally stable, as the chapter claims


def test_stability_scan_of_ce_is_the_softmax_jacobian():
    # CE: G(z) = q - eta, its Jacobian diag(q) - q q^T at q = eta: real, positive on sum-zero logits
    eta = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    scan = gra_field.stability_scan([eta], "ce")
    jac = torch.diag(eta) - torch.outer(eta, eta)
    nonzero = sorted(float(v) for v in torch.linalg.eigvalsh(jac) if abs(float(v)) > 1e-12)
    assert scan["max_abs_imag"] < 1e-12
    assert scan["min_real"] == pytest.approx(nonzero[0], rel=1e-9)


def test_stability_scan_rejects_no_posteriors():
    with pytest.raises(ValueError, match="etas"):
        gra_field.stability_scan([], functools.partial(uncertainty.u_fl, gamma=2.0))
