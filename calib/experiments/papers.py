"""The papers' headline numbers as data: ``calib/paper_results.csv`` and how calib trains each row.

``paper_results.csv`` (package data) holds every number of Lin et al. (2024) Table 1 and
§4.3 (Pearson coefficients), Wang & Golebiowski (2024) Table 1, Wang et al. (2021)
Tables 1-2 and Mukhoti et al. (2020) Table 1 (and the two cells of its Table C.3 that the
book quotes), one row per number, as printed. Chapters read
it instead of typing a paper's number::

    from calib.experiments import papers
    rows = papers.results(paper="mukhoti2020using", dataset="cifar10",
                          method="focal")
    table = papers.beside(our_summary, paper="lin2024uncertainty", table="1",
                          metric="ece", ts="pre")

Schema (one row per printed number; ``#`` lines at the top of the file are comments):

==============  ============================================================================
column          meaning
==============  ============================================================================
paper           bib key in ``book/references.bib`` (:data:`PAPERS` gives the reader's name)
table           the paper's table number as a string (``"1"``, ``"2"``, ``"C.3"``), or
                ``"s4.3"`` for a number quoted in the text of §4.3
dataset         calib's dataset name (``calib.data.datasets()``), or one of
                :data:`PAPER_ONLY_DATASETS` for data calib does not load
model           calib's model name (``calib.models.names()``) of the network the number came
                from (:data:`PAPER_MODELS`), or one of :data:`PAPER_ONLY_MODELS`
method          a loss of ``calib.losses.names()`` or a training method of :data:`METHODS`
metric          ``ece``, ``adaece``, ``classwise_ece``, ``mce``, ``nll``, ``error``,
                ``accuracy``, ``ece_hb`` (ECE after histogram binning), ``pearson_r``,
                ``train_minutes`` (wall-clock training time; table ``timing``)
ts              ``pre`` / ``post``: before / after temperature scaling; empty where the
                distinction does not apply (accuracy, histogram binning, correlations)
value           the number as printed (ECE, MCE, AdaECE, error and accuracy in %)
std             the printed standard deviation over seeds, empty if none was printed
temperature     the printed optimal temperature of a ``post`` row, empty if none
params          the method's hyper-parameters as ``key=value,...`` (calib's keyword names)
note            anything else: number of seeds, how T was chosen, t-test markers (▲ / ▼)
==============  ============================================================================

:func:`results` returns the rows as dicts with ``value``, ``std`` and ``temperature`` as
floats (``None`` when empty).
"""
from __future__ import annotations

import csv
import functools
from importlib import resources
from typing import Any, Iterable, Mapping

__all__ = [
    "COLUMNS", "PAPERS", "PAPER_MODELS", "PAPER_LOSS_KWARGS", "METHODS", "PAPER_ONLY_DATASETS",
    "PAPER_ONLY_MODELS", "results", "printed", "beside",
]

COLUMNS = ("paper", "table", "dataset", "model", "method", "metric", "ts", "value", "std", "temperature",
           "params", "note")

PAPERS: dict[str, str] = {
    "lin2024uncertainty": "Lin et al. (2024)",
    "wang2024unbiased": "Wang & Golebiowski (2024)",
    "wang2021rethinking": "Wang et al. (2021)",
    "mukhoti2020using": "Mukhoti et al. (2020)",
}
"""Bib key -> the name a reader sees."""

PAPER_ONLY_DATASETS = {"20newsgroups": "20 Newsgroups (Wang et al. 2021)",
                       "sst_binary": "Stanford Sentiment Treebank, binary (Mukhoti et al. 2020)"}
"""Datasets of the tables that calib does not load (text data)."""

PAPER_ONLY_MODELS = {"cnn1d_8layer": "8-layer 1-D CNN on 20 Newsgroups (Wang et al. 2021)",
                     "tree_lstm": "Tree-LSTM of Tai et al. (2015) on SST (Mukhoti et al. 2020)"}
"""Networks of the tables that calib does not build."""

