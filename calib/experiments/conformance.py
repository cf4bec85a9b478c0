"""Conformance: the conventions of calib and six peer libraries, each on one fixed input.

A *probe* computes one peer's value for one convention (a table row) on the inputs of
:func:`inputs`. :func:`cells` runs the probe where the peer is importable (*live*) and
otherwise reads the value recorded in ``calib/conformance_frozen.json`` with the peer's
version (*frozen*; ``tools/freeze_conformance.py`` writes it in an environment that has
the peer). A cell without a probe is *documented*: a statement from the peer's
documentation or source, cited, not run. :func:`table` lays the cells out as the
conformance table, :func:`bugs` the peers' open bugs beside calib's answer on the same
input. Peers: torchmetrics, netcal, relplot, scikit-learn, torch-uncertainty and
probmetrics.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import pathlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from .. import metrics
from ..posthoc import TemperatureScaling

__all__ = ["PEERS", "ROWS", "BUGS", "FROZEN_FILE", "Cell", "inputs", "probe", "calib_cells", "cells",
           "table", "provenance", "bugs", "frozen"]

FROZEN_FILE = pathlib.Path(__file__).resolve().parents[1] / "conformance_frozen.json"
PEERS = {"torchmetrics": "torchmetrics", "netcal": "netcal", "relplot": "relplot",
         "scikit-learn": "sklearn", "torch-uncertainty": "torch_uncertainty", "probmetrics": "probmetrics"}
ROWS = {
    "bins": "Bins; a confidence of exactly 1",
    "binary": "Binary ECE means",
    "classwise": "Top-label or classwise",
    "debiasing": "Debiasing",
    "temperature": "Temperature scaling stores",
    "input": "Logits or probabilities",
}
BUGS = {
    "tm3510": ("torchmetrics", "#3510: a confidence of exactly 1 goes into an extra bin"),
    "tm1646": ("torchmetrics", "#1646: a prediction of 0 gets bin index -1"),
    "netcal61": ("netcal", "#61: MLE temperature scaling leaves the ECE unchanged"),
}
N_BINS = 5


def inputs() -> dict[str, Any]:
    """The fixed inputs, float64: 3-class probabilities ``P`` with labels ``y`` (one
    confidence of exactly 1, wrong), binary probabilities ``p`` with labels ``yb``, and
    3-class logits ``G`` with labels ``yg`` for temperature scaling."""
    return {
        "P": np.array([[1.0, 0.0, 0.0], [0.9, 0.06, 0.04], [0.1, 0.7, 0.2],
                       [0.15, 0.2, 0.65], [0.5, 0.3, 0.2], [0.25, 0.3, 0.45]]),
        "y": np.array([2, 0, 1, 0, 0, 2]),
        "p": np.array([0.9, 0.7, 0.3, 0.1]),
        "yb": np.array([1, 0, 0, 1]),
        "G": np.array([[4.0, 0, 0], [0, 3, 0], [0, 0, 5], [3, 1, 0], [0, 4, 1], [2, 0, 3]]),
        "yg": np.array([0, 1, 0, 1, 1, 2]),
        "n_bins": N_BINS,
    }


@dataclass(frozen=True)
class Cell:
    """One table cell: ``text`` as shown, ``value`` (a number, list or error line), and
    ``source``: ``live <version>``, ``frozen <version>``, ``documented`` or ``missing``."""

    text: str
    value: Any
    source: str


# --------------------------------------------------------------------------- probes

_PROBES: dict[tuple[str, str], tuple[Callable[[dict], Any], str]] = {}
_DOCUMENTED: dict[tuple[str, str], str] = {}


def probe(row: str, peer: str, text: str) -> Callable:
    """Register ``fn(inputs) -> value`` as the probe of ``(row, peer)``; ``text`` is the
    cell's wording, ``{v}`` standing for the value."""
    def register(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
        _PROBES[(row, peer)] = (fn, text)
        return fn
    return register


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x)


