"""calib.experiments.plans: a paper's table as a run plan, and its table beside the paper's."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from calib.experiments import papers, plans


@pytest.fixture(scope="module")
def lin() -> plans.PaperTable:
    return plans.paper_table("Lin et al. (2024) Table 1", paper="lin2024uncertainty", preset="lin2024",
                             net=("cifar", "ResNet-50"))


@pytest.fixture(scope="module")
def wang() -> plans.PaperTable:
    return plans.paper_table("Wang & Golebiowski (2024) Table 1", paper="wang2024unbiased", preset="wang2024",
                             net=("cifar", "ResNet-18"))


def test_paper_table_reads_the_papers_rows(lin) -> None:
    rows = papers.results(paper="lin2024uncertainty", table="1", dataset="cifar10", model="resnet50",
                          metric="ece", ts="pre")
    assert [m for m, _ in lin.methods] == [r["method"] for r in rows]
    assert lin.model == "resnet50" and lin.ts_method == "grid" and lin.post_column == "ece_ts_grid"
    assert ("cifar100", "resnet50") in lin.grid and all(d in ("cifar10", "cifar100") for d, _ in lin.grid)
    with pytest.raises(ValueError, match="PAPER_MODELS"):
        plans.paper_table("x", paper="lin2024uncertainty", preset="lin2024", net=("cifar", "VGG-16"))
    with pytest.raises(ValueError, match="preset"):
        plans.paper_table("x", paper="lin2024uncertainty", preset="nope", net=("cifar", "ResNet-50"))
    with pytest.raises(ValueError, match="paper"):
        plans.paper_table("x", paper="smith2030", preset="lin2024", net=("cifar", "ResNet-50"))


def test_loss_spec_applies_the_papers_keywords_and_drops_defaults() -> None:
    assert plans.loss_spec("lin2024uncertainty", "mmce", "") == ("mmce", {"normalization": "code"})
    assert plans.loss_spec("wang2024unbiased", "focal", "gamma=1") == ("focal", {"gamma": 1.0})
    assert plans.loss_spec("mukhoti2020using", "focal", "gamma=3") == ("focal", {})  # γ = 3 is the default
    with pytest.raises(ValueError, match="no loss named"):
        plans.loss_spec("wang2024unbiased", "mixup", "")


def test_plan_runs_covers_losses_and_training_methods(lin, wang) -> None:
    runs, notes = plans.plan_runs([lin, wang])
    assert notes == []
    assert [r.method for r in runs if r.table == lin.title] == [m for m, _ in lin.methods]
    mixup = next(r for r in runs if r.method == "mixup")
    assert mixup.spec == "ce@mixup_alpha=1.0" and not mixup.meta
    assert all(r.meta for r in runs if r.method.startswith(("meta_", "gamma_net")))
    assert len({r.key for r in runs}) == len(runs)


def test_plan_runs_notes_what_calib_cannot_train(lin) -> None:
    odd = plans.PaperTable("T", "lin2024uncertainty", "lin2024", "resnet50", "grid",
                           methods=(("ce", ""), ("svm", ""), ("focal", "gamma=-1")), grid=())
    runs, notes = plans.plan_runs([odd])
    assert [r.method for r in runs] == ["ce"]
    assert len(notes) == 2 and "svm skipped, calib has no loss or method" in notes[0]
    assert "focal (gamma=-1) skipped" in notes[1]


def test_seeds_for() -> None:
    assert plans.seeds_for("mukhoti2020") == [0, 1, 2]
    assert plans.seeds_for("lin2024") == "paper"
    assert plans.seeds_for("mukhoti2020", [5]) == [5]


def _runs(eces, post=None) -> pd.DataFrame:
    return pd.DataFrame({"ece": eces, "ece_ts_grid": post or eces, "seed": range(len(eces))})


def test_beside_paper_against_ce_and_mean_of(lin) -> None:
    results = {(lin.title, "ce", ""): _runs([0.05, 0.07]),
               (lin.title, "bsce_gra", ""): _runs([0.01, 0.02], [0.015, 0.015]),
               (lin.title, "mmce", ""): _runs([0.01, 0.01])}
    table = plans.beside_paper(lin, results, ours="toy (quick)")
    assert table.index.name == "ours: toy (quick) | paper: CIFAR-10 resnet50"
    assert table.loc["ce", "ECE % (ours)"] == "6.00 ± 1.41" and table.loc["ce", "ECE % (paper)"] == "4.36"
    assert table.loc["bsce_gra", "after TS % (ours)"] == "1.50 ± 0.00"
    assert table.loc["brier", "ECE % (ours)"] == "not run"
    assert plans.mean_of(results, lin.title, "ce", "ece") == pytest.approx(0.06)
    assert math.isnan(plans.mean_of(results, lin.title, "brier", "ece"))
    order = plans.against_ce(lin, results)
    assert list(order.index) == ["mmce", "bsce_gra"]  # the paper's order; CE and unrun methods left out
    assert order.loc["bsce_gra", "same ordering"] == "yes"
    assert order.loc["mmce", "paper: below CE"] == "no" and order.loc["mmce", "same ordering"] == "NO"
    assert order.loc["bsce_gra", "seeds below CE"] == "2 of 2"


def test_against_ce_counts_seeds_and_per_seed_lists_them(lin) -> None:
    results = {(lin.title, "ce", ""): _runs([0.05, 0.07, 0.06]),
               (lin.title, "bsce_gra", ""): _runs([0.04, 0.08, 0.01])}
    order = plans.against_ce(lin, results)
    assert order.loc["bsce_gra", "ours: below CE"] == "yes"  # on the means
    assert order.loc["bsce_gra", "seeds below CE"] == "2 of 3"  # seed 1 is above
    table = plans.per_seed(results, lin.title, "ece")
    assert list(table.index) == ["ce", "bsce_gra"] and list(table.columns) == [0, 1, 2]
    assert table.loc["bsce_gra", 1] == pytest.approx(0.08)
    assert plans.per_seed(results, "another table", "ece").empty
    results[(lin.title, "focal", "gamma=3")] = _runs([0.02, 0.03, 0.04])
    results[(lin.title, "focal", "gamma=1")] = _runs([0.03, 0.04, 0.05])
    table = plans.per_seed(results, lin.title, "ece")  # one row per (method, params)
    assert table.loc["focal (gamma=1)", 2] == pytest.approx(0.05) and len(table) == 4


def test_lowest_names_our_and_the_papers_best_method(lin) -> None:
    results = {(lin.title, "ce", ""): _runs([0.05, 0.07]),
               (lin.title, "bsce_gra", ""): _runs([0.03, 0.03], [0.02, 0.02]),
               (lin.title, "mmce", ""): _runs([0.01, 0.01], [0.03, 0.03])}
    # the paper's CIFAR-10 ResNet-50 row: BSCE-GRA below MMCE and CE, before and after TS
    assert plans.lowest(lin, results) == {"ours": "mmce", "paper": "bsce_gra", "seeds": "2 of 2"}
    assert plans.lowest(lin, results, ts="post") == {"ours": "bsce_gra", "paper": "bsce_gra",
                                                     "seeds": "2 of 2"}
    results[(lin.title, "mmce", "")] = _runs([0.01, 0.04])  # lowest mean, lowest on seed 0 only
    assert plans.lowest(lin, results)["seeds"] == "1 of 2"
    assert plans.lowest(lin, {}) == {}
    assert plans.lowest(lin, {(lin.title, "ce", ""): _runs([0.05, 0.07])}) == {}  # one method: no ranking
    with pytest.raises(ValueError, match="ts must be"):
        plans.lowest(lin, results, ts="after")


def test_shared_sweeps_train_a_protocol_once(lin, wang) -> None:
    muk = plans.paper_table("Mukhoti et al. (2020) Table 1", paper="mukhoti2020using",
                            preset="mukhoti2020", net=("cifar", "ResNet-50"))
    runs, _ = plans.plan_runs([lin, muk, wang])
    sweeps = plans.shared_sweeps([lin, muk, wang], runs, seeds=[0, 1, 2], model="mlp")
    assert list(sweeps) == ["lin2024", "wang2024"]  # Mukhoti et al.'s preset is Lin et al.'s protocol
    preset, model, shared = sweeps["lin2024"]
    assert preset == "lin2024" and model == "mlp"
    assert {r.table for r in shared} == {lin.title, muk.title}
    assert len(shared) == len([r for r in runs if r.table != wang.title])
    # "paper" seeds differ (Lin et al. state theirs, Mukhoti et al. do not): three sweeps,
    # each on the table's own network
    sweeps = plans.shared_sweeps([lin, muk, wang], runs)
    assert list(sweeps) == ["lin2024", "mukhoti2020", "wang2024"]
    assert sweeps["wang2024"][1] == wang.model
