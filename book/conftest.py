"""nbval over book/ executes the chapters only, and can hand its run to the book build.

The coursework is checked by tests/test_assignments.py instead: the masters in
assignments/ are otter-grader sources, and the student notebooks in coursework/ have
blanks (``...``) by design.

With ``CALIB_NB_CACHE=<folder>`` set, every notebook whose cells all passed is stored,
with the outputs nbval received from the kernel, in that jupyter-cache folder (the one
the book build reads with ``execute_notebooks: cache``, ``_build/.jupyter_cache``). The
cache is keyed by the hash of the code cells, so the build shows exactly the run nbval
checked and executes only what is not there. ``make test`` uses it so that CI runs each
chapter once at the quick profile, not twice.

Each cell's printed output is also held to the book's 88 columns here, so that a line
that grows with the data (the results ledger's, say) fails nbval, not only the browser
check of the built book that comes after it (smoke passes are not rendered: exempt).
The summary gives each notebook's seconds.
"""
from __future__ import annotations

import copy
import os

import pytest

collect_ignore = ["assignments", "coursework"]

_FAILED: set[str] = set()
_SECONDS: dict[str, float] = {}  # each notebook's cells' run time, for the summary
_CELLS: dict[str, float] = {}  # each cell's, for the slowest


def pytest_runtest_logreport(report) -> None:
    page = report.nodeid.split("::")[0]
    _SECONDS[page] = _SECONDS.get(page, 0.0) + report.duration
    _CELLS[report.nodeid] = _CELLS.get(report.nodeid, 0.0) + report.duration
    if report.failed:
        _FAILED.add(page)


def pytest_terminal_summary(terminalreporter) -> None:
    """Each notebook's time, slowest first: where `make test`'s minutes go."""
    if _SECONDS:
        terminalreporter.section("seconds per notebook")
        for page, s in sorted(_SECONDS.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{s:8.1f}  {page}")
        terminalreporter.section("the ten slowest cells")
        for cell, s in sorted(_CELLS.items(), key=lambda kv: -kv[1])[:10]:
            terminalreporter.write_line(f"{s:8.1f}  {cell}")


WIDTH = 88  # the widest printed line the book's pages show without scrolling


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if os.environ.get("CALIB_SMOKE"):  # smoke runs are checked, not rendered
        return result
    outputs = getattr(item, "test_outputs", None) or []
    long = [line for out in outputs if out.get("output_type") == "stream"
            for line in out.get("text", "").splitlines() if len(line.rstrip()) > WIDTH]
    if long:
        raise AssertionError(f"{len(long)} printed line(s) over {WIDTH} characters, "
                             f"which scroll sideways in the book: {long[0][:100]!r}")
    return result


def _executed(notebook_file, cells) -> object:
    """The file's notebook with each code cell's outputs as nbval received them."""
    nb = copy.deepcopy(notebook_file.nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for count, (cell, item) in enumerate(zip(code, cells), start=1):
        cell.outputs = item.test_outputs
        cell.execution_count = count
    return nb


def pytest_sessionfinish(session, exitstatus) -> None:
    folder = os.environ.get("CALIB_NB_CACHE")
    if not folder:
        return
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from nbval.plugin import IPyNbCell

    files: dict = {}
    for item in session.items:
        if isinstance(item, IPyNbCell):
            files.setdefault(item.parent, []).append(item)
    cache = get_cache(folder)
    for notebook_file, cells in files.items():
        ran = all(item.test_outputs is not None for item in cells)
        if not ran or notebook_file.nodeid in _FAILED:
            continue
        bundle = CacheBundleIn(_executed(notebook_file, cells), str(notebook_file.path))
        cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
        print(f"nbval: cached {notebook_file.path.name} for the book build")
