"""From a :class:`~calib.train.config.TrainConfig` to a trainer: the one table from ``config.meta``
to the trainer class, and the place where the environment meets a run.

The CLI, the sweep and the chapters build every run through :func:`make_trainer` (or
:func:`train`), so smoke mode (``CALIB_SMOKE=1``: a few steps that keep the code path) and
the book's FLOP ledger (``CALIB_FLOP_LEDGER``) apply to each run without the trainer
knowing about either.
"""
from __future__ import annotations

from typing import Any

from .. import runtimes
from ..data import Splits
from ..data.splits import smoke_subset
from .config import TrainConfig, check_config, smoke_config
from .meta import L2MetaTrainer, MetaTrainer
from .trainer import Trainer, load_data

#: ``TrainConfig.meta`` -> the trainer that trains it.
TRAINERS: dict[str, type[Trainer]] = {
    "none": Trainer,
    "gamma_net": MetaTrainer,  # gamma-Net + SECE/DECE (Wang & Golebiowski 2024)
    "l2_reg": L2MetaTrainer,   # meta-learned L2, the CE-DECE/CE-SECE baselines
}


def trainer_for(meta: str) -> type[Trainer]:
    """The trainer class for the ``meta`` setting (:data:`TRAINERS`); ValueError names the choices."""
    try:
        return TRAINERS[meta]
    except (KeyError, TypeError):
        raise ValueError(f"meta must be one of {', '.join(map(repr, TRAINERS))}, got {meta!r}") from None


def make_trainer(config: TrainConfig, *, data: Splits | None = None, **settings: Any) -> Trainer:
    """The trainer ``config.meta`` names, built on ``data`` (default: :func:`load_data`).

    In smoke mode the config and the data are capped first (:func:`smoke_config`,
    :func:`calib.data.splits.smoke_subset`); with ``$CALIB_FLOP_LEDGER`` set, the FLOPs of
    the run as requested (uncapped) are appended to it (:func:`calib.runtimes.record_run`).
    ``settings``: keywords of the meta trainers (e.g. ``meta_lr``).
    """
    cls = trainer_for(check_config(config).meta)
    full = data if data is not None else load_data(config)
    trainer = cls(smoke_config(config), data=smoke_subset(full), **settings)
    runtimes.record_run(config, trainer.model, full)  # the sizes before the smoke caps
    return trainer


def train(config: TrainConfig, *, resume: bool = False, data: Splits | None = None) -> Trainer:
    """:func:`make_trainer`, then :meth:`Trainer.fit`; returns the trainer."""
    trainer = make_trainer(config, data=data)
    trainer.fit(resume=resume)
    return trainer