def _top(d: dict) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and correctness of ``P``."""
    return d["P"].max(1), (d["P"].argmax(1) == d["y"]).astype(float)


def _softmax(g: np.ndarray) -> np.ndarray:
    return torch.softmax(_t(g), 1).numpy()


@probe("bins", "torchmetrics", "[lo, hi) and an extra bin [1, 1]: {v}")
def _tm_bins(d):
    from torchmetrics.functional.classification import multiclass_calibration_error
    return float(multiclass_calibration_error(_t(d["P"]), _t(d["y"]), 3, n_bins=d["n_bins"]))


@probe("bins", "netcal", "[lo, hi), 1 in the last bin: {v}")
def _nc_bins(d):
    from netcal.metrics import ECE
    return float(ECE(bins=d["n_bins"]).measure(d["P"], d["y"]))


@probe("bins", "relplot", "[lo, hi) and an extra bin [1, 1] (binnedECE): {v}")
def _rp_bins(d):
    from relplot.metrics import binnedECE
    return float(binnedECE(*_top(d), nbins=d["n_bins"]))


@probe("bins", "scikit-learn", "(lo, hi], 1 in the last bin: bin means {v}")
def _sk_bins(d):
    from sklearn.calibration import calibration_curve
    conf, hit = _top(d)
    return [round(float(x), 6) for x in calibration_curve(hit, conf, n_bins=d["n_bins"])[1]]


@probe("bins", "torch-uncertainty", "torchmetrics' bins, extra bin [1, 1]: {v}")
def _tu_bins(d):
    from torch_uncertainty.metrics import CalibrationError
    m = CalibrationError(task="multiclass", num_classes=3, num_bins=d["n_bins"])
    m.update(_t(d["P"]), _t(d["y"]))
    return float(m.compute())


def _pm_ece(probs: np.ndarray, y: np.ndarray, n_bins: int) -> float:
    from probmetrics.metrics import CalibrationError
    return float(CalibrationError(n_bins=n_bins).compute_from_labels_probs(_t(y), _t(probs)))


@probe("bins", "probmetrics", "torchmetrics' bins on p clipped to [1e-7, 1 - 1e-7]: {v}")
def _pm_bins(d):
    return _pm_ece(d["P"], d["y"], d["n_bins"])


@probe("binary", "torchmetrics", "the positive class: {v}")
def _tm_binary(d):
    from torchmetrics.functional.classification import binary_calibration_error
    return float(binary_calibration_error(_t(d["p"]), _t(d["yb"]), n_bins=d["n_bins"]))


@probe("binary", "netcal", "the positive class: {v}")
def _nc_binary(d):
    from netcal.metrics import ECE
    return float(ECE(bins=d["n_bins"]).measure(d["p"], d["yb"]))


@probe("binary", "relplot", "the positive class (binnedECE(p, y)): {v}")
def _rp_binary(d):
    from relplot.metrics import binnedECE
    return float(binnedECE(d["p"], d["yb"].astype(float), nbins=d["n_bins"]))


@probe("binary", "scikit-learn", "the positive class (calibration_curve): bin means {v}")
def _sk_binary(d):
    from sklearn.calibration import calibration_curve
    return [round(float(x), 6) for x in calibration_curve(d["yb"], d["p"], n_bins=d["n_bins"])[1]]


@probe("binary", "torch-uncertainty", "the positive class (task='binary'): {v}")
def _tu_binary(d):
    from torch_uncertainty.metrics import CalibrationError
    m = CalibrationError(task="binary", num_bins=d["n_bins"])
    m.update(_t(d["p"]), _t(d["yb"]))
    return float(m.compute())


@probe("binary", "probmetrics", "the positive class (two columns in): {v}")
def _pm_binary(d):
    return _pm_ece(np.stack([1 - d["p"], d["p"]], 1), d["yb"], d["n_bins"])


@probe("classwise", "torch-uncertainty", "both; classwise on torchmetrics' bins: {v}")
def _tu_classwise(d):
    from torch_uncertainty.metrics.classification.calibration.classwise_calibration_error import (
        ClasswiseCalibrationError)
    m = ClasswiseCalibrationError(num_classes=3, num_bins=d["n_bins"])
    m.update(_t(d["P"]), _t(d["y"]))
    return float(m.compute())


@probe("classwise", "relplot", "top label (multiclass_logits_to_confidences): {v}")
def _rp_classwise(d):
    import relplot
    from relplot.metrics import binnedECE
    f, hit = relplot.multiclass_logits_to_confidences(d["P"], d["y"], probs=True)
    return float(binnedECE(f, hit, nbins=d["n_bins"]))


@probe("temperature", "netcal", "the logit weight 1/T (as .temperature): {v}")
def _nc_temperature(d):
    from netcal.scaling import TemperatureScaling as NetcalTS
    return float(np.ravel(NetcalTS(method="mle").fit(_softmax(d["G"]), d["yg"]).temperature)[0])


@probe("temperature", "scikit-learn", "beta_ = 1/T, fitted on log beta: {v}")
def _sk_temperature(d):
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Logits(ClassifierMixin, BaseEstimator):
        """A fitted classifier whose decision function is row ``i`` of ``G`` for input ``i``."""
        classes_ = np.arange(3)

        def fit(self, x, y):
            return self

        def __sklearn_is_fitted__(self):
            return True

        def decision_function(self, x):
            return d["G"][np.asarray(x)[:, 0].astype(int)]

        def predict(self, x):
            return self.decision_function(x).argmax(1)

    # G twice (the same mean NLL), so that 2 folds hold every class; a frozen
    # estimator's out-of-fold logits are G itself, and one calibrator is fitted on all
    rows = np.tile(np.arange(len(d["G"])), 2)[:, None]
    cal = CalibratedClassifierCV(FrozenEstimator(Logits()), method="temperature", cv=2)
    cal.fit(rows, np.tile(d["yg"], 2))
    return float(cal.calibrated_classifiers_[0].calibrators[0].beta_)


@probe("temperature", "torch-uncertainty", "inv_temp = 1/T: {v}")
def _tu_temperature(d):
    from torch_uncertainty.post_processing import TemperatureScaler
    data = torch.utils.data.TensorDataset(_t(d["G"]).float(), _t(d["yg"]))
    ts = TemperatureScaler(model=torch.nn.Identity(), max_iter=200)
    ts.fit(torch.utils.data.DataLoader(data, batch_size=len(data)))
    return float(ts.inv_temp)


@probe("temperature", "probmetrics", "invtemp_ = 1/T, fitted on log(1/T): {v}")
def _pm_temperature(d):
    from probmetrics.calibrators import TemperatureScalingCalibrator
    from probmetrics.distributions import CategoricalLogits
    cal = TemperatureScalingCalibrator().fit_torch(CategoricalLogits(_t(d["G"])), _t(d["yg"]))
    return float(cal.invtemp_)


@probe("input", "torchmetrics", "either: a softmax if any value is outside [0, 1]: {v}")
def _tm_input(d):
    from torchmetrics.functional.classification import multiclass_calibration_error
    return float(multiclass_calibration_error(_t(d["G"]), _t(d["yg"]), 3, n_bins=d["n_bins"]))


@probe("input", "probmetrics", "probabilities; logits raise: {v}")
def _pm_input(d):
    from probmetrics.calibrators import TemperatureScalingCalibrator
    return _error_of(lambda: TemperatureScalingCalibrator().fit(d["G"], d["yg"]))


@probe("input", "netcal", "probabilities (logs them); logits raise: {v}")
def _nc_input(d):
    from netcal.scaling import TemperatureScaling as NetcalTS
    return _error_of(lambda: NetcalTS(method="mle").fit(d["G"], d["yg"]))


@probe("tm3510", "torchmetrics", "{v}")
def _tm_3510(d):
    from torchmetrics.functional.classification import binary_calibration_error
    return float(binary_calibration_error(torch.tensor([0.95, 1.0]), torch.tensor([1, 0]), n_bins=10))


@probe("tm1646", "torchmetrics", "{v}")
def _tm_1646(d):
    from torchmetrics.functional.classification import binary_calibration_error
    return _error_of(lambda: float(binary_calibration_error(torch.tensor([1.0, 1, 1, 1, 0]),
                                                            torch.tensor([0, 0, 1, 1, 1]), n_bins=2)))


@probe("netcal61", "netcal", "{v}")
def _nc_61(d):
    from netcal.metrics import ECE
    from netcal.scaling import TemperatureScaling as NetcalTS
    probs = _softmax(d["G"]).astype(np.float32)  # float64 probabilities fit; float32 ones do not
    ts = NetcalTS(method="mle").fit(probs, d["yg"])
    ece = ECE(bins=d["n_bins"])
    after = ts.transform(probs)
    return [round(float(np.ravel(ts.temperature)[0]), 4), round(float(ece.measure(probs, d["yg"])), 4),
            round(float(ece.measure(after, d["yg"])), 4)]


def _error_of(fn: Callable[[], Any]) -> Any:
    """``fn()``'s value, or its error as one line ``Type: message`` (cut at 80 characters)."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - a peer's error is the value recorded
        return f"{type(err).__name__}: {str(err).splitlines()[0][:80]}" if str(err) else type(err).__name__


