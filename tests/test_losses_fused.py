"""The fused label statistics behind the focal family, dual focal, BSCE and Brier
(calib.losses._fused): values equal the plain torch formulas, first and second derivatives
check against finite differences (float64), tied logits included; the weighted losses'
hand-written backward equals autograd through their formulas and passes gradcheck."""
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from calib import losses as L
from calib.losses import _fused
from calib.losses._fused import _composite, label_stats, weighted_ce
from calib.losses.focal import brier_weight, dual_focal_weight, flsd53_weight, focal_weight, inverse_focal_weight


# (classes, where the log_softmax path starts): the wide path runs at 24 classes by lowering
# its threshold, so gradgradcheck sees it without 2,100 inputs (72 s a case at 300 classes).
@pytest.mark.parametrize("k, wide_from", [(2, None), (5, None), (24, 16)])
@pytest.mark.parametrize("rival", [False, True])
@pytest.mark.parametrize("brier", [False, True])
def test_label_stats_equal_the_plain_formulas_and_their_derivatives(k, wide_from, rival, brier, monkeypatch):
    if wide_from is not None:
        monkeypatch.setattr(_fused, "_LOG_SOFTMAX_FROM", wide_from)
    torch.manual_seed(k)
    x = (3 * torch.randn(7, k, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, k, (7,))
    tied = x.detach().clone()
    tied[0] = tied[0, y[0]]  # every logit equal
    tied[1, : k // 2] = tied[1, y[1]]  # the label tied with half the row
    for z in (x, tied):
        got = [t for t in label_stats(z, y, rival=rival, brier=brier) if t is not None]
        for a, b in zip(got, _composite(z, y, rival, brier), strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)

    def f(z):
        stats = [t for t in label_stats(z, y, rival=rival, brier=brier) if t is not None]
        return sum((t.clamp(min=-50) * (i + 1.3)).sin().sum() for i, t in enumerate(stats))

    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))


def test_the_rival_is_the_largest_logit_strictly_below_the_label_signed_zeros_and_ties_included():
    x = torch.tensor([[0.0, -0.0, -1.0, 2.0], [-0.0, 0.0, -3.0, -2.5], [1.0, 1.0, 1.0, 1.0], [5.0, 1.0, 4.0, 4.0]])
    y = torch.tensor([0, 0, 2, 0])
    st = label_stats(x, y, rival=True)
    lp = torch.log_softmax(x, dim=1)
    want = torch.stack([lp[0, 2], lp[1, 3], torch.tensor(float("-inf")), lp[3, 2]])
    torch.testing.assert_close(st.log_rival, want)
    torch.testing.assert_close(st.log_rival, _composite(x, y, True, False)[2])


# Each per-row weight of calib.losses.focal with the arguments of its loss: the fused node
# (_WeightedCE, hand-written backward) against the same formula composed and left to autograd.
WEIGHTS = {
    "focal": (focal_weight(3.0), {}),
    "focal, gamma 0": (focal_weight(0.0), {}),
    "flsd53": (flsd53_weight((3.0, 5.0, 0.2)), {}),
    "inverse_focal": (inverse_focal_weight(2.0), {}),
    "dual_focal": (dual_focal_weight(5.0), {"rival": True}),
    "bsce": (brier_weight(4.0), {"brier": True}),
}


def _logits(k, seed):
    torch.manual_seed(seed)
    x = 3 * torch.randn(8, k, dtype=torch.float64)
    y = torch.randint(0, k, (8,))
    x[0] = x[0, y[0]]  # every logit tied
    x[1, : k // 2] = x[1, y[1]]  # the label tied with half the row
    x[2, y[2]] = 800.0  # p_y = 1 in float64: 1 − p_y, the Brier score and the rival's p_j are 0
    x[3] = -torch.arange(k, dtype=torch.float64)  # no rival where y = k − 1
    y[3] = k - 1
    return x, y


@pytest.mark.parametrize("detach", [False, True], ids=["weighted", "gra"])
@pytest.mark.parametrize("name", sorted(WEIGHTS))
@pytest.mark.parametrize("k", [3, 300])
def test_the_fused_weighted_loss_equals_autograd_through_its_formula(name, detach, k):
    log_weight, stats = WEIGHTS[name]
    x, y = _logits(k, seed=k)
    values, grads = [], []
    for composed in (False, True):
        z = x.clone().requires_grad_()
        v = weighted_ce(z, y, log_weight, detach=detach, autograd=composed, **stats)
        (g,) = torch.autograd.grad((v * torch.linspace(0.5, 2, 8, dtype=v.dtype)).sum(), z)
        values.append(v.detach())
        grads.append(g)
    assert torch.isfinite(values[0]).all() and torch.isfinite(grads[0]).all()
    torch.testing.assert_close(values[0], values[1], atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_the_hand_written_backward_passes_gradcheck_and_gradgradcheck(name):
    """First and second derivatives against finite differences (the GRA twins' gradient is by
    design not the derivative of their value; the test above pins it to the formula's)."""
    log_weight, stats = WEIGHTS[name]
    torch.manual_seed(1)
    x = (2 * torch.randn(6, 5, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, 5, (6,))
    y[0] = int(x[0].argmin())  # a row with no rival (dual focal's p_j = 0)

    def f(z):
        return weighted_ce(z, y, log_weight, **stats)

    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))


def test_torch_func_grad_takes_the_composed_path_and_agrees():
    x, y = _logits(6, seed=3)
    for fn in (L.focal_loss, L.dual_focal_loss, L.bsce_gra_loss):
        z = x.clone().requires_grad_()
        fn(z, y).backward()
        torch.testing.assert_close(torch.func.grad(lambda t: fn(t, y))(x), z.grad, atol=1e-12, rtol=1e-10)


def test_a_per_sample_gamma_keeps_a_finite_gradient_where_p_y_rounds_to_one():
    """Chapter 8's audit at seed offset 400: a γ-Net run diverged. Where every other logit is
    ~100 below the label's (float32), the one-exp sum underflows, log(1 − p_y) was −inf and
    γ's gradient, L·log(1 − p_y), was 0·(−inf) = NaN; the plain formula gives 0."""
    from calib.losses import focal_loss

    x = torch.tensor([[120.0, 0.0, -1.0], [2.0, 1.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 0])
    g = torch.tensor([0.8, 1.5], requires_grad=True)
    focal_loss(x, y, g).backward()
    assert torch.isfinite(g.grad).all() and torch.isfinite(x.grad).all()
    x2, g2 = x.detach().clone().requires_grad_(), g.detach().clone().requires_grad_()
    lp = torch.log_softmax(x2, dim=1)
    rest = torch.logsumexp(lp.scatter(1, y[:, None], float("-inf")), dim=1)
    (-(lp.gather(1, y[:, None]).squeeze(1)) * (g2 * rest).exp()).mean().backward()
    assert torch.allclose(g.grad, g2.grad, atol=1e-7) and torch.allclose(x.grad, x2.grad, atol=1e-7)
