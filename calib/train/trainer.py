"""The trainer: one model, one :class:`~calib.train.config.TrainConfig`, one run directory.

A run directory holds::

    config.json     the configuration (JSON, one object)
    history.jsonl   one JSON line per epoch: train loss/accuracy, val accuracy/NLL/ECE, lr
    logits.pt       val and test logits + labels (torch.load(weights_only=True))
    metrics.json    calib.metrics.summary on test, before and after temperature scaling
                    fitted on the validation split, with the temperature T
    checkpoint.pt   model, optimiser, scheduler, AMP scaler, RNG and loader state,
                    written atomically every epoch and on SIGTERM/SIGINT

Every metric is a pure function of the saved logits, so :func:`evaluate_run` recomputes
``metrics.json`` without retraining. The papers' schedules are :mod:`calib.train.presets`.

The loop is :meth:`Trainer.fit` (epochs: train, schedule, evaluate, log, checkpoint) around
:meth:`Trainer.train_step` (forward, loss, backward, clip, step); the bookkeeping beside it
(resume sums, the NaN/inf flag, signals, progress bars) is :class:`~calib.train.progress.Monitor`.
Subclasses (:mod:`calib.train.meta`) override :meth:`Trainer.train_step`, keep extra state in
the checkpoint through :meth:`Trainer.extra_state`/:meth:`Trainer.load_extra_state` and add
per-epoch numbers through :meth:`Trainer.epoch_extras`. The environment (smoke mode, the FLOP
ledger) is applied by :func:`calib.train.make_trainer`, not here. Multi-GPU (DDP under
``torchrun``): :mod:`calib.train.distributed`.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from .. import data as cdata
from .. import losses, models
from .._checks import NonFiniteError, check_labels
from . import checkpoint, distributed
from .checkpoint import seed_everything
from .config import AUGMENTED, SPLIT_SIZES, TrainConfig, check_config, load_config
from .mixup import draw_seed, mix_batch
from .progress import Monitor
from .records import (CHECKPOINT_FILE, CONFIG_FILE, EPOCH_LOGITS_DIR, HISTORY_FILE, LOGITS_FILE, METRICS_FILE,
                      atomic_save, atomic_write_text, compute_metrics, load_logits, split_stats)


def load_data(config: TrainConfig) -> cdata.Splits:
    """``calib.data.load`` of ``config.data`` with the config's root, split seed and sizes."""
    sizes = {name: getattr(config, name) for name in SPLIT_SIZES if getattr(config, name) is not None}
    return cdata.load(config.data, config.data_root, split_seed=config.split_seed, download=config.download, **sizes)


