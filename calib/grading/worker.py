"""The test process: runs the hidden and public tests against a submission's functions.

Started by :func:`calib.grading.runner.run_tests` as ``python -m calib.grading.worker``
after the student's notebook has run in its own kernel, and given on stdin (never on
disk) the test files, the submission's function sources and bindings and the path of the
values its kernel exported. It imports numpy, torch and calib itself; loads the
submission's functions (not those :mod:`calib.grading.static` blocked) into a namespace
of their own, with their own copy of the builtins; tells
:func:`calib.coursework.library_calls` what each function refers to in the library; runs
every test case, each under a time limit; and prints one line, after a nonce only the
grader knows, with each case's result. The grader, not this process, adds the scores up.
"""
from __future__ import annotations

import builtins
import importlib
import json
import re
import signal
import sys
import traceback
from typing import Any

# what a test's parameter names mean in every assignment: the test's own imports
TEST_MODULES = {
    "np": "numpy", "numpy": "numpy", "torch": "torch", "F": "torch.nn.functional",
    "pd": "pandas", "metrics": "calib.metrics", "posthoc": "calib.posthoc",
    "theory": "calib.theory", "losses": "calib.losses", "evidence": "calib.evidence",
    "profile": "calib.profile", "data": "calib.data", "optimize": "scipy.optimize",
    "stats": "scipy.stats", "calib": "calib",
}


def _import(path: str) -> Any:
    """The module or module attribute ``path`` names (``calib.metrics.ece``)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        parent, _, attr = path.rpartition(".")
        if not parent:
            raise
        return getattr(importlib.import_module(parent), attr)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001 - signal handler
    raise _Timeout


def load_functions(job: dict, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The submission's functions, in a namespace of their own: (name -> function, name -> why not)."""
    from .static import ALLOWED_ROOTS

    space: dict[str, Any] = {"__builtins__": dict(vars(builtins)), "__name__": "submission"}
    missing: dict[str, str] = {}
    needed = set()
    for src in job["functions"].values():
        needed |= set(re.findall(r"[A-Za-z_]\w*", src))  # every identifier: a superset
    for name, path in job["bindings"].items():
        if name in needed and path.split(".")[0] in ALLOWED_ROOTS:
            try:
                space[name] = _import(path)
            except (ImportError, AttributeError):
                pass
    space.update({k: v for k, v in values.items() if k not in space})
    for name, src in job["functions"].items():
        if name in job["blocked"]:
            missing[name] = f"not graded: {name} {job['blocked'][name]}"
            continue
        try:
            exec(compile(src, f"<submission {name}>", "exec"), space)  # noqa: S102 - the point
        except Exception as exc:  # noqa: BLE001 - a broken definition fails its tests
            missing[name] = f"{name} could not be defined: {type(exc).__name__}: {exc}"
    functions = {n: space[n] for n in job["functions"] if n not in missing and callable(space.get(n))}
    return functions, missing


def collect(source: str) -> list[tuple[Any, float, bool, str]]:
    """The test cases of an otter test file: (function, points, hidden, failure message)."""
    cases = []

    def test_case(points=None, hidden=False, name=None, success_message=None, failure_message=None):
        def add(fn):
            cases.append((fn, 1.0 if points is None else float(points), bool(hidden), failure_message or ""))
            return fn
        return add

    source = source.replace("from otter.test_files import test_case", "")
    exec(compile(source, "<test>", "exec"), {"test_case": test_case, "__name__": "tests"})  # noqa: S102
    return cases


def run(job: dict) -> list[dict]:
    """Every test case of ``job`` against the submission; one dict per case."""
    from .. import coursework
    from .codec import load

    values, skipped = load(job["export"]) if job.get("export") else ({}, {})
    functions, missing = load_functions(job, values)
    for name, fn in functions.items():
        coursework.register_static_uses(fn, job["library"].get(name, []))
    signal.signal(signal.SIGALRM, _alarm)
    results = []
    for question, source in job["tests"].items():
        for number, (fn, points, hidden, failure) in enumerate(collect(source), start=1):
            row = {"question": question, "test": fn.__name__, "number": number, "points": points,
                   "hidden": hidden, "passed": False, "message": ""}
            kwargs, absent = {}, []
            for param in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
                if param in TEST_MODULES:
                    kwargs[param] = _import(TEST_MODULES[param])
                elif param in functions:
                    kwargs[param] = functions[param]
                elif param in values:
                    kwargs[param] = values[param]
                else:
                    absent.append(missing.get(param) or (f"{param} could not be read back ({skipped[param]})"
                                                         if param in skipped else f"the notebook defines no {param}"))
            if absent:
                row["message"] = "; ".join(absent)
                results.append(row)
                continue
            signal.alarm(int(job.get("timeout", 120)))
            try:
                fn(**kwargs)
                row["passed"] = True
            except _Timeout:
                row["message"] = f"took longer than {job.get('timeout', 120)} s"
            except AssertionError as exc:
                row["message"] = " ".join(filter(None, [failure, str(exc)])) or "a check failed"
            except BaseException as exc:  # noqa: BLE001 - a crashing answer fails its test
                tb = traceback.extract_tb(exc.__traceback__)[-1:]
                where = f" (line {tb[0].lineno} of {tb[0].filename})" if tb else ""
                row["message"] = f"{type(exc).__name__}: {str(exc)[:500]}{where}"
            finally:
                signal.alarm(0)
            results.append(row)
    return results


def main() -> int:
    job = json.loads(sys.stdin.read())
    nonce = job.pop("nonce")
    out = sys.stdout  # kept before any student code runs
    results = run(job)
    out.write("\n" + nonce + json.dumps(results) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
