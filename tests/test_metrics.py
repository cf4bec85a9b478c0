"""calib.metrics: parity numbers (CONTRIBUTING.md, "Conventions"), torchmetrics parity, properties, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import calib._checks
import calib.metrics.binned
from calib import metrics as M
from calib.metrics._inputs import MAX_BIN_CELLS, checked

PROPS = settings(max_examples=40, deadline=None)


# ----------------------------------------------------------------------------- helpers


def probs_from_confidence(conf, correct, k: int = 4, *, pred=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows whose max is ``conf`` (at class ``pred``, default 0), the rest spread evenly;
    labels equal to ``pred`` where ``correct`` and to another class elsewhere."""
    conf = torch.as_tensor(conf, dtype=torch.float64)
    n = conf.numel()
    pred = torch.zeros(n, dtype=torch.long) if pred is None else torch.as_tensor(pred)
    p = ((1 - conf) / (k - 1))[:, None].repeat(1, k)
    p[torch.arange(n), pred] = conf
    wrong = (pred + 1 + torch.arange(n) % (k - 1)) % k
    y = torch.where(torch.as_tensor(correct).bool(), pred, wrong)
    return p, y


def random_probs(n: int, k: int, seed: int, sharp: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(sharp * torch.randn(n, k, generator=g), dim=1)
    y = torch.randint(0, k, (n,), generator=g)
    return p, y


def mean_abs_gap(p: torch.Tensor, y: torch.Tensor) -> float:
    conf = p.max(1).values.double()
    hit = (p.argmax(1) == y).double()
    return float((hit - conf).abs().mean())


@st.composite
def prob_data(draw, min_n: int = 1, max_n: int = 60):
    n = draw(st.integers(min_n, max_n))
    k = draw(st.integers(2, 6))
    seed = draw(st.integers(0, 10_000))
    sharp = draw(st.floats(0.1, 8.0))
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(sharp * torch.randn(n, k, generator=g, dtype=torch.float64), dim=1)
    y = torch.randint(0, k, (n,), generator=g)
    return p, y


# ----------------------------------------------------------------------------- parity (CONTRIBUTING.md, "Conventions")

CONF = [0.25, 0.3, 0.5, 0.6, 1.0, 0.9]
CORRECT = [0, 1, 1, 0, 1, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_parity_six_samples_both_conventions(dtype):
    p, y = probs_from_confidence(CONF, CORRECT, k=4)
    p = p.to(dtype)
    assert M.ece(p, y, 4) == pytest.approx(0.491667, abs=1e-6)
    assert M.mce(p, y, 4) == pytest.approx(0.6, abs=1e-6)
    assert M.ece(p, y, 4, closed="left") == pytest.approx(0.241667, abs=1e-6)
    assert M.mce(p, y, 4, closed="left") == pytest.approx(0.45, abs=1e-6)


def test_parity_bin_stats_six_samples():
    p, y = probs_from_confidence(CONF, CORRECT, k=4)
    right = M.bin_stats(p, y, 4)
    np.testing.assert_array_equal(right.counts, [1, 2, 1, 2])
    np.testing.assert_allclose(right.accuracy, [0, 1, 0, 0.5])
    np.testing.assert_allclose(right.confidence, [0.25, 0.4, 0.6, 0.95])
    assert right.ece == pytest.approx(0.491667, abs=1e-6)
    left = M.bin_stats(p, y, 4, closed="left")
    np.testing.assert_array_equal(left.counts, [0, 2, 2, 2])  # 0.25 moves up, 1.0 stays last
    assert math.isnan(left.accuracy[0]) and math.isnan(left.confidence[0])
    assert left.ece == pytest.approx(0.241667, abs=1e-6) and left.mce == pytest.approx(0.45, abs=1e-6)


def test_zero_confidence_kept_in_first_bin():
    # A binary "probability" of exactly 0 for a class: classwise bins must keep it.
    p = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    # class 1 has p = 0 on both rows and occurs once: bin 0 gap |1 - 0| / 2
    # class 0 has p = 1 on both rows and occurs once: last bin gap |1 - 2| / 2
    assert M.classwise_ece(p, y, 15) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- binning


def _edge_values(dtype):
    e = torch.linspace(0, 1, 16, dtype=dtype)
    up = torch.nextafter(e, torch.tensor(2.0, dtype=dtype))
    down = torch.nextafter(e, torch.tensor(-1.0, dtype=dtype)).clamp(0, 1)
    specials = torch.tensor([0.2, 0.1, 0.3, 1 / 3, 2 / 3, 0.5, 0.75, 1.0, 0.0], dtype=dtype)
    return torch.cat([torch.rand(5000, dtype=dtype), e, up.clamp(max=1), down, specials])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 4, 7, 10, 15, 20, 100, 1000])
@pytest.mark.parametrize("closed", ["right", "left"])
def test_bin_index_is_the_count_of_edges_below_on_and_beside_every_edge(dtype, n_bins, closed):
    """(lo, hi]: the bin is the number of inner edges strictly below x; [lo, hi): at or below x."""
    x = _edge_values(dtype)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    down = torch.nextafter(edges, torch.tensor(-1.0, dtype=dtype)).clamp(min=0)
    xs = torch.cat([x, edges, torch.nextafter(edges, torch.tensor(2.0, dtype=dtype)).clamp(max=1), down]).numpy()
    inner = edges[1:-1].numpy()
    below = (xs[:, None] > inner[None, :]) if closed == "right" else (xs[:, None] >= inner[None, :])
    assert np.array_equal(M.bin_index(torch.from_numpy(xs), n_bins, closed).numpy(), below.sum(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_bins", [3, 15, 1000, 65_536, 100_000])
@pytest.mark.parametrize("closed", ["right", "left"])
def test_bin_index_equals_bucketize(dtype, n_bins, closed):
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    xs = torch.cat([torch.rand(20_000, dtype=dtype), edges, torch.nextafter(edges, torch.tensor(2.0, dtype=dtype)),
                    torch.nextafter(edges, torch.tensor(-1.0, dtype=dtype))]).clamp(0, 1)
    want = torch.bucketize(xs, edges[1:-1], right=(closed == "left"))
    assert torch.equal(M.bin_index(xs, n_bins, closed).long(), want)


# ----------------------------------------------------------------------------- torchmetrics parity


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 3, 10])
def test_torchmetrics_parity_random(seed, k):
    tmf = pytest.importorskip("torchmetrics.functional.classification")
    p, y = random_probs(3000, k, seed, sharp=2.0)
    assert bool((p.max(1).values < 1).all())  # see the next test for confidences of exactly 1
    for n_bins in (5, 15):
        want_l1 = float(tmf.multiclass_calibration_error(p, y, k, n_bins=n_bins, norm="l1"))
        want_max = float(tmf.multiclass_calibration_error(p, y, k, n_bins=n_bins, norm="max"))
        assert M.ece(p, y, n_bins, closed="left") == pytest.approx(want_l1, abs=2e-6)
        assert M.mce(p, y, n_bins, closed="left") == pytest.approx(want_max, abs=2e-6)


