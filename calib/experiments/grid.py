"""A sweep's grid: loss specs (``"focal:gamma=3@mixup_alpha=1"``), seeds, shards and the cells they make."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

_GRID_FIELDS = ("data", "model", "loss", "loss_kwargs", "seed", "out")


class SweepError(ValueError):
    """A sweep that cannot run: a bad grid, or a directory that belongs to another sweep."""


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _normal(value: Any) -> Any:
    """Integral floats as ints, so ``gamma=3`` and ``{"gamma": 3.0}`` name the same cell.

    Only where a float holds every integer exactly (below 2^53): ``lr=1e30`` stays a float.
    """
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _parse_items(text: str, spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, raw = item.partition("=")
        if not eq or not key.strip().isidentifier():
            raise SweepError(f"loss {spec!r}: expected NAME[:key=value,...][@field=value,...], got item {item!r}")
        out[key.strip()] = _parse_value(raw.strip())
    return out


def _check_settings(settings: Mapping[str, Any], spec: Any) -> dict[str, Any]:
    from ..train import TrainConfig

    known = set(TrainConfig.__dataclass_fields__) - set(_GRID_FIELDS)
    if bad := sorted(set(settings) - known):
        raise SweepError(f"loss {spec!r}: {', '.join(bad)} is not a training setting a cell may change "
                         f"(TrainConfig fields other than {', '.join(_GRID_FIELDS)})")
    return {str(k): _normal(v) for k, v in sorted(settings.items())}


def parse_method(spec: str | Sequence[Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``"ce@mixup_alpha=1"`` -> ``("ce", {}, {"mixup_alpha": 1})``: a loss plus per-cell training settings.

    Also ``(name, kwargs)`` and ``(name, kwargs, settings)``. The loss part is checked by
    :func:`parse_loss`; the settings must be :class:`calib.train.TrainConfig` fields (their
    values are checked when the cells' configurations are built).
    """
    if isinstance(spec, str):
        loss_part, _, settings_part = spec.partition("@")
        name, kwargs = parse_loss(loss_part)
        return name, kwargs, _check_settings(_parse_items(settings_part, spec), spec)
    if isinstance(spec, (tuple, list)) and len(spec) == 3 and isinstance(spec[2], Mapping):
        name, kwargs = parse_loss((spec[0], spec[1]))
        return name, kwargs, _check_settings(dict(spec[2]), spec)
    name, kwargs = parse_loss(spec)
    return name, kwargs, {}


