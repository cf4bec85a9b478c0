"""calib.evidence against scipy.stats, and its noise model against simulation."""
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from calib import evidence, metrics

A = [7.1, 8.0, 7.6, 6.9]
B = [2.0, 2.9, 1.7, 2.2]


def test_paired_matches_scipy_ttest_rel():
    v = evidence.compare(A, B, "a above b")
    ref = stats.ttest_rel(A, B)
    ci = ref.confidence_interval(0.95)
    assert v.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert (v.low, v.high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert v.effect == pytest.approx(np.mean(A) - np.mean(B))
    assert v.outcome == "holds" and "paired t" in v.test


def test_unpaired_matches_scipy_welch():
    a, b = [1.0, 1.4, 0.9, 1.3, 1.1], [0.2, 0.9, 0.4]
    v = evidence.compare(a, b, direction="greater")
    ref = stats.ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert v.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert (v.low, v.high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert "Welch" in v.test


def test_one_sample_matches_scipy():
    v = evidence.compare([2.5, 2.7, 3.1], 2.0, "T above 2")
    ref = stats.ttest_1samp([2.5, 2.7, 3.1], 2.0)
    assert v.p == pytest.approx(ref.pvalue, rel=1e-9) and v.n_b == 0


def test_outcomes_follow_direction_and_noise():
    assert evidence.compare(A, B, direction="less").outcome == "contradicted"
    noisy = evidence.compare([1.0, 3.0, 2.0], [2.1, 1.0, 2.6])
    assert noisy.outcome == "undecided" and noisy.low < 0 < noisy.high
    # test-set noise much larger than the seed noise turns a decided claim into undecided
    assert evidence.compare(A, B, test_se=5.0).outcome == "undecided"


def test_test_se_widens_the_interval_with_satterthwaite_df():
    plain, both = evidence.compare(A, B), evidence.compare(A, B, test_se=0.3)
    d = np.subtract(A, B)
    seed_var = d.var(ddof=1) / d.size
    var = seed_var + 0.09
    df = var ** 2 / (seed_var ** 2 / (d.size - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(var)
    assert both.high - both.low == pytest.approx(2 * half)
    assert both.high - both.low > plain.high - plain.low


def test_one_seed_is_undecided_unless_the_seed_noise_is_given():
    # one run per method: its seed noise is unknown, not zero, so test noise alone decides nothing
    v = evidence.compare([5.0], [1.0], test_se=1.0)
    assert v.outcome == "undecided" and "seed noise unknown" in v.test and math.isnan(v.low)
    assert math.isnan(v.p)  # no test was made: not a p of 1 that a family would count
    assert evidence.compare([5.0, 6.0, 5.5], [1.0], paired=False).outcome == "undecided"
    # with a pilot's seed sd: var = 2 sd^2 + test_se^2, normal quantiles
    w = evidence.compare([5.0], [1.0], test_se=1.0, seed_sd=1.0)
    assert w.outcome == "holds" and w.p == pytest.approx(2 * stats.norm.sf(4.0 / math.sqrt(3.0)))


def test_equivalence_is_two_one_sided_tests():
    a, b = [1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.2, 4.1]
    v = evidence.compare(a, b, direction="equivalent", margin=1.0)
    d = np.subtract(a, b)
    p = max(stats.ttest_1samp(d, 1.0, alternative="less").pvalue,
            stats.ttest_1samp(d, -1.0, alternative="greater").pvalue)
    assert v.p == pytest.approx(p, rel=1e-9) and v.outcome == "holds"
    assert "90% confidence interval" in str(v)
    # contradicted: the 95 % interval (not the 90 % one) wholly beyond a margin
    far = evidence.compare([3.0, 3.4, 2.7, 3.1], [0.0, 0.1, -0.1, 0.2], direction="equivalent", margin=0.5)
    assert far.outcome == "contradicted" and far.p_beyond < 0.05


def test_holm_and_fdr():
    vs = [evidence.compare(A, B), evidence.compare([1.0, 3.0, 2.0], [2.1, 1.0, 2.6]),
          evidence.compare([2.0, 2.2, 2.1], [1.9, 2.0, 2.05])]
    p = np.array([v.p for v in vs])
    holm = evidence.decide(vs)
    order = np.argsort(p)
    expect = np.minimum(np.maximum.accumulate(p[order] * np.array([3, 2, 1])), 1)
    assert [holm[i].p_adjusted for i in order] == pytest.approx(expect)
    bh = evidence.decide(vs, "bh")
    assert [v.p_adjusted for v in bh] == pytest.approx(stats.false_discovery_control(p))
    assert all(h.p_adjusted >= v.p for h, v in zip(holm, vs))
    assert [v.outcome for v in evidence.decide(vs[:1])] == ["holds"]


@pytest.mark.parametrize("kw, match", [
    ({"a": [], "b": [1.0]}, "a is empty"),
    ({"a": [1.0, float("nan")], "b": [1.0, 2.0]}, "a holds NaN"),
    ({"a": [1.0, 2.0], "b": [1.0], "paired": True}, "paired=True"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "direction": "up"}, "direction"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "direction": "equivalent"}, "margin"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "alpha": 0.7}, "alpha"),
    ({"a": [1.0, 2.0], "b": [1.0, 2.0], "test_se": -1.0}, "test_se"),
])
def test_bad_input_names_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        evidence.compare(**kw)


def test_bad_family_and_types():
    with pytest.raises(TypeError, match="a must be"):
        evidence.compare(object(), [1.0])
    with pytest.raises(ValueError, match="method"):
        evidence.decide([evidence.compare(A, B)], "bonferroni")
    with pytest.raises(ValueError, match="n_test"):
        evidence.noise_floor(1)
    with pytest.raises(ValueError, match="n_seeds"):
        evidence.detectable_difference(1000, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=6), st.floats(0.01, 3))
