"""Optional dependencies: which extra of the distribution brings each one.

``pip install torch-calib`` installs torch, numpy and tqdm, which is all that
:mod:`calib.losses`, :mod:`calib.metrics`, :mod:`calib.models` and the trainer's core need.
The other subpackages name their extra when a dependency is missing, in one line::

    calib.posthoc needs scipy, scikit-learn: pip install "torch-calib[posthoc]"
"""
from __future__ import annotations

import importlib.util

__all__ = ["DISTRIBUTION", "EXTRAS", "need"]

DISTRIBUTION = "torch-calib"
# The extras of pyproject.toml and the import names each one provides
# (tests/test_packaging.py checks the two agree).
EXTRAS: dict[str, dict[str, str]] = {
    "posthoc": {"scipy": "scipy", "sklearn": "scikit-learn", "threadpoolctl": "threadpoolctl"},
    "plots": {"matplotlib": "matplotlib", "scipy": "scipy", "seaborn": "seaborn", "pandas": "pandas"},
    "vision": {"torchvision": "torchvision", "PIL": "pillow", "scipy": "scipy"},
    "theory": {"sympy": "sympy", "scipy": "scipy"},
    "tables": {"pandas": "pandas", "scipy": "scipy", "sklearn": "scikit-learn"},
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install (sys.modules[name] = None)
        return False


def need(extra: str, by: str, *modules: str) -> None:
    """Raise one-line ``ModuleNotFoundError`` naming ``extra`` if a module is missing.

    ``modules`` are import names from ``EXTRAS[extra]`` (all of them when omitted);
    ``by`` is what needs them, for the message.
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {sorted(EXTRAS)}, got {extra!r}")
    wanted = modules or tuple(EXTRAS[extra])
    missing = [EXTRAS[extra].get(m, m) for m in wanted if not _importable(m)]
    if missing:
        raise ModuleNotFoundError(
            f'{by} needs {", ".join(missing)}: pip install "{DISTRIBUTION}[{extra}]"', name=missing[0])
