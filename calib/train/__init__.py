"""Training runs: the trainer, its configuration, meta-learning, mixup and run records.

``trainer``      :class:`Trainer`: one model, one config, one run directory; the loop is ``fit``
``dispatch``     :data:`TRAINERS` (``meta`` -> trainer), :func:`make_trainer`, :func:`train`
``config``       :class:`TrainConfig` (JSON-serialisable), smoke-mode caps, reading it back
``progress``     the loop's bookkeeping (:class:`~calib.train.progress.Monitor`) and early stops
``checkpoint``   seeds, RNG state, atomic checkpoints loaded with ``weights_only=True``
``distributed``  devices and DDP under ``torchrun``
``presets``      the papers' protocols as data (schedules, TS method, selection, seeds)
``records``      run-record files (logits, history, metrics) and pure functions over them
``rundir``       run-directory ownership, locks and cleanup
``mixup``        mixup batches and the mixed loss (Zhang et al. 2018)
``meta``         gamma-Net + SECE meta-regularisation and the learnable-L2 baselines (Wang & Golebiowski 2024)

Build runs with ``make_trainer(config, data=...)`` (or ``train(config)``): it picks the
trainer for ``config.meta`` and applies the environment.
"""
from . import mixup, presets, records, rundir
from .checkpoint import CheckpointError, load_checkpoint, seed_everything
from .config import SELECT_MODES, TrainConfig, load_config, smoke_config
from .dispatch import TRAINERS, make_trainer, train, trainer_for
from .presets import DEFAULT_PRESET, PAPER_SEEDS, PRESET_EPOCHS, PRESETS, scaled_milestones
from .progress import TrainingDiverged, TrainingInterrupted
from .records import (CHECKPOINT_FILE, CONFIG_FILE, HISTORY_FILE, LOGITS_FILE, METRICS_FILE, load_epoch_logits,
                      load_history, load_logits, mean_history, split_stats)
from .trainer import Trainer, evaluate_run, load_data

__all__ = [
    "mixup", "presets", "records", "rundir",
    "TrainConfig", "Trainer", "TRAINERS", "make_trainer", "trainer_for", "train", "load_data", "evaluate_run",
    "PRESETS", "PRESET_EPOCHS", "PAPER_SEEDS", "DEFAULT_PRESET", "SELECT_MODES", "scaled_milestones",
    "load_epoch_logits", "load_logits", "load_history", "mean_history", "load_config", "split_stats",
    "smoke_config", "load_checkpoint", "seed_everything",
    "TrainingDiverged", "CheckpointError", "TrainingInterrupted",
    "CONFIG_FILE", "HISTORY_FILE", "METRICS_FILE", "LOGITS_FILE", "CHECKPOINT_FILE",
]
