"""Experiments built from the lower layers: sweeps, the papers' numbers as data, toy studies.

``sweep``    losses x seeds (x data x models) -> run directories, results.csv, summary.md
``papers``   the papers' table numbers as data (``calib/paper_results.csv``) and how calib trains each row
``tables``   seed bookkeeping for a chapter's tables: runs by loss, mean ± std, t-tests, paper cells
``bench``    a bench of regularisers: each run's coefficient, the best one, values seed by seed
``scores``   each test example's confidence and correctness in a run, for calib.evidence's bootstrap
``plans``    a paper's table as a run plan, and our numbers beside the paper's
``compare``  a few training methods on one case over seeds, and their table beside a paper's
``ledger``   the committed results ledger (``results/``): its sweeps, provenance and re-derivation
``meta_ledger``  the ledger's meta-learning rows of Wang & Golebiowski (2024): their labels and learned γ
``reduction_ledger``  the ledger's reduction study: CE, focal, BSCE-GRA under the mean, clipping and the summed loss
``shift``    a model over corruptions x severities: accuracy, ECE, NLL as a tidy table (Ovadia et al. 2019)
``toy``      small self-contained experiments with a known posterior (Lin et al. 2024, §4.3)
``posthoc_study``  every post-hoc calibrator side by side; validation-size study; the estimators' bias
``conformance``  calib's conventions beside six peer libraries' on fixed inputs (live, frozen or documented)

The toy studies are re-exported here: ``from calib import experiments; experiments.toy_weight_correlation()``.
"""
from .._optional import need

need("tables", "calib.experiments")

from . import (bench, compare, conformance, ledger, meta_ledger, papers, plans, posthoc_study, reduction_ledger, scores, shift,
               sweep, tables, toy)
from .toy import *  # noqa: F401,F403
from .toy import __all__ as _toy_all

__all__ = ["bench", "compare", "conformance", "ledger", "meta_ledger", "papers", "plans", "posthoc_study", "reduction_ledger", "scores", "shift", "sweep", "tables", "toy", *_toy_all]
