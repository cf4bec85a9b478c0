"""The label's softmax statistics in one pass over the logits, with a cross-entropy-sized backward.

A loss of integer labels that depends on the logits ``x`` (M, K) only through a few per-row
numbers has a gradient that is a per-row mix of ``p`` (the softmax), ``p∘p`` and one-hot
columns; :class:`_LabelStats` computes those numbers from one ``exp`` pass and returns that
gradient from the saved ``e`` in one more pass, as ``F.cross_entropy`` does. With
``m = max_k x_k``, ``e_k = exp(x_k − m)`` and the label's entry zeroed (``e_y`` kept aside),
``s = Σ_{k≠y} e_k`` and ``S = s + e_y``:

* ``log p_y = x_y − m − log S`` (cross-entropy's formula), and ``−log1p(s/e_y)`` where
  ``p_y > 1/2``, which keeps the digits of a small cross-entropy;
* ``log(1 − p_y) = log s − log S``: a sum of the other classes, no ``1 − p_y`` cancellation,
  so it keeps its digits as ``p_y → 1`` (Lin et al. (2024), §4, need it at ``γ < 1``);
* ``log p_j``, ``p_j`` the largest probability strictly below ``p_y`` (dual focal's rival,
  :func:`calib.losses.uncertainty.u_dfl`; ``−inf`` when there is none): ``x_j − m − log S``;
* ``log ‖p − y‖² = log(Σ_{k≠y} e_k² + s²) − 2 log S`` (Brier score, u_gBS with β = 2).

Gradients (``δ`` the one-hot of ``y``, ``r = p_y/(1 − p_y) = e_y/s``, ``B = ‖p − y‖²``,
``R = Σ_{k≠y} p_k²``, ``D = p_y(1 − p_y) − R``): ``∇ log p_y = δ − p``,
``∇ log(1 − p_y) = −r(δ − p)``, ``∇ log p_j = δ_j − p``, and ``∇ log B`` is
``2 p_k (p_k + D)/B`` off the label and ``−2 p_y`` on it (from ``B = Σ_k p_k² − 2p_y + 1``;
each term a sum of non-negative parts, so it too keeps its digits as ``p_y → 1``).
Under ``create_graph`` (gamma-Net's hypergradient) the backward differentiates the
composite log-space formulas instead, so every order of derivative is exact.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

_NEG_INF = float("-inf")
#: From this many classes on, the forward starts from torch's fused ``log_softmax`` (then
#: ``e = p``, ``S = 1``); below it, from one max and one exp (faster on narrow rows).
_LOG_SOFTMAX_FROM = 256


class Stats(NamedTuple):
    """Per-row ``(M,)`` statistics; ``log_rival``/``log_brier`` are None unless asked for."""

    log_p: Tensor
    log_rest: Tensor
    log_rival: Tensor | None
    log_brier: Tensor | None


def _composite(x: Tensor, y: Tensor, rival: bool, brier: bool) -> tuple[Tensor, ...]:
    """The same statistics from differentiable torch ops (the reference and double backward)."""
    lp = F.log_softmax(x, dim=1)
    col = y[:, None]
    log_p = lp.gather(1, col).squeeze(1)
    others = lp.scatter(1, col, _NEG_INF)
    log_rest = torch.logsumexp(others, dim=1)
    out = [log_p, log_rest]
    if rival:
        out.append(lp.masked_fill(x >= x.gather(1, col), _NEG_INF).amax(dim=1))
    if brier:
        out.append(torch.logaddexp(torch.logsumexp(2 * others, dim=1), 2 * log_rest))
    return tuple(out)


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    """``num/den``, 0 where ``num`` is 0 (a zero upstream gradient where ``den`` underflowed)."""
    return torch.where(num == 0, torch.zeros_like(num), num / den)


class _LabelStats(torch.autograd.Function):
    """``(log p_y, log(1 − p_y)[, log p_j][, log ‖p − y‖²])`` of logits ``x`` (M, K), labels ``y``."""

    @staticmethod
    def forward(x: Tensor, y: Tensor, rival: bool, brier: bool) -> tuple[Tensor, ...]:
        col = y[:, None]
        x_y = x.gather(1, col)
        extra: list[Tensor] = []
        if rival:  # the largest logit strictly below the label's (ties are not below)
            j = torch.where(x < x_y, x, _NEG_INF).argmax(dim=1, keepdim=True)
            has_rival = x.gather(1, j).squeeze(1) < x_y.squeeze(1)
            extra.append(j.squeeze(1))
        if x.shape[1] >= _LOG_SOFTMAX_FROM:  # torch's fused log_softmax, then e = p (S = 1)
            lp = F.log_softmax(x, dim=1)
            log_p = lp.gather(1, col).squeeze(1)
            log_j = lp.gather(1, j).squeeze(1) if rival else None
            e = lp.exp_()
            e_y = log_p.exp()
            e.scatter_(1, col, 0.0)
            s = e.sum(dim=1)
            log_big_s = None
            out = [log_p, torch.log(s)]
        else:  # narrow rows, where torch's log_softmax is slow: max, one exp, one sum
            m = x.amax(dim=1, keepdim=True)
            e = torch.sub(x, m).exp_()
            e_y = e.gather(1, col).squeeze(1)
            e.scatter_(1, col, 0.0)
            s = e.sum(dim=1)
            log_big_s = torch.log(s + e_y)
            shift = m.squeeze(1) + log_big_s
            # where p_y > 1/2, log p_y = −log1p(s/e_y) keeps the digits that x_y − m − log S loses
            log_p = torch.where(e_y > s, -torch.log1p(s / e_y), x_y.squeeze(1) - shift)
            out = [log_p, torch.log(s) - log_big_s]
            log_j = x.gather(1, j).squeeze(1) - shift if rival else None
        if rival:
            out.append(torch.where(has_rival, log_j, _NEG_INF))
        if brier:
            r2 = torch.linalg.vector_norm(e, dim=1).square()
            sq = r2 + s * s
            out.append(torch.log(sq) if log_big_s is None else torch.log(sq) - 2 * log_big_s)
            extra.append(r2)
        big_s = torch.ones_like(s) if log_big_s is None else s + e_y
        return (*out, e, e_y, s, big_s, *extra)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        x, y, rival, brier = inputs
        n_out = 2 + rival + brier
        ctx.rival, ctx.brier = rival, brier
        ctx.save_for_backward(x, y, *output[n_out:])
        ctx.mark_non_differentiable(*output[n_out:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, None, None, None]:
        x, y, e, e_y, s, big_s, *extra = ctx.saved_tensors
        n_out = 2 + ctx.rival + ctx.brier
        g = list(grads[:n_out])
        if all(gr is None for gr in g):
            return None, None, None, None
        if torch.is_grad_enabled():  # create_graph: differentiate the composite formulas
            outs = _composite(x, y, ctx.rival, ctx.brier)
            pairs = [(o, gr) for o, gr in zip(outs, g) if gr is not None]
            (grad,) = torch.autograd.grad([o for o, _ in pairs], x, [gr for _, gr in pairs], create_graph=True)
            return grad, None, None, None
        zero = torch.zeros_like(s)
        g_p, g_rest = (gr if gr is not None else zero for gr in g[:2])
        # off the label: p_k · (a + b p_k) (+ g_j at the rival); on it: `label`
        a = _safe_div(g_rest * e_y, s) - g_p  # −g_p + g_rest·r
        label = (g_p * s - g_rest * e_y) / big_s  # g_p(1 − p_y) − g_rest·p_y
        j = g_j = coef = None
        if ctx.rival and g[2] is not None:
            j = extra[0]
            has_rival = x.gather(1, j[:, None]) < x.gather(1, y[:, None])  # else j is no rival
            g_j = torch.where(has_rival.squeeze(1), g[2], zero)
            a = a - g_j
            label = label - g_j * e_y / big_s
        if ctx.brier and g[-1] is not None:
            r2 = extra[-1]
            den = r2 + s * s  # B·S²
            a = a + 2 * _safe_div(g[-1] * (e_y * s - r2), den)
            coef = 2 * _safe_div(g[-1], den)  # of e_k², i.e. 2 g_B/B of p_k²
            label = label - 2 * g[-1] * e_y / big_s
        scale = (a / big_s)[:, None]
        grad = e * scale if coef is None else torch.addcmul(scale, e, coef[:, None]).mul_(e)
        grad.scatter_(1, y[:, None], label[:, None])
        if j is not None:
            grad.scatter_add_(1, j[:, None], g_j[:, None])
        return grad, None, None, None


def label_stats(x: Tensor, y: Tensor, *, rival: bool = False, brier: bool = False) -> Stats:
    """:class:`Stats` of logits ``x`` (M, K) (float32/64) at integer labels ``y`` (M,)."""
    out = _LabelStats.apply(x, y, rival, brier)
    n_out = 2 + rival + brier
    vals = list(out[:n_out])
    return Stats(vals[0], vals[1], vals[2] if rival else None, vals[-1] if brier else None)
