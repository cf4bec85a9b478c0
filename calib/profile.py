"""One switch for scale: the ``CALIB_PROFILE`` environment variable.

* ``quick``: CPU, minutes per chapter, offline data (default without CUDA; CI and
  ``make book``).
* ``colab``: one GPU (a free Colab T4 is the yardstick), real CIFAR, under an hour a
  chapter (default when CUDA is present).
* ``paper``: the papers' protocols as their text and the authors' code fix them (350 epochs, 45k/5k split,
  loss summed over the batch and gradient norm clipped at 2 where the code does that, ...).

Chapters read the profile once at the top::

    from calib import profile
    P = profile.current()              # "quick" | "colab" | "paper"
    epochs = profile.pick(quick=5, colab=60, paper=350)

The chapter's environment lives here too: smoke mode (``CALIB_SMOKE``), the data root
(``CALIB_DATA``), debug checks, :func:`claim` for statements about our runs, and the expected
Colab time of a chapter (:mod:`calib.runtimes`).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from calib.runtimes import LEDGER_VAR, t4_estimate

PROFILES = ("quick", "colab", "paper")
ENV_VAR = "CALIB_PROFILE"
T = TypeVar("T")


def current() -> str:
    """The active profile: ``$CALIB_PROFILE`` if set, else ``colab`` with CUDA, else ``quick``."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if not value:
        return "colab" if torch.cuda.is_available() else "quick"
    if value not in PROFILES:
        raise ValueError(f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not a profile; choose one of {', '.join(PROFILES)}")
    return value


def pick(*, quick: T, colab: T, paper: T, profile: str | None = None) -> T:
    """Choose a value for the active (or given) profile."""
    name = current() if profile is None else profile
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {name!r}")
    return {"quick": quick, "colab": colab, "paper": paper}[name]


FULL_WORK_VAR = "CALIB_FULL_WORK"


_UNSET: Any = object()


def work(*, quick: T, colab: T, paper: T, smoke: T = _UNSET) -> T:
    """An amount of work (sample sizes, replicates, restarts) for the active profile.

    :func:`pick`, except in smoke mode, where the ``colab`` and ``paper`` branches run with
    the ``smoke`` amount (default: the ``quick`` one): the same code path, in seconds. Give
    ``smoke`` where the quick amount is minutes, or zero where the others are not (a loop
    the quick profile skips). ``tools/estimate_runtimes.py`` sets ``$CALIB_FULL_WORK=1`` to
    time a chapter's full amounts in smoke mode.
    """
    if _smoke() and os.environ.get(FULL_WORK_VAR, "") in ("", "0"):
        return quick if smoke is _UNSET else smoke
    return pick(quick=quick, colab=colab, paper=paper)


def device() -> torch.device:
    """The device to compute on, picked at run time: CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe(chapter: str | None = None, *, procedure: int = 1) -> str:
    """The lines at the top of a chapter: which profile and device ran it.

    ``procedure`` numbers the chapter's experimental procedure (its data draws, protocol,
    seeds): a chapter raises it when a change makes its old audit records describe another
    experiment, so :func:`recurrence` and :func:`audit_state` count only the records of
    this procedure (records written before procedures were numbered count as 1).

    Adds ``[smoke]`` in smoke mode, a warning when a GPU profile (``colab``/``paper``) runs
    without CUDA (on Colab: Runtime -> Change runtime type -> T4 GPU), and, given the
    chapter's name (e.g. ``"02_overconfidence"``), the expected time of its ``colab``
    profile on a free T4 from :func:`calib.runtimes.t4_estimate` (marked measured or
    estimated).
    """
    global _CHAPTER, _PROCEDURE
    if isinstance(procedure, bool) or not isinstance(procedure, int) or procedure < 1:
        raise ValueError(f"procedure must be a positive integer, got {procedure!r}")
    _CHAPTER, _PROCEDURE = chapter, procedure
    _record("procedure", "procedure", str(procedure))
    name = current()
    lines = [f"CALIB_PROFILE={name}{' [smoke]' if smoke() else ''} on {device()} (torch {torch.__version__})"]
    if name != "quick" and not torch.cuda.is_available() and not smoke():
        lines += [f"WARNING: the {name} profile is meant for a GPU and this runtime has none;",
                  "  it will be very slow. On Colab: Runtime > Change runtime type > T4 GPU."]
    if chapter is not None:
        lines.append(t4_estimate(chapter).describe())
    return "\n".join(lines)


SMOKE_VAR = "CALIB_SMOKE"


def smoke() -> bool:
    """True when ``$CALIB_SMOKE`` asks for smoke mode: the profile's code path, capped work.

    Smoke mode exists so CI can execute the ``colab`` and ``paper`` branches of every chapter
    on a CPU in seconds (tiny synthetic data in the real formats, a few steps). Numbers it
    produces mean nothing; chapters report their claims instead of asserting them.
    """
    value = os.environ.get(SMOKE_VAR, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"{SMOKE_VAR}={os.environ[SMOKE_VAR]!r}: use 1 (smoke mode) or 0")


# Smoke mode's caps (see calib.data.splits.smoke_subset and calib.train.smoke_config):
# with 16 training images in batches of 8 an epoch is two optimisation steps (evaluation
# splits stay smaller than training: gamma-Net carves its meta split out of them). Small,
# because the paper profile's CIFAR ResNet-50 costs 2.6 GFLOP per image forward.
SMOKE_CAPS: dict[str, int] = {"epochs": 2, "batch_size": 8, "train": 16, "eval": 8,
                              "toy_points_per_class": 200, "seeds": 2}


_smoke = smoke  # for work(), whose keyword `smoke` hides the function


def smoke_cap(name: str, value: T) -> T:
    """``min(value, SMOKE_CAPS[name])`` in smoke mode, else ``value`` unchanged.

    For experiment helpers, and for the rare chapter loop the library cannot see, e.g.
    ``for seed in range(profile.smoke_cap("seeds", n_seeds))``.
    """
    if name not in SMOKE_CAPS:
        raise ValueError(f"name must be one of {sorted(SMOKE_CAPS)}, got {name!r}")
    if not smoke():
        return value
    kept = min(value, SMOKE_CAPS[name])  # type: ignore[type-var]
    path = os.environ.get(LEDGER_VAR, "").strip()
    if name == "seeds" and kept < value and path:  # the FLOP ledger scales for the rest
        with open(path, "a") as fh:
            fh.write(json.dumps({"seeds": value, "kept": kept}) + "\n")
    return kept


DATA_VAR = "CALIB_DATA"
DEFAULT_DATA_ROOT = "data"


def data_root(root: str | os.PathLike | None = None) -> str:
    """Where dataset files live: ``root`` if given, else ``$CALIB_DATA``, else ``"data"``.

    The conventional default ``"data"`` also yields to ``$CALIB_DATA``, so a chapter or
    config that leaves the root at its default reads the folder the variable names (CI
    points it at synthetic datasets written by ``python -m calib fake-data DIR``).
    """
    env = os.environ.get(DATA_VAR, "").strip()
    if root is None or (env and os.fspath(root) == DEFAULT_DATA_ROOT):
        return env or DEFAULT_DATA_ROOT
    return os.fspath(root)


DEBUG_VAR = "CALIB_DEBUG"
_debug_override: bool | None = None


def set_debug(flag: bool | None) -> None:
    """Force debug checks on (True) or off (False); None returns to ``$CALIB_DEBUG``."""
    global _debug_override
    if flag is not None and not isinstance(flag, bool):
        raise TypeError(f"flag must be a bool or None, got {type(flag).__name__}")
    _debug_override = flag


def debug() -> bool:
    """Whether data-dependent checks also run on CUDA tensors (``CALIB_DEBUG=1``).

    Checks such as "labels lie in [0, K)" or "logits are finite" need the tensor's values
    on the host; on a GPU that forces a host-device synchronisation on every training
    step. They therefore run on CPU tensors always and on CUDA tensors only in debug mode
    (:func:`set_debug` or ``CALIB_DEBUG=1``); loaders validate whole splits once instead.
    """
    if _debug_override is not None:
        return _debug_override
    return os.environ.get(DEBUG_VAR, "").strip().lower() in ("1", "true", "yes")


CLAIMS_VAR = "CALIB_CLAIMS"   # "assert" (default: nbval in make test) or "report" (a reader's make book)
AUDIT_VAR = "CALIB_AUDIT_FILE"  # make audit: every claim's outcome appended here, nothing asserted
SEED_OFFSET_VAR = "CALIB_SEED_OFFSET"


def seed_offset() -> int:
    """``$CALIB_SEED_OFFSET`` (default 0): added to every seed a chapter trains with.

    The claims audit (``make audit``) executes each training chapter at several offsets
    to see whether an outcome depends on the seeds the chapter happens to use.
    """
    raw = os.environ.get(SEED_OFFSET_VAR, "").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_VAR}={raw!r} must be an integer >= 0") from None
    if value < 0:
        raise ValueError(f"{SEED_OFFSET_VAR}={raw!r} must be an integer >= 0")
    return value


def seeds(n: int) -> list[int]:
    """The ``n`` seeds a chapter trains with: ``offset, ..., offset + n - 1`` (:func:`seed_offset`)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return list(range(seed_offset(), seed_offset() + n))


