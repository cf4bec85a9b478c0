"""The fused label statistics behind the focal family, dual focal, BSCE and Brier
(calib.losses._fused): values equal the plain torch formulas, first and second derivatives
check against finite differences (float64), tied logits included."""
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from calib.losses import _fused
from calib.losses._fused import _composite, label_stats


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
