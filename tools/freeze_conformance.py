"""Record the conformance probes' values of the peers installed here in calib/conformance_frozen.json.

Run it in an environment that has the peers (torchmetrics, netcal, relplot, scikit-learn,
torch-uncertainty, probmetrics) and calib. Each record keeps the row, the peer, its
version, the probe that produced the value (``calib.experiments.conformance``) and the
value; records of other peers are kept. ``--pinned`` files the records under
``peer==version``: an older release kept beside the current one (a bug a later release
fixed), which the book shows next to the live result.

    python tools/freeze_conformance.py                       # every importable peer
    python tools/freeze_conformance.py --rows tm1646 --pinned  # e.g. under torchmetrics 0.11.4
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calib.experiments import conformance as C  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="*", help="only these rows (default: all)")
    parser.add_argument("--pinned", action="store_true", help="file the records under peer==version")
    args = parser.parse_args()
    old = json.loads(C.FROZEN_FILE.read_text()) if C.FROZEN_FILE.is_file() else {"records": []}
    records = {(r["row"], r["peer"]): r for r in old["records"]}
    fresh = {key: cell for key, cell in C.cells(live=True, records={}).items()
             if cell.source.startswith("live") and (not args.rows or key[0] in args.rows)}
    for (row, peer), cell in fresh.items():
        version = cell.source.split(" ", 1)[1]
        name = f"{peer}=={version}" if args.pinned else peer
        fn = C._PROBES[(row, peer)][0]
        records[(row, name)] = {"row": row, "peer": name, "version": version, "value": cell.value,
                                "probe": f"calib.experiments.conformance.{fn.__name__}",
                                "python": platform.python_version()}
    out = {"how": "python tools/freeze_conformance.py in an environment with the peers installed; "
                  "each value is the probe's return value there",
           "records": sorted(records.values(), key=lambda r: (r["row"], r["peer"]))}
    C.FROZEN_FILE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(fresh)} records written to {C.FROZEN_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
