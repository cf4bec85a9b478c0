"""The bookkeeping beside the training loop, in one helper (:class:`Monitor`): the epoch's
running sums (resumed mid-epoch from a checkpoint), a NaN/inf flag kept on the device,
SIGINT/SIGTERM, progress bars (``CALIB_PROGRESS=0`` silences them) and the epoch means
summed over processes; plus the two ways a run stops early."""
from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

import torch
from torch import Tensor

from . import distributed

PROGRESS_ENV = "CALIB_PROGRESS"  # "0" silences the progress bars
# Steps between reads of the non-finite-loss flag (each read is one device-to-host sync).
FINITE_CHECK_EVERY = 50


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or inf; the checkpoint of the last finished epoch is kept."""

    def __init__(self, epoch: int, step: int, lr: float, path: Path | None):
        self.epoch, self.step, self.lr, self.path = epoch, step, lr, path
        kept = f"; the last good checkpoint is kept in {path}" if path and path.exists() else ""
        super().__init__(f"training diverged: the loss is NaN or inf at epoch {epoch}, step {step}{kept}; "
                         f"try a lower learning rate (now {lr:g}, e.g. --lr {lr / 10:g})")


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Trainer.fit` after SIGTERM/SIGINT, once the checkpoint is safely written."""

    def __init__(self, signum: int, path: Path | None):
        self.signum = signum
        self.path = path
        where = f"checkpoint saved to {path}; resume with resume=True (CLI: --resume)" if path else "no run directory"
        super().__init__(f"training stopped by {signal.Signals(signum).name}: {where}")


