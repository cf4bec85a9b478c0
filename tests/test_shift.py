"""calib.data.shift (corruptions), calib.experiments.shift (tables) and calib.plots.shift."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib import metrics
from calib.data import shift as cs
from calib.experiments import shift as es


def _shapes(n: int = 6, seed: int = 0) -> torch.Tensor:
    """Fashion-MNIST-like images: a bright blob of random size and place on a black ground."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    out = torch.zeros(n, 1, 28, 28)
    for i in range(n):
        cy, cx = 10 + 8 * torch.rand(2, generator=g)
        ry, rx = 4 + 6 * torch.rand(2, generator=g)
        inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        out[i, 0] = inside * (120 + 120 * torch.rand(28, 28, generator=g))
    return out.round().to(torch.uint8)


def _change(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().mean())


@pytest.mark.parametrize("name", list(cs.CORRUPTIONS))
def test_shape_dtype_device_and_severity_zero(name):
    x = _shapes()
    for s in range(6):
        y = cs.corrupt(name, x, s)
        assert y.shape == x.shape and y.dtype == torch.uint8 and y.device == x.device
    y0 = cs.corrupt(name, x, 0)
    assert torch.equal(y0, x) and y0.data_ptr() != x.data_ptr()  # a copy, not the input


@pytest.mark.parametrize("name", list(cs.CORRUPTIONS))
def test_pixel_change_grows_with_severity(name):
    x = _shapes(8)
    change = [_change(cs.corrupt(name, x, s), x) for s in range(6)]
    assert change[0] == 0 < change[1]
    assert all(b > a for a, b in zip(change, change[1:])), change


@given(seed=st.integers(0, 2**31 - 1), severity=st.integers(1, 5))
@settings(max_examples=20, deadline=None)
def test_noise_is_deterministic_given_the_seed(seed, severity):
    x = _shapes(2)
    a = cs.gaussian_noise(x, severity, seed=seed)
    assert torch.equal(a, cs.gaussian_noise(x, severity, seed=seed))
    assert not torch.equal(a, cs.gaussian_noise(x, severity, seed=seed + 1))


def test_noise_has_the_documented_standard_deviation():
    x = torch.full((200, 1, 28, 28), 128, dtype=torch.uint8)  # mid-grey, 0.5 from either clip
    for s, c in zip(cs.SEVERITIES, cs.NOISE_STD):
        d = (cs.gaussian_noise(x, s, seed=s).float() - 128) / 255
        if c <= 0.12:  # 0.5 is over 4 c: clipping is negligible
            assert abs(float(d.std()) - c) < 0.01 * c + 0.002
        else:  # clipping at 0 and 1 shrinks the spread
            assert 0.8 * c < float(d.std()) < c


def test_deterministic_corruptions_do_not_depend_on_the_seed():
    x = _shapes(3)
    for name in ("gaussian_blur", "rotation"):
        assert torch.equal(cs.corrupt(name, x, 3, seed=1), cs.corrupt(name, x, 3, seed=2))


def test_rotation_by_zero_and_full_turns_is_identity():
    x = _shapes(4)
    for deg in (0, 0.0, 360, -720.0):
        assert torch.equal(cs.rotate(x, deg), x)
    assert torch.equal(cs.rotation(x, 0), x)


def test_rotation_by_90_degrees_matches_rot90():
    x = _shapes(4)
    # counter-clockwise on screen (row 0 at the top) is torch.rot90 with k=1 over (H, W)
    assert _change(cs.rotate(x, 90.0), torch.rot90(x, 1, dims=(2, 3))) < 0.5


def test_rotation_is_about_the_centre():
    x = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    x[0, 0, 12:16, 12:16] = 255  # a centred square is unchanged by a quarter turn
    assert torch.equal(cs.rotate(x, 90.0), x)


@pytest.mark.parametrize("severity", cs.SEVERITIES)
def test_blur_preserves_the_mean(severity):
    x = _shapes(6, seed=severity)
    y = cs.gaussian_blur(x, severity)
    assert abs(float(y.float().mean()) - float(x.float().mean())) < 0.5  # grey levels of 255


def test_blur_of_a_constant_image_is_the_image():
    x = torch.full((2, 3, 28, 28), 77, dtype=torch.uint8)
    assert torch.equal(cs.gaussian_blur(x, 5), x)


def test_blur_kernel_matches_its_formula():
    k = cs._kernel(1.0)
    t = torch.arange(-4.0, 5.0)
    expected = torch.exp(-t**2 / 2)
    torch.testing.assert_close(k, expected / expected.sum())


