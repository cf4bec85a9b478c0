"""``python -m calib``: the command line of :mod:`calib.cli`."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