def progress_enabled(flag: bool | None) -> bool:
    """``flag`` when set, else ``$CALIB_PROGRESS`` (on unless "0", "false", "no" or "off")."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(PROGRESS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def tqdm_class(show: bool) -> type:
    """``tqdm.auto`` (a widget in notebooks) when bars are shown, plain ``tqdm`` otherwise.

    ``tqdm.auto`` warns at import in a notebook without ipywidgets and falls back to text bars;
    that warning is silenced, and never triggered when the bars are off.
    """
    if not show:
        from tqdm import tqdm

        return tqdm
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm
    return tqdm


class Run(Protocol):
    """What :class:`Monitor` reads of the run it watches; :class:`calib.train.Trainer` is one.

    Declared here so that the trainer imports the monitor and never the other way round.
    """

    config: Any  # a TrainConfig: progress, epochs, model, loss
    epoch: int
    device: torch.device
    world_size: int
    optimizer: torch.optim.Optimizer

    @property
    def is_main(self) -> bool: ...

    @property
    def checkpoint_path(self) -> Path | None: ...

    def save_checkpoint(self, *, step: int = 0, sums: Mapping[str, Any] | None = None) -> Path | None: ...


class Monitor:
    """Everything :meth:`Trainer.fit`'s loop keeps besides the maths, so the loop shows only that.

    A context manager (signal handlers and the epoch bar live while it is open). Per epoch:
    :meth:`batches` yields the loader's batches from the resumed step, the loop hands each
    step's output to :meth:`record`, and :meth:`epoch_means` returns the train loss/accuracy
    averaged over every process. A NaN/inf loss is flagged on the device and read every
    :data:`FINITE_CHECK_EVERY` steps, so a GPU is not made to wait on the host each step; a
    signal stops the run after the current step, with a checkpoint (never of NaN weights).
    """

    def __init__(self, trainer: Run, step: int = 0, sums: Mapping[str, float] | None = None) -> None:
        self.trainer = trainer
        self.show = progress_enabled(trainer.config.progress) and trainer.is_main
        self.tqdm = tqdm_class(self.show)
        self.step, self.sums = step, dict(sums or {})  # a checkpoint taken mid-epoch resumes both
        self.first_bad: Tensor | None = None  # on the device: the first step whose loss was NaN/inf, or -1
        self.signum: int | None = None
        self._handlers: dict[int, Any] = {}

    def __enter__(self) -> Monitor:
        if threading.current_thread() is threading.main_thread():
            self._handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        c, t = self.trainer.config, self.trainer
        self.epoch_bar = self.tqdm(total=c.epochs, initial=t.epoch, desc=f"{c.model}/{c.loss}", unit="ep",
                                   disable=not self.show, dynamic_ncols=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.epoch_bar.close()
        for s, h in self._handlers.items():
            signal.signal(s, h)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signum = signum  # acted on between steps, so a step is never cut in half

    def batches(self, loader: Any) -> Iterator[tuple[Tensor, Tensor]]:
        """The epoch's batches, from the resumed position; checkpoints and stops at a signal."""
        self._stop_if_signalled()
        with self.tqdm(total=len(loader), leave=False, disable=not self.show, mininterval=1.0,
                       desc=f"epoch {self.trainer.epoch + 1}", dynamic_ncols=True) as bar:
            bar.update(self.step)
            for batch in loader:
                yield batch
                bar.update(1)
                self._stop_if_signalled()

    def record(self, out: Mapping[str, Tensor | float], n: int) -> None:
        """Add a step's outputs (weighted by its ``n`` examples) to the epoch's sums, on the device."""
        self._flag_nonfinite(out.get("loss"))
        if self.first_bad is not None and (self.step + 1) % FINITE_CHECK_EVERY == 0:
            self.check_finite()
        self.sums["_n"] = self.sums.get("_n", 0) + n
        for k, v in out.items():
            self.sums[k] = self.sums.get(k, 0.0) + (v.detach() if isinstance(v, Tensor) else v) * n
        self.step += 1

    def epoch_means(self) -> dict[str, float]:
        """``train_<key>``: each output's mean over the epoch's examples on all processes; resets the sums."""
        self.check_finite()
        t, sums = self.trainer, self.sums
        keys = sorted(k for k in sums if k != "_n")
        vec = torch.tensor([float(sums[k]) for k in keys] + [float(sums.get("_n", 0))], dtype=torch.float64)
        vec = distributed.all_reduce_sum(vec, t.device, t.world_size)
        n = max(vec[-1].item(), 1.0)
        self.step, self.sums, self.first_bad = 0, {}, None
        return {f"train_{k}": vec[i].item() / n for i, k in enumerate(keys)}

    def epoch_done(self, line: Mapping[str, Any]) -> None:
        self.epoch_bar.update(1)
        self.epoch_bar.set_postfix(loss=f"{line['train_loss']:.3f}", val_acc=f"{line['val_acc']:.3f}",
                                   val_nll=f"{line['val_nll']:.3f}", val_ece=f"{line['val_ece']:.3f}")

    def diverged(self) -> TrainingDiverged:
        """The error for a step whose loss refused NaN/inf logits (an earlier flagged step wins)."""
        self.check_finite()
        return self._diverged_at(self.step)

    def check_finite(self) -> None:
        """Raise :class:`TrainingDiverged` if a recorded loss was NaN/inf (one host sync)."""
        if self.first_bad is not None and int(self.first_bad) >= 0:
            raise self._diverged_at(int(self.first_bad))

    def _diverged_at(self, step: int) -> TrainingDiverged:
        t = self.trainer
        return TrainingDiverged(t.epoch + 1, step + 1, t.optimizer.param_groups[0]["lr"], t.checkpoint_path)

    def _flag_nonfinite(self, loss: Any) -> None:
        """Note on the loss's device the first step whose loss is not finite, without a sync."""
        if loss is None:
            return
        loss = loss.detach() if isinstance(loss, Tensor) else torch.tensor(float(loss))
        if self.first_bad is None:
            self.first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
        bad = ~torch.isfinite(loss).all()
        self.first_bad = torch.where(bad & (self.first_bad < 0), torch.full_like(self.first_bad, self.step),
                                     self.first_bad)

    def _stop_if_signalled(self) -> None:
        if self.signum is None:
            return
        self.check_finite()  # never checkpoint NaN weights
        signum, self.signum = self.signum, None
        path = self.trainer.save_checkpoint(step=self.step, sums=self.sums)
        raise TrainingInterrupted(signum, path)
