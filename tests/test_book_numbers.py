"""Numbers typed in the evidence chapters' prose (issue 42), read from the chapter sources.

A number in prose that states a result goes stale when the runs change. So every decimal
number and percentage in the prose of the chapters that report evidence must be one of:

* glued (``{glue:md}`` and the other roles are not prose; the code made the number);
* a setting the chapter's code uses: it appears as a token in one of its code cells, so
  the prose is checked against the code a reader can read beside it;
* a paper's figure, a value of ``calib/paper_results.csv``;
* one of :data:`CONVENTIONS` (the 95 % interval, the 5 % level, 80 % power, the
  confidence 0.8 of the definition of calibration).

Not prose, so not scanned: math (``$...$``, ``$$...$$``, ``{math}`` blocks), inline code,
roles with their targets, link targets, MyST option lines of directives (``:width:``) and
fenced code (a fence with a language, a code directive, or a bare fence whose text parses
as Python). Directive blocks that hold prose (admonitions, figure captions) are scanned.
Section, equation, table and figure references (§3.3, "Eq. 2", "Table C.3") and version
numbers ("torch 2.14", "1.2.3") are not numbers of results.

There is no per-chapter allowlist: a setting typed in prose must be one the code uses, or
be glued; a result must be glued or checked with ``calib.profile.fact``.
"""
from __future__ import annotations

import ast
import csv
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVIDENCE_CHAPTERS = ["02_overconfidence", "08_meta_regularisation", "09_calibrated_or_calibratable",
                     "10_bench_of_regularisers", "11_reproducing_tables",
                     "12_beyond_temperature_scaling", "13_calibration_under_shift",
                     "14_when_losses_help", "evidence"]
PATHS = [ROOT / "book" / f"{name}.ipynb" for name in EVIDENCE_CHAPTERS]

# Accepted anywhere: the levels and the definition every chapter uses, not results.
CONVENTIONS = frozenset({"95 %", "5 %", "0.05", "80 %", "0.8"})
# Accepted where the text after them says what they are: the interval of an equivalence
# test at the 5 % level (two one-sided tests) is the 90 % interval.
CONVENTIONS_BEFORE = {"90 %": re.compile(r"\s*(?:t\s+)?interval")}

# A decimal number (0.05, 2,000.5, −1.5 %) or a percentage (80 %, 25-40 %).
NUMBER = re.compile(r"(?<![\w.])[−-]?\d[\d,]*\.\d+(?:\s*%)?|(?<![\w.])\d[\d,]*\s*%")
# What a reference or a version looks like just before a number ("§", "Eq. ", "torch ").
REFERENCE_BEFORE = re.compile(
    r"(?:§\s*|§§\s*|§\s*\d[\d.]*\s*(?:[–-]|,|and)\s*|\b(?:Eqs?|Fig|Figs|Sec|App|Alg|Def|Thm|Prop)\.\s*|"
    r"\b(?:Equations?|Tables?|Figures?|Sections?|Appendix|Algorithm|Theorem|Lemma|"
    r"Proposition|Definition|Corollary|Example|Chapter|version|v)\s+|"
    r"\b(?:torch|PyTorch|Python|NumPy|numpy|SciPy|scipy|pandas|CUDA|cuDNN|Jupyter|"
    r"jupyter-book|myst-nb|sphinx|matplotlib)\s+)$")
VERSION = re.compile(r"\d+\.\d+\.\d+")  # 1.2.3: a version, never a result
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode", "literalinclude", "math",
                   "bibliography", "glue", "glue:any", "glue:text", "mermaid", "raw", "eval-rst"}
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(.*?)\s*$")
OPTION = re.compile(r"^\s*:([\w-]+):(.*)$")


def _looks_like_code(text: str) -> bool:
    if not text.strip():
        return True
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _unfence(markdown: str) -> str:
    """The markdown without its code blocks; directives that hold prose keep their text
    (without their option lines, except ``:alt:``, which a reader hears)."""
    out: list[str] = []
    stack: list[tuple[str, str, list[str]]] = []  # (fence, kind, lines) of each open block

    def close() -> None:
        fence, kind, lines = stack.pop()
        body = "\n".join(lines)
        keep = kind == "prose" or (kind == "bare" and not _looks_like_code(body))
        target = stack[-1][2] if stack else out
        if keep:
            target.append(body)

    for line in markdown.splitlines():
        m = FENCE.match(line)
        if m and stack and not m.group(2) and m.group(1)[0] == stack[-1][0][0] \
                and len(m.group(1)) >= len(stack[-1][0]):
            close()
            continue
        if m:
            info = m.group(2)
            directive = re.match(r"\{([\w:-]+)\}", info)
            if directive:
                kind = "code" if directive.group(1) in CODE_DIRECTIVES else "prose"
            else:
                kind = "code" if info else "bare"
            stack.append((m.group(1), kind, []))
            continue
        if stack and stack[-1][1] == "prose" and (opt := OPTION.match(line)):
            line = opt.group(2) if opt.group(1) == "alt" else ""
        (stack[-1][2] if stack else out).append(line)
    while stack:  # an unclosed fence runs to the end of the cell
        close()
    return "\n".join(out)