def test_bad_input_raises_clear_errors():
    x = _shapes(1)
    with pytest.raises(TypeError, match="uint8"):
        cs.gaussian_noise(x.float(), 1)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        cs.gaussian_blur(x[0], 1)
    with pytest.raises(ValueError, match="severity must lie in 0..5"):
        cs.rotation(x, 6)
    with pytest.raises(TypeError, match="severity must be an int"):
        cs.rotation(x, 2.0)
    with pytest.raises(ValueError, match="unknown corruption 'fog'"):
        cs.corrupt("fog", x, 1)
    with pytest.raises(TypeError, match="degrees"):
        cs.rotate(x, float("nan"))
    with pytest.raises(ValueError, match="too small"):
        cs.gaussian_blur(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), 5)


# ------------------------------------------------------------------ experiments.shift


def _linear_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))


def test_predictor_normalises_like_the_loader():
    model = _linear_model()
    x = _shapes(5)
    z = es.predictor(model, (0.3,), (0.4,), batch_size=2)(x)
    with torch.no_grad():
        expected = model((x.float() / 255 - 0.3) / 0.4)
    torch.testing.assert_close(z, expected)


def test_shift_logits_covers_the_grid_and_shares_the_clean_pass():
    calls = []

    def predict(images):
        calls.append(images)
        return torch.zeros(images.shape[0], 10)

    x = _shapes(3)
    z = es.shift_logits(predict, x, corruptions=["rotation", "gaussian_noise"], severities=[0, 2, 5])
    assert set(z) == {(c, s) for c in ("rotation", "gaussian_noise") for s in (0, 2, 5)}
    assert len(calls) == 1 + 2 * 2
    assert torch.equal(calls[0], x)


def test_shift_table_rows_and_temperature():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (400,), generator=g)
    z = 3 * torch.randn(400, 10, generator=g)
    z[torch.arange(400), y] += 2
    rows = es.shift_table({("rotation", 0): z, ("rotation", 1): z / 2}, y, temperature=2.0, loss="ce", seed=1)
    assert len(rows) == 4 and {r["ts"] for r in rows} == {False, True}
    r0, r0_ts = rows[0], rows[1]
    assert r0["loss"] == "ce" and r0["seed"] == 1 and r0["severity"] == 0
    assert math.isclose(r0["ece"], metrics.ece(z.double().softmax(1), y), rel_tol=1e-9)
    assert math.isclose(r0_ts["nll"], metrics.nll((z / 2).double().softmax(1), y), rel_tol=1e-6)
    assert r0["accuracy"] == r0_ts["accuracy"]  # a temperature never changes the arg-max
    assert r0_ts["confidence"] < r0["confidence"]  # T = 2 > 1 softens
    assert math.isclose(rows[2]["ece"], r0_ts["ece"])  # z/2 without TS == z with T = 2


def test_ensemble_of_one_is_the_member_and_of_two_the_mean_softmax():
    g = torch.Generator().manual_seed(1)
    a, b = {("x", 0): torch.randn(5, 3, generator=g)}, {("x", 0): torch.randn(5, 3, generator=g)}
    torch.testing.assert_close(es.ensemble_logits([a])[("x", 0)].softmax(1), a[("x", 0)].softmax(1))
    mean = (a[("x", 0)].softmax(1) + b[("x", 0)].softmax(1)) / 2
    torch.testing.assert_close(es.ensemble_logits([a, b])[("x", 0)].exp(), mean)
    with pytest.raises(ValueError, match="same"):
        es.ensemble_logits([a, {("y", 0): a[("x", 0)]}])


def test_evaluate_shift_on_a_model_and_bad_grids():
    model, x = _linear_model(), _shapes(4)
    y = torch.tensor([0, 1, 2, 3])
    rows = es.evaluate_shift(model, x, y, mean=(0.3,), std=(0.4,), severities=[0, 1], loss="lin")
    assert len(rows) == 2 * len(cs.CORRUPTIONS)
    with pytest.raises(ValueError, match="mean and std"):
        es.evaluate_shift(model, x, y)
    with pytest.raises(ValueError, match="unknown corruption"):
        es.shift_logits(lambda im: torch.zeros(len(im), 10), x, corruptions=["fog"])
    with pytest.raises(ValueError, match="severities"):
        es.shift_logits(lambda im: torch.zeros(len(im), 10), x, severities=[7])


