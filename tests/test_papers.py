"""calib.experiments.papers and calib/paper_results.csv: table sizes, registry names, spot checks, the loader."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from calib import data, losses, models
from calib.experiments import papers

# Expected number of rows per (paper, table), derived from each table's printed structure:
EXPECTED_COUNTS = {
    # Lin et al. (2024) Table 1: 9 dataset-model rows (CIFAR-10 × 4 nets, CIFAR-100 × 4 nets,
    # Tiny-ImageNet × ResNet-50) × 7 methods (CE, BL, MMCE, FLSD, DFL, BSCE, BSCE-GRA) × pre/post T.
    ("lin2024uncertainty", "1"): 9 * 7 * 2,
    # Lin et al. (2024) §4.3: Pearson coefficients of gBS, DFL and FL.
    ("lin2024uncertainty", "s4.3"): 3,
    # Lin et al. (2024) appendix (computation efficiency): training minutes of CE and BSCE-GRA.
    ("lin2024uncertainty", "timing"): 2,
    # Wang & Golebiowski (2024) Table 1: 12 method rows on CIFAR-10, 12 on CIFAR-100 and 10 on
    # Tiny-ImageNet (no CE (TS), only LS (0.1)) × 6 metrics (Error, NLL, ECE, MCE, ACE, Classwise ECE).
    ("wang2024unbiased", "1"): (12 + 12 + 10) * 6,
    # Wang et al. (2021) Table 1: 4 datasets × {ECE, Accuracy} × 4 methods (CE, LS, L1 norm, focal).
    ("wang2021rethinking", "1"): 4 * 2 * 4,
    # Wang et al. (2021) Table 2: 4 datasets × {with TS, with HB} × 4 methods.
    ("wang2021rethinking", "2"): 4 * 2 * 4,
    # Mukhoti et al. (2020) Table 1: 10 dataset-model rows (CIFAR-100 × 4, CIFAR-10 × 4,
    # Tiny-ImageNet, SST) × 5 methods (CE, Brier, MMCE, LS-0.05, focal γ=3) × pre/post T.
    ("mukhoti2020using", "1"): 10 * 5 * 2,
    # Mukhoti et al. (2020) Table C.3 (test error): only the two cells chapter 2 quotes,
    # CIFAR-10 ResNet-50 with CE and with focal γ = 3.
    ("mukhoti2020using", "C.3"): 2,
}


def _one(**kw):
    rows = papers.results(**kw)
    assert len(rows) == 1, rows
    return rows[0]


def test_row_counts_match_the_printed_tables():
    counts = Counter((r["paper"], r["table"]) for r in papers.results())
    assert dict(counts) == EXPECTED_COUNTS


def test_every_name_is_a_calib_registry_name_or_a_declared_paper_only_one():
    rows = papers.results()
    assert {r["paper"] for r in rows} == set(papers.PAPERS)
    assert {r["dataset"] for r in rows} <= set(data.datasets()) | set(papers.PAPER_ONLY_DATASETS)
    assert {r["model"] for r in rows} <= set(models.names()) | set(papers.PAPER_ONLY_MODELS)
    assert {r["method"] for r in rows} <= set(losses.names()) | set(papers.METHODS)
    assert {r["ts"] for r in rows} <= {"pre", "post", ""}
    for r in rows:
        assert r["value"] is not None and math.isfinite(r["value"]), r
        if r["params"]:
            kwargs = dict(kv.split("=") for kv in r["params"].split(","))
            if r["method"] in losses.names():  # the keywords are calib's: make() accepts them
                losses.make(r["method"], **{k: float(v) for k, v in kwargs.items()})


def test_spot_checks_quoted_in_design_section_7():
    lin = dict(paper="lin2024uncertainty", table="1", dataset="cifar10", model="resnet50", metric="ece")
    for method, pre, post in (("ce", 4.36, 1.32), ("flsd53", 1.26, 1.15), ("dual_focal", 1.00, 1.00),
                              ("bsce", 0.88, 0.88), ("bsce_gra", 0.74, 0.74)):
        assert _one(**lin, method=method, ts="pre")["value"] == pre
        assert _one(**lin, method=method, ts="post")["value"] == post
    lin100 = {**lin, "dataset": "cifar100"}
    assert _one(**lin100, method="ce", ts="pre")["value"] == 18.05
    assert _one(**lin100, method="bsce_gra", ts="post")["value"] == 1.59
    muk = dict(paper="mukhoti2020using", dataset="cifar10", model="resnet50", metric="ece")
    ce_post = _one(**muk, method="ce", ts="post")
    assert (_one(**muk, method="ce", ts="pre")["value"], ce_post["value"], ce_post["temperature"]) == (4.35, 1.35, 2.5)
    fl_post = _one(**muk, method="focal", ts="post")
    assert (_one(**muk, method="focal", ts="pre")["value"], fl_post["value"], fl_post["temperature"]) == (1.48, 1.42, 1.1)
    error = {r["method"]: r["value"] for r in papers.results(table="C.3", **muk | {"metric": "error"})}
    assert error == {"ce": 4.95, "focal": 5.25}
    pearson = {r["method"]: r["value"] for r in papers.results(table="s4.3")}
    assert pearson == {"bsce": 0.664, "dual_focal": 0.638, "focal": 0.550}


def test_stds_temperatures_and_paper_models():
    sece = _one(paper="wang2024unbiased", dataset="cifar10", method="gamma_net_sece", metric="ece")
    assert (sece["value"], sece["std"]) == (2.138, 0.819)
    ts = _one(paper="wang2021rethinking", table="2", dataset="cifar10", method="ce", metric="ece", ts="post")
    assert (ts["value"], ts["std"], ts["temperature"]) == (0.95, 0.19, 2.51)
    # pre-T rows carry no temperature; every Mukhoti et al. post-T row does
    assert all(r["temperature"] is None for r in papers.results(ts="pre"))
    assert all(r["temperature"] is not None for r in papers.results(paper="mukhoti2020using", ts="post"))
    # ResNet-110 of the focal-loss code is the 45.9M bottleneck net, not He et al.'s 1.7M one
    assert papers.PAPER_MODELS[("mukhoti2020using", "cifar", "ResNet-110")] == "resnet110_bottleneck"
    assert {r["model"] for r in papers.results(paper="mukhoti2020using", dataset="cifar10")} >= {"resnet110_bottleneck"}
    assert set(papers.PAPER_MODELS.values()) <= set(models.names())
    for (paper, method), kw in papers.PAPER_LOSS_KWARGS.items():
        assert paper in papers.PAPERS
        losses.make(method, **kw)


def test_results_filters_and_errors():
    rows = papers.results(paper="mukhoti2020using", dataset=("cifar10", "cifar100"), ts="post")
    assert len(rows) == 8 * 5 and {r["dataset"] for r in rows} == {"cifar10", "cifar100"}
    rows[0]["value"] = -1.0  # copies: the cache is not touched
    assert papers.results(paper="mukhoti2020using", dataset=("cifar10", "cifar100"), ts="post")[0]["value"] != -1.0
    with pytest.raises(TypeError, match="unknown column"):
        papers.results(loss="ce")
    with pytest.raises(ValueError, match="cifar-10"):
        papers.results(dataset="cifar-10")


def test_beside_joins_the_paper_numbers():
    pd = pytest.importorskip("pandas")
    ours = pd.DataFrame({"data": ["cifar10", "cifar10", "cifar10"], "model": ["resnet50"] * 3,
                         "loss": ["ce", "bsce_gra", "focal_gra"], "ece_mean": [3.0, 1.0, 2.0]})
    out = papers.beside(ours, paper="lin2024uncertainty", table="1", metric="ece", ts="pre")
    assert list(out["paper"][:2]) == [4.36, 0.74] and math.isnan(out["paper"][2])
    assert list(out["ece_mean"]) == [3.0, 1.0, 2.0] and "dataset" in out.columns
    ls = pd.DataFrame({"dataset": ["cifar10"], "model": ["resnet18"], "method": ["label_smoothing"]})
    with pytest.raises(ValueError, match="params"):
        papers.beside(ls, paper="wang2024unbiased", metric="ece")
    out = papers.beside(ls, paper="wang2024unbiased", metric="ece", params="epsilon=0.05")
    assert out["paper_text"][0] == "2.900 ± 0.085"  # as printed
    with pytest.raises(ValueError, match="missing"):
        papers.beside(pd.DataFrame({"model": ["x"]}), paper="wang2024unbiased")


def test_the_csv_ships_as_package_data():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    assert "paper_results.csv" in config["tool"]["setuptools"]["package-data"]["calib"]
    assert (root / "calib" / "paper_results.csv").is_file()
