"""The coursework's autograders, verified both ways with ``python -m calib grade``.

For every master notebook in ``book/assignments/``: ``otter assign`` builds the student
notebook and the autograder (``tools/build_assignments.py``), then the grader of
``calib.grading`` (the notebook in a fresh kernel, the tests in a separate process)
grades, every submission saved as ``student.ipynb`` as an LMS renames it, (a) the
reference solution: full marks, and no cell raises (Assignment 1 through the
instructors page's commands, run as written); (b) the blank student notebook: below
half; (c) one notebook per typical wrong answer, made from the solution by substituting
the wrong line into its solution cell (answers that call calib for the function they
must write among them): the hidden test written to catch that mistake fails and its
points are lost. Mistakes in different cells share one notebook (``alongside``), one
kernel. Some carry a trick that fooled graders running inside the student's kernel
(issue 44: the library called from a thread, the tracer switched off, ``abs`` or
``torch.allclose`` patched); two blank notebooks rewrite the test files on disk and
patch otter's ``Checker``: none scores more than the work it holds. A notebook whose
setup raises must come back as a failed grading, not a score. The book's copies in
``book/coursework/`` must match a fresh build and hold no solution and no hidden test.

Each grading starts a kernel (about 10-30 s on two busy cores); the cases are separate
tests so that ``pytest -n 2`` spreads them. Every grading case carries the ``grading``
mark: ``make test`` runs them on the core the smoke passes leave idle beside nbval
(``make test-grading``), the other tests of this file with the unit tests.
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

from calib.coursework import MANUAL
from calib.grading import runner

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
    alongside: str = ""  # graded in the notebook of that mistake (one kernel for both)
    patch: str = ""  # a trick: a top-level cell added after the imports


# abs of a float is 0: every `abs(got - want) < tol` of a test run in the kernel passes
PATCHED_ABS = ("import builtins\n\n_abs = builtins.abs\n"
               "builtins.abs = lambda x: 0.0 if isinstance(x, float) else _abs(x)")

MISTAKES: dict[str, dict[str, Mistake]] = {
    "a1_measuring_calibration": {
        "[lo, hi) bins": Mistake(
            "def ece(", 'conf, side="left")', 'conf, side="right")',
            "q1_ece", "test_edges_go_to_the_bin_below",
        ),
        "unweighted mean over bins": Mistake(
            "def ece(", "total += in_bin.mean() * gap", "total += gap / len(np.unique(idx))",
            "q1_ece", "test_weighted_by_bin_size", patch=PATCHED_ABS,
        ),
        "reliability bins [lo, hi)": Mistake(
            "def reliability_bins(", 'conf, side="left")', 'conf, side="right")',
            "q2_bins", "test_edges_go_to_the_bin_below", alongside="[lo, hi) bins",
        ),
        "ece from calib.metrics in a thread": Mistake(
            "def ece(", "    probs = np.asarray(probs, dtype=np.float64)\n    labels",
            "    from concurrent.futures import ThreadPoolExecutor\n"
            "    with ThreadPoolExecutor(1) as pool:  # the tracer watched one thread\n"
            "        return pool.submit(metrics.ece, probs, labels, n_bins).result()\n    labels",
            "q1_ece", "test_weighted_by_bin_size",
        ),
        "reliability bins from calib.metrics": Mistake(
            "def reliability_bins(", "    probs = np.asarray(probs, dtype=np.float64)\n",
            "    ref = metrics.bin_stats(probs, labels, n_bins=n_bins)\n"
            "    return ref.counts, ref.accuracy, ref.confidence\n",
            "q2_bins", "test_matches_reference", alongside="ece from calib.metrics in a thread",
        ),
    },
    "a2_focal_loss": {
        "log(softmax) overflows": Mistake(
            "def focal_loss(", "torch.log_softmax(logits, dim=1)",
            "torch.log(torch.softmax(logits, dim=1))", "q1_focal", "test_large_logits",
        ),
        "missing (1 - p)^gamma": Mistake(
            "def focal_loss(", "(-((1 - p) ** gamma) * log_p)", "(-log_p)",
            "q1_focal", "test_matches_reference",
        ),
        "peak from calib.theory": Mistake(
            "def find_peak(", "    res = optimize.minimize_scalar(",
            "    p = theory.gradient_factor_peak(gamma)\n"
            "    return p, float(theory.gradient_factor(p, gamma))\n"
            "    res = optimize.minimize_scalar(",
            "q3_peak", "test_peak_value", alongside="missing (1 - p)^gamma",
            patch="import sys\n\nsys.setprofile(None)  # the tracer, switched off",
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
            "q1_nll", "test_matches_reference",
        ),
        "last of tied minima": Mistake(
            "def fit_temperature_grid(", "grid[int(np.argmin(scores))]",
            "grid[len(scores) - 1 - int(np.argmin(scores[::-1]))]",
            "q2_grid", "test_first_of_tied_minima", alongside="T fitted on the test split",
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
            "q1_fit", "test_matches_reference",
        ),
    },
    "a6_training_and_evidence": {
        "classwise K from the labels": Mistake(
            "def classwise_ece(", "n, k = p.shape", "n, k = len(p), int(y.max()) + 1",
            "q1_classwise", "test_classes_absent_from_labels",
        ),
        "T fitted on the test split": Mistake(
            "rows = []", 'T = fit_temperature(r["val_logits"], r["val_labels"])',
            'T = fit_temperature(r["test_logits"], r["test_labels"])',
            "q3_table", "test_fitted_on_validation", alongside="classwise K from the labels",
        ),
        "temperature from calib.posthoc": Mistake(
            "def fit_temperature(", "    z = torch.as_tensor(logits, dtype=torch.float64)\n",
            "    from calib import posthoc\n"
            "    return posthoc.TemperatureScaling().fit(logits, labels).temperature\n",
            "q2_temperature", "test_matches_reference", alongside="classwise K from the labels",
        ),
        "Welch's test, not paired": Mistake(
            "def paired_verdict(", "paired=True", "paired=False",
            "q4_verdict", "test_paired_test", alongside="classwise K from the labels",
        ),
    },
    "a4_gradient_weighting": {
        "weight not detached": Mistake(
            "def bsce_gra_loss(", "(weight.detach() * ce)", "(weight * ce)",
            "q1_loss", "test_gradient_is_detached", patch="torch.allclose = lambda *a, **k: True",
        ),
        "fixed point of plain CE": Mistake(
            "def expected_gradient(", "    loss = eta * bsce_gra_loss(row, torch.tensor([0]))\n"
            "    loss = loss + (1 - eta) * bsce_gra_loss(row, torch.tensor([1]))",
            "    loss = eta * F.cross_entropy(row, torch.tensor([0]))\n"
            "    loss = loss + (1 - eta) * F.cross_entropy(row, torch.tensor([1]))",
            "q3_fixed_point", "test_fixed_point", alongside="weight not detached",
        ),
        "loss from calib.losses": Mistake(
            "def bsce_gra_loss(", "    probs = torch.softmax(logits, dim=1)\n",
            "    return losses.bsce_gra_loss(logits, targets, gamma=gamma, norm=norm)\n",
            "q1_loss", "test_gradient_is_detached",
        ),
    },
}

NAMES = [m.stem for m in ba.masters()]
CASES = [pytest.param(n, c, id=f"{n[:2]}-{c}", marks=pytest.mark.grading)
         for c in ("solution", "blank") for n in NAMES]
CASES += [pytest.param(n, m, id=f"{n[:2]}-{m}", marks=pytest.mark.grading)
          for n in NAMES for m, mistake in MISTAKES.get(n, {}).items() if not mistake.alongside]
# the file name every LMS gives a submission: never the assignment's own
SUBMISSION = "student.ipynb"


def riding_with(name: str, case: str) -> dict[str, Mistake]:
    """The mistakes graded in the notebook of ``case``: itself and those ``alongside`` it."""
    return {label: m for label, m in MISTAKES.get(name, {}).items() if case in (label, m.alongside)}


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
    errors: str  # the status and message of a grading that did not go through, or ""
    results: dict  # results.json as written
    manual: dict[str, tuple[float, float]]  # written question -> (score, max)


def grading_env() -> dict[str, str]:
    """This tree's calib at the quick profile, one thread, as ``make test`` grades."""
    env = {**os.environ, "CALIB_PROFILE": "quick", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("CALIB_SMOKE", None)
    return env


def read_results(results: pathlib.Path, log: str = "") -> Graded:
    """The scores, failed test cases and status of a grader's results.json."""
    assert results.is_file(), f"the grader wrote no results:\n{log[-6000:]}"
    data = json.loads(results.read_text())
    scores, failed, text, manual = {}, {}, [], {}
    for test in data["tests"]:
        name = test["name"]
        if test.get("manual"):
            assert test["output"].startswith(f"{name}: {MANUAL}"), test["output"]
            manual[name] = (float(test["score"]), float(test["max_score"]))
            continue
        scores[name] = (float(test["score"]), float(test["max_score"]))
        text.append(test["output"])
        failed[name] = {c["number"] for c in test["cases"] if not c["passed"]}
    errors = "" if data["status"] == "graded" else f"{data['status']}: {data['message']}"
    return Graded(scores, failed, "\n".join(text), errors, data, manual)


def grade(built_dir: pathlib.Path, notebook: pathlib.Path, out: pathlib.Path, monkeypatch) -> Graded:
    """The grader of ``python -m calib grade`` on one notebook, in this process."""
    for key, value in grading_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    smoke = built_dir.name == "a6_training_and_evidence"  # the short training, flagged FAST
    runner.grade(runner.Bundle.read(built_dir), notebook, out, smoke=smoke, timeout=900)
    return read_results(out / "results.json")


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


def page_blocks() -> list[str]:
    """The bash blocks of the instructors page, in order."""
    return re.findall(r"```bash\n(.*?)```", (ba.COURSEWORK / "instructors.md").read_text(), re.S)


def grade_as_the_page_says(b: pathlib.Path, where: pathlib.Path) -> Graded:
    """Run the page's grading recipe as written, on the solution in an LMS download.

    The page names ``_build/assignments`` (what ``make assignments`` writes), a download
    ``submissions/`` and grades under ``~/grades``; the download holds the solution as
    Moodle hands it over (a folder per student), HOME is ``where``.
    """
    (where / "_build").mkdir(parents=True)
    (where / "_build" / "assignments").symlink_to(b.parent, target_is_directory=True)
    folder = where / "submissions" / "Alice Smith_12345_assignsubmission_file_"
    folder.mkdir(parents=True)
    (folder / "a1.ipynb").write_text((b / "autograder" / f"{b.name}.ipynb").read_text())
    block = next(blk for blk in page_blocks() if "python -m calib grade" in blk)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True,
                          env={**grading_env(), "HOME": str(where)}, cwd=where, timeout=900)
    assert done.returncode == 0, f"the page's grading recipe failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    rows = (where / "grades" / b.name / "grades.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("Alice_Smith_12345,a1.ipynb,graded,"), rows
    return read_results(where / "grades" / b.name / "Alice_Smith_12345" / "results.json",
                        done.stdout + done.stderr)


