"""The ledger's meta-learning rows of Wang & Golebiowski (2024) (chapter 11): the labels
of the ``wang2024_t1`` sweep's meta-learned L2 baselines and γ-Net beside CE and focal
loss, of the ``gamma_net_lr`` sweep's γ-Net at a smaller γ-Net learning rate, and their
per-epoch learned γ.

Readers only: a chapter states what these rows say through :mod:`calib.evidence`
(``ledger.method_runs(SWEEP, METHODS)`` gives the per-seed rows to compare).
"""
from __future__ import annotations

from typing import Any

from ..train.meta import META_DEFAULTS
from . import ledger

__all__ = ["SWEEP", "METHODS", "LR_SWEEP", "LR_METHODS", "gamma_curves"]

SWEEP = "wang2024_t1"
#: The rows compared, as the ledger's loss specs (γ-Net starts from focal loss's γ = 1).
METHODS = {
    "CE": "ce",
    "focal γ=1": "focal:gamma=1.0",
    **{f"{net} {obj.upper()}": f"{loss}@meta={meta},meta_objective={obj}"
       for net, loss, meta in (("meta-L2", "ce", "l2_reg"), ("γ-Net", "focal", "gamma_net"))
       for obj in ("dece", "sece")},
}
LR_SWEEP = "gamma_net_lr"
_LR = f"meta-lr {ledger.GAMMA_NET_LR:g}"
#: γ-Net at the smaller meta learning rate (``gamma_net_lr``), labelled like :data:`METHODS`.
LR_METHODS = {f"γ-Net {obj.upper()}, {_LR}":
              f'focal@meta=gamma_net,meta_objective={obj},meta_kwargs={{"meta_lr":{ledger.GAMMA_NET_LR}}}'
              for obj in ("dece", "sece")}


def gamma_curves(root: Any = None, key: str = "train_gamma_mean") -> dict[str, Any]:
    """Per-epoch ``key`` of γ-Net's runs, ``{label: (seeds, epochs) array}``, at both meta learning rates.

    calib's default, 1e-3, from ``wang2024_t1``; :data:`ledger.GAMMA_NET_LR` from
    ``gamma_net_lr``. A sweep not in the ledger yet adds no curve.
    """
    import numpy as np

    out: dict[str, Any] = {}
    for sweep, lr in ((SWEEP, f"meta-lr {META_DEFAULTS['meta_lr']:g}"), (LR_SWEEP, _LR)):
        if not ledger.available(sweep, root, quiet=True):
            continue
        runs = {c: h for c, h in sorted(ledger.histories(sweep, root).items()) if "gamma_net" in c}
        for objective in ("dece", "sece"):
            cells = [h for c, h in runs.items() if f"meta_objective={objective}" in c]
            if cells:
                out[f"γ-Net {objective.upper()}, {lr}"] = np.array([[e[key] for e in h] for h in cells], dtype=float)
    return out
