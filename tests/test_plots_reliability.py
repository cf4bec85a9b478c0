"""calib.plots.reliability: figures carry the right data and never touch pyplot state."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from calib import metrics as M  # noqa: E402
from calib.plots import confidence_histogram, ece_vs_bins, plot_bin_stats, reliability_diagram  # noqa: E402


@pytest.fixture
def preds():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(400, 5, generator=g), 1)
    y = torch.randint(0, 5, (400,), generator=g)
    return p, y


def test_reliability_diagram_bars_title_and_histogram(preds, tmp_path):
    p, y = preds
    before = plt.get_fignums()
    fig = reliability_diagram(p, y, n_bins=10, title="random")
    assert isinstance(fig, Figure) and plt.get_fignums() == before  # not registered with pyplot
    stats = M.bin_stats(p, y, 10)
    main, hist = fig.axes
    title = main.get_title()
    assert "random" in title and f"ECE = {100 * M.ece(p, y, 10):.2f}%" in title
    heights = [b.get_height() for b in main.containers[0]]  # accuracy bars
    np.testing.assert_allclose(heights, np.nan_to_num(stats.accuracy))
    gaps = main.containers[1]  # shaded gap from accuracy up (or down) to confidence
    full = stats.counts > 0
    np.testing.assert_allclose([b.get_height() for b in gaps], (stats.confidence - stats.accuracy)[full])
    shares = [b.get_height() for b in hist.containers[0]]
    np.testing.assert_allclose(shares, stats.counts / 400)
    fig.savefig(tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_reliability_diagram_into_given_axes(preds):
    p, y = preds
    fig = Figure()
    axes = fig.subplots(1, 2)
    out = reliability_diagram(p, y, ax=axes[1], closed="left")
    assert out is fig and len(fig.axes) == 2
    (hist,) = axes[1].child_axes  # the histogram is an inset under the given panel
    assert hist.get_xlabel() == "confidence" and "ECE" in axes[1].get_title()


def test_plot_bin_stats_rejects_other_types():
    with pytest.raises(TypeError, match="BinStats"):
        plot_bin_stats({"counts": [1]})


def test_confidence_histogram_counts(preds):
    p, y = preds
    fig = confidence_histogram(p, y, n_bins=8)
    right, wrong = fig.axes[0].containers
    total = np.array([a.get_height() + b.get_height() for a, b in zip(right, wrong)])
    np.testing.assert_array_equal(total, M.bin_stats(p, y, 8).counts)
    assert sum(a.get_height() for a in right) == round(400 * M.accuracy(p, y))


def test_ece_vs_bins_lines_match_sweep(preds):
    p, y = preds
    fig = ece_vs_bins({"a": (p, y), "b": (p.double().sqrt() / p.double().sqrt().sum(1, keepdim=True), y)},
                      n_bins_list=(5, 10, 50), sece_bandwidth=0.05)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 4  # a sweep line and an SECE line per model
    xs, ys = lines[0].get_data()
    np.testing.assert_array_equal(xs, [5, 10, 50])
    np.testing.assert_allclose(ys, [100 * M.ece(p, y, b) for b in (5, 10, 50)])
    np.testing.assert_allclose(lines[1].get_ydata(), [100 * M.sece(p, y, 0.05)] * 2)
    assert ax.get_xscale() == "log"
    no_sece = ece_vs_bins({"a": (p, y)}, n_bins_list=(5, 10), metric="mce", sece_bandwidth=None)
    assert len(no_sece.axes[0].get_lines()) == 1


def test_ece_vs_bins_bad_input(preds):
    with pytest.raises(ValueError, match="non-empty"):
        ece_vs_bins({})
    with pytest.raises(TypeError, match="pair"):
        ece_vs_bins({"a": preds[0]})
