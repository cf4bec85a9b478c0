"""Checks for the logic chapters 9-11 rely on (the reproductions part of the book)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from calib import data as cdata
from calib.data.idx import find_fashion_mnist

# the real files where calib.data looks for them (the Debian package's folder among them)
FASHION_MNIST = find_fashion_mnist("data") is not None


def test_gaussian_overlap_is_a_named_offline_dataset() -> None:
    assert "gaussian_overlap" in cdata.datasets()
    s = cdata.load("gaussian_overlap", split_seed=3)
    assert s.train_x.shape == (540, 20) and s.val_x.shape == (500, 20) and s.test_x.shape == (1000, 20)
    assert s.num_classes == 5 and not s.image
    assert torch.bincount(s.train_y, minlength=5).tolist() == [108] * 5
    again = cdata.load("gaussian_overlap", split_seed=3)
    assert torch.equal(s.train_x, again.train_x) and torch.equal(s.test_y, again.test_y)
    other = cdata.load("gaussian_overlap", split_seed=4)
    assert not torch.equal(s.train_x, other.train_x)


def test_gaussian_overlap_classes_overlap() -> None:
    """The Bayes classifier errs on a sizeable share of test points (that is the point of it)."""
    s = cdata.load("gaussian_overlap")
    bayes_error = float((s.extra["test_eta"].argmax(1) != s.test_y).double().mean())
    assert 0.05 < bayes_error < 0.5


def test_gaussian_overlap_refuses_val_size() -> None:
    with pytest.raises(ValueError, match="val_size"):
        cdata.load("gaussian_overlap", val_size=10)


# ------------------------------------------------------------------- calib.plots.repro
def test_epoch_band_curves_draws_mean_and_band() -> None:
    from calib import plots

    a = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 3.0]])
    fig = plots.epoch_band_curves({"CE": a, "LS": a + 1}, ylabel="ECE (%)", milestones=(2,))
    ax = fig.axes[0]
    assert np.allclose(ax.lines[0].get_ydata(), [4.0, 3.0, 2.0])
    assert fig.get_figwidth() <= 7
    fig = plots.epoch_band_curves({"CE": a}, ylabel="ECE", epochs=[2, 4, 6])
    assert np.allclose(fig.axes[0].lines[0].get_xdata(), [2, 4, 6])
    with pytest.raises(ValueError, match="evaluations"):
        plots.epoch_band_curves({"CE": a}, ylabel="ECE", epochs=[2, 4])
    with pytest.raises(ValueError, match="NaN"):
        plots.epoch_band_curves({"CE": [[1.0, np.nan]]}, ylabel="x")
    with pytest.raises(ValueError, match="empty"):
        plots.epoch_band_curves({}, ylabel="x")


def test_epoch_band_curves_put_runs_of_different_lengths_on_one_axis_of_steps() -> None:
    from calib import plots

    short, long = np.ones((2, 4)), np.ones((3, 8))
    fig = plots.epoch_band_curves({"short": short, "long": long}, ylabel="NLL", xlabel="SGD step",
                                  per_epoch={"short": 100, "long": 50})
    ax = fig.axes[0]
    assert [line.get_xdata()[-1] for line in ax.get_lines()] == [400, 400]  # both end at step 400
    assert ax.get_xlabel() == "SGD step"
    fig = plots.epoch_band_curves({"B": {"short": short, "long": long}, "A": {"long": long}}, ylabel="NLL")
    assert fig.axes[1].get_lines()[0].get_color() == fig.axes[0].get_lines()[1].get_color()  # "long"
    fig = plots.epoch_band_curves({"short": short, "long": long}, ylabel="NLL",
                                  per_epoch={"short": 100, "long": 50}, milestones={"long": [4, 6]})
    drops = [line.get_xdata()[0] for line in fig.axes[0].get_lines()[2:]]  # after the two curves
    assert drops == [200, 300]  # epochs 4 and 6 of the long run, at 50 steps an epoch
    with pytest.raises(ValueError, match="per_epoch"):
        plots.epoch_band_curves({"short": short}, ylabel="x", per_epoch={"short": 0})


def test_epoch_band_curves_one_panel_per_group_on_a_shared_axis() -> None:
    from calib import plots

    a = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 3.0]])
    fig = plots.epoch_band_curves({"A": {"CE": a, "focal γ=3": a / 2}, "B": {"CE": a + 1}}, ylabel="ECE")
    assert [ax.get_title() for ax in fig.axes] == ["A", "B"]
    assert np.allclose(fig.axes[1].lines[0].get_ydata(), [5.0, 4.0, 3.0])
    assert fig.axes[0].get_shared_y_axes().joined(fig.axes[0], fig.axes[1])
    # a loss keeps its colour from panel to panel
    assert fig.axes[0].lines[0].get_color() == fig.axes[1].lines[0].get_color()
    assert fig.get_figwidth() <= 7
    with pytest.raises(ValueError, match="empty"):
        plots.epoch_band_curves({"A": {}}, ylabel="x")


def test_coefficient_curves_one_panel_per_loss() -> None:
    from calib import plots

    panels = {"label smoothing": {"before TS": ([0.01, 0.05], [0.1, 0.05], [0.01, 0.01]),
                                  "after TS": ([0.01, 0.05], [0.04, 0.04], [0.0, 0.01])},
              "focal": {"before TS": ([1, 3], [0.2, 0.1], [0.0, 0.0])}}
    fig = plots.coefficient_curves(panels, ylabel="ECE", logx=("focal",))
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2 and visible[1].get_xscale() == "log"
    with pytest.raises(ValueError, match="one length"):
        plots.coefficient_curves({"x": {"a": ([1, 2], [1], [1])}}, ylabel="y")


def test_grouped_histograms_counts_every_value() -> None:
    from calib import plots

    v = np.arange(10.0)
    g = np.array([0, 1] * 5)
    fig = plots.grouped_histograms({"CE": (v, g)}, group_labels=["early", "late"], xlabel="max logit", bins=5)
    heights = sum(p.get_height() for p in fig.axes[0].patches)
    assert heights == pytest.approx(10)  # every value counted once, in its own group
    with pytest.raises(ValueError, match="groups"):
        plots.grouped_histograms({"CE": (v, g + 5)}, group_labels=["a", "b"], xlabel="x")
    with pytest.raises(ValueError, match="one length"):
        plots.grouped_histograms({"CE": (v, g[:3])}, group_labels=["a", "b"], xlabel="x")


def test_grouped_histograms_draws_an_empty_panel() -> None:
    """A run too short to learn any test sample (smoke mode) gives an empty, marked panel."""
    from calib import plots

    empty = (np.array([]), np.array([], dtype=int))
    fig = plots.grouped_histograms({"CE": (np.arange(4.0), np.array([0, 1, 0, 1])), "LS": empty},
                                   group_labels=["a", "b"], xlabel="x", bins=4)
    assert sum(p.get_height() for p in fig.axes[1].patches) == 0
    assert any(t.get_text() == "no samples" for t in fig.axes[1].texts)
    fig = plots.grouped_histograms({"CE": empty}, group_labels=["a"], xlabel="x")
    assert any(t.get_text() == "no samples" for t in fig.axes[0].texts)


@pytest.mark.skipif(not FASHION_MNIST, reason="Fashion-MNIST not installed (make fashion-mnist)")
def test_quick_regime_of_chapters_9_to_11_is_over_confident(tmp_path: Path) -> None:
    """presets.QUICK_REAL, the real-image case of chapters 9-11: CE fits its 1,000
    Fashion-MNIST images and ends over-confident, as the papers' CIFAR networks do (the
    regime the chapters' comparisons need); focal loss (gamma = 3) does not."""
    from calib.experiments import sweep as sw
    from calib.train import presets

    torch.set_num_threads(1)
    res = sw.sweep(tmp_path, losses=["ce", "focal:gamma=3"],
                   seeds=[0], progress=False, fsync=False, **presets.QUICK_REAL)
    ce, focal = (res.to_frame().set_index("loss").loc[name] for name in ("ce", "focal"))
    assert 0.75 < ce["accuracy"] < 0.9 and abs(focal["accuracy"] - ce["accuracy"]) < 0.03
    assert ce["temperature"] > 1.8 and ce["ece"] > 0.08
    assert focal["ece"] < ce["ece"] / 3 and 0.8 < focal["temperature"] < 1.3
