"""calib.evidence after the statistical review: one-run sides, a pilot's seed spread, the
equivalence claim's contradicted, NaN for unmeasured noise, the planning function against a
simulation of the chapters' procedure, and the ECE's bias kept apart from its noise."""
import math

import numpy as np
import pytest
from scipy import stats

from calib import evidence, metrics


# --- a side with one run (review D1, D2) --------------------------------------------------


def test_one_run_against_several_counts_both_sizes():
    # Var(mean a - b) = sd^2 (1/3 + 1/1), whichever side has the single run
    v = evidence.compare([5.0, 6.0, 5.5], [4.0], paired=False, seed_sd=1.0)
    w = evidence.compare([4.0], [5.0, 6.0, 5.5], paired=False, seed_sd=1.0, direction="less")
    p = 2 * stats.norm.sf(1.5 / math.sqrt(1 / 3 + 1))
    assert v.p == pytest.approx(p, rel=1e-9) and w.p == pytest.approx(p, rel=1e-9)
    assert v.p == pytest.approx(0.194, abs=1e-3) and v.outcome == w.outcome == "undecided"


def test_borrowed_spread_is_the_t_test_of_one_new_run():
    # seed_sd = b's spread with its n - 1 df: the classical test of one new value against a sample
    b = np.array([2.1, 2.9, 2.4, 2.6])
    v = evidence.compare([4.0], b, paired=False, seed_sd=b.std(ddof=1), seed_df=b.size - 1)
    t = (4.0 - b.mean()) / (b.std(ddof=1) * math.sqrt(1 + 1 / b.size))
    assert v.p == pytest.approx(2 * stats.t.sf(t, b.size - 1), rel=1e-9)
    half = stats.t.ppf(0.975, b.size - 1) * b.std(ddof=1) * math.sqrt(1 + 1 / b.size)
    assert (v.low, v.high) == pytest.approx((4.0 - b.mean() - half, 4.0 - b.mean() + half), rel=1e-9)
    assert "3 df" in v.test


def test_seed_df_sets_the_t_quantile_and_joins_satterthwaite():
    v = evidence.compare([1.0], [0.0], seed_sd=0.5, seed_df=2)  # paired, one seed: var 2 sd^2
    assert v.p == pytest.approx(2 * stats.t.sf(1 / math.sqrt(0.5), 2), rel=1e-9)
    w = evidence.compare([1.0], [0.0], seed_sd=0.5, seed_df=2, test_se=0.3, test_df=199)
    var = 0.5 + 0.09
    df = var ** 2 / (0.5 ** 2 / 2 + 0.09 ** 2 / 199)
    assert w.p == pytest.approx(2 * stats.t.sf(1 / math.sqrt(var), df), rel=1e-9)
    one = evidence.compare([1.3], 1.0, seed_sd=0.2, seed_df=4)  # one-sample: var sd^2
    assert one.p == pytest.approx(2 * stats.t.sf(0.3 / 0.2, 4), rel=1e-9)


def test_a_pilot_spread_with_its_df_keeps_the_error_rate():
    # chapter 13's construction under a true null: one run against 3, the seed sd from the 3
    rng = np.random.default_rng(7)
    reps = 3000
    ones, threes = rng.standard_normal(reps), rng.standard_normal((reps, 3))
    wrong = {df: np.mean([evidence.compare([a], b, paired=False, seed_sd=b.std(ddof=1),
                                           seed_df=df).outcome != "undecided"
                          for a, b in zip(ones, threes)]) for df in (math.inf, 2)}
    se = math.sqrt(0.05 * 0.95 / reps)
    assert wrong[2] == pytest.approx(0.05, abs=4 * se)  # exact: the t-test of a new value
    assert wrong[math.inf] > 0.10  # the review's 13.5 %: the pilot taken as exact


@pytest.mark.parametrize("kw, match", [({"seed_df": 3}, "seed_df is the degrees"),
                                       ({"seed_sd": 1.0, "seed_df": 0}, "seed_df must be > 0"),
                                       ({"seed_sd": -1.0}, "seed_sd"), ({"test_df": 0}, "test_df")])
def test_bad_seed_arguments_name_themselves(kw, match):
    with pytest.raises(ValueError, match=match):
        evidence.compare([1.0], [0.0], **kw)


def test_seed_sd_zero_says_the_verdict_is_conditional():
    v = evidence.compare([1.0], [0.5], seed_sd=0.0, test_se=0.1, test_df=199)
    assert "conditional on these runs" in v.test and v.outcome == "holds"


