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


def setup_source(url: str | None = None) -> str:
    url = url or repository_url()
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


def first_code_cell(nb: dict) -> dict | None:
    return next((c for c in nb["cells"] if c["cell_type"] == "code"), None)


def sync(path: pathlib.Path) -> bool:
    """Rewrite the setup cell of one chapter (inserting it if absent). True if changed."""
    nb = json.loads(path.read_text())
    want = setup_source()
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
    print("updated: " + (", ".join(changed) if changed else "nothing"))
    sys.exit(0)
