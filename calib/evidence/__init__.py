"""The book's statistics: is a difference between two training methods real at this scale?

A chapter trains each method with a few seeds and evaluates every run on one test set.
Two sources of noise stand between its numbers and the truth:

* **seed noise**: another initialisation and batch order gives another network;
* **test-set noise**: another draw of test images gives another estimate of the same
  network's ECE or NLL (:func:`test_se`, :func:`ece_noise`).

The binned ECE also has a **bias**, which is not noise: a perfectly calibrated model's
15-bin ECE is about 3 % at 1,000 test images and 1 % at 10,000 (:func:`ece_bias`), for
every seed alike. It shifts levels and shrinks calibrated-against-miscalibrated
differences; :func:`debiased_ce` (Kumar, Liang & Ma 2019) estimates the error without it.

:func:`compare` takes two methods' per-seed values of a metric and returns a
:class:`Verdict`: the mean difference with a confidence interval, a p-value and one of
``holds`` / ``contradicted`` / ``undecided`` for the stated direction. Seeds pair when
both methods ran the same seeds (``scipy.stats.ttest_rel``), else Welch's test
(``ttest_ind(equal_var=False)``); a constant ``b`` gives a one-sample test
(``ttest_1samp``). Given ``test_se`` (a bootstrap over test examples), the interval
counts both noises: ``se² = s_d²/n + test_se²`` with Welch–Satterthwaite degrees of
freedom. A side with one run needs ``seed_sd`` (and ``seed_df`` for a pilot's estimate).
:func:`decide` corrects a family of verdicts together (Holm 1979, or Benjamini–Hochberg
via ``scipy.stats.false_discovery_control``), an equivalence claim's two hypotheses included.

:func:`detectable_difference` answers the planning question: the smallest true
difference that ``n_seeds`` seeds on one test set of ``n_test`` images decide at a given
power, by the procedure above.

>>> from calib import evidence
>>> ce, focal = [7.1, 8.0, 7.6], [2.0, 2.9, 1.7]
>>> v = evidence.compare(ce, focal, "CE's ECE above focal's", unit="%")
>>> v.outcome
'holds'
"""
from __future__ import annotations

from .noise import (
    Metric,
    _calibrated_sample,
    _confidences,
    compare_runs,
    debiased_ce,
    ece_bias,
    ece_noise,
    entropy_of_wrong,
    nll_of_wrong,
    noise_floor,
    test_se,
)
from .power import detectable_difference
from .verdict import OUTCOMES, Direction, Family, Verdict, _p_text, compare, decide, table, tally
from .words import interval, number, p_value, shown, verdict_line

__all__ = ["Verdict", "Family", "compare", "decide", "test_se", "compare_runs", "noise_floor",
           "ece_bias", "ece_noise", "debiased_ce", "detectable_difference", "table", "tally",
           "entropy_of_wrong", "nll_of_wrong", "OUTCOMES", "Direction", "Metric", "shown", "verdict_line",
           "number", "interval", "p_value"]
# private helpers the tests reach through the package (kept importable as before the split)
_PRIVATE = (_calibrated_sample, _confidences, _p_text)