def with_patch(nb: dict, patch: str) -> dict:
    """``nb`` with the top-level cell ``patch`` after its imports (the grader cell's)."""
    nb = json.loads(json.dumps(nb))
    at = next(i for i, c in enumerate(nb["cells"]) if "otter.Notebook()" in "".join(c["source"]))
    nb["cells"].insert(at + 1, {"cell_type": "code", "id": "trick", "metadata": {}, "outputs": [],
                                "execution_count": None, "source": patch})
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name,case", CASES)
def test_autograder(name, case, build_dir, tmp_path, monkeypatch):
    b = built(name, build_dir)
    solution_path = b / "autograder" / f"{name}.ipynb"
    # every submission under another name than the assignment's, as an LMS renames it
    notebook = tmp_path / SUBMISSION
    mistakes = {}
    if case == "solution" and name == NAMES[0]:
        graded = grade_as_the_page_says(b, tmp_path / "page")
    else:
        if case == "solution":
            nb = json.loads(solution_path.read_text())
        elif case == "blank":
            nb = json.loads((b / "student" / f"{name}.ipynb").read_text())
        else:
            nb = json.loads(solution_path.read_text())
            mistakes = riding_with(name, case)
            for mistake in mistakes.values():
                nb = with_mistake(nb, mistake)
                nb = with_patch(nb, mistake.patch) if mistake.patch else nb
        notebook.write_text(ba.dumps(nb))
        graded = grade(b, notebook, tmp_path / "out", monkeypatch)
    total = sum(s for s, _ in graded.scores.values())
    possible = sum(m for _, m in graded.scores.values())
    print(f"{name} / {case}: {total:g}/{possible:g}", {q: s for q, (s, _) in graded.scores.items()})
    assert not graded.errors, graded.errors
    assert possible > 0 and set(graded.scores) == {p.stem for p in (b / "autograder" / "tests").glob("*.py")}
    # the written questions beside the automatic ones: 0 of their points, for the instructor
    assert graded.manual == {q: (0.0, p) for q, p in manual_questions(name).items()}, graded.manual

    if case == "solution":
        # full marks, and every cell ran without an error
        assert total == possible, f"reference solution scored {total}/{possible}:\n{graded.output}"
        assert not graded.results["errors"], f"cells of the reference solution raised: {graded.results['errors']}"
        quoted = [t["output"] for t in graded.results["tests"] if t["name"] in graded.manual]
        assert all("The answer as submitted:" in q for q in quoted), quoted
        # a "library" flag only lists the calib names a function refers to (a3's grid search may
        # call metrics.ece); the hidden tests judge whether a question forbids them
        assert not [f for f in graded.results["flags"] if f.startswith(("blocked", "tampering"))]
        if name == "a6_training_and_evidence":  # item 3: the grader's table, kept and shown
            kept = tmp_path / "out"
            assert (kept / "executed.ipynb").is_file() and (kept / "table.csv").is_file()
            assert all("The table this grading produced (table.csv)" in q for q in quoted), quoted
            assert any(f.startswith("FAST") for f in graded.results["flags"]), graded.results["flags"]
    elif case == "blank":
        assert total < possible / 2, f"blank notebook scored {total}/{possible}"
    else:
        assert total < possible
        for label, mistake in mistakes.items():
            if mistake.patch:  # the trick ran in the kernel, and the grade says so
                assert any(f.startswith("tampering") for f in graded.results["flags"]), graded.results
            cases = cases_of(b, mistake.question)
            number = [fn for fn, _, _ in cases].index(mistake.test) + 1
            points = cases[number - 1][1]
            score, most = graded.scores[mistake.question]
            assert cases[number - 1][2], f"{mistake.test} is meant to be a hidden test"
            assert number in graded.failed[mistake.question], (
                f"{label}: {mistake.question} test {number} ({mistake.test}) passed:\n{graded.output}"
            )
            assert score <= most - points, f"{label}: {mistake.question} scored {score}/{most}"


