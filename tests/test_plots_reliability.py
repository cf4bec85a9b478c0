"""calib.plots.reliability: figures carry the right data and never touch pyplot state."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from calib import metrics as M  # noqa: E402
from calib import plots  # noqa: E402
from calib.plots import reliability  # noqa: E402
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
    np.testing.assert_allclose(lines[1].get_ydata(), [100 * M.sece_hard(p, y, 0.05)] * 2)
    assert ax.get_xscale() == "log"
    no_sece = ece_vs_bins({"a": (p, y)}, n_bins_list=(5, 10), metric="mce", sece_bandwidth=None)
    assert len(no_sece.axes[0].get_lines()) == 1


def test_ece_vs_bins_bad_input(preds):
    with pytest.raises(ValueError, match="non-empty"):
        ece_vs_bins({})
    with pytest.raises(TypeError, match="pair"):
        ece_vs_bins({"a": preds[0]})


# --------------------------------------------------------------------------- consistency bands, bootstrap intervals


def _calibrated(n: int, seed: int = 0, sharpen: float = 1.0):
    """Labels drawn from the predicted probabilities: calibrated (``sharpen`` > 1: over-confident)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(n, 5, generator=g, dtype=torch.float64), 1)
    y = torch.multinomial(p, 1, generator=g).squeeze(1)
    return torch.softmax(sharpen * p.log(), 1), y


def _reference(conf, correct, bins, n_bins, draws):
    """Per-resample bin accuracy, one resample and one bin at a time."""
    out = np.full((len(draws), n_bins), np.nan)
    for r, (b, c) in enumerate(draws):
        for j in range(n_bins):
            if (b == j).any():
                out[r, j] = c[b == j].mean()
    return out


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the reference, at empty bins
@pytest.mark.parametrize("block", [None, 7 * 60])  # one block of resamples, or blocks of 7
@pytest.mark.parametrize("method", ["consistency", "bootstrap"])
def test_intervals_match_a_loop_over_resamples(method, block, monkeypatch):
    if block is not None:
        monkeypatch.setattr(reliability, "_BLOCK", block)
    p, y = _calibrated(60, seed=3)
    n_bins, r, seed = 6, 40, 11
    low, high = plots.reliability_intervals(p, y, n_bins, method=method, n_resamples=r, seed=seed)
    conf, pred = p.max(1)
    correct = (pred == y).numpy()
    bins = torch.bucketize(conf, torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype)[1:-1]).numpy()
    gen = torch.Generator().manual_seed(seed)
    if method == "consistency":
        z = (torch.rand((r, 60), generator=gen, dtype=conf.dtype) < conf).numpy()
        draws = [(bins, z[i]) for i in range(r)]
    else:
        idx = torch.randint(60, (r, 60), generator=gen).numpy()
        draws = [(bins[i], correct[i]) for i in idx]
    ref = np.nanquantile(_reference(conf, correct, bins, n_bins, draws), [0.05, 0.95], axis=0)
    np.testing.assert_allclose(low, ref[0])
    np.testing.assert_allclose(high, ref[1])
    stats = M.bin_stats(p, y, n_bins)
    assert np.array_equal(np.isnan(low), stats.counts == 0)  # empty bins have no interval


def test_consistency_band_brackets_the_calibrated_accuracy_and_shrinks_with_n():
    widths = []
    for n in (1_000, 20_000):
        p, y = _calibrated(n)
        low, high = plots.reliability_intervals(p, y, 10)
        stats = M.bin_stats(p, y, 10)
        full = stats.counts >= 50
        assert (low[full] <= stats.confidence[full]).all() and (stats.confidence[full] <= high[full]).all()
        widths.append(np.nanmean((high - low)[full]))
    assert widths[1] < widths[0] / 2.5  # ~1/sqrt(N): 20x the samples, ~4.5x narrower


def test_consistency_band_ignores_the_labels_and_flags_over_confidence():
    p, y = _calibrated(20_000)
    band = plots.reliability_intervals(p, y, 10, seed=5)
    other = plots.reliability_intervals(p, torch.zeros_like(y), 10, seed=5)
    np.testing.assert_array_equal(band, other)  # a calibrated model with these confidences
    stats = M.bin_stats(p, y, 10)
    full = stats.counts >= 50
    inside = (band[0] <= stats.accuracy) & (stats.accuracy <= band[1])
    assert inside[full].mean() >= 0.7  # a 90 % band holds most bars of a calibrated model
    hot = _calibrated(20_000, sharpen=2.0)
    low, high = plots.reliability_intervals(*hot, 10)
    s2 = M.bin_stats(*hot, 10)
    full = s2.counts >= 50
    assert (s2.accuracy[full] < low[full]).mean() >= 0.5  # over-confident bars fall below the band


