"""calib.coursework: the library-call check of the hidden tests and the setup-error plugin."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from calib import coursework, losses, metrics
from calib.metrics import ece as aliased_ece

PROBS = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
LABELS = np.array([0, 1, 1])


def own_ece(probs, labels):
    conf = probs.max(axis=1)
    return float(abs((probs.argmax(axis=1) == labels).mean() - conf.mean()))


def test_own_code_calls_nothing_forbidden():
    value, calls = coursework.library_calls(own_ece, PROBS, LABELS)
    assert calls == [] and value == own_ece(PROBS, LABELS)


@pytest.mark.parametrize("answer", [
    lambda p, y: metrics.ece(p, y),
    lambda p, y: aliased_ece(p, y),  # from calib.metrics import ece as ...
    lambda p, y: (lambda: metrics.ece(p, y))(),  # behind a helper
])
def test_a_call_into_calib_metrics_is_found_however_it_is_reached(answer):
    value, calls = coursework.library_calls(answer, PROBS, LABELS)
    assert value == metrics.ece(PROBS, LABELS)
    assert "calib.metrics:ece" in calls


def test_only_the_forbidden_modules_count():
    z, y = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 0])
    _, calls = coursework.library_calls(losses.focal_loss, z, y, forbidden=["calib.posthoc"])
    assert calls == []
    _, calls = coursework.library_calls(losses.focal_loss, z, y)
    assert any(c.startswith("calib.losses:") for c in calls)


def test_profiling_is_restored_even_when_the_answer_raises():
    def broken(*_):
        raise ZeroDivisionError("student bug")

    before = __import__("sys").getprofile()
    with pytest.raises(ZeroDivisionError):
        coursework.library_calls(broken, PROBS)
    assert __import__("sys").getprofile() is before


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="callable"):
        coursework.library_calls(42)
    with pytest.raises(ValueError, match="calib modules"):
        coursework.library_calls(own_ece, PROBS, LABELS, forbidden=["numpy"])
    with pytest.raises(TypeError, match="notebook"):
        coursework.setup_errors([1, 2])


def _cell(source, error=None, tags=()):
    outputs = [{"output_type": "error", "ename": error[0], "evalue": error[1]}] if error else []
    return {"cell_type": "code", "source": source, "outputs": outputs, "metadata": {"tags": list(tags)}}


def test_setup_errors_split_at_the_first_answer_cell():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "# A1"},
        _cell("import otter\ngrader = otter.Notebook('a.ipynb')", ("FileNotFoundError", "a.ipynb")),
        _cell("def ece(p, y):\n    ...", ("NameError", "np"), tags=["otter_answer_cell"]),
        _cell('grader.check("q1")', ("NameError", "grader")),
    ]}
    before, after = coursework.setup_errors(nb)
    assert before == ["cell 1: FileNotFoundError: a.ipynb"]
    assert after == ["cell 2: NameError: np", "cell 3: NameError: grader"]
    rest = coursework.setup_errors({"cells": nb["cells"][2:]})
    assert rest == ([], ["cell 1: NameError: np", "cell 2: NameError: grader"])


class _Results:
    def __init__(self, nb):
        self.notebook, self._catastrophic_error, self.output = nb, None, None

    def set_output(self, text):
        self.output = text


def test_the_plugin_turns_a_setup_error_into_a_failed_grading():
    pytest.importorskip("otter")
    bad = {"cells": [_cell("import calib", ("ImportError", "no calib"))]}
    plugin = coursework.SetupErrors("x.ipynb", {}, {})
    results = _Results(bad)
    plugin.after_grading(results)
    assert "ImportError: no calib" in str(results._catastrophic_error)
    assert plugin.generate_report().startswith("SETUP FAILED")

    good = {"cells": [_cell("import calib"), _cell("x = 1", ("ValueError", "v"), ["otter_answer_cell"])]}
    results = _Results(good)
    plugin.after_grading(results)
    assert results._catastrophic_error is None and "cell 2: ValueError: v" in results.output


def _markdown(source, tags=()):
    return {"cell_type": "markdown", "source": source, "metadata": {"tags": list(tags)}}


def test_manual_answers_in_order_and_the_model_answer_for_a_blank():
    nb = {"cells": [
        _markdown("## Question 1"),
        _markdown("My answer.\n", ["otter_answer_cell"]),
        _cell("x = 1", tags=["otter_answer_cell"]),  # a code answer is not a written one
        _markdown(coursework.PLACEHOLDER, ["otter_answer_cell"]),
        _markdown("<!-- BEGIN QUESTION -->\n\nThe model answer.", ["otter_assign_solution_cell"]),
        _markdown(coursework.PLACEHOLDER, ["otter_answer_cell"]),
    ]}
    assert coursework.manual_answers(nb) == ["My answer.", "The model answer.", coursework.PLACEHOLDER]
    with pytest.raises(TypeError, match="notebook"):
        coursework.manual_answers([1])


def test_a_manual_question_scores_zero_of_its_points_until_graded():
    q = coursework.ManualQuestion("q6_evidence", 4, "Focal holds.")
    assert (q.score, q.possible) == (0, 4)
    assert q.summary().startswith(f"q6_evidence: {coursework.MANUAL} (4 points)")
    assert q.summary().endswith("The answer as submitted:\n\nFocal holds.")
    assert "no answer" in coursework.ManualQuestion("q", 2, coursework.PLACEHOLDER).summary()
    q.update_score(3)
    assert q.score == 3
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match="points"):
            coursework.ManualQuestion("q", bad)


def test_the_plugin_puts_written_questions_in_results_json():
    pytest.importorskip("otter")
    import dill
    from otter.run.run_autograder.autograder_config import AutograderConfig
    from otter.test_files import GradingResults

    with pytest.raises(ValueError, match="points"):
        coursework.ManualQuestions("x.ipynb", {}, {"q1": "two"})
    plugin = coursework.ManualQuestions("x.ipynb", {}, {"q3_explain": 2, "q5_why": 1.5})
    nb = {"cells": [_markdown("First.", ["otter_answer_cell"]), _markdown("Second.", ["otter_answer_cell"])]}
    results = GradingResults([], notebook=nb)
    plugin.after_grading(results)
    out = results.to_gradescope_dict(AutograderConfig())
    entries = {t["name"]: t for t in out["tests"] if "max_score" in t}
    assert {k: (t["score"], t["max_score"]) for k, t in entries.items()} == {"q3_explain": (0, 2), "q5_why": (0, 1.5)}
    assert entries["q5_why"]["output"].endswith("Second.")
    assert (results.total, results.possible) == (0, 3.5)
    assert dill.loads(dill.dumps(results)).results["q3_explain"].possible == 2  # otter pickles it
    assert "q3_explain (2 points), q5_why (1.5 points)" in plugin.generate_report()
    # answers that do not match the questions one to one are not quoted
    results = GradingResults([], notebook={"cells": [_markdown("Only one.", ["otter_answer_cell"])]})
    plugin.after_grading(results)
    assert "read the answer in the notebook" in results.results["q3_explain"].summary()


def test_the_grader_binds_a_module_a_function_reaches_only_inside_a_comprehension():
    """a3's reference solution calls metrics.ece inside a list comprehension ("[metrics.ece(")."""
    from calib.grading.worker import load_functions

    src = "def f(xs):\n    return [metrics.ece is not None for _ in xs]\n"
    job = {"functions": {"f": src}, "bindings": {"metrics": "calib.metrics"}, "blocked": {}}
    functions, missing = load_functions(job, {})
    assert not missing and functions["f"]([1, 2]) == [True, True]
