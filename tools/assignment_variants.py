"""A course's own variant of an assignment: its constants redrawn, its hidden answers recomputed.

Each master notebook ``book/assignments/aN_topic.ipynb`` declares, in one raw cell that
starts ``# VARIANT`` (YAML, right after the assignment config), the constants a course may
redraw and the hidden-test values that follow from them::

    # VARIANT
    constants:
      GAMMA:                      # a name for the constant
        value: 3.0                # the master's value
        draw: {choice: [2.5, 4.0, 5.0]}   # or {integers: [lo, hi]} (both ends included)
        at: ["GAMMA = {}", "for $\\gamma = {:g}$"]   # its text in the master, {} its value
    references:
      P_PEAK:
        value: 0.08546051183561863
        expression: find_peak(GAMMA)[0]
        at: ["abs(p_peak - {})"]

:func:`apply` turns a master into the notebook ``otter assign`` builds. Without a seed it
only drops the ``# VARIANT`` cell, so the build is that of the master as written. With a
seed it draws every constant (:func:`draw`), writes the drawn values wherever its ``at``
texts stand (code, tests and Markdown alike), and recomputes each reference by evaluating
its ``expression`` on the reference solution under those constants
(:func:`reference_values`): the master's imports, function definitions and UPPER_CASE
constants, run in this process, never its data loading or training.

Each ``at`` text, written with the master's value, must occur ``count`` times (default 1)
in the master, so an edit that moves a constant fails the variant build instead of
leaving the old value in place.
"""
from __future__ import annotations

import ast
import json
import random
import re
from typing import Any

MARKER = "# VARIANT"
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")


def spec_index(nb: dict) -> int | None:
    """The index of the master's ``# VARIANT`` cell, or None."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "raw" and "".join(cell["source"]).startswith(MARKER):
            return i
    return None


def read_spec(nb: dict, name: str = "the master") -> dict:
    """The ``# VARIANT`` cell's constants and references, each with its ``at`` texts checked."""
    import yaml

    at = spec_index(nb)
    if at is None:
        raise ValueError(f"{name} has no '{MARKER}' raw cell: nothing a variant could redraw")
    spec = yaml.safe_load("".join(nb["cells"][at]["source"])) or {}
    spec = {"constants": spec.get("constants") or {}, "references": spec.get("references") or {}}
    if not spec["constants"]:
        raise ValueError(f"{name}: its {MARKER} cell lists no constants")
    for kind, entries in spec.items():
        for key, entry in entries.items():
            entry["value"] = as_written(entry["value"])
            if not entry.get("at"):
                raise ValueError(f"{name}: {kind} {key} says nowhere ('at') where it stands")
            if kind == "references" and not entry.get("expression"):
                raise ValueError(f"{name}: reference {key} has no expression")
    return spec


def as_written(value: Any) -> Any:
    """YAML lists as tuples: ``(5, 15)`` is written as the master writes it."""
    return tuple(as_written(v) for v in value) if isinstance(value, list) else value


