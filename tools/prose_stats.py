"""How hard the book's prose is to read, page by page, against the limits of issue 45.

Usage::

    python tools/prose_stats.py                 # the table for every page of _toc.yml
    python tools/prose_stats.py --check         # ... and exit 1 if an enforced page breaks a limit
    python tools/prose_stats.py --check --all   # ... every page enforced (the goal)
    python tools/prose_stats.py book/02_overconfidence.ipynb   # some pages only

What counts (markdown cells of a notebook, or a .md page):

* **Removed**: fenced code and directive blocks (```` ``` ```` and ``:::``; figures, glue
  blocks, bibliographies), math (``$...$`` and ``$$...$$``, each becomes one word), tables,
  headings, HTML comments, MyST targets ``(label)=`` and front matter. Inline code, a glue
  or cite role and a ``{doc}``/``{ref}`` role become one word; a ``{term}`` role and a
  link keep their visible text (the reader reads it), never the link's address.
* **Admonitions** (``{note}``, ``{tip}``, ``{warning}``, ``{dropdown}``, ``{admonition}`` ...)
  and a ``{glossary}``'s definitions: their text counts for sentences and parentheses, not
  for the paragraph rule.
* **Lists**: a block whose first line starts with ``-``, ``*``, ``+`` or ``1.`` counts for
  sentences and parentheses, not for the paragraph rule.
* **Paragraph**: the remaining text between blank lines, at least 5 words.
* **Sentence**: split after ``.``, ``!`` or ``?`` followed by a space and a capital, ``*``
  or ``(``; abbreviations such as "et al.", "e.g." and "Fig." do not end one; fragments of
  fewer than 3 words (a label, "Exercises") are not sentences.

Limits (issue 45, d2l's prose as the yardstick: 20 words a sentence, 5 % over 40, 0.8
parentheses per 100 words): mean words per sentence <= 22, at most 8 % of sentences over
40 words, at most 1.2 opening parentheses per 100 words, no paragraph over 180 words.

Enforcement is staged: ``ENFORCED`` lists the pages held to the limits by ``make lint``
(and so ``make test``); a page joins it once its prose is rewritten, and the list ends as
every page of the book.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_MEAN, MAX_LONG_SHARE, MAX_PARENS, MAX_PARAGRAPH, LONG = 22.0, 0.08, 1.2, 180, 40

# Pages held to the limits now (each passed when it was added); the rest are printed only.
ENFORCED = [
    "book/glossary.md",
    "book/notation.md",
    "book/intro.md",
    "book/papers.md",
    "book/coursework/instructors.md",
    "book/02_overconfidence.ipynb",
    "book/14_when_losses_help.ipynb",
    "book/conformance.ipynb",
    "book/evidence.ipynb",
    "book/quickstart.ipynb",
    "book/12_beyond_temperature_scaling.ipynb",
    "book/08_meta_regularisation.ipynb",
    "book/13_calibration_under_shift.ipynb",
    "book/01_measuring_calibration.ipynb",
    "book/03_loss_field_guide.ipynb",
    "book/04_focal_entropy.ipynb",
    "book/05_gradient_factor.ipynb",
    "book/06_brier_score.ipynb",
    "book/07_bsce_gra.ipynb",
    "book/09_calibrated_or_calibratable.ipynb",
    "book/10_bench_of_regularisers.ipynb",
    "book/11_reproducing_tables.ipynb",
    "book/coursework/a1_measuring_calibration/a1_measuring_calibration.ipynb",
    "book/coursework/a2_focal_loss/a2_focal_loss.ipynb",
    "book/coursework/a3_temperature_scaling/a3_temperature_scaling.ipynb",
    "book/coursework/a4_gradient_weighting/a4_gradient_weighting.ipynb",
    "book/coursework/a5_post_hoc_calibration/a5_post_hoc_calibration.ipynb",
    "book/coursework/a6_training_and_evidence/a6_training_and_evidence.ipynb",
]

ADMONITIONS = {"note", "tip", "warning", "important", "caution", "attention", "danger", "error",
               "hint", "seealso", "admonition", "dropdown", "margin", "sidebar", "epigraph"}
ABBREVIATIONS = ["et al.", "e.g.", "i.e.", "cf.", "vs.", "Fig.", "Figs.", "Eq.", "Eqs.", "App.",
                 "Sec.", "Tab.", "resp.", "approx.", "No.", "Ch."]
_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})[ \t]*(?:\{(?P<name>[\w:-]+)\})?[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.S | re.M)
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z*(])")


@dataclass(frozen=True)
class Stats:
    words: int
    sentences: int
    mean: float  # words per sentence
    long_share: float  # share of sentences over LONG words
    parens: float  # opening parentheses per 100 words
    longest: int  # words in the longest paragraph (lists and admonitions excepted)
    over: int  # paragraphs over MAX_PARAGRAPH words

    def problems(self) -> list[str]:
        out = []
        if self.mean > MAX_MEAN:
            out.append(f"{self.mean:.1f} words a sentence (limit {MAX_MEAN:g})")
        if self.long_share > MAX_LONG_SHARE:
            out.append(f"{100 * self.long_share:.0f} % of sentences over {LONG} words "
                       f"(limit {100 * MAX_LONG_SHARE:g} %)")
        if self.parens > MAX_PARENS:
            out.append(f"{self.parens:.1f} parentheses per 100 words (limit {MAX_PARENS:g})")
        if self.over:
            out.append(f"{self.over} paragraph(s) over {MAX_PARAGRAPH} words, the longest {self.longest}")
        return out


def _markdown(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    text = path.read_text(encoding="utf-8")
    return [re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)]  # front matter


def _inline(text: str) -> str:
    """Markup to what a reader reads: roles, math, code and links to words."""
    text = re.sub(r"\$\$.*?\$\$", " MATH ", text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$[^$\n]+\$", " MATH ", text)
    text = re.sub(r"\{term\}`([^`<]*?)\s*(?:<[^>]*>)?`", r"\1", text)  # the term's visible text
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " REF ", text)  # cite, glue, doc, ref, numref, eq
    text = re.sub(r"`[^`\n]+`", " CODE ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    # a citation written out for a plain-Markdown copy, "(Mukhoti et al., 2020)", reads as the
    # {cite} role it replaces: one word, not an aside in parentheses
    text = re.sub(r"\((?:(?:[A-Z][^()]*?,? )?(?:19|20)\d\d[a-z]?(?:; )?)+\)", " REF ", text)
    return text


def blocks(markdown: str) -> list[tuple[str, str]]:
    """``(kind, text)`` for each block of prose: kind is ``paragraph``, ``list`` or ``admonition``."""
    out: list[tuple[str, str]] = []

    def fence(m: re.Match) -> str:
        name = (m.group("name") or "").split(":")[0]
        body = re.sub(r"^:\w[\w-]*:.*$", "", m.group("body"), flags=re.M)  # directive options
        if name == "glossary":  # the definitions (indented), not the terms
            body = "\n".join(x if x[:1].isspace() else "" for x in body.splitlines())
        if name in ADMONITIONS or name == "glossary":
            out.extend(("admonition", t) for t in _paragraphs(body))
        return "\n\n"

    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "\n\nMATH\n\n", text, flags=re.S)  # display math: never prose
    text = _FENCE.sub(fence, text)
    for para in re.split(r"\n\s*\n", text):
        lines = [x for x in para.splitlines()
                 if not re.match(r"^\s*(#{1,6}\s|\|.*\||\([\w:-]+\)=\s*$|>?\s*$)", x)]
        if not lines:
            continue
        if _LIST.match(lines[0]):  # each item is read on its own, its marker dropped
            items: list[list[str]] = []
            for line in lines:
                if _LIST.match(line) or not items:
                    items.append([_LIST.sub("", line, count=1)])
                else:
                    items[-1].append(line)
            texts = [("list", " ".join(_inline("\n".join(item)).split())) for item in items]
        else:
            texts = [("paragraph", " ".join(_inline("\n".join(lines)).split()))]
        out.extend((kind, t) for kind, t in texts if len(t.split()) >= 5)
    return out


def _paragraphs(text: str) -> list[str]:
    return [p for p in (" ".join(_inline(x).split()) for x in re.split(r"\n\s*\n", text))
            if len(p.split()) >= 5]


def sentences(text: str) -> list[str]:
    """The sentences of a paragraph (fragments of fewer than 3 words left out)."""
    for i, abbr in enumerate(ABBREVIATIONS):
        text = text.replace(abbr, abbr.replace(".", f"\x00{i}\x00"))
    parts = [re.sub(r"\x00\d+\x00", ".", s) for s in _SPLIT.split(text)]
    return [s for s in parts if len(s.split()) >= 3]


def stats(markdown_cells: list[str]) -> Stats:
    """The statistics of a page's markdown (one string per cell)."""
    found = [b for cell in markdown_cells for b in blocks(cell)]
    sents = [s for _, text in found for s in sentences(text)]
    lengths = [len(s.split()) for s in sents]
    words = sum(lengths)
    parens = sum(text.count("(") for _, text in found)
    paras = [len(text.split()) for kind, text in found if kind == "paragraph"]
    return Stats(words=words, sentences=len(sents), mean=words / max(1, len(sents)),
                 long_share=sum(n > LONG for n in lengths) / max(1, len(sents)),
                 parens=100 * parens / max(1, words), longest=max(paras, default=0),
                 over=sum(n > MAX_PARAGRAPH for n in paras))


