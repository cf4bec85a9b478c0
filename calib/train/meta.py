"""Meta-regularisation: a gamma-Net learns a focal-loss gamma for every sample (Wang & Golebiowski 2024).

Wang & Golebiowski (2024) ("Towards unbiased calibration using meta-regularization") train a backbone
``f_theta`` with focal loss whose gamma comes, sample by sample, from a small meta-network
(gamma-Net, parameters ``phi``). The gamma-Net is trained to minimise a smooth,
differentiable calibration error (SECE, Wang & Golebiowski (2024), §4.2) measured on a held-out *meta-validation*
batch, through a one-step look-ahead of the backbone (Wang & Golebiowski (2024), §3.3, Eq. 2; the scheme of
Luketina et al. 2016 that Wang & Golebiowski (2024) cites, also used by Bohdal et al.'s meta-calibration)::

    gamma_i <- gammaNet_phi(h_theta(x_i))     (Wang & Golebiowski (2024), Eq. 3-4)
    theta'  <- theta - alpha * grad_theta L_FL(theta, gamma(phi))     (look-ahead)
    phi     <- phi - meta-step on  d/dphi SECE(f_theta'(x_meta), y_meta)
    theta   <- optimiser step on L_FL(theta, gamma(phi_new))     (the real update)

No public implementation of Wang & Golebiowski (2024) exists; this module is written from the paper. Where the
paper is exact we follow it; where it is silent these are **our choices**:

1. *gamma-Net layout* (Wang & Golebiowski (2024), Eq. 3-4, exact): ``a = x A``, ``p = softmax(a)``,
   ``x~ = p A^T``, ``gamma = |x~ W| / tau`` with ``A`` in R^{d x k}, ``W`` in R^{d x 1},
   ``tau = 0.01`` and ``k`` = number of classes (Wang & Golebiowski (2024), §5). No bias terms (none in Eq. 4).
2. *Initialisation to gamma = 1* (Wang & Golebiowski (2024), §5 says "We initialize gamma = 1.0", not how).
   ``x~`` is a convex combination of the k columns ``A_j`` of ``A`` (the softmax weights
   sum to 1), so ``x~ W = sum_j p_j (A_j . W)``. We draw ``A`` and ``W`` at random and then
   shift every column along ``W`` so that ``A_j . W = tau * gamma0`` for all j. Then
   ``gamma = gamma0`` *exactly*, for every input, at initialisation, while the heads still
   differ in every direction orthogonal to ``W`` (so the gamma-Net can learn to spread).
3. *Features are detached* before entering the gamma-Net: gamma depends on theta only
   through its input values, not through gradients. Otherwise the inner step would also
   train the backbone to change its features so as to raise gamma and shrink the focal loss.
4. *The look-ahead step* is plain gradient descent with ``alpha`` = the backbone
   optimiser's current learning rate (momentum and weight decay are left out of the
   look-ahead, as in Luketina et al.), on the same training batch as the real update.
5. *Order of updates*: look-ahead, gamma-Net update, then the real backbone update with
   the gamma of the *updated* gamma-Net on the same batch (Wang & Golebiowski (2024), §3.3 describes the two
   updates but not their order; Algorithm 1 of its supplement is not available to us).
6. *Hypergradient*: exact second order by default (``create_graph=True`` through the
   inner gradient). ``order="first"`` uses first derivatives only: the mixed second
   derivative is replaced by a central finite difference of first derivatives, as in
   DARTS (Liu et al. 2019, Eq. 7-8). The MAML-style "first-order" shortcut (treat
   theta' as independent of phi) is *not* offered: SECE does not depend on phi directly
   (Wang & Golebiowski (2024), §3.3), so that shortcut gives a hypergradient of exactly zero.
7. *Meta-optimiser*: Adam (Wang & Golebiowski (2024) cites Kingma & Ba but gives no learning rate), with Adam's
   own default learning rate ``1e-3``. Note that ``tau = 0.01`` makes gamma move 100 times
   faster than ``x~ W``: on a toy problem 1e-3 learned useful gammas where 1e-4 barely
   moved them, but it also let gamma run away on one seed in three (chapter 8).
8. *BatchNorm in the look-ahead*: the backbone runs in its current mode on the
   meta-validation batch, with *copies* of its buffers, so the running statistics are
   updated only by the real training batch.
9. *Focal loss reduction*: the mean over the batch.
10. *Split*: the training set is split 8:1:1 into train / validation / meta-validation
    (Wang & Golebiowski (2024), §5) by a seeded random permutation; validation drives model selection, the
    meta-validation split feeds SECE.

The objective may be swapped: ``objective="dece"`` gives Wang & Golebiowski (2024)'s FL_gamma-DECE baseline
(Bohdal et al.'s differentiable ECE in place of SECE).
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .._checks import as_tensor, check_labels, check_nonnegative, check_positive, check_positive_int, reads_values
from .trainer import CheckpointError, TrainConfig, Trainer

if TYPE_CHECKING:
    from ..data import DeviceLoader, Splits

__all__ = [
    "L2MetaTrainer",
    "L2_DEFAULTS",
    "l2_penalty",
    "l2_hypergradient",
    "l2_meta_step",
    "TAU",
    "OBJECTIVES",
    "gamma_from_features",
    "GammaNet",
    "meta_objective",
    "lookahead",
    "hypergradient",
    "meta_step",
    "split_811",
    "meta_split",
    "MetaTrainer",
    "META_DEFAULTS",
]

TAU = 0.01
"""gamma-Net temperature of Wang & Golebiowski (2024), Eq. (4) and §5."""

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
        raise ValueError("features contains NaN or inf values")
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
        from ..metrics import sece_loss

        return sece_loss(torch.softmax(logits, dim=1), labels, bandwidth=bandwidth)
    from ..losses import dece_loss

    return dece_loss(logits, labels)


def _focal(logits: Tensor, labels: Tensor, gamma: Tensor) -> Tensor:
    from ..losses import focal_loss

    return focal_loss(logits, labels, gamma=gamma, reduction="mean")


# --------------------------------------------------------------------------- look-ahead
def _check_backbone(model: nn.Module) -> None:
    if not (hasattr(model, "features") and isinstance(getattr(model, "classifier", None), nn.Module)):
        raise TypeError(
            "model must expose .features(x) -> (B, d) and a .classifier module "
            f"(forward = classifier(features(x))), got {type(model).__name__}"
        )


def _check_batch(x: Tensor, y: Tensor, num_classes: int, xname: str, yname: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{xname} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape[0] == 0:
        raise ValueError(f"{xname} is empty")
    if x.is_floating_point() and reads_values(x) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{xname} contains NaN or inf values")
    return check_labels(as_tensor(y, yname).to(x.device), x.shape[0], num_classes, yname, per_step=True)


def _check_order(order: str) -> None:
    if order not in ("second", "first"):
        raise ValueError(f"order must be 'second' (exact) or 'first' (finite difference), got {order!r}")


def lookahead(params: dict[str, Tensor], grads: Sequence[Tensor], lr: float) -> dict[str, Tensor]:
    """One plain gradient step ``theta' = theta - lr * g`` on a name -> tensor dict."""
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr (the look-ahead step alpha) must be a finite number > 0, got {lr}")
    if len(grads) != len(params):
        raise ValueError(f"grads has {len(grads)} entries but params has {len(params)}")
    return {name: p - lr * g for (name, p), g in zip(params.items(), grads)}


