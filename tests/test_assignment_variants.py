"""A course's variant of the coursework: ``tools/build_assignments.py --variant SEED`` (issue 44).

Each master's ``# VARIANT`` cell names the constants its hidden tests pin and where they
stand; a variant redraws them from SEED and recomputes the tests' frozen answers from
the reference solution. Checked here: the cells match their masters; the masters' frozen
answers are what the reference solution computes; a variant build differs from the
default build in every assignment's hidden tests, never in its public tests, and the same
seed builds the same files; the reference solution scores full marks against a variant
(Assignment 2, whose peaks are recomputed: one grading, a kernel).
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import assignment_variants as av  # noqa: E402
import build_assignments as ba  # noqa: E402

NAMES = [m.stem for m in ba.masters()]
SEED = 2718


def _master(name: str) -> dict:
    return json.loads((ba.MASTERS / f"{name}.ipynb").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_each_master_declares_its_variant_and_the_declaration_fits(name):
    nb = _master(name)
    spec = av.read_spec(nb, name)
    av.check_anchors(nb, spec, name)  # every declared text is in the master, as often as declared
    assert av.spec_index(nb) == 1, "the # VARIANT cell sits right after the assignment config"
    drawn = av.draw(spec, SEED, name)
    assert set(drawn) == set(spec["constants"])
    assert all(drawn[k] != e["value"] for k, e in spec["constants"].items()), drawn
    assert av.draw(spec, SEED, name) == drawn  # one seed, one draw
    assert av.draw(spec, SEED + 1, name) != drawn or len(drawn) == 1


def test_the_draw_is_the_documented_one():
    """``random.Random("SEED/assignment/NAME")``: a course can redo the draw by hand."""
    import random

    spec = {"constants": {"K": {"value": 15, "draw": {"integers": [10, 30]}, "at": ["{}"]},
                          "G": {"value": 3.0, "draw": {"choice": [2.0, 3.0, 4.0]}, "at": ["{}"]}}}
    rng = random.Random("5/a9_x/K")
    want = rng.randint(10, 30)
    while want == 15:
        want = rng.randint(10, 30)
    assert av.draw(spec, 5, "a9_x") == {"K": want, "G": random.Random("5/a9_x/G").choice([2.0, 4.0])}
    with pytest.raises(ValueError, match="seed"):
        av.draw(spec, -1, "a9_x")


def test_a_stale_declaration_fails_the_variant_build():
    nb = _master("a2_focal_loss")
    cell = next(c for c in nb["cells"] if "GAMMA = 3.0" in "".join(c["source"]))
    cell["source"] = "".join(cell["source"]).replace("GAMMA = 3.0", "GAMMA = 3.5")
    with pytest.raises(ValueError, match="GAMMA = 3.0.*occurs 0 times"):
        av.apply(nb, "a2_focal_loss", SEED)


@pytest.mark.parametrize("name", [n for n in NAMES if av.read_spec(_master(n))["references"]])
def test_the_masters_frozen_answers_are_the_reference_solutions(name):
    """Under the master's own constants the reference solution gives the typed values."""
    nb = _master(name)
    spec = av.read_spec(nb, name)
    constants = {k: e["value"] for k, e in spec["constants"].items()}
    got = av.reference_values(av.apply(nb, name, None)[0], spec, constants)
    for key, entry in spec["references"].items():
        assert abs(got[key] - entry["value"]) <= 1e-7 * max(1.0, abs(entry["value"])), (key, got[key])


@functools.lru_cache(maxsize=None)
def built(name: str, variant: int | None, out: pathlib.Path) -> pathlib.Path:
    return ba.build(ba.MASTERS / f"{name}.ipynb", out / f"{variant}", variant)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> pathlib.Path:
    pytest.importorskip("otter", reason="otter-grader is in the course extra: pip install -e .[course]")
    return tmp_path_factory.mktemp("variants")


def _tests(b: pathlib.Path, kind: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((b / kind / "tests").glob("*.py"))}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_variant_changes_the_hidden_answers_and_keeps_the_public_tests(name, out):
    default, variant = built(name, None, out), built(name, SEED, out)
    assert not (default / "variant.json").exists()
    drawn = json.loads((variant / "variant.json").read_text())
    assert drawn["seed"] == SEED
    # the public tests are the masters': the Colab setup cell downloads those
    assert _tests(variant, "student") == _tests(default, "student")
    hidden_default, hidden_variant = _tests(default, "autograder"), _tests(variant, "autograder")
    assert hidden_default.keys() == hidden_variant.keys()
    changed = [q for q in hidden_default if hidden_default[q] != hidden_variant[q]]
    assert changed, f"{name}: the variant's hidden tests are the default's"
    spec = av.read_spec(_master(name))
    text = "".join(hidden_variant.values())
    for key, value in drawn["references"].items():  # each recomputed answer is in the tests
        old = spec["references"][key]["value"]
        assert repr(value) in text and repr(old) not in text, (key, value, old)
    # the student notebook carries the drawn constants wherever the master had its own
    student = ba.dumps(ba.student_notebook(variant))
    for key, entry in spec["constants"].items():
        for pattern in entry["at"]:
            if pattern.format(entry["value"]) in ba.dumps(ba.student_notebook(default)):
                new = pattern.format(av.as_written(drawn["constants"][key]))
                assert json.dumps(new)[1:-1] in student, (key, new)
                assert json.dumps(pattern.format(entry["value"]))[1:-1] not in student, key


@pytest.mark.slow
def test_the_same_seed_builds_the_same_files(out, tmp_path):
    name = "a2_focal_loss"
    first, again = built(name, SEED, out), ba.build(ba.MASTERS / f"{name}.ipynb", tmp_path, SEED)
    for kind in ("student", "autograder"):
        assert _tests(first, kind) == _tests(again, kind)
    assert ba.published_files(first) == ba.published_files(again)
    assert (first / "variant.json").read_text() == (again / "variant.json").read_text()
    for bad in (["--variant", "-3"], ["--variant", str(SEED), "--publish"]):  # refused before building
        with pytest.raises(SystemExit):
            ba.main([name, *bad, "--out", str(tmp_path / "refused")])


@pytest.mark.slow
@pytest.mark.grading
def test_the_reference_solution_scores_full_marks_against_a_variant(out, tmp_path, monkeypatch):
    """Assignment 2's variant (gamma, the data seed and the peaks redrawn), graded as a course would."""
    from calib.grading import runner

    name = "a2_focal_loss"
    b = built(name, SEED, out)
    for key, value in {"CALIB_PROFILE": "quick", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
                       }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    submission = tmp_path / "student.ipynb"
    submission.write_text((b / "autograder" / f"{name}.ipynb").read_text())
    result = runner.grade(runner.Bundle.read(b), submission, tmp_path / "graded", timeout=900)
    assert result["status"] == "graded", result["message"]
    assert result["score"] == result["max_score"] > 0, json.dumps(result["tests"], indent=1)[:4000]
    assert not result["errors"], result["errors"]
