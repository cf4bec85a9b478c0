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

    python tools/build_assignments.py [--out _build/assignments] [--publish] [NAME ...]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MASTERS = ROOT / "book" / "assignments"
COURSEWORK = ROOT / "book" / "coursework"
DEFAULT_OUT = ROOT / "_build" / "assignments"


def masters() -> list[pathlib.Path]:
    """The master notebooks, ``book/assignments/aN_topic.ipynb``, in order."""
    return sorted(MASTERS.glob("a[0-9]_*.ipynb"))


def build(master: pathlib.Path, out: pathlib.Path = DEFAULT_OUT) -> pathlib.Path:
    """Run ``otter assign`` on one master; return ``<out>/<name>`` (student/ and autograder/).

    The autograder zip gets a fixed name, ``<name>-autograder.zip`` (otter stamps the
    time into it).
    """
    master = pathlib.Path(master)
    if not master.is_file():
        raise FileNotFoundError(f"master notebook not found: {master}")
    dest = pathlib.Path(out).resolve() / master.stem
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "otter", "assign", "--no-pdfs", str(master), str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=master.parent)
    zips = sorted((dest / "autograder").glob("*.zip"))
    if done.returncode != 0 or len(zips) != 1:
        raise RuntimeError(f"otter assign failed on {master.name}:\n{done.stdout}\n{done.stderr}")
    zips[0].rename(autograder_zip(dest))
    return dest


def autograder_zip(built: pathlib.Path) -> pathlib.Path:
    """Where :func:`build` leaves the autograder zip of the assignment built at ``built``."""
    return built / "autograder" / f"{built.name}-autograder.zip"


def student_notebook(built: pathlib.Path) -> dict:
    """The built student notebook, with stable cell ids (otter draws random ones)."""
    nb = json.loads((built / "student" / f"{built.name}.ipynb").read_text())
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"{built.name[:2]}-{i:02d}"
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


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
    args = parser.parse_args(argv)
    chosen = [m for m in masters() if not args.names or m.stem in args.names]
    unknown = set(args.names) - {m.stem for m in chosen}
    if unknown:
        parser.error(f"no master notebook for {sorted(unknown)} in {MASTERS}")
    for master in chosen:
        built = build(master, args.out)
        print(f"{master.stem}: {built / 'student'}, {autograder_zip(built)}")
        if args.publish:
            print(f"{master.stem}: published to {publish(built).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
