"""Streaming metrics (calib.metrics.streaming): compute() equals the function on the
concatenated batches, for random splits, logits, binary input, and two gloo processes."""
from __future__ import annotations

import datetime
import itertools
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

import calib.metrics as M

TOL = 1e-6

# (class, function, options): every streaming class against its function.
PAIRS = [
    (M.Accuracy, M.accuracy, {}),
    (M.NLL, M.nll, {}),
    (M.BrierScore, M.brier_score, {}),
    (M.ECE, M.ece, {"n_bins": 10}),
    (M.ECE, M.ece, {"n_bins": 7, "closed": "left"}),
    (M.MCE, M.mce, {"n_bins": 10}),
    (M.ClasswiseECE, M.classwise_ece, {"n_bins": 5}),
    (M.ClasswiseECE, M.classwise_ece, {"n_bins": 5, "closed": "left"}),
    (M.AdaECE, M.adaece, {"n_bins": 8}),
    (M.SmoothECE, M.smooth_ece, {"bandwidth": 0.05}),  # the automatic bandwidth: test below
    (M.SECE, M.sece, {"bandwidth": 0.05}),
    (M.SECEHard, M.sece_hard, {"bandwidth": 0.05}),
    (M.L2CE, M.l2_ce, {"n_bins": 6}),
    (M.L2CE, M.l2_ce, {"n_bins": 6, "mode": "classwise", "debiased": False}),
]
IDS = [f"{c.__name__}-{'-'.join(map(str, o.values()))}" for c, _, o in PAIRS]


def logits_labels(n: int, k: int, seed: int, scale: float = 3.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, k, generator=g, dtype=torch.float64) * scale
    # labels drawn from a tempered softmax: miscalibrated, so the errors are not 0
    y = torch.multinomial((z / 2).softmax(1), 1, generator=g).squeeze(1)
    return z, y


def pieces(n: int, cuts: list[int]) -> list[slice]:
    edges = [0, *sorted({c % (n + 1) for c in cuts}), n]
    return [slice(a, b) for a, b in itertools.pairwise(edges)]


def fed(metric: M.StreamingMetric, x: torch.Tensor, y: torch.Tensor, cuts: list[int]) -> float:
    for part in pieces(len(y), cuts):
        metric.update(x[part], y[part])
    return metric.compute()


# ------------------------------------------------------------------ equality with the functions


@pytest.mark.parametrize("cls, fn, opts", PAIRS, ids=IDS)
@settings(max_examples=8, deadline=None)
@given(n=st.integers(5, 200), k=st.integers(2, 6), seed=st.integers(0, 2**16),
       cuts=st.lists(st.integers(0, 200), max_size=6))
def test_equals_function_on_concatenated_batches(cls, fn, opts, n, k, seed, cuts):
    z, y = logits_labels(n, k, seed)
    p = z.softmax(1).float()  # float32 probabilities, as a network gives them
    want = fn(p, y, **opts)
    assert fed(cls(**opts), p, y, cuts) == pytest.approx(want, abs=TOL)
    # from logits: the softmax in float64, as the function of that softmax
    want = fn(z.softmax(1), y, **opts)
    assert fed(cls(from_logits=True, **opts), z, y, cuts) == pytest.approx(want, abs=TOL)


@pytest.mark.parametrize("cls, fn, opts", PAIRS, ids=IDS)
def test_streaming_is_not_the_mean_of_batch_values(cls, fn, opts):
    """The classes pool the batches: for the binned errors, the mean of per-batch values differs
    (so equality above is the feature, not an accident of the data)."""
    z, y = logits_labels(300, 4, 1)
    p = z.softmax(1)
    metric = cls(**opts)
    fed(metric, p, y, [10, 20])
    assert metric.n_samples == 300
    assert metric.compute() == pytest.approx(fn(p, y, **opts), abs=TOL)
    if cls in (M.ECE, M.MCE, M.AdaECE, M.ClasswiseECE, M.L2CE, M.SmoothECE):
        mean = np.mean([fn(p[s], y[s], **opts) for s in pieces(300, [10, 20])])
        assert abs(mean - metric.compute()) > 10 * TOL