# --- zero spread and rounding (D4, D7) -----------------------------------------------------


def test_zero_spread_gives_nan_and_stays_out_of_the_family():
    flat = evidence.compare([1.1, 1.1, 1.1], [1.0, 1.0, 1.0], "flat")
    assert math.isnan(flat.p) and flat.outcome == "undecided" and "p = n/a" in str(flat)
    real = [evidence.compare([7.1, 8.0, 7.6], [2.0, 2.9, 1.7], "x"),
            evidence.compare([1.0, 3.0, 2.0], [2.1, 1.0, 2.6], "y")]
    with_flat = evidence.decide([real[0], flat, real[1]])
    alone = evidence.decide(real)
    assert [v.p_adjusted for v in with_flat[::2]] == pytest.approx([v.p_adjusted for v in alone])
    assert math.isnan(with_flat[1].p_adjusted) and with_flat[1].outcome == "undecided"
    assert {v.family_size for v in with_flat} == {2}
    assert evidence.table(with_flat).loc["flat", "p (adjusted)"] == "n/a"


def test_welch_rounding_floor_with_unequal_sizes():
    # the review's D4: both sides have seeds, all rounded to one value each
    v = evidence.compare([1.1] * 3, [1.0] * 2, resolution=0.1)
    va, vb = 0.01 / 12 / 3, 0.01 / 12 / 2
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    assert v.p == pytest.approx(2 * stats.t.sf(0.1 / math.sqrt(va + vb), df), rel=1e-9)
    assert "seed noise unknown" not in v.test and "rounding to 0.1" in v.test


# --- equivalence: contradicted at 1 - alpha, corrected in the family (D3) ------------------


def test_equivalence_beyond_is_its_own_two_sided_test():
    a, b, m = np.array([3.0, 3.4, 2.7, 3.1]), np.array([0.0, 0.1, -0.1, 0.2]), 2.0
    v = evidence.compare(a, b, direction="equivalent", margin=m)
    d = a - b
    up = stats.ttest_1samp(d, m, alternative="greater").pvalue
    down = stats.ttest_1samp(d, -m, alternative="less").pvalue
    assert v.p_beyond == pytest.approx(min(1.0, 2 * min(up, down)), rel=1e-9)
    ci = stats.ttest_1samp(d, m).confidence_interval(0.95)  # beyond <=> the 95 % interval is
    assert (v.outcome == "contradicted") == (ci.low > 0)     # wholly above the margin
    within = max(stats.ttest_1samp(d, m, alternative="less").pvalue,
                 stats.ttest_1samp(d, -m, alternative="greater").pvalue)
    assert v.p == pytest.approx(within, rel=1e-9)


def test_equivalence_matches_statsmodels_tost():
    sm = pytest.importorskip("statsmodels.stats.weightstats")
    a, b = [1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.2, 4.1]
    v = evidence.compare(a, b, direction="equivalent", margin=0.6)
    assert v.p == pytest.approx(sm.ttost_paired(np.array(a), np.array(b), -0.6, 0.6)[0], rel=1e-9)


def test_contradicted_is_rare_when_the_truth_is_inside_the_margin():
    # the review measured 7.4 % (n = 3, sd 1, margin 0.1) with the 90 % interval
    rng = np.random.default_rng(11)
    d = rng.standard_normal((3000, 3))
    rate = np.mean([evidence.compare(x, 0.0, direction="equivalent", margin=0.1).outcome == "contradicted"
                    for x in d])
    assert rate <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / 3000)


def test_the_family_corrects_the_beyond_p_too():
    eq = evidence.compare([3.0, 3.4, 2.7], [0, 0.1, -0.1], "eq", direction="equivalent", margin=0.5)
    others = [evidence.compare([0, 1, 2], [0.5, 0.4, 1.6], f"o{i}") for i in range(9)]
    fam = evidence.decide([eq, *others])
    p = np.array([eq.p] + [o.p for o in others] + [eq.p_beyond])
    order = np.argsort(p, kind="stable")
    holm = np.empty_like(p)
    holm[order] = np.minimum(np.maximum.accumulate(p[order] * (p.size - np.arange(p.size))), 1)
    assert fam[0].p_adjusted == pytest.approx(holm[0]) and fam[0].p_beyond_adjusted == pytest.approx(holm[-1])
    assert fam[0].family_size == 11
    assert fam[0].outcome == ("contradicted" if holm[-1] < 0.05 else "undecided")
    assert fam[0].p_outcome == fam[0].p_beyond_adjusted or fam[0].outcome != "contradicted"
    weak = evidence.compare([3.0, 3.4, 2.2], [0, 0.1, -0.1], "weak", direction="equivalent", margin=1.5)
    assert weak.outcome == "contradicted" and weak.p_beyond > 0.005  # alone, at 0.05
    assert evidence.decide([weak, *others])[0].outcome == "undecided"  # not among eleven
    sm = pytest.importorskip("statsmodels.stats.multitest")
    assert [*holm] == pytest.approx(sm.multipletests(p, method="holm")[1])


