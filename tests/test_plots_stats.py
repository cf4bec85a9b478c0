"""calib.plots.stats: seaborn figures over seeds carry the data they are given, in the book's style."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import scipy.stats  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from calib import plots  # noqa: E402
from calib.plots import palette  # noqa: E402

LOSSES = ["CE", "focal", "BSCE-GRA", "FLSD-53"]
SEEDS = 5


@pytest.fixture
def runs() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"loss": loss, "seed": s, "ece": 0.02 + 0.01 * i + 0.004 * rng.standard_normal()}
                         for i, loss in enumerate(LOSSES) for s in range(SEEDS)])


def _book_sized(fig: Figure) -> None:
    assert fig.get_figwidth() <= 7.0
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text():
            assert text.get_fontsize() >= 9, text.get_text()


def _error_lines(ax):
    """The interval of each category: pointplot's capped bars (no marker, 8 points)."""
    return [line for line in ax.lines if line.get_marker() in ("None", None, "") and len(line.get_ydata()) == 8]


# --------------------------------------------------------------------------- metric_across_seeds


def test_one_point_per_seed_and_loss_in_the_loss_colour(runs):
    before = plt.get_fignums()
    fig = plots.metric_across_seeds(runs, "ece")
    assert isinstance(fig, Figure) and plt.get_fignums() == before
    ax = fig.axes[0]
    points = ax.collections
    assert sum(len(c.get_offsets()) for c in points) == SEEDS * len(LOSSES)
    for loss, coll in zip(LOSSES, points):
        assert to_hex(coll.get_facecolor()[0]) == palette.color_for(loss)
        np.testing.assert_allclose(np.sort(coll.get_offsets()[:, 1]),
                                   np.sort(100 * runs.loc[runs.loss == loss, "ece"]))
    assert [t.get_text() for t in ax.get_xticklabels()] == LOSSES
    _book_sized(fig)


def test_means_and_t_intervals_are_drawn(runs):
    ax = plots.metric_across_seeds(runs.sample(frac=1, random_state=1), order=LOSSES).axes[0]
    means = [line for line in ax.lines if line.get_marker() == "D"][0]
    expect = [100 * runs.loc[runs.loss == loss, "ece"].mean() for loss in LOSSES]
    np.testing.assert_allclose(means.get_ydata(), expect)
    for loss, line in zip(LOSSES, _error_lines(ax)):
        lo, hi = np.nanmin(line.get_ydata()), np.nanmax(line.get_ydata())
        v = 100 * runs.loc[runs.loss == loss, "ece"].to_numpy()
        ref = scipy.stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=scipy.stats.sem(v))
        np.testing.assert_allclose((lo, hi), ref)


def test_sd_errorbars_and_seeded_bootstrap(runs):
    ax = plots.metric_across_seeds(runs, errorbar="sd", scale=1.0).axes[0]
    v = runs.loc[runs.loss == "CE", "ece"]
    line = _error_lines(ax)[0]
    np.testing.assert_allclose([np.nanmin(line.get_ydata()), np.nanmax(line.get_ydata())],
                               [v.mean() - v.std(), v.mean() + v.std()])
    boot = [[line.get_ydata() for line in _error_lines(plots.metric_across_seeds(runs, errorbar="ci", seed=s).axes[0])]
            for s in (3, 3, 4)]
    np.testing.assert_array_equal(boot[0], boot[1])
    assert not np.array_equal(np.nan_to_num(boot[0]), np.nan_to_num(boot[2]))


def test_rows_as_dicts_and_a_single_seed(runs):
    rows = runs.to_dict("records") + [{"loss": "mixup", "seed": 0, "ece": 0.05}]
    fig = plots.metric_across_seeds(rows, ylabel="ECE", title="five losses")
    ax = fig.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == SEEDS * len(LOSSES) + 1
    assert ax.get_ylabel() == "ECE" and ax.get_title() == "five losses"
    assert np.isnan(_error_lines(ax)[-1].get_ydata()).all()  # one seed: a mean, no interval