_DOCUMENTED.update({
    ("classwise", "torchmetrics"): "top label only (no classwise ECE)",
    ("classwise", "netcal"): "top label (ECE of the maximum)",
    ("classwise", "scikit-learn"): "one class at a time (calibration_curve per class)",
    ("classwise", "probmetrics"): "top label (torchmetrics' ECE)",
    ("debiasing", "torchmetrics"): "none: plug-in only",
    ("debiasing", "netcal"): "none: plug-in only",
    ("debiasing", "scikit-learn"): "none: plug-in bin means",
    ("debiasing", "relplot"): "none: smECE smooths instead of binning",
    ("debiasing", "torch-uncertainty"): "a debiased adaptive l2 in a helper, not in its metric class",
    ("debiasing", "probmetrics"): "none: plug-in only",
    ("temperature", "torchmetrics"): "no temperature scaling",
    ("temperature", "relplot"): "no temperature scaling",
    ("input", "relplot"): "probabilities; a helper takes logits",
    ("input", "scikit-learn"): "either: probabilities go through log(p + eps)",
    ("input", "torch-uncertainty"): "logits (its docs warn against probabilities)",
})


# --------------------------------------------------------------------------- calib's side


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def calib_cells(d: dict | None = None) -> dict[str, Cell]:
    """calib's cell of every row, computed here."""
    d = inputs() if d is None else d
    P, y, n = _t(d["P"]), _t(d["y"]), d["n_bins"]
    binary = metrics.ECE(n, binary="top_label")
    binary.update(_t(d["p"]), _t(d["yb"]))
    t = TemperatureScaling().fit(d["G"], d["yg"]).temperature
    logits = _error_of(lambda: metrics.ece(_t(d["G"]), _t(d["yg"]), n))
    scaled = metrics.ECE(n, from_logits=True)
    scaled.update(_t(d["G"]), _t(d["yg"]))
    values = {
        "bins": ("(lo, hi], 1 in the last bin: {v}", metrics.ece(P, y, n)),
        "binary": ("the top label by default: {v}", float(binary.compute())),
        "classwise": ("both; classwise (mean over classes): {v}", metrics.classwise_ece(P, y, n)),
        "debiasing": (f"l2_ce, 2 bins: plug-in {metrics.l2_ce(P, y, 2, debiased=False):.4f}, "
                      "debiased {v}", metrics.l2_ce(P, y, 2)),
        "temperature": ("T (fitted on 1/T): {v}", float(t)),
        "input": ("probabilities; logits raise; from_logits=True: {v}", float(scaled.compute())),
    }
    out = {row: Cell(text.format(v=_fmt(v)), v, "calib") for row, (text, v) in values.items()}
    out["input_refusal"] = Cell(logits, logits, "calib")
    return out


