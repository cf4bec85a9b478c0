"""``python -m calib``: the command line of :mod:`calib.cli`."""
import os
import signal
import sys


def _startup_interrupt(signum: int, frame: object) -> None:
    os._exit(130)  # Ctrl-C while torch is still importing: leave quietly with 130


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _startup_interrupt)
    from .cli import main

    code = main()
    if code == 130:
        # Interrupted, and main has reported it. A KeyboardInterrupt raised while C code ran
        # Python code (PyRun_*) leaves CPython's "unhandled" flag set even though main caught
        # it, and the interpreter would then kill itself with SIGINT at exit; leave with 130.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    raise SystemExit(code)