def test_smooth_ece_automatic_bandwidth():
    """Once (its fixed-point search costs ~10 smoothing passes): the same value as the function."""
    z, y = logits_labels(250, 3, 8)
    assert fed(M.SmoothECE(from_logits=True), z, y, [20, 100]) == pytest.approx(
        M.smooth_ece(z.softmax(1), y), abs=TOL)


def test_compute_keeps_state_and_reset_clears():
    z, y = logits_labels(120, 3, 2)
    p = z.softmax(1)
    pairs = ((M.ECE, M.ece), (M.AdaECE, M.adaece), (M.NLL, M.nll), (M.SECEHard, M.sece_hard))
    for cls, fn in pairs:
        metric = cls()
        metric.update(p[:60], y[:60])
        first = metric.compute()
        assert metric.compute() == first  # compute does not consume
        metric.update(p[60:], y[60:])
        assert metric.n_samples == 120
        metric.reset()
        assert metric.n_samples == 0
        with pytest.raises(ValueError, match="needs data"):
            metric.compute()
        metric.update(p[60:], y[60:])  # only what came after the reset
        assert metric.compute() == pytest.approx(fn(p[60:], y[60:]), abs=TOL)


def test_states_do_not_alias_the_callers_tensors():
    """A loop that refills one buffer must not change what was added."""
    z, _ = logits_labels(80, 3, 9)
    p = z.softmax(1)
    for metric in (M.SECEHard(), M.AdaECE(binary="positive")):
        buffer, labels = p[:40, :2].clone(), torch.zeros(40, dtype=torch.long)
        buffer /= buffer.sum(1, keepdim=True)
        metric.update(buffer, labels)
        want = metric.compute()
        buffer.fill_(0.5)
        labels.fill_(1)
        assert metric.compute() == want


def test_numpy_and_mixed_precision_batches():
    z, y = logits_labels(100, 5, 3)
    p = z.softmax(1)
    metric = M.ECE()
    metric.update(p[:40].numpy(), y[:40].numpy())
    metric.update(p[40:].half(), y[40:])
    want = M.ece(torch.cat([p[:40], p[40:].half().float().double()]), y)
    assert metric.compute() == pytest.approx(want, abs=1e-4)
    ada = M.AdaECE()
    ada.update(p[:50].float(), y[:50])
    ada.update(p[50:], y[50:])  # float32 then float64 confidences: concatenated as torch.cat does
    assert ada.compute() == pytest.approx(M.adaece(torch.cat([p[:50].float().double(), p[50:]]), y),
                                          abs=TOL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls, fn, opts", PAIRS, ids=IDS)
def test_cuda_batches_equal_cpu_function(cls, fn, opts):  # pragma: no cover - runs where a GPU is
    z, y = logits_labels(400, 5, 10)
    metric = cls(from_logits=True, **opts)
    assert fed(metric, z.cuda(), y.cuda(), [100, 250]) == pytest.approx(fn(z.softmax(1), y, **opts),
                                                                        abs=TOL)


# ------------------------------------------------------------------ binary input


def binary_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < p ** 1.5).long()  # over-confident
    return p, y


def test_binary_probs():
    p = torch.tensor([0.0, 0.25, 1.0])
    assert torch.equal(M.binary_probs(p), torch.tensor([[1.0, 0.0], [0.75, 0.25], [0.0, 1.0]]))
    z = torch.tensor([-3.0, 0.0, 2.0])
    two = M.binary_probs(z, from_logits=True)
    assert two.dtype == torch.float64
    torch.testing.assert_close(two, torch.stack([torch.zeros(3), z], 1).double().softmax(1))
    with pytest.raises(ValueError, match="p must have shape"):
        M.binary_probs(torch.ones(3, 2))