def test_torchmetrics_gives_confidence_one_a_bin_of_its_own():
    """torchmetrics bins [lo, hi) plus an extra bin [1, 1]; calib keeps 1.0 in the last bin.

    They agree unless some confidences are exactly 1 and the two parts of the last bin err
    in opposite directions, as here: 0.97 and 0.98 (both right) and four 1.0 (two right).
    """
    tmf = pytest.importorskip("torchmetrics.functional.classification")
    p, y = probs_from_confidence([0.97, 0.98, 1.0, 1.0, 1.0, 1.0], [1, 1, 1, 1, 0, 0], k=2)
    p = p.float()
    merged = abs(4 - 5.95) / 6  # one bin [14/15, 1]
    assert M.ece(p, y, 15, closed="left") == pytest.approx(merged, abs=1e-6)
    assert M.mce(p, y, 15, closed="left") == pytest.approx(merged, abs=1e-6)
    tm_l1 = float(tmf.multiclass_calibration_error(p, y, 2, n_bins=15, norm="l1"))
    tm_max = float(tmf.multiclass_calibration_error(p, y, 2, n_bins=15, norm="max"))
    assert tm_l1 == pytest.approx((abs(2 - 1.95) + abs(2 - 4)) / 6, abs=1e-6)  # [14/15, 1) and [1, 1]
    assert tm_max == pytest.approx(0.5, abs=1e-6)


RECORDS = [
    "densenet-bc-100-cifar-100",
    "lenet-5-cifar-10",
    "lenet-5-cifar-100",
    "wideresnet-16-4-cifar-10",
    "wideresnet-16-4-cifar-100",
]


def load_record(folder, name):
    d = np.load(folder / f"{name}.npz")
    return torch.from_numpy(d["predictions"]), torch.from_numpy(d["ground_truth"])


@pytest.mark.parametrize("name", RECORDS)
def test_torchmetrics_parity_netcal_records(netcal_records, name):
    tmf = pytest.importorskip("torchmetrics.functional.classification")
    p, y = load_record(netcal_records, name)
    k = p.shape[1]
    want_l1 = float(tmf.multiclass_calibration_error(p, y, k, n_bins=15, norm="l1"))
    want_max = float(tmf.multiclass_calibration_error(p, y, k, n_bins=15, norm="max"))
    # torchmetrics accumulates in float32 (we use float64): agreement to ~1e-6 relative
    assert M.ece(p, y, closed="left") == pytest.approx(want_l1, abs=1e-5)
    assert M.mce(p, y, closed="left") == pytest.approx(want_max, abs=1e-5)
    assert M.accuracy(p, y) == pytest.approx(float((p.argmax(1) == y).double().mean()))


# ----------------------------------------------------------------------------- references


def reference_adaece(p, y, n_bins):
    conf = p.max(1).values.double().numpy()
    hit = (p.argmax(1) == y).double().numpy()
    edges = np.interp(np.linspace(0, len(conf), n_bins + 1), np.arange(len(conf)), np.sort(conf))
    total = 0.0
    for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        mask = (conf > lo) & (conf <= hi) if j else conf <= hi
        if mask.any():
            total += abs(hit[mask].mean() - conf[mask].mean()) * mask.mean()
    return total


def test_adaece_matches_reference_and_equal_mass():
    p, y = random_probs(3000, 10, 7)
    p = p.double()
    for n_bins in (1, 5, 15, 30):
        assert M.adaece(p, y, n_bins) == pytest.approx(reference_adaece(p, y, n_bins), abs=1e-12)
    conf = p.max(1).values
    edges = calib.metrics.binned._adaptive_edges(conf, 15)
    counts = torch.bincount(torch.bucketize(conf, edges[1:-1]), minlength=15)
    assert int(counts.max() - counts.min()) <= 2  # 3000 / 15 = 200 each, up to the end bins' +-1


def test_classwise_matches_per_class_loop():
    p, y = random_probs(2000, 7, 3)
    want = np.mean([M.bin_stats_from_confidence(p[:, k], y == k, 15).ece for k in range(7)])
    assert M.classwise_ece(p, y, 15) == pytest.approx(want, abs=1e-12)
    want_left = np.mean([M.bin_stats_from_confidence(p[:, k], y == k, 15, closed="left").ece for k in range(7)])
    assert M.classwise_ece(p, y, 15, closed="left") == pytest.approx(want_left, abs=1e-12)


@pytest.mark.parametrize("closed", ["right", "left"])
def test_classwise_with_many_classes_matches_per_class_loop(closed):
    """K = 80 > 4 x 15 bins: on the CPU only the entries above the first bin are binned (issue 43)."""
    p, y = random_probs(1500, 80, 8)
    assert 80 > calib.metrics.binned._SPARSE_CLASSES * 15
    want = np.mean([M.bin_stats_from_confidence(p[:, k], y == k, 15, closed=closed).ece for k in range(80)])
    assert M.classwise_ece(p, y, 15, closed=closed) == pytest.approx(want, abs=1e-12)
    stream = M.ClasswiseECE(closed=closed)
    for part in torch.arange(1500).split(400):
        stream.update(p[part], y[part])
    assert stream.compute() == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_bins", [1, 2, 15])
def test_classwise_sparse_and_dense_totals_agree(dtype, n_bins, monkeypatch):
    """The two ways of summing each (class, bin) cell give the same hits and, up to float64
    rounding, the same mass: on values exactly at every edge, at 0 and 1, outside [0, 1]
    (``validate=False`` lets them through) and across blocks."""
    binned = calib.metrics.binned
    g = torch.Generator().manual_seed(n_bins)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    p = torch.rand(300, 70, generator=g, dtype=dtype) ** 4
    p.view(-1)[torch.randperm(p.numel(), generator=g)[: 4 * (n_bins + 1)]] = edges.repeat(4)
    p[0, :3] = torch.tensor([-0.5, 1.0, 1.5], dtype=dtype)
    y = torch.randint(0, 70, (300,), generator=g)
    monkeypatch.setattr(binned, "_CPU_BLOCK", 7 * 70 + 3)  # blocks of 7 rows
    for closed in ("right", "left"):
        inner = edges[1:-1]
        dense = torch.zeros(70 * n_bins, dtype=torch.float64)
        sparse = torch.zeros(70 * n_bins, dtype=torch.float64)
        binned._mass_dense(p, inner, closed == "left", dense)
        binned._mass_sparse(p, inner, closed == "left", sparse)
        torch.testing.assert_close(sparse, dense, rtol=0, atol=1e-12)
        cells = torch.bucketize(p, inner, right=closed == "left") + torch.arange(70) * n_bins
        counts = torch.bincount(cells.view(-1), minlength=70 * n_bins)
        assert torch.equal(sparse.view(70, n_bins)[:, 1:] != 0, counts.view(70, n_bins)[:, 1:] > 0)
        hits = binned._classwise_totals(p, y, n_bins, closed)[0]
        label_cells = cells.gather(1, y[:, None]).squeeze(1)
        assert torch.equal(hits, torch.bincount(label_cells, minlength=70 * n_bins).double())


