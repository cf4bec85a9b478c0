"""The values a graded notebook hands to the grader, as plain data.

The student's kernel ends with a cell the grader adds: :func:`export` writes the globals
the tests read (``test_probs``, ``table``, ``FAST``, ...) to one file, and the grader and
its test process read it back with :func:`load`. Nothing is unpickled as such: the file
is ``torch.save`` of tensors, numbers, strings and tagged lists, read with
``torch.load(weights_only=True)``; arrays, data frames and calib's own records
(``evidence.Verdict``, a toy dataset) are rebuilt from their fields. A value of any
other kind (a function, a generator, an object of the student's own class) is not
exported, and a test that asks for it fails, naming it.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

_PLAIN = (bool, int, float, str, type(None))
_MAX_DEPTH = 8


class Unexportable(TypeError):
    """A value :func:`encode` does not carry."""


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as tagged plain data (see the module docstring)."""
    import numpy as np
    import torch

    if depth > _MAX_DEPTH:
        raise Unexportable("nested too deeply")
    if type(value) in _PLAIN:
        return value
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().clone()
        return ["tensor", t, bool(value.requires_grad)]
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufc":
            return ["list", [encode(v, depth + 1) for v in arr.tolist()]]
        return ["array", torch.from_numpy(np.ascontiguousarray(arr).copy()), arr.dtype.str,
                isinstance(value, np.generic)]
    if isinstance(value, (list, tuple)):
        return ["list" if isinstance(value, list) else "tuple", [encode(v, depth + 1) for v in value]]
    if isinstance(value, range):
        return ["range", value.start, value.stop, value.step]
    if isinstance(value, dict):
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas comes with the course extra
        pd = None
    if pd is not None and isinstance(value, pd.DataFrame):
        return ["frame", [encode(c, depth + 1) for c in value.columns],
                encode(list(value.index), depth + 1),
                [encode(value[c].to_numpy(), depth + 1) for c in value.columns]]
    if pd is not None and isinstance(value, pd.Series):
        return ["series", encode(list(value.index), depth + 1), encode(value.to_numpy(), depth + 1),
                encode(value.name, depth + 1)]
    cls = type(value)
    if cls.__module__.split(".")[0] == "calib":
        state = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else vars(value)
        return ["object", f"{cls.__module__}:{cls.__qualname__}",
                [[k, encode(v, depth + 1)] for k, v in state.items() if isinstance(k, str)]]
    raise Unexportable(f"a {cls.__name__}")


def decode(data: Any) -> Any:
    """The value :func:`encode` tagged, rebuilt; ValueError on anything else."""
    import numpy as np
    import torch

    if type(data) in _PLAIN:
        return data
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ValueError("not an exported value")
    tag, rest = data[0], data[1:]
    if tag == "tensor":
        t, grad = rest
        if not isinstance(t, torch.Tensor):
            raise ValueError("a tensor entry without a tensor")
        return t.requires_grad_(True) if grad and t.is_floating_point() else t
    if tag == "array":
        t, dtype, scalar = rest
        arr = t.numpy().astype(np.dtype(str(dtype)))
        return arr[()] if scalar else arr
    if tag in ("list", "tuple"):
        items = [decode(v) for v in rest[0]]
        return items if tag == "list" else tuple(items)
    if tag == "range":
        return range(*(int(v) for v in rest))
    if tag == "dict":
        return {_key(decode(k)): decode(v) for k, v in rest[0]}
    if tag == "frame":
        import pandas as pd

        columns, index, values = [decode(c) for c in rest[0]], decode(rest[1]), [decode(v) for v in rest[2]]
        return pd.DataFrame({c: v for c, v in zip(columns, values)}, index=index)[columns]
    if tag == "series":
        import pandas as pd

        return pd.Series(decode(rest[1]), index=decode(rest[0]), name=decode(rest[2]))
    if tag == "object":
        return _rebuild(str(rest[0]), {str(k): decode(v) for k, v in rest[1]})
    raise ValueError(f"unknown tag {tag!r}")


def _key(k: Any) -> Any:
    return tuple(_key(v) for v in k) if isinstance(k, (list, tuple)) else k


def _rebuild(name: str, state: dict[str, Any]) -> Any:
    """An instance of calib's class ``module:qualname`` with ``state`` as its fields."""
    module, _, qualname = name.partition(":")
    if module.split(".")[0] != "calib" or not qualname.isidentifier():
        raise ValueError(f"not a calib class: {name}")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not isinstance(cls, type):
        raise ValueError(f"not a calib class: {name}")
    obj = object.__new__(cls)
    for key, val in state.items():
        object.__setattr__(obj, key, val)
    return obj


def export(namespace: dict, names: list[str], path: str) -> None:
    """Write ``names`` of ``namespace`` (those it holds and :func:`encode` carries) to ``path``."""
    import torch

    values, skipped = {}, {}
    for name in names:
        if name not in namespace:
            continue
        try:
            values[name] = encode(namespace[name])
        except (Unexportable, TypeError, ValueError) as exc:
            skipped[name] = str(exc) or type(exc).__name__
    torch.save({"values": values, "skipped": skipped}, path)


def load(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """What :func:`export` wrote: (values, name -> why it was not exported)."""
    import torch

    raw = torch.load(path, weights_only=True)
    if not isinstance(raw, dict):
        raise ValueError("the export is not a dict")
    values = {}
    for name, data in dict(raw.get("values", {})).items():
        try:
            values[str(name)] = decode(data)
        except (ValueError, TypeError) as exc:
            raw.setdefault("skipped", {})[name] = f"unreadable ({exc})"
    skipped = {str(k): str(v) for k, v in dict(raw.get("skipped", {})).items()}
    return values, skipped
