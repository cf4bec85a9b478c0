"""What a run computes: :class:`TrainConfig` (JSON-serialisable), smoke-mode caps, reading it back."""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import profile as _profile
from .._checks import check_nonnegative, check_positive_int
from .presets import PRESET_EPOCHS, PRESETS, scaled_milestones
from .records import (
    CONFIG_FILE,
    TS_METHODS,
)

OPTIMIZERS = ("sgd", "adam", "adamw")


AMP_MODES = ("off", "auto", "bf16", "fp16")


SELECT_MODES = ("last", "best_val")
LOSS_REDUCTIONS = ("mean", "sum")


# random crop + flip by default: Mukhoti et al. (2020) App. B for CIFAR; for Tiny-ImageNet the
# papers are silent (our choice)
AUGMENTED = ("cifar10", "cifar100", "tiny_imagenet")


TOY_DATA = ("digits", "gaussian", "gaussian_overlap")  # offline data of calib.data.toy: fixed splits, no val_size


# Fields that may differ between a checkpoint and the run that resumes it: where and how
# fast it runs, not what it computes.
# The split sizes a config passes to calib.data.load (None: the loader's default).
SPLIT_SIZES = ("val_size", "train_size", "test_size")
_RUNTIME_FIELDS = ("out", "device", "progress", "compile", "channels_last", "amp", "eval_batch_size", "fsync",
                   "checkpoint_every")