def asserts_claims() -> bool:
    """Whether a claim that fails stops the chapter: at the ``quick`` profile, outside smoke
    mode, outside the audit, unless ``CALIB_CLAIMS=report`` (a reader's ``make book``).

    The quick profile is the scale CI runs and the audit checked; at ``colab`` and
    ``paper`` scale (or in smoke mode) a claim that fails is a finding, not a broken chapter.
    """
    mode = os.environ.get(CLAIMS_VAR, "").strip().lower() or "assert"
    if mode not in ("assert", "report"):
        raise ValueError(f"{CLAIMS_VAR}={mode!r}: use 'assert' (tests) or 'report' (a reader's build)")
    return current() == "quick" and not smoke() and mode == "assert" and not os.environ.get(AUDIT_VAR)


def _record(kind: str, text: str, outcome: str) -> None:
    path = os.environ.get(AUDIT_VAR, "").strip()
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, "claim": text, "outcome": outcome}) + "\n")


def _show(head: str, text: str) -> None:
    import textwrap

    # wrapped to the book's column (80 characters of output at 1280 px)
    print(textwrap.fill(head + text, width=80, subsequent_indent="    "))


def _check(kind: str, ok: bool, text: str) -> bool:
    ok = bool(ok)
    _record(kind, text, "holds" if ok else "fails")
    if ok:
        _show("holds: ", text)
    elif asserts_claims():
        _show("DOES NOT HOLD: ", text)
        raise AssertionError(text)
    else:
        _show("DOES NOT HOLD HERE (a reader's build goes on; make test would stop): ", text)
    return ok


