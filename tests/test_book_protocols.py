"""A chapter's protocol prose and its CLI recipe against the configuration its code builds.

Chapter 2 builds every run from ``protocol(name)``, a function in one of its code cells.
These tests run that function (and only it) for each profile, so a sentence naming a
preset, or a shell recipe said to reproduce the notebook's ``paper`` run, fails here
when the code and the words drift apart.
"""
import ast
import dataclasses
import json
import pathlib
import re
import shlex

import pytest

from calib import cli
from calib.train import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "02_overconfidence.ipynb"


def _cells(kind: str) -> list[str]:
    cells = json.loads(CHAPTER.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == kind]


def _prose() -> str:
    return " ".join("\n".join(_cells("markdown")).split())


def _function(name: str):
    """The chapter's function ``name``, compiled from its code cell alone."""
    for src in _cells("code"):
        body = "\n".join(x for x in src.splitlines() if not x.lstrip().startswith(("%", "!")))
        for node in ast.parse(body).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                scope = {"TrainConfig": TrainConfig, "dataclasses": dataclasses}
                exec(compile(ast.Module([node], type_ignores=[]), str(CHAPTER), "exec"), scope)
                return scope[name]
    raise AssertionError(f"{CHAPTER.name}: no function {name}()")


def _run_overrides() -> ast.Dict:
    """The dict literal ``{**base, ...}`` the training loop builds each run's config from."""
    for src in _cells("code"):
        body = "\n".join(x for x in src.splitlines() if not x.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(body)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrainConfig"
                    and node.keywords and node.keywords[0].arg is None
                    and isinstance(node.keywords[0].value, ast.Dict)):
                return node.keywords[0].value
    raise AssertionError(f"{CHAPTER.name}: no TrainConfig(**{{**base, ...}}) call")


def _recipe() -> list[str]:
    """The ``python -m calib train`` command of the chapter's Runtime box, as argv."""
    text = "\n".join(_cells("markdown"))
    match = re.search(r"python -m calib train(?:[^\n]*\\\n)*[^\n]*", text)
    assert match, f"{CHAPTER.name}: no 'python -m calib train' recipe"
    return shlex.split(match.group(0).replace("\\\n", " "))[3:]


def test_cli_recipe_builds_the_notebooks_paper_run():
    args = cli.build_parser().parse_args(_recipe())
    from_cli = cli.config_from_args(args)
    protocol = _function("protocol")
    # the notebook's run for the recipe's loss and seed, built as its training loop builds it
    names = {"base": protocol("paper").to_dict(), "loss": from_cli.loss, "kw": from_cli.loss_kwargs,
             "seed": from_cli.seed, "out": from_cli.out, "str": str}
    fields = eval(compile(ast.Expression(_run_overrides()), str(CHAPTER), "eval"), names)  # noqa: S307
    from_notebook = TrainConfig(**fields)
    assert from_cli.loss == "ce" and from_cli.seed == 0
    assert from_cli.to_dict() == from_notebook.to_dict()


def test_protocol_sentence_names_the_preset_the_code_builds():
    prose = _prose()
    match = re.search(r"Both `colab` and `paper` build the `(\w+)` preset", prose)
    assert match, "the GPU section names no preset for colab and paper"
    named = match.group(1)
    protocol = _function("protocol")
    for name in ("colab", "paper"):
        built = protocol(name)
        assert built.preset == named
        # the preset at that profile, as the prose says, gives the same schedule
        expected = TrainConfig.from_preset(named, name, data=built.data, model=built.model)
        for field in ("epochs", "milestones", "lr", "momentum", "weight_decay", "batch_size",
                      "loss_reduction", "clip_grad", "ts_method", "ts_grid_step", "val_size"):
            assert getattr(built, field) == getattr(expected, field), (name, field)
    assert f"--preset {named}" in " ".join(_recipe())


@pytest.mark.parametrize("sentence, check", [
    ("sums the loss over the batch, clips the norm of the gradient at 2 and searches $T$ on the validation ECE",
     lambda p: all((p(n).loss_reduction, p(n).clip_grad, p(n).ts_method) == ("sum", 2.0, "grid")
                   for n in ("colab", "paper"))),
    ("the loss is summed over the batch, not averaged, and the norm of the gradient is clipped at 2",
     lambda p: (p("quick").loss_reduction, p("quick").clip_grad) == ("sum", 2.0)),
    ("At the `quick` profile $T$ minimises the validation NLL; at `colab` and `paper` it is searched on "
     "the validation ECE",
     lambda p: [p(n).ts_method for n in ("quick", "colab", "paper")] == ["nll", "grid", "grid"]),
    ("`paper` runs the preset at the paper's scale, a ResNet-50 on CIFAR-10",
     lambda p: (p("paper").model, p("paper").data, p("paper").profile) == ("resnet50", "cifar10", "paper")),
    ("`colab` runs a ResNet-20 with fewer epochs and mixed precision",
     lambda p: (p("colab").model, p("colab").amp) == ("resnet20", "auto")
     and p("colab").epochs < p("paper").epochs),
])
def test_protocol_sentences_match_the_configs(sentence, check):
    assert sentence in _prose(), f"{CHAPTER.name} no longer says: {sentence!r}"
    assert check(_function("protocol"))


def test_exercise_4_names_the_cifar_presets_protocol():
    assert "(`loss_reduction=\"mean\"`, `clip_grad=None`), the `cifar` preset's protocol" in _prose()
    cifar = TrainConfig.from_preset("cifar", "paper", data="cifar10", model="resnet50")
    assert (cifar.loss_reduction, cifar.clip_grad) == ("mean", None)