def page_stats(path: str | Path) -> Stats:
    return stats(_markdown(ROOT / path))


def pages() -> list[str]:
    """Every page of _toc.yml, the API pages' own prose included (autodoc's is not in the file)."""
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    out = []
    for entry in re.findall(r"(?:root|file):\s*(book/[\w/.-]+)", toc):
        for suffix in (".ipynb", ".md"):
            if (ROOT / (entry + suffix)).exists():
                out.append(entry + suffix)
                break
    return out


def table(paths: list[str], enforced: set[str]) -> tuple[str, dict[str, list[str]]]:
    """The printed table and, per enforced page over a limit, its problems."""
    head = (f"{'page':38s} {'words':>6s} {'w/sent':>6s} {'>40w':>5s} {'(/100w':>6s} "
            f"{'maxpara':>7s} {'>180w':>5s}  status")
    rows, failing = [head, "-" * len(head)], {}
    for path in paths:
        s = page_stats(path)
        problems = s.problems()
        status = ("ok" if not problems else "OVER") + (" (enforced)" if path in enforced else "")
        if problems and path in enforced:
            failing[path] = problems
        rows.append(f"{Path(path).stem[:38]:38s} {s.words:6d} {s.mean:6.1f} {100 * s.long_share:4.0f}% "
                    f"{s.parens:6.2f} {s.longest:7d} {s.over:5d}  {status}")
    return "\n".join(rows), failing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", help="pages (relative to the repository); default: every page")
    parser.add_argument("--check", action="store_true", help="exit 1 if an enforced page breaks a limit")
    parser.add_argument("--all", action="store_true", help="enforce the limits on every page shown")
    args = parser.parse_args(argv)
    paths = args.pages or pages()
    missing = [p for p in paths if not (ROOT / p).exists()]
    if missing:
        parser.error(f"no such page: {', '.join(missing)}")
    enforced = set(paths) if args.all else set(ENFORCED)
    text, failing = table(paths, enforced)
    print(text)
    print(f"limits: mean <= {MAX_MEAN:g} words a sentence, <= {100 * MAX_LONG_SHARE:g} % over {LONG} "
          f"words, <= {MAX_PARENS:g} parentheses per 100 words, no paragraph over {MAX_PARAGRAPH} "
          f"words (lists and admonitions excepted); enforced: {len(enforced & set(paths))} of {len(paths)}")
    if args.check and failing:
        for path, problems in failing.items():
            print(f"prose: {path}: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
