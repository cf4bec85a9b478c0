"""Meta-regularisation: a gamma-Net learns a focal-loss gamma for every sample (Wang & Golebiowski 2024).

Wang & Golebiowski (2024) ("Towards unbiased calibration using meta-regularization") train a backbone
``f_theta`` with focal loss whose gamma comes, sample by sample, from a small meta-network
(gamma-Net, parameters ``phi``). The gamma-Net is trained to minimise a smooth,
differentiable calibration error (SECE, Wang & Golebiowski (2024), §4.2) measured on a held-out *meta-validation*
batch, through a one-step look-ahead of the backbone (Wang & Golebiowski (2024), §3.3, Eq. 2; the scheme of
Luketina et al. 2016 that Wang & Golebiowski (2024) cites, also used by Bohdal et al.'s meta-calibration)::

    gamma_i <- gammaNet_phi(h_theta(x_i))     (Wang & Golebiowski (2024), Eq. 3-4)
    theta'  <- theta - alpha * grad_theta L_FL(theta, gamma(phi))     (look-ahead)
    phi     <- phi - meta-step on  d/dphi SECE(f_theta'(x_meta), y_meta)
    theta   <- optimiser step on L_FL(theta, gamma(phi_new))     (the real update)

We know of no public implementation of Wang & Golebiowski (2024); this package is written from the paper. Where the
paper is exact we follow it; where it is silent these are **our choices**:

1. *gamma-Net layout* (Wang & Golebiowski (2024), Eq. 3-4, exact): ``a = x A``, ``p = softmax(a)``,
   ``x~ = p A^T``, ``gamma = |x~ W| / tau`` with ``A`` in R^{d x k}, ``W`` in R^{d x 1},
   ``tau = 0.01`` and ``k`` = number of classes (Wang & Golebiowski (2024), §5). No bias terms (none in Eq. 4).
2. *Initialisation to gamma = 1* (Wang & Golebiowski (2024), §5 says "We initialize gamma = 1.0", not how).
   ``x~`` is a convex combination of the k columns ``A_j`` of ``A`` (the softmax weights
   sum to 1), so ``x~ W = sum_j p_j (A_j . W)``. We draw ``A`` and ``W`` at random and then
   shift every column along ``W`` so that ``A_j . W = tau * gamma0`` for all j. Then
   ``gamma = gamma0`` *exactly*, for every input, at initialisation, while the heads still
   differ in every direction orthogonal to ``W`` (so the gamma-Net can learn to spread).
3. *Features are detached* before entering the gamma-Net: gamma depends on theta only
   through its input values, not through gradients. Otherwise the inner step would also
   train the backbone to change its features so as to raise gamma and shrink the focal loss.
4. *The look-ahead step* is plain gradient descent on every backbone parameter (the
   whole network, not only its last layer) with ``alpha`` = the backbone
   optimiser's current learning rate (momentum and weight decay are left out of the
   look-ahead, as in Luketina et al.), on the same training batch as the real update.
5. *Order of updates*: look-ahead, gamma-Net update, then the real backbone update with
   the gamma of the *updated* gamma-Net on the same batch. Wang & Golebiowski (2024), §3.3
   gives the order theta step, then phi step ("First, ... L_FLgamma is used to optimize ...
   theta on D_train ... Following that, the validation mini batch ... to optimize ... phi"),
   the scheme of Luketina et al., in which phi is differentiated through the real theta
   step. calib differentiates through a look-ahead copy of that step and then re-does the
   theta step for real with the updated gamma: one backbone step more per iteration, and
   the real step sees the new gamma. The paper's order is not offered as an option.
   (Algorithm 1 of the paper's supplement is not available to us.)
6. *Hypergradient*: exact second order by default (``create_graph=True`` through the
   inner gradient). ``order="first"`` uses first derivatives only: the mixed second
   derivative is replaced by a central finite difference of first derivatives, as in
   DARTS (Liu et al. 2019, Eq. 7-8). The MAML-style "first-order" shortcut (treat
   theta' as independent of phi) is *not* offered: SECE does not depend on phi directly
   (Wang & Golebiowski (2024), §3.3), so that shortcut gives a hypergradient of exactly zero.
7. *Meta-optimiser*: Adam (Wang & Golebiowski (2024) cites Kingma & Ba but gives no
   learning rate), with Adam's own default ``1e-3``. With ``tau = 0.01`` gamma moves 100
   times faster than ``x~ W``, so the learning rate matters: chapter 8 and the ledger's
   ``gamma_net_lr`` sweep show how far the mean gamma travels at each.
8. *BatchNorm in the look-ahead*: the backbone runs in its current mode on the
   meta-validation batch, with *copies* of its buffers, so the running statistics are
   updated only by the real training batch.
9. *Focal loss reduction*: the mean over the batch (the authors' code is not public, so
   ``loss_reduction="sum"`` is refused for meta runs).
10. *Split*: the training set is split 8:1:1 into train / validation / meta-validation
    (Wang & Golebiowski (2024), §5) by a seeded random permutation; validation drives model selection, the
    meta-validation split feeds SECE.

SECE is the paper's (§4.2): its accuracy term is the all-pairs soft accuracy of
meta-calibration (:func:`calib.metrics.soft_accuracy`, τ = 0.01, shared with DECE), so the
meta-gradient flows through the accuracies as well as the confidences.

The objective may be swapped: ``objective="dece"`` gives Wang & Golebiowski (2024)'s FL_gamma-DECE baseline
(Bohdal et al.'s differentiable ECE in place of SECE).

Modules: ``gamma_net`` (the gamma-Net, objectives, look-ahead and hypergradient), ``base``
(:class:`MetaLearningTrainer`, what both trainers share: the meta split and loader, settings,
checkpointed meta state), ``trainer`` (:class:`MetaTrainer`, ``meta="gamma_net"``) and ``l2``
(the meta-learned L2 baselines, :class:`L2MetaTrainer`, ``meta="l2_reg"``).
:func:`calib.train.make_trainer` picks between them by ``TrainConfig.meta``.
"""
from .gamma_net import (
    OBJECTIVES,
    TAU,
    GammaNet,
    TinyBackbone,
    check_hypergradient,
    gamma_from_features,
    hypergradient,
    lookahead,
    meta_objective,
    meta_split,
    meta_step,
    split_811,
)
from .base import MetaLearningTrainer, carve_meta_split
from .l2 import L2_DEFAULTS, L2MetaTrainer, l2_hypergradient, l2_meta_step, l2_penalty
from .trainer import META_DEFAULTS, MetaTrainer

__all__ = ["MetaLearningTrainer", "carve_meta_split", "L2MetaTrainer", "L2_DEFAULTS", "l2_penalty", "l2_hypergradient", "l2_meta_step", "TAU", "OBJECTIVES", "gamma_from_features", "GammaNet", "meta_objective", "lookahead", "hypergradient", "check_hypergradient", "TinyBackbone", "meta_step", "split_811", "meta_split", "MetaTrainer", "META_DEFAULTS"]