@dataclass
class TrainConfig:
    """Everything a run depends on; JSON-serialisable (``to_json`` / ``from_json``).

    Defaults are the CIFAR protocol of Lin et al. (2024) §5 / Mukhoti et al. (2020) App. B
    (SGD 0.1, momentum 0.9, wd 5e-4,
    batch 128, lr ÷10 at 150 and 250 of 350 epochs). Use :meth:`from_preset` to get it scaled
    to a profile. ``batch_size`` is the global batch (split across ranks under DDP).
    ``val_size=None`` keeps the data loader's default split; ``train_size`` trains on a
    class-balanced seeded subset of the training split and ``test_size`` evaluates on one of
    the test split (``calib.data.load``). ``augment=None`` turns random
    crop + flip on for CIFAR-10/100 and Tiny-ImageNet only. ``amp``: "off", "auto" (bf16
    where supported, else fp16), "bf16" or "fp16"; AMP applies on CUDA only and the loss is
    always computed in float32. ``track`` lists extra splits ("train", "test") evaluated every
    epoch for training-dynamics plots (Mukhoti et al. (2020) §3, Figs. 1-2). ``meta``,
    ``meta_objective`` and
    ``meta_kwargs`` (gamma-Net settings, see ``calib.train.meta.META_DEFAULTS``) pick and
    configure the trainer (``calib.train.TRAINERS``, built by ``calib.train.make_trainer``).

    Protocol settings (see :mod:`calib.train.presets` for the papers' choices):

    * ``select``: ``"last"`` keeps the final weights; ``"best_val"`` keeps the weights of the
      epoch with the lowest validation error (first one on ties), as Wang & Golebiowski (2024)
      select their models; the chosen epoch is recorded in ``metrics.json``.
    * ``ts_method``: which temperature fit fills ``post_ts``/``temperature`` of ``metrics.json``:
      ``"nll"`` (Guo et al.) or ``"grid"`` (lowest validation ECE over ``ts_grid_step``,
      ``2 ts_grid_step``, ..., 10; Lin et al. (2024), §5 use a 0.1 step (Mukhoti et al. (2020) state no grid),
      Wang et al. (2021) 0.01). Both fits are always recorded under ``metrics["ts"]``.
    * ``loss_reduction``: ``"mean"`` (default) trains on the batch mean of the loss,
      ``"sum"`` on its batch sum, as the authors' code of Lin et al. (2024) and Mukhoti
      et al. (2020) does (``--loss-mean`` off by default); with SGD the sum is the mean with
      a learning rate and a weight-decay ratio scaled by the batch size, and with
      ``clip_grad`` nearly every step is clipped. The meta trainers always average.
    * ``clip_grad``: clip the global gradient norm to this value before each optimiser step
      of :meth:`Trainer.train_step` (the authors' code of Lin et al. (2024) and the public
      focal-loss code clip at 2, and sum the loss over the batch); ``None`` disables it. The gamma-Net meta step of ``calib.train.meta`` steps its own optimiser.
    * ``mixup_alpha``: train on mixup batches with λ ~ Beta(α, α) (:mod:`calib.train.mixup`;
      Wang & Golebiowski (2024) use α = 1.0); 0 (default) turns mixup off.
    * ``keep_epoch_logits``: save the validation and test logits after every epoch under
      ``epoch_logits/`` (:func:`load_epoch_logits`), e.g. for the post-TS ECE over epochs of
      Wang et al. (2021), Fig. 4; with ``"train"`` in ``track`` the (unaugmented) training
      logits too, for the learned epoch of each training sample (their Fig. 5).
    * ``fsync`` (runtime only): fsync checkpoints and logits after writing them (atomic
      either way; ``False`` trades power-cut durability for speed on tiny runs).
    * ``checkpoint_every`` (runtime only): write the epoch checkpoint every this many epochs
      (and after the last; a SIGTERM/SIGINT always writes one). A killed run resumes from the
      last one written and replays the epochs after it, with the same result.
    """

    data: str = "digits"
    model: str = "mlp"
    loss: str = "ce"
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    epochs: int = 350
    batch_size: int = 128
    # 256, not larger: on CPU a 1,024-image batch of cnn5 activations spills the cache and
    # evaluates ~1.4x slower (the logits are the same bit for bit)
    eval_batch_size: int = 256
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    milestones: tuple[int, ...] = (150, 250)
    gamma_lr: float = 0.1
    optimizer: str = "sgd"
    preset: str | None = None
    profile: str | None = None
    seed: int = 0
    val_size: int | None = None
    train_size: int | None = None
    test_size: int | None = None
    split_seed: int = 0
    data_root: str = "data"
    download: bool = False
    augment: bool | None = None
    n_bins: int = 15
    ts_method: str = "nll"
    track: tuple[str, ...] = ()
    amp: str = "off"
    channels_last: bool = False
    compile: bool = False
    device: str | None = None
    out: str | None = None
    progress: bool | None = None
    meta: str = "none"
    meta_objective: str = "sece"
    meta_kwargs: dict[str, Any] = field(default_factory=dict)
    select: str = "last"
    ts_grid_step: float = 0.1
    clip_grad: float | None = None
    loss_reduction: str = "mean"
    keep_epoch_logits: bool = False
    fsync: bool = True
    checkpoint_every: int = 1
    mixup_alpha: float = 0.0

    def __post_init__(self) -> None:
        self.milestones = tuple(int(m) for m in self.milestones)
        self.track = tuple(self.track)
        self.loss_kwargs = dict(self.loss_kwargs)
        self.model_kwargs = dict(self.model_kwargs)
        self.meta_kwargs = dict(self.meta_kwargs)
        self.validate()

    def validate(self) -> None:
        """Raise ValueError/TypeError naming the field for any value out of range."""
        for name in ("epochs", "batch_size", "eval_batch_size", "n_bins", "checkpoint_every"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.seed, "seed", minimum=0)
        check_positive_int(self.split_seed, "split_seed", minimum=0)
        for name in SPLIT_SIZES:
            if getattr(self, name) is not None:
                check_positive_int(getattr(self, name), name, minimum=1)
        for name in ("lr", "momentum", "weight_decay", "gamma_lr"):
            check_nonnegative(getattr(self, name), name)
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0 < self.gamma_lr <= 1:
            raise ValueError(f"gamma_lr (the lr decay factor) must lie in (0, 1], got {self.gamma_lr}")
        if any(m < 1 for m in self.milestones) or list(self.milestones) != sorted(set(self.milestones)):
            raise ValueError(f"milestones must be increasing epochs >= 1, got {self.milestones}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {AMP_MODES}, got {self.amp!r}")
        if self.ts_method not in TS_METHODS:
            raise ValueError(f"ts_method must be 'nll' or 'grid', got {self.ts_method!r}")
        if self.loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {self.loss_reduction!r}")
        if self.loss_reduction == "sum" and self.meta != "none":
            raise ValueError(f"loss_reduction='sum' is for the standard trainer; meta={self.meta!r} averages the loss "
                             "(Wang & Golebiowski (2024) give no code to follow)")
        if self.select not in SELECT_MODES:
            raise ValueError(f"select must be one of {SELECT_MODES}, got {self.select!r}")
        if isinstance(self.ts_grid_step, bool) or not isinstance(self.ts_grid_step, (int, float)) \
                or not 0 < self.ts_grid_step <= 10:
            raise ValueError(f"ts_grid_step must be a number in (0, 10], got {self.ts_grid_step!r}")
        if self.clip_grad is not None and (isinstance(self.clip_grad, bool)
                                           or not isinstance(self.clip_grad, (int, float))
                                           or not math.isfinite(self.clip_grad) or self.clip_grad <= 0):
            raise ValueError(f"clip_grad must be None or a finite number > 0, got {self.clip_grad!r}")
        from .mixup import check_alpha

        if check_alpha(self.mixup_alpha, "mixup_alpha") > 0 and self.meta != "none":
            raise ValueError(f"mixup_alpha > 0 cannot be combined with meta={self.meta!r} (its own train step)")
        if not isinstance(self.fsync, bool):
            raise TypeError(f"fsync must be True or False, got {self.fsync!r}")
        if not isinstance(self.keep_epoch_logits, bool):
            raise TypeError(f"keep_epoch_logits must be True or False, got {self.keep_epoch_logits!r}")
        if bad := [s for s in self.track if s not in ("train", "test")]:
            raise ValueError(f"track may hold 'train' and 'test' only, got {bad}")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        for name in ("data", "model", "loss"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        for name in ("loss_kwargs", "model_kwargs", "meta_kwargs"):
            try:
                json.dumps(getattr(self, name))
            except TypeError as exc:
                raise TypeError(f"{name} must be JSON-serialisable: {exc}") from None

    @classmethod
    def from_preset(cls, preset: str, profile: str | None = None, **overrides: Any) -> "TrainConfig":
        """The ``preset`` schedule scaled to ``profile`` (default: the active one), then ``overrides``.

        ``paper`` gives the paper's protocol as far as the paper and the authors' public code fix it; ``colab``/``quick`` cut the epochs (see
        :data:`PRESET_EPOCHS`) and scale the milestones in proportion. Presets (see
        :mod:`calib.train.presets`): the ``cifar`` and ``tiny_imagenet`` schedules, and the papers'
        protocols ``lin2024``, ``mukhoti2020``, ``wang2024`` and ``wang2021``, which also set
        the temperature fit, model selection and gradient clipping of that paper. Passing ``epochs`` in
        ``overrides`` rescales the milestones to it unless ``milestones`` is passed too.
        """
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
        prof = profile or _profile.current()
        base = dict(PRESETS[preset])
        paper_epochs, paper_ms = base["epochs"], base["milestones"]
        epochs = overrides.pop("epochs", _profile.pick(**PRESET_EPOCHS[preset], profile=prof))
        base.update(epochs=epochs, milestones=scaled_milestones(paper_ms, paper_epochs, epochs))
        base.update(preset=preset, profile=prof)
        if overrides.get("data") in TOY_DATA:
            base["val_size"] = None  # the toy datasets come with their own fixed split
        base.update(overrides)
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["milestones"] = list(self.milestones)
        d["track"] = list(self.track)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(d) - known):
            raise ValueError(f"unknown TrainConfig fields: {unknown}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        return cls.from_dict(json.loads(text))

    def identity(self) -> dict[str, Any]:
        """The fields that define *what* is computed (runtime fields such as out/device removed)."""
        d = self.to_dict()
        for k in _RUNTIME_FIELDS:
            d.pop(k, None)
        return d


def check_config(config: Any) -> TrainConfig:
    """``config`` itself if it is a valid :class:`TrainConfig` (fields may be set after construction)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    config.validate()
    return config


def smoke_config(config: TrainConfig) -> TrainConfig:
    """``config`` capped for smoke mode (``CALIB_SMOKE=1``), or ``config`` itself outside it.

    Keeps the profile's code path (model, loss, optimiser, AMP, channels_last, augmentation,
    meta settings) and cuts the work: at most ``SMOKE_CAPS["epochs"]`` epochs (milestones
    rescaled by :func:`scaled_milestones`, so the learning rate still drops) and
    ``SMOKE_CAPS["batch_size"]`` examples a batch; with the data cut by
    :func:`calib.data.splits.smoke_subset` an epoch is a few optimisation steps. The
    checkpoint is written at the last epoch only and not fsynced (runtime fields: the
    code path stays, the disk time of a ResNet-50's 100 MB a checkpoint goes).
    """
    if not _profile.smoke():
        return config
    caps = _profile.SMOKE_CAPS
    epochs = min(config.epochs, caps["epochs"])
    milestones = scaled_milestones(config.milestones, config.epochs, epochs) if config.milestones else ()
    return dataclasses.replace(
        config, epochs=epochs, milestones=milestones,
        batch_size=min(config.batch_size, caps["batch_size"]),
        eval_batch_size=min(config.eval_batch_size, 4 * caps["batch_size"]),
        checkpoint_every=max(config.checkpoint_every, epochs), fsync=False,
    )


def load_config(run_dir: str | os.PathLike) -> TrainConfig:
    """The :class:`TrainConfig` a run directory was trained with."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a calib run directory?")
    try:
        return TrainConfig.from_json(path.read_text())
    except (ValueError, TypeError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} is corrupt or not a calib configuration ({type(exc).__name__}: {exc})") from None