def test_into_a_given_axes(runs):
    fig = Figure()
    axes = fig.subplots(1, 2)
    assert plots.metric_across_seeds(runs, ax=axes[1]) is fig
    assert axes[1].collections and not axes[0].collections


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"metric": "nll"}, ValueError, "no column 'nll'"),
    ({"by": "method"}, ValueError, "no column 'method'"),
    ({"errorbar": "pi"}, ValueError, "errorbar"),
    ({"level": 1.5}, ValueError, "level"),
    ({"order": ["CE", "mixup"]}, ValueError, "mixup"),
])
def test_metric_across_seeds_rejects_bad_arguments(runs, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        plots.metric_across_seeds(runs, **kwargs)


def test_metric_across_seeds_rejects_bad_data(runs):
    with pytest.raises(TypeError, match="DataFrame"):
        plots.metric_across_seeds({"CE": [0.1, 0.2]})
    with pytest.raises(ValueError, match="no rows"):
        plots.metric_across_seeds([])
    with pytest.raises(ValueError, match="two rows for loss 'CE', seed 0"):
        plots.metric_across_seeds(pd.concat([runs, runs.iloc[:1]]))
    with pytest.raises(ValueError, match="NaN"):
        plots.metric_across_seeds(runs.assign(ece=np.where(runs.seed == 2, np.nan, runs.ece)))
    with pytest.raises(ValueError, match="numbers"):
        plots.metric_across_seeds(runs.assign(ece="low"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=12), st.floats(0.5, 0.99))
def test_t_interval_is_centred_on_the_mean_and_widens_with_level(values, level):
    lo, hi = plots.t_interval(values, level)
    m = np.mean(values)
    assert lo <= m + 1e-9 and hi >= m - 1e-9
    np.testing.assert_allclose((lo + hi) / 2, m, atol=1e-9 * (1 + abs(m)))
    lo2, hi2 = plots.t_interval(values, min(0.999, level + 0.005))
    assert hi2 - lo2 >= hi - lo - 1e-9


# --------------------------------------------------------------------------- confidence distributions


def _preds(seed: int, temperature: float, n: int = 600):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(n, 10, generator=g)
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)
    return torch.softmax(logits / temperature, 1), y


def test_confidence_frame_holds_top_label_confidence_and_correctness():
    p, y = _preds(0, 1.0)
    frame = plots.confidence_frame({"CE": (p, y)})
    np.testing.assert_allclose(frame["confidence"], p.max(1).values.double())
    np.testing.assert_array_equal(frame["correct"], (p.argmax(1) == y).numpy())
    with pytest.raises(TypeError, match="pair"):
        plots.confidence_frame({"CE": p})
    with pytest.raises(ValueError, match="logits"):
        plots.confidence_frame({"CE": (torch.randn(5, 3), torch.zeros(5, dtype=torch.long))})


def test_split_violins_per_loss_within_the_data_range():
    results = {"CE": _preds(0, 0.5), "focal": _preds(1, 1.0), "BSCE-GRA": _preds(2, 1.2)}
    before = plt.get_fignums()
    fig = plots.confidence_distributions(results)
    assert plt.get_fignums() == before
    ax = fig.axes[0]
    violins = ax.collections
    assert len(violins) == 2 * len(results)  # a correct and a wrong half per loss
    frame = plots.confidence_frame(results)
    for k, (name, half) in enumerate((n, h) for n in results for h in (True, False)):
        ys = violins[k].get_paths()[0].vertices[:, 1]
        part = frame.loc[(frame.loss == name) & (frame.correct == half), "confidence"]
        assert ys.min() >= part.min() - 1e-9 and ys.max() <= part.max() + 1e-9  # cut at the data
    labels = [t.get_text() for t in ax.get_xticklabels()]
    for name, label in zip(results, labels):
        share = 100 * (1 - frame.loc[frame.loss == name, "correct"].mean())
        assert label == f"{name}\n{share:.0f}% wrong"
    _book_sized(fig)
    # the same table as rows gives the same figure data
    again = plots.confidence_distributions(frame.to_dict("records")).axes[0].collections
    np.testing.assert_allclose(again[0].get_paths()[0].vertices, violins[0].get_paths()[0].vertices)


def test_confidence_distributions_rejects_bad_data():
    frame = plots.confidence_frame({"CE": _preds(0, 1.0)})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        plots.confidence_distributions(frame.assign(confidence=frame.confidence + 0.5))
    with pytest.raises(ValueError, match="correct"):
        plots.confidence_distributions(frame.assign(correct=2))
    with pytest.raises(ValueError, match="no column 'correct'"):
        plots.confidence_distributions(frame.drop(columns="correct"))
    with pytest.raises(ValueError, match="non-empty"):
        plots.confidence_distributions({})


# --------------------------------------------------------------------------- sweep heatmap


@pytest.fixture
def sweep() -> pd.DataFrame:
    return pd.DataFrame([{"gamma": c, "epoch": e, "seed": s, "ece": 0.01 * c + 0.001 * e + 0.002 * s}
                         for c in (0.5, 1, 2, 3) for e in (10, 20, 30) for s in range(3)])


def test_heatmap_cells_are_seed_means_with_larger_y_on_top(sweep):
    before = plt.get_fignums()
    fig = plots.sweep_heatmap(sweep, "gamma", "epoch")
    assert plt.get_fignums() == before
    ax = fig.axes[0]
    cells = ax.collections[0].get_array().reshape(3, 4)
    expect = 100 * sweep.groupby(["epoch", "gamma"]).ece.mean().unstack().sort_index(ascending=False).to_numpy()
    np.testing.assert_allclose(cells, expect)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["30", "20", "10"]
    assert [t.get_text() for t in ax.texts] == [f"{v:.1f}" for v in expect.ravel()]
    assert ax.get_xlabel() == "gamma" and ax.get_ylabel() == "epoch"
    _book_sized(fig)