def prose(markdown: str) -> str:
    """The text a reader reads as prose in a markdown cell, on one line."""
    text = _unfence(markdown)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$]+\$", " ", text)
    text = re.sub(r"\{[\w:.-]+\}(`+)(?:(?!\1).)*?\1", " ", text, flags=re.S)  # roles, targets
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", " ", text, flags=re.S)  # inline code
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"^\([\w:-]+\)=\s*$", " ", text, flags=re.M)  # MyST targets
    return " ".join(text.split())


def _norm(number: str) -> str:
    """The number as code writes it: no sign (a margin ±0.1 is ``margin=0.1``), no %."""
    return number.replace(" ", "").rstrip("%").rstrip(",").lstrip("−-")


def _conv(number: str) -> str:
    return re.sub(r"\s*%$", " %", number.strip())


def _paper_values() -> set[str]:
    values: set[str] = set()
    with (ROOT / "calib" / "paper_results.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            values |= {row[k].strip() for k in ("value", "std", "temperature") if row[k].strip()}
            values |= {kv.split("=", 1)[1] for kv in row["params"].split(",") if "=" in kv}
    return values


PAPER_VALUES = _paper_values()


def typed_numbers(markdown: str, code: str = "", paper: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The numbers of ``markdown``'s prose that nothing produced or checks: not glued, not
    a token of ``code``, not in ``paper``, not a convention, a reference or a version."""
    text = prose(markdown)
    code_commas = code.replace("_", ",")
    found = []
    for m in NUMBER.finditer(text):
        number = m.group(0).strip()
        if REFERENCE_BEFORE.search(text[max(0, m.start() - 40):m.start()]) or VERSION.match(text, m.start()):
            continue
        if _conv(number) in CONVENTIONS or _norm(number) in paper:
            continue
        if (after := CONVENTIONS_BEFORE.get(_conv(number))) and after.match(text, m.end()):
            continue
        token = re.compile(r"(?<![\w.])" + re.escape(_norm(number)) + r"(?![\w]|\.\d)")
        if token.search(code) or token.search(code_commas):
            continue
        found.append(number)
    return found


def _ids(paths):
    return [p.stem for p in paths]


@pytest.mark.parametrize("path", PATHS, ids=_ids(PATHS))
def test_prose_types_no_number_that_code_or_a_paper_did_not_give(path):
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    typed = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            typed += [f"cell {i}: {n!r}" for n in typed_numbers("".join(cell["source"]), code, PAPER_VALUES)]
    assert not typed, (f"{path.name}: numbers typed in prose that no code cell uses, no paper "
                       f"printed and no glue gives: {typed}; glue them (calib.profile.glue) or "
                       f"check them (calib.profile.fact)")


def test_the_scanner_catches_a_typed_result_and_nothing_else():
    code = "LR = 0.05\nfor t in np.arange(0.01, 10.01, 0.01):\n    pass\n"
    paper = {"4.36"}
    md = """The error is 3.72 % here. A glued one is {glue:md}`ch-err` %, and {glue:text}`x:.2f`.
We train at learning rate 0.05 (a setting of the code). The paper prints 4.36 %.
In math $T = 2.51$ and $$\\mathrm{ECE} = 0.123$$ are not prose, nor is `ece=0.77`.
See §3.3, Eq. 2, Table C.3 and [a link](https://x.org/v1.5/page); torch 2.14 here.
Every test is at the 5 % level with 95 % intervals.

```python
print(0.999)
```

````{admonition} How sure are we?
:class: dropdown
:width: 62.5%
Seeds give 1.5 nats of spread.

```
x = 7.25
```
````

```
A bare fence of prose, 8.5 points.
```
"""
    assert typed_numbers(md, code, paper) == ["3.72 %", "1.5", "8.5"]
    assert typed_numbers("at most 16.6 nats", "floor = 16.6") == []
    assert typed_numbers("at most 16.6 nats") == ["16.6"]
    assert typed_numbers("2,000.5 images, 0.25 of them", "N = 2_000.5") == ["0.25"]
    assert typed_numbers("its 90 % interval, trained on 90 % of it") == ["90 %"]
    assert typed_numbers("inside (−0.1, 0.1)", "margin=0.1") == []
    assert typed_numbers("§5.2–5.3 and Eq. 3.1; torch 2.11.0 against 2.14", "") == ["2.14"]
