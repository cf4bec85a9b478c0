"""What a long run tells its user: progress bars (``CALIB_PROGRESS=0`` silences them), a
non-finite-loss flag checked without a host sync per step, and the two ways a run stops early."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

PROGRESS_ENV = "CALIB_PROGRESS"  # "0" silences the progress bars



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



def _progress_enabled(flag: bool | None) -> bool:
    if flag is not None:
        return bool(flag)
    return os.environ.get(PROGRESS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")



def _tqdm_class(show: bool) -> type:
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



# Steps between checks of the non-finite-loss flag (each check is one device-to-host sync).
_FINITE_CHECK_EVERY = 50



def _note_nonfinite(first_bad: Tensor | None, loss: Any, step: int) -> Tensor | None:
    """Record on the loss's device the first ``step`` whose loss is not finite, without a sync."""
    if loss is None:
        return first_bad
    loss = loss.detach() if isinstance(loss, Tensor) else torch.tensor(float(loss))
    if first_bad is None:
        first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
    bad = ~torch.isfinite(loss).all()
    return torch.where(bad & (first_bad < 0), torch.full_like(first_bad, step), first_bad)
