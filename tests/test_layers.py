"""The package's layers: a module imports only from its own layer or a lower one.

Data flows one way (data -> model -> trainer -> run record -> metrics/post-hoc -> plots and
tables), and the import graph follows the layers of CONTRIBUTING.md. Every import is
checked, including the lazy ones inside functions.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "calib"

# lower number = lower layer
LAYERS = {
    "calib": 0, "calib._checks": 0, "calib.profile": 0,
    "calib.metrics": 1,
    "calib.posthoc": 2, "calib.evidence": 2,
    "calib.losses": 3,
    "calib.theory": 4,
    "calib.data": 5, "calib.models": 5,
    "calib.train": 6,
    "calib.experiments": 7,
    "calib.plots": 8,
    "calib.cli": 9, "calib.__main__": 9,
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return key, LAYERS[key]
    raise KeyError(module)


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every calib import in ``path``, relative ones resolved."""
    return _imports_of(path.read_text(), _module_name(path), path.name == "__init__.py")


def _imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names = [module + "." + a.name for a in node.names] if node.module is None else [module]
            else:
                names = [node.module or ""]
            found += [(node.lineno, m) for m in names if m.startswith("calib")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("calib")]
    return found


MODULES = sorted(ROOT.rglob("*.py"))


def test_every_module_has_a_layer():
    missing = [_module_name(p) for p in MODULES if not _safe_layer(_module_name(p))]
    assert not missing, f"modules without a layer in tests/test_layers.py: {missing}"


def _safe_layer(name: str) -> bool:
    try:
        _layer(name)
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_no_import_from_a_higher_layer(path):
    me, mine = _layer(_module_name(path))
    bad = []
    for line, target in _imports(path):
        them, theirs = _layer(target)
        if theirs > mine:
            bad.append(f"line {line}: {target} ({them}, layer {theirs})")
    assert not bad, f"{_module_name(path)} ({me}, layer {mine}) imports from higher layers: {bad}"


def test_the_checker_sees_a_violation():
    """The rule could fail: a lazy import of the trainer inside a metric is caught."""
    source = "def ece():\n    from .train import Trainer\n    from . import profile\n"
    found = _imports_of(source, "calib.metrics", is_package=False)
    assert found == [(2, "calib.train"), (3, "calib.profile")]
    assert _layer("calib.train.trainer")[1] > _layer("calib.metrics")[1] >= _layer("calib.profile")[1]
