"""Grade one submission: its notebook in a fresh kernel, the tests in a fresh process.

1. The grader reads the autograder bundle (:class:`Bundle`: every test file, public and
   hidden, and the written questions) into memory before any student code runs.
2. The submission runs top to bottom in a fresh Jupyter kernel, in an empty temporary
   folder: no test file is on its disk and ``grader.check`` lines are skipped. A cell the
   grader adds at the end exports the values the tests read (:mod:`calib.grading.codec`).
   The executed notebook is kept.
3. A separate process (:mod:`calib.grading.worker`), started from another empty folder,
   gets the tests and the submission's function sources on stdin, imports numpy, torch
   and calib itself and reports each case's outcome on stdout after a nonce.
4. This process adds the points up and writes ``results.json``: nothing the student's
   code touched is read back but the exported values and that one line.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import secrets
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ..coursework import MANUAL, PLACEHOLDER, manual_answers, setup_errors
from . import static
from .worker import TEST_MODULES

REPORTED = ("FAST", "SIZE")  # values every grade reports when the notebook has them
_CHECK = re.compile(r"^(\s*)grader\.(check|check_all|export)\(.*\)\s*;?\s*$", re.M)


@dataclass
class Bundle:
    """An assignment's tests and written questions, read once from its autograder."""

    name: str
    tests: dict[str, str]  # question -> otter test file source
    manual: dict[str, float] = field(default_factory=dict)  # written question -> points

    @classmethod
    def read(cls, path: str | os.PathLike) -> Bundle:
        """From ``<built>/autograder/``, ``<built>/`` or the autograder zip."""
        path = pathlib.Path(path)
        if path.is_dir() and (path / "autograder").is_dir():
            path = path / "autograder"
        if path.is_file() and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                files = {n: z.read(n).decode() for n in z.namelist()
                         if n.startswith("tests/") and n.endswith(".py") or n == "otter_config.json"}
        elif path.is_dir():
            files = {str(p.relative_to(path)): p.read_text() for p in path.glob("tests/*.py")}
            if (path / "otter_config.json").is_file():
                files["otter_config.json"] = (path / "otter_config.json").read_text()
        else:
            raise FileNotFoundError(f"no autograder at {path}: give the folder tools/build_assignments.py "
                                    "wrote (<out>/<name>), its autograder/ folder or the autograder zip")
        tests = {pathlib.PurePath(n).stem: s for n, s in sorted(files.items()) if n.startswith("tests/")}
        if not tests:
            raise FileNotFoundError(f"{path} holds no tests/ folder of test files (tests/q1_*.py): "
                                    "build the assignment with tools/build_assignments.py and give its "
                                    "autograder/ folder or zip")
        config = json.loads(files.get("otter_config.json", "{}"))
        manual: dict[str, float] = {}
        for plugin in config.get("plugins", []):
            if isinstance(plugin, dict) and "calib.coursework.ManualQuestions" in plugin:
                manual = {str(k): float(v) for k, v in plugin["calib.coursework.ManualQuestions"].items()}
        name = config.get("assignment_name") or path.stem.replace("-autograder", "")
        return cls(str(name), tests, manual)

    def parameters(self) -> list[str]:
        """Every name a test case asks for, in order."""
        names: dict[str, None] = {}
        for source in self.tests.values():
            for args in re.findall(r"^def \w+\((.*?)\):", source, re.M | re.S):
                names.update(dict.fromkeys(a.strip() for a in args.split(",") if a.strip()))
        return list(names)


def package_digest() -> str:
    """A digest of calib's own files: a submission that rewrites the grader is caught."""
    root = pathlib.Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def prepare(notebook: dict, names: list[str], export_path: str) -> dict:
    """The notebook the kernel runs: ``grader.check`` lines skipped, the export cell added."""
    nb = json.loads(json.dumps(notebook))
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            cell["source"] = _CHECK.sub(r"\1pass  # grader.check(...): graded outside the notebook", src)
            cell["outputs"], cell["execution_count"] = [], None
    nb["cells"].append({
        "cell_type": "code", "id": "calib-grader-export", "metadata": {"tags": ["calib_grader_export"]}, "outputs": [],
        "execution_count": None,
        "source": "from calib.grading.codec import export as _calib_export\n"
                  f"_calib_export(globals(), {names!r}, {export_path!r})",
    })
    return nb


