"""A paper's table as a run plan: which runs reproduce it, and our numbers beside the paper's.

From the papers' rows (:mod:`calib.experiments.papers`) and the paper presets
(:mod:`calib.train.presets`)::

    from calib.experiments import plans
    lin = plans.paper_table("Lin et al. (2024) Table 1", paper="lin2024uncertainty",
                            preset="lin2024", net=("cifar", "ResNet-50"))
    runs, notes = plans.plan_runs([lin])     # one PlannedRun per method calib trains
    plans.beside_paper(lin, results, ours="fashion_mnist/mlp (quick)")  # DataFrame

``results`` maps a run's :attr:`PlannedRun.key` to its rows (one per seed), e.g. from
:func:`calib.experiments.tables.runs_of`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import papers
from .grid import format_loss_kwargs, parse_loss
from .tables import SAME, mean_std, paper_row

__all__ = ["PaperTable", "PlannedRun", "paper_table", "loss_spec", "plan_runs", "seeds_for", "shared_sweeps",
           "beside_paper", "mean_of", "per_seed", "against_ce", "lowest"]

FALLBACK_SEEDS = (0, 1, 2)
"""Seeds of a table whose paper states none (Mukhoti et al. 2020)."""


@dataclass(frozen=True)
class PaperTable:
    """One of a paper's tables, as calib trains it.

    ``model`` is the calib network of the headline row (``dataset``), ``methods`` the
    (method, params) pairs of that row in the paper's order, ``ts_method`` how the preset
    fits the temperature, ``grid`` every (dataset, calib model) pair of the table's CIFAR
    rows (what the paper-scale command trains).
    """

    title: str
    paper: str
    preset: str
    model: str
    ts_method: str
    methods: tuple[tuple[str, str], ...]
    grid: tuple[tuple[str, str], ...]
    table: str = "1"
    dataset: str = "cifar10"

    @property
    def post_column(self) -> str:
        """The sweep column of the post-TS ECE with the paper's way of fitting T."""
        return "ece_ts_grid" if self.ts_method == "grid" else "ece_ts_nll"


@dataclass(frozen=True)
class PlannedRun:
    """One method of a table that calib trains: its sweep loss spec and per-cell settings."""

    table: str
    method: str
    params: str
    spec: str
    train: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.table, self.method, self.params

    @property
    def meta(self) -> bool:
        """Whether the method is meta-learned (several plain runs' cost)."""
        return "meta" in self.train


def paper_table(title: str, *, paper: str, preset: str, net: tuple[str, str], table: str = "1",
                dataset: str = "cifar10", grid_datasets: Sequence[str] = ("cifar10", "cifar100")) -> PaperTable:
    """A :class:`PaperTable` from the paper's rows of ``calib/paper_results.csv``.

    ``net`` is ``(data family, the paper's name for the network)``, a key of
    :data:`calib.experiments.papers.PAPER_MODELS` without the paper.

    Raises:
        ValueError: an unknown paper, preset or network, or no ECE row for the headline.
    """
    from ..train import presets

    if paper not in papers.PAPERS:
        raise ValueError(f"paper must be one of {list(papers.PAPERS)}, got {paper!r}")
    if preset not in presets.PRESETS:
        raise ValueError(f"preset must be one of {sorted(presets.PRESETS)}, got {preset!r}")
    if (paper, *net) not in papers.PAPER_MODELS:
        raise ValueError(f"no calib network for {paper} {net}; see calib.experiments.papers.PAPER_MODELS")
    model = papers.PAPER_MODELS[(paper, *net)]
    rows = papers.results(paper=paper, table=table, dataset=dataset, model=model, metric="ece", ts="pre")
    if not rows:
        raise ValueError(f"{paper} table {table} has no ECE row for {dataset} / {model}")
    grid_rows = papers.results(paper=paper, table=table, dataset=tuple(grid_datasets), metric="ece", ts="pre")
    return PaperTable(title=title, paper=paper, preset=preset, model=model,
                      ts_method=presets.PRESETS[preset]["ts_method"],
                      methods=tuple(dict.fromkeys((r["method"], r["params"]) for r in rows)),
                      grid=tuple(sorted({(r["dataset"], r["model"]) for r in grid_rows})),
                      table=table, dataset=dataset)


