"""Training runs: the trainer, its configuration, meta-learning, mixup and run records.

``trainer``   :class:`Trainer` and :class:`TrainConfig`: one model, one config, one run directory
``presets``   the papers' protocols as data (schedules, TS method, selection, seeds)
``records``   run-record files (logits, history, metrics) and pure functions over them
``rundir``    run-directory ownership, locks and cleanup
``mixup``     mixup batches and the mixed loss (Zhang et al. 2018)
``meta``      gamma-Net + SECE meta-regularisation and the learnable-L2 baselines (Wang & Golebiowski 2024)

The trainer's public names are re-exported here: ``from calib.train import Trainer, TrainConfig``.
"""
from . import mixup, presets, records, rundir
from .trainer import *  # noqa: F401,F403
from .trainer import __all__ as _trainer_all

__all__ = ["mixup", "presets", "records", "rundir", *_trainer_all]
