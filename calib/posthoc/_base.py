"""What every calibrator of :mod:`calib.posthoc` shares: input checks, the fitted-state error,
the :class:`Calibrator` interface (types in = types out, ``as_module``, ``state_dict``) and
the one optimiser of the fitted maps (:func:`minimise_lbfgs`)."""
from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

import numpy as np
import torch

from .._checks import ArrayLike, check_labels, check_logits

if TYPE_CHECKING:
    import threadpoolctl

Tensor = torch.Tensor


class NotFittedError(ValueError, AttributeError):
    """A calibrator was used before ``fit`` (like scikit-learn's ``NotFittedError``)."""


class SeparationWarning(RuntimeWarning):
    """A fit's validation data are separated (every example classified correctly), so its
    unregularised NLL has no finite minimiser and the fitted parameters are wherever the
    optimiser stopped. A subclass of ``RuntimeWarning``: catch it by category, not by text."""


def _logits_labels(logits: ArrayLike, labels: ArrayLike) -> tuple[Tensor, Tensor]:
    """Validated ``(N, K)`` logits (probabilities refused) and int64 labels on their device."""
    g = check_logits(logits, "logits", refuse_probs=True)
    y = check_labels(labels, g.shape[0], g.shape[1], "labels").to(g.device)
    return g.detach(), y


def fit_inputs(logits: ArrayLike, labels: ArrayLike, who: str) -> tuple[Tensor, Tensor]:
    """:func:`_logits_labels` plus what a fitted map needs: N >= 2 and two distinct labels.

    With one class in the labels the likelihood keeps rising as that class's probability
    goes to 1, so no finite fit exists.
    """
    g, y = _logits_labels(logits, labels)
    if g.shape[0] < 2:
        raise ValueError(f"logits must hold at least 2 samples to fit {who}, got N = {g.shape[0]}")
    lo, hi = int(y.min()), int(y.max())
    if lo == hi:
        raise ValueError(f"labels hold a single class ({lo}); fitting {who} needs at least 2 classes in the labels")
    return g, y


def warn_absent_classes(y: Tensor, num_classes: int, who: str) -> None:
    """Warn when some class never occurs in the labels (its intercept has no finite optimum)."""
    absent = torch.nonzero(torch.bincount(y, minlength=num_classes) == 0).flatten().tolist()
    if absent:
        shown = ", ".join(map(str, absent[:10])) + (", ..." if len(absent) > 10 else "")
        warnings.warn(
            f"class(es) {shown} never occur in the labels, so {who} drives their probability toward 0 "
            "(no finite optimum without regularisation); use a larger validation set or regularise the intercept",
            RuntimeWarning,
            stacklevel=3,
        )


def check_logits_like(logits: ArrayLike, num_classes: int, who: str) -> Tensor:
    """Validated ``(N, K)`` logits (probabilities refused) with the fitted ``K``."""
    g = check_logits(logits, "logits", refuse_probs=True)
    if g.shape[1] != num_classes:
        raise ValueError(f"logits have K = {g.shape[1]} classes but {who} was fitted on K = {num_classes}")
    return g.detach()


def not_fitted(who: str, method: str | None = None) -> NotFittedError:
    """The error of using ``who`` before ``fit``; ``method``, when given, is the call that needed it."""
    when = f"before .{method}()" if method else "first"
    return NotFittedError(f"{who} is not fitted yet; call .fit(logits, labels) {when}")


def like_input(out: Tensor, logits: ArrayLike) -> Tensor | np.ndarray:
    """``out`` as the caller gave the logits: a tensor for a tensor, else a NumPy array (on the CPU)."""
    return out if isinstance(logits, torch.Tensor) else out.detach().cpu().numpy()


Returns = Literal["logits", "probabilities", "confidence"]


class CalibrationModule(torch.nn.Module):
    """A fitted calibration map as a :class:`torch.nn.Module` (what :meth:`Calibrator.as_module` returns).

    ``forward(logits)`` maps ``(N, K)`` logits to what :attr:`returns` names:

    * ``"logits"``: calibrated logits, so ``softmax(module(g))`` is the calibrator's
      ``predict_proba(g)`` (temperature, vector, matrix, Dirichlet and Platt scaling);
    * ``"probabilities"``: the calibrated ``(N, K)`` probabilities themselves (ensemble
      temperature scaling and isotonic calibration, whose maps mix or bin probabilities
      and have no logits);
    * ``"confidence"``: the calibrated top-label confidence ``(N,)`` (histogram binning).

    The fitted numbers are buffers (``module.to(device)`` moves them; they also follow
    the input to its device). The map runs in the buffers' dtype (float64, as the fit)
    and returns the input's dtype. ``forward`` checks no values (no host sync): the
    calibrator's own methods check their input.
    """

    returns: ClassVar[Returns] = "logits"

    def extra_repr(self) -> str:
        return f"returns={self.returns!r}"