def test_classwise_chunking_does_not_change_result(monkeypatch):
    p, y = random_probs(1000, 5, 11)
    p64 = p.double()
    whole, whole32 = M.classwise_ece(p64, y), M.classwise_ece(p, y)
    monkeypatch.setattr(calib.metrics.binned, "_BLOCK", 64)  # 12 rows per block
    assert M.classwise_ece(p64, y) == pytest.approx(whole, abs=1e-12)
    assert M.classwise_ece(p, y) == pytest.approx(whole32, abs=1e-12)  # float64 sums either way


def test_classwise_float32_over_many_blocks_matches_float64():
    n = 3 * 4096 + 77
    p64, y = random_probs(n, 12, 5)
    p64 = p64.double()
    p64 = p64 / p64.sum(1, keepdim=True)
    p32 = p64.float()
    for closed in ("right", "left"):
        assert M.classwise_ece(p32, y, closed=closed) == pytest.approx(
            M.classwise_ece(p32.double(), y, closed=closed), rel=1e-7)


def test_basic_scores_known_values():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.2, 0.8]])
    y = torch.tensor([0, 0, 0])
    assert M.accuracy(p, y) == pytest.approx(2 / 3)  # the tie goes to class 0, as argmax does
    assert M.brier_score(p, y) == pytest.approx((0 + 0.5 + (0.64 + 0.64)) / 3)
    assert M.nll(p, y) == pytest.approx((0 - math.log(0.5) - math.log(0.2)) / 3, rel=1e-6)
    # probability 0 on the label is clamped at NLL_EPS instead of giving inf
    assert M.nll(torch.tensor([[0.0, 1.0]]), torch.tensor([0])) == pytest.approx(-math.log(M.NLL_EPS))


def test_one_bin_ece_is_accuracy_minus_confidence():
    p, y = random_probs(500, 4, 5)
    gap = M.accuracy(p, y) - float(p.max(1).values.double().mean())
    assert M.ece(p, y, 1) == pytest.approx(abs(gap), abs=1e-9)
    assert M.mce(p, y, 1) == pytest.approx(abs(gap), abs=1e-9)


def test_float32_ece_over_many_chunks_matches_float64():
    """ECE sums float32 confidences in float64; no digits may be lost."""
    n = 150_000
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(n, 10, generator=g, dtype=torch.float64) * 3
    p64 = torch.softmax(logits, 1)
    y = torch.randint(0, 10, (n,), generator=g)
    p32 = p64.float()
    for closed in ("right", "left"):
        assert M.ece(p32, y, closed=closed) == pytest.approx(M.ece(p32.double(), y, closed=closed), abs=1e-7)


def test_summary_and_sweep_agree_with_functions():
    p, y = random_probs(800, 5, 2)
    s = M.summary(p, y)
    assert set(s) == {"accuracy", "nll", "brier", "ece", "adaece", "classwise_ece", "mce"}
    assert all(isinstance(v, float) for v in s.values())
    assert s["ece"] == M.ece(p, y) and s["mce"] == M.mce(p, y) and s["brier"] == M.brier_score(p, y)
    assert s["adaece"] == M.adaece(p, y) and s["classwise_ece"] == M.classwise_ece(p, y)
    sweep = M.ece_sweep(p, y)
    assert list(sweep) == list(M.FIG5_BINS)
    assert all(sweep[b] == pytest.approx(M.ece(p, y, b), abs=1e-15) for b in sweep)
    for metric, fn in (("mce", M.mce), ("adaece", M.adaece), ("classwise_ece", M.classwise_ece)):
        got = M.ece_sweep(p, y, (3, 30), metric)
        assert got == {3: pytest.approx(fn(p, y, 3)), 30: pytest.approx(fn(p, y, 30))}


def test_blocked_bootstrap_equals_one_block(monkeypatch):
    """Bootstrap replicates evaluated 7 at a time agree with all at once."""
    p, y = random_probs(1000, 6, 4)
    whole = (M.bootstrap_ci(M.ece, p, y, n_boot=50), M.bootstrap_ci(M.mce, p, y, n_boot=50, closed="left"))
    monkeypatch.setattr("calib.metrics.resample._BOOT_BLOCK", 7 * 1000)
    blocked = (M.bootstrap_ci(M.ece, p, y, n_boot=50), M.bootstrap_ci(M.mce, p, y, n_boot=50, closed="left"))
    assert blocked[0] == pytest.approx(whole[0], abs=1e-14) and blocked[1] == pytest.approx(whole[1], abs=1e-14)


def test_ties_follow_argmax_first_index():
    # quantised probabilities create many exact ties among maxima
    g = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 3, (4000, 4), generator=g).double()
    counts[counts.sum(1) == 0] = 1.0
    p = counts / counts.sum(1, keepdim=True)
    y = torch.randint(0, 4, (4000,), generator=g)
    c = checked(p, y)
    assert torch.equal(c.correct, p.argmax(1).eq(y))
    assert torch.equal(c.conf, p.max(1).values)
    first = (p == p.max(1, keepdim=True).values).float().argmax(1)  # the first maximal class, by hand
    assert torch.equal(c.correct, first.eq(y))
    assert int((p == p.max(1, keepdim=True).values).sum(1).gt(1).sum()) > 500  # many ties were tested


def test_ties_above_one_half_through_the_entry_slack():
    """Two maxima just above 1/2 in a valid row: the other entries at -1e-6 make room."""
    k = 1000
    row = torch.full((k,), -9e-7, dtype=torch.float64)
    row[:2] = 0.5006
    p = torch.stack([row, row])  # sums 1.0003, within float64's tolerance
    y = torch.tensor([1, 0])
    c = checked(p, y)
    assert c.correct.tolist() == [False, True]  # argmax takes class 0
    assert M.accuracy(p, y) == 0.5

# ----------------------------------------------------------------------------- properties


@PROPS
@given(prob_data(), st.integers(1, 40), st.sampled_from(["right", "left"]))
def test_binned_metrics_in_unit_interval_and_ordered(data, n_bins, closed):
    p, y = data
    e, m = M.ece(p, y, n_bins, closed=closed), M.mce(p, y, n_bins, closed=closed)
    assert 0 <= e <= m + 1e-12 <= 1 + 1e-12
    assert e <= mean_abs_gap(p, y) + 1e-12  # triangle inequality: finest binning is the largest
    a = M.adaece(p, y, n_bins)
    assert 0 <= a <= mean_abs_gap(p, y) + 1e-12
    # classwise: per bin |sum(y - p)| <= sum |y - p|, and sum_k |y_k - p_k| = 2 (1 - p_y)
    p_true = p.gather(1, y[:, None]).squeeze(1)
    bound = 2 * float((1 - p_true).mean()) / p.shape[1]
    assert 0 <= M.classwise_ece(p, y, n_bins, closed=closed) <= bound + 1e-12


@PROPS
@given(prob_data(min_n=2), st.integers(0, 1000))
def test_permutation_invariance(data, seed):
    p, y = data
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.brier_score, M.nll, M.accuracy):
        assert fn(p[perm], y[perm]) == pytest.approx(fn(p, y), abs=1e-12)
    assert M.sece(p[perm], y[perm], 0.05) == pytest.approx(M.sece(p, y, 0.05), abs=1e-12)


