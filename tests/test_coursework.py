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