def fact(ok: bool, text: str) -> bool:
    """A deterministic fact (a derivation, an exact computation, what the code guarantees):
    printed and asserted like :func:`claim`, but needs no audit record."""
    return _check("fact", ok, text)


def claim(ok: bool, text: str) -> bool:
    """An empirical outcome of the chapter's runs, asserted where :func:`asserts_claims`.

    Only outcomes that ``make audit`` found to hold in every audited run (seed offsets x
    thread counts) may be claims; ``tests/test_audit.py`` checks each claim's ``text`` (a
    string literal) against ``results/audit/``. Anything else is a :func:`verdict` or a
    :func:`report`.
    """
    return _check("claim", ok, text)


LEDGER_ROWS = "not applicable: the committed ledger's rows, the same in every draw"


def verdict(v: Any, *, audited: bool = True) -> Any:
    """Print a :class:`calib.evidence.Verdict` (holds / contradicted / undecided, with its
    interval), record its outcome for the audit, never assert; returns ``v``.

    In a training chapter at the quick profile the line is followed by how often the same
    outcome recurred in the claims audit (:func:`recurrence`). ``audited=False``: a verdict
    on committed ledger rows, which every draw reads unchanged, so its count would say
    nothing; the line says so instead."""
    _record("verdict", v.claim, v.outcome)
    _show("", str(v))
    if (r := _recurrence_here(v.claim, v.outcome)) is not None:
        _show("    audit: ", str(r) if audited else LEDGER_ROWS)
    return v


