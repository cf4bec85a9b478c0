"""calib.experiments.scores: per-example test outcomes of a run, and their ECE."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calib import evidence, metrics, posthoc
from calib.experiments import scores


def _run(tmp_path, seed=0, n=400, k=5):
    g = torch.Generator().manual_seed(seed)
    rec = {"val_logits": 3 * torch.randn(n, k, generator=g), "val_labels": torch.randint(0, k, (n,), generator=g),
           "test_logits": 3 * torch.randn(n, k, generator=g), "test_labels": torch.randint(0, k, (n,), generator=g)}
    out = tmp_path / f"run{seed}"
    out.mkdir()
    torch.save(rec, out / "logits.pt")
    return out, rec


def test_raw_and_ts_scores_give_the_ece_of_the_probabilities(tmp_path):
    out, rec = _run(tmp_path)
    for post, t in (("raw", None), ("ts", 1.7)):
        s = scores.run_scores(out, post, temperature=t)
        probs = torch.softmax(rec["test_logits"].double() / (t or 1.0), 1)
        assert s.shape == (400, 2)
        assert scores.score_ece(s) == pytest.approx(metrics.ece(probs, rec["test_labels"]), abs=1e-12)


def test_hb_scores_match_histogram_binning(tmp_path):
    out, rec = _run(tmp_path)
    hb = posthoc.HistogramBinning(15).fit(rec["val_logits"], rec["val_labels"])
    conf = hb.predict_confidence(rec["test_logits"])
    correct = hb.predict(rec["test_logits"]) == rec["test_labels"]
    s = scores.run_scores(out, "hb")
    assert scores.score_ece(s) == pytest.approx(metrics.bin_stats_from_confidence(conf, correct, 15).ece)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1 / 15, 2 / 15, 0.2, 0.5, 7 / 15, 1.0]) | st.floats(0, 1), min_size=1,
                max_size=60), st.integers(1, 20), st.integers(0, 2 ** 31))
def test_score_ece_equals_the_library_ece_on_and_beside_every_edge(conf, n_bins, seed):
    c = np.array(conf)
    correct = (np.random.default_rng(seed).random(c.size) < 0.5).astype(float)
    expected = metrics.bin_stats_from_confidence(torch.tensor(c), torch.tensor(correct > 0), n_bins).ece
    assert scores.score_ece(np.stack([c, correct], 1), n_bins=n_bins) == pytest.approx(expected, abs=1e-12)


def test_scores_feed_compare_runs(tmp_path):
    a = [scores.run_scores(_run(tmp_path, s)[0], "raw") for s in range(3)]
    b = [scores.run_scores(_run(tmp_path, 10 + s)[0], "ts", temperature=3.0) for s in range(3)]
    v = evidence.compare_runs(scores.score_ece, a, b, scores.labels_of(a), "raw above T=3", scale=100, n_boot=50)
    assert v.effect == pytest.approx(100 * (np.mean([scores.score_ece(x) for x in a])
                                            - np.mean([scores.score_ece(x) for x in b])))
    assert "test-set bootstrap" in v.test and v.test_se > 0
    assert evidence.compare([1.0, 2.0, 3.0], [0.0, 1.0, 1.5], "seeds only").test_se == 0.0


def test_bad_arguments_are_named(tmp_path):
    out, _ = _run(tmp_path)
    with pytest.raises(ValueError, match="post must be one of"):
        scores.run_scores(out, "iso")
    with pytest.raises(ValueError, match="temperature is given exactly when post='ts'"):
        scores.run_scores(out, "ts")
    with pytest.raises(ValueError, match="temperature is given exactly when post='ts'"):
        scores.run_scores(out, "raw", temperature=2.0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        scores.run_scores(out, "ts", temperature=-1.0)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        scores.score_ece(np.zeros((3, 3)))
    with pytest.raises(TypeError, match="n_bins must be an int"):
        scores.score_ece(np.zeros((3, 2)), n_bins=1.5)