@pytest.mark.slow
@pytest.mark.grading
def test_a_notebook_whose_setup_fails_is_reported_not_quietly_scored(build_dir, tmp_path, monkeypatch):
    """A setup cell that raises (here a missing name, as a lost notebook file once did)."""
    name = "a2_focal_loss"
    b = built(name, build_dir)
    nb = json.loads((b / "autograder" / f"{name}.ipynb").read_text())
    # the setup cell is the first to import from calib (a design question's cell may too)
    setup = [c for c in nb["cells"] if "from calib import" in "".join(c["source"])]
    assert setup and "profile" in "".join(setup[0]["source"]), "no setup cell found"
    setup[0]["source"] = "".join(setup[0]["source"]).replace("from calib import", "from calib import nothing,")
    (tmp_path / SUBMISSION).write_text(ba.dumps(nb))
    graded = grade(b, tmp_path / SUBMISSION, tmp_path / "out", monkeypatch)
    assert graded.results["status"] == "setup failed" and graded.results["score"] == 0, graded.results
    assert "setup raised an error" in graded.errors and "ImportError" in graded.errors, graded.errors


# Blank notebooks that attack the grader itself (issue 44): neither may score a point.
REWRITE_TESTS = """import glob
import os

PASSING = "from otter.test_files import test_case\\nOK_FORMAT = False\\nname = {!r}\\npoints = None\\n" \\
    "@test_case(points=100, hidden=False)\\ndef test_x():\\n    pass\\n"
for path in glob.glob("tests/*.py") + glob.glob(os.path.join(AUTOGRADER, "tests", "*.py")):
    with open(path, "w") as f:
        f.write(PASSING.format(os.path.basename(path)[:-3]))
"""
TAMPER_CHECKER = """from otter.execute import Checker

Checker.enable_tracking()
_check = Checker.check.__func__


def _passing(cls, *args, **kwargs):
    result = _check(cls, *args, **kwargs)
    for case in getattr(result, "test_case_results", []):
        case.passed = True
    return result


Checker.check = classmethod(_passing)
"""