def test_swapping_the_methods_mirrors_the_verdict(a, shift):
    b = [x - shift + 0.1 * i for i, x in enumerate(a)]
    v, w = evidence.compare(a, b), evidence.compare(b, a, direction="less")
    assert v.effect == pytest.approx(-w.effect, abs=1e-9)
    assert v.outcome == w.outcome and v.p == pytest.approx(w.p)


def test_bootstrap_se_matches_the_noise_of_fresh_test_sets():
    # a calibrated model at N = 1,000: the spread of its ECE over fresh test sets (the truth)
    # against the bootstrap standard error computed from one test set
    rng = np.random.default_rng(1)
    conf = evidence._confidences(None, 10)
    truth = [metrics.ece(*evidence._calibrated_sample(rng, conf, 1000, 10), 15) for _ in range(300)]
    ses = []
    for _ in range(5):
        probs, labels = evidence._calibrated_sample(rng, conf, 1000, 10)
        ses.append(evidence.test_se(lambda p, y: metrics.ece(p, y, 15), [probs], labels, n_boot=150))
    assert np.std(truth, ddof=1) == pytest.approx(np.mean(ses), rel=0.3)
    # and noise_floor reports that spread, with the level the book quotes (about 3 %)
    mean, sd = evidence.noise_floor(1000, sims=300, seed=2)
    assert 0.025 < mean < 0.035
    assert sd == pytest.approx(np.std(truth, ddof=1), rel=0.2)


def test_detectable_difference_has_its_stated_power():
    # the old model: independent noise per run, seed noise only in the verdict (no test term)
    n_test, n_seeds, seed_sd = 2000, 4, 0.004
    mde = evidence.detectable_difference(n_test, n_seeds, seed_sd=seed_sd, sims=300, test_term=False)
    test_sd = evidence.noise_floor(n_test, sims=300)[1]
    sd = math.sqrt(seed_sd ** 2 + test_sd ** 2)  # each run's noise
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(2000):
        a = mde + sd * rng.standard_normal(n_seeds)
        b = sd * rng.standard_normal(n_seeds)
        hits += evidence.compare(a, b).outcome == "holds"
    assert hits / 2000 == pytest.approx(0.8, abs=0.04)
    assert evidence.detectable_difference(10_000, n_seeds, sims=300, test_term=False) < mde  # more test images
    assert evidence.detectable_difference(n_test, 8, seed_sd=seed_sd, sims=300, test_term=False) < mde  # more seeds


def test_compare_runs_counts_both_noises():
    rng = np.random.default_rng(4)
    conf = evidence._confidences(None, 10)
    sharp = [evidence._calibrated_sample(rng, conf, 500, 10) for _ in range(3)]
    labels = sharp[0][1]
    over = [np.clip(p ** 0.5 / (p ** 0.5).sum(1, keepdims=True), 0, 1) for p, _ in sharp]
    calm = [p for p, _ in sharp]
    v = evidence.compare_runs(metrics.nll, calm, over, labels, "x", scale=1.0, n_boot=50)
    assert "bootstrap" in v.test and v.n_a == 3