class Trainer:
    """Train one model under one :class:`TrainConfig` and leave a run directory behind.

    Attributes a subclass can use: ``config``, ``device``, ``data`` (a ``calib.data.Splits``),
    ``model`` (the bare ``nn.Module``: state dict, ``.features``, ``.classifier``), ``net``
    (what the forward pass calls: ``model`` wrapped by DDP and/or ``torch.compile``),
    ``criterion``, ``optimizer``, ``scheduler``, ``scaler``, ``train_loader``, ``epoch``
    (epochs completed), ``history`` (list of per-epoch dicts), ``rank``/``world_size``.

    ``data``: a ready ``Splits`` (e.g. a custom toy set) instead of :func:`load_data`;
    resuming then needs the same data.
    """

    def __init__(self, config: TrainConfig, *, data: cdata.Splits | None = None):
        self.config = config = check_config(config)
        self.rank, self.world_size, self.local_rank = distributed.rank_and_world()
        self.device = distributed.pick_device(config.device, self.world_size, self.local_rank)
        distributed.init_process_group(self.device, config.batch_size, self.world_size)
        seed_everything(config.seed)
        self.data = data if data is not None else load_data(config)
        _check_split_labels(self.data)  # once per dataset, so train_step never syncs to check
        self.num_classes = int(self.data.num_classes)
        self.augment = bool(self.data.image) and (config.augment if config.augment is not None
                                                  else config.data in AUGMENTED)
        self.model = self.build_model().to(self.device)
        if self.world_size > 1 and self.device.type == "cuda":
            # batch statistics over the global batch, as in one process (SyncBatchNorm is CUDA-only)
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        if config.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.net = distributed.wrap(self.model, self.device, self.world_size, config.compile)
        self.criterion = self.build_criterion()
        self.optimizer = self.build_optimizer()
        self.scheduler = self.build_scheduler()
        self.amp_dtype = distributed.amp_dtype(config.amp, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.train_loader = self.build_loader("train", train=True)
        self.epoch = 0
        self.history: list[dict[str, Any]] = []
        self._resume_at: tuple[int, dict[str, float]] = (0, {})  # (step, sums) of a mid-epoch checkpoint
        self._eval_loaders: dict[str, Any] = {}
        self._predicted: dict[str, tuple[Tensor, Tensor]] = {}  # per split, for the current weights
        self.metrics: dict[str, Any] | None = None
        self.best: dict[str, Any] | None = None  # select="best_val": {"epoch", "val_error", "model"}

    # -- construction (override in subclasses) -------------------------------------------

    def build_model(self) -> nn.Module:
        """``calib.models.make(config.model, num_classes, **model_kwargs)``; the MLP gets its input size."""
        kw, shape = dict(self.config.model_kwargs), tuple(self.data.train_x.shape[1:])
        if self.config.model != "mlp" and len(shape) != 3:
            raise ValueError(f"model {self.config.model!r} is a convolutional network and needs images (N, C, H, W), "
                             f"but data {self.config.data!r} holds feature vectors of shape {shape}; "
                             "use model='mlp' (CLI: --model mlp)")
        if self.config.model == "mlp":
            kw.setdefault("in_features", int(np.prod(shape)))
        else:
            kw.setdefault("in_channels", int(shape[0]))
        return models.make(self.config.model, self.num_classes, **kw)

    def build_criterion(self) -> nn.Module:
        """``calib.losses.make(config.loss, **loss_kwargs)``."""
        return losses.make(self.config.loss, **self.config.loss_kwargs)

    def build_optimizer(self) -> torch.optim.Optimizer:
        c, params = self.config, self.model.parameters()
        if c.optimizer == "sgd":
            return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay,
                                   nesterov=c.nesterov)
        cls = torch.optim.Adam if c.optimizer == "adam" else torch.optim.AdamW
        return cls(params, lr=c.lr, weight_decay=c.weight_decay)

    def build_scheduler(self) -> torch.optim.lr_scheduler.LRScheduler:
        """Step decay: lr × ``gamma_lr`` at each milestone (Lin et al. (2024) §5; Mukhoti et al. (2020))."""
        return torch.optim.lr_scheduler.MultiStepLR(self.optimizer, list(self.config.milestones),
                                                    gamma=self.config.gamma_lr)

    def build_loader(self, split: str, *, train: bool = False) -> cdata.DeviceLoader:
        """A ``calib.data.DeviceLoader`` over one split (training: shuffled, augmented, sharded)."""
        c, world = self.config, self.world_size if train else 1
        return cdata.DeviceLoader(
            getattr(self.data, f"{split}_x"), getattr(self.data, f"{split}_y"),
            (c.batch_size // world) if train else c.eval_batch_size, shuffle=train,
            augment=train and self.augment, mean=self.data.mean or None, std=self.data.std or None,
            device=self.device, seed=c.seed, channels_last=c.channels_last and bool(self.data.image),
            rank=self.rank if train else 0, world_size=world,
        )

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for the forward pass on CUDA (a no-op elsewhere)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.amp_dtype)

    # -- hooks for subclasses ----------------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        """Additional state (modules, optimisers) to keep in the checkpoint. Tensors/primitives only."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def epoch_extras(self) -> dict[str, Any]:
        """JSON-serialisable numbers merged into each history line."""
        return {}

    # -- the loop ------------------------------------------------------------------------------

    def fit(self, *, resume: bool = False) -> dict[str, Any]:
        """Train for ``config.epochs`` (continuing a checkpoint when ``resume``); return the metrics.

        Each epoch appends to ``history`` the train loss/accuracy, the learning rate, the
        validation accuracy/NLL/ECE (plus tracked splits), the last layer's weight norm and
        :meth:`epoch_extras`, then writes a checkpoint. At the end the val/test logits are
        saved and :func:`evaluate_run` writes ``metrics.json``.
        """
        self._prepare_out(resume)
        c, (step, sums) = self.config, self._resume_at
        with distributed.deterministic(self.device), Monitor(self, step, sums) as monitor:
            while self.epoch < c.epochs:
                t0, lr = time.perf_counter(), self.optimizer.param_groups[0]["lr"]
                self._predicted.clear()  # the weights are about to change
                for x, y in monitor.batches(self.train_loader):
                    try:
                        out = self.train_step(x, y)
                    except NonFiniteError as exc:  # the loss refused NaN/inf logits: the weights diverged
                        raise monitor.diverged() from exc
                    monitor.record(out, y.shape[0])
                train_stats = monitor.epoch_means()
                self.scheduler.step()
                line = self._epoch_line(lr, train_stats, time.perf_counter() - t0)
                self.epoch += 1
                self._update_best(line)
                self._append_history(line)
                if c.keep_epoch_logits:
                    self._save_epoch_logits()
                if self.epoch % c.checkpoint_every == 0 or self.epoch == c.epochs:
                    self.save_checkpoint()
                monitor.epoch_done(line)
        self._resume_at = (0, {})
        self.metrics = self.finish()
        return self.metrics

    def train_step(self, x: Tensor, y: Tensor) -> dict[str, Tensor | float]:
        """One optimiser step on a batch; returns the batch's loss and accuracy (0-d tensors).

        :class:`~calib.train.progress.Monitor` averages the outputs over the epoch on the
        device, so a GPU never waits on the host. The forward pass runs under autocast, the
        loss in float32. ``config.loss_reduction="sum"`` differentiates the batch *sum*, as
        the authors' code of Lin et al. (2024) and Mukhoti et al. (2020) does: every calib
        loss has ``sum == N · mean``, so the mean is scaled by the global batch size (DDP
        averages gradients over ranks). The reported ``loss`` is the per-sample mean either way.
        """
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.net.train()
        mixed = mix_batch(x, y, self.config.mixup_alpha, seed=draw_seed()) if self.config.mixup_alpha > 0 else None
        with self.autocast():
            logits = self.net(x if mixed is None else mixed.x)
        loss = self.criterion(logits.float(), y) if mixed is None else mixed.loss(self.criterion, logits.float())
        if loss.ndim:
            loss = loss.mean()
        objective = loss * (y.shape[0] * self.world_size) if self.config.loss_reduction == "sum" else loss
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(objective).backward()
        out = {"loss": loss.detach(), "acc": (logits.detach().argmax(1) == y).float().mean()}
        if self.config.clip_grad is not None:
            out["grad_norm"] = self.clip_gradients()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return out

    def clip_gradients(self) -> Tensor:
        """Clip the global L2 norm of the gradients to ``config.clip_grad``; return the norm before.

        As the training loop of Mukhoti et al. (2020) does with c = 2. Under fp16 AMP the
        gradients are unscaled first, so the bound applies to the true gradient.
        """
        self.scaler.unscale_(self.optimizer)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.config.clip_grad)).detach()

    def _epoch_line(self, lr: float, train_stats: dict[str, float], seconds: float) -> dict[str, Any]:
        line: dict[str, Any] = {"epoch": self.epoch + 1, "lr": lr, **train_stats}
        for split in ("val", *self.config.track):
            stats = split_stats(*self._predictions(split), n_bins=self.config.n_bins)
            line.update({f"{split}_{k}": v for k, v in stats.items()})
        line["classifier_norm"] = self.classifier_norm()
        line.update(self.epoch_extras())
        line["seconds"] = seconds
        return line

    def _update_best(self, line: dict[str, Any]) -> None:
        """Keep a CPU copy of the weights of the lowest-validation-error epoch (select="best_val")."""
        if self.config.select != "best_val":
            return
        err = 1.0 - float(line["val_acc"])
        if self.best is None or err < self.best["val_error"]:
            state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self.best = {"epoch": self.epoch, "val_error": err, "model": state}

    @property
    def selected_epoch(self) -> int:
        """The epoch whose weights the run record holds: the last, or the best on validation."""
        if self.config.select == "best_val" and self.best is not None:
            return int(self.best["epoch"])
        return self.epoch

    # -- evaluation ------------------------------------------------------------------------------

    @torch.no_grad()
    def predict(self, split: str, *, data: cdata.Splits | None = None) -> tuple[Tensor, Tensor]:
        """Float32 logits and labels of a whole split ("train", "val" or "test"), on CPU.

        ``data``: other :class:`calib.data.Splits` of the same dataset to predict on (e.g.
        the full test set after training tracked a subset), normalised as the run's own.
        """
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
        self.model.eval()
        if data is not None:
            own, self.data = self.data, data
            try:
                loader = self.build_loader(split)
            finally:
                self.data = own
        else:
            loader = self.eval_loader(split)
        outs, labels = [], []
        for x, y in loader:
            with self.autocast():
                outs.append(self.model(x).float())
            labels.append(y)
        return torch.cat(outs).cpu(), torch.cat(labels).cpu().long()

    def eval_loader(self, split: str) -> cdata.DeviceLoader:
        """The unshuffled loader of ``split``, built once."""
        if split not in self._eval_loaders:
            self._eval_loaders[split] = self.build_loader(split)
        return self._eval_loaders[split]

    def evaluate(self, split: str = "val") -> dict[str, float | None]:
        """:func:`split_stats` of one split: accuracy, NLL, ECE, correct/wrong NLL and entropy."""
        return split_stats(*self.predict(split), n_bins=self.config.n_bins)

    def _predictions(self, split: str) -> tuple[Tensor, Tensor]:
        """:meth:`predict`, computed once for the weights of the epoch just trained."""
        if split not in self._predicted:
            self._predicted[split] = self.predict(split)
        return self._predicted[split]

    def classifier_norm(self) -> float | None:
        """Frobenius norm of the last linear layer's weights (Mukhoti et al. (2020) Fig. 2e); None if none."""
        head = getattr(self.model, "classifier", None)
        return float(head.weight.detach().norm()) if isinstance(head, nn.Linear) else None

    # -- run directory -----------------------------------------------------------------------------

    @property
    def out(self) -> Path | None:
        return Path(self.config.out) if self.config.out else None

    @property
    def checkpoint_path(self) -> Path | None:
        return self.out / CHECKPOINT_FILE if self.out is not None else None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def checkpoint_state(self, *, step: int = 0, sums: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Everything needed to continue exactly (:func:`calib.train.checkpoint.trainer_state`)."""
        return checkpoint.trainer_state(self, step=step, sums=sums)

    def save_checkpoint(self, *, step: int = 0, sums: Mapping[str, Any] | None = None) -> Path | None:
        """Write the checkpoint atomically (rank 0); ``step``/``sums`` locate a mid-epoch stop."""
        path = self.checkpoint_path
        if path is None:
            return None
        if self.is_main:
            atomic_save(self.checkpoint_state(step=step, sums=sums), path, durable=self.config.fsync)
        distributed.barrier(self.world_size)
        return path

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` (refusing another run's)."""
        self._resume_at = checkpoint.restore(self, path)
        self._predicted.clear()

    def _prepare_out(self, resume: bool) -> None:
        out, ckpt = self.out, self.checkpoint_path
        if out is None or ckpt is None:
            if resume:
                raise ValueError("resume=True needs config.out (the run directory)")
            return
        if ckpt.exists() and not resume:
            raise FileExistsError(f"{out} already holds a checkpoint; pass resume=True (CLI: --resume) "
                                  "to continue it, or choose another out")
        if self.is_main:
            out.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):  # left by a run killed while writing
                (out / f".{CHECKPOINT_FILE}.tmp").unlink()
        distributed.barrier(self.world_size)
        if resume and ckpt.exists():
            self.load_checkpoint(ckpt)
        if self.is_main:
            atomic_write_text(out / CONFIG_FILE, json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n")
            # the history file always mirrors the checkpoint (a killed run may have written past it)
            atomic_write_text(out / HISTORY_FILE, "".join(json.dumps(h) + "\n" for h in self.history))

    def _append_history(self, line: dict[str, Any]) -> None:
        self.history.append(line)
        if self.out is not None and self.is_main:
            with open(self.out / HISTORY_FILE, "a") as fh:
                fh.write(json.dumps(line) + "\n")

    def _save_epoch_logits(self) -> None:
        if self.out is None:
            return
        record: dict[str, Tensor] = {}
        for split in ("val", "test", *(("train",) if "train" in self.config.track else ())):
            record[f"{split}_logits"], record[f"{split}_labels"] = self._predictions(split)
        if self.is_main:
            folder = self.out / EPOCH_LOGITS_DIR
            folder.mkdir(exist_ok=True)
            atomic_save(record, folder / f"epoch_{self.epoch:04d}.pt", durable=self.config.fsync)

    def finish(self) -> dict[str, Any]:
        """Save val/test logits and (on rank 0) write ``metrics.json``; return the metrics.

        With ``select="best_val"`` the best validation epoch's weights are loaded first, so
        ``model``, the logits and the metrics all belong to that epoch.
        """
        if self.config.select == "best_val" and self.best is not None:
            self.model.load_state_dict(self.best["model"])
            self._predicted.clear()
        val_logits, val_labels = self._predictions("val")
        test_logits, test_labels = self._predictions("test")
        record = {"val_logits": val_logits, "val_labels": val_labels,
                  "test_logits": test_logits, "test_labels": test_labels,
                  "selected_epoch": torch.tensor(self.selected_epoch)}
        if self.out is None:
            return compute_metrics(record, n_bins=self.config.n_bins, ts_method=self.config.ts_method,
                                   ts_grid_step=self.config.ts_grid_step, select=self.config.select)
        if self.is_main:
            atomic_save(record, self.out / LOGITS_FILE, durable=self.config.fsync)
            metrics = evaluate_run(self.out)
        distributed.barrier(self.world_size)
        return metrics if self.is_main else json.loads((self.out / METRICS_FILE).read_text())


def _check_split_labels(data: cdata.Splits) -> None:
    """Labels of every split lie in ``[0, num_classes)``: checked once, not on every step."""
    for split in ("train", "val", "test"):
        y = getattr(data, f"{split}_y", None)
        if isinstance(y, Tensor) and y.numel():
            check_labels(y, y.shape[0], int(data.num_classes), f"data.{split}_y")


def evaluate_run(run_dir: str | os.PathLike, *, n_bins: int | None = None, ts_method: str | None = None,
                 ts_grid_step: float | None = None) -> dict[str, Any]:
    """Recompute ``metrics.json`` of a run from its saved logits (no retraining) and return it.

    ``n_bins``, ``ts_method`` and ``ts_grid_step`` default to the run's config.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    cfg = load_config(run_dir)
    metrics = compute_metrics(load_logits(run_dir), n_bins=n_bins or cfg.n_bins, ts_method=ts_method or cfg.ts_method,
                              ts_grid_step=ts_grid_step or cfg.ts_grid_step, select=cfg.select)
    atomic_write_text(run_dir / METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics
