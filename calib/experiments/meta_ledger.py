"""What the ledger's ``wang2024_t1`` sweep says about Wang & Golebiowski (2024)'s
meta-learning rows (chapter 11): the meta-learned L2 baselines and γ-Net, seed by seed;
and what the ``gamma_net_lr`` sweep changes with a smaller γ-Net learning rate.

Two kinds of finding, as in :mod:`calib.experiments.bench`: ``claims`` hold on the
committed runs (a chapter asserts them), ``reports`` are the paper's orderings tested on
our seeds (printed with their outcome).
"""
from __future__ import annotations

from typing import Any

from ..train.meta import META_DEFAULTS
from . import ledger

__all__ = ["SWEEP", "METHODS", "meta_findings", "LR_SWEEP", "LR_METHODS", "lr_findings", "gamma_curves"]

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
# The paper's orderings tested: (lower, higher) in ECE before TS.
_PAIRS = (("γ-Net SECE", "γ-Net DECE"), ("meta-L2 SECE", "meta-L2 DECE"),
          ("γ-Net SECE", "focal γ=1"), ("γ-Net SECE", "CE"))


def _l2_claim(root: Any) -> dict[str, bool]:
    runs = [h for cell, h in ledger.histories(SWEEP, root, diverged=True).items() if "l2_reg" in cell]
    if not runs:
        return {}
    grows = all(max(e["train_penalty"] for e in h) < 0 and h[-1]["classifier_norm"] > 1e6 * h[0]["classifier_norm"]
                for h in runs)
    last = sorted(len(h) + 1 for h in runs)  # the epoch in which the loss overflowed
    return {f"meta-L2, all {len(runs)} diverged runs: the learned penalty is negative in every epoch and the "
            f"classifier's weight norm grows a million-fold, until the loss overflows in epochs "
            f"{last[0]}-{last[-1]} of 40": grows}


def _gamma_net_claims(root: Any, rows: dict[str, Any]) -> dict[str, bool]:
    runs = {c: h for c, h in ledger.histories(SWEEP, root).items() if "gamma_net" in c}
    if not runs:
        return {}
    ce_ece = rows["CE"]["ece"].max()
    gnet = [rows[k] for k in ("γ-Net DECE", "γ-Net SECE") if len(rows[k])]
    gammas = [h[-1]["train_gamma_mean"] for h in runs.values()]
    return {
        f"γ-Net, all {len(runs)} runs: the mean learned γ on the training images ends between "
        f"{min(gammas):.0f} and {max(gammas):.0f} (it starts near 1)": min(gammas) > 10,
        f"γ-Net, all {len(runs)} runs: its meta objective on the held-out batch ends higher than "
        "after the first epoch": all(h[-1]["train_meta_loss"] > h[0]["train_meta_loss"] for h in runs.values()),
        "γ-Net: under-confident (T < 1) with a higher ECE than CE's on every seed, before TS":
            all((r["temperature"] < 1).all() and (r["ece"] > ce_ece).all() for r in gnet),
    }


def meta_findings(root: Any = None) -> tuple[dict[str, bool], dict[str, bool]]:
    """``(claims, reports)`` on the committed ``wang2024_t1`` sweep (see the module docstring).

    Reports compare the mean ECE before TS of two rows on the seeds both finished, with
    the count of seeds on which the first is lower; a pair without such a seed (a row
    diverged or not run yet) is left out.
    """
    rows = ledger.method_runs(SWEEP, METHODS, root)  # {label: that method's results rows}
    claims = {**_l2_claim(root), **_gamma_net_claims(root, rows)}
    return claims, _orderings(rows, _PAIRS)


def _orderings(rows: dict[str, Any], pairs: Any) -> dict[str, bool]:
    """``a`` below ``b`` in mean ECE before TS, for each pair, on the seeds both finished."""
    import pandas as pd

    ece = pd.DataFrame({k: r.set_index("seed")["ece"] for k, r in rows.items() if len(r)})
    reports: dict[str, bool] = {}
    for a, b in pairs:
        both = ece.reindex(columns=[a, b]).dropna()
        if both.empty:
            continue
        m, low = 100 * both.mean(), int((both[a] < both[b]).sum())
        reports[f"{a}: a lower mean ECE than {b} before TS ({m[a]:.2f} vs {m[b]:.2f}; lower on "
                f"{low} of {len(both)} seeds)"] = bool(m[a] < m[b])
    return reports


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


def lr_findings(root: Any = None) -> tuple[dict[str, bool], dict[str, bool]]:
    """``(claims, reports)`` on the ``gamma_net_lr`` sweep, beside ``wang2024_t1``'s rows.

    Claims, on every run at the smaller learning rate: where the learned γ stays and ends,
    whether the meta objective falls, and T, accuracy and ECE against CE's runs. Reports:
    SECE against DECE, and γ-Net with SECE against focal loss (γ = 1) and CE, in mean ECE
    before TS on the seeds both finished.
    """
    import pandas as pd

    if not ledger.available(LR_SWEEP, root, quiet=True) or not (runs := ledger.histories(LR_SWEEP, root)):
        return {}, {}
    rows = {**ledger.method_runs(SWEEP, METHODS, root), **ledger.method_runs(LR_SWEEP, LR_METHODS, root)}
    gammas = [h[-1]["train_gamma_mean"] for h in runs.values()]
    every = [e["train_gamma_mean"] for h in runs.values() for e in h]
    lr_rows = pd.concat([rows[k] for k in LR_METHODS])
    t, ce = lr_rows["temperature"], rows["CE"]
    claims = {
        f"γ-Net, {_LR}, all {len(runs)} runs: the mean learned γ on the training images stays between "
        f"{min(every):.1f} and {max(every):.1f} in every epoch, ending between {min(gammas):.1f} and "
        f"{max(gammas):.1f}": max(every) < 3,
        f"γ-Net, {_LR}, all {len(runs)} runs: its meta objective on the held-out batch ends lower than "
        "after the first epoch": all(h[-1]["train_meta_loss"] < h[0]["train_meta_loss"] for h in runs.values()),
        f"γ-Net, {_LR}, every run: T between {t.min():.2f} and {t.max():.2f}, an accuracy at most 3 points "
        "below CE's lowest seed, and an ECE before TS below every CE run's":
            len(ce) > 0 and 0.8 < t.min() and t.max() < 1.25
            and lr_rows["accuracy"].min() > ce["accuracy"].min() - 0.03 and lr_rows["ece"].max() < ce["ece"].min(),
    }
    sece, dece = (f"γ-Net {o}, {_LR}" for o in ("SECE", "DECE"))
    return claims, _orderings(rows, ((sece, dece), (sece, "focal γ=1"), (sece, "CE")))