# --------------------------------------------------------------------------- assembling


def frozen(path: pathlib.Path | None = None) -> dict[tuple[str, str], dict]:
    """The frozen records by ``(row, peer)``: value, version, call (``{}`` without the file)."""
    path = FROZEN_FILE if path is None else path
    if not path.is_file():
        return {}
    return {(r["row"], r["peer"]): r for r in json.loads(path.read_text())["records"]}


def _version(peer: str) -> str | None:
    try:
        importlib.import_module(PEERS[peer])
    except Exception:  # noqa: BLE001 - not installed, or broken in this environment
        return None
    return importlib.metadata.version(peer)


def cells(live: bool = True, records: dict | None = None) -> dict[tuple[str, str], Cell]:
    """Every peer cell, conventions and bugs: live where the peer imports (and ``live``),
    else frozen, else documented; a probe with neither is ``missing``."""
    d, records = inputs(), frozen() if records is None else records
    versions = {peer: _version(peer) if live else None for peer in PEERS}
    out = {}
    for key, text in _DOCUMENTED.items():
        out[key] = Cell(text, None, "documented")
    for (row, peer), (fn, text) in _PROBES.items():
        if versions[peer] is not None:
            v = _error_of(lambda: fn(d))
            out[(row, peer)] = Cell(text.format(v=_fmt(v)), v, f"live {versions[peer]}")
        elif (row, peer) in records:
            v = records[(row, peer)]["value"]
            out[(row, peer)] = Cell(text.format(v=_fmt(v)), v, f"frozen {records[(row, peer)]['version']}")
        else:
            out[(row, peer)] = Cell("not installed, not frozen", None, "missing")
    return out