def test_heatmap_median_blank_cells_and_best_mark(sweep):
    sparse = sweep[~((sweep.gamma == 3) & (sweep.epoch == 30))]
    fig = plots.sweep_heatmap(sparse, "gamma", "epoch", agg="median", mark="min", scale=1.0, fmt=".3f")
    ax = fig.axes[0]
    cells = ax.collections[0].get_array().reshape(3, 4)
    assert np.ma.is_masked(cells[0, 3])  # no run at (3, 30): blank
    assert len(ax.texts) == 11
    np.testing.assert_allclose(cells[2, 0], sparse.query("gamma == 0.5 and epoch == 10").ece.median())
    (box,) = ax.patches
    assert box.get_xy() == (0, 2)  # lowest ECE: smallest gamma, fewest epochs (bottom left)


@pytest.mark.parametrize("kwargs, match", [
    ({"x": "gamma", "y": "gamma"}, "two different"),
    ({"x": "gamma", "y": "lr"}, "no column 'lr'"),
    ({"x": "gamma", "y": "epoch", "agg": "max"}, "agg"),
    ({"x": "gamma", "y": "epoch", "mark": "best"}, "mark"),
])
def test_sweep_heatmap_rejects_bad_arguments(sweep, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plots.sweep_heatmap(sweep, **kwargs)


def test_interval_panels_bounds_and_seed_means():
    import pandas as pd

    from calib.plots.stats import interval_panels

    boot = pd.DataFrame({"method": ["a", "b", "a", "b"], "metric": ["ECE", "ECE", "NLL", "NLL"],
                         "value": [1.0, 2.0, 3.0, 4.0], "low": [0.5, 1.5, 2.5, 3.5], "high": [1.5, 2.5, 3.5, 4.5],
                         "net": ["n"] * 4})
    fig = interval_panels(boot, "method", "value", hue="net", col="metric", low="low", high="high")
    assert len(fig.axes) == 2
    interval_panels(boot.assign(low=float("nan")), "method", "value", hue="net", col="metric", low="low",
                    high="high")  # no interval: points only
    interval_panels(boot.assign(low=boot.value + 0.1), "method", "value", hue="net", col="metric", low="low",
                    high="high")  # the point below its bootstrap interval: drawn, no lower bar
    seeds = pd.DataFrame({"N": [10, 10, 100, 100], "error": [1.0, 3.0, 0.0, 0.0], "bins": [5] * 4})
    fig = interval_panels(seeds, "N", "error", hue="bins", logx=True, hline=0.0)
    line = fig.axes[0].lines[0]
    assert list(line.get_ydata()) == [2.0, 0.0]  # the mean over the seeds
    with pytest.raises(ValueError, match="one row per"):
        interval_panels(pd.concat([boot, boot]), "method", "value", hue="net", col="metric", low="low", high="high")


def test_interval_panels_wrap_into_rows_and_label_a_few_log_ticks():
    pd = pytest.importorskip("pandas")
    from calib.plots.stats import interval_panels

    rows = [{"size": n, "ece": 0.01 * i + n * 1e-6, "loss": loss, "panel": panel}
            for i, n in enumerate((2_500, 10_000, 55_000)) for loss in ("ce", "focal")
            for panel in "abc"]
    fig = interval_panels(pd.DataFrame(rows), "size", "ece", hue="loss", col="panel", logx=True,
                          ncols=2)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 4 and len(visible) == 3  # two rows, one empty slot hidden
    assert [t.get_text() for t in visible[0].get_xticklabels()] == ["2,500", "10,000", "55,000"]
    with pytest.raises(ValueError, match="ncols"):
        interval_panels(pd.DataFrame(rows), "size", "ece", hue="loss", ncols=0)


def test_interval_panels_level_draws_the_t_interval_of_the_seed_mean():
    pd = pytest.importorskip("pandas")
    from calib.plots.stats import _summarise, t_interval

    frame = pd.DataFrame({"x": [1, 1, 1, 2], "y": [1.0, 2.0, 4.0, 3.0], "h": "a"})
    out = _summarise(frame, ["h", "x"], "y", None, None, level=0.95).set_index("x")
    assert (out.loc[1, "_lo"], out.loc[1, "_hi"]) == pytest.approx(t_interval([1.0, 2.0, 4.0]))
    assert out.loc[1, "_y"] == pytest.approx(7 / 3) and np.isnan(out.loc[2, "_lo"])  # one seed: no bar
    with pytest.raises(ValueError, match="level"):
        from calib.plots.stats import interval_panels
        interval_panels(frame, "x", "y", hue="h", level=95)
