"""calib.experiments.meta_ledger: its labels find the ledger's rows, and gamma_curves reads γ per epoch."""
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


def test_gamma_curves_and_labels_on_a_built_ledger(tmp_path):
    sece = "meta=gamma_net,meta_objective=sece"
    lr_sece = 'meta=gamma_net,meta_kwargs={"meta_lr": 0.0001},meta_objective=sece'
    lr_cell = "focal@meta=gamma_net,meta_kwargs=__meta_lr___0.0001_,meta_objective=sece"
    assert meta_ledger.gamma_curves(tmp_path) == {}  # no sweep yet: no curve
    _sweep(tmp_path, [_row("ce", "", s, 0.05, 1.5) for s in (0, 1)] + [_row("focal", sece, 0, 0.4, 0.2)],
           {f"focal@{sece}__s0": [{"train_gamma_mean": 1.0}, {"train_gamma_mean": 27.0}],
            "ce@meta=l2_reg__s0": [{"train_penalty": -0.1}]}, diverged={"ce@meta=l2_reg__s0"})
    lr_runs = {f"{lr_cell}__s{seed}": [{"train_gamma_mean": 1.0}, {"train_gamma_mean": g}]
               for seed, g in enumerate((1.2, 6.0))}
    _sweep(tmp_path, [_row("focal", lr_sece, s, e, 0.9) for s, e in ((0, 0.03), (1, 0.07))], lr_runs,
           name=meta_ledger.LR_SWEEP)
    curves = meta_ledger.gamma_curves(tmp_path)  # the diverged meta-L2 cell adds none
    assert list(curves) == ["γ-Net SECE, meta-lr 0.001", "γ-Net SECE, meta-lr 0.0001"]
    assert curves["γ-Net SECE, meta-lr 0.0001"].tolist() == [[1.0, 1.2], [1.0, 6.0]]
    rows = ledger.method_runs(meta_ledger.SWEEP, meta_ledger.METHODS, tmp_path)
    assert {k: len(v) for k, v in rows.items()} == {"CE": 2, "focal γ=1": 0, "meta-L2 DECE": 0,
                                                     "meta-L2 SECE": 0, "γ-Net DECE": 0, "γ-Net SECE": 1}
    lr_rows = ledger.method_runs(meta_ledger.LR_SWEEP, meta_ledger.LR_METHODS, tmp_path)
    assert lr_rows["γ-Net SECE, meta-lr 0.0001"]["ece"].tolist() == [0.03, 0.07]


def test_the_method_table_says_why_a_row_is_empty(tmp_path):
    """meta-L2's rows have no run because every one diverged: they read "diverged", not blank;
    a method the sweep has not reached reads "not yet run"."""
    l2 = "meta=l2_reg,meta_objective=dece"
    cell = f"fashion_mnist__cnn5__ce@{l2}__s0"
    _sweep(tmp_path, [_row("ce", "", s, 0.05, 1.5) for s in (0, 1)],
           {cell: [{"train_penalty": -0.1}]}, diverged={cell})
    record = dict(_row("ce", l2, 0, 0.0, 0.0), epoch=19, step=31)
    (tmp_path / meta_ledger.SWEEP / "runs" / cell / "diverged.json").write_text(json.dumps(record))
    table = ledger.method_table(meta_ledger.SWEEP, meta_ledger.METHODS, tmp_path)
    assert table.loc["meta-L2 DECE"].tolist() == [0] + ["diverged"] * 4
    assert table.loc["meta-L2 SECE", "ECE (%)"] == "not yet run" and table.loc["CE", "n"] == 2


@pytest.mark.skipif(not (ROOT / meta_ledger.LR_SWEEP / "results.csv").exists(),
                    reason="no committed wang2024_t1 and gamma_net_lr sweeps")
def test_the_labels_find_every_committed_row():
    """What chapter 11 reads: three seeds of each finished row; meta-L2 diverged on all six runs."""
    rows = ledger.method_runs(meta_ledger.SWEEP, meta_ledger.METHODS, ROOT)
    assert {k: len(v) for k, v in rows.items()} == {"CE": 3, "focal γ=1": 3, "meta-L2 DECE": 0,
                                                     "meta-L2 SECE": 0, "γ-Net DECE": 3, "γ-Net SECE": 3}
    assert sum("l2_reg" in c for c in ledger.diverged_cells(meta_ledger.SWEEP, ROOT)) == 6
    lr_rows = ledger.method_runs(meta_ledger.LR_SWEEP, meta_ledger.LR_METHODS, ROOT)
    assert [len(v) for v in lr_rows.values()] == [3, 3]
    curves = meta_ledger.gamma_curves(ROOT)
    assert len(curves) == 4 and all(c.shape == (3, 40) for c in curves.values())
