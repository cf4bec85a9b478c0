"""Record each chapter's expected ``colab`` time on a free Colab T4 in calib/chapter_runtimes.json.

For every chapter (or those named): write the synthetic datasets, execute the chapter with
``CALIB_PROFILE=colab CALIB_SMOKE=1`` (nbval, one thread) while the trainer appends the
FLOPs of each *uncapped* run to a ledger (``CALIB_FLOP_LEDGER``), and store the chapter's
wall time (``other_seconds``) and the ledger's total (``train_flops``).
:func:`calib.runtimes.t4_estimate` turns them into an estimate, shown at the top of each
chapter by ``profile.describe("NN_name")``. On a machine with a T4,
``--measure`` executes the chapters at the real ``colab`` profile instead and stores the
measured ``t4_seconds``.

    python tools/estimate_runtimes.py                # every chapter, estimated
    python tools/estimate_runtimes.py 02 08          # only these
    python tools/estimate_runtimes.py --measure      # on a T4: measured times
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calib import profile, runtimes  # noqa: E402


def run_chapter(nb: pathlib.Path, env: dict[str, str]) -> tuple[int, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           str(nb)], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
    return done.returncode, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter number prefixes (default: all)")
    parser.add_argument("--measure", action="store_true", help="run the real colab profile (on a T4)")
    args = parser.parse_args()
    table = json.loads(runtimes.RUNTIMES_FILE.read_text()) if runtimes.RUNTIMES_FILE.is_file() else {}
    chapters = table.setdefault("chapters", {})
    notebooks = [p for p in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
                 if not args.chapters or p.name[:2] in args.chapters]
    with tempfile.TemporaryDirectory(prefix="calib-estimate-") as tmp:
        base = dict(os.environ, CALIB_PROFILE="colab", CALIB_PROGRESS="0", PYTHONPATH=str(ROOT))
        if not args.measure:
            subprocess.run([sys.executable, "-m", "calib", "fake-data", f"{tmp}/data"], check=True, env=base)
            # training capped by smoke mode; every other amount of work (profile.work) in full
            base.update(CALIB_SMOKE="1", CALIB_DATA=f"{tmp}/data", OMP_NUM_THREADS="1",
                        **{profile.FULL_WORK_VAR: "1"})
        for nb in notebooks:
            ledger = pathlib.Path(tmp) / f"{nb.stem}.jsonl"
            rc, seconds = run_chapter(nb, dict(base, **{runtimes.LEDGER_VAR: str(ledger)}))
            if rc:
                print(f"{nb.stem}: failed (exit {rc}); nothing recorded")
                continue
            if args.measure:
                chapters.setdefault(nb.stem, {})["t4_seconds"] = round(seconds, 1)
            else:
                flops = runtimes.ledger_flops(ledger) if ledger.exists() else 0.0
                chapters[nb.stem] = {"train_flops": flops, "other_seconds": round(seconds, 1)}
            print(f"{nb.stem}: {runtimes.t4_estimate(nb.stem, table).describe()}")
    table["note"] = (
        "other_seconds: wall time of the chapter's colab branch in smoke mode (CALIB_SMOKE=1, one "
        "thread) on the machine below, an upper bound on its non-training work; train_flops: "
        "FLOPs of its uncapped training runs (calib.runtimes.record_run), the seeds smoke mode "
        "skips scaled in (calib.runtimes.ledger_flops); t4_seconds: measured "
        "on a T4. Written by tools/estimate_runtimes.py."
    )
    table["machine"] = f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.python_version()}"
    table["date"] = datetime.date.today().isoformat()
    runtimes.RUNTIMES_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