def test_statistics_of_the_wrong_predictions():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.5, 0.25, 0.25]])
    y = np.array([1, 1, 0])  # only the first is wrong
    assert evidence.entropy_of_wrong(p, y) == pytest.approx(-(p[0] * np.log(p[0])).sum())
    assert evidence.nll_of_wrong(p, y) == pytest.approx(-np.log(0.2))
    assert math.isnan(evidence.nll_of_wrong(p[1:], y[1:]))


def test_values_rounded_to_a_grid_keep_a_noise_floor():
    same = evidence.compare([1.1, 1.1, 1.1], [1.0, 1.0, 1.0])  # zero spread: no interval
    assert same.outcome == "undecided" and math.isnan(same.low) and math.isnan(same.p)
    for a, b in (([0.1 + 0.2, 0.3, 0.3], [0.1] * 3), ([0.1 + 0.2, 0.3, 0.3], 0.1)):
        rounded = evidence.compare(a, b)  # a spread of float rounding only is no spread either
        assert rounded.outcome == "undecided" and math.isnan(rounded.p), rounded
    welch = evidence.compare([0.1 + 0.2, 0.3, 0.3], [0.1, 0.1, 0.1 + 1e-17], paired=False)
    assert welch.outcome == "undecided" and math.isnan(welch.p)
    assert evidence.compare([0.3, 0.3 + 1e-9, 0.3], [0.1] * 3).outcome == "holds"  # real spread
    # a hand-given seed_sd of rounding size is no spread either; a real one still decides
    tiny = evidence.compare([0.3], [0.1], seed_sd=1e-17)
    assert tiny.outcome == "undecided" and math.isnan(tiny.p) and "conditional" in tiny.test
    assert evidence.compare([0.3], [0.1], seed_sd=1e-9).outcome == "holds"
    floored = evidence.compare([1.1, 1.1, 1.1], [1.0, 1.0, 1.0], resolution=0.1)
    se = math.sqrt(2 * 0.01 / 12 / 3)
    assert floored.high - floored.low == pytest.approx(2 * stats.t.ppf(0.975, 2) * se)
    assert "rounding to 0.1" in floored.test
    with pytest.raises(ValueError, match="resolution"):
        evidence.compare([1.0, 2.0], [1.0, 2.0], resolution=-1.0)


def test_the_bootstrap_counts_its_own_degrees_of_freedom():
    # identical seeds: the only noise is the bootstrap's, known to B - 1 = 49 df, not exactly
    v = evidence.compare([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], test_se=0.3, test_df=49)
    assert v.high - v.low == pytest.approx(2 * stats.t.ppf(0.975, 49) * 0.3)
    assert v.p == pytest.approx(2 * stats.t.sf(1 / 0.3, 49))


# --- Family: a grid of claims corrected together, with cells still to run -------------------


def test_family_corrects_only_the_tested_cells_together():
    rng = np.random.default_rng(0)
    pairs = [(rng.normal(0.5 * i, 1.0, 5), rng.normal(0.0, 1.0, 5)) for i in range(4)]
    fam = evidence.Family(["x", "y"], min_n=3)
    for i, (a, b) in enumerate(pairs):
        fam.add(f"row {i // 2}", "xy"[i % 2], a, b, f"claim {i}")
    fam.add("row 2", "x", [1.0, 2.0], [0.0, 0.5], "two seeds: not tested")
    expected = evidence.decide([evidence.compare(a, b, f"claim {i}") for i, (a, b) in enumerate(pairs)])
    assert fam.verdicts() == expected
    assert fam.tally() == evidence.tally(expected) + " (1 more not tested yet)"
    table = fam.table()
    assert list(table.columns) == ["x", "y"] and list(table.index) == ["row 0", "row 1", "row 2"]
    assert table.loc["row 2", "x"] == "2 of 3 seeds" and table.loc["row 2", "y"] == "—"
    assert table.loc["row 0", "x"] == f"{expected[0].effect:+.2f} {expected[0].outcome}"
    outcomes = fam.outcomes()  # the corrected outcome of each cell, the untested one's note
    assert outcomes[("row 1", "y")] == expected[3].outcome and outcomes[("row 2", "x")] == "2 of 3 seeds"
    assert ("row 2", "y") not in outcomes


