"""``python -m calib``: the command line of :mod:`calib.cli`."""
import os
import signal


def _startup_interrupt(signum: int, frame: object) -> None:
    os._exit(130)  # Ctrl-C while torch is still importing: leave quietly with 130


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _startup_interrupt)
    from .cli import main

    raise SystemExit(main())