def execute(nb: dict, workdir: pathlib.Path, timeout: int, env: dict[str, str]) -> tuple[dict, str]:
    """Run ``nb`` in a fresh kernel in ``workdir``; (executed notebook, "" or why it stopped)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    node = nbformat.from_dict(nb)
    client = NotebookClient(node, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(workdir)}})
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        client.execute()
        problem = ""
    except (CellTimeoutError, DeadKernelError, RuntimeError) as exc:
        problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return json.loads(nbformat.writes(node)), problem


def run_tests(job: dict, timeout: int, env: dict[str, str]) -> tuple[list[dict] | None, str]:
    """The worker process's results, or (None, why) when it gave none."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="calib-tests-") as empty:
        try:
            done = subprocess.run([sys.executable, "-P", "-m", "calib.grading.worker"],
                                  input=json.dumps({**job, "nonce": nonce}), capture_output=True,
                                  text=True, cwd=empty, env={**os.environ, **env}, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"the tests took longer than {timeout} s"
    lines = [l for l in done.stdout.splitlines() if l.startswith(nonce)]
    if done.returncode != 0 or len(lines) != 1:
        return None, f"the test process failed (exit {done.returncode}): {done.stderr[-800:]}"
    return json.loads(lines[0][len(nonce):]), ""


def _question_entries(results: list[dict]) -> list[dict]:
    entries: dict[str, dict] = {}
    for r in results:
        e = entries.setdefault(r["question"], {"name": r["question"], "score": 0.0, "max_score": 0.0,
                                               "output": [], "cases": []})
        e["max_score"] += r["points"]
        e["score"] += r["points"] if r["passed"] else 0.0
        kind = "hidden" if r["hidden"] else "public"
        line = f"{r['question']} test {r['number']} {r['test']} ({r['points']:g} points, {kind}): "
        e["output"].append(line + ("passed" if r["passed"] else f"FAILED: {r['message']}"))
        e["cases"].append({k: r[k] for k in ("number", "test", "points", "hidden", "passed", "message")})
    for e in entries.values():
        e["output"] = "\n".join(e["output"])
    return list(entries.values())


def _manual_entries(bundle: Bundle, notebook: dict, tables: dict[str, Any]) -> list[dict]:
    found = manual_answers(notebook) if notebook else []
    answers = found if len(found) == len(bundle.manual) else [None] * len(bundle.manual)
    shown = "".join(f"\n\nThe table this grading produced ({n}.csv):\n{t.round(4).to_string()}"
                    for n, t in tables.items())
    entries = []
    for (q, points), answer in zip(bundle.manual.items(), answers):
        head = f"{q}: {MANUAL} ({points:g} points), not scored by the autograder"
        if answer is None:
            text = head + "; read the answer in the notebook."
        elif not answer or answer == PLACEHOLDER:
            text = head + "; no answer was written."
        else:
            text = head + ". The answer as submitted:\n\n" + answer[:4000]
        entries.append({"name": q, "score": 0.0, "max_score": points, "output": text + shown,
                        "manual": True, "answer": answer})
    return entries


def grade(bundle: Bundle, submission: pathlib.Path, out: pathlib.Path, *, smoke: bool = False,
          timeout: int = 1800) -> dict:
    """Grade ``submission`` against ``bundle``; write ``out/results.json`` (and the kept files)."""
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"assignment": bundle.name, "submission": submission.name, "status": "graded",
                              "message": "", "flags": [], "tests": []}
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1")}
    if smoke:
        env["CALIB_SMOKE"] = "1"
    try:
        notebook = json.loads(submission.read_text())
        source = static.extract(notebook)
    except (OSError, ValueError, TypeError) as exc:
        return _finish(result, bundle, out, None, "unreadable", f"not a notebook: {exc}")
    names = [n for n in dict.fromkeys([*bundle.parameters(), *REPORTED])
             if n not in TEST_MODULES and n not in source.functions]
    digest = package_digest()
    with tempfile.TemporaryDirectory(prefix="calib-grade-") as tmp:
        work = pathlib.Path(tmp) / "work"
        work.mkdir()
        export_path = str(pathlib.Path(tmp) / "export.pt")
        executed, problem = execute(prepare(notebook, names, export_path), work, timeout, env)
        (out / "executed.ipynb").write_text(json.dumps(executed, indent=1, ensure_ascii=False))
        values: dict[str, Any] = {}
        if os.path.isfile(export_path):
            from .codec import load

            try:
                values, _ = load(export_path)
            except Exception as exc:  # noqa: BLE001 - a tampered export is the student's loss
                problem = problem or f"the notebook's values could not be read back: {exc}"
        before, after = setup_errors(executed)
        result["errors"] = after
        if package_digest() != digest:
            return _finish(result, bundle, out, executed, "crashed",
                           "calib's files changed while the notebook ran: grade again in a clean environment")
        if before:
            return _finish(result, bundle, out, executed, "setup failed",
                           "the notebook's setup raised an error, so none of its answers could be graded; "
                           "this score is not the student's: " + "; ".join(before))
        if problem or not os.path.isfile(export_path):
            return _finish(result, bundle, out, executed, "crashed",
                           problem or "the notebook did not run to its end")
        job = {"functions": source.functions, "blocked": source.blocked, "library": source.library,
               "bindings": source.bindings, "tests": bundle.tests, "export": export_path,
               "timeout": min(timeout, 300)}
        cases, problem = run_tests(job, timeout, env)
    if cases is None:
        return _finish(result, bundle, out, executed, "crashed", problem)
    result["tests"] = _question_entries(cases)
    _flags(result, source, values, set(bundle.parameters()))
    tables = {n: v for n, v in values.items() if type(v).__name__ == "DataFrame"}
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    return _finish(result, bundle, out, executed, "graded", "", tables)