@PROPS
@given(
    st.lists(st.tuples(st.integers(3, 10), st.integers(1, 4)), min_size=1, max_size=6),
    st.integers(3, 6),
    st.integers(0, 1000),
    st.integers(1, 50),
)
def test_perfectly_calibrated_construction_has_zero_ece(groups, k, seed, n_bins):
    """Confidence a/10 on 10r samples of which a*r are right: every bin's gap sums to 0."""
    conf, correct = [], []
    for a, reps in groups:
        a = max(a, 10 // k + 1)  # keep the top class strictly above 1/k
        conf += [a / 10] * 10 * reps
        correct += ([1] * a + [0] * (10 - a)) * reps
    g = torch.Generator().manual_seed(seed)
    pred = torch.randint(0, k, (len(conf),), generator=g)
    p, y = probs_from_confidence(conf, correct, k, pred=pred)
    for closed in ("right", "left"):
        assert M.ece(p, y, n_bins, closed=closed) == pytest.approx(0, abs=1e-12)
        assert M.mce(p, y, n_bins, closed=closed) == pytest.approx(0, abs=1e-12)
    assert M.adaece(p, y, n_bins) == pytest.approx(0, abs=1e-12)


@PROPS
@given(prob_data())
def test_torch_numpy_and_dtype_agree(data):
    p, y = data
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.nll, M.brier_score, M.accuracy):
        assert fn(p.numpy(), y.numpy()) == fn(p, y)
        assert fn(p.float(), y) == pytest.approx(fn(p, y), abs=1e-5)


def test_list_input_and_int32_labels():
    p, y = probs_from_confidence(CONF, CORRECT, k=4)
    assert M.ece(p.tolist(), y.int()) == pytest.approx(0.491667, abs=1e-6)


# ----------------------------------------------------------------------------- bootstrap


@settings(max_examples=15, deadline=None)
@given(prob_data(min_n=20, max_n=80), st.integers(0, 100))
def test_bootstrap_contains_point_for_means(data, seed):
    p, y = data
    for fn in (M.accuracy, M.brier_score, M.nll):
        low, point, high = M.bootstrap_ci(fn, p, y, n_boot=200, seed=seed)
        assert low <= point <= high
        assert point == fn(p, y)


def test_bootstrap_fast_path_equals_generic_path():
    p, y = random_probs(300, 4, 1)
    for fn, kw in ((M.ece, {}), (M.ece, {"n_bins": 7, "closed": "left"}), (M.mce, {"n_bins": 10}),
                   (M.accuracy, {}), (M.nll, {}), (M.brier_score, {})):
        fast = M.bootstrap_ci(fn, p, y, n_boot=120, seed=3, **kw)
        slow = M.bootstrap_ci(lambda a, b, **k: fn(a, b, **k), p, y, n_boot=120, seed=3, **kw)
        assert fast == pytest.approx(slow, abs=1e-12)
        assert fast[0] <= fast[2]


def test_bootstrap_interval_behaviour():
    p, y = random_probs(400, 3, 4)
    a = M.bootstrap_ci(M.ece, p, y, n_boot=300, seed=0)
    assert a == M.bootstrap_ci(M.ece, p, y, n_boot=300, seed=0)  # seeded
    assert a != M.bootstrap_ci(M.ece, p, y, n_boot=300, seed=1)
    narrow = M.bootstrap_ci(M.accuracy, p, y, n_boot=300, alpha=0.5)
    wide = M.bootstrap_ci(M.accuracy, p, y, n_boot=300, alpha=0.01)
    assert wide[0] <= narrow[0] <= narrow[2] <= wide[2]
    # works with any callable, e.g. AdaECE through the generic path
    low, point, high = M.bootstrap_ci(M.adaece, p, y, n_boot=20, n_bins=5)
    assert 0 <= low <= high <= 1 and point == M.adaece(p, y, 5)


# ----------------------------------------------------------------------------- smooth ECE


def test_sece_loss_gradcheck_float64():  # through confidences and soft accuracies alike
    g = torch.Generator().manual_seed(0)
    logits = (2 * torch.randn(12, 4, generator=g, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, 4, (12,), generator=g)
    assert torch.autograd.gradcheck(lambda z: M.sece_loss(torch.softmax(z, 1), y, 0.1), (logits,))
    probs = torch.softmax(logits.detach(), 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda q: M.sece_loss(q, y, 0.05), (probs,))


def test_sece_loss_matches_sece_and_has_gradient():
    p, y = random_probs(300, 5, 0)
    q = p.double().requires_grad_()
    loss = M.sece_loss(q, y, 0.02)
    assert loss.ndim == 0 and loss.requires_grad
    loss.backward()
    assert q.grad is not None and bool(q.grad.abs().sum() > 0)
    assert float(loss.detach()) == pytest.approx(M.sece(p.double(), y, 0.02), abs=1e-12)


def test_sece_limits_of_the_bandwidth():
    p, y = random_probs(400, 3, 9, sharp=1.0)
    conf = p.max(1).values.double()
    hit = (p.argmax(1) == y).double()
    soft = M.soft_accuracy(p.double(), y)
    assert conf.unique().numel() == conf.numel()  # the h -> 0 limit needs distinct confidences
    # h -> 0: each sample is its own bin, SECE = mean |a_i - z_i| (hard: |pi_i - z_i|)
    assert M.sece_hard(p, y, 1e-7) == pytest.approx(float((hit - conf).abs().mean()), abs=1e-9)
    assert M.sece(p, y, 1e-7) == pytest.approx(float((soft - conf).abs().mean()), abs=1e-9)
    # h -> inf: SACC_i is the overall (soft) accuracy
    assert M.sece_hard(p, y, 1e4) == pytest.approx(float((hit.mean() - conf).abs().mean()), abs=1e-6)
    assert M.sece(p, y, 1e4) == pytest.approx(float((soft.mean() - conf).abs().mean()), abs=1e-6)


def seed_sece(p: torch.Tensor, y: torch.Tensor, h: float, tau: float) -> torch.Tensor:
    """SECE written from Wang & Golebiowski (2024) section 4.2, one sample at a time.

    a_j = relu(1 - sum_{k != y_j} sigmoid((p_jk - p_jy) / tau)) (all-pairs accuracy, as in
    meta-calibration's DECE); SACC(i) = sum_j a_j K(z_i, z_j) / sum_j K(z_i, z_j) with
    K = exp(-|z_i - z_j|^2 / (2 h^2)) (Eq. 6, 12); SECE = (1/M) sum_i |SACC(i) - conf(i)| (Eq. 7).
    """
    n, k = p.shape
    z = [max(p[i]) for i in range(n)]
    acc = []
    for j in range(n):
        ranked_above = sum(torch.sigmoid((p[j, c] - p[j, y[j]]) / tau) for c in range(k) if c != y[j])
        acc.append(torch.relu(1 - ranked_above))
    total = 0
    for i in range(n):
        weights = [torch.exp(-((z[i] - z[j]) ** 2) / (2 * h**2)) for j in range(n)]
        sacc = sum(a * w for a, w in zip(acc, weights)) / sum(weights)
        total = total + (sacc - z[i]).abs()
    return total / n


@pytest.mark.parametrize("h, tau", [(0.01, 0.01), (0.1, 0.01), (0.05, 0.2)])
def test_sece_loss_is_the_seed_formula(h, tau):
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(2 * torch.randn(30, 4, generator=g, dtype=torch.float64), 1)
    p[:5] = torch.tensor([0.4, 0.395, 0.105, 0.1], dtype=torch.float64)  # label near the top: soft accuracy
    y = torch.randint(0, 4, (30,), generator=g)
    want = seed_sece(p, y, h, tau)
    assert M.sece_loss(p, y, h, tau=tau).item() == pytest.approx(want.item(), rel=1e-12)
    assert M.sece(p, y, h, tau=tau) == pytest.approx(want.item(), rel=1e-12)
    assert M.sece_hard(p, y, h) != pytest.approx(want.item(), rel=1e-6)  # a different quantity


def test_sece_loss_gradient_flows_through_the_accuracy_term():
    """Two labels that swap places when p moves: only the accuracy term sees that."""
    p = torch.tensor([[0.50, 0.49, 0.01], [0.70, 0.20, 0.10], [0.45, 0.44, 0.11]], dtype=torch.float64)
    y = torch.tensor([1, 0, 0])
    q = p.clone().requires_grad_()
    M.sece_loss(q, y, 0.1).backward()
    full = q.grad.clone()
    q.grad = None
    z = q.max(1).values  # the same formula with the accuracy held fixed
    acc = M.soft_accuracy(q, y).detach()
    kern = torch.exp(-0.5 * ((z[:, None] - z[None]) / 0.1) ** 2)
    ((kern @ acc / kern.sum(1) - z).abs().mean()).backward()
    assert not torch.allclose(full, q.grad, atol=1e-6)
    a = M.soft_accuracy(q, y)
    (grad,) = torch.autograd.grad(a.sum(), q)
    assert grad[0].abs().sum() > 1 and grad[2].abs().sum() > 1  # near-ties: steep soft accuracy


def test_soft_accuracy_limits_and_range():
    p, y = random_probs(500, 5, 3)
    p = p.double()
    a = M.soft_accuracy(p, y, tau=1e-6)
    hard = (p.argmax(1) == y).double()
    assert torch.allclose(a, hard, atol=1e-6)  # tau -> 0: the hard correctness (no ties here)
    wide = M.soft_accuracy(p, y, tau=0.3)
    assert bool((wide >= 0).all()) and bool((wide <= 1).all())
    tie = M.soft_accuracy(torch.tensor([[0.5, 0.5]]), torch.tensor([0]), tau=0.01)
    assert tie.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="tau"):
        M.soft_accuracy(p, y, tau=0.0)


