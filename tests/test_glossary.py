"""The glossary page: the terms the chapters lean on are defined, and every {term} role used
in the book names one of them (Sphinx matches terms case-insensitively)."""
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "book" / "glossary.md"

# the terms issue 45 asks every page to define or link (one name of each entry suffices)
REQUIRED = ["ECE", "NLL", "Temperature scaling", "Temperature T", "Over-confident", "Under-confident",
            "Reliability diagram", "Focal loss", "FLSD-53", "Dual focal loss", "BSCE-GRA",
            "Label smoothing", "Brier score", "Protocol A", "Protocol B", "Profile", "Ledger",
            "Sweep", "Seed", "Draw", "Verdict", "Holds", "Contradicted", "Undecided", "Family",
            "Holm's correction", "Interval", "Audit"]


def _entries() -> dict[str, str]:
    """{term (lower case): its definition}; several unindented lines name one entry."""
    body = GLOSSARY.read_text().split("```{glossary}\n", 1)[1].rsplit("```", 1)[0]
    out: dict[str, str] = {}
    for block in body.strip().split("\n\n"):
        lines = block.splitlines()
        names = [x for x in lines if x and not x.startswith(" ")]
        text = " ".join(x.strip() for x in lines if x.startswith(" "))
        out.update({n.strip().lower(): text for n in names})
    return out


def _term_roles() -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / "book").rglob("*")):
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                             if c["cell_type"] == "markdown")
        elif path.suffix == ".md":
            text = path.read_text()
        else:
            continue
        for role in re.findall(r"\{term\}`([^`]+)`", text):
            target = re.search(r"<([^>]+)>\s*$", role)
            found.append((path.relative_to(ROOT).as_posix(), (target.group(1) if target else role).strip()))
    return found


def test_the_glossary_defines_the_terms_the_chapters_lean_on():
    entries = _entries()
    missing = [t for t in REQUIRED if t.lower() not in entries]
    assert not missing, f"book/glossary.md lacks {missing}"
    for term in REQUIRED:  # 1-3 short sentences for a student
        sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*(])", entries[term.lower()]) if s]
        assert 1 <= len(sentences) <= 4, f"{term}: {len(sentences)} sentences"


def test_every_term_role_names_a_glossary_entry():
    entries = _entries()
    unknown = [(page, t) for page, t in _term_roles() if t.lower() not in entries]
    assert not unknown, f"{{term}} roles with no glossary entry: {unknown}"
