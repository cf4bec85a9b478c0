"""calib.losses.families: one row per registered loss, shown as the field guide's table."""
from __future__ import annotations

import pytest

from calib import losses
from calib.losses import families as C

FAMILIES = {"proper scoring rule", "CE + penalty", "CE + batch penalty", "loss-weighted",
            "gradient-weighted", "batch objective"}


def test_every_registered_loss_has_exactly_one_row():
    assert sorted(losses.CATALOGUE) == losses.names()
    assert list(losses.catalogue()) == losses.names()


def test_rows_name_family_formula_source_and_module():
    rows = losses.catalogue()
    for name, row in rows.items():
        assert tuple(row) == C.COLUMNS
        assert row["family"] in FAMILIES, name
        assert row["loss (or its gradient)"] and row["source"], name
        assert row["module"] == type(losses.make(name)).__name__
    assert rows["focal_gra"]["module"] == "FocalGRALoss"
    assert rows["bsce_gra"]["family"] == "gradient-weighted"
    assert rows["bsce"]["family"] == "loss-weighted"


def test_gradient_weighted_rows_are_the_registry_gra_losses():
    gra = {n for n, e in losses.CATALOGUE.items() if e.family == "gradient-weighted"}
    assert gra == {n for n in losses.names() if n.endswith("_gra")}
    batch = {n for n, e in losses.CATALOGUE.items() if "batch" in e.family}
    assert batch == {n for n in losses.names() if losses.is_batch_level(n)}


def test_sources_name_papers_by_author_and_year():
    for name, entry in losses.CATALOGUE.items():
        assert any(str(y) in entry.source for y in (2018, 2020, 2021, 2023, 2024)), name


def test_a_registered_loss_without_a_row_is_named(monkeypatch):
    monkeypatch.delitem(C.CATALOGUE, "sece")
    with pytest.raises(ValueError, match="sece"):
        losses.catalogue()