@pytest.mark.slow
@pytest.mark.grading
@pytest.mark.parametrize("name,trick", [("a3_temperature_scaling", "rewrite tests"),
                                        ("a5_post_hoc_calibration", "patch Checker")])
def test_a_blank_notebook_that_attacks_the_grader_scores_nothing(name, trick, build_dir, tmp_path, monkeypatch):
    import shutil

    b = tmp_path / name  # a copy the trick may rewrite, not the session's build
    shutil.copytree(built(name, build_dir), b)
    nb = json.loads((b / "student" / f"{name}.ipynb").read_text())
    cell = (f"AUTOGRADER = {str(b / 'autograder')!r}\n" + REWRITE_TESTS if trick == "rewrite tests"
            else TAMPER_CHECKER)
    (tmp_path / SUBMISSION).write_text(ba.dumps(with_patch(nb, cell)))
    graded = grade(b, tmp_path / SUBMISSION, tmp_path / "out", monkeypatch)
    total = sum(s for s, _ in graded.scores.values())
    assert not graded.errors and total == 0, (graded.errors, graded.scores)
    if trick == "patch Checker":
        assert any(f.startswith("tampering") for f in graded.results["flags"]), graded.results["flags"]
    if trick == "rewrite tests":  # the trick did write; the grader had read the tests before
        assert "test_x" in (b / "autograder" / "tests" / "q1_nll.py").read_text()