class Calibrator:
    """The interface every calibrator of :mod:`calib.posthoc` shares, beyond ``fit`` and ``predict_proba``.

    * Types in = types out: a :class:`torch.Tensor` of logits gives tensors (on its
      device), a NumPy array (or a list) gives NumPy arrays.
    * :meth:`as_module`: the fitted map as a :class:`CalibrationModule`, to append to a
      network or move to a device.
    * :meth:`state_dict` and :meth:`load_state_dict`, in scikit-learn's spirit: the
      calibrator is the object that is saved, and the dict holds what rebuilds it, its
      class name, its constructor's hyper-parameters (``params``) and its fitted tensors
      (``state``, on the CPU), all of which ``torch.load(path, weights_only=True)`` reads::

          torch.save(cal.state_dict(), "cal.pt")
          cal = VectorScaling().load_state_dict(torch.load("cal.pt", weights_only=True))

      ``load_state_dict`` restores the hyper-parameters too, and refuses another
      calibrator's dict.

    Using any of them before ``fit`` raises :class:`NotFittedError` naming the calibrator
    and the call.
    """

    def _params(self) -> dict[str, Any]:
        """The constructor's keyword arguments that rebuild this calibrator unfitted."""
        raise NotImplementedError

    def _state(self) -> dict[str, Tensor] | None:
        """The fitted tensors (None when unfitted)."""
        raise NotImplementedError

    def _set_state(self, state: dict[str, Tensor]) -> None:
        raise NotImplementedError

    def _module(self) -> CalibrationModule:
        """The map as a module holding copies of the fitted tensors; callers checked it is fitted."""
        raise NotImplementedError

    def _fitted(self, method: str) -> dict[str, Tensor]:
        state = self._state()
        if state is None:
            raise not_fitted(type(self).__name__, method)
        return state

    def as_module(self) -> CalibrationModule:
        """The fitted map as a :class:`torch.nn.Module` (a copy: later fits do not change it).

        Its ``returns`` attribute says what ``forward`` gives (calibrated logits,
        probabilities or the top-label confidence; :class:`CalibrationModule`); its
        output equals this calibrator's ``predict_proba`` (through a softmax for logits)
        or ``predict_confidence`` to rounding (tested to 1e-6).
        """
        self._fitted("as_module")
        return self._module()

    def state_dict(self) -> dict[str, Any]:
        """``{"calibrator": class name, "params": hyper-parameters, "state": fitted tensors}``.

        The tensors are CPU copies, so the dict can be saved with :func:`torch.save` and read
        back with ``torch.load(path, weights_only=True)``.
        """
        state = self._fitted("state_dict")
        return {"calibrator": type(self).__name__, "params": dict(self._params()),
                "state": {k: v.detach().cpu().clone() for k, v in state.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> "Calibrator":
        """Become the calibrator saved in ``state_dict`` (hyper-parameters and fitted state); returns ``self``."""
        who = type(self).__name__
        if not isinstance(state_dict, dict) or set(state_dict) != {"calibrator", "params", "state"}:
            raise ValueError(f"{who}.load_state_dict needs the dict of .state_dict() with keys "
                             "'calibrator', 'params' and 'state'")
        if state_dict["calibrator"] != who:
            raise ValueError(f"this state_dict was saved from {state_dict['calibrator']}, not {who}")
        state = state_dict["state"]
        expected = set(self._state_keys())
        if not isinstance(state, dict) or set(state) != expected:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{who} state must hold {sorted(expected)}, got {got}")
        fresh = type(self)(**state_dict["params"])  # checks the hyper-parameters; self is untouched on error
        fresh._set_state({k: torch.as_tensor(v).detach().clone() for k, v in state.items()})
        self.__dict__.update(fresh.__dict__)
        return self

    def _state_keys(self) -> tuple[str, ...]:
        raise NotImplementedError


# L-BFGS stops at the first evaluated point whose preconditioned gradient entries are all
# below _GRAD_TOL, or when the objective stops decreasing (to rounding); a fit whose largest
# gradient entry ends above _WARN_TOL is reported as not converged. _HISTORY: correction
# pairs kept.
_GRAD_TOL = 1e-10
_WARN_TOL = 1e-5
_HISTORY = 20


class _Stationary(Exception):
    """Raised inside the search at a point with a gradient below tolerance: stop there."""


@functools.lru_cache(maxsize=1)
def _blas_threads() -> "threadpoolctl.ThreadpoolController":
    """The BLAS libraries loaded with scipy (scanned once: ``threadpool_limits`` rescans, ~1.5 ms a call)."""
    import scipy.optimize  # noqa: F401 - loads scipy's BLAS before the scan
    import threadpoolctl

    return threadpoolctl.ThreadpoolController()


def minimise_lbfgs(objective: Callable[[Tensor], Tensor], x0: Tensor, max_iter: int, *,
                   precondition: Callable[[Tensor], Tensor] | None = None,
                   bounds: tuple[float, float] | None = None) -> tuple[Tensor, float]:
    """``argmin_x objective(x)`` by L-BFGS-B, and the largest entry of the final gradient in ``x``:
    the one optimiser of every fitted calibration map.

    ``objective`` maps a flat float64 tensor to a scalar tensor on the device of ``x0``;
    autograd gives its gradient in the same closure. scipy's L-BFGS-B (Byrd et al. 1995;
    Guo et al. (2017) fit temperature scaling by L-BFGS) searches ``x = x0 + R phi`` from
    ``phi = 0``, where ``precondition`` is the linear map ``R`` (identity by default): with
    ``R R' ~ H^-1`` near the optimum, L-BFGS starts from the right curvature instead of the
    identity (a change of variables; the optimum is the same). ``bounds`` box every entry
    of ``phi``. The search stops at the first point where every ``phi``-gradient entry is
    below 1e-10, when the objective no longer decreases, or after ``max_iter`` iterations;
    it returns, of the points evaluated whose objective is within rounding (4 ulp) of the
    lowest, the one with the smallest gradient: near the optimum the rounded values no
    longer tell points apart and the line search rejects better ones, the gradient still
    does. scipy's BLAS runs on one thread during the search: its vectors are short, and on
    a busy machine the thread hand-offs of its tiny calls cost 5-15 ms per iteration (0.03
    ms on one thread; measured on 2 cores).
    """
    from scipy.optimize import minimize

    x0 = x0.detach()
    scale = precondition if precondition is not None else (lambda phi: phi)
    seen: list[tuple[float, float, float, np.ndarray]] = []  # objective, max |grad phi|, max |grad x|, phi

    def value_and_grad(phi_np: np.ndarray) -> tuple[float, np.ndarray]:
        phi = torch.from_numpy(phi_np).to(x0.device).requires_grad_(True)
        with torch.enable_grad():
            x = x0 + scale(phi)
            x.retain_grad()
            loss = objective(x)
            loss.backward()
        value, grad = float(loss.detach()), phi.grad.cpu().numpy()
        seen.append((value, float(np.abs(grad).max()), float(x.grad.abs().max()), phi_np.copy()))
        if seen[-1][1] <= _GRAD_TOL:
            raise _Stationary
        return value, grad

    n = x0.numel()
    with _blas_threads().limit(limits=1, user_api="blas"):
        try:
            minimize(value_and_grad, np.zeros(n), jac=True, method="L-BFGS-B",
                     bounds=None if bounds is None else [bounds] * n,
                     options={"maxiter": max_iter, "maxfun": 2 * max_iter + 20, "maxcor": _HISTORY,
                              "ftol": 0.0, "gtol": _GRAD_TOL})
        except _Stationary:
            pass
    lowest = min(value for value, *_ in seen)
    rounding = 4 * np.finfo(np.float64).eps * max(abs(lowest), 1.0)
    _, _, grad_x, phi = min((s for s in seen if s[0] <= lowest + rounding), key=lambda s: s[1])
    x = x0 + scale(torch.from_numpy(phi).to(x0.device))
    return x.detach(), grad_x


def warn_unconverged(who: str, grad: float, max_iter: int) -> None:
    if not grad <= _WARN_TOL:
        warnings.warn(
            f"{who} did not converge in max_iter = {max_iter} iterations (largest gradient entry "
            f"{grad:.3g}); the validation set may separate the classes. Raise max_iter or regularise",
            RuntimeWarning,
            stacklevel=3,
        )
