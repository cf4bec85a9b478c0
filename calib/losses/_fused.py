"""The label's softmax statistics in one pass over the logits, with a cross-entropy-sized backward.

A loss of integer labels that depends on the logits ``x`` (M, K) only through a few per-row
numbers has a gradient that is a per-row mix of ``p`` (the softmax), ``p∘p`` and one-hot
columns; :class:`_LabelStats` computes those numbers from one ``exp`` pass and returns that
gradient from the saved ``e`` in one more pass, as ``F.cross_entropy`` does. With
``m = max_k x_k``, ``e_k = exp(x_k − m)`` and the label's entry zeroed (``e_y`` kept aside),
``s = Σ_{k≠y} e_k`` and ``S = s + e_y``:

* ``log p_y = (x_y − m) − log S`` (cross-entropy's formula) with ``log S = log1p(s + (e_y − 1))``,
  which is ``−log1p(s)`` where the label's logit is the largest (``e_y = 1``, as wherever
  ``p_y > 1/2``) and keeps the digits of a small cross-entropy;
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

The weighted cross-entropies ``L = −log p_y · exp(Λ)`` (focal, FLSD-53, inverse and dual
focal, BSCE, and their GRA twins with Λ held constant) are one autograd node,
:func:`weighted_ce`: the forward also computes ``dL/d(stat) = L·dΛ/d(stat)`` (plus ``−w`` on
``log p_y``) from each loss's closed-form ``dΛ``, and with them every per-row number of the
gradient, so the backward is one pass over ``e``. Dual focal's rival comes from float
arithmetic and one ``min`` (:func:`_rival`), not from a boolean mask.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

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
    return torch.where(num == 0, 0.0, num / den)


def _rival(x: Tensor, x_y: Tensor) -> Tensor:
    """``(M, 1)`` column of the largest logit strictly below the label's ``x_y`` (M, 1) (any
    column where there is none: the caller checks ``x_j < x_y``).

    ``1/(x_k − x_y)`` is negative exactly where ``x_k < x_y`` and smallest at the largest such
    ``x_k``; a tie gives ``1/(+0) = +inf`` (a zero ``x_y`` is taken as ``−0``, so that
    ``x_k − x_y`` is ``+0`` for a zero of either sign). Float arithmetic and one ``min``: a
    third of the cost of a boolean mask, ``where`` and ``argmax``. Rounding of ``1/d`` can tie
    two differences a relative ``2^-24`` apart (float32); then ``x_j`` may be the other one.
    """
    x_y = torch.where(x_y == 0, -0.0, x_y)
    return torch.sub(x, x_y).reciprocal_().min(dim=1, keepdim=True).indices


class _Saved(NamedTuple):
    """What the backward needs: ``e`` (M, K) with the label's entry zeroed, per-row ``e_y``,
    ``s``, ``S``, the rival's column ``j`` and ``Σ_{k≠y} e_k²`` (None unless asked for)."""

    e: Tensor
    e_y: Tensor
    s: Tensor
    big_s: Tensor
    j: Tensor | None
    r2: Tensor | None


def _stats(x: Tensor, y: Tensor, rival: bool, brier: bool) -> tuple[list[Tensor], _Saved]:
    """The statistics (module notes) and what their gradient needs, with no autograd graph."""
    col = y[:, None]
    x_y = x.gather(1, col)
    j = log_j = None
    if rival:
        j = _rival(x, x_y)
        has_rival = x.gather(1, j).squeeze(1) < x_y.squeeze(1)
    if x.shape[1] >= _LOG_SOFTMAX_FROM:  # torch's fused log_softmax, then e = p (S = 1)
        lp = F.log_softmax(x, dim=1)
        log_p = lp.gather(1, col).squeeze(1)
        if rival:
            log_j = lp.gather(1, j).squeeze(1)
        e = lp.exp_()
        e_y = log_p.exp()
        e.scatter_(1, col, 0.0)
        s = e.sum(dim=1)
        big_s, log_big_s = torch.ones_like(s), None
        out = [log_p, torch.log(s)]
    else:  # narrow rows, where torch's log_softmax is slow: max, one exp, one sum
        m = x.amax(dim=1, keepdim=True)
        e = torch.sub(x, m).exp_()
        e_y = e.gather(1, col).squeeze(1)
        e.scatter_(1, col, 0.0)
        s = e.sum(dim=1)
        big_s = s + e_y
        # log S = log1p(s + (e_y − 1)): exact in s where the label's logit is the largest (e_y = 1,
        # as in every row with p_y > 1/2), so log p_y = −log1p(s) there keeps a small loss's
        # digits; (x_y − m) − log S, not x_y − (m + log S), which would round at the scale of m
        log_big_s = torch.log1p(s + (e_y - 1))
        m = m.squeeze(1)
        out = [(x_y.squeeze(1) - m) - log_big_s, torch.log(s) - log_big_s]
        if rival:
            log_j = (x.gather(1, j).squeeze(1) - m) - log_big_s
    if rival:
        out.append(torch.where(has_rival, log_j, _NEG_INF))
        j = torch.where(has_rival[:, None], j, col)  # no rival: j = y, and its gradient is 0
    r2 = None
    if brier:
        r2 = torch.linalg.vector_norm(e, dim=1).square()
        sq = r2 + s * s
        out.append(torch.log(sq) if log_big_s is None else torch.log(sq) - 2 * log_big_s)
    return out, _Saved(e, e_y, s, big_s, None if j is None else j.squeeze(1), r2)


