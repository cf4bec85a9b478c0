"""calib.metrics estimators beyond binned ECE: smooth ECE (parity with relplot), the debiased
l2 calibration error (parity with uncertainty-calibration), canonical calibration, and the
deferred value checks of a GPU call."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from calib import metrics as M


def random_probs(n: int, k: int, seed: int, sharp: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(sharp * torch.randn(n, k, generator=g), dim=1)
    y = torch.randint(0, k, (n,), generator=g)
    return p, y


# ----------------------------------------------------------------------------- smooth ECE and debiased l2 (peers)


def _peer_cases():
    """(probs, labels): over-confident, under-confident, nearly calibrated, binary; float64."""
    g = torch.Generator().manual_seed(11)
    cases = []
    for n, k, sharp, scale in ((3000, 10, 3.0, 1.0), (2000, 5, 1.0, 0.5), (5000, 4, 2.0, None), (800, 2, 2.0, 2.0)):
        logits = sharp * torch.randn(n, k, generator=g, dtype=torch.float64)
        truth = torch.softmax(logits, 1)
        y = torch.multinomial(truth, 1, generator=g).squeeze(1)  # labels drawn from the truth: calibrated
        cases.append((truth if scale is None else torch.softmax(logits * scale, 1), y))
    return cases


@pytest.mark.parametrize("case", range(3))
def test_smooth_ece_matches_relplot(case):
    relplot = pytest.importorskip("relplot")
    p, y = _peer_cases()[case]
    conf, hit = p.max(1).values.numpy(), (p.argmax(1) == y).double().numpy()
    want, width = relplot.smECE(conf, hit, return_width=True)
    assert M.smooth_ece_bandwidth(p, y) == pytest.approx(width, abs=2 * 2 ** -10)  # same bisection
    assert M.smooth_ece(p, y) == pytest.approx(want, abs=1e-3, rel=0.01)
    for sigma in (0.02, 0.1):
        assert M.smooth_ece(p, y, sigma) == pytest.approx(relplot.smECE_sigma(conf, hit, sigma), rel=2e-3)


def direct_smooth_ece(f: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """Błasiok & Nakkiran (2023): int_0^1 |sum_i K(t, f_i)(f_i - y_i)| dt / int_0^1 sum_i K(t, f_i) dt,
    K the Gaussian reflected at 0 and 1, by a fine Riemann sum over t."""
    t = np.linspace(0, 1, 4001)[:, None]
    phi = lambda d: np.exp(-0.5 * (d / sigma) ** 2)  # noqa: E731
    k = phi(t - f) + phi(t + f) + phi(2 - t - f)
    return float(np.abs(k @ (f - y)).sum() / k.sum())


@pytest.mark.parametrize("case", range(4))
def test_smooth_ece_is_the_continuous_definition(case):
    """Also where relplot's coarser grid is off: case 3 (K = 2) has 169 of 800 confidences
    above 0.999, whose mirror images at 1 relplot's grid leaves out (it reports ~7% more)."""
    p, y = _peer_cases()[case]
    conf, hit = p.max(1).values.numpy(), (p.argmax(1) == y).double().numpy()
    for sigma in (0.02, 0.1):
        assert M.smooth_ece(p, y, sigma) == pytest.approx(direct_smooth_ece(conf, hit, sigma), rel=1e-3)


def test_smooth_ece_properties():
    p, y = _peer_cases()[0]
    # a larger bandwidth smooths more: smECE_sigma does not grow with sigma
    values = [M.smooth_ece(p, y, s) for s in (0.01, 0.03, 0.1, 0.3)]
    assert all(a >= b - 1e-9 for a, b in zip(values, values[1:]))
    sigma = M.smooth_ece_bandwidth(p, y)
    assert M.smooth_ece(p, y) == pytest.approx(M.smooth_ece(p, y, sigma))
    assert M.smooth_ece(p, y) == pytest.approx(sigma, abs=2 ** -9)  # the fixed point smECE = sigma
    assert 0 <= M.smooth_ece(p, y) <= M.ece(p, y, 1000) + 0.01  # smoothing only averages gaps
    calibrated = M.smooth_ece(*_peer_cases()[2])
    assert calibrated < values[0]  # labels drawn from the forecast: small


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("debiased", [True, False])
@pytest.mark.parametrize("n_bins", [5, 15, 50])
def test_l2_ce_matches_uncertainty_calibration(case, debiased, n_bins):
    cal = pytest.importorskip("calibration")
    p, y = _peer_cases()[case]
    for mode, peer_mode in (("top_label", "top-label"), ("classwise", "marginal")):
        want = cal.lower_bound_scaling_ce(p.numpy(), y.numpy(), p=2, debias=debiased, num_bins=n_bins, mode=peer_mode)
        assert M.l2_ce(p, y, n_bins, mode=mode, debiased=debiased) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_l2_ce_bias_is_the_gap_between_plug_in_and_debiased():
    p, y = _peer_cases()[0]  # clearly miscalibrated: the debiased square stays positive
    plug, fair = M.l2_ce(p, y, debiased=False), M.l2_ce(p, y)
    assert plug**2 - fair**2 == pytest.approx(M.l2_ce_bias(p, y), rel=1e-9)
    # the bias grows with the number of bins (fewer samples per bin)
    assert M.l2_ce_bias(p, y, 5) < M.l2_ce_bias(p, y, 15) < M.l2_ce_bias(p, y, 100)
    # on calibrated data the debiased estimate is closer to 0 than the plug-in one
    q, z = _peer_cases()[2]
    assert M.l2_ce(q, z, 30) < M.l2_ce(q, z, 30, debiased=False)
    with pytest.raises(ValueError, match="mode"):
        M.l2_ce(p, y, mode="canonical")