def test_family_table_tells_a_cell_not_in_the_design_from_one_not_run_yet():
    # planned: add() was called, with no runs yet; never added: not in this design
    fam = evidence.Family(["B", "A"], min_n=3)
    fam.add("dual focal below CE", "B", [], [], "planned, no runs yet")
    fam.add("focal below CE", "B", [1.0, 1.1, 0.9], [2.0, 2.2, 1.9], "tested")
    fam.add("focal below CE", "A", [], [2.0, 2.1, 1.9], "planned, one side missing")
    table = fam.table()
    assert table.loc["dual focal below CE", "B"] == "not run yet"
    assert table.loc["dual focal below CE", "A"] == "—"
    assert table.loc["focal below CE", "A"] == "not run yet"
    assert fam.tally().endswith("(2 more not tested yet)")  # the "—" cell is not counted


def test_tally_verbs_agree_with_their_counts():
    held = evidence.compare([3.0, 3.1, 3.3], [1.0, 1.1, 1.2], "held")
    flat = evidence.compare([1.1, 1.1, 1.1], [1.0, 1.0, 1.0], "flat")  # undecided
    assert evidence.tally([held, flat, flat]) == "1 of 3 holds, 0 are contradicted and 2 are undecided"
    assert evidence.tally([held, held, flat]) == "2 of 3 hold, 0 are contradicted and 1 is undecided"
    assert evidence.tally([]) == "none tested"
    waiting = evidence.Family(["small"], min_n=3)
    waiting.add("CE over-confident", "small", [1.4], 1.0, "T > 1 (small)")
    assert waiting.tally() == "none of 1 tested yet"


def test_family_one_sample_cells_count_the_values_of_a():
    fam = evidence.Family(["n"], min_n=3)
    fam.add("T > 1", "n", [1.5, 1.6, 1.4], 1.0, "T above 1", unit="")
    fam.add("T < 1", "n", [0.9], 1.0, "T below 1", direction="less")
    assert [v.claim for v in fam.verdicts()] == ["T above 1"]
    assert fam.table().loc["T < 1", "n"] == "1 of 3 seeds"


@pytest.mark.parametrize("kwargs, match", [({"min_n": 1}, "min_n"), ({"min_n": True}, "min_n"),
                                           ({"method": "bonferroni"}, "method")])
def test_family_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evidence.Family(["a"], **kwargs)


def test_family_put_keeps_a_family_decided_elsewhere():
    rng = np.random.default_rng(1)
    pairs = [(rng.normal(0.8 * i, 1.0, 6), rng.normal(0.0, 1.0, 6)) for i in range(3)]
    decided = evidence.decide([evidence.compare(a, b, f"claim {i}", direction="greater")
                               for i, (a, b) in enumerate(pairs)])
    fam = evidence.Family(["m"])
    for i, v in enumerate(decided):
        fam.put(f"row {i}", "m", v)
    assert fam.verdicts() == decided  # decide adjusts the raw p: placing is idempotent
    with pytest.raises(ValueError, match="column 'z'"):
        fam.put("row", "z", decided[0])
    with pytest.raises(TypeError, match="verdict must be a Verdict"):
        fam.put("row", "m", 0.5)
    fam.put("row 3", "m", "same method")  # a note: shown, never tested
    assert fam.verdicts() == decided and fam.outcomes()[("row 3", "m")] == "same method"


def test_family_refuses_an_unknown_column():
    fam = evidence.Family(["2,500", "10,000"])
    with pytest.raises(ValueError, match="column '55,000'"):
        fam.add("row", "55,000", [1.0, 2.0], [0.0, 1.0], "claim")


def test_a_corrected_verdict_says_so_even_where_holm_leaves_its_p_unchanged():
    a, b = [3.0, 3.2, 2.9], [1.0, 1.1, 0.8]
    fam = evidence.decide([evidence.compare(a, b, "large"), evidence.compare(b, a, "reversed")])
    assert all(v.family_size == 2 for v in fam)
    assert all("after Holm's correction for 2 tests" in str(v) and "per comparison" in str(v)
               for v in fam)
    assert "correction" not in str(evidence.compare(a, b, "alone"))
    untested = evidence.decide([evidence.compare(a, b, "large"), evidence.compare(b, a, "x"),
                                evidence.compare([1.0], [2.0], "one run a side")])
    assert "correction" not in str(untested[2]) and "p = n/a" in str(untested[2])
    assert "per comparison" not in str(untested[2])  # there is no interval to qualify
    fdr = evidence.decide([evidence.compare(a, b, "large"), evidence.compare(b, a, "x")], "bh")
    assert "after the Benjamini–Hochberg correction for 2 tests" in str(fdr[0])