def _row_coefficients(sv: _Saved, y: Tensor, g: list[Tensor | None]) -> tuple[Tensor, ...]:
    """Per-row numbers of the gradient from ``g`` = d(loss)/d(statistic) (None: 0), in the order
    of :class:`Stats` (rival and Brier entries only where computed): the gradient is
    ``e_k (a + c e_k)`` off the label, ``label`` on it, plus ``g_j`` at the rival's column
    (``a`` already divided by ``S``; ``c`` is 0 without the Brier statistic)."""
    e_y, s, big_s = sv.e_y, sv.s, sv.big_s
    g_p = g[0] if g[0] is not None else torch.zeros_like(s)
    a, label = -g_p, g_p * s  # g_p(δ − p), times S: −g_p e_k off the label, g_p·s on it
    if g[1] is not None:  # g_rest·(−r)(δ − p), r = e_y/s
        t = g[1] * e_y
        a = a + _safe_div(t, s)
        label = label - t
    g_j = c = None
    if sv.j is not None and g[2] is not None:  # g_j(δ_j − p)
        g_j = torch.where(sv.j == y, 0.0, g[2])  # j = y marks "no rival"
        a = a - g_j
        label = label - g_j * e_y
    if sv.r2 is not None and g[-1] is not None:
        den = sv.r2 + s * s  # B·S²
        a = a + 2 * _safe_div(g[-1] * (e_y * s - sv.r2), den)
        c = 2 * _safe_div(g[-1], den)  # of e_k², i.e. 2 g_B/B of p_k²
        label = label - 2 * g[-1] * e_y
    return a / big_s, label / big_s, g_j, c


def _assemble(e: Tensor, j: Tensor | None, y: Tensor, a: Tensor, label: Tensor, g_j: Tensor | None,
              c: Tensor | None) -> Tensor:
    """The ``(M, K)`` gradient from :func:`_row_coefficients`: one pass over ``e``."""
    grad = e * a[:, None] if c is None else torch.addcmul(a[:, None], e, c[:, None]).mul_(e)
    grad.scatter_(1, y[:, None], label[:, None])
    if g_j is not None:
        grad.scatter_add_(1, j[:, None], g_j[:, None])
    return grad


def _with_nones(values: tuple[Tensor, ...], rival: bool, brier: bool) -> Stats:
    it = iter(values)
    log_p, log_rest = next(it), next(it)
    return Stats(log_p, log_rest, next(it) if rival else None, next(it) if brier else None)


class _LabelStats(torch.autograd.Function):
    """``(log p_y, log(1 − p_y)[, log p_j][, log ‖p − y‖²])`` of logits ``x`` (M, K), labels ``y``."""

    @staticmethod
    def forward(x: Tensor, y: Tensor, rival: bool, brier: bool) -> tuple[Tensor, ...]:
        out, sv = _stats(x, y, rival, brier)
        return (*out, *(t for t in sv if t is not None))

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
        sv = _Saved(e, e_y, s, big_s, extra[0] if ctx.rival else None, extra[-1] if ctx.brier else None)
        return _assemble(e, sv.j, y, *_row_coefficients(sv, y, g)), None, None, None