# --- detectable_difference against a simulation of the procedure (D5) ---------------------


def _simulated_power(delta, n, seed_sd, test_sd, rho_within, rho_across, n_boot, reps, rng):
    """Holds rate of compare_runs' procedure on one shared test set, vectorised over reps.

    Run (m, s)'s value: true value + seed noise + test noise, the test noises correlated
    rho_within between seeds of one method and rho_across between methods (one test set);
    test_se^2 is the bootstrap's estimate of the test part of Var mean(d), chi-square with
    n_boot - 1 df. The verdict is compare's formula, checked against compare on 40 reps.
    """
    g = rng.standard_normal((reps, 1, 1))
    h = rng.standard_normal((reps, 2, 1))
    z = rng.standard_normal((reps, 2, n))
    e = test_sd * (math.sqrt(rho_across) * g + math.sqrt(rho_within - rho_across) * h
                   + math.sqrt(1 - rho_within) * z)
    x = seed_sd * rng.standard_normal((reps, 2, n)) + e
    x[:, 0] += delta
    d = x[:, 0] - x[:, 1]
    shared = (rho_within - rho_across) / (1 - rho_across)
    v_test = 2 * test_sd ** 2 * (1 - rho_across) * (shared + (1 - shared) / n)
    tse2 = v_test * rng.chisquare(n_boot - 1, reps) / (n_boot - 1)
    s2 = d.var(axis=1, ddof=1) / n
    var = s2 + tse2
    df = var ** 2 / (s2 ** 2 / (n - 1) + tse2 ** 2 / (n_boot - 1))
    p = 2 * stats.t.sf(np.abs(d.mean(1)) / np.sqrt(var), df)
    holds = (p < 0.05) & (d.mean(1) > 0)
    for i in range(40):
        v = evidence.compare(x[i, 0], x[i, 1], test_se=math.sqrt(tse2[i]), test_df=n_boot - 1)
        assert v.p == pytest.approx(p[i], rel=1e-7) and (v.outcome == "holds") == holds[i]
    return holds.mean()


@pytest.mark.parametrize("n, seed_sd, rho_within, rho_across", [
    (3, 0.005, 0.0, 0.0),    # independent test noise between runs
    (3, 0.005, 0.72, 0.3),   # 60 % of the difference's test noise shared by all seeds
    (5, 0.002, 0.72, 0.3),   # test noise dominant
    (10, 0.005, 0.5, 0.5),   # the shared part cancels in the difference
])
def test_detectable_difference_has_its_power_under_the_procedure(n, seed_sd, rho_within, rho_across):
    test_sd, n_boot, reps = 0.003, 200, 6000
    # the per-run test sd the function takes: the part not common to both methods
    shared = (rho_within - rho_across) / (1 - rho_across)
    delta = evidence.detectable_difference(10_000, n, seed_sd=seed_sd, n_boot=n_boot, shared=shared,
                                           test_sd=test_sd * math.sqrt(1 - rho_across))
    rate = _simulated_power(delta, n, seed_sd, test_sd, rho_within, rho_across, n_boot, reps,
                            np.random.default_rng(n))
    assert rate == pytest.approx(0.8, abs=4 * math.sqrt(0.8 * 0.2 / reps))


def test_detectable_difference_without_test_term_is_the_paired_t():
    sm = pytest.importorskip("statsmodels.stats.power")
    for n in (3, 5, 10):
        dd = evidence.detectable_difference(10_000, n, seed_sd=0.005, test_sd=0.002, test_term=False)
        sd = math.sqrt(2 * (0.005 ** 2 + 0.002 ** 2))
        es = sm.TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8)
        assert dd == pytest.approx(es * sd, rel=1e-6)


