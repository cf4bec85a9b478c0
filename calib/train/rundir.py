"""Run directories: who owns one, and one process at a time in it.

A run directory (``train --out DIR``, or one cell of a sweep) holds ``config.json``,
``history.jsonl``, ``checkpoint.pt``, ``logits.pt`` and ``metrics.json`` of exactly one
configuration. Two rules keep results from being lost or mixed:

* **ownership** (:func:`check_owner`): a directory is written only when it is new or
  empty, or holds this configuration's own run. Another configuration's run, or files
  that are not a calib run at all, are refused and nothing is touched; a finished run
  is retrained only with ``overwrite=True``; ``resume=True`` needs the directory to exist.
* **a lock** (:func:`lock`): while a process works in ``DIR`` it holds an exclusive
  ``fcntl.flock`` on ``DIR/.calib.lock``, which records its PID and host. A second
  process fails at once with :class:`RunDirError` naming the holder. The kernel drops
  the lock when its process dies, so the lock of a killed run (SIGKILL, power loss) is
  stale and simply taken over; where ``flock`` is unavailable, a lock file whose PID no
  longer runs on this host counts as stale.

The CLI turns :class:`RunDirError` into one line on stderr and exit code 2.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

__all__ = ["RunDirError", "LOCK_FILE", "RUN_FILES", "check_out", "check_owner", "lock", "clear_run", "read_json"]

#: The lock file inside a run directory (hidden, never part of the results).
LOCK_FILE = ".calib.lock"
#: Files a calib run writes; ``overwrite`` removes exactly these (and their temp files).
RUN_FILES = ("config.json", "history.jsonl", "checkpoint.pt", "logits.pt", "metrics.json")


class RunDirError(Exception):
    """A run directory cannot be used: missing, foreign, another run's, locked or unwritable."""


def check_out(out: str | os.PathLike | None) -> Path:
    """``out`` as a Path, refusing an empty name and a location that cannot be a directory."""
    text = "" if out is None else str(out)
    if not text.strip():
        raise RunDirError(f"--out must name a run directory, got {'a blank' if text else 'an empty'} name ({text!r})")
    path = Path(out)
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                what = "is a file" if parent == path else f"lies under {parent}, which is a file"
                raise RunDirError(f"--out {path} {what}, not a directory")
            break
    return path


