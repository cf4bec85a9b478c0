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

:class:`ManualQuestions`
    An otter-grader plugin configured with the assignment's written questions and their
    points (``calib.coursework.ManualQuestions: {q4_explain: 2}``). otter 7.0 leaves
    manual questions out of ``results.json``; the plugin adds one entry per question,
    score 0 of its points and marked as waiting for the instructor, with the answer as
    submitted, so the grading output lists every point of the assignment.

Only the coursework's tests and the grading environment use this module; it needs
``otter-grader`` (the ``course`` extra) for the plugin alone.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

FORBIDDEN = ("calib.metrics", "calib.losses", "calib.theory", "calib.posthoc")
# what every manual entry of the grading output says after its name
MANUAL = "written answer, graded by hand"
# a line that runs a question's checks (not a mention of them in a string or comment)
_CHECK_CALL = re.compile(r"^\s*(pass\s*#\s*)?grader\.check(_all)?\(", re.M)
# what otter assign puts in a written answer's cell of the student notebook
PLACEHOLDER = "_Type your answer here, replacing this text._"

__all__ = ["FORBIDDEN", "MANUAL", "library_calls", "register_static_uses", "setup_errors",
           "manual_answers", "ManualQuestion", "ManualQuestions", "SetupErrors"]

# what the grader found in a function's source (calib.grading.static), keyed by the function
_STATIC_USES: dict[int, tuple[Callable[..., Any], list[str]]] = {}


def register_static_uses(fn: Callable[..., Any], uses: Iterable[str]) -> None:
    """Record the forbidden names ``fn``'s source refers to, as ``module:name``.

    The grader reads them from the submission's code (:mod:`calib.grading.static`), so
    a call the tracer cannot see (from another thread, after ``sys.setprofile(None)``)
    still counts: :func:`library_calls` reports both.
    """
    _STATIC_USES[id(fn)] = (fn, [str(u) for u in uses])


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

    Under the grader (``python -m calib grade``) the names ``fn``'s source refers to
    (:func:`register_static_uses`) count as well, however the call is made. Traced, a
    function counts when its code lies in one of the ``forbidden`` modules (a package
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
    registered = _STATIC_USES.get(id(fn))
    if registered is not None and registered[0] is fn:
        for use in registered[1]:
            module = use.split(":")[0]
            if module == "calib" or any(module == f or module.startswith(f + ".") for f in dirs.values()):
                seen.setdefault(use, None)
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
        checked = checked or "otter_answer_cell" in tags or bool(_CHECK_CALL.search(source))
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


def manual_answers(notebook: dict) -> list[str]:
    """The written answers of a notebook: its markdown answer cells, in order.

    otter assign tags the cell where a student writes the answer to a manual question
    ``otter_answer_cell``; code answers are code cells, written answers markdown ones.
    In the reference solution otter follows the blank answer cell with the model answer
    (tagged ``otter_assign_solution_cell``), which then stands for it. HTML comments
    (otter's question markers) are left out.
    """
    cells = notebook.get("cells") if isinstance(notebook, dict) else getattr(notebook, "cells", None)
    if cells is None:
        raise TypeError("notebook must be a notebook (a dict with 'cells')")
    found: list[str] = []
    after_blank = False
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        source = cell.get("source", "")
        text = re.sub(r"<!--.*?-->", "", "".join(source) if isinstance(source, list) else source,
                      flags=re.S).strip()
        if cell.get("cell_type") == "markdown" and "otter_answer_cell" in tags:
            found.append(text)
            after_blank = text == PLACEHOLDER
            continue
        if cell.get("cell_type") == "markdown" and "otter_assign_solution_cell" in tags and after_blank:
            found[-1] = text
        after_blank = False
    return found


class ManualQuestion:
    """A manual question in otter's results: 0 of ``points`` until the instructor grades it.

    Stands beside otter's test files in ``GradingResults.results`` and answers what
    otter asks of them (``score``, ``possible``, ``summary``, ...), so ``results.json``
    carries an entry ``{"name", "score": 0, "max_score": points, "output"}`` whose output
    says it waits for the instructor and quotes the answer as submitted.
    """

    all_or_nothing = False
    test_cases: list = []
    test_case_results: list = []

    def __init__(self, name: str, points: float, answer: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a question's name, got {name!r}")
        if isinstance(points, bool) or not isinstance(points, (int, float)) or not points > 0:
            raise ValueError(f"points of {name} must be a number > 0, got {points!r}")
        self.name, self.path, self.points, self.answer = name, "", points, answer
        self._score: float | None = None

    @property
    def score(self) -> float:
        return 0 if self._score is None else self._score

    @property
    def possible(self) -> float:
        return self.points

    def update_score(self, new_score: float) -> None:
        self._score = new_score

    passed_all = passed_all_public = all_public = True

    def summary(self, public_only: bool = False) -> str:
        head = f"{self.name}: {MANUAL} ({self.points:g} points), not scored by the autograder"
        if public_only:
            return head
        if self.answer is None:
            return head + "; read the answer in the notebook."
        if not self.answer or self.answer == PLACEHOLDER:
            return head + "; no answer was written."
        return head + ". The answer as submitted:\n\n" + self.answer[:4000]

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "possible": self.possible, "name": self.name,
                "path": self.path, "manual": True, "answer": self.answer}


class ManualQuestions(AbstractOtterPlugin):  # type: ignore[misc,valid-type]
    """Otter plugin: the written questions in the grading output, beside the automatic ones.

    Its configuration maps each manual question to its points, in the notebook's order
    (the assignment config's ``plugins`` entry ``calib.coursework.ManualQuestions:
    {q4_explain: 2}``). After grading it adds a :class:`ManualQuestion` per question to
    the results; the k-th written answer of the notebook (:func:`manual_answers`) is
    quoted under the k-th question when the notebook holds one per question.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if AbstractOtterPlugin is object:
            raise ImportError('ManualQuestions needs otter-grader: pip install "torch-calib[course]"')
        super().__init__(*args, **kwargs)
        config = self.plugin_config or {}
        if not isinstance(config, dict):
            raise ValueError(f"ManualQuestions needs {{question: points}}, got {config!r}")
        self.questions = {str(k): v for k, v in config.items()}
        for name, points in self.questions.items():
            ManualQuestion(name, points)  # checks the configuration when the zip is built

    def after_grading(self, results: Any) -> None:
        answers: list[str | None] = [None] * len(self.questions)
        if results.notebook is not None:
            found = manual_answers(results.notebook)
            if len(found) == len(self.questions):
                answers = list(found)
        for (name, points), answer in zip(self.questions.items(), answers):
            results.results[name] = ManualQuestion(name, points, answer)

    def generate_report(self) -> str:
        if not self.questions:
            return ""
        listed = ", ".join(f"{q} ({p:g} points)" for q, p in self.questions.items())
        return f"Written answers to grade by hand, scored 0 until then: {listed}."
