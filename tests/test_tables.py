"""calib.experiments.tables: runs by loss, mean ± std over seeds, t-tests, the papers' cells."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calib.experiments import tables


def _frame() -> pd.DataFrame:
    rows = []
    for seed, (ce, fl, mix) in enumerate([(0.10, 0.02, 0.05), (0.12, 0.03, 0.06), (0.11, 0.025, 0.04)]):
        rows += [dict(loss="ce", loss_kwargs="", settings="", seed=seed, ece=ce),
                 dict(loss="focal", loss_kwargs="gamma=3", settings="", seed=seed, ece=fl),
                 dict(loss="ce", loss_kwargs="", settings="mixup_alpha=1", seed=seed, ece=mix)]
    return pd.DataFrame(rows)


def test_mean_std_uses_the_sample_standard_deviation() -> None:
    v = [0.1, 0.2, 0.4]
    m, s = 100 * np.mean(v), 100 * np.std(v, ddof=1)
    assert tables.mean_std(v) == f"{m:.2f} ± {s:.2f}"
    assert tables.mean_std(pd.Series(v), scale=1.0, digits=3) == f"{np.mean(v):.3f} ± {np.std(v, ddof=1):.3f}"
    assert tables.mean_std([0.5]) == "50.00"  # one seed: no spread to print
    with pytest.raises(ValueError, match="empty"):
        tables.mean_std([])
    with pytest.raises(ValueError, match="digits"):
        tables.mean_std([1.0, 2.0], digits=-1)


def test_runs_of_matches_loss_keywords_and_settings() -> None:
    frame = _frame()
    focal = tables.runs_of(frame, "focal:gamma=3.0")  # 3.0 and 3 name the same runs
    assert focal["seed"].tolist() == [0, 1, 2] and (focal["loss"] == "focal").all()
    assert tables.runs_of(frame, ("focal", {"gamma": 3}))["ece"].tolist() == focal["ece"].tolist()
    ce = tables.runs_of(frame, "ce")
    assert ce["ece"].tolist() == [0.10, 0.12, 0.11]  # the mixup runs are another method
    assert tables.runs_of(frame, "ce@mixup_alpha=1")["ece"].tolist() == [0.05, 0.06, 0.04]
    assert tables.runs_of(frame, "focal:gamma=2").empty
    ce["ece"] = 0.0  # a copy: the sweep's frame is untouched
    assert frame["ece"].max() == pytest.approx(0.12)
    with pytest.raises(ValueError, match="lacks the columns"):
        tables.runs_of(frame.drop(columns="loss_kwargs"), "ce")


def test_runs_by_method_keeps_the_order_and_refuses_missing_methods() -> None:
    by = tables.runs_by_method(_frame(), {"focal γ=3": "focal:gamma=3", "CE": "ce"})
    assert list(by) == ["focal γ=3", "CE"] and len(by["CE"]) == 3
    with pytest.raises(ValueError, match="no run"):
        tables.runs_by_method(_frame(), {"LS": "label_smoothing:epsilon=0.05"})
    with pytest.raises(ValueError, match="same loss spec"):
        tables.runs_by_method(_frame(), {"a": "focal:gamma=3", "b": "focal:gamma=3.0"})
    with pytest.raises(ValueError, match="empty"):
        tables.runs_by_method(_frame(), {})


def test_t_tests_mark_significant_differences_as_scipy_does() -> None:
    by = tables.runs_by_method(_frame(), {"CE": "ce", "focal": "focal:gamma=3", "mixup": "ce@mixup_alpha=1"})
    out = tables.t_tests(by, baseline="CE", columns={"before TS": "ece"})
    assert list(out.index) == ["focal", "mixup"]
    assert list(out.columns) == ["before TS: vs CE", "before TS: p"]
    p = stats.ttest_ind(by["focal"]["ece"], by["CE"]["ece"]).pvalue
    assert out.loc["focal", "before TS: p"] == f"{p:.3f}" and p < 0.05
    assert out.loc["focal", "before TS: vs CE"] == "▼"  # lower ECE than CE
    flipped = tables.t_tests({"CE": by["focal"], "x": by["CE"]}, baseline="CE", columns={"e": "ece"})
    assert flipped.loc["x", "e: vs CE"] == "▲"
    strict = tables.t_tests(by, baseline="CE", columns={"b": "ece"}, alpha=1e-12)
    assert (strict["b: vs CE"] == "–").all()  # nothing is significant at that level
    with pytest.raises(ValueError, match="baseline"):
        tables.t_tests(by, baseline="LS", columns={"b": "ece"})
    with pytest.raises(ValueError, match="alpha"):
        tables.t_tests(by, baseline="CE", columns={"b": "ece"}, alpha=1.5)


def test_paper_cell_reads_the_papers_numbers() -> None:
    cell = dict(table="1", dataset="cifar10", model="resnet50", metric="ece")
    assert tables.paper_cell("lin2024uncertainty", "ce", ts="pre", **cell) == "4.36"
    assert tables.paper_cell("lin2024uncertainty", "ce", ts="post", **cell) == "1.32"
    with_params = tables.paper_cell("lin2024uncertainty", "dual_focal", ts="pre", show_params=True, **cell)
    assert with_params == "1.00 (gamma=5)"  # as Lin et al. (2024) print it
    assert tables.paper_cell("lin2024uncertainty", "entropy_reg", ts="pre", **cell) == "–"  # not in the table
    assert tables.paper_row("lin2024uncertainty", "ce", ts="pre", **cell)["value"] == pytest.approx(4.36)
    with pytest.raises(TypeError, match="unknown column"):
        tables.paper_cell("lin2024uncertainty", "ce", tabel="1")


def test_paper_cell_prints_the_std_where_the_paper_does() -> None:
    from calib.experiments import papers

    row = next(r for r in papers.results(paper="wang2021rethinking") if r["std"] is not None)
    filters = {k: row[k] for k in ("table", "dataset", "model", "metric", "ts", "params")}
    text = tables.paper_cell("wang2021rethinking", row["method"], **filters)
    assert text == f"{row['value_text']} ± {row['std_text']}"
    assert float(row["value_text"]) == row["value"]
    # the digits the paper prints, trailing zeros included (Wang et al. (2021): 95.00, not 95)
    ce = papers.results(paper="wang2021rethinking", dataset="svhn", method="ce", metric="accuracy")[0]
    assert papers.printed(ce) == "95.00 ± 0.27"


def test_loss_coefficient() -> None:
    assert tables.loss_coefficient("focal", "gamma=3") == 3.0
    assert tables.loss_coefficient("label_smoothing", "epsilon=0.05") == pytest.approx(0.05)
    assert tables.loss_coefficient("ce", "") == 0.0
    assert tables.loss_coefficient("ce", math.nan) == 0.0  # an empty CSV cell read by pandas
    with pytest.raises(ValueError, match="keywords"):
        tables.loss_coefficient("bsce_gra", "gamma=4,norm=2")


def test_paper_t_tests_recompute_the_marks_from_the_printed_means_and_stds() -> None:
    from calib.experiments import papers

    where = dict(table="2", dataset="cifar10", model="resnet32")
    methods = {"CE": "ce", "LS": "label_smoothing", "focal": "focal"}
    columns = {"after TS": {"metric": "ece", "ts": "post"}, "after HB": {"metric": "ece_hb", "ts": ""}}
    out = tables.paper_t_tests("wang2021rethinking", baseline="CE", methods=methods, columns=columns,
                               n=5, **where)
    assert list(out.index) == ["LS", "focal"]
    assert list(out.columns) == ["after TS: vs CE", "after TS: p", "after HB: vs CE", "after HB: p"]

    def row(method: str, **cell: str) -> dict:
        return papers.results(paper="wang2021rethinking", method=method, **where, **cell)[0]

    for label, metric, ts, name in [("LS", "ece_hb", "", "after HB"), ("focal", "ece", "post", "after TS")]:
        a, b = row(methods[label], metric=metric, ts=ts), row("ce", metric=metric, ts=ts)
        p = stats.ttest_ind_from_stats(a["value"], a["std"], 5, b["value"], b["std"], 5).pvalue
        assert out.loc[label, f"{name}: p"] == f"{p:.3f}"
        # a higher mean than CE's: filled when significant, hollow when not
        assert out.loc[label, f"{name}: vs CE"] == ("▲" if p < 0.05 else "△")
    # the same numbers as n = 5 runs with those means and sample stds give the same p
    rng = np.random.default_rng(0)
    samples = {}
    for label in ("LS", "CE"):
        r = row(methods[label], metric="ece_hb", ts="")
        z = rng.standard_normal(5)
        samples[label] = r["value"] + r["std"] * (z - z.mean()) / z.std(ddof=1)
    p = stats.ttest_ind(samples["LS"], samples["CE"]).pvalue
    assert out.loc["LS", "after HB: p"] == f"{p:.3f}"
    lower = tables.paper_t_tests("wang2021rethinking", baseline="LS", methods=methods, columns=columns,
                                 n=5, alpha=1e-12, **where)
    assert set(lower["after TS: vs LS"]) <= {"▽", "△"}  # nothing significant at that level
    assert lower.loc["CE", "after TS: vs LS"] == "▽"  # CE's mean is the lower
    with pytest.raises(ValueError, match="baseline"):
        tables.paper_t_tests("wang2021rethinking", baseline="L1", methods=methods, columns=columns, n=5)
    with pytest.raises(ValueError, match="n must be"):
        tables.paper_t_tests("wang2021rethinking", baseline="CE", methods=methods, columns=columns, n=1)
    with pytest.raises(ValueError, match="no mean ± std"):
        tables.paper_t_tests("wang2021rethinking", baseline="CE", methods={"CE": "ce", "x": "brier"},
                             columns=columns, n=5, **where)
