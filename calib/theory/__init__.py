"""The derivations of the book, done by sympy and checked by numbers.

Every result a chapter states is produced here, symbolically where sympy can do the
algebra and numerically where it cannot, so the chapters *show* the objects and
``tests/test_theory.py`` *checks* them. A result is never typed in where sympy can
derive it: formulas quoted from a paper appear only as the thing a derivation is
compared against.

Sections (papers by author and year, as in the book):

* Focal loss as entropy regularisation (Mukhoti et al. 2020, App. A, student report 2021, Thm 2): Bernoulli's inequality,
  the bound chain ``L_f >= L_CE - gamma H(p) = KL(q||p) + H(q) - gamma H(p)``, and the
  binary optimum of Mukhoti et al. 2020, Fig. A.1.
* The gradient factor ``g(p, gamma)`` (Lin et al. 2024, §4.1), its peak ``p_star`` (``p0`` in Lin et al.
  2024, §4.1), the ``g = 1`` crossing, and a Lambert-W schedule that FLSD-53's rule approximates
  (our reconstruction).
* The Brier identity (Lin et al. 2024, Eq. 12 and App. 8). Its decompositions (Murphy; reliability +
  grouping loss) and proper scoring rules are in :mod:`calib.theory.scoring`; focal bounds for
  every ``gamma >= 0`` in :mod:`calib.theory.focal_bounds`; the GRA update field (curl,
  stability, inverse map) in :mod:`calib.theory.gra_field`.
* The BSCE-GRA optimum (Lin et al. 2024, App. 9) and the fixed point of gradient weighting when the
  weight uses the one-hot label.
* student report 2021, Theorem 1 (scaling logits by ``t > 1`` sharpens the top probability) and Wang et al. 2021, Eq. (1)
  (label smoothing is CE plus a CE against the uniform distribution).

Modules by topic: ``focal`` and ``focal_bounds`` (entropy bounds), ``gradient`` (g and
Lambert W), ``brier`` and ``scoring`` (Brier identity, decompositions, properness),
``gra`` and ``gra_field`` (the GRA optimum, its fixed point and update field),
``smoothing`` (logit scaling, label smoothing). Everything is re-exported here.
"""
from .._optional import need

need("theory", "calib.theory")

from . import focal_bounds, gra_field, scoring
from ._derivation import Derivation
from .brier import (
    brier_decomposition,
    brier_identity,
    brier_identity_coordinate,
    brier_identity_indexed,
    expected_brier,
    monte_carlo_brier,
)
from .focal import (
    bernoulli_gap,
    bernoulli_inequality_proof,
    binary_focal_objective,
    binary_focal_optimum,
    binary_focal_stationarity,
    entropy,
    focal_bound_chain,
    kl_divergence,
)
from .gra import (
    binary_gra_fixed_point_derivation,
    fit_constant_logits,
    fit_linear_logits,
    gra_fixed_point,
    gra_fixed_point_derivation,
    gra_label_weights,
    gra_weight,
    paper_lagrangian_optimum,
    simplex_slice,
    spread_within,
)
from .gradient import (
    flsd53_gamma,
    gradient_factor,
    gradient_factor_derivation,
    gradient_factor_peak,
    gradient_factor_slope,
    gradient_factor_unit_crossing,
    gradient_ratio,
    lambert_gamma,
    lambert_gamma_derivation,
    true_logit_push_peak,
)
from .smoothing import label_smoothing_identity, temperature_sharpening_proof, top_probability

__all__ = ["focal_bounds", "gra_field", "scoring", "Derivation", "bernoulli_inequality_proof", "bernoulli_gap", "entropy", "kl_divergence", "focal_bound_chain", "binary_focal_objective", "binary_focal_stationarity", "binary_focal_optimum", "gradient_factor_derivation", "gradient_factor", "gradient_factor_slope", "gradient_factor_peak", "gradient_factor_unit_crossing", "true_logit_push_peak", "gradient_ratio", "lambert_gamma_derivation", "lambert_gamma", "flsd53_gamma", "brier_identity", "brier_identity_coordinate", "brier_identity_indexed", "expected_brier", "brier_decomposition", "monte_carlo_brier", "paper_lagrangian_optimum", "gra_fixed_point_derivation", "binary_gra_fixed_point_derivation", "gra_weight", "gra_label_weights", "gra_fixed_point", "fit_constant_logits", "fit_linear_logits", "simplex_slice", "spread_within", "temperature_sharpening_proof", "top_probability", "label_smoothing_identity"]