def test_metric_under_shift_and_examples_draw():
    from calib import plots

    rows = [{"loss": loss, "seed": s, "corruption": c, "severity": sev, "ece": 0.01 * sev + 0.001 * s}
            for loss in ("CE", "BSCE-GRA", "FL_γ-SECE") for s in range(2)
            for c in ("rotation", "gaussian_blur") for sev in range(3)]
    fig = plots.metric_under_shift(rows, "ece")
    assert len(fig.axes) == 2 and fig.get_figwidth() <= 7
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].lines}
    assert len(set(colours.values())) == 3  # BSCE-GRA and FL_γ-SECE share a palette colour
    fig = plots.corruption_examples(_shapes(1)[0])
    assert len(fig.axes) == len(cs.CORRUPTIONS) * 6
    with pytest.raises(ValueError, match="no column"):
        plots.metric_under_shift([{"loss": "CE"}], "ece")


def test_corrupt_grid_is_what_shift_logits_corrupts():
    x = _shapes(4)
    grid = es.corrupt_grid(x, corruptions=["gaussian_noise", "rotation"], severities=[0, 3], seed=2)
    assert grid[("rotation", 0)] is x and grid[("gaussian_noise", 0)] is x
    calls = []

    def predict(images):
        calls.append(images)
        return images.float().flatten(1)[:, :10]

    from_grid = es.shift_logits(predict, grid)
    assert len(calls) == 3  # the clean images once, then two corrupted sets
    direct = es.shift_logits(predict, x, corruptions=["gaussian_noise", "rotation"], severities=[0, 3], seed=2)
    assert set(from_grid) == set(direct)
    for cell in direct:
        torch.testing.assert_close(from_grid[cell], direct[cell])


@pytest.mark.parametrize("temperature", [None, 0.7, 2.0])
def test_cell_mean_of_scores_equals_the_shift_table(temperature):
    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 10, (500,), generator=g)
    logits = {}
    for c, s in [("rotation", 0), ("rotation", 2), ("gaussian_blur", 5)]:
        z = (1 + s) * torch.randn(500, 10, generator=g)
        z[torch.arange(500), y] += 3 - s / 2
        logits[c, s] = z
    cells = list(logits)
    rows = [r for r in es.shift_table(logits, y, temperature=temperature) if r["ts"] == (temperature is not None)]
    s = es.scores(logits, y, cells, temperature=temperature)
    assert s.shape == (500, 4 * len(cells)) and s.dtype == np.float64
    for name in ("ece", "nll", "accuracy", "confidence"):
        expected = sum(r[name] for r in rows) / len(rows)
        assert math.isclose(es.cell_mean(name)(s, y), expected, rel_tol=1e-9, abs_tol=1e-12), name
        # change: the later cells' mean minus the first cell's, from the same rows
        change = sum(r[name] for r in rows[1:]) / (len(rows) - 1) - rows[0][name]
        assert math.isclose(es.cell_mean(name, change=True)(s, y), change, rel_tol=1e-9, abs_tol=1e-12), name
    gap = sum(r["confidence"] - r["accuracy"] for r in rows) / len(rows)
    assert math.isclose(es.cell_mean("gap")(s, y), gap, rel_tol=1e-9, abs_tol=1e-12)
    # one cell alone, and a resample of its rows, match calib.metrics on the same rows
    one = es.scores(logits, y, [cells[1]], temperature=temperature)
    idx = torch.randint(0, 500, (500,), generator=g).numpy()
    p = (logits[cells[1]].double() / (temperature or 1.0)).softmax(1)[idx]
    assert math.isclose(es.cell_mean("ece")(one[idx], None), metrics.ece(p, y[idx]), rel_tol=1e-9)
    assert math.isclose(es.cell_mean("nll")(one[idx], None), metrics.nll(p, y[idx]), rel_tol=1e-9)


def test_scores_and_cell_mean_refuse_bad_input():
    y = torch.tensor([0, 1])
    logits = {("rotation", 0): torch.zeros(2, 3)}
    with pytest.raises(ValueError, match="not among"):
        es.scores(logits, y, [("rotation", 1)])
    with pytest.raises(TypeError, match="list of"):
        es.scores(logits, y, ("rotation", 0))
    with pytest.raises(ValueError, match="metric"):
        es.cell_mean("brier")
    with pytest.raises(ValueError, match="shape"):
        es.cell_mean("ece")(np.zeros((2, 3)), y)
    with pytest.raises(ValueError, match="two or more cells"):
        es.cell_mean("ece", change=True)(np.zeros((2, 4)), y)