def _flags(result: dict, source: static.Source, values: dict[str, Any], tested: set[str]) -> None:
    if values.get("FAST") is True:
        result["flags"].append(f"FAST: the notebook ran its short version (SIZE = {values.get('SIZE')}), "
                               "not the assignment's training; its tables are not the runs asked for")
    for name, why in source.blocked.items():
        if name in tested or not why.startswith("it uses the module"):
            result["flags"].append(f"blocked: {name} was not graded, {why}")
    for why in source.tampering:
        result["flags"].append(f"tampering: {why} (the tests ran outside the notebook)")
    for name, uses in source.library.items():
        if uses:
            result["flags"].append(f"library: {name} refers to {', '.join(uses)}")
    if source.unparsed:
        result["flags"].append(f"syntax errors in code cells {source.unparsed}")


def _finish(result: dict, bundle: Bundle, out: pathlib.Path, executed: dict | None, status: str,
            message: str, tables: dict[str, Any] | None = None) -> dict:
    result["status"], result["message"] = status, message
    result["tests"] = [t for t in result["tests"] if not t.get("manual")]
    result["score"] = sum(t["score"] for t in result["tests"])
    result["max_score"] = float(sum(sum(_cases_points(s)) for s in bundle.tests.values()))
    result["tests"] += _manual_entries(bundle, executed or {}, tables or {})
    result["written_max"] = sum(bundle.manual.values())
    (out / "results.json").write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str))
    return result


def _cases_points(source: str) -> list[float]:
    return [float(p) for p in re.findall(r"@test_case\(points=([\d.]+)", source)]