@pytest.mark.slow
def test_sece_close_to_binned_ece_on_large_sample():
    """Confidence z ~ U[0.3, 1], right with probability z^2: E|z^2 - z| = 0.186667."""
    g = torch.Generator().manual_seed(0)
    n = 8000
    z = 0.3 + 0.7 * torch.rand(n, generator=g, dtype=torch.float64)
    correct = torch.rand(n, generator=g, dtype=torch.float64) < z**2
    p, y = probs_from_confidence(z, correct, k=4)
    truth = (0.5 - 1 / 3 - (0.3**2 / 2 - 0.3**3 / 3)) / 0.7
    s, e = M.sece(p, y, 0.01), M.ece(p, y, 15)
    assert truth == pytest.approx(0.186667, abs=1e-6)
    assert s == pytest.approx(truth, abs=0.015) and e == pytest.approx(truth, abs=0.015)
    assert s == pytest.approx(e, abs=0.015)


# ----------------------------------------------------------------------------- bad input


GOOD_P, GOOD_Y = probs_from_confidence(CONF, CORRECT, k=4)


@pytest.mark.parametrize(
    "probs, labels, exc, words",
    [
        (GOOD_P.clone().index_fill_(0, torch.tensor([1]), float("nan")), GOOD_Y, ValueError, "NaN"),
        (GOOD_P.clone().index_fill_(0, torch.tensor([2]), float("inf")), GOOD_Y, ValueError, "NaN or inf"),
        (GOOD_P[0], GOOD_Y, ValueError, "labels has 6 entries"),  # 1-D: a binary classifier's p
        (torch.full((6,), 0.5), GOOD_Y, ValueError, "labels must lie in [0, 2)"),
        (GOOD_P[None], GOOD_Y, ValueError, "shape (N, K)"),
        (GOOD_P, GOOD_Y[:-1], ValueError, "labels has 5 entries"),
        (GOOD_P, GOOD_Y + 4, ValueError, "labels must lie in [0, 4)"),
        (GOOD_P, GOOD_Y - 1, ValueError, "labels must lie"),
        (GOOD_P, GOOD_Y.double(), TypeError, "labels must be integer"),
        (GOOD_P * 1.5, GOOD_Y, ValueError, "probs"),
        (GOOD_P * 0.9, GOOD_Y, ValueError, "rows must sum to 1"),
        (torch.log(GOOD_P + 0.01), GOOD_Y, ValueError, "softmax(logits)"),
        (torch.empty(0, 4), torch.empty(0, dtype=torch.long), ValueError, "empty"),
        (torch.ones(6, 1), GOOD_Y, ValueError, "K >= 2"),
        ("probs", GOOD_Y, TypeError, "probs must be"),
    ],
)
def test_bad_input_raises_naming_argument(probs, labels, exc, words):
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.accuracy, M.nll, M.brier_score, M.sece,
               M.sece_loss, M.sece_hard, M.soft_accuracy, M.smooth_ece, M.l2_ce, M.l2_ce_bias,
               M.bin_stats, M.summary, M.ece_sweep, M.brier_decomposition):
        with pytest.raises(exc) as info:
            fn(probs, labels)
        assert words in str(info.value), (fn.__name__, str(info.value))


def test_binary_probabilities_mean_the_two_columns_as_in_the_streaming_metrics():
    """Issue 43: ``ece`` refused the 1-D probabilities of class 1 that ``metrics.ECE`` takes.
    Every function reads them as the streaming metrics do: the columns ``[1 - p, p]``."""
    g = torch.Generator().manual_seed(3)
    p = torch.rand(500, generator=g, dtype=torch.float64)
    y = (torch.rand(500, generator=g, dtype=torch.float64) < p ** 2).long()
    cols = M.binary_probs(p)
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.accuracy, M.nll, M.brier_score, M.sece,
               M.sece_hard, M.smooth_ece, M.l2_ce, M.l2_ce_bias, M.summary, M.ece_sweep, M.brier_decomposition):
        assert fn(p, y) == fn(cols, y), fn.__name__
        assert fn(p.numpy(), y.numpy()) == fn(cols, y), fn.__name__
    assert M.bin_stats(p, y).ece == M.bin_stats(cols, y).ece
    assert torch.equal(M.sece_loss(p, y), M.sece_loss(cols, y))
    for cls, fn, opts in ((M.ECE, M.ece, {}), (M.ECE, M.ece, {"closed": "left"}), (M.MCE, M.mce, {}),
                          (M.AdaECE, M.adaece, {}), (M.ClasswiseECE, M.classwise_ece, {}), (M.NLL, M.nll, {}),
                          (M.BrierScore, M.brier_score, {}), (M.SmoothECE, M.smooth_ece, {})):
        metric = cls(**opts)
        for part in torch.arange(500).split(128):
            metric.update(p[part], y[part])
        assert metric.compute() == pytest.approx(fn(p, y, **opts), abs=1e-12), cls.__name__
    # the positive-class meaning (binary="positive") is the *_from_confidence functions'
    positive = M.ECE(binary="positive")
    positive.update(p, y)
    assert positive.compute() == pytest.approx(M.bin_stats_from_confidence(p, y == 1).ece, abs=1e-12)
    assert M.ece(p, y) != pytest.approx(M.bin_stats_from_confidence(p, y == 1).ece, abs=1e-6)
    p_grad = p.clone().requires_grad_()
    M.sece_loss(p_grad, y).backward()  # the training objective keeps the graph through the columns
    assert p_grad.grad is not None and bool(torch.isfinite(p_grad.grad).all())


