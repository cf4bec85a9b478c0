"""calib.experiments.compare: a few methods on one case over seeds, and their table beside a paper's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from calib import metrics
from calib.experiments import compare, papers

CASE = dict(data="gaussian", model="mlp", model_kwargs={"hidden": [16]}, epochs=2, batch_size=32,
            lr=0.05, weight_decay=0.0,
            data_kwargs=dict(n_train_per_class=18, n_val_per_class=6, n_test_per_class=10, num_classes=3,
                             dim=4, scale=8.0))
METHODS = {"CE": dict(loss="ce"), "Focal": dict(loss="focal", loss_kwargs={"gamma": 1.0}),
           "FL_γ-SECE": dict(loss="focal", meta="gamma_net", meta_objective="sece")}
TABLE1 = {"CE": dict(loss="ce"), "Focal": dict(loss="focal", loss_kwargs={"gamma": 1.0}),
          "FLSD-53": dict(loss="flsd53"),
          "FL_γ-DECE": dict(loss="focal", meta="gamma_net", meta_objective="dece"),
          "FL_γ-SECE": dict(loss="focal", meta="gamma_net", meta_objective="sece")}


@pytest.fixture(scope="module")
def runs():
    torch.set_num_threads(1)
    return compare.run_methods(CASE, METHODS, seeds=2)


def test_run_methods_gives_one_record_per_method_and_seed(runs):
    assert list(runs) == list(METHODS) and all(len(rs) == 2 for rs in runs.values())
    for name, rs in runs.items():
        for r in rs:
            n = r["labels"].shape[0]
            assert r["probs"].shape == (n, 3) and r["probs"].dtype == torch.float64
            assert torch.allclose(r["probs"].sum(1), torch.ones(n, dtype=torch.float64))
            assert len(r["history"]) == CASE["epochs"]
            assert (r["gammas"] is None) == (name != "FL_γ-SECE")
    assert runs["FL_γ-SECE"][0]["gammas"].shape == runs["FL_γ-SECE"][0]["labels"].shape
    # seeds draw different mixtures; the same seed gives the same run
    assert not torch.equal(runs["CE"][0]["probs"], runs["CE"][1]["probs"])
    again = compare.train_method(CASE, METHODS["CE"], 0, compare.load_case(CASE, 0))
    assert torch.equal(again["probs"], runs["CE"][0]["probs"])


def test_metric_rows_are_in_the_papers_units(runs):
    ours = compare.metric_rows(runs)
    assert list(ours) == ["CE", "CE (TS)", "Focal", "FL_γ-SECE"]
    for m, rows in ours.items():
        assert rows.shape == (2, len(compare.COLUMNS)) and np.isfinite(rows).all()
    pre = runs["CE"][1]["metrics"]["pre_ts"]
    assert ours["CE"][1, 0] == pytest.approx(100 * (1 - pre["accuracy"]))
    assert ours["CE"][1, 1] == pytest.approx(pre["nll"])
    assert ours["CE"][1, 2] == pytest.approx(100 * pre["ece"])
    assert ours["CE (TS)"][0, 2] == pytest.approx(100 * runs["CE"][0]["metrics"]["post_ts"]["ece"])
    with pytest.raises(ValueError, match="lacks"):
        compare.metric_rows(runs, post_ts={"X (TS)": "X"})


def test_paper_method_names_rows_of_the_csv():
    names = {r["method"] for r in papers.results(paper="wang2024unbiased", table="1")}
    assert {compare.paper_method(m) for m in TABLE1.values()} <= names
    assert compare.paper_method(TABLE1["FL_γ-DECE"]) == "gamma_net_dece"
    assert compare.paper_method(TABLE1["CE"]) == "ce"


def test_beside_paper_reads_the_papers_numbers_from_the_csv():
    ours = {m: np.arange(12.0).reshape(2, 6) for m in ["CE", "CE (TS)", *list(TABLE1)[1:]]}
    table = compare.beside_paper(ours, TABLE1, paper="wang2024unbiased", model="resnet18", label="ours",
                                 datasets={"cifar10": "paper, C-10", "cifar100": "paper, C-100"})
    assert len(table) == 3 * len(ours) and list(table.columns) == list(compare.HEADS)
    assert table.loc[("CE", "ours"), "Error"] == "3.0 ± 4.2"  # columns 0 and 6, ddof=1
    for m, ts in (("CE", "pre"), ("CE (TS)", "post"), ("FL_γ-SECE", "pre")):
        method = compare.paper_method(TABLE1["CE" if m == "CE (TS)" else m])
        (row,) = papers.results(paper="wang2024unbiased", table="1", dataset="cifar10", model="resnet18",
                                method=method, metric="ece", ts=ts)
        assert table.loc[(m, "paper, C-10"), "ECE"] == papers.printed(row)
    assert table.loc[("CE", "paper, C-10"), "ECE"] != table.loc[("CE (TS)", "paper, C-10"), "ECE"]


def test_bad_cases_and_seeds_are_refused():
    with pytest.raises(ValueError, match="lacks"):
        compare.run_methods({"data": "gaussian"}, METHODS, seeds=1)
    with pytest.raises(ValueError, match="seeds"):
        compare.run_methods(CASE, METHODS, seeds=0)
    for bad in ([], [1, 1], [-1], [True]):
        with pytest.raises(ValueError, match="seeds"):
            compare.run_methods(CASE, METHODS, seeds=bad)
    with pytest.raises(ValueError, match="protocol"):
        compare.run_methods({**CASE, "protocol": {"lr": 1.0}}, METHODS, seeds=1)


def test_seed_lists_and_the_protocol_reach_the_runs(runs):
    # an explicit seed list (profile.seeds) trains those seeds on their own data
    one = {"CE": METHODS["CE"]}
    shifted = compare.run_methods(CASE, one, seeds=[1])
    assert shifted["CE"][0]["seed"] == 1 and runs["CE"][1]["seed"] == 1
    assert torch.equal(shifted["CE"][0]["probs"], runs["CE"][1]["probs"])
    # the protocol's fields go into every run's TrainConfig (model selection here)
    best = compare.run_methods({**CASE, "protocol": {"select": "best_val", "ts_method": "grid"}}, one, seeds=[0])
    m = best["CE"][0]["metrics"]
    assert m["select"] == "best_val" and m["ts_method"] == "grid"
    assert 1 <= m["selected_epoch"] <= CASE["epochs"]


def test_ts_probs_and_method_verdicts(runs):
    scaled = compare.ts_probs(runs["CE"])
    for r, p in zip(runs["CE"], scaled):
        t = r["metrics"]["temperature"]
        assert torch.allclose(p, torch.softmax(r["probs"].log() / t, 1))
    labels = [r["labels"] for r in runs["CE"]]
    probs = [r["probs"] for r in runs["CE"]]
    v = compare.method_verdict(probs, probs, labels, metrics.ece, "CE below itself",
                               shared_test=False, direction="less")
    assert v.effect == 0 and v.outcome == "undecided" and v.n_a == 2
    # one test set for both seeds: the bootstrap's noise is added
    same = [labels[0], labels[0]]
    probs0 = [probs[0], probs[0].flip(1).softmax(1)]
    w = compare.method_verdict(probs0, [probs[0], probs[0]], same, metrics.nll, "x",
                               shared_test=True, direction="greater", scale=1.0)
    assert "bootstrap" in w.test
    with pytest.raises(ValueError, match="differ"):
        compare.method_verdict(probs, probs, labels, metrics.ece, "x", shared_test=True)
    with pytest.raises(ValueError, match="one entry per seed"):
        compare.method_verdict(probs, probs[:1], labels, metrics.ece, "x", shared_test=False)