# ----------------------------------------------------------------------------- audit recurrence
# How often an outcome recurred in the claims audit (make audit; calib.experiments.audit writes
# results/audit/<chapter>/offset<k>-threads<t>.jsonl). A draw is a seed offset: it draws the
# seeds and, in a chapter that seeds its splits with the offset, the training and validation
# images. A draw gave an outcome when every thread setting it ran at gave it; a draw whose
# thread settings disagree is "split" and counts for no outcome (n counts draws, never runs).
AUDIT_ROOT = Path(__file__).resolve().parents[1] / "results" / "audit"
_CHAPTER: str | None = None  # set by describe(chapter)
_PROCEDURE = 1  # set by describe(procedure=)


def read_audit_record(path: str | os.PathLike) -> tuple[dict, int, list[dict]]:
    """One audited execution's file (calib.experiments.audit writes it): its head, the
    procedure it ran (1 where it records none) and its outcome lines. The one reader of
    the format, so a new line kind is handled here once."""
    head, *lines = (json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines())
    version = next((int(x["outcome"]) for x in lines if x.get("kind") == "procedure"), 1)
    return head, version, [x for x in lines if x.get("kind") != "procedure"]


def _audit_files(chapter: str | None, root: str | os.PathLike | None) -> list[tuple[dict, list[dict]]]:
    """(head, outcome lines) of each audited execution of ``chapter``'s current procedure."""
    folder = (Path(root) if root is not None else AUDIT_ROOT) / str(chapter)
    out = []
    for path in sorted(folder.glob("*.jsonl")) if chapter else []:
        head, version, lines = read_audit_record(path)
        if version == _PROCEDURE:
            out.append((head, lines))
    return out


@dataclass(frozen=True)
class Recurrence:
    """``k`` of ``n`` audited draws gave ``outcome``; ``lower`` is the one-sided 95 %
    Clopper-Pearson lower bound on the rate at which it recurs."""

    outcome: str
    k: int
    n: int
    split: int = 0  # draws whose thread settings disagreed (counted in n, never in k)
    others: tuple[tuple[str, int], ...] = ()  # the other draws' outcomes and their counts

    @property
    def lower(self) -> float:
        return _clopper_pearson_lower(self.k, self.n)

    @property
    def every_draw(self) -> bool:
        return self.n > 0 and self.k == self.n

    def __str__(self) -> str:
        if self.n == 0:
            return "not audited yet (make audit)"
        rest = "".join(f"{part}; " for part in _the_other_draws(self))
        return (f"{self.outcome} in {self.k} of {self.n} audited draws "
                f"({rest}recurrence rate >= {100 * self.lower:.0f} % at 95 %)")


def _clopper_pearson_lower(k: int, n: int, alpha: float = 0.05) -> float:
    """The p at which P(X >= k | n, p) = alpha, X binomial: found by bisection (no scipy here)."""
    from math import comb

    if k <= 0:
        return 0.0

    def tail(p: float) -> float:
        return sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) < alpha else (lo, mid)
    return lo


def audited_here() -> bool:
    """True where the audit's draws speak for this run: the audit reruns chapters at the
    quick profile only, so at ``colab``, at ``paper`` and in smoke mode no draw counts."""
    return current() == "quick" and not smoke()


