"""Every training loss of the five papers: a functional core, thin modules and a registry.

Each loss is a function ``loss(logits, targets, ..., reduction="mean", weight=None,
ignore_index=-100)`` on raw logits with the conventions of
``torch.nn.functional.cross_entropy``: logits ``(N, K)`` or ``(N, K, d1, ...)``; targets
integer labels ``(N, d1, ...)`` or probabilities of the logits' shape (mixup, smoothed
labels: ``Σ_k q_k ℓ_k``, where ``ℓ_k`` is the loss had the label been k, so a one-hot
target gives the integer-label value); class ``weight`` ``(K,)``; rows labelled
``ignore_index`` drop out; ``reduction`` ``"mean"``, ``"sum"`` or ``"none"``
(:mod:`calib.losses._core` has the details). Every loss compiles with
``torch.compile(fullgraph=True)``: the value checks are skipped under compile. Modules
wrap them (``FocalLoss(gamma=3.0, weight=w)``) and :func:`make` builds a module from its
registry name (:func:`names`)::

    from calib import losses
    loss = losses.focal_loss(logits, y, gamma=3.0)
    criterion = losses.make("bsce_gra", gamma=4.0, norm=2.0)

Conventions, shared by every loss:

* **Numerics.** Everything is computed from ``log_softmax`` (never ``log(softmax)``), in
  float32 (float64 inputs stay float64) and with autocast switched off inside the loss, so
  ``torch.autocast`` (bf16/fp16) changes only the rounding of the incoming logits. Weights
  such as ``(1 − p_y)^γ`` are formed in log space (:mod:`calib.losses.uncertainty`), so values and
  gradients stay finite for logits up to ±1e4, for ``p_y → 1`` and for ``0 < γ < 1``.
* **Loss weighting vs gradient weighting** (Lin et al. (2024), §4). ``focal``, ``dual_focal`` and ``bsce``
  are ``u · CE`` and differentiate through the weight ``u``. Their ``*_gra`` twins use the
  same ``u`` *detached*: the value is ``u · CE`` but the gradient is exactly ``u · ∇CE``.
  Only that gradient matters for training; Lin et al. 2024, Eq. 10 and 14 define the loss as its integral.
* **Batch-level objectives** (``mmce``, ``dece``, ``sece``) measure a whole batch: they take
  ``(N, K)`` logits and integer labels only, without ignored rows or class weights. Their
  ``"mean"`` is the batch value, ``"none"`` repeats it for every sample and ``"sum"`` is N
  times it, so that ``mean == sum / N == none.mean()`` holds for every loss here. As
  penalties they are added to the mean CE: ``ce_dece`` is ``CE + λ·DECE`` and ``ce_sece`` is
  ``CE + λ·SECE``, calib's own direct-penalty variants (Wang & Golebiowski's Table 1 rows
  "CE-DECE"/"CE-SECE" are meta-learned L2 regularisation, :mod:`calib.train.meta`);
  ``mmce`` is always ``CE + λ·MMCE_w``, as Kumar et al. train it.

Sources: Lin et al. (2024) (BSCE-GRA), Wang & Golebiowski (2024) (gamma-Net + SECE), the
student report (2021) (a comparison of regularisers), Wang et al. (2021) (calibrated vs
calibratable) and Mukhoti et al. (2020) (focal loss).

Layout: ``regularisers`` (CE, label smoothing, logit norm, entropy, Brier), ``focal``
(loss-weighted ``u · CE``), ``gra`` (gradient-weighted twins), ``batch`` (MMCE, DECE, SECE),
``modules`` (``nn.Module`` wrappers), ``registry`` (:func:`make`, :func:`names`),
``families`` (:func:`catalogue`: each loss's family, formula and source) and
``uncertainty`` (the weights ``u_FL``, ``u_DFL``, ``u_gBS``).
"""
from . import uncertainty
from .batch import ce_dece_loss, ce_sece_loss, dece, dece_loss, mmce, mmce_loss, sece_loss
from .focal import bsce_loss, dual_focal_loss, flsd53_loss, focal_loss, inverse_focal_loss
from .gra import bsce_gra_loss, dual_focal_gra_loss, flsd53_gra_loss, focal_gra_loss, uncertainty_gra
from .modules import (
    BrierLoss,
    BSCEGRALoss,
    BSCELoss,
    CEDECELoss,
    CELoss,
    CESECELoss,
    DECELoss,
    DualFocalGRALoss,
    DualFocalLoss,
    EntropyRegLoss,
    FLSD53GRALoss,
    FLSD53Loss,
    FocalGRALoss,
    FocalLoss,
    InverseFocalLoss,
    LabelSmoothingLoss,
    LogitNormLoss,
    MMCELoss,
    SECELoss,
    UncertaintyGRALoss,
)
from .families import CATALOGUE, catalogue
from .registry import functional, is_batch_level, make, names, true_logit_response
from .regularisers import brier_loss, cross_entropy, entropy_reg_loss, label_smoothing_loss, logit_norm_loss

__all__ = [
    # functional core
    "cross_entropy", "label_smoothing_loss", "logit_norm_loss", "entropy_reg_loss", "brier_loss",
    "mmce", "mmce_loss", "focal_loss", "flsd53_loss", "dual_focal_loss", "inverse_focal_loss",
    "bsce_loss", "focal_gra_loss", "flsd53_gra_loss", "dual_focal_gra_loss", "bsce_gra_loss", "uncertainty_gra",
    "dece", "dece_loss", "ce_dece_loss", "sece_loss", "ce_sece_loss",
    # modules
    "CELoss", "LabelSmoothingLoss", "LogitNormLoss", "EntropyRegLoss", "BrierLoss", "MMCELoss",
    "FocalLoss", "FLSD53Loss", "DualFocalLoss", "InverseFocalLoss", "BSCELoss", "FocalGRALoss",
    "FLSD53GRALoss", "DualFocalGRALoss", "BSCEGRALoss", "UncertaintyGRALoss", "DECELoss", "SECELoss",
    "CEDECELoss", "CESECELoss",
    # registry and analysis
    "uncertainty", "make", "names", "functional", "is_batch_level", "true_logit_response",
    "CATALOGUE", "catalogue",
]