def test_an_lms_download_is_read_per_student(tmp_path):
    """Moodle's folder per student, Canvas's renamed files, and what cannot be graded."""
    from calib.grading import find_submissions

    (tmp_path / "Alice Smith_12345_assignsubmission_file_").mkdir()
    (tmp_path / "Alice Smith_12345_assignsubmission_file_" / "a1.ipynb").write_text("{}")
    (tmp_path / "Bo Li_777_assignsubmission_file_").mkdir()
    (tmp_path / "smith_12345_67890_a1_measuring_calibration.ipynb").write_text("{}")
    (tmp_path / "lee_late_42_99_submission_a1-1.ipynb").write_text("{}")
    found = {who: (p.name if p else None, status) for who, p, status in find_submissions(tmp_path)}
    assert found == {
        "Alice_Smith_12345": ("a1.ipynb", ""), "Bo_Li_777": (None, "no notebook"),
        "smith_12345": ("smith_12345_67890_a1_measuring_calibration.ipynb", ""),
        "lee_late_42": ("lee_late_42_99_submission_a1-1.ipynb", ""),
    }


def test_library_use_and_tampering_are_read_from_the_source():
    """What calib.grading.static finds without running anything: each trick of issue 44."""
    from calib.grading import static

    def nb(*cells):
        return {"cells": [{"cell_type": "code", "source": c} for c in cells]}

    found = static.extract(nb(
        "import sys\nimport builtins\nimport torch\nfrom calib import metrics as m, theory\n"
        "from calib.posthoc import fit_temperature as ft\n%matplotlib inline",
        "sys.setprofile(None)\ntorch.allclose = lambda *a, **k: True",
        "def ece(p, y):\n    from concurrent.futures import ThreadPoolExecutor\n"
        "    with ThreadPoolExecutor(1) as pool:\n        return pool.submit(m.ece, p, y).result()",
        "def helper(z):\n    return ft(z, [0])\n\ndef fit(z):\n    return helper(z) * 2",
        "def peak(g):\n    return theory.gradient_factor_peak(g)",
        "def honest(p):\n    q = p.copy()\n    q[0] = 1\n    return abs(q).sum()",
        "def sneaky(p):\n    builtins.abs = len\n    return p",
        "def sneaky2(p):\n    torch.allclose = max\n    return p",
        "def sneaky3(p):\n    return p.__class__.__subclasses__()",
    ))
    assert found.library["ece"] == ["calib.metrics:ece"]
    assert found.library["fit"] == ["calib.posthoc:fit_temperature"]  # through its helper
    assert found.library["peak"] == ["calib.theory:gradient_factor_peak"]
    assert found.library["honest"] == [] and "honest" not in found.blocked
    assert set(found.blocked) == {"sneaky", "sneaky2", "sneaky3"}, found.blocked
    assert len(found.tampering) == 2, found.tampering  # setprofile and allclose, cell 2