def audit_outcomes(chapter: str | None = None, root: str | os.PathLike | None = None, *,
                   kind: str | None = None) -> dict[str, list[str]]:
    """``{text: one outcome per audited draw, by seed offset}`` for every claim or verdict text
    of ``chapter``'s current procedure (default chapter: the one given to :func:`describe`;
    only texts recorded as ``kind``, if given), read in one pass over its files. A draw gave
    the outcome its every execution recorded, or ``"split"`` where its thread settings
    disagreed (that draw decides nothing); offsets that never printed a text are left out.
    Empty where the draws do not speak for this run (:func:`audited_here`)."""
    if not audited_here():
        return {}
    draws: dict[str, dict[int, set[str]]] = {}
    kinds: dict[str, set[str | None]] = {}
    for head, lines in _audit_files(chapter or _CHAPTER, root):
        for line in lines:
            if (text := line.get("claim")) is not None:
                draws.setdefault(text, {}).setdefault(int(head["seed_offset"]), set()).add(line["outcome"])
                kinds.setdefault(text, set()).add(line.get("kind"))
    return {text: [next(iter(d)) if len(d) == 1 else "split" for _, d in sorted(by.items())]
            for text, by in draws.items() if kind is None or kind in kinds[text]}


def draw_outcomes(text: str, chapter: str | None = None, root: str | os.PathLike | None = None) -> list[str]:
    """One outcome per audited draw of ``text`` (:func:`audit_outcomes`)."""
    return audit_outcomes(chapter, root).get(text, [])


def recurrence(text: str, outcome: str, chapter: str | None = None,
               root: str | os.PathLike | None = None) -> Recurrence:
    """How many audited draws gave ``outcome`` for ``text`` at every thread setting, out of
    how many draws (:class:`Recurrence`)."""
    return _recurrence(draw_outcomes(text, chapter, root), outcome)


def _recurrence(draws: list[str], outcome: str) -> Recurrence:
    """:func:`recurrence` from the draws' outcomes of one text."""
    others = Counter(d for d in draws if d not in (outcome, "split"))
    return Recurrence(outcome, draws.count(outcome), len(draws), draws.count("split"),
                      tuple(sorted(others.items(), key=lambda kv: (-kv[1], kv[0]))))


def _draws_phrase(r: Recurrence) -> str:
    """ "in every one of the 5 audited draws" / "in 3 of 5 audited draws (the other 2:
    undecided)" ("in the one audited draw" where there is one), with what the other draws
    gave, so "0 of 5" says whether they went the other way or decided nothing."""
    where = ("not in the one audited draw" if r.n == 1 and not r.k
             else f"in {r.k} of {r.n} audited draws" if not r.every_draw
             else "in the one audited draw" if r.n == 1 else f"in every one of the {r.n} audited draws")
    parts = _the_other_draws(r)
    return where + (f" ({'; '.join(parts)})" if parts else "")


def _the_other_draws(r: Recurrence) -> list[str]:
    """What the draws that did not give ``r.outcome`` gave: ["undecided in all 5"],
    ["the other 2: undecided"], ["the other one split between thread settings"],
    ["the others: undecided in 3, split between thread settings in 1"]."""
    SPLIT = "split between thread settings"
    kinds = [*r.others, *([(SPLIT, r.split)] if r.split else [])]
    if len(kinds) > 1:
        return ["the others: " + ", ".join(f"{o} in {m}" for o, m in kinds)]
    if not kinds:
        return []
    label, m = kinds[0]
    sep = " " if label == SPLIT else ": "  # "the other one split ...", "the other one: undecided"
    if m == r.n:
        return [f"it {'gave ' * (label != SPLIT)}{label}" if m == 1 else
                f"all {m} {label}" if label == SPLIT else f"{label} in all {m}"]
    return [f"the other {'one' if m == 1 else m}{sep}{label}"]


def recurrence_text(text: str, outcome: str, chapter: str | None = None) -> str:
    """For prose (glue it): "in every one of the 5 audited draws", "in 3 of 5 audited draws"
    (naming the draws split between thread settings), or "in no audited draw at this profile"."""
    r = recurrence(text, outcome, chapter)
    return "in no audited draw at this profile" if r.n == 0 else _draws_phrase(r)


