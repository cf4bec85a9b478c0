"""Execute the book's chapters in two one-thread lanes into the build's jupyter-cache.

``make book`` runs this first, then ``jupyter-book build``, which finds every chapter that
ran cleanly in the cache (``execute_notebooks: cache``, keyed by the code cells) and
executes only what is missing. Each lane is one process at a time with one thread
(``OMP_NUM_THREADS=1``), so on two cores the chapters run two at a time, as ``make test``
runs them. A lane is one nbval run (``pytest --nbval-lax``) with ``CALIB_NB_CACHE`` set,
so book/conftest.py stores each chapter in the cache once all its cells passed; a
chapter that failed there is executed again by the build, which shows the error.

The lanes are balanced greedily (longest chapter first, to the lane with less work) on
the chapters' times: those this script measured in the last build (``TIMES``), else those
of a fresh clone's build committed in ``tools/book_times.json``, else the claims audit's
one-thread runs (median of ``results/audit/<chapter>/*threads1*.jsonl``), else
``DEFAULT_SECONDS``. At the end it prints each chapter's time, longest first.

Usage: python tools/book_lanes.py --cache _build/.jupyter_cache [--lanes 2] [NOTEBOOK ...]
       python tools/book_lanes.py --report
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "_build" / "book-times.json"  # the last build's measured seconds per chapter
# A fresh clone's build, measured (one thread, Intel Xeon, session 12): a fresh clone has no
# TIMES yet, and the audit's medians (AMD, slower and busier) had put 653 s in one lane and
# 342 s in the other.
COMMITTED = ROOT / "tools" / "book_times.json"
# Rough one-thread seconds of the pages the audit does not run (it runs the training chapters).
DEFAULT_SECONDS = {"01_measuring_calibration": 180.0, "07_bsce_gra": 90.0, "14_when_losses_help": 60.0,
                   "evidence": 60.0, "quickstart": 30.0}
OTHER_SECONDS = 45.0


def notebooks() -> list[Path]:
    """The pages the book build executes: every notebook of _toc.yml but the coursework's
    student notebooks, which are shown, not run (_config.yml)."""
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    entries = re.findall(r"(?:root|file):\s*(book/[\w/.-]+)", toc)
    return sorted(ROOT / f"{e}.ipynb" for e in entries
                  if (ROOT / f"{e}.ipynb").exists() and not e.startswith("book/coursework/"))


def expected_seconds(names: list[str]) -> dict[str, float]:
    source = TIMES if TIMES.exists() else COMMITTED
    measured = json.loads(source.read_text()) if source.exists() else {}
    out = {}
    for name in names:
        audit = []
        for path in (ROOT / "results" / "audit" / name).glob("*threads1*.jsonl"):  # any procedure
            head = json.loads(path.read_text().splitlines()[0])
            if head.get("status") == "finished" and head.get("seconds"):
                audit.append(float(head["seconds"]))
        out[name] = float(measured.get(name) or (statistics.median(audit) if audit else
                                                 DEFAULT_SECONDS.get(name, OTHER_SECONDS)))
    return out


def split(seconds: dict[str, float], lanes: int) -> list[list[str]]:
    """Longest first, each to the lane with the least work so far (Graham's LPT rule)."""
    work, out = [0.0] * lanes, [[] for _ in range(lanes)]
    for name in sorted(seconds, key=lambda n: (-seconds[n], n)):
        i = work.index(min(work))
        out[i].append(name)
        work[i] += seconds[name]
    return out


def _run_lane(paths: list[Path], cache: Path, times: dict[str, tuple[float, bool]]) -> None:
    """One pytest (nbval) over the lane's chapters, one thread; this module rides along as a
    plugin (``-p book_lanes``) and prints each chapter's time as it finishes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CALIB_NB_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tools"), os.environ.get("PYTHONPATH")]))}
    env.setdefault("CALIB_CLAIMS", "report")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "book_lanes",
                             "--nbval-lax", *(str(p.relative_to(ROOT)) for p in paths)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rest = []
    for line in proc.stdout:
        if line.startswith(_MARK):
            name, seconds, failed = json.loads(line[len(_MARK):])
            times[name] = (seconds, failed)
            print(f"lanes: {name}: {seconds:.0f} s" + (", FAILED under nbval: the build runs it" if failed else ""),
                  flush=True)
        else:
            rest.append(line)
    if proc.wait():  # a failing chapter: nbval's report, and the build executes it again
        print("".join(rest)[-4000:], flush=True)


# --- the pytest plugin side (loaded in each lane's pytest by -p book_lanes) ---------------------
_MARK = "lanes-time: "
_SPENT: dict[str, list] = {}


def pytest_runtest_logreport(report) -> None:
    """Setup (the kernel's start), call and teardown of every cell, summed per notebook."""
    path = report.nodeid.split("::")[0]
    if path not in _SPENT:
        _flush()
        _SPENT[path] = [0.0, False, False]
    _SPENT[path][0] += report.duration
    _SPENT[path][1] |= report.failed


def _flush() -> None:
    for path, entry in _SPENT.items():
        if not entry[2]:
            entry[2] = True
            print("\n" + _MARK + json.dumps([Path(path).stem, entry[0], entry[1]]), flush=True)


def pytest_sessionfinish(session, exitstatus) -> None:
    _flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every page the build executes")
    parser.add_argument("--cache", type=Path, help="the jupyter-cache folder of the build")
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="print the last build's times and stop")
    args = parser.parse_args(argv)
    if args.report:
        report()
        return 0
    if args.cache is None:
        parser.error("--cache is required")
    if args.lanes < 1:
        parser.error(f"--lanes must be >= 1, got {args.lanes}")
    bad = [str(p) for p in args.notebooks if p.suffix != ".ipynb" or not p.exists()]
    if bad:
        parser.error(f"not a notebook: {', '.join(bad)}")
    paths = [p.resolve() for p in args.notebooks] or notebooks()
    by_name = {p.stem: p for p in paths}
    expected = expected_seconds(list(by_name))
    plan = split(expected, args.lanes)
    for i, lane in enumerate(plan, 1):
        print(f"lanes: lane {i} (~{sum(expected[n] for n in lane) / 60:.0f} min expected): {' '.join(lane)}")
    times: dict[str, tuple[float, bool]] = {}
    start = time.monotonic()
    threads = [threading.Thread(target=_run_lane, args=([by_name[n] for n in lane], args.cache.resolve(), times))
               for lane in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    TIMES.write_text(json.dumps({n: round(s, 1) for n, (s, _) in times.items()}, indent=1))
    print(f"lanes: {len(times)} pages in {time.monotonic() - start:.0f} s on {args.lanes} lanes; "
          f"{sum(bool(failed) for _, failed in times.values())} left to the build (failed under nbval)")
    return 0


def report() -> None:
    """Each chapter's time in the last build, longest first (``make book`` ends with it)."""
    source = TIMES if TIMES.exists() else COMMITTED
    measured = json.loads(source.read_text()) if source.exists() else {}
    print("chapter execution times (one thread, two lanes):")
    for name, seconds in sorted(measured.items(), key=lambda kv: -kv[1]):
        print(f"  {name:34s} {seconds:7.0f} s")


if __name__ == "__main__":
    sys.exit(main())
