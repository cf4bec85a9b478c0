"""Experiments built from the lower layers: sweeps, the papers' numbers as data, toy studies.

``sweep``    losses x seeds (x data x models) -> run directories, results.csv, summary.md
``papers``   the papers' table numbers as data (``calib/paper_results.csv``) and how calib trains each row
``ledger``   the committed results ledger (``results/``): its sweeps, provenance and re-derivation
``toy``      small self-contained experiments with a known posterior (Lin et al. 2024, §4.3)
``posthoc_study``  every post-hoc calibrator side by side; validation-size study; the estimators' bias

The toy studies are re-exported here: ``from calib import experiments; experiments.toy_weight_correlation()``.
"""
from . import ledger, papers, posthoc_study, sweep, toy
from .toy import *  # noqa: F401,F403
from .toy import __all__ as _toy_all

__all__ = ["ledger", "papers", "posthoc_study", "sweep", "toy", *_toy_all]
