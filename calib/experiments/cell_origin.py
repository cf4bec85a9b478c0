"""Where each finished ledger cell was made: the device its config names and the machine of
the session that made it, from the sweep's provenance (:mod:`calib.experiments.ledger`).

A run's last bits depend on the kind of CPU (and on the GPU), and SGD amplifies them into a
different run, so a comparison of two arms made on different machines also compares
machines. Chapter 14 names each arm's machines from :func:`cell_origins`.
"""
from __future__ import annotations

import json
import os

from . import ledger

__all__ = ["cell_origins", "cell_machines"]


def cell_origins(name: str, root: str | os.PathLike | None = None) -> dict[str, tuple[str, str]]:
    """``{cell folder name: (device, machine)}`` for each finished cell of sweep ``name``.

    ``device``: the one its config names, ``"cpu"`` where it names none (every ledger session
    before the first on a GPU ran on a CPU and named none). ``machine``: architecture and CPU
    model ("x86_64, AMD EPYC"; a GPU session's GPU after them). The session that lists a cell
    finished it (sessions list their ``cells`` since 2026-12-04; a cell resumed after a stop
    was begun by an earlier one); a cell copied from the sweep it reuses
    (:data:`~calib.experiments.ledger.REUSE`, the same ``metrics.json``) was made where that
    sweep made it; any other cell by the sessions that list no cells and ran on its device,
    named where those ran on one machine and ``"unrecorded"`` where on several.
    """
    prov = ledger.load(name, root)[1]
    sessions = [(s, _model(s.get("machine", prov.get("machine", "unknown"))))
                for s in prov.get("sessions", [])]
    made = {c: cpu for s, cpu in sessions for c in s.get("cells", [])}
    unlisted = [(s.get("device") or "cpu", cpu) for s, cpu in sessions if "cells" not in s]
    source = ledger.REUSE.get(name)
    copied = ({d.name: d for d in ledger.cell_dirs(source, root)}
              if source and ledger.available(source, root, quiet=True) else {})
    copied_made = cell_machines(source, root) if copied else {}
    out = {}
    for d in ledger.cell_dirs(name, root):
        config = json.loads((d / "config.json").read_text()) if (d / "config.json").is_file() else {}
        device = config.get("device") or "cpu"
        if d.name not in made and d.name in copied and (
                (copied[d.name] / "metrics.json").read_bytes() == (d / "metrics.json").read_bytes()):
            made[d.name] = copied_made[d.name]
        kinds = {cpu for on, cpu in unlisted if on == device.split(":")[0]}
        out[d.name] = (device, made.get(d.name, kinds.pop() if len(kinds) == 1 else "unrecorded"))
    return out


def cell_machines(name: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    """``{cell folder name: the machine that made it}`` (:func:`cell_origins`)."""
    return {cell: made for cell, (_, made) in cell_origins(name, root).items()}


def _model(machine_name: str) -> str:
    """Architecture and CPU model, the core count dropped (as ``ledger.machines`` gives them)."""
    return machine_name.rsplit(", ", 1)[0]
