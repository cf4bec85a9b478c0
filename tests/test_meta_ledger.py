"""calib.experiments.meta_ledger on a ledger built here, and on the committed one."""
from __future__ import annotations

import csv
import json
import pathlib

import pytest

from calib.experiments import ledger, meta_ledger

ROOT = pathlib.Path(__file__).resolve().parents[1] / ledger.ROOT
COLUMNS = ("data", "model", "loss", "loss_kwargs", "settings", "seed", "ece", "ece_ts", "temperature", "accuracy")


def _sweep(tmp_path, rows, histories, diverged=(), name=meta_ledger.SWEEP):
    out = tmp_path / name
    (out / "runs").mkdir(parents=True)
    (out / "sweep.json").write_text("{}")
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for cell, history in histories.items():
        (out / "runs" / cell).mkdir()
        (out / "runs" / cell / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in history))
        marker = "diverged.json" if cell in diverged else "metrics.json"
        (out / "runs" / cell / marker).write_text("{}")


def _row(loss, settings, seed, ece, t, kwargs=""):
    return dict(data="fashion_mnist", model="cnn5", loss=loss, loss_kwargs=kwargs, settings=settings, seed=seed,
                ece=ece, ece_ts=0.01, temperature=t, accuracy=0.9)


def _built(root, second_gnet_ece):
    sece = "meta=gamma_net,meta_objective=sece"
    rows = [_row("ce", "", s, 0.05, 1.5) for s in (0, 1)] + [_row("focal", sece, s, e, 0.5)
                                                            for s, e in ((0, 0.3), (1, second_gnet_ece))]
    l2 = [{"train_penalty": -0.1, "classifier_norm": 7.0}, {"train_penalty": -1.0, "classifier_norm": 1e9}]
    gnet = [{"train_gamma_mean": 1.0, "train_meta_loss": 0.1}, {"train_gamma_mean": 27.0, "train_meta_loss": 0.4}]
    _sweep(root, rows, {"ce@meta=l2_reg__s0": l2, f"focal@{sece}__s0": gnet, f"focal@{sece}__s1": gnet},
           diverged={"ce@meta=l2_reg__s0"})
    return meta_ledger.meta_findings(root)


def test_findings_on_a_built_ledger(tmp_path):
    claims, reports = _built(tmp_path / "a", 0.2)
    texts = list(claims)
    assert all(claims.values()) and "overflows in epochs 3-3 of 40" in texts[0]
    assert "ends between 27 and 27" in texts[1]
    # only the pair with both rows finished is reported: γ-Net SECE vs CE
    assert list(reports.values()) == [False] and "(25.00 vs 5.00; lower on 0 of 2 seeds)" in list(reports)[0]
    claims, reports = _built(tmp_path / "b", 0.02)  # seed 1 of γ-Net SECE below CE
    assert not claims["γ-Net: under-confident (T < 1) with a higher ECE than CE's on every seed, before TS"]
    assert "(16.00 vs 5.00; lower on 1 of 2 seeds)" in list(reports)[0]


@pytest.mark.skipif(not (ROOT / meta_ledger.SWEEP / "results.csv").exists(), reason="no committed wang2024_t1 sweep")
def test_findings_on_the_committed_ledger_are_well_formed():
    claims, reports = meta_ledger.meta_findings(ROOT)
    assert claims and all(isinstance(v, bool) for v in [*claims.values(), *reports.values()])


def test_lr_findings_and_gamma_curves_on_a_built_ledger(tmp_path):
    sece = "meta=gamma_net,meta_objective=sece"
    lr_sece = 'meta=gamma_net,meta_kwargs={"meta_lr": 0.0001},meta_objective=sece'
    lr_cell = "focal@meta=gamma_net,meta_kwargs=__meta_lr___0.0001_,meta_objective=sece"
    assert not any(meta_ledger.lr_findings(tmp_path))  # no gamma_net_lr sweep: nothing to say
    _sweep(tmp_path, [_row("ce", "", s, 0.05, 1.5) for s in (0, 1)] + [_row("focal", sece, 0, 0.4, 0.2)],
           {f"focal@{sece}__s0": [{"train_gamma_mean": 1.0}, {"train_gamma_mean": 27.0}]})
    lr_runs = {f"{lr_cell}__s{seed}": [{"train_gamma_mean": 1.0, "train_meta_loss": 0.2},
                                      {"train_gamma_mean": g, "train_meta_loss": m}]
               for seed, (g, m) in enumerate(((1.2, 0.1), (6.0, 0.3)))}
    _sweep(tmp_path, [_row("focal", lr_sece, s, e, 0.9) for s, e in ((0, 0.03), (1, 0.07))], lr_runs,
           name=meta_ledger.LR_SWEEP)
    claims, reports = meta_ledger.lr_findings(tmp_path)
    # seed 1's γ ends at 6, its meta objective rises and its ECE (7%) is above CE's (5%): every claim
    # fails, and says so
    assert list(claims.values()) == [False, False, False]
    assert "stays between 1.0 and 6.0 in every epoch, ending between 1.2 and 6.0" in list(claims)[0]
    assert "T between 0.90 and 0.90" in list(claims)[2]
    # against CE on both seeds (5.00% each): lower on seed 0 only
    assert reports == {"γ-Net SECE, meta-lr 0.0001: a lower mean ECE than CE before TS (5.00 vs 5.00; lower on "
                       "1 of 2 seeds)": False}
    curves = meta_ledger.gamma_curves(tmp_path)
    assert list(curves) == ["γ-Net SECE, meta-lr 0.001", "γ-Net SECE, meta-lr 0.0001"]
    assert curves["γ-Net SECE, meta-lr 0.0001"].tolist() == [[1.0, 1.2], [1.0, 6.0]]