def _finite_log_rest(x: Tensor, y: Tensor, log_rest: Tensor) -> Tensor:
    """``log(1 − p_y)`` finite for finite logits: where every other ``exp`` underflowed (a
    margin above ~100 in float32) the one-exp sum is 0 and its log −inf, and a gradient
    taken through it, as γ-Net's γ is, is ``0 · −inf`` = NaN; there it is taken from
    ``log_softmax``, which never exponentiates the others (the plain formula's way)."""
    exact = torch.logsumexp(F.log_softmax(x, dim=1).scatter(1, y[:, None], _NEG_INF), dim=1)
    return torch.where(torch.isfinite(log_rest), log_rest, exact)


def label_stats(x: Tensor, y: Tensor, *, rival: bool = False, brier: bool = False) -> Stats:
    """:class:`Stats` of logits ``x`` (M, K) (float32/64) at integer labels ``y`` (M,)."""
    out = _LabelStats.apply(x, y, rival, brier)
    return _with_nones(out[: 2 + rival + brier], rival, brier)


#: ``log_weight(stats, grads)`` -> ``(Λ, dΛ)``: the log of a per-row weight and, where
#: ``grads``, its derivatives in the order of :class:`Stats` (None: Λ does not depend on it).
LogWeight = Callable[[Stats, bool], tuple[Tensor, tuple[Tensor | None, ...]]]


class _WeightedCE(torch.autograd.Function):
    """``L = −log p_y · exp(Λ)`` per row with a hand-written backward (the module notes): with
    ``g = dL/d(stat) = −w·δ_{log p_y} + L·dΛ`` (only ``−w`` when the weight is detached, GRA),
    the gradient is :func:`_assemble`'s, every per-row number computed in the forward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, y: Tensor, log_weight: LogWeight, rival: bool, brier: bool,
                detach: bool) -> Tensor:
        # ctx in the forward (not setup_context): the saved numbers are no outputs, which
        # would cost a pass of autograd bookkeeping each; torch.func goes the composed way
        out, sv = _stats(x, y, rival, brier)
        st = _with_nones(tuple(out), rival, brier)
        lam, d_lam = log_weight(st, not detach)
        w = lam.exp()
        loss = -st.log_p * w
        g: list[Tensor | None] = [-w, None, None, None]
        if not detach:  # dL/d(stat) = L·dΛ/d(stat), plus −w on log p_y
            for i, d in enumerate(d_lam):
                if d is not None:
                    g[i] = loss * d if g[i] is None else g[i] + loss * d
        a, label, g_j, c = _row_coefficients(sv, y, g[:2] + g[2:2 + rival] + g[3:3 + brier])
        ctx.log_weight, ctx.flags = log_weight, (rival, brier, detach)
        ctx.save_for_backward(x, y, sv.e, None if g_j is None else sv.j, a, label, g_j, c)
        return loss

    @staticmethod
    def backward(ctx: Any, go: Tensor) -> tuple[Tensor | None, ...]:
        x, y, e, j, a, label, g_j, c = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiate the composite formulas
            rival, brier, detach = ctx.flags
            st = _with_nones(_composite(x, y, rival, brier), rival, brier)
            lam = ctx.log_weight(st, False)[0]
            loss = -st.log_p * (lam.detach() if detach else lam).exp()
            (grad,) = torch.autograd.grad(loss, x, go, create_graph=True)
            return grad, None, None, None, None, None
        return (_assemble(e, j, y, a * go, label * go, None if g_j is None else g_j * go,
                          None if c is None else c * go), None, None, None, None, None)


def weighted_ce(x: Tensor, y: Tensor, log_weight: LogWeight, *, rival: bool = False, brier: bool = False,
                detach: bool = False, autograd: bool = False) -> Tensor:
    """``−log p_y · exp(Λ)`` (M,) for logits ``x`` (M, K) and integer labels ``y`` (M,), with
    ``Λ = log_weight(stats)`` held constant where ``detach`` (the GRA losses).

    Eager, the forward and backward are :class:`_WeightedCE`'s, one node of the autograd
    graph; under ``torch.compile`` (which fuses the per-row ops itself), under ``torch.func``
    transforms, or with ``autograd`` (Λ depends on a tensor that needs its own gradient,
    gamma-Net's γ) the value is composed from :func:`label_stats` and autograd differentiates it.
    """
    if autograd or torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        st = label_stats(x, y, rival=rival, brier=brier)
        if autograd:  # γ's gradient is L·log(1 − p_y): keep it finite where p_y rounds to 1
            st = st._replace(log_rest=_finite_log_rest(x, y, st.log_rest))
        lam = log_weight(st, False)[0]
        return -st.log_p * (lam.detach() if detach else lam).exp()
    return _WeightedCE.apply(x, y, log_weight, rival, brier, detach)
