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
    "calib": 0, "calib._checks": 0, "calib._optional": 0, "calib.profile": 0,
    "calib.runtimes": 0,
    "calib.metrics": 1,
    "calib.posthoc": 2, "calib.evidence": 2,
    "calib.losses": 3,
    "calib.theory": 4,
    "calib.data": 5, "calib.models": 5,
    "calib.train": 6,
    "calib.experiments": 7,
    "calib.plots": 8,
    "calib.cli": 9, "calib.__main__": 9, "calib.coursework": 9, "calib.grading": 9,
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


def _runtime_imports(path: pathlib.Path) -> set[str]:
    """The calib modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    source = ast.unparse(tree)
    return {m for _, m in _imports_of(source, _module_name(path), path.name == "__init__.py")}


def _import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the calib modules it imports at run time, for the modules of ``packages``."""
    names = {_module_name(p): p for p in MODULES}
    return {m: {t for t in _runtime_imports(p) if t in names and t != m}
            for m, p in names.items() if m.startswith(packages)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles in ``graph`` (Tarjan's strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles_in_data_and_train():
    """Issue 34: data/idx <-> data/vision and train/meta/l2 <-> train/meta/trainer are cut, and no
    other circle among calib.data's and calib.train's modules (lazy imports included)."""
    assert _cycles(_import_graph(("calib.data", "calib.train"))) == []
    assert "calib.data.vision" not in _runtime_imports(ROOT / "data" / "idx.py")
    assert "calib.train.meta.l2" not in _runtime_imports(ROOT / "train" / "meta" / "trainer.py")
    assert "calib.train.meta.trainer" not in _runtime_imports(ROOT / "train" / "meta" / "l2.py")


def test_the_circle_finder_sees_a_circle():
    """The check could fail: a circle through three modules is found, a chain is not, and an
    import under ``if TYPE_CHECKING:`` (annotations only) does not count."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert "calib.train.trainer" not in _runtime_imports(ROOT / "train" / "progress.py")


def test_progress_never_imports_the_trainer():
    """Issue 43: train/progress.py and train/trainer.py imported each other (the monitor's type
    hint, under ``if TYPE_CHECKING:``). The monitor declares what it reads (``progress.Run``)."""
    source = (ROOT / "train" / "progress.py").read_text()
    assert not [m for _, m in _imports_of(source, "calib.train.progress", False) if m == "calib.train.trainer"]
    assert "calib.train.progress" in _runtime_imports(ROOT / "train" / "trainer.py")


# Shared internals every layer may use: the input checks and the optional-dependency guard.
SHARED_PRIVATE = {"calib._checks", "calib._optional"}


def _private_imports(source: str, module: str, is_package: bool) -> list[tuple[int, str, str]]:
    """(line, source module, name) for every ``from X import _name`` in ``source``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            found += [(node.lineno, target, a.name) for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def _subpackage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_private_name_crosses_a_subpackage():
    """A ``_name`` is internal to its subpackage: other subpackages use public names."""
    bad = []
    for path in MODULES:
        me = _module_name(path)
        for line, target, name in _private_imports(path.read_text(), me, path.name == "__init__.py"):
            if target + "." + name in SHARED_PRIVATE or target in SHARED_PRIVATE:
                continue
            if _subpackage(target) != _subpackage(me):
                bad.append(f"{me} line {line}: {target}.{name}")
    assert not bad, "private names imported across subpackages:\n" + "\n".join(bad)


def test_the_private_import_check_sees_a_crossing():
    found = _private_imports("from ..metrics.smooth import _fit\nfrom ._core import _ce\n",
                             "calib.losses.batch", is_package=False)
    assert found == [(1, "calib.metrics.smooth", "_fit"), (2, "calib.losses._core", "_ce")]
    assert _subpackage("calib.metrics.smooth") != _subpackage("calib.losses.batch")
