"""What the grader reads from a submission's source, without running it.

A submission is a notebook. :func:`extract` parses its code cells (IPython magics and
shell lines blanked) and keeps what the grader needs outside the student's kernel:

* the top-level ``import`` bindings (``np`` -> ``numpy``, ``metrics`` -> ``calib.metrics``),
  which the test process re-imports itself, never taking a module from the notebook;
* the source of each top-level function (the last definition of a name wins, as in a
  kernel run top to bottom);
* for each function, the forbidden ``calib`` names it refers to (:data:`FORBIDDEN`),
  directly or through the student's other functions: a library call is found in the code,
  so no thread, profiler switch or alias hides it;
* the constructs no answer needs and that could reach outside the function (``exec``,
  ``setattr``, ``open``, ``sys``, dunder attributes, assigning an attribute of a module,
  a class defined on the fly): a function that holds one is *blocked*, not loaded into the
  test process, and its tests fail with the reason.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..coursework import FORBIDDEN

# modules the test process may import for a submission's functions
ALLOWED_ROOTS = frozenset({
    "numpy", "torch", "scipy", "pandas", "math", "calib", "collections", "itertools",
    "functools", "statistics", "typing", "dataclasses", "concurrent", "operator", "cmath",
})
# names an answer never needs, each a way out of the function's own computation
BLOCKED_NAMES = frozenset({
    "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr",
    "delattr", "open", "breakpoint", "input", "__builtins__", "builtins", "memoryview",
})
ALLOWED_DUNDERS = frozenset({"__name__", "__doc__", "__init__"})
_MAGIC = re.compile(r"^\s*[%!]")


@dataclass
class Source:
    """A submission's code as the grader sees it (see the module docstring)."""

    bindings: dict[str, str] = field(default_factory=dict)  # name -> dotted import path
    functions: dict[str, str] = field(default_factory=dict)  # name -> source
    nodes: dict[str, ast.FunctionDef] = field(default_factory=dict)
    library: dict[str, list[str]] = field(default_factory=dict)  # name -> forbidden uses
    blocked: dict[str, str] = field(default_factory=dict)  # name -> why it is not loaded
    unparsed: list[int] = field(default_factory=list)  # code cells with a syntax error
    tampering: list[str] = field(default_factory=list)  # top-level code that reaches outside


def cell_sources(notebook: dict) -> list[str]:
    """The code cells' sources, magics and shell lines blanked (line numbers kept)."""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise TypeError("notebook must be a notebook (a dict with 'cells')")
    out = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        out.append("\n".join("" if _MAGIC.match(l) else l for l in src.splitlines()))
    return out


def _bind(node: ast.Import | ast.ImportFrom, into: dict[str, str]) -> None:
    for alias in node.names:
        if isinstance(node, ast.Import):
            if alias.asname:
                into[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                into[root] = root
        elif node.level == 0 and node.module and alias.name != "*":
            into[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def extract(notebook: dict, forbidden: tuple[str, ...] = FORBIDDEN) -> Source:
    """Parse a submission notebook into a :class:`Source` (see the module docstring)."""
    found = Source()
    for number, text in enumerate(cell_sources(notebook), start=1):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            found.unparsed.append(number)
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                _bind(node, found.bindings)
            elif not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                why = _top_level_tampering(node, found.bindings)
                if why:
                    found.tampering.append(f"code cell {number} {why}")
            if isinstance(node, ast.FunctionDef):
                found.functions[node.name] = ast.get_source_segment(text, node, padded=False) or ""
                if node.decorator_list:  # the decorators' lines start before the def
                    first = node.decorator_list[0].lineno
                    found.functions[node.name] = "\n".join(
                        text.splitlines()[first - 1:node.end_lineno])
                found.nodes[node.name] = node
    direct = {n: _library_uses(node, found.bindings, forbidden) for n, node in found.nodes.items()}
    for name, node in found.nodes.items():
        why = _blocked(node, found.bindings)
        if why:
            found.blocked[name] = why
        seen, todo, uses = {name}, [name], {}
        while todo:  # through the student's own functions it calls
            current = todo.pop()
            uses.update(dict.fromkeys(direct[current]))
            for callee in _names(found.nodes[current]) & set(found.nodes) - seen:
                seen.add(callee)
                todo.append(callee)
        found.library[name] = list(uses)
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the root is not a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _forbidden_use(path: str, forbidden: tuple[str, ...]) -> str | None:
    for mod in forbidden:
        if path == mod or path.startswith(mod + "."):
            rest = path[len(mod) + 1:]
            return f"{mod}:{rest.split('.')[0]}" if rest else f"{mod}:*"
    if path == "calib":  # the package itself, reached dynamically
        return "calib:*"
    return None


def _library_uses(fn: ast.FunctionDef, bindings: dict[str, str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden calib names ``fn`` refers to, as ``module:name``, in order."""
    local = dict(bindings)
    for node in ast.walk(fn):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _bind(node, local)
    uses: dict[str, None] = {}
    covered: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {}
            _bind(node, names)
            for path in names.values():
                hit = _forbidden_use(path, forbidden)
                if hit and not hit.startswith("calib:"):
                    uses.setdefault(hit, None)
        if isinstance(node, ast.Attribute) and id(node) not in covered:
            chain = _chain(node)
            if chain and chain[0] in local:
                for inner in ast.walk(node):
                    covered.add(id(inner))
                hit = _forbidden_use(".".join([local[chain[0]], *chain[1:]]), forbidden)
                if hit:
                    uses.setdefault(hit, None)
        elif isinstance(node, ast.Name) and id(node) not in covered and node.id in local:
            hit = _forbidden_use(local[node.id], forbidden)
            if hit:
                uses.setdefault(hit, None)
    return list(uses)


def _blocked(fn: ast.FunctionDef, bindings: dict[str, str]) -> str:
    """Why ``fn`` must not run in the test process, or "" (see the module docstring)."""
    local = dict(bindings)
    for node in ast.walk(fn):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _bind(node, local)
            if isinstance(node, ast.ImportFrom) and node.level:
                return "a relative import"
    for name, path in local.items():
        if path.split(".")[0] not in ALLOWED_ROOTS and name in _names(fn):
            return f"it uses the module {path}"
    assigned = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    assigned |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in BLOCKED_NAMES:
            return f"it uses {node.id}"
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
                return f"it reaches the attribute {node.attr}"
            chain = _chain(node)
            if isinstance(node.ctx, (ast.Store, ast.Del)) and (not chain or chain[0] not in assigned):
                return f"it assigns {'.'.join(chain or ['?', node.attr])}, which is not its own"
        if isinstance(node, ast.ClassDef):
            return "it defines a class"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" \
                and len(node.args) == 3:
            return "it makes a class with type()"
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            chain = _chain(node.value)
            if chain and chain[0] not in assigned:
                return f"it assigns into {'.'.join(chain)}, which is not its own"
    return ""


def _top_level_tampering(node: ast.AST, bindings: dict[str, str]) -> str:
    """Why a top-level statement reaches outside the notebook's own names, or ""."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in BLOCKED_NAMES - {"open", "input"}:
            return f"uses {sub.id}"
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            chain = _chain(sub)
            if chain and chain[0] in bindings:
                return f"assigns {'.'.join(chain)}"
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr in ("setprofile", "settrace"):
            return f"calls {sub.func.attr}"
    return ""
