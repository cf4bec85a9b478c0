"""The coursework's autograders, verified both ways with ``otter run`` as an instructor runs it.

For every master notebook in ``book/assignments/``: ``otter assign`` builds the student
notebook and the autograder zip (``tools/build_assignments.py``), then ``otter run``
grades (a) the reference solution: full marks; (b) the blank student notebook: below
half; (c) one notebook per typical wrong answer, made from the solution by substituting
the wrong line into its solution cell: the hidden test written to catch that mistake
fails and its points are lost. The book's copies in ``book/coursework/`` must match a
fresh build and hold no solution and no hidden test.

Each grading starts a kernel (about 10-30 s on two busy cores); the cases are separate
tests so that ``pytest -n 2`` spreads them. The typical-mistake cases carry the
``grading`` mark: ``make test`` runs them on the core the smoke passes leave idle beside
nbval (``make test-grading``), the others with the unit tests.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_assignments as ba  # noqa: E402

pytest.importorskip("otter", reason="otter-grader is in the course extra: pip install -e .[course]")


class Mistake(NamedTuple):
    """A typical wrong answer: in the solution cell containing ``cell``, ``old`` -> ``new``."""

    cell: str
    old: str
    new: str
    question: str
    test: str  # the hidden test function meant to catch it


MISTAKES: dict[str, dict[str, Mistake]] = {
    "a1_measuring_calibration": {
        "[lo, hi) bins": Mistake(
            "def ece(", 'conf, side="left")', 'conf, side="right")',
            "q1_ece", "test_edges_go_to_the_bin_below",
        ),
        "unweighted mean over bins": Mistake(
            "def ece(", "total += in_bin.mean() * gap", "total += gap / len(np.unique(idx))",
            "q1_ece", "test_weighted_by_bin_size",
        ),
    },
    "a2_focal_loss": {
        "log(softmax) overflows": Mistake(
            "def focal_loss(", "torch.log_softmax(logits, dim=1)",
            "torch.log(torch.softmax(logits, dim=1))", "q1_focal", "test_large_logits",
        ),
        "missing (1 - p)^gamma": Mistake(
            "def focal_loss(", "(-((1 - p) ** gamma) * log_p)", "(-log_p)",
            "q1_focal", "test_matches_calib",
        ),
    },
    "a3_temperature_scaling": {
        "T fitted on the test split": Mistake(
            "T_nll = fit_temperature_nll(",
            "T_nll = fit_temperature_nll(val_logits, val.y)",
            "T_nll = fit_temperature_nll(test_logits, test.y)",
            "q3_fit", "test_fitted_on_validation",
        ),
        "T fitted on probabilities": Mistake(
            "def fit_temperature_nll(", "F.cross_entropy(z / log_t.exp(), y)",
            "F.cross_entropy(torch.softmax(z, dim=1) / log_t.exp(), y)",
            "q1_nll", "test_matches_calib",
        ),
    },
    "a5_post_hoc_calibration": {
        "fitted on the test split": Mistake(
            "w_vs, b_vs = fit_vector_scaling(",
            "w_vs, b_vs = fit_vector_scaling(val_logits, val.y)",
            "w_vs, b_vs = fit_vector_scaling(test_logits, test.y)",
            "q2_compare", "test_fitted_on_validation",
        ),
        "no per-class shift": Mistake(
            "def fit_vector_scaling(", "F.cross_entropy(z * w + b, y)", "F.cross_entropy(z * w, y)",
            "q1_fit", "test_matches_calib",
        ),
    },
    "a4_gradient_weighting": {
        "weight not detached": Mistake(
            "def bsce_gra_loss(", "(weight.detach() * ce)", "(weight * ce)",
            "q1_loss", "test_gradient_is_detached",
        ),
    },
}

NAMES = [m.stem for m in ba.masters()]
CASES = [pytest.param(n, c, id=f"{n[:2]}-{c}") for c in ("solution", "blank") for n in NAMES]
CASES += [pytest.param(n, m, id=f"{n[:2]}-{m}", marks=pytest.mark.grading)
          for n in NAMES for m in MISTAKES.get(n, {})]


@functools.lru_cache(maxsize=None)
def built(name: str, out: pathlib.Path) -> pathlib.Path:
    return ba.build(ba.MASTERS / f"{name}.ipynb", out)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("assignments")


class Graded(NamedTuple):
    scores: dict[str, tuple[float, float]]  # question -> (score, max)
    failed: dict[str, set[int]]  # question -> numbers (1-based) of the failed test cases
    output: str


def grade(zip_path: pathlib.Path, notebook: pathlib.Path, out: pathlib.Path, *, debug: bool = False) -> Graded:
    """``otter run -a zip notebook`` with this tree's calib at the quick profile.

    ``debug=True`` stops at the first cell that raises (otter ignores errors otherwise).
    """
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CALIB_PROFILE": "quick", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.pop("CALIB_SMOKE", None)
    cmd = [sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(zip_path), "-o", str(out), str(notebook)]
    cmd[4:4] = ["--debug"] if debug else []
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out, timeout=600)
    results = out / "results.json"
    assert results.is_file(), f"otter run wrote no results:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    scores, failed, text = {}, {}, []
    for test in json.loads(results.read_text())["tests"]:
        if "max_score" not in test or test.get("max_score") is None:
            continue
        name = test["name"]
        scores[name] = (float(test["score"]), float(test["max_score"]))
        body = test.get("output", "")
        text.append(body)
        failed[name] = {int(n) for n, mark in re.findall(rf"{name} - (\d+) result:\s*(\S)", body) if mark != "✅"}
    return Graded(scores, failed, "\n".join(text))


def cases_of(built_dir: pathlib.Path, question: str) -> list[tuple[str, float, bool]]:
    """(function, points, hidden) of every test case of ``question``, in otter's order."""
    source = (built_dir / "autograder" / "tests" / f"{question}.py").read_text()
    found = re.findall(r"@test_case\(points=([\d.]+), hidden=(True|False).*?\)\s*def (\w+)\(", source, re.S)
    return [(fn, float(points), hidden == "True") for points, hidden, fn in found]


