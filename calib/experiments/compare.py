"""A few training methods on one case over seeds, and their table beside a paper's.

A chapter names a *case* (data, model, schedule) and its *methods* (a ``TrainConfig``'s
loss and meta keywords each) and gets one run record per method and seed::

    from calib.experiments import compare
    case = dict(data="cifar10", model="resnet20", model_kwargs={}, epochs=15,
                batch_size=128, lr=0.1, weight_decay=5e-4)
    methods = {"CE": dict(loss="ce"),
               "FL_γ-SECE": dict(loss="focal", meta="gamma_net", meta_objective="sece")}
    runs = compare.run_methods(case, methods, seeds=1)
    ours = compare.metric_rows(runs)                        # method -> (seeds, 6) array
    compare.beside_paper(ours, methods, paper="wang2024unbiased", model="resnet18",
                         datasets={"cifar10": "paper, C-10"}, label="ours (colab)")

The schedule is Wang & Golebiowski (2024), §5 scaled to the case's epochs: SGD with
momentum 0.9, the learning rate divided by 10 after 150/350 and 250/350 of the epochs.
A ``meta="gamma_net"`` method trains with :class:`calib.train.meta.MetaTrainer` (the 8:1:1
split of §5), every other with :class:`calib.train.Trainer`. A case's optional
``protocol`` holds the TrainConfig fields of :data:`PROTOCOL_KEYS` for every run (e.g.
``{"select": "best_val"}``, the paper's model selection); without it every run is reported
after its last epoch, with T fitted by NLL, the loss averaged and no gradient clipping.
The paper's numbers come from ``calib/paper_results.csv``
(:mod:`calib.experiments.papers`), printed as the paper prints them.

:func:`method_verdict` tests one method against another on their runs' test predictions
(:mod:`calib.evidence`), and :func:`ts_probs` gives a method's test probabilities after
its fitted temperature (the paper's "CE (TS)" row).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from .. import evidence
from ..data import Splits, gaussian_splits, load
from ..train import TrainConfig, make_trainer
from .tables import mean_std, paper_cell

__all__ = ["COLUMNS", "HEADS", "DIGITS", "PROTOCOL_KEYS", "load_case", "train_method", "run_methods",
           "metric_rows", "paper_method", "beside_paper", "ts_probs", "method_verdict"]

COLUMNS = ("error", "nll", "ece", "mce", "adaece", "classwise_ece")
"""The columns of Wang & Golebiowski (2024), Table 1 (error, ECE, MCE, AdaECE, classwise ECE in %; NLL in nats)."""
HEADS = ("Error", "NLL", "ECE", "MCE", "AdaECE", "Classwise-ECE")
DIGITS = (1, 2, 1, 1, 1, 2)
"""Decimals per column of our cells: NLL and classwise ECE are small numbers."""

_CASE_KEYS = ("data", "model", "model_kwargs", "epochs", "batch_size", "lr", "weight_decay")
PROTOCOL_KEYS = ("select", "ts_method", "ts_grid_step", "clip_grad", "loss_reduction")
"""TrainConfig fields a case's ``protocol`` may set for all its runs (model selection, the
temperature fit, gradient clipping, the loss reduction; see :mod:`calib.train.presets`)."""


def load_case(case: Mapping[str, Any], seed: int) -> Splits:
    """One run's data: a fresh Gaussian mixture per seed (``data="gaussian"``, ``case["data_kwargs"]``)
    or a named dataset with a 5,000-image validation split drawn by ``seed``."""
    if case["data"] == "gaussian":
        return gaussian_splits(seed, **case.get("data_kwargs", {}))
    return load(case["data"], val_size=5000, split_seed=seed, download=True)


def _check_case(case: Mapping[str, Any]) -> None:
    if missing := [k for k in _CASE_KEYS if k not in case]:
        raise ValueError(f"case lacks the key(s) {missing}; it needs {list(_CASE_KEYS)}")
    protocol = case.get("protocol", {})
    if not isinstance(protocol, Mapping):
        raise TypeError(f"case['protocol'] must be a dict of TrainConfig fields, got {type(protocol).__name__}")
    if unknown := sorted(set(protocol) - set(PROTOCOL_KEYS)):
        raise ValueError(f"case['protocol'] has unknown key(s) {unknown}; allowed: {list(PROTOCOL_KEYS)}")


def train_method(case: Mapping[str, Any], method: Mapping[str, Any], seed: int, data: Splits) -> dict[str, Any]:
    """Train one method on ``data`` and return its run record.

    Returns a dict with ``metrics`` (``Trainer.fit``'s summary, ``pre_ts`` and ``post_ts``),
    ``history`` (one dict per epoch), ``probs`` (float64 test probabilities of the selected
    epoch), ``labels``, ``gammas`` (the learned γ of every test example, or None without a
    γ-Net) and ``seed``. ``case["protocol"]`` (optional) sets the fields of :data:`PROTOCOL_KEYS`.
    """
    _check_case(case)
    epochs = case["epochs"]
    # a run of a few epochs keeps only the milestones that fall on an epoch >= 1
    milestones = tuple(sorted({m for m in (epochs * 150 // 350, epochs * 250 // 350) if m >= 1}))
    cfg = TrainConfig(
        data=case["data"], model=case["model"], model_kwargs=case["model_kwargs"],
        epochs=epochs, milestones=milestones,
        batch_size=case["batch_size"], lr=case["lr"], momentum=0.9,
        weight_decay=case["weight_decay"], seed=seed, progress=False,
        **{**dict(case.get("protocol", {})), **method},
    )
    trainer = make_trainer(cfg, data=data)  # the trainer of cfg.meta, smoke caps applied
    result = trainer.fit()
    test_logits, test_labels = trainer.predict("test")
    return {"metrics": result, "history": trainer.history,
            "probs": torch.softmax(test_logits.double(), 1), "labels": test_labels,
            "gammas": trainer.gammas("test") if cfg.meta == "gamma_net" else None, "seed": seed}


def _seed_list(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise ValueError(f"seeds must be a positive integer or a list of seeds, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
        return list(range(seeds))
    out = list(seeds) if isinstance(seeds, Sequence) else []
    if not out or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in out) \
            or len(set(out)) != len(out):
        raise ValueError(f"seeds must be a positive integer or distinct integers >= 0, got {seeds!r}")
    return out


def run_methods(case: Mapping[str, Any], methods: Mapping[str, Mapping[str, Any]],
                seeds: int | Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    """Every method on every seed (all methods of a seed share its data): method -> run records.

    ``seeds``: a count ``n`` for the seeds ``0 .. n-1``, or the seeds themselves (e.g.
    ``calib.profile.seeds(n)``); a seed also draws its data (:func:`load_case`).
    """
    _check_case(case)
    seed_list = _seed_list(seeds)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for seed in seed_list:
        data = load_case(case, seed)
        for name, method in methods.items():
            runs[name].append(train_method(case, method, seed, data))
    return runs


def _row(summary: Mapping[str, float]) -> np.ndarray:
    pct = 100.0
    return np.array([pct * (1 - summary["accuracy"]), summary["nll"], pct * summary["ece"],
                     pct * summary["mce"], pct * summary["adaece"], pct * summary["classwise_ece"]])


def metric_rows(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                post_ts: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """Method -> ``(seeds, 6)`` array of the :data:`COLUMNS`, in the paper's units.

    ``post_ts`` maps a new row's name to the method whose runs it reads after temperature
    scaling (default ``{"CE (TS)": "CE"}``, as in the paper's Table 1); the new row follows
    its method.
    """
    post_ts = {"CE (TS)": "CE"} if post_ts is None else dict(post_ts)
    if missing := sorted(set(post_ts.values()) - set(runs)):
        raise ValueError(f"post_ts names method(s) {missing} that runs lacks")
    out: dict[str, np.ndarray] = {}
    for m, rs in runs.items():
        out[m] = np.stack([_row(r["metrics"]["pre_ts"]) for r in rs])
        for ts_name, base in post_ts.items():
            if base == m:
                out[ts_name] = np.stack([_row(r["metrics"]["post_ts"]) for r in rs])
    return out


def paper_method(method: Mapping[str, Any]) -> str:
    """The ``method`` of ``paper_results.csv`` that a TrainConfig spec trains: ``gamma_net_sece`` for a
    γ-Net on SECE, else the loss name."""
    if method.get("meta"):
        return f"{method['meta']}_{method.get('meta_objective', 'sece')}"
    return method["loss"]


def beside_paper(ours: Mapping[str, np.ndarray], methods: Mapping[str, Mapping[str, Any]], *, paper: str,
                 model: str, datasets: Mapping[str, str], label: str, table: str = "1",
                 post_ts: Mapping[str, str] | None = None) -> Any:
    """Our ``mean ± std`` over seeds beside the paper's numbers, one row per (method, source).

    ``ours`` is :func:`metric_rows`' output, ``methods`` the specs that trained it (they name
    the paper's rows, :func:`paper_method`), ``datasets`` maps the paper's dataset to its
    row label (``{"cifar10": "paper, C-10"}``). A paper cell reads as printed, with its
    std; ``–`` where the paper has no such number.
    """
    import pandas as pd

    post_ts = {"CE (TS)": "CE"} if post_ts is None else dict(post_ts)
    records = []
    for m, values in ours.items():
        cells = {h: mean_std(values[:, j], scale=1.0, digits=d) for j, (h, d) in enumerate(zip(HEADS, DIGITS))}
        records.append({"method": m, "source": label, **cells})
        spec, ts = (methods[post_ts[m]], "post") if m in post_ts else (methods[m], "pre")
        for dataset, source in datasets.items():
            records.append({"method": m, "source": source, **{
                h: paper_cell(paper, paper_method(spec), table=table, dataset=dataset, model=model, metric=c, ts=ts)
                for h, c in zip(HEADS, COLUMNS)}})
    return pd.DataFrame(records).set_index(["method", "source"])


def ts_probs(records: Sequence[Mapping[str, Any]]) -> list[torch.Tensor]:
    """Each run's test probabilities after temperature scaling with its fitted T:
    ``softmax(log p / T)`` (``T`` = ``metrics["temperature"]``, fitted on the validation split)."""
    return [torch.softmax(r["probs"].double().clamp_min(1e-300).log() / float(r["metrics"]["temperature"]), 1)
            for r in records]


def method_verdict(probs_a: Sequence[Any], probs_b: Sequence[Any], labels: Sequence[Any], metric: Any,
                   claim: str, *, shared_test: bool, scale: float = 100.0, **kwargs: Any) -> evidence.Verdict:
    """``metric`` of method a against method b, seed by seed, as a :class:`calib.evidence.Verdict`.

    ``probs_a``/``probs_b``: each seed's test probabilities, in the same seed order;
    ``labels``: each seed's test labels. ``shared_test=True`` (every seed scored on the same
    test set, e.g. CIFAR-10's): :func:`calib.evidence.compare_runs`, which adds the test-set
    bootstrap to the seed noise. ``False`` (each seed draws its own test set, as a fresh
    Gaussian mixture per seed does): :func:`calib.evidence.compare` on the per-seed values,
    whose spread already holds the test-set noise, so a bootstrap would count it twice.
    ``scale`` multiplies the values (100 for percent); ``kwargs`` go to ``compare``.
    """
    if not (len(probs_a) == len(probs_b) == len(labels)) or not labels:
        raise ValueError(f"probs_a, probs_b and labels need one entry per seed each, got "
                         f"{len(probs_a)}, {len(probs_b)} and {len(labels)}")
    if shared_test:
        if any(not torch.equal(torch.as_tensor(y), torch.as_tensor(labels[0])) for y in labels):
            raise ValueError("shared_test=True but the seeds' test labels differ")
        return evidence.compare_runs(metric, probs_a, probs_b, labels[0], claim, scale=scale, **kwargs)
    a = [scale * float(metric(p, y)) for p, y in zip(probs_a, labels)]
    b = [scale * float(metric(p, y)) for p, y in zip(probs_b, labels)]
    return evidence.compare(a, b, claim, **kwargs)