def test_bootstrap_interval_holds_the_observed_accuracy_and_shrinks_with_n():
    widths = []
    for n in (1_000, 20_000):
        p, y = _calibrated(n, sharpen=1.5)
        low, high = plots.reliability_intervals(p, y, 10, method="bootstrap", n_resamples=400)
        stats = M.bin_stats(p, y, 10)
        full = stats.counts >= 50
        assert (low[full] <= stats.accuracy[full]).all() and (stats.accuracy[full] <= high[full]).all()
        widths.append(np.nanmean((high - low)[full]))
    assert widths[1] < widths[0] / 2.5


def test_intervals_are_seeded_and_level_sets_the_width(preds):
    p, y = preds
    a = plots.reliability_intervals(p, y, method="bootstrap", seed=1)
    b = plots.reliability_intervals(p, y, method="bootstrap", seed=1)
    c = plots.reliability_intervals(p, y, method="bootstrap", seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.nan_to_num(a), np.nan_to_num(c))
    wide = plots.reliability_intervals(p, y, method="bootstrap", seed=1, level=0.99)
    assert np.nansum(wide[1] - wide[0]) > np.nansum(a[1] - a[0])


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"method": "jackknife"}, ValueError, "method"),
    ({"n_resamples": 1}, ValueError, "n_resamples"),
    ({"n_resamples": 10.0}, TypeError, "n_resamples"),
    ({"level": 1.0}, ValueError, "level"),
    ({"seed": "0"}, TypeError, "seed"),
    ({"closed": "both"}, ValueError, "closed"),
    ({"n_bins": 0}, ValueError, "n_bins"),
])
def test_intervals_reject_bad_arguments(preds, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        plots.reliability_intervals(*preds, **kwargs)


def test_intervals_reject_logits_and_bad_labels(preds):
    p, y = preds
    with pytest.raises(ValueError, match="logits"):
        plots.reliability_intervals(torch.randn(10, 3), y[:10])
    with pytest.raises(ValueError, match="labels"):
        plots.reliability_intervals(p, y[:-1])


def test_diagram_draws_the_band_and_the_bootstrap_bars(preds):
    p, y = preds
    fig = reliability_diagram(p, y, n_bins=10, band="both", n_resamples=200, seed=4)
    main = fig.axes[0]
    stats = M.bin_stats(p, y, 10)
    full, dense = stats.counts > 0, stats.counts >= reliability.MIN_BAND_COUNT
    low, high = plots.reliability_intervals(p, y, 10, n_resamples=200, seed=4)
    band = main.containers[2]
    np.testing.assert_allclose([b.get_y() for b in band], low[dense])
    np.testing.assert_allclose([b.get_height() for b in band], (high - low)[dense])
    (bars,) = [c for c in main.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    blow, bhigh = plots.reliability_intervals(p, y, 10, method="bootstrap", n_resamples=200, seed=4)
    segments = bars.lines[2][0].get_segments()
    np.testing.assert_allclose([s[0][1] for s in segments], np.minimum(blow, stats.accuracy)[full])
    np.testing.assert_allclose([s[1][1] for s in segments], np.maximum(bhigh, stats.accuracy)[full])
    legend = [t.get_text() for t in main.get_legend().get_texts()]
    assert "90% consistency band" in legend and "90% bootstrap interval" in legend
    plain = reliability_diagram(p, y, n_bins=10)
    assert len(plain.axes[0].containers) == 2  # no band unless asked for


def test_diagrams_side_by_side_carry_a_band_each(preds):
    fig = plots.reliability_diagrams({"a": preds, "b": preds}, n_bins=8, band="consistency", n_resamples=100)
    tops, hists = fig.axes[:2], fig.axes[2:]
    assert [len(ax.containers) for ax in tops] == [3, 3] and [len(ax.containers) for ax in hists] == [1, 1]
    assert "90% consistency band" in [t.get_text() for t in fig.legends[0].get_texts()]
    with pytest.raises(ValueError, match="band"):
        plots.reliability_diagrams({"a": preds}, band="bands")
    with pytest.raises(ValueError, match="band"):
        reliability_diagram(*preds, band="consistent")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", ["consistency", "bootstrap"])
def test_intervals_on_cuda_are_seeded_and_agree_in_distribution(method):
    p, y = _calibrated(20_000)
    cpu = plots.reliability_intervals(p, y, 10, method=method)
    gpu = plots.reliability_intervals(p.cuda(), y.cuda(), 10, method=method)
    np.testing.assert_array_equal(gpu, plots.reliability_intervals(p.cuda(), y.cuda(), 10, method=method))
    np.testing.assert_array_equal(np.isnan(cpu), np.isnan(gpu))
    full = M.bin_stats(p, y, 10).counts >= 200
    np.testing.assert_allclose(gpu[0][full], cpu[0][full], atol=0.03)  # other draws, same distribution
    np.testing.assert_allclose(gpu[1][full], cpu[1][full], atol=0.03)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 80), k=st.integers(2, 6), n_bins=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
       method=st.sampled_from(["consistency", "bootstrap"]), closed=st.sampled_from(["right", "left"]))
