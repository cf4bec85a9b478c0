"""calib.plots.palette and the figure sizes: one colour per loss and per γ, column-width figures."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from calib import losses, plots  # noqa: E402
from calib.plots import palette  # noqa: E402


def test_every_registered_loss_has_a_distinct_colour():
    names = losses.names()
    colours = {}
    for name in names:
        colours[name] = palette.color_for(name)
    # Pairs sharing a colour are the same objective (a loss and its CE+ variant).
    same = {("dece", "ce_dece"), ("sece", "ce_sece")}
    for a in names:
        for b in names:
            if a < b and (a, b) not in same and (b, a) not in same:
                assert colours[a] != colours[b], (a, b)


def test_display_names_and_registry_names_agree():
    assert palette.color_for("FLSD-53") == palette.color_for("flsd53")
    assert palette.color_for("BSCE-GRA") == palette.color_for("bsce_gra")
    assert palette.color_for("Cross-entropy") == palette.color_for("ce")
    assert palette.series_color("FL_γ-SECE (seed 2)") == palette.color_for("FL_γ-SECE")
    assert palette.series_color("focal γ=3") == palette.gamma_color(3)
    assert palette.series_color("something else", default="C3") == "C3"


def test_gamma_colours_are_fixed_distinct_and_darken():
    gs = (0.5, 1, 2, 3, 4, 5)
    cs = [palette.gamma_color(g) for g in gs]
    assert len(set(cs)) == len(cs) and palette.gamma_color(2.0) == palette.gamma_color(2)
    lum = [np.dot(to_rgb(c), (0.299, 0.587, 0.114)) for c in cs]
    assert all(a > b for a, b in zip(lum, lum[1:]))  # more focal reads darker
    assert palette.gamma_color(0) == palette.color_for("ce")
    assert palette.gamma_color(2.5) not in cs


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (7, ValueError), (float("nan"), ValueError),
                                      ("3", TypeError), (True, TypeError)])
def test_gamma_color_rejects_bad_input(bad, exc):
    with pytest.raises(exc, match="gamma"):
        palette.gamma_color(bad)


def test_color_for_rejects_unknown_and_bad_names():
    with pytest.raises(ValueError, match="no colour"):
        palette.color_for("not a loss")
    with pytest.raises(TypeError, match="name"):
        palette.color_for(3)
    with pytest.raises(ValueError, match="non-empty"):
        palette.color_for("  ")


def _preds(seed=0, n=300):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(n, 4, generator=g), 1), torch.randint(0, 4, (n,), generator=g)


def test_reliability_diagrams_fit_the_column_and_share_one_legend():
    fig = plots.reliability_diagrams({"a": _preds(0), "b": _preds(1), "c": _preds(2)})
    assert fig.get_figwidth() <= 7.0
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text():
            assert text.get_fontsize() >= 9, text.get_text()
    with pytest.raises(ValueError, match="width"):
        plots.reliability_diagrams({"a": _preds()}, width=9)


def test_gap_is_unfilled_hatching_so_its_colour_matches_the_legend():
    fig = plots.reliability_diagram(*_preds())
    gap = fig.axes[0].containers[1]
    # no translucent fill that mixes with the blue bar, no opaque fill that hides it
    assert all(bar.get_facecolor()[3] == 0 and bar.get_hatch() for bar in gap)
    assert all(bar.get_alpha() in (None, 1.0) for bar in gap)


def test_gamma_over_epochs_groups_seeds_without_bands():
    hist = lambda s: [{"epoch": e, "m": 1 + s + e, "sd": 0.1 * e} for e in range(1, 4)]  # noqa: E731
    runs = {f"{m} (seed {s})": hist(s) for m in ("FL_γ-DECE", "FL_γ-SECE") for s in range(3)}
    fig = plots.gamma_over_epochs(runs, mean_key="m", std_key="sd")
    ax_mean, ax_std = fig.axes
    assert fig.get_figwidth() <= 7.0
    assert not ax_mean.collections  # no ±std band for methods with several seeds
    thick = [line for line in ax_mean.get_lines() if line.get_linewidth() >= 2]
    assert len(thick) == 2  # one average per method
    np.testing.assert_allclose(thick[0].get_ydata(), [3, 4, 5])  # mean over seeds 0, 1, 2
    assert thick[1].get_color() == palette.color_for("FL_γ-SECE")
    single = plots.gamma_over_epochs({"only": hist(0)}, mean_key="m", std_key="sd")
    assert len(single.axes[0].collections) == 1  # one run: its band is shown


def test_training_curves_are_column_wide_and_use_the_palette():
    hist = [{"epoch": e, "test_ece": 0.1 / e} for e in range(1, 4)]
    fig = plots.training_curves({"CE": hist, "focal γ=3": hist}, ["test_ece"])
    assert fig.get_figwidth() <= 7.0
    colours = [line.get_color() for line in fig.axes[0].get_lines()]
    assert colours == [palette.color_for("ce"), palette.gamma_color(3)]


def test_training_curves_draw_percent_keys_times_100():
    hist = [{"epoch": e, "test_ece": 0.1 / e, "test_nll": 1.0 / e} for e in range(1, 4)]
    fig = plots.training_curves({"CE": hist}, ["test_ece", "test_nll"], percent=["test_ece"])
    ece, nll = fig.axes[0], fig.axes[1]
    assert list(ece.get_lines()[0].get_ydata()) == pytest.approx([10.0, 5.0, 10 / 3])
    assert ece.get_title() == "test ECE (%)" and nll.get_title() == "test NLL"
    assert list(nll.get_lines()[0].get_ydata()) == pytest.approx([1.0, 0.5, 1 / 3])


def test_epoch_band_curves_take_palette_colours_for_losses():
    runs = np.arange(6.0).reshape(2, 3)
    fig = plots.epoch_band_curves({"CE": runs, "LS ε=0.05": runs, "focal γ=3": runs, "my idea": runs},
                                  ylabel="ECE")
    lines = fig.axes[0].get_lines()
    assert [line.get_color() for line in lines[:3]] == [
        palette.color_for("ce"), palette.color_for("label_smoothing"), palette.gamma_color(3)]
    assert lines[3].get_color() == matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][3]
    np.testing.assert_allclose(lines[0].get_ydata(), [1.5, 2.5, 3.5])  # mean over runs
