"""The quickstart is a user's script: its code runs with the library's extras alone (issue 43).

Its code cells, joined, run in a fresh interpreter where myst_nb (the book's) and IPython
cannot be imported, as after ``pip install "torch-calib[posthoc,plots]"``.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "quickstart.ipynb"
# import raises ModuleNotFoundError, as if not installed
WITHOUT_THE_BOOK = "import sys\nfor _name in ('myst_nb', 'IPython'):\n    sys.modules[_name] = None\n"


def code_cells(path: pathlib.Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def test_the_quickstart_has_no_notebook_only_syntax():
    """A magic (``%matplotlib``) or shell line (``!pip``) is not Python: a script stops there."""
    for source in code_cells(PAGE):
        bad = [line for line in source.splitlines() if line.lstrip().startswith(("%", "!"))]
        assert not bad, bad
        assert "myst_nb" not in source, "the book's glue comes through calib.profile.glue"


@pytest.mark.slow
def test_the_quickstart_runs_as_a_script_without_the_book(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(WITHOUT_THE_BOOK + "\n\n".join(code_cells(PAGE)) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "CALIB_PROFILE": "quick",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "quick-reliability: Figure(" in out.stdout  # shown where the book glues it
    assert "ECE after temperature scaling" in out.stdout
