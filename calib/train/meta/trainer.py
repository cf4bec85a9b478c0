"""MetaTrainer: the trainer with a gamma-Net meta step in every training step (Wang & Golebiowski 2024, §3.3)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch import Tensor

from ..._checks import check_nonnegative, check_positive
from ..trainer import CheckpointError, TrainConfig, Trainer

if TYPE_CHECKING:
    from ...data import DeviceLoader, Splits
from .gamma_net import OBJECTIVES, TAU, GammaNet, Order, _check_order, meta_step


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
            Wang & Golebiowski (2024) gives none, module docstring item 7). On the ledger's
            Fashion-MNIST runs 1e-3 drives the mean gamma past 19 and the network into
            under-confidence, while 1e-4 keeps gamma near 1 (sweeps ``wang2024_t1`` and
            ``gamma_net_lr``, chapter 11): try 1e-4 first.
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
            from .l2 import L2MetaTrainer  # the subclass imports this module

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
        from ...data import DeviceLoader

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