def test_the_grader_says_when_tests_are_missing(tmp_path):
    (tmp_path / "autograder").mkdir()
    with pytest.raises(FileNotFoundError, match="no tests/ folder"):
        runner.Bundle.read(tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_every_listed_mistake_targets_a_hidden_test(name, build_dir):
    b = built(name, build_dir)
    solution = json.loads((b / "autograder" / f"{name}.ipynb").read_text())
    for label, mistake in MISTAKES.get(name, {}).items():
        with_mistake(solution, mistake)  # the substitution applies exactly once
        if mistake.alongside:  # shares a notebook: a host of its own, in another cell
            host = MISTAKES[name][mistake.alongside]
            assert not host.alongside and host.cell != mistake.cell, label
            with_mistake(with_mistake(solution, host), mistake)
        hidden = {fn for fn, _, h in cases_of(b, mistake.question) if h}
        assert mistake.test in hidden, f"{label}: {mistake.test} is not a hidden test of {mistake.question}"


def _master_cells(name: str) -> list[dict]:
    return json.loads((ba.MASTERS / f"{name}.ipynb").read_text())["cells"]


def manual_questions(name: str) -> dict[str, float]:
    """The master's written questions (``manual: true``) and their points, in order."""
    import yaml

    found = {}
    for cell in _master_cells(name):
        src = "".join(cell["source"])
        if cell["cell_type"] == "raw" and src.startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(src)
            if config.get("manual"):
                found[config["name"]] = float(config["points"])
    return found


@pytest.mark.parametrize("name", NAMES)
def test_manual_questions_are_in_the_grading_output_config(name):
    """The ManualQuestions plugin lists exactly the master's written questions and points."""
    import yaml

    config = yaml.safe_load("".join(_master_cells(name)[0]["source"]))
    plugins = {next(iter(p)) if isinstance(p, dict) else p: (p[next(iter(p))] if isinstance(p, dict) else {})
               for p in config.get("plugins", [])}
    want = manual_questions(name)
    if want:
        listed = plugins.get("calib.coursework.ManualQuestions")
        assert listed is not None, f"{name} has written questions but no ManualQuestions plugin"
        assert {q: float(p) for q, p in listed.items()} == want and list(listed) == list(want)
    else:
        assert "calib.coursework.ManualQuestions" not in plugins


def test_the_instructors_page_lists_every_manual_question():
    """The page's table of written questions: one row per manual question, with its points."""
    page = (ba.COURSEWORK / "instructors.md").read_text()
    rows = re.findall(r"^\| (\d+) \| Question (\d+) \(`(\w+)`\) \| ([\d.]+) \| .+\|$", page, re.M)
    listed = {(int(a), q, float(p)) for a, _, q, p in rows}
    want = {(int(n[1:n.index("_")]), q, p) for n in NAMES for q, p in manual_questions(n).items()}
    assert want and listed == want, f"page: {sorted(listed)}, masters: {sorted(want)}"
    for a, number, q, _ in rows:  # "Question N" is the question's own number
        assert q.startswith(f"q{number}_"), (a, number, q)
    for n in NAMES:  # every assignment on the page and in the table of contents
        assert f"{{doc}}`{n}/{n}`" in page, f"{n} is missing from the instructors page"
        assert f"book/coursework/{n}/{n}" in (ROOT / "_toc.yml").read_text(), f"{n} not in _toc.yml"


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
    # a file number such as 004, not the thousands of "3,000" (the book style test's rule)
    assert not re.search(r"(?<![\w.,])00[0-4](?![\w.])", text), "papers are named by author and year, not file number"
    # plain Markdown: Colab shows MyST roles as raw text (the masters' citations are checked
    # against references.bib by the build, which writes each one out)
    markdown = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert not re.search(r"\{(doc|cite[pt]?|bibliography)\}", markdown), "MyST roles in the student notebook"
    master = "".join("".join(c["source"]) for c in _master_cells(name) if c["cell_type"] == "markdown")
    if "{doc}" in master:
        assert "](https://github.com/" in markdown, "the chapters are linked"
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text()))
    cited = {k.strip() for group in re.findall(r"\{cite[pt]?\}`([^`]+)`", master) for k in group.split(",")}
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"
    assert "et al., 20" in markdown or not cited


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_find_no_file_by_name_and_the_setup_downloads_only_public_tests(name):
    """otter.Notebook() takes no file name, so a renamed submission or a Colab copy grades."""
    import sync_setup_cells

    master = (ba.MASTERS / f"{name}.ipynb").read_text()
    assert "otter.Notebook()" in master and f"otter.Notebook(\\\"{name}" not in master
    assert "calib.coursework.SetupErrors" in master and "requirements: requirements.txt" in master
    published = sorted(p.name for p in (ba.COURSEWORK / name / "tests").glob("*.py"))
    assert sorted(sync_setup_cells.public_tests(name)) == published
    cell = sync_setup_cells.setup_source(assignment=name)
    assert "git clone" not in cell and "copytree" not in cell
    assert f'"{sync_setup_cells.install_source(extra="course")}"' in cell