def with_mistake(solution: dict, mistake: Mistake) -> dict:
    """A copy of the solution notebook with ``mistake`` substituted into its solution cell."""
    nb = json.loads(json.dumps(solution))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and mistake.cell in "".join(c["source"])]
    assert len(cells) == 1, f"{mistake.cell!r} should be in exactly one code cell, found {len(cells)}"
    src = "".join(cells[0]["source"])
    assert src.count(mistake.old) == 1, f"{mistake.old!r} should occur once in the {mistake.cell!r} cell"
    cells[0]["source"] = src.replace(mistake.old, mistake.new)
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name,case", CASES)
def test_autograder(name, case, build_dir, tmp_path):
    b = built(name, build_dir)
    zip_path = ba.autograder_zip(b)
    solution_path = b / "autograder" / f"{name}.ipynb"
    if case == "solution":
        notebook = solution_path
    elif case == "blank":
        notebook = b / "student" / f"{name}.ipynb"
    else:
        mistake = MISTAKES[name][case]
        notebook = tmp_path / f"{name}.ipynb"
        notebook.write_text(ba.dumps(with_mistake(json.loads(solution_path.read_text()), mistake)))
    # the reference solution must also run top to bottom without an error
    graded = grade(zip_path, notebook, tmp_path / "out", debug=case == "solution")
    total = sum(s for s, _ in graded.scores.values())
    possible = sum(m for _, m in graded.scores.values())
    print(f"{name} / {case}: {total:g}/{possible:g}", {q: s for q, (s, _) in graded.scores.items()})
    assert possible > 0 and set(graded.scores) == {p.stem for p in (b / "autograder" / "tests").glob("*.py")}

    if case == "solution":
        assert total == possible, f"reference solution scored {total}/{possible}:\n{graded.output}"
    elif case == "blank":
        assert total < possible / 2, f"blank notebook scored {total}/{possible}"
    else:
        cases = cases_of(b, mistake.question)
        number = [fn for fn, _, _ in cases].index(mistake.test) + 1
        points = cases[number - 1][1]
        score, most = graded.scores[mistake.question]
        assert cases[number - 1][2], f"{mistake.test} is meant to be a hidden test"
        assert number in graded.failed[mistake.question], (
            f"{case}: {mistake.question} test {number} ({mistake.test}) passed:\n{graded.output}"
        )
        assert score <= most - points, f"{case}: {mistake.question} scored {score}/{most}"


