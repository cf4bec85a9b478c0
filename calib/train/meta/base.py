"""What the two meta-learning trainers share (Wang & Golebiowski 2024, §3.3 and §5): the 8:1:1
split with a meta-validation split carved out of training, a meta loader cycled through
epoch after epoch, one process only, and settings a resume must not change."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Iterator

import torch
from torch import Tensor

from ...data import DeviceLoader, Splits
from ..checkpoint import CheckpointError
from ..config import TrainConfig, check_config
from ..trainer import Trainer, load_data
from .gamma_net import OBJECTIVES


class MetaLearningTrainer(Trainer):
    """A :class:`~calib.train.Trainer` whose every step also takes a meta-validation batch.

    Subclasses set :attr:`meta` (the ``TrainConfig.meta`` they train) and :attr:`defaults`
    (their settings), build their meta-learned part in ``__init__`` after this one, and
    implement ``train_step`` with :meth:`next_meta_batch`. The meta optimiser, the meta
    loader's position and the settings go into the checkpoint; a resume under other
    settings is refused.
    """

    meta: ClassVar[str]
    defaults: ClassVar[dict[str, Any]]
    meta_optimizer: torch.optim.Optimizer

    def __init__(self, config: TrainConfig, *, data: Splits | None = None, **settings: Any) -> None:
        check_config(config)
        if config.meta != self.meta:
            raise ValueError(f"{type(self).__name__} needs config.meta={self.meta!r}, got {config.meta!r} "
                             "(calib.train.make_trainer picks the trainer for each meta setting)")
        if config.meta_objective not in OBJECTIVES:
            raise ValueError(f"config.meta_objective must be one of {', '.join(OBJECTIVES)}, "
                             f"got {config.meta_objective!r}")
        self.check_config(config)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(f"{type(self).__name__} runs in one process; multi-process (torchrun) "
                             "meta-training is not supported")
        self.meta_settings = self.settings(config.meta_kwargs or {}, settings)
        base = data if data is not None else load_data(config)
        super().__init__(config, data=carve_meta_split(base, config.split_seed))
        self.meta_loader = self.build_meta_loader()
        self._meta_iter: Iterator[tuple[Tensor, Tensor]] | None = None

    def check_config(self, config: TrainConfig) -> None:
        """Refuse what this meta-learner cannot train (a subclass's extra rules)."""

    @classmethod
    def settings(cls, from_config: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
        """:attr:`defaults`, then ``config.meta_kwargs``, then explicit keywords (``None``: unset)."""
        if unknown := sorted(set(from_config) - set(cls.defaults)):
            raise ValueError(f"unknown meta settings {unknown} for meta={cls.meta!r}; known: {sorted(cls.defaults)}")
        return {**cls.defaults, **from_config, **{k: v for k, v in explicit.items() if v is not None}}

    def build_meta_loader(self) -> DeviceLoader:
        """Shuffled, unaugmented batches of the meta split (seed + 1: not the training order)."""
        c, d = self.config, self.data
        n = d.extra["meta_y"].shape[0]
        return DeviceLoader(
            d.extra["meta_x"], d.extra["meta_y"], min(c.batch_size, n), shuffle=True, augment=False,
            mean=d.mean or None, std=d.std or None, device=self.device, seed=c.seed + 1, drop_last=True,
            channels_last=c.channels_last and bool(d.image),
        )

    def next_meta_batch(self) -> tuple[Tensor, Tensor]:
        """The next meta-validation batch, cycling through the meta split epoch after epoch."""
        for _ in range(2):
            if self._meta_iter is None:
                self._meta_iter = iter(self.meta_loader)
            try:
                return next(self._meta_iter)
            except StopIteration:
                self._meta_iter = None
        raise RuntimeError("the meta-validation loader yields no batches")

    def extra_state(self) -> dict[str, Any]:
        return {"meta_optimizer": self.meta_optimizer.state_dict(), "meta_loader": self.meta_loader.state_dict(),
                "meta_settings": dict(self.meta_settings)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        saved = state.get("meta_settings", {})
        if saved != self.meta_settings:
            raise CheckpointError(f"checkpoint was trained with meta settings {saved}, this run has "
                                  f"{self.meta_settings}; use the same settings or another out=")
        self.meta_optimizer.load_state_dict(state["meta_optimizer"])
        self.meta_loader.load_state_dict(state["meta_loader"])
        self._meta_iter = None


def carve_meta_split(data: Splits, seed: int) -> Splits:
    """A copy of ``data`` whose training split gives up ``len(val)`` examples to ``extra['meta_x'/'meta_y']``.

    With Wang & Golebiowski (2024)'s 8:1:1 (§5) the meta-validation split is as large as the
    validation split, drawn by a seeded permutation (``seed`` + 1, not the train/val draw).
    """
    n, n_meta = data.train_y.shape[0], data.val_y.shape[0]
    if not 0 < n_meta < n:
        raise ValueError(f"cannot carve a meta-validation split of {n_meta} examples (the size of the validation "
                         f"split) out of {n} training examples")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed) + 1))
    keep, meta = perm[n_meta:].sort().values, perm[:n_meta].sort().values
    extra = {**data.extra, "meta_x": data.train_x[meta], "meta_y": data.train_y[meta]}
    return dataclasses.replace(data, train_x=data.train_x[keep], train_y=data.train_y[keep], extra=extra)