def test_canonical_reliability_is_zero_for_a_calibrated_finite_forecast():
    """Canonical calibration: labels drawn exactly in proportion inside each forecast vector."""
    values = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.6, 0.2]], dtype=torch.float64)
    p = values.repeat_interleave(20, 0)
    y = torch.tensor([0] * 10 + [1] * 5 + [2] * 5 + [0] * 4 + [1] * 12 + [2] * 4)
    assert M.brier_decomposition(p, y)["reliability"] == pytest.approx(0, abs=1e-15)
    assert M.classwise_ece(p, y, 10) == pytest.approx(0, abs=1e-15)
    assert M.ece(p, y, 10) == pytest.approx(0, abs=1e-15)


def _count_host_reads(monkeypatch) -> list[str]:
    """Record every read of a tensor's values on the host (a sync on a GPU)."""
    reads: list[str] = []

    def counting(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            reads.append(name)
            return original(self, *args, **kwargs)

        return read

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    return reads


def test_every_call_reads_the_host_once(monkeypatch):
    """One code path on every device: the value checks travel with the result, and a call
    reads values on the host once (``Checked.result``'s ``tolist``). On a GPU,
    ``test_cuda_syncs_once`` counts the syncs themselves."""
    p, y = random_probs(3000, 7, 5)
    calls = {
        "ece": lambda: M.ece(p, y), "mce": lambda: M.mce(p, y, 20, closed="left"),
        "adaece": lambda: M.adaece(p, y), "classwise_ece": lambda: M.classwise_ece(p, y),
        "ece_sweep": lambda: M.ece_sweep(p, y), "mce sweep": lambda: M.ece_sweep(p, y, (5, 50), "mce"),
        "adaece sweep": lambda: M.ece_sweep(p, y, (5, 50), "adaece"), "summary": lambda: M.summary(p, y),
        "bootstrap": lambda: M.bootstrap_ci(M.ece, p, y, n_boot=40),
        "bootstrap mce": lambda: M.bootstrap_ci(M.mce, p, y, n_boot=40, n_bins=10),
        "unvalidated ece": lambda: M.ece(p, y, validate=False),
    }
    reads = _count_host_reads(monkeypatch)
    for name, fn in calls.items():
        reads.clear()
        fn()
        assert reads == ["tolist"], (name, reads)


def test_a_bad_input_raises_at_the_one_host_read(monkeypatch):
    """The verdict on the values is read with the result, and raises the one-line message."""
    p, y = random_probs(10, 3, 0)
    nan = p.clone()
    nan[1, 1] = float("nan")
    bad_y = y.clone()
    bad_y[0] = 3
    cases = ((nan, y, "NaN"), (p, bad_y, "labels must lie in [0, 3)"),
             (p * 0.5, y, "rows must sum to 1"), (torch.log(p), y, "look like logits"))
    reads = _count_host_reads(monkeypatch)
    for probs, labels, words in cases:
        for fn in (M.ece, M.classwise_ece, M.nll):
            reads.clear()
            with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(")", r"\)")):
                fn(probs, labels)
            assert reads == ["tolist"], (fn.__name__, words, reads)


def test_validate_false_skips_the_checks_and_gives_the_same_numbers():
    p, y = random_probs(2000, 6, 3)
    for fn in (M.ece, M.mce, M.adaece, M.classwise_ece, M.accuracy, M.nll, M.brier_score, M.sece_hard, M.l2_ce):
        assert fn(p, y, validate=False) == fn(p, y), fn.__name__
    assert M.summary(p, y, validate=False) == M.summary(p, y)
    assert M.ece(p * 0.5, y, validate=False) >= 0  # not checked: no error


def test_bin_totals_is_the_weighted_bincount():
    g = torch.Generator().manual_seed(0)
    cells = torch.randint(0, 37, (5000,), generator=g)
    correct = torch.rand(5000, generator=g) < 0.5
    conf = torch.rand(5000, generator=g)
    counts, hits, conf_sum = M.bin_totals(cells, 40, correct, conf)
    assert torch.equal(counts, torch.bincount(cells, minlength=40).double())
    assert torch.equal(hits, torch.bincount(cells, correct.double(), minlength=40))
    assert torch.allclose(conf_sum, torch.bincount(cells, conf.double(), minlength=40), rtol=0, atol=1e-12)
    assert counts.dtype == hits.dtype == conf_sum.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_syncs_once():  # pragma: no cover - runs where a GPU is present
    """On a GPU each metric call synchronises with the host once (its result's transfer)."""
    import warnings

    p, y = (t.cuda() for t in random_probs(5000, 10, 0))
    calls = {"ece": lambda: M.ece(p, y), "mce": lambda: M.mce(p, y), "adaece": lambda: M.adaece(p, y),
             "classwise_ece": lambda: M.classwise_ece(p, y), "ece_sweep": lambda: M.ece_sweep(p, y),
             "bootstrap": lambda: M.bootstrap_ci(M.ece, p, y)}
    for name, fn in calls.items():
        fn()  # first call: lazy initialisation may synchronise
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
        assert len(syncs) == 1, (name, syncs)


def test_smooth_ece_from_confidence_reads_float_outcomes_as_their_probabilities():
    """With E[y | f] known, the population smooth ECE: outcomes y_i = eta_i, here f - 0.1."""
    from calib.metrics import smooth_ece_from_confidence

    torch.manual_seed(0)
    f = torch.rand(2000, dtype=torch.float64) * 0.5 + 0.5
    assert smooth_ece_from_confidence(f, f - 0.1) == pytest.approx(0.1, abs=1e-9)
    with pytest.raises(ValueError, match="correct"):
        smooth_ece_from_confidence(f, f + 0.6)
