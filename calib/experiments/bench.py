"""The bench of regularisers (chapter 10): one coefficient per loss, over seeds.

A bench is ``{panel: (registry name, keyword, coefficients)}``, with CE as the baseline::

    BENCH = {"label smoothing": ("label_smoothing", "epsilon", [0.01, 0.05, 0.09]), ...}
    runs = bench.label_runs(res.to_frame(), BENCH)  # or a ledger sweep's rows
    every_seed, on_means = bench.findings(runs, BENCH)

Its runs are a sweep's rows (:meth:`SweepResult.to_frame`) or a ledger sweep's
(:func:`calib.experiments.ledger.load`). :func:`findings` tests the statements of the
student report and of Wang et al. (2021) (Table 1, Table 2, Fig. 1, §4) that chapter 10
discusses, and comparisons of our own, on the ECE and temperature of each run, some
seed by seed and some on the means; the chapter adds those that need the runs'
histories and logits.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .tables import loss_coefficient

Bench = Mapping[str, tuple[str, str, Sequence[float]]]

#: The registry names :func:`findings` expects among a bench's losses.
LS, L1, ENTROPY, FOCAL = "label_smoothing", "logit_norm", "entropy_reg", "focal"


def label_runs(rows: Any, bench: Bench) -> Any:
    """The CE and bench runs of ``rows``, with their ``panel`` ("CE" for CE) and ``coef`` (0 for CE).

    Only the bench's coefficients are kept (a sweep may hold others). Raises
    ``ValueError`` for a bench without :data:`LS`, :data:`L1`, :data:`ENTROPY` and
    :data:`FOCAL`, a grid that is not ascending with an odd number (>= 3) of
    coefficients, rows without the columns a finding reads, a setting without a run, or
    two runs of one setting with the same seed.
    """
    import pandas as pd

    _check_bench(bench)
    frame = pd.DataFrame(rows)
    if missing := sorted({"loss", "loss_kwargs", "seed", *_COLUMNS} - set(frame.columns)):
        raise ValueError(f"rows lack the columns {missing}")
    panel_of = {name: panel for panel, (name, _, _) in bench.items()}
    frame = frame[frame["loss"].isin(["ce", *panel_of])].copy()
    frame["panel"] = frame["loss"].map(panel_of).fillna("CE")
    frame["coef"] = [loss_coefficient(loss, kw) for loss, kw in zip(frame["loss"], frame["loss_kwargs"])]
    grid = {("CE", 0.0)} | {(p, float(c)) for p, (_, _, cs) in bench.items() for c in cs}
    frame = frame[[key in grid for key in zip(frame["panel"], frame["coef"])]]
    if missing := sorted(grid - set(zip(frame["panel"], frame["coef"]))):
        raise ValueError(f"rows have no run for the settings {missing}")
    if frame.duplicated(["panel", "coef", "seed"]).any():
        twice = frame[frame.duplicated(["panel", "coef", "seed"], keep=False)]
        raise ValueError(f"rows hold two runs of one setting and seed: "
                         f"{sorted(set(zip(twice['panel'], twice['coef'], twice['seed'])))}")
    return frame


_COLUMNS = ("ece", "ece_ts", "temperature")


def _check_bench(bench: Bench) -> None:
    names = {name for name, _, _ in bench.values()}
    if missing := [n for n in (LS, L1, ENTROPY, FOCAL) if n not in names]:
        raise ValueError(f"bench lacks the losses {missing}; chapter 10's findings compare all four")
    for panel, (_, _, cs) in bench.items():
        cs = [float(c) for c in cs]
        if len(cs) < 3 or len(cs) % 2 == 0 or cs != sorted(set(cs)):
            raise ValueError(f"bench[{panel!r}] needs an ascending grid of an odd number (>= 3) of "
                             f"coefficients (its ends and middle are compared), got {cs}")


def best_coefficients(runs: Any, bench: Bench) -> dict[str, float]:
    """Each panel's coefficient with the lowest mean ECE before TS; CE's is 0.

    Chosen on the test ECE, as Wang et al. (2021) choose theirs (Table 1's caption and
    §3.1; an optimistic choice they state).
    """
    means = runs.groupby(["panel", "coef"])["ece"].mean()
    return {"CE": 0.0, **{p: float(means.loc[p].idxmin()) for p in bench}}


def findings(runs: Any, bench: Bench) -> tuple[dict[str, bool], dict[str, bool]]:
    """Chapter 10's findings on ECE and T: ``(every_seed, on_means)``, ``{statement: held}``.

    ``runs`` from :func:`label_runs`; the bench holds label smoothing, the L1 logit
    penalty, the entropy regulariser and focal loss (:data:`LS`, :data:`L1`,
    :data:`ENTROPY`, :data:`FOCAL`), each with a grid whose middle coefficient is
    ``coefficients[len // 2]``. The first dict is tested seed by seed (what chapter 10
    asserts); the second on the means over seeds, each statement printing its margin or
    the settings it names. The thresholds are in the statements: under half CE's ECE; T
    within 0.25 of 1 at the best coefficient and above 2 for CE; a step from the middle
    costing over 3 points of ECE; a grid moving ECE by over 3 points, twice as much as
    after TS; over half a point gained from TS; a mean T within 0.05 of 1.
    """
    panel = {name: p for p, (name, _, _) in bench.items()}
    ls, l1, ent, focal = (panel[n] for n in (LS, L1, ENTROPY, FOCAL))
    best = best_coefficients(runs, bench)
    setting = runs.groupby(["panel", "coef"])
    at = {p: setting.get_group((p, c)) for p, c in best.items()}  # each loss at its best
    ce = at["CE"]
    ends = {p: (setting.get_group((p, float(cs[0]))), setting.get_group((p, float(cs[-1]))))
            for p, (_, _, cs) in bench.items()}
    by_seed = runs.pivot_table(index=["panel", "coef"], columns="seed", values=["ece", "ece_ts"])
    span = {p: by_seed.loc[p].max() - by_seed.loc[p].min() for p in bench}  # per seed
    mid = {p: float(cs[len(cs) // 2]) for p, (_, _, cs) in bench.items()}
    miss = {p: by_seed.loc[p, "ece"].drop(mid[p]).min() - by_seed.loc[(p, mid[p]), "ece"]
            for p in bench}  # per seed: the cheapest step from the middle coefficient
    three = (l1, ent, focal)
    every_seed = {
        "label smoothing, L1 and focal at their best have under half CE's ECE on every"
        " seed (Table 1: below CE)": all(at[p]["ece"].max() < ce["ece"].min() / 2 for p in (ls, l1, focal)),
        "entropy regularisation at its best has under half CE's ECE on every seed (ours;"
        " the student report found it not effective)": at[ent]["ece"].max() < ce["ece"].min() / 2,
        "focal loss at its best beats L1 and entropy regularisation at theirs on every"
        " seed (student report: 'often' lower ECE)":
            at[focal]["ece"].max() < min(at[p]["ece"].min() for p in (l1, ent)),
        "every grid runs from over- to under-confident: T > 1 at its smallest and"
        " T < 1 at its largest coefficient, on every seed (ours)":
            all(lo["temperature"].min() > 1 and hi["temperature"].max() < 1 for lo, hi in ends.values()),
        "at its best coefficient each regulariser needs a T within 0.25 of 1, CE one"
        " above 2, on every seed (Wang et al. (2021) §4 also find CE's T the highest)":
            ce["temperature"].min() > 2 and all((at[p]["temperature"] - 1).abs().max() < 0.25 for p in bench),
        "the strongest entropy regulariser is worse than CE on every seed (ours)":
            ends[ent][1]["ece"].min() > ce["ece"].max(),
        "on every seed L1, entropy and focal are best at the middle of their grid (for"
        " L1 by our choice of grid), and a step either way costs over 3 points of ECE"
        " (Fig. 1: a change of coefficient 'may cause large ECE increase')":
            all((by_seed.loc[p, "ece"].idxmin() == mid[p]).all() and (miss[p] > 0.03).all() for p in three),
        "on every seed the ECE before TS moves by over 3 points over every grid, more"
        " than twice as much as after TS (ours; Fig. 1's caption names no after-TS ECE)":
            all((span[p]["ece"] > (2 * span[p]["ece_ts"]).clip(lower=0.03)).all() for p in bench),
        "at their best, label smoothing and the entropy regulariser gain over half a"
        " point of ECE from TS on every seed (ours)":
            all((at[p]["ece"] - at[p]["ece_ts"]).min() > 0.005 for p in (ls, ent)),
        "after TS every L1 run has a higher ECE than every CE run (ours)":
            runs.loc[runs["panel"] == l1, "ece_ts"].min() > ce["ece_ts"].max(),
    }
    return {k: bool(v) for k, v in every_seed.items()}, _on_means(runs, bench, best)


def _on_means(runs: Any, bench: Bench, best: Mapping[str, float]) -> dict[str, bool]:
    """The findings of :func:`findings` tested on the means over seeds."""
    panel = {name: p for p, (name, _, _) in bench.items()}
    ls, l1, focal = (panel[n] for n in (LS, L1, FOCAL))
    means = runs.groupby(["panel", "coef"])[["ece", "ece_ts", "temperature"]].mean()
    curve = means.loc[ls, "ece"].drop(best[ls])
    step = curve.min() - means.loc[(ls, best[ls]), "ece"]
    near = (l1, focal)  # at their best: T near 1, so TS has little to do
    t_off = {p: abs(means.loc[(p, best[p]), "temperature"] - 1) for p in bench}
    rise = {p: means.loc[(p, best[p]), "ece_ts"] - means.loc[(p, best[p]), "ece"] for p in near}
    by = " and ".join(f"{100 * r:.2f}" for r in rise.values())
    ce_ts = runs.loc[runs["panel"] == "CE", "ece_ts"].max()
    apart = [f"{p} {c:g}" for (p, c), r in runs.groupby(["panel", "coef"])
             if p not in ("CE", l1) and r["ece_ts"].min() > ce_ts]
    after = {p: means.loc[(p, best[p]), "ece_ts"] for p in (ls, l1, focal)}  # the paper's methods
    rival = min(after, key=after.get)
    ce_after = runs.loc[runs["panel"] == "CE", "ece_ts"]
    held = {
        "label smoothing too: a step from its best ε costs over 3 points of ECE"
        f" (cheapest step: to ε={curve.idxmin():g}, {100 * step:.2f} points; means)": step > 0.03,
        "at their best, L1 and focal have a mean T within 0.05 of 1 (label smoothing"
        " and entropy further), and a mean ECE after TS above the one before (by"
        f" {by} points; ours)": all(t_off[p] < 0.05 < t_off[q] and rise[p] > 0
                                    for p in near for q in bench if q not in near),
        "after TS no setting but L1's has all its runs above every CE run (ours;"
        f" others: {', '.join(apart) or 'none'})": not apart,
        "CE has a lower mean ECE after TS than label smoothing, L1 and focal at their"
        " best (Wang et al. (2021) Table 2 on their image datasets; §4: 'on most"
        f" cases'; CE {100 * ce_after.mean():.2f} ± {100 * ce_after.std(ddof=1):.2f}"
        f" over seeds, lowest of the three {rival} {100 * after[rival]:.2f})":
            ce_after.mean() < after[rival],
    }
    return {text: bool(ok) for text, ok in held.items()}