@pytest.mark.parametrize("cls, fn, opts", PAIRS, ids=IDS)
def test_binary_top_label_is_the_function_of_two_columns(cls, fn, opts):
    p, y = binary_data(150, 4)
    want = fn(M.binary_probs(p), y, **opts)
    assert fed(cls(**opts), p, y, [50, 51]) == pytest.approx(want, abs=TOL)
    z = torch.logit(p)
    got = fed(cls(from_logits=True, **opts), z, y, [70])
    assert got == pytest.approx(fn(M.binary_probs(z, from_logits=True), y, **opts), abs=TOL)


def test_binary_positive_is_the_positive_class_calibration():
    p, y = binary_data(400, 5)
    for closed in ("right", "left"):
        stats = M.bin_stats_from_confidence(p, y == 1, 12, closed=closed)
        ece = fed(M.ECE(12, closed=closed, binary="positive"), p, y, [99])
        mce = fed(M.MCE(12, closed=closed, binary="positive"), p, y, [99])
        assert (ece, mce) == pytest.approx((stats.ece, stats.mce), abs=TOL)
    assert fed(M.AdaECE(9, binary="positive"), p, y, [10, 300]) == pytest.approx(
        M.adaece_from_confidence(p, y == 1, 9), abs=TOL)
    assert fed(M.SmoothECE(binary="positive"), p, y, [200]) == pytest.approx(
        M.smooth_ece_from_confidence(p, y == 1), abs=TOL)
    # (N, 2) columns mean the same as the 1-D probability of column 1
    assert fed(M.ECE(binary="positive"), M.binary_probs(p), y, [5]) == pytest.approx(
        fed(M.ECE(binary="positive"), p, y, []), abs=TOL)
    # the two meanings differ in general and agree where every p > 1/2
    assert abs(fed(M.ECE(), p, y, []) - fed(M.ECE(binary="positive"), p, y, [])) > 1e-3
    high = p > 0.5
    assert fed(M.ECE(), p[high], y[high], [30]) == pytest.approx(
        fed(M.ECE(binary="positive"), p[high], y[high], []), abs=TOL)


@pytest.mark.parametrize("norm, cls", [("l1", M.ECE), ("max", M.MCE)])
def test_binary_positive_matches_torchmetrics(norm, cls):
    from torchmetrics.classification import BinaryCalibrationError
    from torchmetrics.functional.classification import (
        binary_calibration_error,
        multiclass_calibration_error,
    )

    p, y = binary_data(1000, 6)  # no p is exactly 1 (torchmetrics gives 1 a bin of its own)
    want = float(binary_calibration_error(p, y, n_bins=15, norm=norm))
    ours = cls(15, closed="left", binary="positive")
    theirs = BinaryCalibrationError(n_bins=15, norm=norm)
    for part in pieces(1000, [123, 456, 789]):
        ours.update(p[part], y[part])
        theirs.update(p[part], y[part])
    assert ours.compute() == pytest.approx(want, abs=TOL)
    assert ours.compute() == pytest.approx(float(theirs.compute()), abs=TOL)
    # logits: torchmetrics applies the sigmoid itself to values outside [0, 1]
    z = torch.logit(p)
    metric = cls(closed="left", binary="positive", from_logits=True)
    assert fed(metric, z, y, [500]) == pytest.approx(
        float(binary_calibration_error(z, y, norm=norm)), abs=TOL)
    # top label: torchmetrics' multiclass error of the two columns (computed in float32 there)
    top = float(multiclass_calibration_error(M.binary_probs(p), y, num_classes=2, norm=norm))
    assert fed(cls(closed="left"), p, y, [321]) == pytest.approx(top, abs=1e-5)
    assert abs(top - want) > 1e-3  # the two meanings differ on this data


# ------------------------------------------------------------------ the *_from_confidence functions


