"""The claims audit: does a chapter's outcome survive other seeds, thread counts and CPUs?

``make audit`` (``python -m calib audit``) executes each training chapter at several seed
offsets (``CALIB_SEED_OFFSET``) and thread counts at the ``quick`` profile, with
``CALIB_AUDIT_FILE`` set: every :func:`calib.profile.claim`, :func:`~calib.profile.fact`,
:func:`~calib.profile.verdict` and :func:`~calib.profile.report` appends its outcome there
instead of stopping the chapter. One execution is one file::

    results/audit/<chapter>/offset<k>-threads<t>[-p<n>].jsonl
      line 1: {"chapter", "seed_offset", "threads", "cpu", "torch",
               "commit", "seconds", "status"}
      then:   {"kind", "claim", "outcome"}, one per claim, in order

A chapter's procedure ``n`` (``profile.describe(chapter, procedure=n)`` in its notebook; 1
when it names none) is part of the file's name from 2 on, so a new procedure is audited
afresh and the earlier procedure's records stay beside it; :func:`records` carries each
execution's procedure and :func:`hold_rates` counts the chapter's current one. A finished
file is not run again (the audit resumes like the ledger). A chapter may assert
an empirical outcome with ``claim()`` only if every audited execution recorded it as
``holds`` (``tests/test_audit.py``); the book's appendix renders :func:`hold_rates`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..profile import read_audit_record
from .ledger import committed_root
from .machine import cpu_model, git_commit

__all__ = ["AUDIT_DIR", "TRAINING_CHAPTERS", "OFFSETS", "THREADS", "procedure", "run", "records",
           "current_records", "hold_rates"]

AUDIT_DIR = "audit"
# The chapters that train networks: their outcomes depend on seeds, threads and the CPU.
TRAINING_CHAPTERS = ("02_overconfidence", "08_meta_regularisation", "09_calibrated_or_calibratable",
                     "10_bench_of_regularisers", "11_reproducing_tables", "12_beyond_temperature_scaling",
                     "13_calibration_under_shift")
OFFSETS = (100, 200, 300, 400, 500)  # never the chapters' own offset 0, which wrote the claims
THREADS = (1, 2)


_PROCEDURE = re.compile(r"describe\([^)]*procedure\s*=\s*(\d+)")


def procedure(chapter: str, book: Path) -> int:
    """The procedure ``chapter``'s notebook declares (``describe(..., procedure=n)``), else 1."""
    path = book / f"{chapter}.ipynb"
    if not path.is_file():
        return 1
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "code")
    found = _PROCEDURE.search(code)
    return int(found.group(1)) if found else 1


def _file(root: Path, chapter: str, offset: int, threads: int, version: int = 1) -> Path:
    suffix = f"-p{version}" if version > 1 else ""  # procedure 1 keeps the names it was written under
    return root / AUDIT_DIR / chapter / f"offset{offset}-threads{threads}{suffix}.jsonl"


def _execute(chapter: str, offset: int, threads: int, book: Path, record: Path) -> tuple[str, float]:
    env = {**os.environ, "CALIB_PROFILE": "quick", "CALIB_SEED_OFFSET": str(offset),
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CALIB_AUDIT_FILE": str(record), "CALIB_PROGRESS": "0",
           # OpenMP threads sleep instead of spinning at a barrier: on a shared machine a
           # spinning two-thread run took five times its CPU time (the numbers are the same)
           "OMP_WAIT_POLICY": "PASSIVE"}
    env.pop("CALIB_SMOKE", None)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
               "--ExecutePreprocessor.timeout=3600", "--output-dir", tmp, str(book / f"{chapter}.ipynb")]
        t0 = time.time()
        done = subprocess.run(cmd, env=env, cwd=book, capture_output=True, text=True)
    status = "finished" if done.returncode == 0 else "error: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    return status, time.time() - t0


