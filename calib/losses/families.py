"""The catalogue of losses: each registered loss's family, its formula and the paper it comes from.

The rows are the field guide's catalogue (the chapter on calibration losses shows them as a
table); ``tests/test_losses.py`` checks that every name of :func:`calib.losses.names` has
one, so a loss added to the registry without a row here fails the tests and the book.

Families: ``"proper scoring rule"`` (CE, Brier), ``"CE + penalty"`` and ``"CE + batch
penalty"``, ``"loss-weighted"`` (``u · CE``, Lin et al. 2024, Eq. 6), ``"gradient-weighted"``
(``∇ = u ∇CE``, Lin et al. 2024, Eq. 9) and ``"batch objective"`` (a differentiable
estimate of the calibration error of a whole batch).
"""
from __future__ import annotations

from typing import NamedTuple

from .registry import _lookup, names

_L24, _M20, _W21 = "Lin et al. 2024", "Mukhoti et al. 2020", "Wang et al. 2021"
_S21, _WG24 = "student report 2021", "Wang & Golebiowski 2024"


class LossEntry(NamedTuple):
    """One loss of the catalogue: ``family``, ``formula`` (of the loss or of its gradient) and ``source``."""

    family: str
    formula: str
    source: str


CATALOGUE: dict[str, LossEntry] = {
    "ce": LossEntry("proper scoring rule", "−log p_y", f"{_M20}, §3"),
    "label_smoothing": LossEntry(
        "CE + penalty",
        "CE against (1−ε)e_y + ε/K, or (1−ε)e_y + ε(1−e_y)/(K−1)",
        f"{_W21}, §3; {_M20}, §4",
    ),
    "logit_norm": LossEntry("CE + penalty", "CE + α‖z‖_p", f"{_S21}, §2.3; {_W21}, §3"),
    "entropy_reg": LossEntry("CE + penalty", "CE − α H(p̂)", f"{_S21}, §2.3"),
    "brier": LossEntry("proper scoring rule", "Σ_k (p̂_k − (e_y)_k)²", f"{_M20}, §4; {_L24}, §3"),
    "mmce": LossEntry("CE + batch penalty", "CE + λ MMCE_w", f"Kumar et al. 2018; {_M20}, §4"),
    "focal": LossEntry("loss-weighted", "(1−p_y)^γ · CE", f"{_M20}, §3; {_L24}, Eq. 4"),
    "flsd53": LossEntry("loss-weighted", "focal with γ = 5 if p_y < 0.2 else 3", f"{_L24}, §5, App. 11 (written with the predicted class's p̂_c; calib uses p_y)"),
    "dual_focal": LossEntry("loss-weighted", "(1−p_y+p_j)^γ · CE", f"Tao et al. 2023; {_L24}, Eq. 5"),
    "inverse_focal": LossEntry("loss-weighted", "(1+p_y)^γ · CE", f"{_W21}, §5.2, Eq. 4"),
    "bsce": LossEntry("loss-weighted", "‖p̂−e_y‖_β^γ · CE", f"{_L24}, §4.3"),
    "focal_gra": LossEntry("gradient-weighted", "∇ = (1−p_y)^γ ∇CE", f"{_L24}, §5.3"),
    "flsd53_gra": LossEntry(
        "gradient-weighted", "∇ = (1−p_y)^γ ∇CE, γ = 5 if p_y < 0.2 else 3", f"{_L24}, Table 2 (FLSD-GRA)"
    ),
    "dual_focal_gra": LossEntry("gradient-weighted", "∇ = (1−p_y+p_j)^γ ∇CE", f"{_L24}, §5.3"),
    "bsce_gra": LossEntry("gradient-weighted", "∇ = ‖p̂−e_y‖_β^γ ∇CE", f"{_L24}, §4.3, Eq. 14"),
    "dece": LossEntry("batch objective", "soft-binned ECE", f"Bohdal et al. 2021; {_WG24}"),
    "ce_dece": LossEntry("CE + batch penalty", "CE + λ DECE", "calib's own variant (DECE: Bohdal et al. 2021)"),
    "sece": LossEntry("batch objective", "kernel-smoothed ECE", f"{_WG24}, §4.2"),
    "ce_sece": LossEntry("CE + batch penalty", "CE + λ SECE", f"calib's own variant (SECE: {_WG24}, §4.2)"),
}

COLUMNS = ("family", "loss (or its gradient)", "source", "module")


def catalogue() -> dict[str, dict[str, str]]:
    """The catalogue as table rows, ``{name: {column: text}}`` in the order of :func:`names`.

    Columns are :data:`COLUMNS`: the family, the formula, the source and the ``nn.Module``
    class :func:`calib.losses.make` builds. A chapter shows it with
    ``pandas.DataFrame.from_dict(catalogue(), orient="index")``.

    Raises:
        ValueError: a registered loss has no row in :data:`CATALOGUE` (the message names it).
    """
    missing = sorted(set(names()) - set(CATALOGUE))
    if missing:
        raise ValueError(f"registered loss(es) without a catalogue row: {', '.join(missing)}")
    return {
        name: dict(zip(COLUMNS, (*CATALOGUE[name], _lookup(name)[1].__name__)))
        for name in names()
    }
