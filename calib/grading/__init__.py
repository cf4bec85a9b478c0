"""Grading the coursework outside the student's code: ``python -m calib grade``.

:func:`grade_all` grades every submission of an LMS download against an assignment's
autograder (:mod:`calib.grading.runner` for one submission, in a fresh kernel and a
separate test process), writes one folder per student under ``out`` (``results.json``,
the executed notebook, the tables it produced) and ``out/grades.csv`` with a row per
submission and its status: ``graded``, ``setup failed``, ``crashed``, ``unreadable``,
``no notebook`` or ``several notebooks``.

A download may be a folder of notebooks (renamed by the LMS, as Canvas does:
``lastname_12345_67890_a1.ipynb``), a folder with one folder per student (Moodle:
``Alice Smith_12345_assignsubmission_file_/a1.ipynb``), a zip of either, or one notebook.
"""
from __future__ import annotations

import csv
import pathlib
import re
import tempfile
import zipfile

from .runner import Bundle, grade

__all__ = ["Bundle", "grade", "grade_all", "find_submissions", "student_name"]

STATUSES = ("graded", "setup failed", "crashed", "unreadable", "no notebook", "several notebooks")


def student_name(path: pathlib.Path) -> str:
    """Who a submission is from, from its (LMS-given) file or folder name."""
    stem = path.name[:-len(".ipynb")] if path.name.endswith(".ipynb") else path.name
    stem = re.sub(r"_assignsubmission_.*$", "", stem)  # Moodle's folder suffix
    canvas = re.match(r"^(.+?(?:_late)?_\d+)_\d+_", stem)  # Canvas: name[_late]_user_submission_file
    return re.sub(r"[^\w.-]+", "_", (canvas.group(1) if canvas else stem)).strip("_") or "submission"


def _notebooks(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def find_submissions(path: pathlib.Path) -> list[tuple[str, pathlib.Path | None, str]]:
    """(student, notebook or None, status) per submission in a download (see the module doc)."""
    path = pathlib.Path(path)
    if path.is_file() and path.suffix == ".ipynb":
        return [(student_name(path), path, "")]
    if not path.is_dir():
        raise FileNotFoundError(f"no submissions at {path}: give a notebook, a folder or a zip")
    found = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".") or entry.name == "__MACOSX":
            continue
        if entry.is_file() and entry.suffix == ".ipynb":
            found.append((student_name(entry), entry, ""))
        elif entry.is_dir():
            books = _notebooks(entry)
            status = "" if len(books) == 1 else ("no notebook" if not books else "several notebooks")
            found.append((student_name(entry), books[0] if len(books) == 1 else None, status))
    names = [n for n, _, _ in found]
    return [(n if names.count(n) == 1 else f"{n}_{i}", p, s) for i, (n, p, s) in enumerate(found)]


def grade_all(autograder: pathlib.Path, submissions: pathlib.Path, out: pathlib.Path, *,
              smoke: bool = False, timeout: int = 1800, echo=print) -> list[dict]:
    """Grade every submission; write ``out/<student>/`` and ``out/grades.csv``; return the rows."""
    bundle = Bundle.read(autograder)
    out = pathlib.Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="calib-download-") as tmp:
        submissions = pathlib.Path(submissions)
        if submissions.is_file() and zipfile.is_zipfile(submissions):
            with zipfile.ZipFile(submissions) as z:
                z.extractall(tmp)
            submissions = pathlib.Path(tmp)
        rows = []
        for who, notebook, status in find_submissions(submissions):
            if notebook is None:
                row = {"student": who, "file": "", "status": status, "score": 0.0, "max_score": "",
                       "written_max": "", "flags": "", "message": f"{status} in the submission"}
            else:
                r = grade(bundle, notebook, out / who, smoke=smoke, timeout=timeout)
                row = {"student": who, "file": notebook.name, "status": r["status"], "score": r["score"],
                       "max_score": r["max_score"], "written_max": r["written_max"],
                       "flags": " | ".join(r["flags"]), "message": r["message"]}
            rows.append(row)
            echo(f"{who}: {row['status']}, {row['score']:g}/{row['max_score'] or '?'} automatic"
                 + (f" ({row['message'][:120]})" if row["message"] else ""))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["student"])
        writer.writeheader()
        writer.writerows(rows)
    return rows