def test_from_confidence_functions_equal_the_top_label_functions():
    z, y = logits_labels(500, 6, 7)
    p = z.softmax(1)
    conf, pred = p.max(1)
    for n_bins in (1, 5, 15):
        assert M.adaece_from_confidence(conf, pred == y, n_bins) == M.adaece(p, y, n_bins)
    assert M.smooth_ece_from_confidence(conf, (pred == y).long()) == M.smooth_ece(p, y)
    assert M.smooth_ece_from_confidence(conf, pred == y, 0.1) == M.smooth_ece(p, y, 0.1)
    with pytest.raises(TypeError, match="correct"):  # smooth ECE reads floats as probabilities
        M.adaece_from_confidence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))
    for fn in (M.adaece_from_confidence, M.smooth_ece_from_confidence):
        with pytest.raises(ValueError, match="confidence"):
            fn(torch.tensor([0.5, 1.5]), torch.tensor([1, 0]))
        with pytest.raises(ValueError, match="correct has shape"):
            fn(torch.tensor([0.5, 0.5]), torch.tensor([1]))
        with pytest.raises(ValueError, match="correct must hold only 0/1"):
            fn(torch.tensor([0.5, 0.5]), torch.tensor([1, 2]))


# ------------------------------------------------------------------ errors


GOOD_P = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
GOOD_Y = torch.tensor([0, 2, 2])


@pytest.mark.parametrize("cls", [c for c, _, _ in PAIRS[::2]] + [M.MCE])
def test_bad_batches_raise_naming_the_argument(cls):
    metric = cls()
    cases = [
        (GOOD_P.clone().fill_(float("nan")), GOOD_Y, ValueError, "probs contains NaN"),
        (GOOD_P * 2, GOOD_Y, ValueError, "probs must be probabilities"),
        (GOOD_P, GOOD_Y + 1, ValueError, "labels must lie in [0, 3)"),
        (GOOD_P, GOOD_Y[:2], ValueError, "labels has 2 entries"),
        (GOOD_P, GOOD_Y.double(), TypeError, "labels must be integer"),
        (GOOD_P[None], GOOD_Y, ValueError, "shape (N, K)"),
        ("probs", GOOD_Y, TypeError, "probs must be"),
        (torch.tensor([0.2, 1.3, 0.5]), torch.tensor([0, 1, 1]), ValueError, "probs must be"),
        (torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0, 2, 1]), ValueError,
         "labels must lie in [0, 2)"),
    ]
    for x, y, exc, words in cases:
        with pytest.raises(exc) as info:
            metric.update(x, y)
        assert words in str(info.value), (cls.__name__, str(info.value))
    assert metric.n_samples == 0  # a refused batch leaves no trace
    logits = cls(from_logits=True)
    with pytest.raises(ValueError, match="logits contains NaN"):
        logits.update(torch.full((3, 3), float("nan")), GOOD_Y)
    # a later batch with another number of classes
    metric.update(GOOD_P, GOOD_Y)
    if cls not in (M.Accuracy, M.NLL, M.BrierScore, M.ECE, M.MCE, M.AdaECE, M.SmoothECE):
        with pytest.raises(ValueError, match="classes, unlike the earlier batches"):
            metric.update(torch.full((2, 4), 0.25), torch.tensor([0, 3]))
    # validate=False skips the value checks (the batch is taken as it is)
    unchecked = cls(validate=False)
    unchecked.update(GOOD_P * 2, GOOD_Y)
    assert unchecked.n_samples == 3


def test_bad_options_raise():
    with pytest.raises(ValueError, match="n_bins"):
        M.ECE(0)
    with pytest.raises(TypeError, match="n_bins"):
        M.ClasswiseECE(2.5)
    with pytest.raises(ValueError, match="closed"):
        M.MCE(closed="both")
    with pytest.raises(ValueError, match="binary"):
        M.AdaECE(binary="class1")
    with pytest.raises(ValueError, match="bandwidth"):
        M.SmoothECE(bandwidth=0.0)
    with pytest.raises(ValueError, match="tau"):
        M.SECE(tau=-1.0)
    with pytest.raises(ValueError, match="mode"):
        M.L2CE(mode="canonical")
    with pytest.raises(TypeError, match="from_logits"):
        M.NLL(from_logits="yes")
    with pytest.raises(TypeError, match="distributed"):
        M.ECE(distributed=1)
    with pytest.raises(ValueError, match='binary="positive" needs'):
        M.ECE(binary="positive").update(GOOD_P, GOOD_Y)
    with pytest.raises(ValueError, match="needs data"):
        M.SmoothECE().compute()


