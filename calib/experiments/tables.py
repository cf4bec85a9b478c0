"""Seed bookkeeping for the book's tables: runs grouped by loss, "mean ± std", t-tests, paper cells.

A sweep (:mod:`calib.experiments.sweep`) returns one row per run; a chapter's table wants
one row per method with the mean and spread over seeds, the paper's number beside it and
a significance mark. These are the pieces::

    from calib.experiments import tables
    by = tables.runs_by_method(res.to_frame(), {"CE": "ce", "focal γ=3": "focal:gamma=3"})
    tables.mean_std(by["CE"]["ece"])                      # '12.34 ± 0.56' (in %)
    tables.t_tests(by, baseline="CE", columns={"before TS": "ece"})
    tables.paper_cell("wang2021rethinking", "focal", table="1", dataset="cifar10",
                      model="resnet32", metric="ece", ts="pre")

pandas is imported inside the functions that build frames (it ships with the book extra).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from . import papers
from .grid import format_loss_kwargs, parse_loss, parse_method

__all__ = ["mean_std", "runs_of", "runs_by_method", "t_tests", "paper_t_tests", "paper_row", "paper_cell",
           "loss_coefficient"]

HIGHER, LOWER, SAME = "▲", "▼", "–"
"""Marks of :func:`t_tests`: significantly higher / lower than the baseline, or neither."""

HIGHER_NS, LOWER_NS = "△", "▽"
"""Marks of :func:`paper_t_tests` for a mean higher / lower than the baseline's whose
difference is *not* significant: Wang et al. (2021), Table 2, print these hollow and the
significant ones filled (▲ / ▼); :func:`t_tests` writes both hollow marks as ``SAME``."""


def mean_std(values: Iterable[float], scale: float = 100.0, digits: int = 2) -> str:
    """``"m ± s"`` of ``scale * values``: the mean and the sample standard deviation.

    ``s = sqrt(sum((x - m)^2) / (n - 1))`` (Bessel's correction, the spread over seeds the
    papers print). With one value there is no spread and only ``"m"`` is returned.

    Raises:
        ValueError: no values, or a ``digits`` that is not a non-negative integer.
    """
    v = scale * np.asarray(list(values), dtype=float).ravel()
    if v.size == 0:
        raise ValueError("values is empty: mean_std needs at least one run")
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def _method_key(spec: Any) -> tuple[str, str, str]:
    """(loss, loss_kwargs, settings) of a loss spec, as a sweep writes them in its rows."""
    name, kwargs, settings = parse_method(spec)
    return name, format_loss_kwargs(kwargs), format_loss_kwargs(settings)


def runs_of(frame: Any, spec: Any) -> Any:
    """The rows of a sweep's frame (``SweepResult.to_frame()``) trained with one loss spec.

    ``spec`` is a sweep loss item (``"focal:gamma=3"``, ``"ce@mixup_alpha=1"``,
    ``("focal", {"gamma": 3})``); its keywords are normalised as the sweep does, so
    ``gamma=3`` and ``gamma=3.0`` match the same runs. Returns a copy (possibly empty).

    Raises:
        ValueError: ``frame`` lacks the ``loss`` / ``loss_kwargs`` columns, or a bad
            spec (:class:`calib.experiments.sweep.SweepError`).
    """
    if missing := [c for c in ("loss", "loss_kwargs") if c not in getattr(frame, "columns", ())]:
        raise ValueError(f"frame must be a sweep's rows as a DataFrame; it lacks the columns {missing}")
    loss, kwargs, settings = _method_key(spec)
    mask = (frame["loss"] == loss) & (frame["loss_kwargs"].fillna("") == kwargs)
    if "settings" in frame.columns:
        mask &= frame["settings"].fillna("") == settings
    elif settings:
        mask &= False
    return frame[mask].copy()


def runs_by_method(frame: Any, methods: Mapping[str, Any]) -> dict[str, Any]:
    """``{label: rows of that method}`` for ``methods`` = ``{label: loss spec}``, in that order.

    Raises:
        ValueError: no methods, a method with no run in ``frame``, or two labels for one spec.
    """
    if not methods:
        raise ValueError("methods is empty: give {label: loss spec}")
    keys = {label: _method_key(spec) for label, spec in methods.items()}
    if len(set(keys.values())) < len(keys):
        raise ValueError(f"two labels name the same loss spec: {keys}")
    out = {label: runs_of(frame, spec) for label, spec in methods.items()}
    if empty := [label for label, runs in out.items() if runs.empty]:
        raise ValueError(f"no run in frame for {empty} (specs {[methods[e] for e in empty]})")
    return out


def t_tests(
    by: Mapping[str, Any],
    *,
    baseline: str,
    columns: Mapping[str, str],
    alpha: float = 0.05,
) -> Any:
    """Each method against ``baseline``: a two-sample t-test per column, marked ▲ / ▼ / –.

    For a method's per-seed values ``a`` and the baseline's ``b`` in one column,
    ``scipy.stats.ttest_ind(a, b)`` (Student's test, pooled variance) gives ``p``; the
    mark is ▲ (higher than the baseline) or ▼ (lower) when ``p < alpha``, else –. This is
    the test Wang et al. (2021), Table 2, use over five runs at the 0.05 level.

    Args:
        by: ``{label: runs}`` (:func:`runs_by_method`), one row per seed.
        baseline: the label every other method is tested against.
        columns: ``{name shown: column of the runs}``, e.g. ``{"after TS": "ece_ts"}``.

    Returns:
        A DataFrame, one row per method other than the baseline, with columns
        ``"<name>: vs <baseline>"`` (the mark) and ``"<name>: p"`` (p to 3 decimals).
    """
    import pandas as pd
    from scipy import stats

    if baseline not in by:
        raise ValueError(f"baseline {baseline!r} is not one of the methods {list(by)}")
    if not columns:
        raise ValueError("columns is empty: give {name: column}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    out: dict[str, dict[str, str]] = {}
    for method in [m for m in by if m != baseline]:
        for name, column in columns.items():
            a, b = by[method][column].to_numpy(), by[baseline][column].to_numpy()
            p = float(stats.ttest_ind(a, b).pvalue)
            mark = (HIGHER if a.mean() > b.mean() else LOWER) if p < alpha else SAME
            out.setdefault(method, {})[f"{name}: vs {baseline}"] = mark
            out[method][f"{name}: p"] = f"{p:.3f}"
    return pd.DataFrame(out).T


def paper_t_tests(
    paper: str,
    *,
    baseline: str,
    methods: Mapping[str, str],
    columns: Mapping[str, Mapping[str, str]],
    n: int,
    alpha: float = 0.05,
    **filters: str | Iterable[str],
) -> Any:
    """A paper's significance marks recomputed from its printed means and stds.

    For each method and column, the paper's row (``value`` ± ``std``) and the baseline's
    go into ``scipy.stats.ttest_ind_from_stats(..., equal_var=True)`` with ``n`` runs
    each: the Student's test of :func:`t_tests`, from the summary statistics the paper
    prints (its std taken as the sample std over the runs). The mark gives the direction
    of the means, filled when ``p < alpha`` (▲ / ▼) and hollow otherwise (△ / ▽), the
    convention of Wang et al. (2021), Table 2 (``SAME`` for equal means). Rounding of the
    printed numbers makes ``p`` approximate.

    Args:
        paper: the bib key in ``calib/paper_results.csv``.
        baseline: the label every other method is tested against.
        methods: ``{label: the paper's method}`` (the CSV's ``method``), baseline included.
        columns: ``{name shown: further filters of that number}``, e.g.
            ``{"after TS": {"metric": "ece", "ts": "post"}}``.
        n: the number of runs behind each mean and std (the paper's, e.g. 5).
        **filters: filters every row shares (``table``, ``dataset``, ``model``).

    Returns:
        A DataFrame, one row per method other than the baseline, with columns
        ``"<name>: vs <baseline>"`` (the mark) and ``"<name>: p"`` (p to 3 decimals).

    Raises:
        ValueError: an unknown baseline, no columns, ``n < 2``, a bad ``alpha``, or a
            number the paper's table does not hold with a std.
    """
    import pandas as pd
    from scipy import stats

    if baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not one of the methods {list(methods)}")
    if not columns:
        raise ValueError("columns is empty: give {name: filters}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer of at least 2, got {n!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")

    def stats_of(label: str, cell: Mapping[str, str]) -> tuple[float, float]:
        row = paper_row(paper, methods[label], **filters, **cell)
        if row is None or row["std"] is None:
            raise ValueError(f"{paper} has no mean ± std for {methods[label]!r} with {dict(filters, **cell)}")
        return row["value"], row["std"]

    out: dict[str, dict[str, str]] = {}
    for method in [m for m in methods if m != baseline]:
        for name, cell in columns.items():
            (ma, sa), (mb, sb) = stats_of(method, cell), stats_of(baseline, cell)
            p = float(stats.ttest_ind_from_stats(ma, sa, n, mb, sb, n, equal_var=True).pvalue)
            marks = (HIGHER, LOWER) if p < alpha else (HIGHER_NS, LOWER_NS)
            mark = SAME if ma == mb else marks[0] if ma > mb else marks[1]
            out.setdefault(method, {})[f"{name}: vs {baseline}"] = mark
            out[method][f"{name}: p"] = f"{p:.3f}"
    return pd.DataFrame(out).T


def paper_row(paper: str, method: str, **filters: str | Iterable[str]) -> dict[str, Any] | None:
    """The first row of ``calib/paper_results.csv`` for a paper's method, or None.

    ``filters`` are further :func:`calib.experiments.papers.results` filters (``table``,
    ``dataset``, ``model``, ``metric``, ``ts``, ``params``). A value the file does not hold
    (a method or metric the paper's tables lack) gives None rather than an error; an
    unknown column name still raises ``TypeError``.
    """
    try:
        found = papers.results(paper=paper, method=method, **filters)
    except ValueError:
        return None
    return found[0] if found else None


def paper_cell(paper: str, method: str, *, show_params: bool = False, **filters: str | Iterable[str]) -> str:
    """A paper's number as printed, for a table beside ours: ``"4.36"``, ``"2.14 ± 0.82"``, or ``"–"``.

    With ``show_params`` the paper's hyper-parameters follow in brackets
    (``"1.52 ± 0.09 (gamma=3)"``).
    """
    row = paper_row(paper, method, **filters)
    if row is None:
        return SAME
    text = papers.printed(row)
    return text + (f" ({row['params']})" if show_params and row["params"] else "")


def loss_coefficient(loss: str, loss_kwargs: str) -> float:
    """The one coefficient of a regulariser's run: ``("focal", "gamma=3")`` -> 3.0; 0.0 without one.

    For a bench of one-coefficient losses (label smoothing ε, L1 α, focal γ) whose rows
    carry their keywords as text (``results.csv``'s ``loss_kwargs``).

    Raises:
        ValueError: more than one keyword, a value that is not a number, or a bad loss.
    """
    if loss_kwargs is None or (isinstance(loss_kwargs, float) and math.isnan(loss_kwargs)) or not loss_kwargs:
        return 0.0
    kwargs = parse_loss(f"{loss}:{loss_kwargs}")[1]
    if len(kwargs) != 1:
        raise ValueError(f"{loss}:{loss_kwargs} has {len(kwargs)} keywords; loss_coefficient needs one")
    (value,) = kwargs.values()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{loss}:{loss_kwargs}: the coefficient {value!r} is not a number")
    return float(value)