def test_an_equivalence_line_names_the_claim_each_p_tests():
    near = [evidence.compare([1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.2, 4.1], "near",
                             direction="equivalent", margin=1.0, unit=" pt"),
            evidence.compare(A, B, "apart")]
    line = str(evidence.decide(near)[0])
    assert 'for "within ±1 pt", ' in line and 'for "beyond", both after Holm' in line
    assert "for 3 tests" in line  # an equivalence claim is two of the family's tests
    assert 'for "within ±1 pt"' in str(near[0]) and "correction" not in str(near[0])


def test_swapping_the_sides_of_an_equivalence_only_flips_the_sign():
    """after − before or before − after: the same two one-sided tests, the same outcome."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 400)
    runs = [[rng.dirichlet(np.ones(3) * c, 400) for _ in range(4)] for c in (1.0, 1.3)]
    kw = dict(direction="equivalent", margin=1.0, scale=100, unit=" pt", n_boot=50)
    ab = evidence.compare_runs(metrics.ece, runs[0], runs[1], y, "x", **kw)
    ba = evidence.compare_runs(metrics.ece, runs[1], runs[0], y, "x", **kw)
    assert ba.effect == pytest.approx(-ab.effect) and ba.outcome == ab.outcome
    assert (ba.low, ba.high) == pytest.approx((-ab.high, -ab.low))
    assert (ba.p, ba.p_beyond) == pytest.approx((ab.p, ab.p_beyond))


@pytest.mark.parametrize("p, text", [(0.0498, "0.0498"), (0.0503, "0.05"), (0.012, "0.012"), (0.5, "0.5"),
                                     (0.049995, "0.04999"), (0.0500004, "0.05")])
def test_p_values_are_not_rounded_across_alpha(p, text):
    assert evidence._p_text(p, 0.05) == text


@pytest.mark.parametrize("p, text", [(1.3e-79, "< 1e-10"), (0.0, "< 1e-10"), (1.2e-10, "1.2e-10"),
                                     (math.nan, "n/a")])
def test_p_values_below_the_floor_print_as_a_bound(p, text):
    assert evidence._p_text(p, 0.05) == text


@pytest.mark.parametrize("p, text", [(0.0123, "p = 0.012"), (0.0498, "p = 0.0498"),
                                     (0.0, "p < 1e-10"), (math.nan, "p = n/a")])
def test_p_value_quotes_p_as_the_verdict_lines_do(p, text):
    """The chapters' own sentences quote p by the verdict lines' rule, never "p = 0.000"."""
    assert evidence.p_value(p) == text


def test_a_p_value_past_the_float_range_prints_p_below_the_floor():
    """One run a side, seed_sd=0 and a difference 50 test-set SEs wide: the normal tail
    underflows to p = 0, a real test (the verdict holds), printed "p < 1e-10", never "p = 0"."""
    v = evidence.compare([1.0], [0.5], "x", paired=False, seed_sd=0.0, test_se=0.01)
    assert v.p == 0.0 and v.outcome == "holds" and "Welch t, 1 vs 1 seeds" in v.test
    assert "p < 1e-10," in str(v) and "p = 0" not in str(v)
    eq = evidence.compare([1.0], [1.0], "y", paired=False, seed_sd=0.0, test_se=1e-3,
                          direction="equivalent", margin=0.1)
    assert 'p < 1e-10 for "within ±0.1", 1 for "beyond"' in str(eq)
    assert list(evidence.table([v])["p (adjusted)"]) == ["< 1e-10"]


def test_the_verdict_table_rounds_p_as_the_verdict_line_does():
    from dataclasses import replace

    v = evidence.compare([3.0, 4.0, 3.5], [1.0, 1.2, 0.9], "x")
    near = replace(v, p=0.0496, p_adjusted=0.0496)  # holds, yet two digits would print 0.05
    frame = evidence.table([near, replace(v, p=math.nan, p_adjusted=math.nan)])
    assert list(frame["p (adjusted)"]) == ["0.0496", "n/a"]


# --- a verdict in words: numbers to two digits, what a directional claim shows --------------


@pytest.mark.parametrize("x, text", [(-0.0337, "−0.034"), (0.07, "+0.070"), (142.3, "+142"),
                                     (0.0, "0"), (1.0, "+1.0"), (-0.0999, "−0.10"),
                                     (-2.5e-5, "−0.000025"), (9.96, "+10")])
def test_number_keeps_two_significant_digits_with_a_true_minus(x, text):
    assert evidence.number(x) == text


def test_interval_ends_share_the_decimals_of_the_wider_end():
    assert evidence.interval(-0.14, 0.0702) == "[−0.14, +0.07]"
    assert evidence.interval(-0.0881, 0.0094, " pt") == "[−0.088, +0.009] pt"
    assert evidence.interval(float("nan"), float("nan")) == "[no interval]"
    assert evidence.interval(-10.4, -9.72, " pt") == "[−10.4, −9.7] pt"  # not "[−10, −10]"
    assert evidence.interval(-1.0, -0.0098) == "[−1.0, −0.0098]"  # not "[−1.0, 0]"
    # round-off (a smoke run's spread of 4e-15) prints as zero, not sixteen decimals
    assert evidence.interval(-3.9e-15, 3.9e-15) == "[0, 0]"
    assert evidence.number(2.3e-6) == "+0.000002"


def _verdict(outcome: str, direction: str = "greater", **kw) -> evidence.Verdict:
    return evidence.Verdict("claim", direction, -0.0337, -0.14, 0.07, 0.5, 0.5, outcome, 3, 3, "t", **kw)


@pytest.mark.parametrize("direction, outcome, text", [
    ("greater", "holds", "rise shown"), ("greater", "contradicted", "fall shown"),
    ("greater", "undecided", "no rise shown"), ("less", "holds", "fall shown"),
    ("less", "contradicted", "rise shown"), ("less", "undecided", "no fall shown")])
def test_shown_phrases_a_directional_verdict(direction, outcome, text):
    assert evidence.shown(_verdict(outcome, direction)) == text


def test_shown_takes_the_words_of_the_quantity_and_phrases_equivalence():
    assert evidence.shown(_verdict("holds"), up="gain", down="loss") == "gain shown"
    eq = _verdict("holds", "equivalent", margin=0.1)
    assert evidence.shown(eq) == "equal within ±0.1 shown"
    assert evidence.shown(replace(eq, outcome="undecided")) == "neither shown"
    with pytest.raises(TypeError, match="Verdict"):
        evidence.shown("holds")


def test_verdict_line_reads_as_the_issue_asks():
    line = evidence.verdict_line(_verdict("undecided"), "CE's test NLL after the drop")
    assert line == "CE's test NLL after the drop: −0.034 [−0.14, +0.07]: no rise shown"
    v = evidence.compare([1.4, 1.5, 1.3], 1.0, "T > 1")  # a real verdict: holds, a rise
    assert evidence.verdict_line(v, "T − 1").endswith(": rise shown")
    with pytest.raises(ValueError, match="label"):
        evidence.verdict_line(v, " ")


def test_family_cells_give_corrected_verdicts_and_notes_in_order():
    fam = evidence.Family(["x", "y"], min_n=3)
    fam.add("r", "x", [1.4, 1.5, 1.3], 1.0, "a")
    fam.add("r", "y", [1.2], 1.0, "b")
    fam.add("s", "x", [1.0, 1.1, 0.9], 1.0, "c")
    cells = fam.cells()
    assert list(cells) == [("r", "x"), ("r", "y"), ("s", "x")]
    assert cells["r", "y"] == "1 of 3 seeds"
    assert [cells["r", "x"], cells["s", "x"]] == fam.verdicts()


def test_family_of_decided_verdicts_keeps_their_outcomes_and_checks_its_cells():
    rng = np.random.default_rng(3)
    raw = [evidence.compare(rng.normal(d, 1, 6), rng.normal(0, 1, 6), f"claim {i}")
           for i, d in enumerate([0.0, 3.0, 0.5, 4.0])]
    decided = evidence.decide(raw)
    cells = [("r1", "a"), ("r1", "b"), ("r2", "a"), ("r2", "b")]
    fam = evidence.Family.of(decided, cells)
    assert fam.columns == ["a", "b"]
    assert [v.outcome for v in fam.verdicts()] == [v.outcome for v in decided]
    assert [v.p_adjusted for v in fam.verdicts()] == pytest.approx([v.p_adjusted for v in decided])
    with pytest.raises(ValueError, match="same length"):
        evidence.Family.of(decided, cells[:3])
    with pytest.raises(ValueError, match="distinct"):
        evidence.Family.of(decided[:2], [("r", "a"), ("r", "a")])
    with pytest.raises(ValueError, match="column"):
        evidence.Family.of(decided[:1], [("r", "z")], columns=["a"])
