"""Grading helpers for the coursework (``book/assignments/``), used by its hidden tests.

Two tools keep an autograder honest:

:func:`library_calls`
    Runs a student's function and lists every function of the forbidden ``calib``
    subpackages (by default :mod:`calib.metrics`, :mod:`calib.losses`,
    :mod:`calib.theory` and :mod:`calib.posthoc`) that it called, however it reached
    them (an alias, ``from calib.metrics import ece as e``, a helper of its own). A
    hidden test fails an answer that calls the library for the function it was asked to
    write, so calling the library does not earn the marks of writing it.

:class:`SetupErrors`
    An otter-grader plugin (``plugins: [calib.coursework.SetupErrors]`` in an
    assignment's configuration). ``otter run`` ignores errors in the notebook's cells, so
    a notebook whose setup cell raised would be graded as if every answer were wrong.
    The plugin looks at the executed notebook: if a cell before the first answer cell
    raised, the whole result becomes an "Autograder Failed" entry
    naming the cell and its error, instead of a quiet low score. Errors in later cells
    are listed in the results' ``output`` and graded as usual.

Only the coursework's tests and the grading environment use this module; it needs
``otter-grader`` (the ``course`` extra) for the plugin alone.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

FORBIDDEN = ("calib.metrics", "calib.losses", "calib.theory", "calib.posthoc")

__all__ = ["FORBIDDEN", "library_calls", "setup_errors", "SetupErrors"]


def _package_dirs(modules: Iterable[str]) -> dict[str, str]:
    """The folder (or file, for a module) of each named calib module, resolved."""
    import importlib

    found = {}
    for name in modules:
        if not isinstance(name, str) or not (name == "calib" or name.startswith("calib.")):
            raise ValueError(f"forbidden must name calib modules, got {name!r}")
        module = importlib.import_module(name)
        path = os.path.realpath(module.__file__)
        if os.path.basename(path) == "__init__.py":
            path = os.path.dirname(path) + os.sep
        found[path] = name
    return found


def library_calls(
    fn: Callable[..., Any], *args: Any, forbidden: Iterable[str] = FORBIDDEN, **kwargs: Any
) -> tuple[Any, list[str]]:
    """Call ``fn(*args, **kwargs)``; return its result and the forbidden functions it called.

    A function counts when its code lies in one of the ``forbidden`` modules (a package
    counts with all its submodules). The calls are listed once each, as
    ``module:function``, in the order first seen. Exceptions of ``fn`` propagate.

    >>> import numpy as np
    >>> from calib import metrics
    >>> probs, labels = np.array([[0.9, 0.1]]), np.array([0])
    >>> library_calls(lambda p, y: metrics.ece(p, y), probs, labels)[1][:1]
    ['calib.metrics:ece']
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(forbidden, str):
        forbidden = (forbidden,)
    dirs = _package_dirs(forbidden)
    seen: dict[str, None] = {}
    cache: dict[str, str | None] = {}

    def owner(filename: str) -> str | None:
        if filename not in cache:
            real = os.path.realpath(filename)
            cache[filename] = next(
                (name for path, name in dirs.items()
                 if real == path or (path.endswith(os.sep) and real.startswith(path))),
                None,
            )
        return cache[filename]

    def profile(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event == "call":
            name = owner(frame.f_code.co_filename)
            if name is not None:
                seen.setdefault(f"{name}:{frame.f_code.co_name}", None)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return result, list(seen)


def setup_errors(notebook: dict) -> tuple[list[str], list[str]]:
    """The errors of an executed notebook: (in its setup, after it).

    The setup is every code cell before the first answer cell (tagged
    ``otter_answer_cell`` by otter assign) or ``grader.check`` call. Each error reads
    ``cell N: Name: message`` with N counting the notebook's own code cells from 1.
    """
    cells = notebook.get("cells") if isinstance(notebook, dict) else getattr(notebook, "cells", None)
    if cells is None:
        raise TypeError("notebook must be a notebook (a dict with 'cells')")
    before, after, checked, number = [], [], False, 0
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if "init_grading_mode" in source or "sys.path.append" in source:
            continue  # the cells otter run adds before the notebook's own
        number += 1
        tags = cell.get("metadata", {}).get("tags", [])
        checked = checked or "otter_answer_cell" in tags or "grader.check(" in source
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                text = f"cell {number}: {out.get('ename')}: {out.get('evalue')}"
                (after if checked else before).append(text)
    return before, after


try:  # the plugin needs otter-grader (the course extra); the helpers above do not
    from otter.plugins import AbstractOtterPlugin
except ImportError:  # pragma: no cover - exercised where otter is absent
    AbstractOtterPlugin = object  # type: ignore[assignment,misc]


class SetupErrors(AbstractOtterPlugin):  # type: ignore[misc,valid-type]
    """Otter plugin: a notebook whose setup raised fails visibly instead of scoring low."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if AbstractOtterPlugin is object:
            raise ImportError('SetupErrors needs otter-grader: pip install "torch-calib[course]"')
        super().__init__(*args, **kwargs)
        self._report = ""

    def after_grading(self, results: Any) -> None:
        if results.notebook is None:
            return
        before, after = setup_errors(results.notebook)
        lines = []
        if after:
            lines.append("Cells that raised an error (graded as they stand):")
            lines += [f"  {e}" for e in after]
        if before:
            message = (
                "The notebook's setup raised an error, so none of its answers could be "
                "graded; this score is not the student's. Grade it by hand or fix the "
                "environment and grade again.\n" + "\n".join(f"  {e}" for e in before)
            )
            results._catastrophic_error = RuntimeError(message)
            lines.insert(0, "SETUP FAILED: " + message)
        self._report = "\n".join(lines) or "No cell of the notebook raised an error."
        if lines:
            results.set_output(self._report)

    def generate_report(self) -> str:
        return self._report
