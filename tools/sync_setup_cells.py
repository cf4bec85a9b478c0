"""Keep every chapter's first code cell (the Colab setup cell) in line with _config.yml.

The repository URL lives in one place, ``repository.url`` in ``_config.yml``. Run
``python tools/sync_setup_cells.py`` after changing it; ``tests/test_book_files.py``
fails while any chapter's setup cell disagrees.
"""
from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = "# Setup (Colab):"


def repository_url() -> str:
    """``repository.url`` from _config.yml, read without a YAML dependency."""
    in_repo = False
    for line in (ROOT / "_config.yml").read_text().splitlines():
        if line.startswith("repository:"):
            in_repo = True
        elif in_repo and line.strip().startswith("url:"):
            return line.split("url:", 1)[1].strip().strip("'\"")
        elif in_repo and line and not line.startswith(" "):
            break
    raise RuntimeError("_config.yml has no repository.url")


def setup_source(url: str | None = None, assignment: str | None = None) -> str:
    """The setup cell of a chapter, or of the coursework notebook ``assignment``.

    An assignment's cell also installs the ``course`` extra (otter-grader) and copies
    the assignment's public tests (``book/coursework/<assignment>/tests``) next to the
    notebook, where ``otter.Notebook`` looks for them.
    """
    url = url or repository_url()
    if assignment is not None:
        return (
            f"{MARKER} installs calib and otter-grader and fetches this assignment's\n"
            "# public tests; elsewhere it does nothing.\n"
            "import sys\n"
            "\n"
            'if "google.colab" in sys.modules:\n'
            "    import shutil\n"
            "    import subprocess\n"
            "\n"
            f'    src, tests = "/content/calib", "book/coursework/{assignment}/tests"\n'
            f'    repo = "{url}"\n'
            '    subprocess.run(["git", "clone", "-q", "--depth", "1", repo, src], check=True)\n'
            '    pip = [sys.executable, "-m", "pip", "install", "-q"]\n'
            '    subprocess.run([*pip, f"{src}[course]"], check=True)\n'
            '    shutil.copytree(f"{src}/{tests}", "tests", dirs_exist_ok=True)'
        )
    return (
        f"{MARKER} installs calib from the book's repository; elsewhere it does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "\n"
        f'    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+{url}"], check=True)'
    )


def chapters() -> list[pathlib.Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def assignments() -> list[pathlib.Path]:
    """The otter master notebooks of the coursework (book/assignments/)."""
    return sorted((ROOT / "book" / "assignments").glob("a[0-9]_*.ipynb"))


def first_code_cell(nb: dict) -> dict | None:
    return next((c for c in nb["cells"] if c["cell_type"] == "code"), None)


def sync(path: pathlib.Path, assignment: str | None = None) -> bool:
    """Rewrite the setup cell of one chapter or assignment (inserting it if absent). True if changed."""
    nb = json.loads(path.read_text())
    want = setup_source(assignment=assignment)
    cell = first_code_cell(nb)
    if cell is not None and "".join(cell["source"]).startswith(MARKER):
        if "".join(cell["source"]) == want:
            return False
        cell["source"] = want
    else:
        new = {"cell_type": "code", "execution_count": None, "id": "colab-setup", "metadata": {}, "outputs": [], "source": want}
        first_md = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
        nb["cells"].insert(first_md + 1, new)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


if __name__ == "__main__":
    changed = [p.name for p in chapters() if sync(p)]
    changed += [p.name for p in assignments() if sync(p, assignment=p.stem)]
    print("updated: " + (", ".join(changed) if changed else "nothing"))
    sys.exit(0)
