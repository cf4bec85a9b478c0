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
import re
import sys
import textwrap

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


def install_source(url: str | None = None, ref: str | None = None, extra: str = "all") -> str:
    """The pip requirement a setup cell installs: ``torch-calib[EXTRA] @ git+URL@REF``.

    ``all`` brings what the chapters import beyond the core (sympy, matplotlib, scipy,
    pandas, ...; Colab has most of it already); ``course`` adds otter-grader to it.
    """
    return f"torch-calib[{extra}] @ git+{url or repository_url()}@{ref or repository_branch()}"


def raw_url(url: str | None = None, ref: str | None = None) -> str:
    """Where the repository's files are served as plain text: GitHub's raw host at ``ref``."""
    url = (url or repository_url()).rstrip("/")
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(\.git)?", url)
    if match is None:
        raise ValueError(f"repository.url must be a https://github.com/OWNER/NAME address, got {url!r}")
    return f"https://raw.githubusercontent.com/{match[1]}/{match[2]}/{ref or repository_branch()}"


def archive_url(url: str | None = None, ref: str | None = None) -> str:
    """GitHub's tarball of the repository at ``ref``: pip builds calib from it without git."""
    url = (url or repository_url()).rstrip("/").removesuffix(".git")
    return f"{url}/archive/{ref or repository_branch()}.tar.gz"


def public_tests(assignment: str) -> list[str]:
    """The public test files of an assignment: its questions with a test not marked hidden.

    Read from the master ``book/assignments/<assignment>.ipynb`` (otter assign writes a
    student test file for exactly these questions).
    """
    master = ROOT / "book" / "assignments" / f"{assignment}.ipynb"
    if not master.is_file():
        raise FileNotFoundError(f"no master notebook {master}")
    files, question, in_tests = [], None, False
    for cell in json.loads(master.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "raw" and src.startswith("# BEGIN QUESTION"):
            question = re.search(r"^name:\s*(\S+)", src, re.M)[1]
        elif cell["cell_type"] == "raw" and src.strip() in ("# BEGIN TESTS", "# END TESTS"):
            in_tests = src.strip() == "# BEGIN TESTS"
        elif in_tests and cell["cell_type"] == "code" and "hidden: true" not in src:
            if f"{question}.py" not in files:
                files.append(f"{question}.py")
    return files


def assignment_setup_source(assignment: str, url: str | None = None, ref: str | None = None) -> str:
    """The setup cell of the coursework notebook ``assignment``.

    In Colab it pip-installs calib with the ``course`` extra (otter-grader) from the
    same branch (or ``ref``), and downloads the assignment's *public* test files
    (``book/coursework/<assignment>/tests``) next to the notebook, where
    ``otter.Notebook`` looks for them. Nothing else of the repository reaches the
    runtime's disk: no clone, so no master notebook and no hidden test.
    """
    requirement = install_source(url, ref, extra="course")
    files = ", ".join(f'"{f}"' for f in public_tests(assignment))
    if len(f"    FILES = [{files}]") > 88:  # the book's 88 columns: one name list a line
        files = "\n" + textwrap.fill(files, 88, initial_indent=" " * 8,
                                     subsequent_indent=" " * 8, break_long_words=False,
                                     break_on_hyphens=False) + ",\n    "
    return (
        f"{MARKER} installs calib and otter-grader and downloads this\n"
        "# assignment's public tests; elsewhere it checks that they are here.\n"
        "import os\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "    import urllib.request\n"
        "\n"
        f'    SOURCE = "{requirement}"\n'
        f'    RAW = "{raw_url(url, ref)}"\n'
        f'    TESTS = f"{{RAW}}/book/coursework/{assignment}/tests"\n'
        f"    FILES = [{files}]\n"
        '    pip = [sys.executable, "-m", "pip", "install", "-q", SOURCE]\n'
        "    try:\n"
        "        if subprocess.run(pip).returncode != 0:\n"
        '            raise OSError(f"pip could not install {SOURCE}")\n'
        '        os.makedirs("tests", exist_ok=True)\n'
        "        for name in FILES:\n"
        '            urllib.request.urlretrieve(f"{TESTS}/{name}", f"tests/{name}")\n'
        "    except OSError as err:\n"
        "        raise SystemExit(\n"
        '            f"Setup failed: {err} (any message from pip is above). "\n'
        '            "Check that this runtime is online, then run this cell again."\n'
        "        ) from None\n"
        'elif not os.path.isdir("tests"):\n'
        "    print(\n"
        '        "No tests/ folder beside this notebook, so its checks cannot run: "\n'
        '        "put this assignment\'s tests/ folder beside it (from your instructor, "\n'
        '        "or from the book\'s repository: book/coursework/"\n'
        f'        "{assignment}/tests)."\n'
        "    )"
    )


def autograder_requirements(url: str | None = None, ref: str | None = None) -> str:
    """``book/assignments/requirements.txt``: what an autograder zip installs to grade.

    otter generate adds ``otter-grader[grading,plugins]==<its version>`` itself; these
    lines add calib (with the course extra) from a tarball of the book's branch (no git
    needed in the grading image) and a CPU build of torch, so ``otter grade`` (Docker) and Gradescope can run every cell.
    """
    return (
        "# Written by tools/sync_setup_cells.py from _config.yml: the grading environment\n"
        "# of the coursework's autograder zips. otter generate adds the otter-grader pin.\n"
        "--index-url https://download.pytorch.org/whl/cpu\n"
        "--extra-index-url https://pypi.org/simple\n"
        "torch>=2.1\n"
        f"torch-calib[course] @ {archive_url(url, ref)}\n"
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
    """Every notebook of the book with a Colab setup cell: the chapters, quickstart, evidence, conformance."""
    return [ROOT / "book" / "quickstart.ipynb", *chapters(), ROOT / "book" / "evidence.ipynb",
            ROOT / "book" / "conformance.ipynb"]


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
    reqs = ROOT / "book" / "assignments" / "requirements.txt"
    if not reqs.is_file() or reqs.read_text() != autograder_requirements(ref=args.ref):
        reqs.write_text(autograder_requirements(ref=args.ref))
        changed.append(str(reqs.relative_to(ROOT)))
    print("updated: " + (", ".join(changed) if changed else "nothing"))
    sys.exit(0)