def read_json(path: Path) -> Any:
    """The JSON content of ``path``; a truncated or corrupt file is a :class:`RunDirError` naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path} is corrupt or unreadable ({type(exc).__name__}: {exc}); "
                          "restore it, or delete the run directory to start afresh") from None


def _entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE)


def check_owner(
    path: str | os.PathLike,
    identity: Mapping[str, Any],
    *,
    identity_of: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    resume: bool = False,
    overwrite: bool = False,
) -> str:
    """Decide what a run may do with ``path``; return ``"new"``, ``"resume"`` or ``"overwrite"``.

    ``identity`` is what this run computes (the config without runtime fields such as the
    device) and ``identity_of(d)`` the same for a saved ``config.json`` dict. Raises
    :class:`RunDirError`, touching nothing, when

    * ``resume`` is asked for a directory that does not exist;
    * the directory is not empty and holds no ``config.json`` (not a calib run);
    * its ``config.json`` is unreadable, or describes another configuration that left
      results (a run that stopped before its first checkpoint, e.g. one that diverged
      at once, left none and is replaced);
    * it holds this configuration's finished run (``metrics.json``) and neither
      ``resume`` nor ``overwrite`` is given, or its checkpoint and no ``resume``.
    """
    path = Path(path)
    if not path.exists():
        if resume:
            raise RunDirError(f"--resume: run directory {path} does not exist (nothing to resume); "
                              "drop --resume to start a new run there")
        return "new"
    if not path.is_dir():
        raise RunDirError(f"--out {path} is a file, not a directory")
    entries = _entries(path)
    if not entries:
        return "new"
    config = path / RUN_FILES[0]
    if not config.exists():
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise RunDirError(f"{path} is not empty and holds no calib run (found {shown}); "
                          "choose a new or empty --out")
    saved = read_json(config)
    try:
        theirs = dict(identity_of(saved))
    except (TypeError, ValueError, AttributeError) as exc:
        raise RunDirError(f"{config} does not hold a calib configuration ({exc})") from None
    mine = dict(identity)
    if diff := sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k)):
        if _no_results(path):  # it stopped before its first checkpoint (e.g. diverged)
            return "overwrite"
        detail = ", ".join(f"{k}: {theirs.get(k)!r} there vs {mine.get(k)!r} now" for k in diff[:4])
        raise RunDirError(f"{path} holds another run ({detail}); choose another --out "
                          "(--overwrite never replaces a different configuration)")
    if overwrite:
        return "overwrite"
    finished = (path / "metrics.json").exists()
    if resume:
        return "resume"
    if finished:
        raise RunDirError(f"{path} holds a finished run of this configuration; pass --overwrite to "
                          f"train it again, --resume to reload it, or 'python -m calib evaluate {path}' "
                          "to recompute its metrics")
    if (path / "checkpoint.pt").exists():
        raise RunDirError(f"{path} already holds a checkpoint of this run; pass --resume to continue it "
                          "(or --overwrite to start it again)")
    return "new"  # this run's config.json without a checkpoint: it stopped before its first epoch


def _no_results(path: Path) -> bool:
    """No checkpoint, logits or metrics, and no finished epoch in the history."""
    if any((path / name).exists() for name in RUN_FILES[2:]):
        return False
    history = path / RUN_FILES[1]
    return not history.exists() or not history.read_text().strip()


def clear_run(path: str | os.PathLike) -> None:
    """Remove the files of a calib run (and their temp files) from ``path``; nothing else."""
    path = Path(path)
    for name in RUN_FILES:
        for p in (path / name, path / f".{name}.tmp"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


# ----------------------------------------------------------------------------- the lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _holder(lock_path: Path) -> dict[str, Any]:
    try:
        info = json.loads(lock_path.read_text() or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(info: Mapping[str, Any]) -> str:
    if not info:
        return "another process"
    return (f"process {info.get('pid', '?')} on {info.get('host', '?')} "
            f"({info.get('what', 'run')}, since {info.get('since', '?')})")


def _stale(info: Mapping[str, Any]) -> bool:
    """A lock whose holder is gone: same host and the PID no longer runs (or no PID at all)."""
    pid = info.get("pid")
    if not isinstance(pid, int):
        return True
    return info.get("host") == socket.gethostname() and not _pid_alive(pid)


@contextlib.contextmanager
def lock(path: str | os.PathLike, *, what: str = "train") -> Iterator[Path]:
    """Hold the exclusive lock of run directory ``path`` (created if missing) for the block.

    Raises :class:`RunDirError` at once when another live process holds it, or when the
    directory cannot be created or written (under a file, read-only, in ``/proc``). The
    lock file records the holder's PID, host, ``what`` and start time, and is removed on
    release (after a crash it stays behind, unlocked, and the next run takes it over). A
    directory this call created and nobody wrote into is removed again on release.
    """
    path = check_out(path)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create run directory {path}: {exc.strerror or exc}") from None
    lock_path = path / LOCK_FILE
    fd = _open_locked(lock_path)
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield path
    finally:
        with contextlib.suppress(OSError):  # unlink while still holding it: leave no trace
            lock_path.unlink()
        if created:
            with contextlib.suppress(OSError):  # a directory nobody wrote into goes too
                path.rmdir()
        os.close(fd)  # closing drops the flock


def _open_locked(lock_path: Path) -> int:
    """Open and lock ``lock_path``; retried when the file was replaced while we waited on it."""
    for _ in range(5):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunDirError(f"cannot write in run directory {lock_path.parent}: {exc.strerror or exc}") from None
        try:
            _acquire(fd, lock_path)
            if os.fstat(fd).st_ino == os.stat(lock_path).st_ino:
                return fd
        except FileNotFoundError:
            pass  # its holder removed it on release: take a fresh one
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise RunDirError(f"cannot lock {lock_path}: it keeps being replaced by another process")


def _acquire(fd: int, lock_path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            raise RunDirError(f"{lock_path.parent} is in use by {_describe(_holder(lock_path))}; wait for it "
                              "to finish or use another --out") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise RunDirError(f"cannot lock {lock_path}: {exc.strerror or exc}") from None
    # no flock on this file system: trust the recorded PID and host
    info = _holder(lock_path)
    if info and not _stale(info) and info.get("pid") != os.getpid():
        raise RunDirError(f"{lock_path.parent} is in use by {_describe(info)}; wait for it to finish "
                          f"or use another --out (remove {lock_path} if that process is gone)")
