"""A sweep's tables: ``results.csv`` (one row per run), ``summary.csv`` and ``summary.md`` (mean ± std over seeds)."""
from __future__ import annotations

import csv
import io
import os
import statistics
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

RESULTS_FILE = "results.csv"


SUMMARY_CSV = "summary.csv"


SUMMARY_MD = "summary.md"


METRICS = ("accuracy", "nll", "brier", "ece", "adaece", "classwise_ece", "mce")


SUMMARY_KEYS = ("data", "model", "loss", "loss_kwargs", "settings")


RESULT_COLUMNS = (
    "data", "model", "loss", "loss_kwargs", "settings", "seed",
    *METRICS, *(f"{m}_ts" for m in METRICS),
    "temperature", "ts_method", "temperature_nll", "temperature_grid", "ece_ts_nll", "ece_ts_grid",
    "select", "selected_epoch", "epochs", "seconds",
)


# numeric columns averaged by summarize() (seed and the bookkeeping columns excluded)
SUMMARY_METRICS = (*METRICS, *(f"{m}_ts" for m in METRICS), "temperature", "temperature_nll",
                   "temperature_grid", "ece_ts_nll", "ece_ts_grid", "selected_epoch", "seconds")


_PERCENT = {"accuracy", "ece", "adaece", "classwise_ece", "mce"}


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else (repr(row[k]) if isinstance(row[k], float) else row[k])
                         for k in columns})
    return buf.getvalue()


def _from_csv(value: str, column: str) -> Any:
    if column in ("data", "model", "loss", "loss_kwargs", "settings", "ts_method", "select"):
        return value
    if value == "":
        return None
    if column in ("seed", "selected_epoch", "epochs", "n"):
        return int(value)
    return float(value)


def load_results(out: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``out/results.csv`` with numbers as numbers (floats exactly as written)."""
    path = Path(out) / RESULTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {out} a sweep directory that has finished a run?")
    with open(path, newline="") as fh:
        return [{k: _from_csv(v, k) for k, v in row.items()} for row in csv.DictReader(fh)]


def summarize(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample standard deviation (n - 1; 0 for one run) per (data, model, loss, loss_kwargs, settings).

    Groups keep the order in which they first appear. Each summary row holds the group keys,
    ``n`` (runs) and ``<metric>_mean`` / ``<metric>_std`` for every metric of :data:`SUMMARY_METRICS`
    the rows have.
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k, "") for k in SUMMARY_KEYS), []).append(row)
    out = []
    for key, members in groups.items():
        s: dict[str, Any] = dict(zip(SUMMARY_KEYS, key))
        s["n"] = len(members)
        for m in SUMMARY_METRICS:
            vals = [float(r[m]) for r in members if r.get(m) is not None]
            if not vals:
                continue
            s[f"{m}_mean"] = statistics.fmean(vals)
            s[f"{m}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
        out.append(s)
    return out


_MD_COLUMNS = (("accuracy", "accuracy (%)"), ("nll", "NLL"), ("brier", "Brier"), ("ece", "ECE (%)"),
               ("ece_ts", "ECE after TS (%)"), ("adaece", "AdaECE (%)"), ("classwise_ece", "classwise ECE (%)"),
               ("mce", "MCE (%)"), ("temperature", "T"))


def summary_markdown(summary: Sequence[Mapping[str, Any]], *, missing: int = 0) -> str:
    """``summary`` as a Markdown table of "mean ± std" (accuracy and calibration errors in %)."""
    head = ["data", "model", "loss", "n", *(label for _, label in _MD_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        loss = f"{s['loss']} ({s['loss_kwargs']})" if s["loss_kwargs"] else s["loss"]
        if s.get("settings"):
            loss += f" @ {s['settings']}"
        cells = [s["data"], s["model"], loss, str(s["n"])]
        for key, _ in _MD_COLUMNS:
            base = key[:-3] if key.endswith("_ts") else key
            scale = 100.0 if base in _PERCENT else 1.0
            if f"{key}_mean" not in s:
                cells.append("")
                continue
            cells.append(f"{scale * s[f'{key}_mean']:.2f} ± {scale * s[f'{key}_std']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    note = f"\n{missing} run(s) of the grid not finished yet.\n" if missing else ""
    return "\n".join(lines) + "\n" + note