# true before the first audit of a version and at every profile the audit does not rerun
NO_AUDIT_RECORD = "the claims audit holds no draw of this version of the chapter at this profile"


def audit_clause(text: str, outcome: str | bool, chapter: str | None = None,
                 root: str | os.PathLike | None = None) -> str:
    """For prose (glue it), a whole clause: "the audit found the same in every one of the 5
    audited draws" (or "in 3 of 5 audited draws"), or :data:`NO_AUDIT_RECORD` while the audit
    holds no draw of the chapter's current procedure, where "found the same in no audited
    draw yet" would read as a failure.

    ``outcome``: this run's outcome, "the same" that the clause counts. For a
    :func:`report` pass its ``ok``: True counts the draws that recorded "holds", False
    those that recorded "fails", so the clause agrees with a sentence that says this run
    failed."""
    if not isinstance(outcome, str):  # a report's ok, a bool or numpy's bool_
        outcome = "holds" if outcome else "fails"
    r = recurrence(text, outcome, chapter, root)
    return NO_AUDIT_RECORD if r.n == 0 else f"the audit found the same {_draws_phrase(r)}"


def family_recurrence(family: Iterable[Any], chapter: str | None = None, *,
                      name_the_rest: bool = True) -> str:
    """For prose (glue it): how many of a family's outcomes (its verdicts' ``claim`` and
    ``outcome``) recurred in every audited draw, "4 of these 9 outcomes recurred in every
    one of the 5 audited draws"; with ``name_the_rest``, then each outcome decided here
    that did not, ". Decided here but not in every draw: “claim” (holds here) recurred in
    2 of 5 audited draws (the other 3: undecided)". :data:`NO_AUDIT_RECORD` while the audit
    holds no draw of them. An undecided outcome is no finding, so it is never named."""
    family = list(family)
    drawn = audit_outcomes(chapter)  # one pass over the records for the whole family
    rs = [_recurrence(drawn.get(v.claim, []), v.outcome) for v in family]
    ns = sorted({r.n for r in rs if r.n})  # draws per verdict: the same unless some skipped it
    if not ns:
        return NO_AUDIT_RECORD
    k = sum(r.every_draw for r in rs)
    head = (f"this outcome {'recurred' if k else 'did not recur'}" if len(rs) == 1 else
            f"{'each' if k == len(rs) else k} of these {len(rs)} outcomes recurred")
    every = ("in the one audited draw" if ns == [1] else
             f"in every one of the {ns[0]} audited draws" if len(ns) == 1 else
             f"in every one of their audited draws ({ns[0]} to {ns[-1]} a verdict)")
    rest = [f"“{v.claim}” ({v.outcome} here) recurred {_draws_phrase(r)}"
            if r.n else f"“{v.claim}” ({v.outcome} here) is in no audited draw"
            for v, r in zip(family, rs) if v.outcome != "undecided" and not r.every_draw]
    return (f"{head} {every}"
            + (". Decided here but not in every draw: " + "; ".join(rest)
               if rest and name_the_rest else ""))