def parse_loss(spec: str | Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``"focal:gamma=3"`` -> ``("focal", {"gamma": 3})``; also ``"ce"`` and ``("focal", {"gamma": 3})``.

    Values are read as JSON where they parse (numbers, true/false), else kept as strings.
    The name must be in ``calib.losses.names()`` and the keywords must be ones that loss
    takes, with valid values (the loss is built once to check): otherwise :class:`SweepError`.
    """
    from .. import losses

    if isinstance(spec, str):
        if "@" in spec:
            raise SweepError(f"loss {spec!r} carries training settings after '@': read it with parse_method")
        name, _, rest = spec.partition(":")
        kwargs: dict[str, Any] = _parse_items(rest, spec)
    elif isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[1], Mapping):
        name, kwargs = spec[0], dict(spec[1])
    else:
        raise SweepError(f"loss must be 'NAME', 'NAME:key=value,...' or (NAME, {{kwargs}}), got {spec!r}")
    if not isinstance(name, str) or not name.strip():
        raise SweepError(f"loss {spec!r}: the name must be a non-empty string")
    name = name.strip()
    if name not in losses.names():
        raise SweepError(f"loss {name!r} is not a loss; choose one of {', '.join(losses.names())}")
    kwargs = {str(k): _normal(v) for k, v in sorted(kwargs.items())}
    try:
        losses.make(name, **kwargs)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"loss {spec!r}: {exc}") from None
    return name, kwargs


def format_loss_kwargs(kwargs: Mapping[str, Any]) -> str:
    """``{"gamma": 4, "norm": 2}`` -> ``"gamma=4,norm=2"`` (the CLI syntax; ``""`` for none)."""
    return ",".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(kwargs.items()))


def parse_shard(shard: str | Sequence[int] | None) -> tuple[int, int] | None:
    """``"2/4"`` or ``(2, 4)`` -> ``(2, 4)``: shard ``i`` of ``n``, 1 <= i <= n."""
    if shard is None:
        return None
    try:
        if isinstance(shard, str):
            i_text, slash, n_text = shard.partition("/")
            if not slash:
                raise ValueError
            i, n = int(i_text), int(n_text)
        else:
            i, n = (int(v) for v in shard)
    except (TypeError, ValueError):
        raise SweepError(f"shard must be I/N with integers 1 <= I <= N, got {shard!r}") from None
    if not 1 <= i <= n:
        raise SweepError(f"shard must be I/N with 1 <= I <= N, got {i}/{n}")
    return i, n


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+@-]", "_", text)


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    data: str
    model: str
    loss: str
    loss_kwargs: tuple[tuple[str, Any], ...]
    seed: int
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.loss_kwargs)

    @property
    def method(self) -> tuple:
        """What the summary groups by: (data, model, loss, loss_kwargs, settings) as text."""
        return (self.data, self.model, self.loss, format_loss_kwargs(self.kwargs),
                format_loss_kwargs(dict(self.settings)))

    @property
    def name(self) -> str:
        """Directory name under ``runs/``, e.g. ``digits__mlp__focal-gamma=3__s0``, ``..__ce@mixup_alpha=1__s0``."""
        kw = format_loss_kwargs(self.kwargs)
        loss = f"{self.loss}-{kw}" if kw else self.loss
        if self.settings:
            loss += "@" + format_loss_kwargs(dict(self.settings))
        return _slug(f"{self.data}__{self.model}__{loss}__s{self.seed}")


def cell_name_parts(name: str) -> tuple[str, str, int] | None:
    """(loss, settings, seed) of a run directory named by :attr:`Cell.name`,
    ``<data>__<model>__<loss>[-<loss kwargs>][@<settings>]__s<seed>``: ``"focal"``,
    ``"clip_grad=2,lr=0.1"``, 0. The settings are as the name spells them (slugged, so
    JSON in them is not parsed back); None for a name of another form."""
    parts = name.split("__")
    if len(parts) < 4 or not re.fullmatch(r"s\d+", parts[-1]):
        return None
    spec, _, settings = "__".join(parts[2:-1]).partition("@")  # a slugged setting may hold "__"
    return spec.split("-", 1)[0], settings, int(parts[-1][1:])


def _as_list(value: str | Iterable[str], what: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    items = [v.strip() for item in items for v in str(item).split(",") if v.strip()]
    if not items:
        raise SweepError(f"{what} must name at least one {what}")
    return list(dict.fromkeys(items))


def _seeds(seeds: Any, preset: str | None) -> list[int]:
    from ..train.presets import PAPER_SEEDS

    if isinstance(seeds, str) and seeds.strip() == "paper":
        if preset not in PAPER_SEEDS:
            raise SweepError(f"seeds='paper' needs a preset whose paper states its seeds: one of "
                             f"{sorted(PAPER_SEEDS)}, got preset {preset!r}")
        return list(PAPER_SEEDS[preset])  # grid_cells caps them in smoke mode
    if isinstance(seeds, str):
        seeds = [s for s in seeds.split(",") if s.strip()]
    elif isinstance(seeds, int):
        seeds = [seeds]
    try:
        out = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise SweepError(f"seeds must be integers >= 0 such as 0,1,2, got {seeds!r}") from None
    if not out:
        raise SweepError("seeds is empty: give at least one seed, e.g. seeds=[0, 1, 2] (CLI: --seeds 0,1,2)")
    if any(s < 0 for s in out) or any(isinstance(s, bool) for s in seeds):
        raise SweepError(f"seeds must be integers >= 0, got {seeds!r}")
    if len(set(out)) != len(out):
        raise SweepError(f"seeds must not repeat, got {out}")
    return out


def grid_cells(losses: Sequence[Any], seeds: Any, data: str | Iterable[str] = "digits",
               model: str | Iterable[str] = "mlp", preset: str | None = None) -> list[Cell]:
    """The cells of the grid in its fixed order: data, then model, then loss, then seed.

    In smoke mode (``CALIB_SMOKE=1``) only the first :data:`calib.profile.SMOKE_CAPS`
    ``["seeds"]`` seeds are kept: the same grid of losses, data and models, fewer repeats.
    """
    from .. import data as cdata
    from .. import models
    from .. import profile as _profile

    if isinstance(losses, str) or (isinstance(losses, tuple) and len(losses) == 2
                                   and isinstance(losses[1], Mapping)):
        losses = [losses]  # one loss given bare
    parsed = [parse_method(s) for s in losses]
    if not parsed:
        raise SweepError("losses is empty: give at least one loss (CLI: --loss NAME[:key=value,...])")
    keys = [(n, format_loss_kwargs(k), format_loss_kwargs(t)) for n, k, t in parsed]
    if dup := [f"{n}:{k}@{t}" for n, k, t in keys if keys.count((n, k, t)) > 1]:
        raise SweepError(f"loss listed twice: {dup[0]}")
    datas, model_names = _as_list(data, "data"), _as_list(model, "model")
    if bad := [d for d in datas if d not in cdata.datasets()]:
        raise SweepError(f"data {bad[0]!r} is not a dataset; choose one of {', '.join(cdata.datasets())}")
    if bad := [m for m in model_names if m not in models.names()]:
        raise SweepError(f"model {bad[0]!r} is not a model; choose one of {', '.join(models.names())}")
    seed_list = _seeds(seeds, preset)
    # CALIB_SMOKE=1: the first SMOKE_CAPS["seeds"] seeds only (every loss, data and model kept)
    seed_list = seed_list[:_profile.smoke_cap("seeds", len(seed_list))]
    return [Cell(d, m, n, tuple(sorted(k.items())), s, tuple(sorted(t.items())))
            for d in datas for m in model_names for n, k, t in parsed for s in seed_list]