@pytest.mark.parametrize("name", NAMES)
def test_every_listed_mistake_targets_a_hidden_test(name, build_dir):
    b = built(name, build_dir)
    solution = json.loads((b / "autograder" / f"{name}.ipynb").read_text())
    for label, mistake in MISTAKES.get(name, {}).items():
        with_mistake(solution, mistake)  # the substitution applies exactly once
        hidden = {fn for fn, _, h in cases_of(b, mistake.question) if h}
        assert mistake.test in hidden, f"{label}: {mistake.test} is not a hidden test of {mistake.question}"


@pytest.mark.parametrize("name", NAMES)
def test_book_copy_is_up_to_date(name, build_dir):
    b = built(name, build_dir)
    want = ba.published_files(b)
    folder = ba.COURSEWORK / name
    have = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    assert have == want, f"book/coursework/{name} is stale: run python tools/build_assignments.py --publish"


def _solution_lines(master: dict) -> list[str]:
    """Distinctive lines of the master's solutions (code blocks and markdown answers)."""
    lines, inside = [], False
    for cell in master["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "raw":
            inside = {"# BEGIN SOLUTION": True, "# END SOLUTION": False}.get(src.strip(), inside)
            continue
        if cell["cell_type"] == "markdown" and inside:
            lines += [l.strip() for l in src.splitlines()]
            continue
        block = False
        for line in src.splitlines():
            if "# END SOLUTION" in line:
                block = False
            elif block or line.rstrip().endswith("# SOLUTION"):
                lines.append(line.split("# SOLUTION")[0].strip())
            if "# BEGIN SOLUTION" in line:
                block = True
    return [l for l in lines if len(l) > 25]


@pytest.mark.parametrize("name", NAMES)
def test_student_version_leaks_no_solution_or_hidden_test(name):
    master = json.loads((ba.MASTERS / f"{name}.ipynb").read_text())
    folder = ba.COURSEWORK / name
    text = "\n".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    leaked = [l for l in _solution_lines(master) if l in text]
    assert _solution_lines(master) and not leaked, f"solution lines in the student version: {leaked}"
    hidden = re.findall(r"hidden: true\n.*?def (\w+)\(", "".join("".join(c["source"]) for c in master["cells"]), re.S)
    assert hidden and not [fn for fn in hidden if fn in text], "hidden tests in the student version"
    assert "hidden=True" not in text


@pytest.mark.parametrize("name", NAMES)
def test_student_notebook_follows_the_chapter_conventions(name):
    import sync_setup_cells

    nb = json.loads((ba.COURSEWORK / name / f"{name}.ipynb").read_text())
    assert nb["cells"][0]["cell_type"] == "markdown" and "".join(nb["cells"][0]["source"]).startswith("# ")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "".join(code[0]["source"]) == sync_setup_cells.setup_source(assignment=name)
    assert "profile.describe()" in "".join(code[1]["source"])
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    long = [l for c in code for l in "".join(c["source"]).splitlines() if len(l) > 88]
    assert not long, f"code lines over 88 characters: {long}"
    text = json.dumps(nb)
    assert not re.search(r"(?<![\w.])00[0-4](?![\w.])", text), "papers are named by author and year, not file number"
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text()))
    cited = {k.strip() for group in re.findall(r"\{cite[pt]?\}`([^`]+)`", text) for k in group.split(",")}
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"