def test_intervals_are_ordered_probabilities_with_nan_only_at_empty_bins(n, k, n_bins, seed, method, closed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(3 * torch.randn(n, k, generator=g), 1)
    y = torch.randint(0, k, (n,), generator=g)
    low, high = plots.reliability_intervals(p, y, n_bins, method=method, n_resamples=30, seed=seed, closed=closed)
    empty = M.bin_stats(p, y, n_bins, closed=closed).counts == 0
    np.testing.assert_array_equal(np.isnan(low), empty)
    np.testing.assert_array_equal(np.isnan(high), empty)
    assert (0 <= low[~empty]).all() and (low[~empty] <= high[~empty]).all() and (high[~empty] <= 1).all()


def _overlapping_texts(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of visible texts whose boxes overlap, and texts outside the figure, once drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    boxes = [(t.get_text(), t.get_window_extent(renderer).expanded(0.98, 0.9)) for t in texts]
    page = fig.bbox
    bad = [(name, "outside the figure") for name, b in boxes
           if b.x0 < page.x0 - 1 or b.x1 > page.x1 + 1 or b.y0 < page.y0 - 1 or b.y1 > page.y1 + 1]
    bad += [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    return bad


@pytest.mark.parametrize("n", range(1, 7))
def test_one_to_six_diagrams_fit_the_column_without_overlapping_text(preds, n):
    names = ["cross-entropy", "focal γ=3 (seed 2)", "BSCE-GRA γ=4, β=2", "dual focal γ=5",
             "label smoothing ε=0.05", "FL_γ-SECE"]
    fig = plots.reliability_diagrams({name: preds for name in names[:n]}, n_bins=15, band="consistency",
                                     n_resamples=50)
    assert fig.get_figwidth() <= 7.0
    assert _overlapping_texts(fig) == []


def test_mce_in_titles_is_optional(preds):
    with_mce = plots.reliability_diagrams({"a": preds}, n_bins=10)
    without = plots.reliability_diagrams({"a": preds}, n_bins=10, mce=False)
    assert "MCE" in with_mce.axes[0].get_title() and "MCE" not in without.axes[0].get_title()
    assert "MCE" not in reliability_diagram(*preds, mce=False).axes[0].get_title()


def test_no_consistency_band_for_sparse_bins():
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(4 * torch.randn(120, 3, generator=g), 1)
    y = torch.randint(0, 3, (120,), generator=g)
    stats = M.bin_stats(p, y, 10)
    for min_count in (1, 10, 30):
        fig = reliability_diagram(p, y, n_bins=10, band="consistency", n_resamples=50, min_count=min_count)
        band = fig.axes[0].containers[2]
        assert len(band) == int((stats.counts >= min_count).sum())
    assert (stats.counts > 0).sum() > (stats.counts >= 10).sum()  # the fixture has sparse bins
    with pytest.raises(ValueError, match="min_count"):
        plots.reliability_diagrams({"a": (p, y)}, min_count=-1)


LONG_NAMES = [
    "focal loss (gamma = 3) after temperature scaling on CIFAR-10",
    "BSCE-GRA, gamma = 4, beta = 2, trained with mixup for 350 epochs",
    "a_single_token_name_without_any_space_to_break_it_at_all",
    "dual focal loss with label smoothing and a long description",
    "cross-entropy baseline, 200 epochs, batch 128, lr 0.1 stepped",
    "MMCE-weighted, ResNet-110, the authors' code and their split",
]


def _title_boxes(fig: Figure) -> list:
    canvas = FigureCanvasAgg(fig)  # the figures are built without pyplot: Agg drawn here
    canvas.draw()
    renderer = canvas.get_renderer()
    return [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_visible() and ax.get_title()]


def _inside_and_apart(fig: Figure, expected: int) -> None:
    boxes = _title_boxes(fig)
    assert len(boxes) == expected
    frame = fig.bbox
    for box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)


@pytest.mark.parametrize("n", range(1, 7))
def test_long_titles_stay_inside_the_figure_and_apart(preds, n):
    """Issue 43: a 55-character title was clipped on the right in one panel, and ran into its
    neighbour and off the left edge in six. Long names are wrapped to the panel's width."""
    assert min(len(name) for name in LONG_NAMES) >= 55
    probs, labels = preds
    fig = plots.reliability_diagrams({name: (probs, labels) for name in LONG_NAMES[:n]})
    _inside_and_apart(fig, n)
    narrow = plots.reliability_diagrams({name: (probs, labels) for name in LONG_NAMES[:n]}, width=4.0)
    _inside_and_apart(narrow, n)


def test_a_long_title_stays_inside_a_single_diagram(preds):
    probs, labels = preds
    _inside_and_apart(reliability_diagram(probs, labels, title=LONG_NAMES[0]), 1)
    _inside_and_apart(reliability_diagram(probs, labels, title=LONG_NAMES[2]), 1)
    _inside_and_apart(plot_bin_stats(M.bin_stats(probs, labels), title=LONG_NAMES[1]), 1)
    _inside_and_apart(confidence_histogram(probs, labels, title=LONG_NAMES[3]), 1)
    _inside_and_apart(ece_vs_bins({"a": (probs, labels)}, title=LONG_NAMES[4]), 1)
