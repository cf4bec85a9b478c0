"""calib.experiments.conformance: every row of the conformance page, pinned.

A peer importable here is run live and its value checked against calib's documented
difference; a peer that is not is read from calib/conformance_frozen.json (value and
version) and checked the same way. A check that fails after a peer's upgrade means the
peer changed a convention or fixed a bug: update the page and refreeze.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from calib import metrics
from calib.experiments import conformance as C

D = C.inputs()
CELLS = C.cells()
RECORDS = C.frozen()
CALIB = C.calib_cells()


def peer_value(row: str, peer: str):
    """The cell's value; a frozen one must be the data file's, with a version."""
    cell = CELLS[(row, peer)]
    assert cell.source.startswith(("live", "frozen")), f"{row}/{peer}: {cell.source}"
    if cell.source.startswith("frozen"):
        record = RECORDS[(row, peer)]
        assert record["version"] and cell.value == record["value"]
    return cell.value


def _ece(probs, labels, closed="right", binary=None, n_bins=D["n_bins"], from_logits=False):
    m = metrics.ECE(n_bins, closed=closed, from_logits=from_logits,
                    **({"binary": binary} if binary else {}))
    m.update(torch.as_tensor(probs), torch.as_tensor(labels))
    return float(m.compute())


# The fixed input P: confidences 1 (wrong), .9 (right) share the top bin in calib; bins
# (.8, 1]: |1 - 1.9|, (.6, .8]: |1 - 1.35|, (.4, .6]: |2 - .95|.
CALIB_BINNED = (0.9 + 0.35 + 1.05) / 6
EXTRA_BIN = (0.1 + 1.0 + 0.35 + 1.05) / 6  # 0.9 alone in [.8, 1), 1 alone in [1, 1]


def test_calib_keeps_a_confidence_of_one_in_the_last_bin_under_both_conventions():
    assert CALIB["bins"].value == pytest.approx(CALIB_BINNED)
    assert metrics.ece(D["P"], D["y"], D["n_bins"], closed="left") == pytest.approx(CALIB_BINNED)


@pytest.mark.parametrize("peer", ["torchmetrics", "relplot", "torch-uncertainty"])
def test_peers_that_give_one_a_bin_of_its_own(peer):
    assert peer_value("bins", peer) == pytest.approx(EXTRA_BIN, abs=1e-6)


@pytest.mark.parametrize("peer", ["netcal", "probmetrics"])
def test_peers_that_keep_one_in_the_last_bin(peer):
    assert peer_value("bins", peer) == pytest.approx(CALIB_BINNED, abs=1e-6)


def test_scikit_learn_bins_as_calib_does():
    stats = metrics.bin_stats(D["P"], D["y"], D["n_bins"])
    full = stats.confidence[stats.counts > 0]
    assert peer_value("bins", "scikit-learn") == pytest.approx(full.tolist(), abs=1e-6)
    assert full[-1] == pytest.approx(0.95)  # 0.9 and 1 in one bin


POSITIVE = (abs(1 - 0.1) + abs(0 - 0.3) + abs(0 - 0.7) + abs(1 - 0.9)) / 4  # p vs y, no two in a bin


@pytest.mark.parametrize("peer", ["torchmetrics", "netcal", "relplot", "torch-uncertainty", "probmetrics"])
def test_binary_ece_of_every_peer_is_calibs_positive_class(peer):
    mine = _ece(D["p"], D["yb"], closed="left", binary="positive")
    assert mine == pytest.approx(POSITIVE)
    assert peer_value("binary", peer) == pytest.approx(mine, abs=1e-6)


def test_calib_binary_default_is_the_top_label():
    # top label: confidences .9, .7, .7, .9, correct 1, 0, 1, 0 -> bins (.6, .8]: |1 - 1.4|, (.8, 1]: |1 - 1.8|
    assert CALIB["binary"].value == pytest.approx((0.4 + 0.8) / 4)
    assert CALIB["binary"].value != pytest.approx(POSITIVE)


def test_scikit_learn_binary_bins_are_the_positive_class():
    stats = metrics.bin_stats_from_confidence(D["p"], D["yb"] == 1, D["n_bins"])
    assert peer_value("binary", "scikit-learn") == pytest.approx(stats.confidence[stats.counts > 0].tolist())


def test_classwise_is_the_mean_of_the_per_class_errors():
    per_class = [metrics.bin_stats_from_confidence(D["P"][:, k], D["y"] == k, D["n_bins"]).ece for k in range(3)]
    assert CALIB["classwise"].value == pytest.approx(np.mean(per_class))
    # torch-uncertainty: the same mean, over torchmetrics' bins (the exact 1 and 0s apart)
    p = torch.as_tensor(D["P"])
    want = np.mean([
        (sum(abs(float((p[:, k][b] - torch.as_tensor(D["y"] == k)[b].double()).sum()))
             for b in [(p[:, k] >= lo) & (p[:, k] < lo + 0.2) for lo in np.arange(5) * 0.2]
             + [p[:, k] == 1]) / 6) for k in range(3)])
    assert peer_value("classwise", "torch-uncertainty") == pytest.approx(want, abs=1e-6)
    assert peer_value("classwise", "relplot") == pytest.approx(EXTRA_BIN)  # its top-label route


def test_debiasing_subtracts_the_estimated_bias():
    plug_in = metrics.l2_ce(D["P"], D["y"], 2, debiased=False)
    bias = metrics.l2_ce_bias(D["P"], D["y"], 2)
    assert CALIB["debiasing"].value == pytest.approx(np.sqrt(max(plug_in**2 - bias, 0)))
    assert CALIB["debiasing"].value < plug_in


@pytest.mark.parametrize("peer,tol", [("netcal", 1e-4), ("scikit-learn", 1e-4), ("probmetrics", 1e-4),
                                      ("torch-uncertainty", 3e-3)])
def test_peers_store_the_inverse_temperature(peer, tol):
    t = CALIB["temperature"].value
    assert t > 1  # the logits are over-confident
    assert peer_value("temperature", peer) * t == pytest.approx(1, abs=tol)


def test_torchmetrics_softmaxes_logits_and_calib_refuses_them():
    assert CALIB["input_refusal"].value.startswith("ValueError: probs must be probabilities")
    mine = _ece(D["G"], D["yg"], closed="left", from_logits=True)
    assert peer_value("input", "torchmetrics") == pytest.approx(mine, abs=1e-6)
    assert CALIB["input"].value == pytest.approx(_ece(D["G"], D["yg"], from_logits=True))


@pytest.mark.parametrize("peer", ["netcal", "probmetrics"])
def test_calibrators_that_take_probabilities_refuse_logits(peer):
    assert str(peer_value("input", peer)).startswith("ValueError")


def test_torchmetrics_3510_an_extra_bin_for_one():
    # both in [.9, 1]: |1/2 - .975| in calib; torchmetrics: |1 - .95|/2 + |0 - 1|/2
    assert C._calib_bug("tm3510") == pytest.approx(0.475)
    assert peer_value("tm3510", "torchmetrics") == pytest.approx(0.525, abs=1e-6), "torchmetrics fixed #3510?"
    assert RECORDS[("tm3510", "torchmetrics==0.11.4")]["value"] == pytest.approx(0.475, abs=1e-6)


def test_torchmetrics_1646_index_minus_one_for_zero():
    assert C._calib_bug("tm1646") == pytest.approx((1 + 2) / 5)
    assert peer_value("tm1646", "torchmetrics") == pytest.approx(0.6, abs=1e-6)  # fixed in the current release
    assert RECORDS[("tm1646", "torchmetrics==0.11.4")]["value"].startswith("RuntimeError: index -1")


def test_netcal_61_mle_temperature_scaling_of_float32_probabilities_does_nothing():
    weight, before, after = peer_value("netcal61", "netcal")
    assert weight == 1.0 and before == after
    inv_t, before, after = C._calib_bug("netcal61")
    assert inv_t == pytest.approx(1 / CALIB["temperature"].value, abs=1e-4) and after < before


def test_every_peer_cell_is_live_frozen_or_documented():
    for (row, peer), cell in CELLS.items():
        assert cell.source.split(" ")[0] in ("live", "frozen", "documented"), (row, peer, cell)
    for row in C.ROWS:
        for peer in C.PEERS:
            assert (row, peer) in CELLS, f"no cell for {row}/{peer}"


def test_frozen_file_names_version_and_probe_of_every_record():
    data = json.loads(C.FROZEN_FILE.read_text())
    assert data["how"]
    for r in data["records"]:
        assert r["version"] and r["probe"].startswith(C.__name__ + "._")
        assert hasattr(C, r["probe"].rsplit(".", 1)[1])


def test_table_and_bugs_have_a_cell_for_every_row():
    t = C.table()
    assert list(t.columns) == ["calib", *C.PEERS] and len(t) == len(C.ROWS)
    assert not t.isna().any().any()
    b = C.bugs()
    assert set(b["how"].str.split(" ").str[0]) <= {"live", "frozen"} and len(b) == len(C.BUGS) + 2