PAPER_MODELS: dict[tuple[str, str, str], str] = {
    # (paper, dataset, the paper's name for the net) -> calib registry name
    ("mukhoti2020using", "cifar", "ResNet-50"): "resnet50",
    ("mukhoti2020using", "cifar", "ResNet-110"): "resnet110_bottleneck",
    ("mukhoti2020using", "cifar", "Wide-ResNet-26-10"): "wrn26_10",
    ("mukhoti2020using", "cifar", "DenseNet-121"): "densenet121",
    ("mukhoti2020using", "tiny_imagenet", "ResNet-50"): "resnet50_tiny_imagenet",
    ("lin2024uncertainty", "cifar", "ResNet-50"): "resnet50",
    ("lin2024uncertainty", "cifar", "ResNet-110"): "resnet110_bottleneck",
    ("lin2024uncertainty", "cifar", "Wide-ResNet-26-10"): "wrn26_10",
    ("lin2024uncertainty", "cifar", "DenseNet-121"): "densenet121",
    ("lin2024uncertainty", "tiny_imagenet", "ResNet-50"): "resnet50_tiny_imagenet",
    ("lin2024uncertainty", "gaussian", "two-layer net"): "mlp",
    ("wang2024unbiased", "cifar", "ResNet-18"): "resnet18",
    ("wang2024unbiased", "tiny_imagenet", "ResNet-18"): "resnet18",
    ("wang2021rethinking", "cifar", "ResNet-32"): "resnet32",
    ("wang2021rethinking", "svhn", "ResNet-32"): "resnet32",
    ("wang2021rethinking", "cifar", "ResNet-110"): "resnet110",
}
"""Which calib network each paper's numbers came from (``"cifar"`` covers CIFAR-10 and -100).

* Mukhoti et al. (2020) train with their public code, whose "ResNet-110" is a *bottleneck*
  ImageNet-style ResNet with blocks [3, 4, 26, 3] (``resnet110_bottleneck``, 45.9M
  parameters for 10 classes), not He et al.'s 1.7M-parameter CIFAR ResNet-110
  (``resnet110``); their Tiny-ImageNet ResNet-50 pools the last 8×8 map to 2×2 and feeds
  the 8192 values to the classifier (``resnet50_tiny_imagenet``).
* Lin et al. (2024) state that their training set-up follows Mukhoti et al. (2020) and
  Tao et al. (2023); we take it that the networks are those of the same code (the paper
  does not say more).
* Wang & Golebiowski (2024) use Bohdal et al. (2021)'s default ResNet-18.
* Wang et al. (2021) cite He et al. (2016) for ResNet-32 and ResNet-110 (appendix): the
  CIFAR ResNets.
"""

PAPER_LOSS_KWARGS: dict[tuple[str, str], dict[str, Any]] = {
    ("mukhoti2020using", "mmce"): {"lam": 2.0, "normalization": "code"},
    ("mukhoti2020using", "label_smoothing"): {"alpha": 0.05},
    ("mukhoti2020using", "focal"): {"gamma": 3.0},
    ("lin2024uncertainty", "mmce"): {"lam": 2.0, "normalization": "code"},
    ("lin2024uncertainty", "flsd53"): {"gamma_low": 3.0, "gamma_high": 5.0, "threshold": 0.2},
    ("lin2024uncertainty", "dual_focal"): {"gamma": 5.0},
    ("wang2024unbiased", "focal"): {"gamma": 1.0},
}
"""``calib.losses.make`` keywords that reproduce a paper's row where the defaults do not.

MMCE uses the authors' code's normalisation (``calib.losses.mmce``), on which their λ = 2
was tuned; Lin et al. (2024) give no λ and follow the same code."""

METHODS: dict[str, dict[str, Any]] = {
    "mixup": {"loss": "ce", "train": {"mixup_alpha": 1.0},
              "cli": "--loss ce --mixup 1.0",
              "what": "CE on mixup batches (Zhang et al. 2018; Thulasidasan et al. 2019), calib.train.mixup"},
    "meta_l2_dece": {"loss": "ce", "train": {"meta": "l2_reg", "meta_objective": "dece"},
                     "cli": "--loss ce --meta l2_reg --meta-objective dece",
                     "what": "CE with a meta-learned unit-wise L2 penalty, DECE meta-objective "
                             "(Bohdal et al. 2021; 'CE-DECE' of Wang & Golebiowski 2024)"},
    "meta_l2_sece": {"loss": "ce", "train": {"meta": "l2_reg", "meta_objective": "sece"},
                     "cli": "--loss ce --meta l2_reg --meta-objective sece",
                     "what": "the same with SECE as meta-objective ('CE-SECE')"},
    "gamma_net_dece": {"loss": "focal", "train": {"meta": "gamma_net", "meta_objective": "dece"},
                       "cli": "--loss focal --meta gamma_net --meta-objective dece",
                       "what": "focal loss with a gamma-Net learned on DECE ('FL_γ-DECE')"},
    "gamma_net_sece": {"loss": "focal", "train": {"meta": "gamma_net", "meta_objective": "sece"},
                       "cli": "--loss focal --meta gamma_net --meta-objective sece",
                       "what": "focal loss with a gamma-Net learned on SECE ('FL_γ-SECE')"},
}
"""Rows whose ``method`` is a training procedure rather than a loss: how calib trains them."""


