"""Temperature scaling: one ``T > 0`` fitted on validation logits, ``p = softmax(g / T)``.

The functional core (:func:`fit_temperature`, :func:`temperature_scale`) is what
:class:`TemperatureScaling` calls. Logits that look like probabilities (every row in
[0, 1] summing to 1) are refused: scaling probabilities by 1/T is not temperature scaling.

Sources: Guo et al. (2017) section 4.2; Wang et al. (2021) section 2; Mukhoti et al.
(2020) section 4 and Table 1, which picks T on validation ECE.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .. import metrics
from .._checks import ArrayLike, check_logits, check_positive, check_positive_int
from ._base import (CalibrationModule, Calibrator, NotFittedError, SeparationWarning, _logits_labels, like_input,
                    minimise_lbfgs, not_fitted)

__all__ = [
    "NotFittedError",
    "T_LIMIT",
    "default_grid",
    "temperature_scale",
    "fit_temperature",
    "TemperatureScaling",
    "TemperatureScalingModule",
]

Tensor = torch.Tensor
Method = Literal["nll", "grid"]
T_LIMIT = 1e3
"""A fitted temperature outside ``[1 / T_LIMIT, T_LIMIT]`` means a (nearly) separable or
uninformative validation set: :func:`fit_temperature` clips it there and warns."""
# The NLL fit searches beta = 1/T within _BETA_RANGE (T in [1e-6, 1e6]).
_BETA_RANGE = (1 / T_LIMIT**2, T_LIMIT**2)


def default_grid(step: float = 0.1, upper: float = 10.0) -> np.ndarray:
    """The temperatures ``step, 2 step, ..., upper`` searched on validation ECE.

    ``step=0.1`` is the grid of Lin et al. (2024) section 5 (their ``0, 0.1, ..., 10``
    without ``T = 0``; Mukhoti et al. (2020) state no grid); Wang et al. (2021) section 4 search ``0.01, ..., 10``
    (``step=0.01``). Values are rounded to 10 decimals so ``0.3`` is exactly ``0.3``.
    """
    step = check_positive(step, "step")
    upper = check_positive(upper, "upper")
    if step > upper:
        raise ValueError(f"step ({step}) must not exceed upper ({upper})")
    n = int(math.floor(upper / step + 1e-9))
    return np.round(np.arange(1, n + 1) * step, 10)


def _check_temperature(temperature: float | Tensor | np.ndarray) -> float:
    """A finite temperature > 0; a one-element tensor or array (e.g. 0-d) counts as a number."""
    if isinstance(temperature, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(temperature)
        if t.numel() != 1:
            raise ValueError(f"temperature must be a single number, got shape {tuple(t.shape)}")
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"temperature must be a real number, got dtype {t.dtype}")
        temperature = t.item()
    return check_positive(temperature, "temperature")


def temperature_scale(logits: ArrayLike, temperature: float | Tensor) -> Tensor | np.ndarray:
    """Scaled logits ``g / T`` (Wang et al. (2021) §2): ``T > 1`` softens, ``T < 1`` sharpens.

    The arg-max, hence the accuracy, never changes. Returns a tensor in the dtype and on
    the device of ``logits``, or a NumPy array for NumPy logits. ``temperature`` is a
    number > 0 or a one-element (e.g. 0-d) tensor or array.
    """
    g = check_logits(logits, "logits", refuse_probs=True)
    return like_input(g / _check_temperature(temperature), logits)


def _fit_nll(g: Tensor, y: Tensor, max_iter: int) -> float:
    """``argmin_T (1/N) sum_i -log softmax(g_i / T)_{y_i}`` by L-BFGS on ``beta = 1/T``, float64.

    Guo et al. (2017) fit the same objective with L-BFGS. The mean NLL ``L(beta)`` is convex
    in ``beta``, with ``L'' = (1/N) sum_i Var_p(g_i)`` (the variance of the logits under
    ``p = softmax(beta g_i)``), so its minimiser is the one root of the slope. The search
    (:func:`~calib.posthoc._base.minimise_lbfgs`) starts at ``T = 1`` with ``L''(1)`` as its
    curvature, inside ``beta in [1e-6, 1e6]`` (a bound reached means no finite minimiser,
    which the caller warns about and clips), and ends at a slope below 1e-10 in those
    units, 6-15 evaluations on the CIFAR records (safeguarded Newton, before, took 5-8).
    """
    g64 = g.double()
    p = torch.softmax(g64, dim=1)
    var = (p * g64.square()).sum(dim=1) - (p * g64).sum(dim=1).square()
    curvature = max(float(var.clamp_min(0).mean()), 1e-12)
    root = math.sqrt(curvature)
    lo, hi = _BETA_RANGE
    beta, _ = minimise_lbfgs(lambda b: F.cross_entropy(g64 * b, y), torch.ones(1, dtype=torch.float64, device=g.device),
                             max_iter, precondition=lambda phi: phi / root, bounds=((lo - 1) * root, (hi - 1) * root))
    return 1 / float(beta)


def _fit_grid(g: Tensor, y: Tensor, grid: np.ndarray, n_bins: int) -> float:
    """The first temperature of ``grid`` with the lowest ECE (``(lo, hi]`` bins).

    Temperature keeps the arg-max, so correctness is computed once; the confidence at
    ``T`` is ``1 / sum_k exp((g_k - g_max) / T)``. Values within 1e-12 of the minimum
    count as ties and the earliest one wins.
    """
    g64 = g.double()
    g_max, pred = g64.max(dim=1)
    shifted = g64 - g_max[:, None]
    correct = pred.eq(y)
    scores = []
    for t in grid:
        conf = 1.0 / torch.exp(shifted / float(t)).sum(dim=1)
        _, hits, conf_sum = metrics.bin_totals(metrics.bin_index(conf, n_bins), n_bins, correct, conf)
        scores.append(float((hits - conf_sum).abs().sum()) / conf.numel())  # the ECE at T
    scores_np = np.asarray(scores)
    best = int(np.flatnonzero(scores_np <= scores_np.min() + 1e-12)[0])
    return float(grid[best])


def _check_grid(grid: Sequence[float] | np.ndarray | None) -> np.ndarray:
    if grid is None:
        return default_grid()
    try:
        arr = np.asarray(grid, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"grid must be a sequence of numbers, got {type(grid).__name__}") from None
    if arr.size == 0:
        raise ValueError("grid must hold at least one temperature")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("grid temperatures must be finite and > 0")
    return arr


def fit_temperature(
    logits: ArrayLike,
    labels: ArrayLike,
    method: Method = "nll",
    *,
    grid: Sequence[float] | np.ndarray | None = None,
    n_bins: int = 15,
    max_iter: int = 100,
) -> float:
    """The temperature ``T`` that calibrates ``softmax(logits / T)`` on these labels.

    ``method="nll"``: minimise the mean NLL over ``T`` by L-BFGS on ``1/T`` (Guo et al.
    2017; :func:`_fit_nll`); at least 2 samples are needed. ``method="grid"``:
    the value in ``grid`` (default ``0.1, 0.2, ..., 10``) with the lowest ECE over
    ``n_bins`` bins, first minimum kept (Lin et al. (2024) section 5; Mukhoti et al. (2020),
    Table 1 cross-validate T on ECE without a grid; Wang et al. (2021) use a finer grid from 0.01, ``grid=default_grid(0.01)``).
    NLL is smooth and proper, so its optimum moves
    little with the sample; the ECE grid targets the reported metric directly.
    """
    if method not in ("nll", "grid"):
        raise ValueError(f'method must be "nll" or "grid", got {method!r}')
    n_bins = check_positive_int(n_bins, "n_bins")
    max_iter = check_positive_int(max_iter, "max_iter")
    g, y = _logits_labels(logits, labels)
    if g.shape[0] < 2:
        raise ValueError(f"logits must hold at least 2 samples to fit a temperature, got N = {g.shape[0]}")
    if method == "grid":
        return _fit_grid(g, y, _check_grid(grid), n_bins)
    t = _fit_nll(g, y, max_iter)
    if bool(g.argmax(dim=1).eq(y).all()):
        warnings.warn(
            "every validation prediction is correct, so the NLL keeps falling as T -> 0 and has no "
            f"finite minimiser; T = {t:.3g} is where the search stopped. Use a harder validation set "
            'or method="grid"',
            SeparationWarning,
            stacklevel=2,
        )
    if not math.isfinite(t) or not 1 / T_LIMIT <= t <= T_LIMIT:
        warnings.warn(
            f"fitted temperature {t:.3g} is extreme (the validation logits may say nothing about "
            f"the labels, or separate them perfectly); clipping to [{1 / T_LIMIT:g}, {T_LIMIT:g}]",
            RuntimeWarning,
            stacklevel=2,
        )
        t = min(max(t if math.isfinite(t) else T_LIMIT, 1 / T_LIMIT), T_LIMIT)
    return t


class TemperatureScalingModule(CalibrationModule):
    """``g -> g / T``: temperature scaling as a module (``returns = "logits"``).

    ``softmax(module(g))`` is :meth:`TemperatureScaling.predict_proba`; the buffer
    ``temperature`` is a float64 scalar.
    """

    returns = "logits"

    def __init__(self, temperature: float | Tensor):
        super().__init__()
        self.register_buffer("temperature", torch.as_tensor(temperature, dtype=torch.float64).detach().clone())

    def forward(self, logits: Tensor) -> Tensor:
        return logits / self.temperature.to(logits.device)

    def extra_repr(self) -> str:
        return f"temperature={float(self.temperature):.6g}, returns={self.returns!r}"


class TemperatureScaling(Calibrator):
    """Temperature scaling, ``p = softmax(g / T)`` with one ``T`` fitted on validation logits.

    >>> ts = TemperatureScaling(method="nll").fit(val_logits, val_labels)  # doctest: +SKIP
    >>> test_probs = ts.predict_proba(test_logits)                         # doctest: +SKIP

    ``method="nll"`` (L-BFGS on ``1/T``) or ``"grid"`` (ECE over ``grid``, first minimum
    kept); see :func:`fit_temperature`. After ``fit``, ``temperature`` is a float.
    NumPy logits give NumPy arrays; :meth:`~Calibrator.as_module`,
    :meth:`~Calibrator.state_dict` and :meth:`~Calibrator.load_state_dict` as for every
    :class:`Calibrator`.
    """

    def __init__(self, method: Method = "nll", grid: Sequence[float] | np.ndarray | None = None, n_bins: int = 15):
        if method not in ("nll", "grid"):
            raise ValueError(f'method must be "nll" or "grid", got {method!r}')
        self.method = method
        self.grid = None if grid is None else _check_grid(grid)
        self.n_bins = check_positive_int(n_bins, "n_bins")
        self._temperature: float | None = None

    def __repr__(self) -> str:
        fitted = "unfitted" if self._temperature is None else f"temperature={self._temperature:.4g}"
        return f"TemperatureScaling(method={self.method!r}, n_bins={self.n_bins}, {fitted})"

    @property
    def temperature(self) -> float:
        if self._temperature is None:
            raise not_fitted("TemperatureScaling")
        return self._temperature

    def _params(self) -> dict[str, Any]:
        grid = None if self.grid is None else [float(t) for t in self.grid]
        return {"method": self.method, "grid": grid, "n_bins": self.n_bins}

    def _state_keys(self) -> tuple[str, ...]:
        return ("temperature",)

    def _state(self) -> dict[str, Tensor] | None:
        return None if self._temperature is None else {"temperature": torch.tensor(self._temperature,
                                                                                  dtype=torch.float64)}

    def _set_state(self, state: dict[str, Tensor]) -> None:
        self._temperature = _check_temperature(state["temperature"])

    def _module(self) -> TemperatureScalingModule:
        return TemperatureScalingModule(self.temperature)

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "TemperatureScaling":
        self._temperature = fit_temperature(logits, labels, self.method, grid=self.grid, n_bins=self.n_bins)
        return self

    def transform(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Scaled logits ``g / T``, in the dtype of ``logits``."""
        self._fitted("transform")
        g = check_logits(logits, "logits", refuse_probs=True)
        return like_input(self._module()(g), logits)

    def predict_proba(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated probabilities ``softmax(g / T)``, in the dtype of ``logits``."""
        self._fitted("predict_proba")
        g = check_logits(logits, "logits", refuse_probs=True)
        return like_input(torch.softmax(self._module()(g), dim=1), logits)

    def fit_transform(self, logits: ArrayLike, labels: ArrayLike) -> Tensor | np.ndarray:
        return self.fit(logits, labels).transform(logits)