def table(live: bool = True) -> pd.DataFrame:
    """The conformance table: one row per convention, calib and the six peers as columns."""
    mine, peers = calib_cells(), cells(live)
    rows = {ROWS[r]: {"calib": mine[r].text, **{p: peers[(r, p)].text for p in PEERS}} for r in ROWS}
    return pd.DataFrame(rows).T


def provenance(live: bool = True) -> pd.DataFrame:
    """How each peer cell of :func:`table` was obtained: live, frozen (with versions) or documented."""
    peers = cells(live)
    return pd.DataFrame({ROWS[r]: {p: peers[(r, p)].source for p in PEERS} for r in ROWS}).T


def _calib_bug(bug: str) -> Any:
    if bug == "tm3510":
        m = metrics.ECE(10, closed="left", binary="positive")
        m.update(torch.tensor([0.95, 1.0]), torch.tensor([1, 0]))
        return float(m.compute())
    if bug == "tm1646":
        m = metrics.ECE(2, closed="left", binary="positive")
        m.update(torch.tensor([1.0, 1, 1, 1, 0]), torch.tensor([0, 0, 1, 1, 1]))
        return float(m.compute())
    d = inputs()
    g = d["G"].astype(np.float32)
    ts = TemperatureScaling().fit(g, d["yg"])
    before, after = _softmax(g), ts.predict_proba(g)
    return [round(1 / ts.temperature, 4), round(metrics.ece(before, d["yg"], d["n_bins"], closed="left"), 4),
            round(metrics.ece(after, d["yg"], d["n_bins"], closed="left"), 4)]


def bugs(live: bool = True, records: dict | None = None) -> pd.DataFrame:
    """The peers' open bugs: the peer's result (live or frozen, with its version) and
    calib's on the same input. The frozen record under ``peer==version`` (an older
    release that still has the bug) is shown beside the live one."""
    peers, records = cells(live, records), frozen() if records is None else records
    rows = []
    for bug, (peer, title) in BUGS.items():
        cell = peers[(bug, peer)]
        rows.append({"bug": f"{peer} {title}", "peer's result": _fmt(cell.value), "how": cell.source,
                     "calib": _fmt(_calib_bug(bug))})
        old = [r for (row, p), r in records.items() if row == bug and p.startswith(f"{peer}==")]
        for r in old:
            rows.append({"bug": f"{peer} {title}", "peer's result": _fmt(r["value"]),
                         "how": f"frozen {r['version']}", "calib": _fmt(_calib_bug(bug))})
    return pd.DataFrame(rows)