def _buffers(model: nn.Module) -> dict[str, Tensor]:
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
    _check_backbone(model)
    _check_order(order)
    if not math.isfinite(fd_eps) or fd_eps <= 0:
        raise ValueError(f"fd_eps must be a finite number > 0, got {fd_eps}")
    num_classes = model.classifier.out_features if hasattr(model.classifier, "out_features") else None
    if num_classes is None:
        raise TypeError("model.classifier must be an nn.Linear (it needs .out_features)")
    y = _check_batch(x, y, num_classes, "x", "y")
    y_meta = _check_batch(x_meta, y_meta, num_classes, "x_meta", "y_meta")
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
    meta_logits = functional_call(model, {**fast, **_buffers(model)}, (x_meta,))
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
        logits_plus = functional_call(model, {**plus, **_buffers(model)}, (x,))
        logits_minus = functional_call(model, {**minus, **_buffers(model)}, (x,))
    diff = _focal(logits_plus, y, gamma) - _focal(logits_minus, y, gamma)
    grads = torch.autograd.grad(diff, phi, allow_unused=True)
    return tuple(None if gr is None else -lr * gr / (2 * eps) for gr in grads)


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


# --------------------------------------------------------------------------- trainer
def _check_saved_settings(state: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse to resume a meta run under other meta settings than its checkpoint's."""
    saved = state.get("meta_settings", {})
    if saved != current:
        raise CheckpointError(
            f"checkpoint was trained with meta settings {saved}, this run has {current}; "
            "use the same settings or another out="
        )


def _check_meta_config(config: Any, meta: str, needs: str) -> None:
    """A valid :class:`TrainConfig` for a meta trainer: ``config.meta == meta``, a known objective."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    config.validate()
    if config.meta != meta:
        raise ValueError(f"{needs}, got {config.meta!r}")
    if config.meta_objective not in OBJECTIVES:
        raise ValueError(
            f"config.meta_objective must be one of {', '.join(OBJECTIVES)}, got {config.meta_objective!r}"
        )


class MetaTrainer(Trainer):
    """:class:`calib.train.Trainer` with gamma-Net meta-regularisation (Wang & Golebiowski (2024), §3.3, §4.3).

    Same run directory, checkpoints, resume, history and run record as an ordinary run
    (``python -m calib train --meta gamma_net --meta-objective sece|dece``). A config with
    ``meta="l2_reg"`` makes ``MetaTrainer(config)`` an :class:`L2MetaTrainer` instead (the
    CE-DECE / CE-SECE baselines). Differences:

    * The training split is cut once more: a *meta-validation* split as large as the
      validation split is carved out of it (seeded by ``config.split_seed``), so the CIFAR
      protocol's 45k / 5k becomes 40k / 5k / 5k, Wang & Golebiowski (2024)'s 8:1:1 (§5). The meta split is not
      augmented.
    * Every step is :func:`meta_step`: focal loss with gamma from the gamma-Net for the
      backbone, ``config.meta_objective`` (SECE or DECE) on a meta-validation batch for
      the gamma-Net. ``config.loss`` must be ``"focal"`` or the default ``"ce"``; either
      way the backbone loss *is* focal loss with the learned gamma (FL_gamma).
    * The gamma-Net, its Adam optimiser, the meta loader's position and the meta settings
      below go into the checkpoint (``extra_state``); a resume with other settings is refused.
    * Each history line gains ``train_meta_loss``, ``train_gamma_mean``/``train_gamma_std``
      (averaged over the epoch's batches) and the per-sample gamma's mean and std on the
      validation and test splits, ``{val,test}_gamma_{mean,std}`` (Wang & Golebiowski (2024), Fig. 3c-d).

    Args:
        config: a :class:`calib.train.TrainConfig` with ``meta="gamma_net"``.
        data: optional ready ``calib.data.Splits`` (as for ``Trainer``).
        meta_lr: Adam learning rate of the gamma-Net (default 1e-3, Adam's own default;
            Wang & Golebiowski (2024) gives none, module docstring item 7).
        bandwidth: SECE kernel bandwidth h (default 0.01, Wang & Golebiowski (2024), §5).
        order: ``"second"`` (exact hypergradient, default) or ``"first"`` (finite difference).
        tau, init_gamma: gamma-Net temperature and initial gamma (0.01 and 1.0, Wang & Golebiowski (2024), §5).

    Settings left at ``None`` come from ``config.meta_kwargs`` when the config has such a
    field, else from :data:`META_DEFAULTS`.

    The meta step runs in float32 on the bare model (AMP, ``torch.compile`` and
    multi-process training are not used for it; multi-process runs are refused).
    """

    def __new__(cls, config: Any = None, *args: Any, **kwargs: Any) -> "MetaTrainer":
        # config.meta == "l2_reg" gives the meta-calibration baseline (callers build every
        # meta run as MetaTrainer(config)); L2MetaTrainer has its own __init__.
        if cls is MetaTrainer and isinstance(config, TrainConfig) and config.meta == "l2_reg":
            cls = L2MetaTrainer
        return super().__new__(cls)

    def __init__(
        self,
        config: TrainConfig,
        *,
        data: Splits | None = None,
        meta_lr: float | None = None,
        bandwidth: float | None = None,
        order: Order | None = None,
        tau: float | None = None,
        init_gamma: float | None = None,
    ) -> None:
        _check_meta_config(config, "gamma_net", "MetaTrainer needs config.meta='gamma_net' or 'l2_reg'")
        if config.loss not in ("focal", "ce"):
            raise ValueError(
                f"config.loss is {config.loss!r}, but gamma-Net meta-training trains the backbone with focal "
                "loss and the learned gamma; use loss='focal' (or leave the default 'ce')"
            )
        if config.loss_kwargs:
            raise ValueError(
                f"config.loss_kwargs {config.loss_kwargs} would be ignored: gamma-Net meta-training learns the "
                "focal gamma per sample; drop them (CLI: no --gamma/--loss-arg with --meta gamma_net)"
            )
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("MetaTrainer runs in one process; multi-process (torchrun) meta-training is not supported")
        self.meta_settings = _meta_settings(
            getattr(config, "meta_kwargs", None) or {},
            dict(meta_lr=meta_lr, bandwidth=bandwidth, order=order, tau=tau, init_gamma=init_gamma),
        )
        self.config = config  # _load_data reads it
        base = data if data is not None else self._load_data()
        super().__init__(config, data=_carve_meta_split(base, config.split_seed))
        s = self.meta_settings
        self.gamma_net = GammaNet(
            self.model.classifier.in_features, self.num_classes, tau=s["tau"], init_gamma=s["init_gamma"],
            generator=torch.Generator().manual_seed(config.seed),
        ).to(self.device)
        self.meta_optimizer = torch.optim.Adam(self.gamma_net.parameters(), lr=s["meta_lr"])
        self.meta_loader = self._build_meta_loader()
        self._meta_iter: Iterator[tuple[Tensor, Tensor]] | None = None

    def _build_meta_loader(self) -> DeviceLoader:
        from ..data import DeviceLoader

        c, d = self.config, self.data
        n = d.extra["meta_y"].shape[0]
        return DeviceLoader(
            d.extra["meta_x"], d.extra["meta_y"], min(c.batch_size, n), shuffle=True, augment=False,
            mean=d.mean or None, std=d.std or None, device=self.device, seed=c.seed + 1, drop_last=True,
            channels_last=c.channels_last and bool(d.image),
        )

    def _next_meta_batch(self) -> tuple[Tensor, Tensor]:
        """The next meta-validation batch, cycling through the meta split epoch after epoch."""
        for _ in range(2):
            if self._meta_iter is None:
                self._meta_iter = iter(self.meta_loader)
            try:
                return next(self._meta_iter)
            except StopIteration:
                self._meta_iter = None
        raise RuntimeError("the meta-validation loader yields no batches")

    def train_step(self, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """:func:`meta_step` on a training batch and the next meta-validation batch."""
        self.model.train()
        self.gamma_net.train()
        xm, ym = self._next_meta_batch()
        s = self.meta_settings
        return meta_step(
            self.model, self.gamma_net, x, y, xm, ym, self.optimizer, self.meta_optimizer,
            objective=self.config.meta_objective, bandwidth=s["bandwidth"], order=s["order"],
        )

    @torch.no_grad()
    def gammas(self, split: str = "test") -> Tensor:
        """The gamma-Net's gamma for every example of ``split`` ("train", "val", "test", "meta"), on CPU."""
        if split not in ("train", "val", "test", "meta"):
            raise ValueError(f"split must be 'train', 'val', 'test' or 'meta', got {split!r}")
        self.model.eval()
        self.gamma_net.eval()
        if split == "meta":
            loader = self._build_meta_loader()
            loader.shuffle, loader.drop_last = False, False
        else:
            if split not in self._eval_loaders:
                self._eval_loaders[split] = self.build_loader(split)
            loader = self._eval_loaders[split]
        return torch.cat([self.gamma_net(self.model.features(x).float()) for x, _ in loader]).cpu()

    def epoch_extras(self) -> dict[str, float]:
        """Mean and std of the per-sample gamma on the validation and test splits (Wang & Golebiowski
        (2024), Fig. 3c-d)."""
        out: dict[str, float] = {}
        for split in ("val", "test"):
            g = self.gammas(split)
            out[f"{split}_gamma_mean"] = float(g.mean())
            out[f"{split}_gamma_std"] = float(g.std(unbiased=False))
        return out

    def extra_state(self) -> dict[str, Any]:
        return {
            "gamma_net": self.gamma_net.state_dict(),
            "meta_optimizer": self.meta_optimizer.state_dict(),
            "meta_loader": self.meta_loader.state_dict(),
            "meta_settings": dict(self.meta_settings),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "gamma_net" not in state:
            raise CheckpointError("checkpoint has no gamma-Net state: it was not written by a MetaTrainer")
        _check_saved_settings(state, self.meta_settings)
        self.gamma_net.load_state_dict(state["gamma_net"])
        self.meta_optimizer.load_state_dict(state["meta_optimizer"])
        self.meta_loader.load_state_dict(state["meta_loader"])
        self._meta_iter = None


META_DEFAULTS: dict[str, Any] = {"meta_lr": 1e-3, "bandwidth": 0.01, "order": "second", "tau": TAU, "init_gamma": 1.0}


def _meta_settings(from_config: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
    """Defaults, then ``config.meta_kwargs`` (if the config has that field), then explicit arguments."""
    if unknown := sorted(set(from_config) - set(META_DEFAULTS)):
        raise ValueError(f"unknown meta settings {unknown}; known: {sorted(META_DEFAULTS)}")
    s = {**META_DEFAULTS, **from_config, **{k: v for k, v in explicit.items() if v is not None}}
    _check_order(s["order"])
    for name in ("meta_lr", "bandwidth", "tau"):
        s[name] = check_positive(s[name], name)
    s["init_gamma"] = check_nonnegative(s["init_gamma"], "init_gamma")
    return s


def _carve_meta_split(data: Splits, seed: int) -> Splits:
    """A copy of ``data`` whose training split gives up ``len(val)`` examples to ``extra['meta_x'/'meta_y']``.

    With Wang & Golebiowski (2024)'s 8:1:1 (§5) the meta-validation split is as large as the validation split.
    The examples are chosen by a seeded permutation (``seed`` + 1, so not the same draw as
    the train/validation split).
    """
    import dataclasses

    n, n_meta = data.train_y.shape[0], data.val_y.shape[0]
    if not 0 < n_meta < n:
        raise ValueError(
            f"cannot carve a meta-validation split of {n_meta} examples (the size of the validation "
            f"split) out of {n} training examples"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed) + 1))
    keep, meta = perm[n_meta:].sort().values, perm[:n_meta].sort().values
    extra = {**data.extra, "meta_x": data.train_x[meta], "meta_y": data.train_y[meta]}
    return dataclasses.replace(data, train_x=data.train_x[keep], train_y=data.train_y[keep], extra=extra)


# --------------------------------------------------------------------------- meta-calibration baseline
L2_DEFAULTS: dict[str, Any] = {"meta_lr": 1e-3, "bandwidth": 0.01, "calib_weight": 0.5}
"""Settings of :class:`L2MetaTrainer` (``config.meta_kwargs`` may override them)."""


def l2_penalty(params: Sequence[Tensor], coefs: Sequence[Tensor]) -> Tensor:
    """``Σ_j Σ ω_j ⊙ θ_j²``: the learnable element-wise L2 penalty of Bohdal et al. (2021)."""
    if len(params) != len(coefs):
        raise ValueError(f"got {len(params)} parameter tensors but {len(coefs)} coefficient tensors")
    total = params[0].new_zeros(())
    for p, c in zip(params, coefs):
        if p.shape != c.shape:
            raise ValueError(f"coefficient shape {tuple(c.shape)} does not match parameter shape {tuple(p.shape)}")
        total = total + (c * p**2).sum()
    return total


class _FeaturesOf(nn.Module):
    """``model.features`` as a module's forward, for :func:`torch.func.functional_call`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model.features(x)


def _meta_features(model: nn.Module, x: Tensor) -> Tensor:
    """Backbone features of the meta batch at theta, without moving the BatchNorm statistics.

    The forward runs on *copies* of the buffers, so the model's own running statistics are
    never written: the training batch's graph saved them for its backward, and an in-place
    write (even one restoring the old values) would bump their version and break that
    backward on any BatchNorm network.
    """
    buffers = {f"model.{name}": b for name, b in _buffers(model).items()}
    with torch.no_grad():
        return functional_call(_FeaturesOf(model), buffers, (x,))


def l2_hypergradient(
    model: nn.Module,
    coefs: Sequence[Tensor],
    x: Tensor,
    y: Tensor,
    x_meta: Tensor,
    y_meta: Tensor,
    *,
    lr: float,
    criterion: Any,
    objective: str = "dece",
    calib_weight: float = 0.5,
    bandwidth: float = 0.01,
) -> dict[str, Any]:
    """d meta / d omega through a one-step look-ahead of the classifier (Bohdal et al. 2021).

    The backbone loss is ``L(θ, ω) = criterion(f_θ(x), y) + Σ ω ⊙ W²`` over the classifier's
    weight and bias ``W`` (:func:`l2_penalty`). The look-ahead moves the classifier only,
    ``W' = W − lr · ∇_W L`` (the rest of the network is held fixed, as in Bohdal et al.'s
    code), and the meta-objective on a meta-validation batch is
    ``CE(f_{θ,W'}(x_meta)) + calib_weight · objective(f_{θ,W'}(x_meta))`` with
    ``objective`` DECE (Bohdal et al.'s ``calib_weight`` = 0.5) or SECE (Wang & Golebiowski
    2024, "CE-SECE"). Exact second order through the inner gradient.

    Returns a dict with ``grads`` (one tensor per coefficient tensor), ``meta_loss`` (0-dim,
    detached) and ``logits`` (training-batch logits at θ, attached to the backbone's graph).
    """
    _check_backbone(model)
    classifier = model.classifier
    if not isinstance(classifier, nn.Linear):
        raise TypeError("model.classifier must be an nn.Linear")
    y = _check_batch(x, y, classifier.out_features, "x", "y")
    y_meta = _check_batch(x_meta, y_meta, classifier.out_features, "x_meta", "y_meta")
    check_nonnegative(calib_weight, "calib_weight")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr (the look-ahead step) must be a finite number > 0, got {lr}")
    weights = [classifier.weight, classifier.bias]
    logits = model(x)
    loss = criterion(logits, y) + l2_penalty(weights, coefs)
    grads = torch.autograd.grad(loss, weights, create_graph=True)
    w_fast, b_fast = (w - lr * g for w, g in zip(weights, grads))
    meta_logits = torch.nn.functional.linear(_meta_features(model, x_meta), w_fast, b_fast)
    meta = torch.nn.functional.cross_entropy(meta_logits, y_meta)
    meta = meta + calib_weight * meta_objective(meta_logits, y_meta, objective, bandwidth=bandwidth)
    hyper = torch.autograd.grad(meta, list(coefs), retain_graph=True)
    return {"grads": hyper, "meta_loss": meta.detach(), "logits": logits}


def l2_meta_step(
    model: nn.Module,
    coefs: Sequence[Tensor],
    x: Tensor,
    y: Tensor,
    x_meta: Tensor,
    y_meta: Tensor,
    optimizer: torch.optim.Optimizer,
    meta_optimizer: torch.optim.Optimizer,
    *,
    criterion: Any,
    objective: str = "dece",
    calib_weight: float = 0.5,
    bandwidth: float = 0.01,
    clip_grad: float | None = None,
) -> dict[str, Tensor]:
    """One iteration of meta-calibration with a learnable L2 penalty (Bohdal et al. 2021).

    1. look-ahead of the classifier and ``omega <- meta_optimizer`` step on the hypergradient
       of :func:`l2_hypergradient` (the look-ahead step is the backbone's current lr);
    2. ``theta <- optimizer`` step on ``criterion + Σ ω ⊙ W²`` with the updated ``omega``,
       after clipping the gradient norm to ``clip_grad`` when given.

    Returns detached 0-dim tensors ``loss`` (the regularised loss of the real update),
    ``acc``, ``meta_loss`` (before the omega step) and ``penalty``.
    """
    out = l2_hypergradient(
        model, coefs, x, y, x_meta, y_meta, lr=float(optimizer.param_groups[0]["lr"]), criterion=criterion,
        objective=objective, calib_weight=calib_weight, bandwidth=bandwidth,
    )
    meta_optimizer.zero_grad(set_to_none=True)
    for c, g in zip(coefs, out["grads"]):
        c.grad = g.detach()
    meta_optimizer.step()
    y = as_tensor(y, "y").to(x.device).long()
    classifier = model.classifier
    penalty = l2_penalty([classifier.weight, classifier.bias], [c.detach() for c in coefs])
    loss = criterion(out["logits"], y) + penalty
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(clip_grad))
    optimizer.step()
    return {
        "loss": loss.detach(),
        "acc": (out["logits"].detach().argmax(1) == y).float().mean(),
        "meta_loss": out["meta_loss"],
        "penalty": penalty.detach(),
    }


class L2MetaTrainer(MetaTrainer):
    """The meta-learning baselines CE-DECE and CE-SECE of Wang & Golebiowski (2024), Table 1.

    Meta-calibration of Bohdal et al. (2021), which Wang & Golebiowski (2024) describe as
    "learning unit-wise weight regularization" and run from Bohdal et al.'s code: the
    backbone minimises ``criterion + Σ ω ⊙ W²`` (``config.loss``, CE for the baselines;
    ``W`` the classifier's weight and bias, one coefficient per element as in that code,
    initialised to 0 and not constrained in sign), and ``ω`` is learned by Adam (lr 1e-3)
    on ``CE + 0.5·DECE`` (CE-DECE) or ``CE + 0.5·SECE`` (CE-SECE) of a meta-validation
    batch after a one-step look-ahead of the classifier (:func:`l2_meta_step`).

    ``python -m calib train --loss ce --meta l2_reg --meta-objective dece|sece``. The
    8:1:1 split, meta loader, checkpoints and resume are :class:`MetaTrainer`'s.
    Our choices where the sources differ or are silent: the mean (not summed) batch loss;
    the look-ahead on the meta batch leaves the BatchNorm statistics untouched; SECE with
    bandwidth 0.01 for CE-SECE (Wang & Golebiowski (2024)'s §5 setting for its own method).

    Settings (``config.meta_kwargs`` or keywords): ``meta_lr`` (1e-3), ``bandwidth``
    (0.01, SECE), ``calib_weight`` (0.5). History lines gain ``train_meta_loss``,
    ``train_penalty`` and ``l2_coef_mean``/``l2_coef_abs_mean``.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        data: Splits | None = None,
        meta_lr: float | None = None,
        bandwidth: float | None = None,
        calib_weight: float | None = None,
    ) -> None:
        _check_meta_config(config, "l2_reg", "L2MetaTrainer needs config.meta='l2_reg'")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("L2MetaTrainer runs in one process; multi-process meta-training is not supported")
        self.meta_settings = _l2_settings(
            config.meta_kwargs or {}, dict(meta_lr=meta_lr, bandwidth=bandwidth, calib_weight=calib_weight)
        )
        self.config = config
        base = data if data is not None else self._load_data()
        Trainer.__init__(self, config, data=_carve_meta_split(base, config.split_seed))
        if not isinstance(self.model.classifier, nn.Linear):
            raise TypeError("the model's classifier must be an nn.Linear for the learnable L2 penalty")
        self.coefs = [nn.Parameter(torch.zeros_like(p)) for p in (self.model.classifier.weight,
                                                                     self.model.classifier.bias)]
        self.meta_optimizer = torch.optim.Adam(self.coefs, lr=self.meta_settings["meta_lr"])
        self.meta_loader = self._build_meta_loader()
        self._meta_iter = None

    def train_step(self, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """:func:`l2_meta_step` on a training batch and the next meta-validation batch."""
        self.model.train()
        xm, ym = self._next_meta_batch()
        s = self.meta_settings
        return l2_meta_step(
            self.model, self.coefs, x, y, xm, ym, self.optimizer, self.meta_optimizer, criterion=self.criterion,
            objective=self.config.meta_objective, calib_weight=s["calib_weight"], bandwidth=s["bandwidth"],
            clip_grad=self.config.clip_grad,
        )

    def gammas(self, split: str = "test") -> Tensor:  # noqa: ARG002 - no gamma-Net here
        raise TypeError("an L2MetaTrainer learns L2 coefficients, not gammas (see .coefs)")

    def epoch_extras(self) -> dict[str, float]:
        flat = torch.cat([c.detach().reshape(-1) for c in self.coefs])
        return {"l2_coef_mean": float(flat.mean()), "l2_coef_abs_mean": float(flat.abs().mean())}

    def extra_state(self) -> dict[str, Any]:
        return {
            "l2_coefs": [c.detach().clone() for c in self.coefs],
            "meta_optimizer": self.meta_optimizer.state_dict(),
            "meta_loader": self.meta_loader.state_dict(),
            "meta_settings": dict(self.meta_settings),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "l2_coefs" not in state:
            raise CheckpointError("checkpoint has no L2 coefficients: it was not written by an L2MetaTrainer")
        _check_saved_settings(state, self.meta_settings)
        with torch.no_grad():
            for c, v in zip(self.coefs, state["l2_coefs"]):
                c.copy_(v.to(c.device))
        self.meta_optimizer.load_state_dict(state["meta_optimizer"])
        self.meta_loader.load_state_dict(state["meta_loader"])
        self._meta_iter = None


def _l2_settings(from_config: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
    if unknown := sorted(set(from_config) - set(L2_DEFAULTS)):
        raise ValueError(f"unknown meta settings {unknown} for meta='l2_reg'; known: {sorted(L2_DEFAULTS)}")
    s = {**L2_DEFAULTS, **from_config, **{k: v for k, v in explicit.items() if v is not None}}
    for name in ("meta_lr", "bandwidth"):
        s[name] = check_positive(s[name], name)
    s["calib_weight"] = check_nonnegative(s["calib_weight"], "calib_weight")
    return s
