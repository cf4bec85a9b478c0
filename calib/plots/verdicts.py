"""A family of verdicts at a glance: claims by conditions, one symbol per cell.

:func:`verdict_grid` lays an :class:`calib.evidence.Family` out as a compact HTML table:
a row per claim, a column per condition (a training-set size, a protocol, a loss, γ),
and in each cell ✓ *holds*, ✗ *contradicted* or ? *undecided* (Holm-corrected with the
rest of the family), the difference with its per-comparison interval and, given the
audit's records, how often the audited draws reached the same verdict ("10/10"). Symbols
and words carry the outcome, so the table reads in greyscale; the tint only helps.
It wraps its headers and scrolls inside its own box on a narrow screen, so the page
itself never scrolls sideways.

>>> from calib import evidence, plots
>>> fam = evidence.Family(["2,500", "10,000"], min_n=3)
>>> fam.add("CE over-confident (T > 1)", "2,500", [1.4, 1.5, 1.3], 1.0, "T > 1")
>>> grid = plots.verdict_grid(fam, title="CE's temperature")
>>> "✓ holds" in grid.html
True
"""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..evidence import Family, Verdict, interval, number

__all__ = ["VerdictGrid", "verdict_grid", "audited_outcomes", "SYMBOLS"]

SYMBOLS = {"holds": "✓", "contradicted": "✗", "undecided": "?"}

# Scoped to the grid's classes, so the table looks the same in the book, Jupyter and Colab.
# The tints are translucent (light and dark themes); symbols and words carry the outcome.
_STYLE = """<style>
.calib-verdicts{max-width:100%;margin:0.5em 0 1em;font-size:0.8rem;line-height:1.3}
.calib-verdicts .calib-title{font-weight:600;font-size:0.9rem}
.calib-verdicts .calib-legend{margin:0 0 0.3em}
.calib-verdicts .calib-scroll{overflow-x:auto;max-width:100%}
.calib-verdicts table{border-collapse:collapse;font-size:inherit;width:100%;max-width:100%;margin:0;
  table-layout:fixed}
.calib-verdicts th,.calib-verdicts td{border:1px solid rgba(128,128,128,0.45);
  padding:0.2em 0.4em;vertical-align:top;overflow-wrap:anywhere}
.calib-verdicts thead th{text-align:center;font-weight:600}
.calib-verdicts tbody th{text-align:left;font-weight:normal;min-width:6em;max-width:16em}
.calib-verdicts td{text-align:center;font-variant-numeric:tabular-nums}
.calib-verdicts .calib-mark{font-weight:700;font-size:1.05em}
.calib-verdicts .calib-out,.calib-verdicts .calib-eff{white-space:nowrap}
.calib-verdicts .calib-ci,.calib-verdicts .calib-rec{display:block}
.calib-verdicts .calib-rec{opacity:0.8}
.calib-verdicts td.calib-holds{background:rgba(46,139,87,0.16)}
.calib-verdicts td.calib-contradicted{background:rgba(200,60,60,0.16)}
.calib-verdicts td.calib-waiting{font-style:italic;opacity:0.8}
</style>"""


class VerdictGrid:
    """The grid's HTML (``.html``, shown by Jupyter through ``_repr_html_``) and a plain-text
    version (``str(grid)``) for a terminal or a log."""

    def __init__(self, html_text: str, text: str) -> None:
        self.html, self.text = html_text, text

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"VerdictGrid({self.text!r})"


def audited_outcomes(chapter: str, root: str | None = None) -> dict[str, list[str]]:
    """``{claim text: [outcome of each audited draw]}`` for one chapter's verdicts, from the
    audit's records (``results/audit``): the ``recurrence`` argument of :func:`verdict_grid`.

    A draw is a seed offset; it gave an outcome when all its thread settings gave it, else it
    is ``"split"`` (:func:`calib.profile.audit_outcomes`, read in one pass; the same draws
    :func:`calib.profile.recurrence` counts under each verdict). Only the chapter's current
    procedure counts, so a verdict only an earlier one printed reads "not audited".
    """
    from .. import profile
    from ..experiments.audit import AUDIT_DIR

    folder = None if root is None else Path(root) / AUDIT_DIR
    return profile.audit_outcomes(chapter, folder, kind="verdict")


def _recurrence(v: Verdict, recurrence: Mapping[str, Sequence[str]] | None) -> str | None:
    if recurrence is None:
        return None
    runs = list(recurrence.get(v.claim, ()))
    if not runs:
        return "not audited"
    return f"{sum(o == v.outcome for o in runs)}/{len(runs)}"