def test_autograder_requirements_install_calib_on_cpu_torch_and_otter_is_pinned():
    import sync_setup_cells

    reqs = (ba.MASTERS / "requirements.txt").read_text()
    assert reqs == sync_setup_cells.autograder_requirements(), "run python tools/sync_setup_cells.py"
    lines = [l for l in reqs.splitlines() if l and not l.startswith("#")]
    assert "--index-url https://download.pytorch.org/whl/cpu" in lines
    assert any(l.startswith("torch-calib[course] @ https://github.com/") and l.endswith(".tar.gz") for l in lines)
    import tomllib
    from importlib.metadata import version

    course = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["course"]
    assert [c for c in course if c.startswith("otter")] == ["otter-grader~=7.0.0"]  # one release line
    assert f"otter-grader=={version('otter-grader')}" in (ROOT / "constraints.txt").read_text()


@pytest.mark.grading
def test_autograder_requirements_resolve_in_a_fresh_venv(tmp_path):
    """What a grading image installs resolves from an empty venv (pip --dry-run).

    The calib line points at this checkout instead of the branch's tarball, and the PyTorch
    CPU index is left out where it cannot be reached (this machine reaches only the package
    registries); torch then resolves from the default index.
    """
    from importlib.metadata import version

    reqs = (ba.MASTERS / "requirements.txt").read_text().splitlines()
    local = [f"torch-calib[course] @ {ROOT.as_uri()}" if r.startswith("torch-calib[course] @") else r
             for r in reqs if not r.startswith("--")]
    (tmp_path / "requirements.txt").write_text("\n".join(local) + "\n")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    pip = [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "install", "--dry-run", "-q",
           "-r", str(tmp_path / "requirements.txt"), f"otter-grader[grading,plugins]=={version('otter-grader')}"]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
    if done.returncode and "Name or service not known" in done.stderr + done.stdout:
        pytest.skip("no package registry reachable from this machine")
    assert done.returncode == 0, done.stderr[-2000:]


def test_autograder_zip_carries_the_requirements(build_dir):
    """The zip's environment.yml: python, otter pinned to the builder, calib and CPU torch."""
    import zipfile

    b = built(NAMES[0], build_dir)
    env = zipfile.ZipFile(ba.autograder_zip(b)).read("environment.yml").decode()
    from importlib.metadata import version

    assert f"otter-grader[grading,plugins]=={version('otter-grader')}" in env
    for line in (ba.MASTERS / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            assert line in env, f"{line!r} missing from the zip's environment.yml"
    config = json.loads(zipfile.ZipFile(ba.autograder_zip(b)).read("otter_config.json"))
    assert "calib.coursework.SetupErrors" in config["plugins"]


def automatic_points(name: str) -> float:
    """The points of the master's test cases (public and hidden), read from their configs."""
    import yaml

    total = 0.0
    for cell in _master_cells(name):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "# BEGIN TEST CONFIG" in src:
            config = src.split("# BEGIN TEST CONFIG", 1)[1].split('"""', 1)[0]
            total += float(yaml.safe_load(config)["points"])
    return total


@pytest.mark.parametrize("name", NAMES)
def test_written_and_design_work_is_at_least_a_quarter_of_the_points(name):
    """Issue 44: each assignment has a derivation and a design question, graded by hand,
    and its written points are at least 25 % of its total; the page's table says so."""
    written, auto = sum(manual_questions(name).values()), automatic_points(name)
    assert auto > 0 and written / (written + auto) >= 0.25, f"{name}: {written:g} of {written + auto:g} written"
    kinds = {q.split("_", 1)[1] for q in manual_questions(name)}
    assert {"derive", "design"} <= kinds, f"{name}: a derivation and a design question, got {kinds}"
    page = (ba.COURSEWORK / "instructors.md").read_text()
    n = int(name[1:name.index("_")])
    row = f"| {n} | {auto:g} | {written:g} | {round(100 * written / (written + auto))} % |"
    assert row in page, f"the instructors page's share table lacks {row!r}"