def run(chapters: Sequence[str] = TRAINING_CHAPTERS, offsets: Sequence[int] = OFFSETS,
        threads: Sequence[int] = THREADS, root: str | os.PathLike | None = None,
        log: Any = sys.stderr) -> list[Path]:
    """Execute every chapter x offset x thread count not yet recorded; returns the files written."""
    import torch

    root = committed_root() if root is None else Path(root)
    book = root.parent / "book"
    if bad := [c for c in chapters if not (book / f"{c}.ipynb").is_file()]:
        raise ValueError(f"no chapter {bad[0]!r} in {book}; the training chapters are {', '.join(TRAINING_CHAPTERS)}")
    written = []
    for chapter in chapters:
        version = procedure(chapter, book)
        for offset in offsets:
            for t in threads:
                path = _file(root, chapter, offset, t, version)
                if path.is_file():
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                print(f"audit: {chapter} at seed offset {offset}, {t} thread(s) ...", file=log, flush=True)
                part = path.with_suffix(".part")
                part.unlink(missing_ok=True)
                part.touch()
                status, seconds = _execute(chapter, offset, t, book, part)
                head = {"chapter": chapter, "seed_offset": offset, "threads": t, "cpu": cpu_model(),
                        "torch": torch.__version__, "commit": git_commit(), "seconds": round(seconds, 1),
                        "status": status}
                lines = part.read_text().splitlines()
                part.unlink()
                tmp = path.with_suffix(".tmp")
                tmp.write_text("\n".join([json.dumps(head), *lines]) + "\n")
                os.replace(tmp, path)  # a killed audit leaves no half-written record
                written.append(path)
                n_fail = sum(json.loads(x)["outcome"] in ("fails", "contradicted") for x in lines)
                print(f"audit: {chapter} offset {offset} threads {t}: {status}, {len(lines)} outcomes, "
                      f"{n_fail} failing or contradicted, {seconds:.0f} s", file=log, flush=True)
    return written


def records(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every audited outcome: the execution's header fields and ``procedure`` with ``kind``,
    ``claim``, ``outcome``."""
    folder = (committed_root() if root is None else Path(root)) / AUDIT_DIR
    rows = []
    for path in sorted(folder.glob("*/*.jsonl")):
        head, version, lines = read_audit_record(path)
        head = {**head, "procedure": version}
        rows += [{**head, **line} for line in lines]
        if not lines:
            rows.append({**head, "kind": None, "claim": None, "outcome": None})
    return rows


def current_records(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """:func:`records` of each chapter's current procedure (its notebook's ``describe``)."""
    root = committed_root() if root is None else Path(root)
    book, versions = root.parent / "book", {}
    rows = records(root)
    for r in rows:
        if r["chapter"] not in versions:
            versions[r["chapter"]] = procedure(r["chapter"], book)
    return [r for r in rows if r["procedure"] == versions[r["chapter"]]]


def hold_rates(root: str | os.PathLike | None = None) -> Any:
    """Per chapter and claim of its current procedure: audited runs, the draws they make, in
    how many draws it held,
    the hold rate over draws and its one-sided 95 % lower bound.

    A draw is a seed offset; it held when every thread setting it ran at recorded
    ``holds`` (:func:`calib.profile.recurrence`, which the chapters print under each
    verdict, counts the same way).
    """
    import pandas as pd

    from ..profile import Recurrence

    columns = ["chapter", "kind", "claim", "runs", "draws", "held", "hold rate", "lower 95 %", "outcomes"]
    frame = pd.DataFrame(current_records(root))
    if frame.empty:
        return pd.DataFrame(columns=columns)
    frame = frame.dropna(subset=["claim"])
    rows = []
    for (chapter, kind, claim), group in frame.groupby(["chapter", "kind", "claim"], sort=False):
        draws = [set(o) for _, o in group.groupby("seed_offset")["outcome"]]
        rec = Recurrence("holds", sum(d == {"holds"} for d in draws), len(draws))
        rows.append({"chapter": chapter, "kind": kind, "claim": claim, "runs": len(group), "draws": rec.n,
                     "held": rec.k, "hold rate": rec.k / rec.n, "lower 95 %": rec.lower,
                     "outcomes": ", ".join(f"{k} {v}" for k, v in group["outcome"].value_counts().items())})
    return pd.DataFrame(rows, columns=columns)