def audit_state(chapter: str | None = None, root: str | os.PathLike | None = None, *,
                asserts: Iterable[str] | None = None) -> str:
    """One sentence for a chapter's prose (glue it): how often the claims audit executed the
    chapter, at which thread counts, and whether each claim it asserted held in every
    execution, read from the records (a chapter that only reports asserts none).

    ``asserts``: the texts of the claims the chapter asserts now. Claim lines of other
    texts, which an earlier version of the same procedure asserted, are then left out;
    an empty list says "this version of the chapter asserts no claim". None: every
    claim line counts."""
    keep = None if asserts is None else set(asserts)
    heads, claims = [], {}
    for head, lines in _audit_files(chapter or _CHAPTER, root):
        heads.append(head)
        for line in lines:
            if line.get("kind") == "claim" and (keep is None or line["claim"] in keep):
                claims.setdefault(line["claim"], []).append(line["outcome"])
    if not heads:
        return ("The claims audit has no record of this chapter's current procedure yet "
                "(make audit runs it).")
    offsets = sorted({h["seed_offset"] for h in heads})
    threads = sorted({h["threads"] for h in heads})
    failed = sum(any(o != "holds" for o in outs) for outs in claims.values())
    held = ("this version of the chapter asserts no claim" if keep == set()
            else "no claim was asserted in these executions" if not claims
            else "each of its asserted claims held in every execution" if not failed
            else f"{failed} of its {len(claims)} asserted claims did not hold in every execution")
    counts = "one thread" if threads == [1] else f"{' and '.join(map(str, threads))} threads"
    times = "once" if len(heads) == 1 else f"{len(heads)} times"
    return (f"The claims audit executed this chapter {times} at the quick profile (seed offsets "
            f"{', '.join(map(str, offsets))}; {counts}); {held}.")


def audit_threads(chapter: str | None = None, root: str | os.PathLike | None = None) -> list[int]:
    """The thread counts at which the claims audit executed ``chapter``'s current procedure,
    sorted (empty before the first execution): a draw is *split* only where there are two."""
    return sorted({int(head["threads"]) for head, _ in _audit_files(chapter or _CHAPTER, root)})


def _recurrence_here(text: str, outcome: str) -> Recurrence | None:
    """The recurrence printed under a verdict: only where the audit applies (a chapter it
    audits, at the quick profile, outside smoke mode and outside an audit run)."""
    if not audited_here() or os.environ.get(AUDIT_VAR) or not _CHAPTER:
        return None
    if not (AUDIT_ROOT / _CHAPTER).is_dir():
        return None
    return recurrence(text, outcome)


def report(ok: bool | None, text: str) -> None:
    """Print a finding that is reported, not asserted: a paper's claim tested on our runs.

    ``ok`` None: the runs that would decide it are not there yet (e.g. an unfinished ledger).
    """
    import textwrap

    head = {True: "holds here:     ", False: "does not hold: ", None: "not run yet:    "}[None if ok is None else bool(ok)]
    _record("report", text, {True: "holds", False: "fails", None: "not run"}[None if ok is None else bool(ok)])
    print(textwrap.fill(head + text, width=80, subsequent_indent=" " * 16))


def glue(name: str, value: Any, display: bool = True, *, markdown: bool = False) -> None:
    """``myst_nb.glue(name, value, display=display)`` inside the book; elsewhere show ``value``.

    ``markdown=True`` glues a string as Markdown (for ``{glue:md}``), so a page needs no
    import of IPython's ``Markdown``.

    A page of the book (the quickstart) is also a user's script, run where myst_nb is not
    installed (``torch-calib[posthoc,plots]`` alone): there nothing is glued, so the value is
    shown where it is made, with IPython's ``display`` in a notebook, else printed as
    ``name: value`` (save a figure with ``value.savefig(path)``).
    """
    try:
        from myst_nb import glue as book_glue
    except ImportError:  # not the book's environment
        book_glue = None
    if book_glue is not None:
        if markdown:
            from IPython.display import Markdown  # the book's environment has IPython

            value = Markdown(str(value))
        book_glue(name, value, display=display)
        return
    try:
        from IPython import get_ipython
        from IPython.display import display as show
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        show(value)
    else:
        print(f"{name}: {value}")


# ----------------------------------------------------------------------------- expected Colab time
# Sustained throughput we assume for the book's CIFAR networks on a T4 with AMP: 1.5 TFLOP/s,
# under a fifth of the card's 8.1 TFLOP/s FP32 peak (and ~2% of its 65 TFLOP/s FP16
# tensor-core peak): small convolutions on 32 x 32 images are limited by memory traffic,
# not arithmetic. For a ResNet-20 (82 MFLOP forward) that is ~6,000 training images/s.
