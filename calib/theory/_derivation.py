"""The :class:`Derivation` record every derivation returns, and the argument checks they share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sympy as sp
import torch

from .._checks import ArrayLike, as_tensor, check_nonnegative, check_probs

WeightFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Derivation:
    """An ordered chain of named sympy objects, displayed as aligned LaTeX in a notebook.

    ``steps`` maps a short name to an expression (or equation, or boolean); index the
    derivation like a dict. The test suite asserts on the named steps.
    """

    title: str
    steps: dict[str, sp.Basic] = field(default_factory=dict)

    def __getitem__(self, name: str) -> sp.Basic:
        return self.steps[name]

    def __contains__(self, name: object) -> bool:
        return name in self.steps

    def _repr_latex_(self) -> str:
        lines = [rf"\text{{{name.replace('_', ' ')}}}: &\quad {sp.latex(expr)}" for name, expr in self.steps.items()]
        return "$$\\begin{aligned}" + r" \\ ".join(lines) + "\\end{aligned}$$"

    def __str__(self) -> str:
        body = "\n".join(f"  {name}: {expr}" for name, expr in self.steps.items())
        return f"{self.title}\n{body}"


def _symbols_by_name(expr: sp.Basic) -> dict[str, sp.Symbol]:
    return {s.name: s for s in expr.free_symbols}


def _check_gamma(gamma: float, name: str = "gamma", minimum: float = 0.0) -> float:
    value = check_nonnegative(gamma, name)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_unit(x: ArrayLike, name: str, *, open_interval: bool = False) -> np.ndarray:
    """A finite, non-empty float64 array with values in [0, 1] (or (0, 1))."""
    arr = np.asarray(as_tensor(x, name).detach().cpu().numpy(), dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    lo_ok = arr > 0 if open_interval else arr >= 0
    hi_ok = arr < 1 if open_interval else arr <= 1
    if not (np.all(lo_ok) and np.all(hi_ok)):
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}; got values in [{arr.min():.4g}, {arr.max():.4g}]")
    return arr


def _check_distribution(x: ArrayLike, name: str, *, positive: bool = False) -> torch.Tensor:
    """A float64 CPU ``(N, K)`` (or ``(K,)`` promoted) probability matrix; strictly positive if asked.

    The numerical checks of this module are small; they run on the CPU in float64.
    """
    t = as_tensor(x, name).detach().cpu()
    if t.ndim == 1:
        t = t.unsqueeze(0)
    t = check_probs(t.to(torch.float64), name, atol=1e-6)
    if positive and bool((t <= 0).any()):
        raise ValueError(f"{name} must be strictly positive (log of a zero probability is -inf)")
    return t
