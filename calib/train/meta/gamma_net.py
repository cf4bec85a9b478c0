"""The gamma-Net (Wang & Golebiowski 2024, Eqs. 3-4), the meta objectives and the look-ahead hypergradient."""
from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Literal, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..._checks import NonFiniteError, as_tensor, check_labels, check_nonnegative, check_positive_int, reads_values

if TYPE_CHECKING:
    pass


TAU = 0.01


OBJECTIVES = ("sece", "dece")


Order = Literal["second", "first"]


# --------------------------------------------------------------------------- gamma-Net
def gamma_from_features(features: Tensor, A: Tensor, W: Tensor, tau: float = TAU) -> Tensor:
    """Sample-wise gamma from penultimate features (Wang & Golebiowski (2024), §4.1, Eq. 3-4).

    ``a = x A`` (b x k), ``p = softmax(a)`` over the k heads, ``x~ = p A^T`` (b x d),
    ``gamma = |x~ W| / tau`` (b,). The absolute value keeps gamma >= 0 (Wang & Golebiowski (2024), §4.1).

    Args:
        features: ``(b, d)`` backbone features ``x``.
        A: ``(d, k)`` attention matrix.
        W: ``(d, 1)`` linear layer.
        tau: temperature > 0 (0.01 in Wang & Golebiowski (2024)).

    Returns:
        ``(b,)`` non-negative gammas.
    """
    x = as_tensor(features, "features")
    if not x.is_floating_point():
        raise TypeError(f"features must be a floating tensor, got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"features must have shape (b, d) with b >= 1, got {tuple(x.shape)}")
    if reads_values(x) and not bool(torch.isfinite(x).all()):  # no host sync per step on a GPU
        raise NonFiniteError("features contains NaN or inf values")
    if A.ndim != 2 or A.shape[0] != x.shape[1]:
        raise ValueError(f"A must have shape (d, k) = ({x.shape[1]}, k), got {tuple(A.shape)}")
    if W.shape != (x.shape[1], 1):
        raise ValueError(f"W must have shape (d, 1) = ({x.shape[1]}, 1), got {tuple(W.shape)}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    p = torch.softmax(x @ A, dim=1)
    x_tilde = p @ A.T
    return (x_tilde @ W).abs().squeeze(1) / tau


class GammaNet(nn.Module):
    """gamma-Net of Wang & Golebiowski (2024), §4.1: k-head attention ``A`` then a linear layer ``W``, Eq. (3)-(4).

    Args:
        in_features: ``d``, the backbone's penultimate width (512 for Wang & Golebiowski (2024)'s ResNet-18).
        num_heads: ``k``; Wang & Golebiowski (2024) sets it to the number of classes.
        tau: temperature of Eq. (4), 0.01 in Wang & Golebiowski (2024).
        init_gamma: the gamma every input gets at initialisation (1.0 in Wang & Golebiowski (2024), §5).
        generator: optional random generator for a reproducible initialisation.

    At initialisation every head vector ``A_j`` has the same projection ``tau * init_gamma``
    onto ``W``; since ``x~`` is a convex combination of the heads, gamma equals
    ``init_gamma`` exactly for every input (see the module docstring, choice 2).
    """

    def __init__(
        self,
        in_features: int,
        num_heads: int,
        *,
        tau: float = TAU,
        init_gamma: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.in_features = check_positive_int(in_features, "in_features")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
            raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
        self.tau = float(tau)
        self.init_gamma = check_nonnegative(init_gamma, "init_gamma")
        self.A = nn.Parameter(torch.empty(self.in_features, self.num_heads))
        self.W = nn.Parameter(torch.empty(self.in_features, 1))
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Random ``A``, ``W`` (std ``1/sqrt(d)``), then every ``A_j . W = tau * init_gamma``."""
        d = self.in_features
        A = torch.randn(d, self.num_heads, generator=generator) / math.sqrt(d)
        W = torch.randn(d, 1, generator=generator) / math.sqrt(d)
        target = self.tau * self.init_gamma
        A += W * (target - W.T @ A) / (W.T @ W)  # shift each column along W
        self.A.copy_(A)
        self.W.copy_(W)

    def forward(self, features: Tensor) -> Tensor:
        """``(b, d)`` features -> ``(b,)`` gammas (Wang & Golebiowski (2024), Eq. 3-4)."""
        return gamma_from_features(features, self.A, self.W, self.tau)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_heads={self.num_heads}, tau={self.tau}"


# --------------------------------------------------------------------------- objectives
def meta_objective(logits: Tensor, labels: Tensor, objective: str = "sece", *, bandwidth: float = 0.01) -> Tensor:
    """The differentiable calibration error the gamma-Net minimises (Wang & Golebiowski (2024), §4.2-4.3).

    ``"sece"``: SECE of Wang & Golebiowski (2024), Eq. (5)-(7) on the softmax of ``logits`` with a Gaussian kernel
    of ``bandwidth`` h (0.01 in Wang & Golebiowski (2024), §5). ``"dece"``: Bohdal et al.'s differentiable ECE
    (Wang & Golebiowski (2024)'s FL_gamma-DECE baseline). Returns a 0-dim tensor differentiable in ``logits``.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "sece":
        from ...metrics import sece_loss

        return sece_loss(torch.softmax(logits, dim=1), labels, bandwidth=bandwidth)
    from ...losses import dece_loss

    return dece_loss(logits, labels)


def _focal(logits: Tensor, labels: Tensor, gamma: Tensor) -> Tensor:
    from ...losses import focal_loss

    return focal_loss(logits, labels, gamma=gamma, reduction="mean")


# --------------------------------------------------------------------------- look-ahead
def check_backbone(model: nn.Module) -> None:
    """A backbone the look-ahead can split: ``.features(x)`` and a ``.classifier`` module."""
    if not (hasattr(model, "features") and isinstance(getattr(model, "classifier", None), nn.Module)):
        raise TypeError(
            "model must expose .features(x) -> (B, d) and a .classifier module "
            f"(forward = classifier(features(x))), got {type(model).__name__}"
        )


def check_batch(x: Tensor, y: Tensor, num_classes: int, xname: str, yname: str) -> Tensor:
    """A non-empty, finite batch ``x`` and its labels as a long tensor on ``x``'s device."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{xname} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape[0] == 0:
        raise ValueError(f"{xname} is empty")
    if x.is_floating_point() and reads_values(x) and not bool(torch.isfinite(x).all()):
        raise NonFiniteError(f"{xname} contains NaN or inf values")
    return check_labels(as_tensor(y, yname).to(x.device), x.shape[0], num_classes, yname, per_step=True)


def check_order(order: str) -> None:
    """The hypergradient order: ``"second"`` (exact) or ``"first"`` (finite difference)."""
    if order not in ("second", "first"):
        raise ValueError(f"order must be 'second' (exact) or 'first' (finite difference), got {order!r}")


def lookahead(params: dict[str, Tensor], grads: Sequence[Tensor], lr: float) -> dict[str, Tensor]:
    """One plain gradient step ``theta' = theta - lr * g`` on a name -> tensor dict."""
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr (the look-ahead step alpha) must be a finite number > 0, got {lr}")
    if len(grads) != len(params):
        raise ValueError(f"grads has {len(grads)} entries but params has {len(params)}")
    return {name: p - lr * g for (name, p), g in zip(params.items(), grads)}


def buffer_copies(model: nn.Module) -> dict[str, Tensor]:
    """Copies of the buffers, so a functional forward cannot move the running statistics."""
    return {name: b.clone() for name, b in model.named_buffers()}


def _forward_inner(model: nn.Module, gamma_net: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Backbone logits at theta (with graph) and gamma from the *detached* features."""
    features = model.features(x)
    logits = model.classifier(features)
    gamma = gamma_net(features.detach())
    return logits, gamma, features.detach()


def hypergradient(
    model: nn.Module,
    gamma_net: nn.Module,
    x: Tensor,
    y: Tensor,
    x_meta: Tensor,
    y_meta: Tensor,
    *,
    lr: float,
    objective: str = "sece",
    bandwidth: float = 0.01,
    order: Order = "second",
    fd_eps: float = 0.01,
) -> dict[str, object]:
    """d SECE(f_{theta'}(x_meta)) / d phi through a one-step look-ahead (Wang & Golebiowski (2024), §3.3, Eq. 2).

    ``theta' = theta - lr * grad_theta L_FL(theta, gamma_phi)``; the meta-loss is the
    ``objective`` on the meta-validation batch at ``theta'``; by the chain rule

        d meta / d phi = -lr * (d/dphi <grad_theta L_FL(theta, gamma_phi), v>),
        v = grad_{theta'} meta.

    ``order="second"`` differentiates through the inner gradient (``create_graph=True``),
    exactly. ``order="first"`` approximates the mixed derivative with first derivatives
    only (DARTS, Liu et al. 2019, Eq. 8): ``(grad_phi L_FL(theta + e v) -
    grad_phi L_FL(theta - e v)) / 2e`` with ``e = fd_eps / ||v||``.

    Returns a dict with ``grads`` (one tensor per gamma-Net parameter), ``meta_loss``
    (0-dim, at theta'), ``loss`` (0-dim, focal loss at theta), ``gamma`` (detached,
    ``(b,)``), ``logits`` (the training-batch logits at theta, still attached to the
    backbone's graph so the caller can reuse them) and ``features`` (detached).
    """
    check_backbone(model)
    check_order(order)
    if not math.isfinite(fd_eps) or fd_eps <= 0:
        raise ValueError(f"fd_eps must be a finite number > 0, got {fd_eps}")
    num_classes = model.classifier.out_features if hasattr(model.classifier, "out_features") else None
    if num_classes is None:
        raise TypeError("model.classifier must be an nn.Linear (it needs .out_features)")
    y = check_batch(x, y, num_classes, "x", "y")
    y_meta = check_batch(x_meta, y_meta, num_classes, "x_meta", "y_meta")
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    phi = [p for p in gamma_net.parameters() if p.requires_grad]
    if not trainable or not phi:
        raise ValueError("model and gamma_net must both have parameters that require grad")
    names, theta = zip(*trainable)

    logits, gamma, features = _forward_inner(model, gamma_net, x)
    loss = _focal(logits, y, gamma)
    second = order == "second"
    g = torch.autograd.grad(loss, theta, create_graph=second, retain_graph=True)
    params = dict(zip(names, theta))
    if second:
        fast = lookahead(params, g, lr)
    else:
        fast = {n: t.detach().requires_grad_() for n, t in lookahead(params, g, lr).items()}
    meta_logits = functional_call(model, {**fast, **buffer_copies(model)}, (x_meta,))
    meta = meta_objective(meta_logits, y_meta, objective, bandwidth=bandwidth)
    if second:
        grads = torch.autograd.grad(meta, phi, retain_graph=True, allow_unused=True)
    else:
        v = torch.autograd.grad(meta, list(fast.values()), allow_unused=True)
        v = [torch.zeros_like(t) if d is None else d for t, d in zip(fast.values(), v)]
        grads = _finite_difference(model, params, v, x, y, gamma, lr, fd_eps, phi)
    grads = tuple(torch.zeros_like(p) if gr is None else gr for p, gr in zip(phi, grads))
    return {
        "grads": grads,
        "meta_loss": meta.detach(),
        "loss": loss.detach(),
        "gamma": gamma.detach(),
        "logits": logits,
        "features": features,
    }


def _finite_difference(
    model: nn.Module,
    params: dict[str, Tensor],
    v: Sequence[Tensor],
    x: Tensor,
    y: Tensor,
    gamma: Tensor,
    lr: float,
    fd_eps: float,
    phi: list[Tensor],
) -> tuple[Tensor | None, ...]:
    """``-lr * (grad_phi L(theta + e v) - grad_phi L(theta - e v)) / 2e`` (DARTS Eq. 8)."""
    norm = torch.sqrt(sum((t.detach() ** 2).sum() for t in v))
    # v = 0 makes theta +- eps v equal, so the difference and the gradient are 0; clamping
    # the norm (instead of testing it with float(norm), a host sync) keeps eps finite.
    eps = fd_eps / norm.clamp_min(torch.finfo(norm.dtype).tiny)
    with torch.no_grad():
        plus = {n: p + eps * t for (n, p), t in zip(params.items(), v)}
        minus = {n: p - eps * t for (n, p), t in zip(params.items(), v)}
        logits_plus = functional_call(model, {**plus, **buffer_copies(model)}, (x,))
        logits_minus = functional_call(model, {**minus, **buffer_copies(model)}, (x,))
    diff = _focal(logits_plus, y, gamma) - _focal(logits_minus, y, gamma)
    grads = torch.autograd.grad(diff, phi, allow_unused=True)
    return tuple(None if gr is None else -lr * gr / (2 * eps) for gr in grads)


class TinyBackbone(nn.Module):
    """A two-layer backbone with the calib.models protocol, ``forward(x) = classifier(features(x))``.

    ``features`` is ``tanh(x W1 + b1)`` (``in_features -> hidden``), ``classifier`` a linear
    layer to ``num_classes`` logits: the smallest model a hypergradient can be checked on.
    """

    def __init__(self, in_features: int = 5, hidden: int = 6, num_classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh())
        self.classifier = nn.Linear(hidden, num_classes)

    def features(self, x: Tensor) -> Tensor:
        return self.body(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def check_hypergradient(
    model: nn.Module,
    gamma_net: GammaNet,
    batch: Sequence[Tensor],
    *,
    lr: float,
    bandwidth: float = 0.01,
    directions: int = 3,
    eps: float = 1e-6,
    fd_eps: float = 1e-4,
    seed: int = 1,
) -> list[dict[str, float]]:
    """The hypergradient along random directions u of (A, W): exact, first order and a finite difference.

    For each direction ``u`` the finite difference of the meta-loss M(phi) of :func:`hypergradient`,
    ``(M(phi + eps u) - M(phi - eps u)) / 2 eps``, is set beside ``<grad_phi M, u>`` from
    ``order="second"`` (exact) and ``order="first"`` (DARTS, with ``fd_eps``); Wang &
    Golebiowski (2024), §3.3. ``batch`` is ``(x, y, x_meta, y_meta)``; use float64 so that
    the finite difference is accurate to about ``eps**2``.

    Returns:
        one dict per direction with the keys ``"finite difference"``, ``"exact"`` and
        ``"first order"``.
    """
    if len(batch) != 4:
        raise ValueError(f"batch must be (x, y, x_meta, y_meta), got {len(batch)} tensors")
    directions = check_positive_int(directions, "directions")
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps}")
    kw = dict(lr=lr, bandwidth=bandwidth)
    exact = hypergradient(model, gamma_net, *batch, **kw)["grads"]
    first = hypergradient(model, gamma_net, *batch, **kw, order="first", fd_eps=fd_eps)["grads"]

    def meta_loss(A: Tensor, W: Tensor) -> float:
        probe = copy.deepcopy(gamma_net)
        with torch.no_grad():
            probe.A.copy_(A)
            probe.W.copy_(W)
        return float(hypergradient(model, probe, *batch, **kw)["meta_loss"])

    A, W = gamma_net.A.detach(), gamma_net.W.detach()
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(directions):
        uA = torch.randn(A.shape, generator=g, dtype=A.dtype).to(A.device)
        uW = torch.randn(W.shape, generator=g, dtype=W.dtype).to(W.device)
        numeric = (meta_loss(A + eps * uA, W + eps * uW) - meta_loss(A - eps * uA, W - eps * uW)) / (2 * eps)
        rows.append({"finite difference": numeric,
                     "exact": float((exact[0] * uA).sum() + (exact[1] * uW).sum()),
                     "first order": float((first[0] * uA).sum() + (first[1] * uW).sum())})
    return rows


def meta_step(
    model: nn.Module,
    gamma_net: nn.Module,
    x: Tensor,
    y: Tensor,
    x_meta: Tensor,
    y_meta: Tensor,
    optimizer: torch.optim.Optimizer,
    meta_optimizer: torch.optim.Optimizer,
    *,
    lookahead_lr: float | None = None,
    objective: str = "sece",
    bandwidth: float = 0.01,
    order: Order = "second",
    fd_eps: float = 0.01,
) -> dict[str, Tensor]:
    """One meta-training iteration (Wang & Golebiowski 2024, §3.3, Eq. 2): look-ahead, gamma-Net step,
    backbone step.

    1. gamma = gammaNet(h_theta(x)); theta' = theta - alpha grad_theta L_FL(theta, gamma);
    2. phi <- meta_optimizer step on d objective(f_{theta'}(x_meta), y_meta) / d phi;
    3. theta <- optimizer step on L_FL(theta, gammaNet_{phi_new}(h_theta(x))), gamma detached.

    ``alpha`` (``lookahead_lr``) defaults to the backbone optimiser's current learning rate.
    Returns detached 0-dim tensors (no host sync on a GPU): ``loss`` (focal loss of the real
    update), ``acc`` (training-batch accuracy at theta), ``meta_loss`` (objective at theta',
    before the gamma-Net step), ``gamma_mean`` and ``gamma_std`` (of the new gamma).
    """
    alpha = optimizer.param_groups[0]["lr"] if lookahead_lr is None else lookahead_lr
    out = hypergradient(
        model, gamma_net, x, y, x_meta, y_meta,
        lr=float(alpha), objective=objective, bandwidth=bandwidth, order=order, fd_eps=fd_eps,
    )
    phi = [p for p in gamma_net.parameters() if p.requires_grad]
    meta_optimizer.zero_grad(set_to_none=True)
    for p, gr in zip(phi, out["grads"]):
        p.grad = gr.detach()
    meta_optimizer.step()

    with torch.no_grad():
        gamma = gamma_net(out["features"])
    y = as_tensor(y, "y").to(x.device).long()
    loss = _focal(out["logits"], y, gamma)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return {
        "loss": loss.detach(),
        "acc": (out["logits"].detach().argmax(1) == y).float().mean(),
        "meta_loss": out["meta_loss"],
        "gamma_mean": gamma.mean(),
        "gamma_std": gamma.std(unbiased=False),
    }


# --------------------------------------------------------------------------- 8:1:1 split
def split_811(n: int, *, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> tuple[Tensor, Tensor, Tensor]:
    """Indices of a seeded random train / validation / meta-validation split (Wang & Golebiowski (2024), §5: 8:1:1).

    Sizes are ``round(n * f)`` for validation and meta-validation, the rest for training;
    each part gets at least one index. Returns three disjoint int64 index tensors.
    """
    n = check_positive_int(n, "n", minimum=3)
    if len(fractions) != 3 or any((not math.isfinite(f)) or f <= 0 for f in fractions):
        raise ValueError(f"fractions must be three positive numbers, got {fractions!r}")
    total = sum(fractions)
    n_val = max(1, round(n * fractions[1] / total))
    n_meta = max(1, round(n * fractions[2] / total))
    if n - n_val - n_meta < 1:
        raise ValueError(f"n = {n} is too small for a three-way split")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[: n - n_val - n_meta], perm[n - n_val - n_meta : n - n_meta], perm[n - n_meta :]


def meta_split(x: Tensor, y: Tensor, *, seed: int = 0) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """Split ``(x, y)`` 8:1:1 into ``(train, val, meta_val)`` pairs (Wang & Golebiowski (2024), §5)."""
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise TypeError("x and y must be torch tensors")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
    parts = split_811(x.shape[0], seed=seed)
    return tuple((x[i.to(x.device)], y[i.to(y.device)]) for i in parts)  # type: ignore[return-value]
