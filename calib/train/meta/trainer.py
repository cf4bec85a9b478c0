"""MetaTrainer: the trainer with a gamma-Net meta step in every training step (Wang & Golebiowski 2024, §3.3)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..._checks import check_nonnegative, check_positive
from ..checkpoint import CheckpointError
from ..config import TrainConfig
from .base import MetaLearningTrainer
from .gamma_net import TAU, GammaNet, Order, check_order, meta_step

META_DEFAULTS: dict[str, Any] = {"meta_lr": 1e-3, "bandwidth": 0.01, "order": "second", "tau": TAU, "init_gamma": 1.0}


class MetaTrainer(MetaLearningTrainer):
    """:class:`calib.train.Trainer` with gamma-Net meta-regularisation (Wang & Golebiowski (2024), §3.3, §4.3).

    Same run directory, checkpoints, resume, history and run record as an ordinary run
    (``python -m calib train --meta gamma_net --meta-objective sece|dece``). For
    ``meta="l2_reg"`` (the CE-DECE / CE-SECE baselines) build an :class:`L2MetaTrainer`, or let
    :func:`calib.train.make_trainer` pick by ``config.meta``. Differences:

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
            Wang & Golebiowski (2024) gives none, module docstring item 7; chapter 11 compares it
            with 1e-4).
        bandwidth: SECE kernel bandwidth h (default 0.01, Wang & Golebiowski (2024), §5).
        order: ``"second"`` (exact hypergradient, default) or ``"first"`` (finite difference).
        tau, init_gamma: gamma-Net temperature and initial gamma (0.01 and 1.0, Wang & Golebiowski (2024), §5).

    Settings left at ``None`` come from ``config.meta_kwargs`` when the config has such a
    field, else from :data:`META_DEFAULTS`.

    The meta step runs in float32 on the bare model (AMP, ``torch.compile`` and
    multi-process training are not used for it; multi-process runs are refused).
    """

    meta: ClassVar[str] = "gamma_net"
    defaults: ClassVar[dict[str, Any]] = META_DEFAULTS

    def __init__(
        self,
        config: TrainConfig,
        *,
        data: Any | None = None,
        meta_lr: float | None = None,
        bandwidth: float | None = None,
        order: Order | None = None,
        tau: float | None = None,
        init_gamma: float | None = None,
    ) -> None:
        super().__init__(config, data=data, meta_lr=meta_lr, bandwidth=bandwidth, order=order, tau=tau,
                         init_gamma=init_gamma)
        s = self.meta_settings
        self.gamma_net = GammaNet(
            self.model.classifier.in_features, self.num_classes, tau=s["tau"], init_gamma=s["init_gamma"],
            generator=torch.Generator().manual_seed(config.seed),
        ).to(self.device)
        self.meta_optimizer = torch.optim.Adam(self.gamma_net.parameters(), lr=s["meta_lr"])

    def check_config(self, config: TrainConfig) -> None:
        """The backbone loss *is* focal loss with the learned gamma: no other loss, no fixed gamma."""
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

    @classmethod
    def settings(cls, from_config: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
        s = super().settings(from_config, explicit)
        check_order(s["order"])
        for name in ("meta_lr", "bandwidth", "tau"):
            s[name] = check_positive(s[name], name)
        s["init_gamma"] = check_nonnegative(s["init_gamma"], "init_gamma")
        return s

    def train_step(self, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """:func:`meta_step` on a training batch and the next meta-validation batch."""
        self.model.train()
        self.gamma_net.train()
        xm, ym = self.next_meta_batch()
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
            loader = self.build_meta_loader()
            loader.shuffle, loader.drop_last = False, False
        else:
            loader = self.eval_loader(split)
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
        return {"gamma_net": self.gamma_net.state_dict(), **super().extra_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "gamma_net" not in state:
            raise CheckpointError("checkpoint has no gamma-Net state: it was not written by a MetaTrainer")
        super().load_extra_state(state)
        self.gamma_net.load_state_dict(state["gamma_net"])