@pytest.mark.parametrize("n_bins, exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_n_bins(n_bins, exc):
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.bin_stats, M.summary):
        with pytest.raises(exc, match="n_bins"):
            fn(GOOD_P, GOOD_Y, n_bins)


def test_bad_hyper_parameters():
    with pytest.raises(ValueError, match="closed"):
        M.ece(GOOD_P, GOOD_Y, closed="both")
    for h in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="bandwidth"):
            M.sece(GOOD_P, GOOD_Y, h)
    with pytest.raises(TypeError, match="bandwidth"):
        M.sece_loss(GOOD_P, GOOD_Y, "wide")
    with pytest.raises(ValueError, match="metric"):
        M.ece_sweep(GOOD_P, GOOD_Y, metric="brier")
    with pytest.raises(ValueError, match="n_bins_list"):
        M.ece_sweep(GOOD_P, GOOD_Y, [])
    with pytest.raises(ValueError, match="n_bins_list entry"):
        M.ece_sweep(GOOD_P, GOOD_Y, [10, 0])
    with pytest.raises(ValueError, match="alpha"):
        M.bootstrap_ci(M.ece, GOOD_P, GOOD_Y, alpha=1.5)
    with pytest.raises(ValueError, match="n_boot"):
        M.bootstrap_ci(M.ece, GOOD_P, GOOD_Y, n_boot=0)
    with pytest.raises(TypeError, match="metric_fn"):
        M.bootstrap_ci("ece", GOOD_P, GOOD_Y)
    with pytest.raises(ValueError, match="confidence"):
        M.bin_stats_from_confidence(torch.tensor([0.5, 1.5]), torch.tensor([1, 0]))
    with pytest.raises(TypeError, match="correct"):
        M.bin_stats_from_confidence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="correct has shape"):
        M.bin_stats_from_confidence(torch.tensor([0.5, 0.5]), torch.tensor([1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():  # pragma: no cover - runs where a GPU is present
    p, y = random_probs(5000, 10, 0)
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.nll, M.brier_score, M.sece, M.sece_hard,
               M.smooth_ece, M.l2_ce, M.accuracy):
        assert fn(p.cuda(), y.cuda()) == pytest.approx(fn(p, y), abs=1e-6), fn.__name__
    assert M.summary(p.cuda(), y.cuda()) == pytest.approx(M.summary(p, y), abs=1e-6)
    assert M.ece_sweep(p.cuda(), y.cuda()) == pytest.approx(M.ece_sweep(p, y), abs=1e-6)
    low, point, high = M.bootstrap_ci(M.ece, p.cuda(), y.cuda())
    assert low <= point <= high and point == pytest.approx(M.ece(p, y), abs=1e-6)
    bad = p.clone()
    bad[3, 2] = float("nan")
    for fn in (M.ece, M.accuracy, M.summary, M.ece_sweep):  # the deferred verdict still raises
        with pytest.raises(ValueError, match="NaN"):
            fn(bad.cuda(), y.cuda())
    with pytest.raises(ValueError, match="labels must lie"):
        M.ece(p.cuda(), (y + 10).cuda())
    with pytest.raises(ValueError, match="NaN"):
        M.bootstrap_ci(M.ece, bad.cuda(), y.cuda())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inputs_are_never_modified(dtype):
    p, y = random_probs(200, 5, 8)
    p = p.to(dtype)
    p0, y0 = p.clone(), y.clone()
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.nll, M.brier_score, M.accuracy, M.sece,
               M.sece_loss, M.sece_hard, M.soft_accuracy, M.smooth_ece, M.l2_ce, M.bin_stats, M.summary,
               M.ece_sweep):
        fn(p, y)
        assert torch.equal(p, p0) and torch.equal(y, y0), fn.__name__
    M.bootstrap_ci(M.ece, p, y, n_boot=5)
    assert torch.equal(p, p0)


def test_half_precision_inputs_are_promoted():
    p, y = random_probs(500, 4, 12)
    assert M.ece(p.half(), y) == pytest.approx(M.ece(p.half().float(), y), abs=1e-12)
    c = p.max(1).values.half()
    ok = p.argmax(1) == y
    assert M.bin_stats_from_confidence(c, ok, 100).ece == pytest.approx(
        M.bin_stats_from_confidence(c.float(), ok, 100).ece, abs=1e-12
    )
    edges = torch.linspace(0, 1, 101, dtype=c.dtype)[1:-1]
    assert torch.equal(M.bin_index(c, 100, "right").long(), torch.bucketize(c, edges))


# ----------------------------------------------------------------------------- Brier decomposition


def _finite_forecast(n: int, k: int, n_values: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A forecast taking ``n_values`` distinct probability vectors, with random labels."""
    g = torch.Generator().manual_seed(seed)
    values = torch.softmax(2 * torch.randn(n_values, k, dtype=torch.float64, generator=g), 1)
    idx = torch.randint(0, n_values, (n,), generator=g)
    return values[idx], torch.randint(0, k, (n,), generator=g)


@PROPS
@given(n=st.integers(1, 300), k=st.integers(2, 6), n_values=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_brier_decomposition_is_exact_for_finitely_many_forecasts(n, k, n_values, seed):
    p, y = _finite_forecast(n, k, n_values, seed)
    d = M.brier_decomposition(p, y)
    assert d["brier"] == pytest.approx(M.brier_score(p, y), abs=1e-12)
    assert d["brier"] == pytest.approx(d["reliability"] - d["resolution"] + d["uncertainty"], abs=1e-12)
    assert d["refinement"] == pytest.approx(d["uncertainty"] - d["resolution"], abs=1e-15)
    assert d["reliability"] >= 0 and d["resolution"] >= 0 and d["uncertainty"] >= 0


def test_brier_decomposition_hand_computed():
    # two forecast values; group A: 0.8 for class 0, labels 0,0,1; group B: 0.3, labels 1
    p = torch.tensor([[0.8, 0.2]] * 3 + [[0.3, 0.7]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    d = M.brier_decomposition(p, y)
    rel = 0.75 * 2 * (0.8 - 2 / 3) ** 2 + 0.25 * 2 * 0.3 ** 2
    obar = 0.5
    res = 0.75 * 2 * (2 / 3 - obar) ** 2 + 0.25 * 2 * (0 - obar) ** 2
    assert d["reliability"] == pytest.approx(rel, abs=1e-12)
    assert d["resolution"] == pytest.approx(res, abs=1e-12)
    assert d["uncertainty"] == pytest.approx(0.5, abs=1e-12)


def test_brier_decomposition_climatology_has_no_reliability_or_resolution():
    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 4, (1000,), generator=g)
    freq = torch.bincount(y, minlength=4).double() / 1000
    d = M.brier_decomposition(freq.expand(1000, 4), y)
    assert d["reliability"] == pytest.approx(0.0, abs=1e-15)
    assert d["resolution"] == pytest.approx(0.0, abs=1e-15)
    assert d["brier"] == pytest.approx(d["uncertainty"], abs=1e-12)
    assert d["uncertainty"] == pytest.approx(float((freq * (1 - freq)).sum()), abs=1e-15)


def test_brier_decomposition_perfect_forecast_has_full_resolution():
    y = torch.tensor([0, 1, 2, 1, 0])
    p = torch.nn.functional.one_hot(y, 3).double()
    d = M.brier_decomposition(p, y)
    assert d["brier"] == 0 and d["reliability"] == 0
    assert d["resolution"] == pytest.approx(d["uncertainty"], abs=1e-15)


def test_brier_decomposition_binned_is_approximate_and_converges():
    p, y = random_probs(20_000, 3, 5, sharp=1.0)
    exact_brier = M.brier_score(p, y)
    gaps = []
    for m in (2, 5, 20):
        d = M.brier_decomposition(p, y, n_bins=m)
        assert d["brier"] == pytest.approx(exact_brier, abs=1e-12)
        gaps.append(abs(d["reliability"] - d["resolution"] + d["uncertainty"] - d["brier"]))
    assert gaps[0] > 1e-4  # coarse cells: the identity does not hold
    assert gaps[-1] < gaps[0] and gaps[-1] < 5e-3
    # with one cell per distinct vector (n_bins=None) every continuous forecast is its own group
    d = M.brier_decomposition(p, y)
    assert d["brier"] == pytest.approx(d["reliability"] - d["resolution"] + d["uncertainty"], abs=1e-10)


def test_forecast_groups():
    p = torch.tensor([[0.5, 0.5], [0.2, 0.8], [0.5, 0.5], [0.25, 0.75]])
    inv, counts = M.forecast_groups(p)
    assert counts.tolist() == [1, 1, 2] and inv[0] == inv[2]
    inv, counts = M.forecast_groups(p, n_bins=2)
    assert sorted(counts.tolist()) == [2, 2]
    assert inv[1] == inv[3] and inv[0] == inv[2]


@pytest.mark.parametrize(
    "args, err, match",
    [
        ((torch.tensor([[0.5, 0.6]]), torch.tensor([0])), ValueError, "sum to 1"),
        ((torch.tensor([[2.0, -1.0]]), torch.tensor([0])), ValueError, "probs"),
        ((torch.tensor([[0.5, 0.5]]), torch.tensor([2])), ValueError, "labels"),
        ((torch.tensor([[0.5, 0.5]]), torch.tensor([0.0])), TypeError, "labels"),
        ((torch.tensor([[float("nan"), 0.5]]), torch.tensor([0])), ValueError, "probs"),
        ((torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), ValueError, "probs"),
    ],
)
def test_brier_decomposition_bad_input(args, err, match):
    with pytest.raises(err, match=match):
        M.brier_decomposition(*args)


@pytest.mark.parametrize("n_bins, err", [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_brier_decomposition_bad_n_bins(n_bins, err):
    p, y = random_probs(10, 3, 0)
    with pytest.raises(err, match="n_bins"):
        M.brier_decomposition(p, y, n_bins=n_bins)


# ----------------------------------------------------------------------------- hardening (issue 14)


ALL_BINNED = (M.ece, M.mce, M.adaece, M.classwise_ece, M.accuracy, M.nll, M.brier_score, M.sece)


def test_non_contiguous_inputs_give_the_same_numbers():
    p, y = random_probs(700, 6, 21)
    fortran = np.asfortranarray(p.numpy())
    transposed = p.T.contiguous().T  # a (N, K) view with column-major strides
    assert not torch.as_tensor(fortran).is_contiguous() and not transposed.is_contiguous()
    want = M.summary(p, y)
    for q in (fortran, transposed, p[:, [5, 4, 3, 2, 1, 0]][:, [5, 4, 3, 2, 1, 0]]):
        assert M.summary(q, y) == pytest.approx(want, abs=1e-7)  # float32 sums in another order
        for closed in ("right", "left"):
            assert M.classwise_ece(q, y, closed=closed) == pytest.approx(
                M.classwise_ece(p, y, closed=closed), abs=1e-12)
    q = torch.cat([p, p], dim=1).view(-1, 2, 6)[:, 0, :]  # row stride 12, inner stride 1
    assert torch.equal(q, p) and not q.is_contiguous()
    assert M.summary(q, y) == pytest.approx(want, abs=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_probabilities_are_accepted_with_a_fitting_tolerance(dtype):
    p, y = random_probs(2000, 100, 4)
    low = p.to(dtype)  # rounding moves a row sum by up to eps/2: beyond 1e-3 for bfloat16
    up = low.float()
    want = M.bin_stats_from_confidence(up.max(1).values, up.argmax(1) == y, 15).ece
    assert M.ece(low, y) == pytest.approx(want, abs=1e-12)
    for fn in ALL_BINNED:
        fn(low, y)  # accepted
    assert M.summary(low, y)["ece"] == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="rows must sum to 1"):
        M.ece((p * 0.9).to(dtype), y)


def test_logits_hint_only_for_inputs_that_look_like_logits():
    p, y = random_probs(50, 4, 1)
    with pytest.raises(ValueError, match="softmax") as info:
        M.ece(torch.log(p), y)  # negative values: logits
    assert "look like logits" in str(info.value)
    with pytest.raises(ValueError) as info:
        M.ece(p * 0.5, y)  # in [0, 1] but unnormalised: not logits
    assert "rows must sum to 1" in str(info.value) and "logits" not in str(info.value)
    positive = torch.rand(50, 4, generator=torch.Generator().manual_seed(2)) * 5  # ReLU-like logits
    with pytest.raises(ValueError, match="look like logits"):
        M.ece(positive, y)
    for scale in (1.02, 2.0):  # probabilities times a common factor: rows sum to it, no hint
        with pytest.raises(ValueError) as info:
            M.ece(p * scale, y)
        assert "logits" not in str(info.value) and "row sums in" in str(info.value), str(info.value)
    q = p.clone()
    q[0] = torch.tensor([1.0004, 0.0, 0.0, 0.0])  # one entry a little above 1 (row sums within 1e-3)
    with pytest.raises(ValueError) as info:
        M.ece(q, y)
    assert "logits" not in str(info.value) and "1.0004]" in str(info.value), str(info.value)
    assert calib._checks.probs_error("p", (1.0, 1.0), -0.001, 0.9, 1e-3) == (
        "p must be probabilities in [0, 1]; got values in [-0.001, 0.9]")  # rounding, not logits


def test_huge_n_bins_refused_by_name_before_allocating():
    p, y = random_probs(20, 4, 1)
    for fn in (M.ece, M.mce, M.adaece, M.bin_stats, M.summary):
        with pytest.raises(ValueError, match="n_bins .* too large"):
            fn(p, y, 10**9)
    with pytest.raises(ValueError, match="n_bins .* too large"):
        M.classwise_ece(p, y, MAX_BIN_CELLS // 2)  # x 4 classes
    with pytest.raises(ValueError, match="n_bins_list entry .* too large"):
        M.ece_sweep(p, y, [15, 10**9])
    assert M.ece(p, y, 100_000) == pytest.approx(mean_abs_gap(p, y), abs=1e-7)  # large but fine


def test_sece_tiny_bandwidth_refused_and_small_ones_finite():
    p, y = random_probs(30, 3, 2)
    for h in (1e-300, 1e-200):
        with pytest.raises(ValueError, match="bandwidth"):
            M.sece(p, y, h)
        with pytest.raises(ValueError, match="bandwidth"):
            M.sece_loss(p, y, h)
    # as h -> 0 SECE tends to mean |pi - z|; float32 must not turn 0 * inf into NaN
    soft = float((M.soft_accuracy(p.double(), y) - p.double().max(1).values).abs().mean())
    for h in (1e-30, 1e-100):
        assert M.sece_loss(p.float(), y, h).item() == pytest.approx(soft, abs=1e-6)
        assert M.sece(p, y, h) == pytest.approx(soft, abs=1e-9)
        assert M.sece_hard(p, y, h) == pytest.approx(mean_abs_gap(p, y), abs=1e-9)


def test_complex_inputs_refused():
    p, y = random_probs(10, 3, 0)
    for fn in ALL_BINNED:
        with pytest.raises(TypeError, match="probs must be real"):
            fn(p.to(torch.complex64), y)
    with pytest.raises(TypeError, match="confidence must be real"):
        M.bin_stats_from_confidence(p.max(1).values.to(torch.complex64), y == 0)


@PROPS
@given(prob_data(min_n=1, max_n=80), st.integers(1, 30), st.sampled_from(["right", "left"]))
def test_metrics_match_plain_definitions(data, n_bins, closed):
    """Accuracy, classwise ECE and ECE equal their textbook forms."""
    p, y = data
    conf, pred = p.max(1)
    assert M.accuracy(p, y) == pytest.approx(float(pred.eq(y).double().mean()), abs=1e-15)
    want = np.mean([M.bin_stats_from_confidence(p[:, k], y == k, n_bins, closed=closed).ece
                    for k in range(p.shape[1])])
    assert M.classwise_ece(p, y, n_bins, closed=closed) == pytest.approx(want, abs=1e-12)
    assert M.ece(p, y, n_bins, closed=closed) == pytest.approx(
        M.bin_stats_from_confidence(conf, pred.eq(y), n_bins, closed=closed).ece, abs=1e-12)


@PROPS
@given(st.sampled_from([2, 3, 6, 40, 100]), st.integers(1, 200), st.integers(0, 10_000),
       st.sampled_from([torch.float64, torch.float32]))
def test_ties_on_quantised_rows_follow_argmax(k, n, seed, dtype):
    # many rows with c_i <= 1/2, candidates for a tie
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 3, (n, k), generator=g).double()
    counts[counts.sum(1) == 0] = 1.0
    p = (counts / counts.sum(1, keepdim=True)).to(dtype)
    y = torch.randint(0, k, (n,), generator=g)
    assert torch.equal(checked(p, y).correct, p.argmax(1).eq(y))


def test_classwise_ece_with_no_entry_above_the_first_edge():
    """Every entry in bin 0 (an empty weighted bincount is int64): still the textbook value."""
    p = torch.tensor([[0.4498, 0.3032, 0.2470]], dtype=torch.float64)
    y = torch.tensor([2])
    want = np.mean([M.bin_stats_from_confidence(p[:, k], y == k, 2).ece for k in range(3)])
    assert M.classwise_ece(p, y, 2) == pytest.approx(want, abs=1e-12)
    assert M.summary(p, y, 2)["classwise_ece"] == pytest.approx(want, abs=1e-12)


def numpy_binned(conf: np.ndarray, correct: np.ndarray, edges: np.ndarray, closed: str) -> tuple[float, float]:
    """ECE and MCE by the textbook loop over bins: ``sum_m |B_m|/N |acc(B_m) - conf(B_m)|``
    and ``max_m |acc(B_m) - conf(B_m)|``, bins ``(lo, hi]`` (0 in the first) or ``[lo, hi)``
    (1 in the last)."""
    n_bins = len(edges) - 1
    ece_sum, worst = 0.0, 0.0
    for m, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        if closed == "right":
            mask = (conf > lo) & (conf <= hi) | ((conf == 0) & (m == 0))
        else:
            mask = (conf >= lo) & (conf < hi) | ((conf == 1) & (m == n_bins - 1))
        if mask.any():
            gap = abs(correct[mask].mean() - conf[mask].mean())
            ece_sum += mask.sum() * gap
            worst = max(worst, gap)
    return ece_sum / len(conf), worst


@pytest.mark.parametrize("n_bins", [1, 2, 4, 10, 15, 100])
@pytest.mark.parametrize("closed", ["right", "left"])
def test_ece_and_mce_equal_a_numpy_loop_on_edge_values(n_bins, closed):
    """Confidences exactly on every bin edge (0 and 1 included), beside them, and random."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)  # the edges' definition
    g = torch.Generator().manual_seed(n_bins)
    beside = torch.cat([torch.nextafter(edges, torch.tensor(2.0, dtype=torch.float64)),
                        torch.nextafter(edges, torch.tensor(-1.0, dtype=torch.float64))]).clamp(0.25, 1)
    conf = torch.cat([edges.clamp(min=0.25), beside, 0.25 + 0.75 * torch.rand(300, generator=g, dtype=torch.float64),
                      torch.ones(5, dtype=torch.float64), torch.full((3,), 0.25, dtype=torch.float64)])
    correct = torch.rand(conf.numel(), generator=g) < conf
    p, y = probs_from_confidence(conf, correct, k=4)
    assert torch.equal(p.max(1).values, conf)
    want_ece, want_mce = numpy_binned(conf.numpy(), correct.double().numpy(), edges.numpy(), closed)
    assert M.ece(p, y, n_bins, closed=closed) == pytest.approx(want_ece, abs=1e-12)
    assert M.mce(p, y, n_bins, closed=closed) == pytest.approx(want_mce, abs=1e-12)
    assert M.bin_stats(p, y, n_bins, closed=closed).ece == pytest.approx(want_ece, abs=1e-12)
    # a binary confidence of exactly 0 or 1 (classwise ECE bins every entry)
    q = torch.stack([conf, 1 - conf], 1)
    q[:4] = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    z = torch.randint(0, 2, (len(q),), generator=g)
    want = np.mean([numpy_binned(q[:, k].numpy(), (z == k).double().numpy(), edges.numpy(), closed)[0] for k in (0, 1)])
    assert M.classwise_ece(q, z, n_bins, closed=closed) == pytest.approx(want, abs=1e-12)