def loss_spec(paper: str, method: str, params: str) -> tuple[str, dict[str, Any]]:
    """``(registry name, keywords)`` that train a paper's loss row.

    The keywords are the row's ``params`` updated by
    :data:`calib.experiments.papers.PAPER_LOSS_KWARGS`; keywords equal to the loss's
    defaults are dropped, so one setting is one run of a sweep.

    Raises:
        ValueError: a method that is not a calib loss, or keywords the loss does not take.
    """
    from .. import losses

    if method not in losses.names():
        raise ValueError(f"calib has no loss named {method!r}")
    kw = parse_loss(f"{method}:{params}")[1] if params else {}
    kw.update(papers.PAPER_LOSS_KWARGS.get((paper, method), {}))
    try:
        losses.make(method, **kw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the paper's keywords {kw} do not fit calib's loss: {exc}") from None
    defaults = inspect.signature(losses.functional(method)).parameters
    return method, {k: v for k, v in kw.items() if k not in defaults or defaults[k].default != v}


def _spec(name: str, kwargs: Mapping[str, Any], train: Mapping[str, Any]) -> str:
    spec = f"{name}:{format_loss_kwargs(kwargs)}" if kwargs else name
    return spec + ("@" + format_loss_kwargs(train) if train else "")


def plan_runs(tables: Sequence[PaperTable]) -> tuple[list[PlannedRun], list[str]]:
    """Every method of ``tables`` that calib can train, and a note for each it cannot.

    A method is trained if calib's loss registry has it (:func:`loss_spec`) or if
    :data:`calib.experiments.papers.METHODS` says how (mixup, meta-learning: a loss plus
    per-cell training settings, the sweep's ``NAME@field=value``).
    """
    from .. import losses

    runs, notes = [], []
    for t in tables:
        for method, params in t.methods:
            if method in losses.names():
                try:
                    name, kw = loss_spec(t.paper, method, params)
                except ValueError as exc:
                    notes.append(f"{t.title}: {_label(method, params)} skipped, {exc}")
                    continue
                runs.append(PlannedRun(t.title, method, params, _spec(name, kw, {})))
            elif method in papers.METHODS:
                m = papers.METHODS[method]
                runs.append(PlannedRun(t.title, method, params, _spec(m["loss"], {}, m["train"]),
                                       dict(m["train"])))
            else:
                notes.append(f"{t.title}: {_label(method, params)} skipped, calib has no loss or "
                             "method of that name")
    return runs, notes


def seeds_for(preset: str, seeds: Any = "paper") -> Any:
    """``seeds``, or :data:`FALLBACK_SEEDS` where ``seeds="paper"`` and the preset's paper states none."""
    from ..train import presets

    if seeds == "paper" and preset not in presets.PAPER_SEEDS:
        return list(FALLBACK_SEEDS)  # grid_cells caps them in smoke mode
    return seeds


def shared_sweeps(tables: Sequence[PaperTable], runs: Sequence[PlannedRun], seeds: Any = "paper",
                  model: str | None = None) -> dict[str, tuple[str, str, list[PlannedRun]]]:
    """The sweeps that train ``runs``: one per protocol, shared by the tables that set it.

    Tables whose presets hold the same settings (:data:`calib.train.presets.PRESETS`: Lin
    et al. (2024) and Mukhoti et al. (2020) do), with the same seeds (:func:`seeds_for`) and
    network, share one sweep, so a method both list (CE, Brier, MMCE) trains once; each
    :class:`PlannedRun` keeps its own table's key. ``model`` is the network of every sweep,
    or None for each table's own (:attr:`PaperTable.model`).

    Returns ``{name: (preset, model, runs)}``, named after the first table's preset, in the
    tables' order.
    """
    import json

    from ..train import presets

    out: dict[str, tuple[str, str, list[PlannedRun]]] = {}
    names: dict[tuple[str, str, str], str] = {}
    for t in tables:
        net = t.model if model is None else model
        key = (json.dumps(presets.PRESETS[t.preset], sort_keys=True, default=str),
               json.dumps(seeds_for(t.preset, seeds), default=list), net)
        name = names.setdefault(key, t.preset)
        out.setdefault(name, (t.preset, net, []))[2].extend(r for r in runs if r.table == t.title)
    return out


def _label(method: str, params: str) -> str:
    return f"{method} ({params})" if params else method


def beside_paper(table: PaperTable, results: Mapping[tuple[str, str, str], Any], *, ours: str,
                 missing: str = "not run", instead: Mapping[tuple[str, str, str], str] | None = None) -> Any:
    """Our ECE (mean ± std over seeds, in %) before and after TS beside the paper's, per method.

    ``results`` maps :attr:`PlannedRun.key` to that method's runs; a method without runs
    reads ``instead[key]`` where given (e.g. "diverged"), else ``missing``; a paper cell it
    lacks "–". ``ours`` names our data and profile in the index heading.
    """
    import pandas as pd

    out = {}
    for method, params in table.methods:
        runs = results.get((table.title, method, params))
        cell = dict(paper=table.paper, table=table.table, dataset=table.dataset, model=table.model,
                    params=params, metric="ece")
        missing_text = (instead or {}).get((table.title, method, params), missing)
        out[_label(method, params)] = {
            "ECE % (ours)": missing_text if runs is None else mean_std(runs["ece"]),
            "ECE % (paper)": _paper_text(method, ts="pre", **cell),
            "after TS % (ours)": missing_text if runs is None else mean_std(runs[table.post_column]),
            "after TS % (paper)": _paper_text(method, ts="post", **cell),
        }
    frame = pd.DataFrame(out).T
    frame.index.name = f"ours: {ours} | paper: CIFAR-10 {table.model}"
    return frame


def _paper_text(method: str, *, paper: str, **filters: Any) -> str:
    row = paper_row(paper, method, **filters)
    return SAME if row is None else papers.printed(row)


def mean_of(results: Mapping[tuple[str, str, str], Any], title: str, method: str, column: str) -> float:
    """Our mean over seeds of ``column`` for a method of a table (NaN when it was not run)."""
    for (t, m, _), runs in results.items():
        if t == title and m == method:
            return float(runs[column].mean())
    return float("nan")


def per_seed(results: Mapping[tuple[str, str, str], Any], title: str, column: str) -> Any:
    """Our values of ``column`` for every method of a table that was run: methods x seeds.

    A DataFrame indexed by the method's label, as :func:`beside_paper` and
    :func:`against_ce` label it (``"focal (gamma=3)"``, ``"ce"``), in the order of
    ``results``, one column per seed, so a claim can be tested on every seed as well as on
    the means (:func:`mean_of`).
    """
    import pandas as pd

    rows = {_label(m, p): runs.set_index("seed")[column]
            for (t, m, p), runs in results.items() if t == title}
    return pd.DataFrame(rows).T.rename_axis(index="method", columns="seed")


def against_ce(table: PaperTable, results: Mapping[tuple[str, str, str], Any]) -> Any:
    """For every method both the paper and our runs have: is its ECE before TS below CE's?

    Returns a DataFrame with "paper: below CE", "ours: below CE" (on the means over seeds),
    "same ordering" (``"yes"`` / ``"no"`` / ``"NO"`` where the orderings disagree) and
    "seeds below CE" (on how many of the seeds both were run with the method is below CE,
    e.g. ``"3 of 3"``).
    """
    import pandas as pd

    cell = dict(table=table.table, dataset=table.dataset, model=table.model, metric="ece", ts="pre")
    ce_paper = paper_row(table.paper, "ce", params="", **cell)
    ce_runs = results.get((table.title, "ce", ""))
    out = {}
    for method, params in table.methods:
        theirs = paper_row(table.paper, method, params=params, **cell)
        ours = results.get((table.title, method, params))
        if method == "ce" or theirs is None or ce_paper is None or ours is None:
            continue
        paper_below = theirs["value"] < ce_paper["value"]
        ours_below = ours["ece"].mean() < mean_of(results, table.title, "ce", "ece")
        ce_seed = ce_runs.set_index("seed")["ece"] if ce_runs is not None else pd.Series(dtype=float)
        pair = pd.concat([ours.set_index("seed")["ece"], ce_seed], axis=1, join="inner")
        below = int((pair.iloc[:, 0] < pair.iloc[:, 1]).sum())
        out[_label(method, params)] = {"paper: below CE": "yes" if paper_below else "no",
                                       "ours: below CE": "yes" if ours_below else "no",
                                       "same ordering": "yes" if paper_below == ours_below else "NO",
                                       "seeds below CE": f"{below} of {len(pair)}"}
    return pd.DataFrame(out).T


def lowest(table: PaperTable, results: Mapping[tuple[str, str, str], Any], ts: str = "pre") -> dict[str, str]:
    """The method with the lowest mean ECE, ours and the paper's, among the methods both have.

    ``ts="pre"`` compares the ECE before temperature scaling, ``"post"`` after it (our
    column :attr:`PaperTable.post_column`). Returns ``{"ours": label, "paper": label,
    "seeds": "2 of 3"}`` with :func:`per_seed`'s labels (``"focal (gamma=3)"``), "seeds"
    saying on how many of the seeds that all these methods ran our lowest mean is also the
    seed's lowest (fewer than all: the ranking is undecided); ``{}`` when fewer than two
    methods have both (Wang & Golebiowski (2024) give the ECE after TS for CE alone), as
    one method is no ranking.
    """
    if ts not in ("pre", "post"):
        raise ValueError(f"ts must be 'pre' or 'post', got {ts!r}")
    cell = dict(table=table.table, dataset=table.dataset, model=table.model, metric="ece", ts=ts)
    column = "ece" if ts == "pre" else table.post_column
    ours, theirs = {}, {}
    for method, params in table.methods:
        row = paper_row(table.paper, method, params=params, **cell)
        runs = results.get((table.title, method, params))
        if row is not None and runs is not None:
            ours[_label(method, params)] = runs[column].mean()
            theirs[_label(method, params)] = row["value"]
    if len(ours) < 2:
        return {}
    best = min(ours, key=ours.get)
    by_seed = per_seed(results, table.title, column).loc[list(ours)].dropna(axis=1)
    wins = int((by_seed.idxmin() == best).sum()) if by_seed.shape[1] else 0
    return {"ours": best, "paper": min(theirs, key=theirs.get), "seeds": f"{wins} of {by_seed.shape[1]}"}