def test_detectable_difference_at_a_strict_level_is_finite():
    # a Holm step of a family of 5 at 10 seeds: the solver passes a noncentrality near 8,
    # where scipy's nct.cdf is NaN (the wrong-sign tail is taken from the sf instead)
    dd = evidence.detectable_difference(5000, 10, seed_sd=2 / math.sqrt(2), test_sd=0.0,
                                        test_term=False, alpha=0.05 / 5)
    assert math.isfinite(dd) and 1.5 < dd < 4.0
    assert evidence.power._nct_power(dd, 10, 2 / math.sqrt(10), 0.01) == pytest.approx(0.8)


def test_the_test_term_costs_power_and_sharing_moves_it():
    # at 10 seeds the double-counted test noise costs power; at 3 the bootstrap's many df
    # (Satterthwaite) outweigh it, and the test term decides smaller differences than t(2)
    base = dict(seed_sd=0.005, test_sd=0.003)
    assert evidence.detectable_difference(10_000, 10, **base) > \
        evidence.detectable_difference(10_000, 10, test_term=False, **base)
    assert evidence.detectable_difference(10_000, 3, **base) < \
        evidence.detectable_difference(10_000, 3, test_term=False, **base)
    assert evidence.detectable_difference(10_000, 10, shared=1.0, **base) > \
        evidence.detectable_difference(10_000, 10, shared=0.0, **base)
    with pytest.raises(ValueError, match="shared"):
        evidence.detectable_difference(10_000, 5, shared=1.5, **base)
    with pytest.raises(ValueError, match="both 0"):
        evidence.detectable_difference(10_000, 5, seed_sd=0.0, test_sd=0.0)


# --- the ECE's bias and its noise ----------------------------------------------------------


def test_ece_bias_is_a_calibrated_models_mean_ece():
    mean, sd = evidence.noise_floor(1000, sims=300, seed=3)
    bias = evidence.ece_bias(1000, sims=400, seed=4)
    assert bias == pytest.approx(mean, rel=0.05)
    assert 0.025 < bias < 0.035 and sd < bias / 3  # the 3 % is a bias; the noise is far smaller
    ratio = evidence.ece_bias(10_000, sims=100, seed=5) / bias
    assert 0.25 < ratio < 0.4  # falls like 1/sqrt(N): 0.32
    # with a model's own confidences: the mean ECE of labels drawn from them
    rng = np.random.default_rng(6)
    conf = rng.uniform(0.5, 1.0, 800)
    probs = np.stack([conf, 1 - conf], 1)
    draws = [metrics.ece(probs, (rng.random(conf.size) > conf).astype(int), 15) for _ in range(300)]
    assert evidence.ece_bias(conf, sims=600, seed=7) == pytest.approx(np.mean(draws), rel=0.05)
    with pytest.raises(ValueError, match="n_bins"):
        evidence.ece_bias(1000, n_bins=0)


def test_ece_noise_is_the_bootstrap_se_of_the_ece_difference():
    rng = np.random.default_rng(8)
    conf = evidence._confidences(None, 10)
    runs = [evidence._calibrated_sample(rng, conf, 500, 10)[0] for _ in range(3)]
    labels = evidence._calibrated_sample(rng, conf, 500, 10)[1]
    got = evidence.ece_noise(runs[:2], labels, runs[2:], n_boot=40, seed=1)
    want = evidence.test_se(lambda p, y: metrics.ece(p, y, 15), runs[:2], labels, runs[2:], n_boot=40, seed=1)
    assert got == want


def test_debiased_ce_removes_the_bias_the_binned_ece_keeps():
    rng = np.random.default_rng(9)
    conf = evidence._confidences(None, 10)
    probs, labels = evidence._calibrated_sample(rng, conf, 2000, 10)
    assert evidence.debiased_ce(probs, labels) < 0.5 * metrics.ece(probs, labels, 15)
    # over-confident by 0.1 everywhere: the true top-label l2 error is 0.1
    c = rng.uniform(0.6, 1.0, 20_000)
    right = rng.random(c.size) < c - 0.1
    p = np.stack([c, 1 - c], 1)
    y = np.where(right, 0, 1)
    assert evidence.debiased_ce(p, y) == pytest.approx(0.1, abs=0.01)
    assert evidence.debiased_ce(p, y) == pytest.approx(metrics.l2_ce(p, y, 15), rel=1e-12)