def draw(spec: dict, seed: int, assignment: str) -> dict[str, Any]:
    """Each constant's value in variant ``seed``; never the master's own.

    One stream per constant, Python's ``random.Random("SEED/assignment/NAME")`` (seeded
    through SHA-512, the same on every platform and Python 3 release): ``integers: [lo,
    hi]`` is ``randint(lo, hi)``, ``choice: [...]`` is ``choice`` of the listed values
    without the master's, and an integer equal to the master's is drawn again.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    values = {}
    for key, entry in spec["constants"].items():
        rng = random.Random(f"{seed}/{assignment}/{key}")
        rule, default = entry.get("draw") or {}, entry["value"]
        if "choice" in rule:
            options = [o for o in map(as_written, rule["choice"]) if o != default]
            if not options:
                raise ValueError(f"{assignment}: {key}'s choices hold only the master's value")
            values[key] = rng.choice(options)
        elif "integers" in rule:
            lo, hi = rule["integers"]
            if lo == hi == default:
                raise ValueError(f"{assignment}: {key}'s range holds only the master's value")
            value = default
            while value == default:
                value = rng.randint(lo, hi)
            values[key] = value
        else:
            raise ValueError(f"{assignment}: {key} needs draw: {{choice: [...]}} or {{integers: [lo, hi]}}")
    return values


def _cells_text(nb: dict, skip: int | None) -> str:
    return "\n".join("".join(c["source"]) for i, c in enumerate(nb["cells"]) if i != skip)


def check_anchors(nb: dict, spec: dict, name: str = "the master") -> None:
    """Every ``at`` text, with the master's value, occurs ``count`` times (default 1)."""
    text = _cells_text(nb, spec_index(nb))
    for entries in spec.values():
        for key, entry in entries.items():
            for pattern in entry["at"]:
                found, want = text.count(pattern.format(entry["value"])), entry.get("count", 1)
                if found != want:
                    raise ValueError(f"{name}: {key}'s text {pattern.format(entry['value'])!r} occurs "
                                     f"{found} times, not {want}: update the {MARKER} cell")


def substitute(nb: dict, spec: dict, values: dict[str, Any]) -> dict:
    """A copy of ``nb`` with each entry's ``at`` texts holding ``values[key]``, its cell dropped."""
    out = json.loads(json.dumps(nb))
    skip = spec_index(out)
    swaps = [(p.format(e["value"]), p.format(values[k]), f"\0{k}:{i}\0")
             for entries in spec.values() for k, e in entries.items() if k in values
             for i, p in enumerate(e["at"])]
    for cell in out["cells"]:
        src = "".join(cell["source"])
        for old, _, token in swaps:  # tokens first: a new value never matches another's old text
            src = src.replace(old, token)
        for _, new, token in swaps:
            src = src.replace(token, new)
        cell["source"] = src.splitlines(keepends=True)
    if skip is not None:
        del out["cells"][skip]
    return out


def solution_code(nb: dict) -> str:
    """The reference solution's imports, function definitions and UPPER_CASE constants.

    Test cells (between ``# BEGIN TESTS`` and ``# END TESTS``) and IPython magics are
    left out, and so is every other statement: no data is loaded, nothing is trained.
    """
    kept, in_tests = [], False
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "raw":
            in_tests = {"# BEGIN TESTS": True, "# END TESTS": False}.get(src.strip(), in_tests)
        if cell["cell_type"] != "code" or in_tests:
            continue
        src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
        for node in ast.parse(src).body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)) or (
                    isinstance(node, ast.Assign) and all(
                        isinstance(t, ast.Name) and _CONSTANT.match(t.id) for t in node.targets)):
                kept.append(ast.get_source_segment(src, node))
    return "\n\n".join(kept)


def reference_values(nb: dict, spec: dict, constants: dict[str, Any]) -> dict[str, float]:
    """Each reference's ``expression`` on the solution of ``nb`` (already substituted)."""
    if not spec["references"]:
        return {}
    space: dict[str, Any] = {"__name__": "reference_solution", **constants}
    exec(compile(solution_code(nb), "<reference solution>", "exec"), space)  # noqa: S102
    return {key: float(eval(entry["expression"], space))  # noqa: S307 - the master's own text
            for key, entry in spec["references"].items()}


def apply(nb: dict, assignment: str, seed: int | None) -> tuple[dict, dict | None]:
    """(the notebook to build, the drawn constants and references or None), as the module says."""
    if seed is None:
        at = spec_index(nb)
        out = json.loads(json.dumps(nb))
        if at is not None:
            del out["cells"][at]
        return out, None
    spec = read_spec(nb, assignment)
    check_anchors(nb, spec, assignment)
    constants = draw(spec, seed, assignment)
    rendered = substitute(nb, {"constants": spec["constants"], "references": {}}, constants)
    references = reference_values(rendered, spec, constants)
    final = substitute(nb, spec, {**constants, **references})
    return final, {"seed": seed, "constants": constants, "references": references}