def _float(text: str) -> float | None:
    return float(text) if text.strip() else None


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Any], ...]:
    source = resources.files("calib").joinpath("paper_results.csv")
    with source.open("r", encoding="utf-8") as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"paper_results.csv has columns {reader.fieldnames}, expected {list(COLUMNS)}")
        rows = []
        for row in reader:
            # the number as the paper prints it ("3.00", not 3.0): what tables beside ours show
            row["value_text"], row["std_text"] = row["value"].strip(), row["std"].strip()
            for key in ("value", "std", "temperature"):
                row[key] = _float(row[key])
            rows.append(row)
    return tuple(rows)


def results(**filters: str | Iterable[str]) -> list[dict[str, Any]]:
    """Rows of ``paper_results.csv`` matching every filter, in file order (copies).

    Each filter is a column name with a value or a collection of accepted values, e.g.
    ``results(paper="lin2024uncertainty", table="1", dataset="cifar10", ts=("pre", "post"))``.

    Raises:
        TypeError: a keyword that is not a column (the message lists them).
        ValueError: a filter value that matches no row of that column (likely a typo).
    """
    if unknown := sorted(set(filters) - set(COLUMNS)):
        raise TypeError(f"unknown column(s) {', '.join(unknown)}; columns: {', '.join(COLUMNS)}")
    rows = _load()
    accepted: dict[str, set[str]] = {}
    for key, want in filters.items():
        values = {want} if isinstance(want, str) else set(want)
        known = {str(r[key]) for r in rows}
        if missing := sorted(str(v) for v in values if str(v) not in known):
            raise ValueError(f"{key}={missing} matches no row; known values: {', '.join(sorted(known))}")
        accepted[key] = {str(v) for v in values}
    return [dict(r) for r in rows if all(str(r[k]) in v for k, v in accepted.items())]


def printed(row: Mapping[str, Any]) -> str:
    """A row's number as the paper prints it, digits kept: ``"3.00 ± 0.26"``, ``"4.36"``, or ``""``."""
    value, std = row.get("value_text", ""), row.get("std_text", "")
    if not value:
        return ""
    return value if not std else f"{value} ± {std}"


def beside(
    ours: Any,
    *,
    paper: str,
    table: str | None = None,
    metric: str = "ece",
    ts: str = "pre",
    columns: Mapping[str, str] | None = None,
    **filters: str | Iterable[str],
) -> Any:
    """Our results table with the paper's numbers joined beside it (a pandas DataFrame).

    Args:
        ours: a DataFrame (or anything ``pandas.DataFrame`` accepts) with one row per
            (dataset, model, method); the key columns may carry the sweep's names ``data``
            and ``loss``, which ``columns`` maps (default ``{"data": "dataset", "loss":
            "method"}``).
        paper, table, metric, ts: which of the paper's numbers to join.
        **filters: further :func:`results` filters, e.g. ``params="epsilon=0.05"`` where a
            paper has two rows for one method.

    Returns:
        ``ours`` (keys renamed) with ``paper``, ``paper_std`` and ``paper_temperature``
        columns (NaN where the paper has no such cell) and ``paper_text`` ("4.36" or
        "2.138 ± 0.819"); rows of ours that the paper lacks stay, marked by NaN.
    """
    import pandas as pd

    rename = {"data": "dataset", "loss": "method"} if columns is None else dict(columns)
    frame = pd.DataFrame(ours).rename(columns=rename)
    keys = ["dataset", "model", "method"]
    if missing := [k for k in keys if k not in frame.columns]:
        raise ValueError(f"ours needs the columns {keys} (after renaming {rename}); missing {missing}")
    filters = {**filters, "paper": paper, "metric": metric, "ts": ts}
    if table is not None:
        filters["table"] = table
    rows = results(**filters)
    theirs = pd.DataFrame(
        [{**{k: r[k] for k in keys}, "paper": r["value"], "paper_std": r["std"],
          "paper_temperature": r["temperature"], "paper_text": printed(r)} for r in rows],
        columns=[*keys, "paper", "paper_std", "paper_temperature", "paper_text"],
    )
    if theirs.duplicated(keys).any():
        dupes = theirs[theirs.duplicated(keys, keep=False)][keys].drop_duplicates().to_dict("records")
        raise ValueError(
            f"the paper has several {metric}/{ts} numbers for {dupes}; pass table= or a filter such as params="
        )
    for col in ("paper", "paper_std", "paper_temperature"):
        theirs[col] = theirs[col].astype(float)
    return frame.merge(theirs, on=keys, how="left")