def _cell(v: Verdict | str, recurrence: Mapping[str, Sequence[str]] | None) -> tuple[str, str]:
    """(HTML of one ``<td>``, its plain text)."""
    if not isinstance(v, Verdict):
        note = html.escape(v)
        return f'<td class="calib-waiting">{note}</td>', v
    mark = SYMBOLS[v.outcome]
    ci = interval(v.low, v.high)
    effect = number(v.effect, v.unit)
    rec = _recurrence(v, recurrence)
    title = html.escape(f"{v.outcome}: {v.claim}", quote=True)
    parts = [f'<span class="calib-out"><span class="calib-mark">{mark}</span> {v.outcome}</span>',
             f'<span class="calib-ci"><span class="calib-eff">{html.escape(effect)}</span> '
             f'{html.escape(ci)}</span>']  # symbol and word carry the outcome in greyscale
    if rec is not None:
        parts.append(f'<span class="calib-rec">{html.escape(rec)}</span>')
    text = f"{mark} {effect} {ci}" + (f" {rec}" if rec is not None else "")
    return f'<td class="calib-{v.outcome}" title="{title}">{"".join(parts)}</td>', text


def _legend(family: Family, recurrence: Mapping[str, Sequence[str]] | None, blank: bool = False) -> str:
    verdicts = family.verdicts()
    levels = {v.ci_level for v in verdicts}
    level = f"{100 * levels.pop():.0f} % " if len(levels) == 1 else ""
    said = (f"✓ holds · ✗ contradicted · ? undecided; each cell: the difference "
            f"[{level}interval per comparison]")
    # decide() corrects hypotheses, not verdicts: an equivalence claim brings two ("within"
    # and "beyond" its margin), and a verdict with nothing to measure its noise brings none
    hypotheses = max((v.family_size for v in verdicts), default=0)
    if len(verdicts) > 1 or hypotheses > 1:
        n = len(verdicts)
        size = (f"{n} tests" if hypotheses == n else
                f"{n} verdict{'s' * (n != 1)}, {hypotheses} hypothes{'i' if hypotheses == 1 else 'e'}s")
        said += f"; outcomes corrected together ({family.method.capitalize()}, {size})"
    if recurrence is not None:
        said += "; k/n: in k of n audited draws the same outcome at every thread setting"
    if blank:
        said += "; — no test in this cell"
    return said


def verdict_grid(family: Family, *, title: str = "", row_label: str = "claim",
                 recurrence: Mapping[str, Sequence[str]] | None = None) -> VerdictGrid:
    """``family`` as a table: one row per claim, one column per condition.

    Each tested cell shows ✓ holds / ✗ contradicted / ? undecided after the family's
    correction (:meth:`calib.evidence.Family.cells`, Holm 1979 by default), the difference
    a − b and its per-comparison interval (:func:`calib.evidence.number`: two significant
    digits); a cell still waiting for runs shows its note ("1 of 3 seeds", "not run yet").
    ``recurrence``: ``{claim text: audited outcomes}`` (:func:`audited_outcomes`); each
    cell then adds how many audited draws reached its outcome ("10/10"), or
    "not audited". The legend counts the verdicts the correction decided and, where the
    number differs, the hypotheses it adjusted (an equivalence claim brings two, "within"
    and "beyond" its margin: "24 verdicts, 26 hypotheses").
    Returns a :class:`VerdictGrid` (HTML in a notebook, text in ``str``).
    """
    if not isinstance(family, Family):
        raise TypeError(f"family must be a calib.evidence.Family, got {type(family).__name__}")
    if not isinstance(title, str) or not isinstance(row_label, str):
        raise TypeError("title and row_label must be strings")
    if recurrence is not None and not isinstance(recurrence, Mapping):
        raise TypeError(f"recurrence must map claim texts to audited outcomes, got {type(recurrence).__name__}")
    cells = family.cells()
    if not cells:
        raise ValueError("family has no cells: add at least one comparison first")
    rows = list(dict.fromkeys(row for row, _ in cells))
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in family.columns)
    body, lines = [], []
    for row in rows:
        tds, texts = [], []
        for col in family.columns:
            td, text = _cell(cells.get((row, col), "—"), recurrence)
            tds.append(td)
            texts.append(f"{col}: {text}")
        body.append(f'<tr><th scope="row">{html.escape(row)}</th>{"".join(tds)}</tr>')
        lines.append(f"{row}: " + "; ".join(texts))
    blank = any((row, col) not in cells for row in rows for col in family.columns)
    legend = _legend(family, recurrence, blank)
    # title and legend above the scrolling box, so that they wrap to a phone's width
    top = (f'<div class="calib-title">{html.escape(title)}</div>' if title else "")
    top += f'<div class="calib-legend">{html.escape(legend)}</div>'
    label = f' aria-label="{html.escape(title, quote=True)}"' if title else ""
    table = (f'<table class="calib-verdict-grid"{label}>'
             f'<thead><tr><th scope="col">{html.escape(row_label)}</th>{head}</tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table>')
    text = "\n".join(([title] if title else []) + [legend] + lines)
    return VerdictGrid(f'{_STYLE}<div class="calib-verdicts">{top}'
                       f'<div class="calib-scroll">{table}</div></div>', text)
