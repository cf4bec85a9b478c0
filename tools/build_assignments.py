"""Build the coursework: otter-grader student notebooks and autograders from the masters.

Each master notebook ``book/assignments/<name>.ipynb`` is in otter-grader's "assign"
format (solutions and hidden tests inside). ``otter assign`` turns it into

* ``<out>/<name>/student/``: the notebook students get (solutions replaced by ``...``,
  hidden tests removed) and its public tests in ``tests/``;
* ``<out>/<name>/autograder/``: the solution notebook, every test (public and hidden)
  and ``<name>-autograder.zip``, which ``otter run -a <zip> <submission.ipynb>`` grades
  with.

``--publish`` also copies each student version into ``book/coursework/<name>/``, the
pages of the book's "Coursework" part and what a Colab launch button opens;
``tests/test_assignments.py`` fails while those copies are older than the masters.

``--variant SEED`` builds a course's own variant instead (``assignment_variants``): each
master's ``# VARIANT`` constants (data seeds, gamma, bin counts) drawn from SEED, and the
hidden tests' reference values recomputed from the reference solution under them, so the
hidden answers are not those of the public masters. ``<out>/<name>/variant.json`` records
what was drawn. Without it the build is that of the masters as written.

    python tools/build_assignments.py [--out _build/assignments] [--publish | --variant SEED] [NAME ...]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
MASTERS = ROOT / "book" / "assignments"
COURSEWORK = ROOT / "book" / "coursework"
DEFAULT_OUT = ROOT / "_build" / "assignments"


def masters() -> list[pathlib.Path]:
    """The master notebooks, ``book/assignments/aN_topic.ipynb``, in order."""
    return sorted(MASTERS.glob("a[0-9]_*.ipynb"))


def build(master: pathlib.Path, out: pathlib.Path = DEFAULT_OUT, variant: int | None = None) -> pathlib.Path:
    """Run ``otter assign`` on one master; return ``<out>/<name>`` (student/ and autograder/).

    ``variant``: a seed, for a course's variant of the master (see the module doc). The
    autograder zip gets a fixed name, ``<name>-autograder.zip`` (otter stamps the time
    into it).
    """
    import assignment_variants

    master = pathlib.Path(master)
    if not master.is_file():
        raise FileNotFoundError(f"master notebook not found: {master}")
    nb, drawn = assignment_variants.apply(json.loads(master.read_text()), master.stem, variant)
    dest = pathlib.Path(out).resolve() / master.stem
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="calib-assign-") as tmp:
        for extra in master.parent.iterdir():  # requirements.txt, beside the notebook for otter
            if extra.is_file() and extra.suffix != ".ipynb":
                shutil.copy(extra, tmp)
        source = pathlib.Path(tmp) / master.name
        source.write_text(dumps(nb))
        cmd = [sys.executable, "-m", "otter", "assign", "--no-pdfs", str(source), str(dest)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    zips = sorted((dest / "autograder").glob("*.zip"))
    if done.returncode != 0 or len(zips) != 1:
        raise RuntimeError(f"otter assign failed on {master.name}:\n{done.stdout}\n{done.stderr}")
    zips[0].rename(autograder_zip(dest))
    if drawn is not None:
        (dest / "variant.json").write_text(json.dumps(drawn, indent=1) + "\n")
    return dest


def autograder_zip(built: pathlib.Path) -> pathlib.Path:
    """Where :func:`build` leaves the autograder zip of the assignment built at ``built``."""
    return built / "autograder" / f"{built.name}-autograder.zip"


def student_notebook(built: pathlib.Path) -> dict:
    """The built student notebook, with stable cell ids (otter draws random ones).

    Its Markdown is plain (:func:`plain_markdown`): Colab and Jupyter show MyST roles
    as raw text.
    """
    nb = json.loads((built / "student" / f"{built.name}.ipynb").read_text())
    cited: dict[str, None] = {}
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"{built.name[:2]}-{i:02d}"
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        elif cell["cell_type"] == "markdown":
            cell["source"] = plain_markdown("".join(cell["source"]), cited).splitlines(keepends=True)
    return nb


def _bib() -> dict[str, dict[str, str]]:
    """references.bib: key -> {field: value} (braces dropped)."""
    entries = {}
    text = (ROOT / "book" / "references.bib").read_text()
    for key, body in re.findall(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S):
        fields = {k.lower(): re.sub(r"[{}]", "", v).strip()
                  for k, v in re.findall(r"(\w+)\s*=\s*\{(.*?)\},?\s*$", body, re.M)}
        entries[key.strip()] = fields
    return entries


def _authors(entry: dict[str, str]) -> str:
    names = [a.split(",")[0].strip() for a in entry.get("author", "").split(" and ") if a.strip()]
    if len(names) > 2:
        return f"{names[0]} et al."
    return " and ".join(names) or "Anonymous"


def _chapter_link(target: str) -> str:
    """``../../01_x`` (relative to book/coursework/<name>/) -> a Markdown link to the chapter."""
    import sync_setup_cells

    rel = posixpath.normpath(posixpath.join("book/coursework/name", target))
    path = ROOT / f"{rel}.ipynb"
    title = rel.rsplit("/", 1)[-1]
    if path.is_file():
        first = json.loads(path.read_text())["cells"][0]
        heading = "".join(first["source"]).splitlines()[0]
        title = heading.lstrip("# ").strip() or title
    url = f"{sync_setup_cells.repository_url()}/blob/{sync_setup_cells.repository_branch()}/{rel}.ipynb"
    return f"[{title}]({url})"


def plain_markdown(text: str, cited: dict[str, None]) -> str:
    """``text`` with MyST's ``{doc}`` and ``{cite}`` roles and the bibliography as plain Markdown.

    A chapter becomes a link to its notebook in the book's repository; a citation
    ``(Author et al., year)``; the ``{bibliography}`` block the list of the works cited so
    far in the notebook (``cited`` collects them, in order).
    """
    bib = _bib()

    def cite(match: re.Match) -> str:
        keys = [k.strip() for k in match.group(1).split(",")]
        cited.update(dict.fromkeys(keys))
        return "(" + "; ".join(f"{_authors(bib.get(k, {}))}, {bib.get(k, {}).get('year', 'n.d.')}"
                               for k in keys) + ")"

    text = re.sub(r"\{doc\}`([^`]+)`", lambda m: _chapter_link(m.group(1)), text)
    text = re.sub(r"\{cite[pt]?\}`([^`]+)`", cite, text)

    def references(_: re.Match) -> str:
        lines = []
        for key in cited:
            e = bib.get(key, {})
            where = e.get("booktitle") or e.get("journal") or ""
            link = e.get("url") or (f"https://doi.org/{e['doi']}" if e.get("doi") else "")
            item = f"- {_authors(e)} ({e.get('year', 'n.d.')}). *{e.get('title', key)}*."
            item += f" {where}." if where else ""
            lines.append(item + (f" <{link}>" if link else ""))
        return "\n".join(lines) or "(none cited)"

    return re.sub(r"```\{bibliography\}.*?```", references, text, flags=re.S)


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def published_files(built: pathlib.Path) -> dict[str, str]:
    """What ``book/coursework/<name>/`` should hold: relative path -> text."""
    files = {f"{built.name}.ipynb": dumps(student_notebook(built))}
    for test in sorted((built / "student" / "tests").glob("*.py")):
        files[f"tests/{test.name}"] = test.read_text()
    return files


def publish(built: pathlib.Path, coursework: pathlib.Path = COURSEWORK) -> pathlib.Path:
    """Replace ``book/coursework/<name>/`` with the student version built at ``built``."""
    dest = coursework / built.name
    shutil.rmtree(dest, ignore_errors=True)
    for rel, text in published_files(built).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="assignments to build (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--publish", action="store_true", help="refresh book/coursework/ too")
    parser.add_argument("--variant", type=int, metavar="SEED",
                        help="a course's variant: constants drawn from SEED, hidden answers recomputed")
    args = parser.parse_args(argv)
    if args.variant is not None and (args.publish or args.variant < 0):
        parser.error("--variant takes a seed >= 0 and no --publish: book/coursework/ holds the "
                     "masters' student versions; hand out the variant's student/ folders instead")
    chosen = [m for m in masters() if not args.names or m.stem in args.names]
    unknown = set(args.names) - {m.stem for m in chosen}
    if unknown:
        parser.error(f"no master notebook for {sorted(unknown)} in {MASTERS}")
    for master in chosen:
        built = build(master, args.out, args.variant)
        print(f"{master.stem}: {built / 'student'}, {autograder_zip(built)}")
        if args.publish:
            print(f"{master.stem}: published to {publish(built).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
