"""Keep every chapter's first code cell (the Colab setup cell) in line with _config.yml.

The repository lives in one place, ``repository.url`` and ``repository.branch`` in
``_config.yml``. Run ``python tools/sync_setup_cells.py`` after changing either;
``tests/test_packaging.py`` fails while any chapter's setup cell disagrees.

Which calib the cell installs: the same branch the book's Colab button opens the
notebook from (``git+URL@BRANCH``). The button opens the chapter at the branch's head,
so the library installed a moment later is the one that chapter was written and tested
against; a tag pinned in the cell (``v{version}``) would drift from the branch's
chapters as soon as the branch moves on, and a commit cannot be written into the
commit that holds it. ``--ref REF`` pins a tag or commit instead (e.g. for a frozen
edition published from a release branch). If pip fails, the cell stops with one
message saying what failed and what to try.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = "# Setup (Colab):"


def _repository_field(field: str) -> str | None:
    """``repository.<field>`` from _config.yml, read without a YAML dependency."""
    in_repo = False
    for line in (ROOT / "_config.yml").read_text().splitlines():
        if line.startswith("repository:"):
            in_repo = True
        elif in_repo and line.strip().startswith(f"{field}:"):
            return line.split(f"{field}:", 1)[1].split("#", 1)[0].strip().strip("'\"")
        elif in_repo and line and not line.startswith(" "):
            break
    return None


def repository_url() -> str:
    """``repository.url`` from _config.yml."""
    url = _repository_field("url")
    if not url:
        raise RuntimeError("_config.yml has no repository.url")
    return url


def repository_branch() -> str:
    """``repository.branch`` from _config.yml (``main`` when absent, as Jupyter Book assumes)."""
    return _repository_field("branch") or "main"


def install_source(url: str | None = None, ref: str | None = None) -> str:
    """The pip requirement the setup cell installs: ``torch-calib[all] @ git+URL@REF``.

    The ``all`` extra brings what the chapters import beyond the core (sympy, matplotlib,
    scipy, pandas, ...); Colab has most of it already, so pip adds little.
    """
    return f"torch-calib[all] @ git+{url or repository_url()}@{ref or repository_branch()}"


def assignment_setup_source(assignment: str, url: str | None = None, ref: str | None = None) -> str:
    """The setup cell of the coursework notebook ``assignment``.

    It also installs the ``course`` extra (otter-grader) and copies the assignment's
    public tests (``book/coursework/<assignment>/tests``) next to the notebook, where
    ``otter.Notebook`` looks for them; the clone is of the same branch (or ``ref``).
    """
    url = url or repository_url()
    ref = ref or repository_branch()
    return (
        f"{MARKER} installs calib and otter-grader and fetches this assignment's\n"
        "# public tests; elsewhere it does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import shutil\n"
        "    import subprocess\n"
        "\n"
        f'    repo, ref = "{url}", "{ref}"\n'
        f'    src, tests = "/content/calib", "book/coursework/{assignment}/tests"\n'
        '    clone = ["git", "clone", "-q", "--depth", "1", "--branch", ref, repo, src]\n'
        '    pip = [sys.executable, "-m", "pip", "install", "-q", f"{src}[course]"]\n'
        "    if subprocess.run(clone).returncode or subprocess.run(pip).returncode:\n"
        "        raise SystemExit(\n"
        '            "Could not fetch or install calib (the message is above). "\n'
        '            "Check that this runtime is online, then run this cell again."\n'
        "        )\n"
        '    shutil.copytree(f"{src}/{tests}", "tests", dirs_exist_ok=True)'
    )


def setup_source(url: str | None = None, ref: str | None = None, assignment: str | None = None) -> str:
    """The setup cell of a chapter (or, with ``assignment``, of a coursework notebook)."""
    if assignment is not None:
        return assignment_setup_source(assignment, url, ref)
    source = install_source(url, ref)
    return (
        f"{MARKER} installs calib from the book's repository; elsewhere it does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "\n"
        "    # the branch the Colab button opened this chapter from, so the two match\n"
        f'    SOURCE = "{source}"\n'
        '    pip = [sys.executable, "-m", "pip", "install", "-q", SOURCE]\n'
        "    if subprocess.run(pip).returncode != 0:\n"
        "        raise SystemExit(\n"
        '            f"Could not install calib from {SOURCE} (pip\'s message is above). "\n'
        '            "Check that this runtime is online, then run this cell again."\n'
        "        )"
    )


def chapters() -> list[pathlib.Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def pages() -> list[pathlib.Path]:
    """Every notebook of the book with a Colab setup cell: the chapters, quickstart, evidence."""
    return [ROOT / "book" / "quickstart.ipynb", *chapters(), ROOT / "book" / "evidence.ipynb"]


def assignments() -> list[pathlib.Path]:
    """The otter master notebooks of the coursework (book/assignments/)."""
    return sorted((ROOT / "book" / "assignments").glob("a[0-9]_*.ipynb"))


def first_code_cell(nb: dict) -> dict | None:
    return next((c for c in nb["cells"] if c["cell_type"] == "code"), None)


def sync(path: pathlib.Path, ref: str | None = None, assignment: str | None = None) -> bool:
    """Rewrite the setup cell of one chapter or assignment (inserting it if absent). True if changed."""
    nb = json.loads(path.read_text())
    want = setup_source(ref=ref, assignment=assignment)
    cell = first_code_cell(nb)
    if cell is not None and "".join(cell["source"]).startswith(MARKER):
        if "".join(cell["source"]) == want:
            return False
        cell["source"] = want.splitlines(keepends=True)  # a list of lines, as Jupyter writes it
    else:
        new = {"cell_type": "code", "execution_count": None, "id": "colab-setup", "metadata": {}, "outputs": [],
               "source": want.splitlines(keepends=True)}
        first_md = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
        nb["cells"].insert(first_md + 1, new)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default=None,
                        help="tag or commit to install instead of repository.branch (e.g. v0.1.0)")
    args = parser.parse_args()
    changed = [p.name for p in pages() if sync(p, args.ref)]
    changed += [p.name for p in assignments() if sync(p, args.ref, assignment=p.stem)]
    print("updated: " + (", ".join(changed) if changed else "nothing"))
    sys.exit(0)
