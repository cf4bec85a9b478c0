"""The meta-learned L2 baselines of Wang & Golebiowski (2024), Table 1 ("CE-DECE", "CE-SECE"):
unit-wise weight decay learned by the look-ahead on a calibration objective (Bohdal et al.'s
meta-calibration)."""
from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..._checks import as_tensor, check_nonnegative, check_positive
from ..checkpoint import CheckpointError
from ..config import TrainConfig
from .base import MetaLearningTrainer
from .gamma_net import buffer_copies, check_backbone, check_batch, meta_objective

L2_DEFAULTS: dict[str, Any] = {"meta_lr": 1e-3, "bandwidth": 0.01, "calib_weight": 0.5}


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
    buffers = {f"model.{name}": b for name, b in buffer_copies(model).items()}
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
    check_backbone(model)
    classifier = model.classifier
    if not isinstance(classifier, nn.Linear):
        raise TypeError("model.classifier must be an nn.Linear")
    y = check_batch(x, y, classifier.out_features, "x", "y")
    y_meta = check_batch(x_meta, y_meta, classifier.out_features, "x_meta", "y_meta")
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


class L2MetaTrainer(MetaLearningTrainer):
    """The meta-learning baselines CE-DECE and CE-SECE of Wang & Golebiowski (2024), Table 1.

    Meta-calibration of Bohdal et al. (2021), which Wang & Golebiowski (2024) describe as
    "learning unit-wise weight regularization" and run from Bohdal et al.'s code: the
    backbone minimises ``criterion + Σ ω ⊙ W²`` (``config.loss``, CE for the baselines;
    ``W`` the classifier's weight and bias, one coefficient per element as in that code,
    initialised to 0 and not constrained in sign), and ``ω`` is learned by Adam (lr 1e-3)
    on ``CE + 0.5·DECE`` (CE-DECE) or ``CE + 0.5·SECE`` (CE-SECE) of a meta-validation
    batch after a one-step look-ahead of the classifier (:func:`l2_meta_step`).

    ``python -m calib train --loss ce --meta l2_reg --meta-objective dece|sece``. The
    8:1:1 split, meta loader, checkpoints and resume are :class:`~calib.train.meta.base.MetaLearningTrainer`'s.
    Our choices where the sources differ or are silent: the mean (not summed) batch loss;
    the look-ahead on the meta batch leaves the BatchNorm statistics untouched; SECE with
    bandwidth 0.01 for CE-SECE (Wang & Golebiowski (2024)'s §5 setting for its own method).

    Settings (``config.meta_kwargs`` or keywords): ``meta_lr`` (1e-3), ``bandwidth``
    (0.01, SECE), ``calib_weight`` (0.5). History lines gain ``train_meta_loss``,
    ``train_penalty`` and ``l2_coef_mean``/``l2_coef_abs_mean``.
    """

    meta: ClassVar[str] = "l2_reg"
    defaults: ClassVar[dict[str, Any]] = L2_DEFAULTS

    def __init__(
        self,
        config: TrainConfig,
        *,
        data: Any | None = None,
        meta_lr: float | None = None,
        bandwidth: float | None = None,
        calib_weight: float | None = None,
    ) -> None:
        super().__init__(config, data=data, meta_lr=meta_lr, bandwidth=bandwidth, calib_weight=calib_weight)
        if not isinstance(self.model.classifier, nn.Linear):
            raise TypeError("the model's classifier must be an nn.Linear for the learnable L2 penalty")
        self.coefs = [nn.Parameter(torch.zeros_like(p)) for p in (self.model.classifier.weight,
                                                                     self.model.classifier.bias)]
        self.meta_optimizer = torch.optim.Adam(self.coefs, lr=self.meta_settings["meta_lr"])

    @classmethod
    def settings(cls, from_config: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
        s = super().settings(from_config, explicit)
        for name in ("meta_lr", "bandwidth"):
            s[name] = check_positive(s[name], name)
        s["calib_weight"] = check_nonnegative(s["calib_weight"], "calib_weight")
        return s

    def train_step(self, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """:func:`l2_meta_step` on a training batch and the next meta-validation batch."""
        self.model.train()
        xm, ym = self.next_meta_batch()
        s = self.meta_settings
        return l2_meta_step(
            self.model, self.coefs, x, y, xm, ym, self.optimizer, self.meta_optimizer, criterion=self.criterion,
            objective=self.config.meta_objective, calib_weight=s["calib_weight"], bandwidth=s["bandwidth"],
            clip_grad=self.config.clip_grad,
        )

    def epoch_extras(self) -> dict[str, float]:
        flat = torch.cat([c.detach().reshape(-1) for c in self.coefs])
        return {"l2_coef_mean": float(flat.mean()), "l2_coef_abs_mean": float(flat.abs().mean())}

    def extra_state(self) -> dict[str, Any]:
        return {"l2_coefs": [c.detach().clone() for c in self.coefs], **super().extra_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "l2_coefs" not in state:
            raise CheckpointError("checkpoint has no L2 coefficients: it was not written by an L2MetaTrainer")
        super().load_extra_state(state)
        with torch.no_grad():
            for c, v in zip(self.coefs, state["l2_coefs"]):
                c.copy_(v.to(c.device))
