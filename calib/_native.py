"""The optional compiled kernels of :mod:`calib.metrics` (``_native.c``), built on first use.

The metrics need, for every row of an ``(N, K)`` probability matrix, its maximum, its
first argmax, its sum and its minimum. PyTorch computes each with its own op, and the
row maximum of narrow rows alone is compute-bound (about 12 ns a row for K = 10 on one
core). ``_native.c`` computes all four from one load of each row into AVX2 registers
(:mod:`calib._scan`), and the per-bin sums of ECE and classwise ECE in one pass each.

It is compiled the first time a metric runs on CPU, with the C compiler already on the
machine (``$CC``, else ``cc``, ``gcc`` or ``clang``) and ``-O3 -march=native -fopenmp``
(linked to ``libgomp.so.1``, which resolves to the copy PyTorch has loaded, so the kernels
run in PyTorch's OpenMP team instead of competing with its spinning threads), into a
cache folder (``$CALIB_CACHE``, else ``~/.cache/calib``): about half a second, once per
machine. The library file's name carries a hash of the source, the compiler, its flags
and the CPU, so an edit or another machine sharing the home folder builds its own; it is
written under a temporary name and renamed into place, so parallel processes (pytest
workers) never load half a file.

Nothing depends on it: without a compiler, on a CPU without AVX2, or with
``CALIB_NATIVE=0``, :func:`kernel` returns None and the metrics use the PyTorch ops
that define the same results (the tests compare the two on every input
class). :func:`status` says which is in use and why.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
import threading
from typing import Iterator

import torch

SOURCE = pathlib.Path(__file__).with_name("_native.c")
ENV_SWITCH = "CALIB_NATIVE"
ENV_CACHE = "CALIB_CACHE"
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=c99")
# OpenMP when the compiler has it (the kernel then shares PyTorch's libgomp.so.1); else serial.
OPENMP = (("-fopenmp",), ())
_COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None
_reason = "not built yet (built on first use)"
_tried = False
_off = 0  # depth of active off() blocks


def kernel() -> ctypes.CDLL | None:
    """The compiled kernel, built and loaded on first call; None when unavailable or off."""
    if _off or not _enabled():
        return None
    global _loaded, _reason, _tried
    if not _tried:
        with _lock:
            if not _tried:
                _loaded, _reason = _load()
                _tried = True
    return _loaded


def status() -> str:
    """One line: whether the compiled kernel is in use, and why not if it is not."""
    if not _enabled():
        return f"compiled kernel off (${ENV_SWITCH}=0): PyTorch ops"
    kernel()
    if _loaded is not None:
        return f"compiled kernel in use ({_reason})"
    return f"compiled kernel unavailable ({_reason}): PyTorch ops"


@contextlib.contextmanager
def off() -> Iterator[None]:
    """Use the PyTorch ops inside this block (the tests compare both paths with it)."""
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1


def scan_fn(dtype: torch.dtype):
    """The kernel's entry point for ``dtype`` (float32 or float64); None for other dtypes
    or when the kernel is unavailable or off.

    ``fn(p, y, n, k, tie_free, conf, correct, p_true, stats, threads)`` takes data
    pointers (``p_true`` may be None) and the number of OpenMP threads (see
    :func:`threads`). ``stats`` receives ``[min entry, min row sum, max row sum, max
    entry]``, all NaN when a row sum is NaN. ``y`` must already lie in ``[0, k)``.
    """
    return _entry("calib_scan", dtype)


def above_fn(dtype: torch.dtype):
    """``fn(x, n, threshold, inclusive, idx, val) -> count``: the positions and values of
    the entries of ``x[0:n]`` above ``threshold`` (or at it, when ``inclusive``), in order;
    None for other dtypes or without the kernel."""
    return _entry("calib_above", dtype)


def bin_sums_fn(dtype: torch.dtype):
    """``fn(conf, correct, n, edges, m, left, sums, threads) -> 0 or -1``: per bin of the
    float64 ``edges[0..m]`` (bucketize semantics; ``[lo, hi)`` bins when ``left``) the
    count, hits and confidence sum into ``sums[0:3m]``; -1 when out of memory. None for
    other dtypes or without the kernel."""
    return _entry("calib_bin_sums", dtype)


def classwise_fn(dtype: torch.dtype):
    """``fn(p, y, n, k, edges, m, left, col, psum, hits, threads) -> 0 or -1``: classwise
    ECE's column sums (float64, k), per-cell sums of the entries above ``edges[1]``
    (float64, k m) and label counts (int64, k m), added to the zeroed outputs; -1 when
    out of memory. None for other dtypes or without the kernel."""
    return _entry("calib_classwise", dtype)


def _entry(name: str, dtype: torch.dtype):
    lib = kernel()
    suffix = {torch.float32: "f32", torch.float64: "f64"}.get(dtype)
    return None if lib is None or suffix is None else getattr(lib, f"{name}_{suffix}")


def threads(entries: int) -> int:
    """OpenMP threads for a call over ``entries`` values: PyTorch's intra-op count, one for
    small inputs (a parallel region costs microseconds) and in a forked child (libgomp's
    team does not survive ``fork``)."""
    if _forked or entries < _PARALLEL_MIN:
        return 1
    return torch.get_num_threads()


_PARALLEL_MIN = 1 << 16
_forked = False


def _after_fork() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def _enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def _load() -> tuple[ctypes.CDLL | None, str]:
    """``(library, its path)`` or ``(None, why not)``."""
    try:
        path = _build()
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError, _Unavailable) as exc:
        return None, (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if lib.calib_native_abi() != 1:
        return None, "this CPU or compiler has no AVX2"
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    for suffix in ("f32", "f64"):
        scan = getattr(lib, f"calib_scan_{suffix}")
        scan.restype = None
        scan.argtypes = [ptr, ptr, i64, i64, ctypes.c_double, ptr, ptr, ptr, ptr, ctypes.c_int]
        above = getattr(lib, f"calib_above_{suffix}")
        above.restype = i64
        above.argtypes = [ptr, i64, ctypes.c_double, ctypes.c_int, ptr, ptr]
        sums = getattr(lib, f"calib_bin_sums_{suffix}")
        sums.restype = ctypes.c_int
        sums.argtypes = [ptr, ptr, i64, ptr, i64, ctypes.c_int, ptr, ctypes.c_int]
        classwise = getattr(lib, f"calib_classwise_{suffix}")
        classwise.restype = ctypes.c_int
        classwise.argtypes = [ptr, ptr, i64, i64, ptr, i64, ctypes.c_int, ptr, ptr, ptr, ctypes.c_int]
    return lib, str(path)


class _Unavailable(Exception):
    """No compiler, or it failed: the message says which."""


def _build() -> pathlib.Path:
    """The compiled library in the cache folder, compiling it if it is not there yet."""
    cc = _compiler()
    source = SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, timeout=30).stdout
    key = hashlib.sha256(b"\0".join([source, version, " ".join(FLAGS).encode(), _cpu_id()])).hexdigest()[:16]
    target = _cache_dir() / f"calib_native_{key}{_suffix()}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        errors = [_compile(cc, extra, target) for extra in OPENMP]
        if not target.exists():
            raise _Unavailable(f"{cc} failed: {errors[-1]}")
    return target


def _compile(cc: str, extra: tuple[str, ...], target: pathlib.Path) -> str:
    """Compile into ``target`` unless it exists; '' on success, else the compiler's first error."""
    if target.exists():
        return ""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-", suffix=_suffix())
    os.close(fd)
    try:
        done = subprocess.run([cc, *FLAGS, *extra, str(SOURCE), "-o", tmp, "-lm"], capture_output=True,
                              text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).splitlines()
            return next((ln for ln in lines if "error" in ln), lines[0] if lines else "").strip()
        os.replace(tmp, target)  # atomic: another process sees no file or a whole one
        return ""
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _compiler() -> str:
    for cc in (os.environ.get("CC", "").strip(), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    raise _Unavailable("no C compiler found ($CC, cc, gcc, clang)")


def _cache_dir() -> pathlib.Path:
    env = os.environ.get(ENV_CACHE, "").strip()
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "calib"


def _suffix() -> str:
    return ".dll" if os.name == "nt" else ".so"


def _cpu_id() -> bytes:
    """What ``-march=native`` depends on: the CPU's model and feature flags."""
    info = pathlib.Path("/proc/cpuinfo")
    if info.exists():
        lines = info.read_text(errors="replace").splitlines()
        keep = [ln for ln in lines if ln.startswith(("model name", "flags", "Features"))][:2]
        return "\n".join(keep).encode()
    return f"{platform.machine()} {platform.processor()}".encode()