# ------------------------------------------------------------------ two gloo processes


def _rank_data(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank r's shards (unequal sizes): multiclass logits/labels and binary probabilities."""
    z, y = logits_labels(301, 4, 11)
    p, yb = binary_data(301, 12)
    cut = 190
    part = slice(0, cut) if rank == 0 else slice(cut, None)
    return z[part], y[part], p[part], yb[part]


def _gloo_worker(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = _gloo_results(rank)
        results["warnings"] = sorted({str(w.message) for w in caught})
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _gloo_results(rank: int) -> dict[str, object]:
    """Rank ``rank``'s values of every streaming metric (and the class-count mismatch's message)."""
    z, y, p, yb = _rank_data(rank)
    results: dict[str, object] = {}
    for i, (cls, _, opts) in enumerate(PAIRS):
        metric = cls(from_logits=True, **opts)
        fed(metric, z, y, [40 + rank])
        results[f"multi{i}"] = metric.compute()
        binary = cls(**opts)
        fed(binary, p, yb, [17])
        results[f"binary{i}"] = binary.compute()
        empty = cls(**opts)  # rank 1 has no data: it still takes part
        if rank == 0:
            empty.update(z.softmax(1), y)
        results[f"empty{i}"] = empty.compute()
        local = cls(distributed=False, from_logits=True, **opts)
        fed(local, z, y, [])
        results[f"local{i}"] = local.compute()
    positive = M.AdaECE(binary="positive")
    fed(positive, p, yb, [])
    results["positive"] = positive.compute()
    mismatch = M.ClasswiseECE()  # ranks with different numbers of classes
    mismatch.update(z.softmax(1)[:, : 3 + rank].double().softmax(1), y.clamp(max=2))
    try:
        mismatch.compute()
    except ValueError as exc:
        results["mismatch"] = str(exc)
    return results


@pytest.mark.slow
@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                    reason="torch.distributed with gloo is not available")
def test_two_gloo_processes_equal_one_process_on_all_data(tmp_path):
    args = (str(tmp_path / "init"), str(tmp_path))
    context = mp.spawn(_gloo_worker, args=args, nprocs=2, join=False)
    deadline = time.monotonic() + 240
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for proc in context.processes:
                proc.kill()
            pytest.fail("the two gloo processes did not finish in 240 s")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    parts = [_rank_data(r) for r in range(2)]
    z, y = torch.cat([a[0] for a in parts]), torch.cat([a[1] for a in parts])
    p, yb = torch.cat([a[2] for a in parts]), torch.cat([a[3] for a in parts])
    for i, (_, fn, opts) in enumerate(PAIRS):
        want = fn(z.softmax(1), y, **opts)
        for r in range(2):
            assert ranks[r][f"multi{i}"] == pytest.approx(want, abs=TOL), (i, r)
            binary = fn(M.binary_probs(p), yb, **opts)
            assert ranks[r][f"binary{i}"] == pytest.approx(binary, abs=TOL)
            only_rank0 = fn(parts[0][0].softmax(1), parts[0][1], **opts)
            assert ranks[r][f"empty{i}"] == pytest.approx(only_rank0, abs=TOL)
            local = fn(parts[r][0].softmax(1), parts[r][1], **opts)
            assert ranks[r][f"local{i}"] == pytest.approx(local, abs=TOL)
        assert abs(ranks[0][f"local{i}"] - want) > 1e-9  # gathering changed the value
    for r in range(2):
        assert ranks[r]["positive"] == pytest.approx(M.adaece_from_confidence(p, yb == 1), abs=TOL)
        assert "every rank must pass the same number of classes" in ranks[r]["mismatch"]
        # issue 43: AdaECE and SmoothECE warned "non-contiguous" on every rank (the gathered
        # rows' columns were strided views)
        assert not [w for w in ranks[r]["warnings"] if "contiguous" in w], ranks[r]["warnings"]
