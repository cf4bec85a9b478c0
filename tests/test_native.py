"""The compiled kernels (calib/_native.c) against the PyTorch ops that define them.

Every result of the fused pass (top-label confidence, argmax-first correctness, the
validation verdict and its message, per-chunk results) must be the same whichever
path computes it; and the kernel's absence (no compiler, a failed build, the switch
off) must only ever mean the PyTorch ops.
"""
from __future__ import annotations

import multiprocessing as mp

import numpy as np

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import calib._native as N
import calib._scan as S
from calib import metrics as M

needs_kernel = pytest.mark.skipif(N.kernel() is None, reason=f"no compiled kernel here: {N.status()}")


def both(fn):
    """``fn()`` with the kernel, then with the PyTorch ops."""
    fast = fn()
    with N.off():
        slow = fn()
    return fast, slow


def _outcome(fn):
    """The result of ``fn()``, or the type and message of what it raised."""
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        return type(exc), str(exc)


def _data(n: int, k: int, kind: str, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "softmax":
        p = torch.softmax(3 * torch.randn(n, k, generator=g, dtype=torch.float64), 1)
    elif kind == "ties":  # small counts: many rows with two or more equal maxima
        c = torch.randint(0, 3, (n, k), generator=g).double()
        c[c.sum(1) == 0, 0] = 1.0
        p = c / c.sum(1, keepdim=True)
    elif kind == "uniform":  # every entry tied: argmax is column 0
        p = torch.full((n, k), 1.0 / k, dtype=torch.float64)
    else:  # one-hot rows
        p = torch.nn.functional.one_hot(torch.randint(0, k, (n,), generator=g), k).double()
    return p.to(dtype), torch.randint(0, k, (n,), generator=g)


KS = [2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 15, 16, 17, 24, 31, 33, 100]  # every k mod 8 and mod 4


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["softmax", "ties", "uniform", "onehot"])
@pytest.mark.parametrize("k", KS)
def test_kernel_equals_torch_ops(k, kind, dtype):
    p, y = _data(701, k, kind, dtype, seed=k)
    fast, slow = both(lambda: S.scan(p, y)[0])
    assert torch.equal(fast.conf, slow.conf)
    assert torch.equal(fast.correct, slow.correct)
    assert torch.equal(fast.correct, p.argmax(1).eq(y))  # argmax-first, as torch.argmax


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("k", [3, 10, 17])
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "negative", "row sum", "logits", "nan-and-inf"])
@pytest.mark.parametrize("col", ["first", "last"])  # the last column sits in the masked tail
def test_kernel_gives_the_same_verdict_on_bad_input(k, bad, col, dtype):
    p, y = _data(300, k, "softmax", dtype)
    j = 0 if col == "first" else k - 1
    if bad == "nan":
        p[123, j] = float("nan")
    elif bad == "inf":
        p[299, j] = float("inf")
    elif bad == "-inf":
        p[0, j] = -float("inf")
    elif bad == "negative":
        p[7, j] = -0.01
    elif bad == "row sum":
        p[150, j] += 0.01
    elif bad == "logits":
        p = torch.log(p)
    else:
        p[5, j], p[6, j] = float("nan"), float("inf")
    fast, slow = both(lambda: _outcome(lambda: S.scan(p, y)))
    assert fast[0] is ValueError and fast == slow


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40), st.integers(2, 21), st.integers(1, 4), st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
)
def test_kernel_matches_argmax_on_quantised_rows(n, k, levels, dtype, seed):
    """Rows of small integer counts (ties everywhere) and any labels."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(0, levels + 1, (n, k), generator=g).double()
    c[c.sum(1) == 0, -1] = 1.0
    p = (c / c.sum(1, keepdim=True)).to(dtype)
    y = torch.randint(0, k, (n,), generator=g)
    checked = S.scan(p, y)[0]
    assert torch.equal(checked.conf, p.amax(1))
    assert torch.equal(checked.correct, p.argmax(1).eq(y))


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_kernel_threads_do_not_change_results(threads, monkeypatch):
    p, y = _data(100_003, 10, "ties", torch.float32)  # rows not divisible by the threads
    want = S.scan(p, y)[0]
    monkeypatch.setattr(N, "threads", lambda entries: threads)
    got = S.scan(p, y)[0]
    assert torch.equal(got.conf, want.conf) and torch.equal(got.correct, want.correct)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["softmax", "ties"])  # "ties": entries exactly on bin edges
@pytest.mark.parametrize("closed", ["right", "left"])
@pytest.mark.parametrize("k", [4, 10, 37])
def test_per_chunk_results_are_the_same_with_the_kernel(k, closed, kind, dtype, monkeypatch):
    monkeypatch.setattr(S, "CHUNK", 1000)  # many chunks
    p, y = _data(5000, k, kind, dtype, seed=k)
    for n_bins in (1, 2, 4, 15):
        fast, slow = both(lambda: M.classwise_ece(p, y, n_bins, closed=closed))
        assert fast == pytest.approx(_classwise_reference(p, y, n_bins, closed), abs=1e-12)
        assert slow == pytest.approx(fast, abs=1e-8)  # float32 block sums in the PyTorch ops
    fast, slow = both(lambda: M.summary(p, y))
    # the PyTorch ops sum ECE's gaps pi_i - c_i in float32 over blocks of 4096 (_binned_sum),
    # within ~1e-6 of the float64 sums of the kernel (tested against float64 below)
    assert fast.pop("ece") == pytest.approx(slow.pop("ece"), abs=2e-6)
    assert fast == pytest.approx(slow, abs=1e-8)


@needs_kernel
@pytest.mark.parametrize("k", [3, 10, 37])
def test_scan_per_chunk_sees_the_same_rows_with_the_kernel(k, monkeypatch):
    """scan(per_chunk=...) hands each chunk's rows, top label and p[i, y_i] to the callback."""
    monkeypatch.setattr(S, "CHUNK", 997)  # many chunks, shared between worker threads
    p, y = _data(4000, k, "ties", torch.float64, seed=k)

    def rows(r: S.Rows) -> tuple:
        return r.p.clone(), r.conf.clone(), r.correct.clone(), r.p_true.clone()

    fast, slow = both(lambda: [torch.cat(t) for t in zip(*S.scan(p, y, per_chunk=rows)[1])])
    for a, b in zip(fast, slow):
        assert torch.equal(a, b)
    assert torch.equal(fast[0], p) and torch.equal(fast[3], p.gather(1, y[:, None]).squeeze(1))


def _classwise_reference(p: torch.Tensor, y: torch.Tensor, n_bins: int, closed: str) -> float:
    """Classwise ECE with torch.bucketize's bins in p's dtype and float64 sums."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=p.dtype)
    idx = torch.bucketize(p, edges[1:-1], right=closed == "left")
    total = 0.0
    for k in range(p.shape[1]):
        gap = y.eq(k).double() - p[:, k].double()
        total += float(torch.bincount(idx[:, k], weights=gap, minlength=n_bins).abs().sum())
    return total / p.numel()


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("closed", ["right", "left"])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 4, 15, 100, 1000])
@pytest.mark.parametrize("kind", ["softmax", "ties", "uniform", "onehot"])  # ties: on the edges
def test_kernel_bin_totals_equal_bucketize_and_float64_sums(kind, n_bins, closed, dtype):
    p, y = _data(3001, 6, kind, dtype, seed=n_bins)
    conf, correct = p.amax(1), p.argmax(1).eq(y)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    idx = torch.bucketize(conf, edges[1:-1], right=closed == "left")
    want = [torch.bincount(idx, weights=w, minlength=n_bins)
            for w in (torch.ones_like(conf).double(), correct.double(), conf.double())]
    got = M._native_totals(conf, correct, n_bins, closed)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.allclose(got[2], want[2], rtol=1e-13, atol=1e-12)
    assert M._ece_of(conf, correct, n_bins, closed) == pytest.approx(
        float((want[1] - want[2]).abs().sum()) / conf.numel(), abs=1e-13)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("closed", ["right", "left"])
@pytest.mark.parametrize("n_bins", [1, 3, 7, 15, 1000, 65536])
def test_kernel_bins_on_and_beside_every_edge(n_bins, closed, dtype):
    """Every edge and its two float neighbours land where torch.bucketize puts them."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    x = torch.cat([edges, torch.nextafter(edges, torch.tensor(2.0, dtype=dtype)),
                   torch.nextafter(edges, torch.tensor(-1.0, dtype=dtype))]).clamp(0, 1)
    want = torch.bincount(torch.bucketize(x, edges[1:-1], right=closed == "left"), minlength=n_bins).double()
    got = M._native_totals(x, torch.zeros_like(x, dtype=torch.bool), n_bins, closed)
    assert torch.equal(got[0], want)


def test_kernel_bin_totals_with_too_many_bins_are_left_to_bincount():
    conf, correct = torch.rand(100, dtype=torch.float64), torch.rand(100) > 0.5
    assert M._native_totals(conf, correct, M._NATIVE_MAX_BINS + 1, "right") is None
    assert M._ece_of(conf, correct, M._NATIVE_MAX_BINS + 1, "right") >= 0


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 1003])
def test_select_above_matches_numpy(n, inclusive, dtype):
    x = (torch.randint(0, 5, (n,), generator=torch.Generator().manual_seed(n)) / 4).to(dtype)  # many at 0.5
    a = x.numpy()
    want = np.flatnonzero(a >= 0.5 if inclusive else a > 0.5)
    for got in both(lambda: [t.clone() for t in S.select_above(x, 0.5, inclusive)]):
        values, where = got
        assert where.tolist() == want.tolist() and torch.equal(values, x[where])
    values, where = S.select_above(x.view(-1, 1).expand(n, 3).T, 0.5, inclusive)  # non-contiguous
    assert values.numel() == 3 * want.size


def test_switch_off_and_status(monkeypatch):
    monkeypatch.setenv(N.ENV_SWITCH, "0")
    assert N.kernel() is None and N.scan_fn(torch.float32) is None
    assert "off" in N.status()
    p, y = _data(50, 5, "softmax", torch.float32)
    assert M.ece(p, y) >= 0


def test_no_kernel_for_other_dtypes():
    assert N.scan_fn(torch.float16) is None and N.scan_fn(torch.int64) is None


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A module state that has not tried to build yet, with its cache in ``tmp_path``."""
    monkeypatch.setattr(N, "_tried", False)
    monkeypatch.setattr(N, "_loaded", None)
    monkeypatch.setattr(N, "_reason", "")
    monkeypatch.setenv(N.ENV_CACHE, str(tmp_path))
    monkeypatch.delenv(N.ENV_SWITCH, raising=False)
    return tmp_path


@needs_kernel
def test_build_goes_to_the_cache_once(fresh):
    assert N.kernel() is not None
    built = list(fresh.glob("calib_native_*"))
    assert len(built) == 1 and not list(fresh.glob(".build-*"))  # no temporary file left
    stamp = built[0].stat().st_mtime_ns
    N._tried = False
    assert N.kernel() is not None and built[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert str(built[0]) in N.status()


def test_no_compiler_means_torch_ops(fresh, monkeypatch):
    monkeypatch.setattr(N.shutil, "which", lambda name: None)
    assert N.kernel() is None
    assert "no C compiler" in N.status()
    p, y = _data(200, 6, "ties", torch.float32)
    assert M.accuracy(p, y) == pytest.approx(float(p.argmax(1).eq(y).double().mean()))


def test_a_failed_build_means_torch_ops(fresh, monkeypatch, tmp_path):
    if N.shutil.which("cc") is None and N.shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C;\n")
    monkeypatch.setattr(N, "SOURCE", broken)
    assert N.kernel() is None
    assert "failed" in N.status() and "error" in N.status()
    assert not list(fresh.glob("calib_native_*")) and not list(fresh.glob(".build-*"))


def test_unwritable_cache_means_torch_ops(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(N.ENV_CACHE, str(blocker / "cache"))  # a folder under a file
    assert N.kernel() is None and "unavailable" in N.status()


_FORK_DATA = _data(30_000, 10, "ties", torch.float32)


def _child_threads_and_result() -> tuple[int, bool]:
    torch.set_num_threads(1)  # as DataLoader workers do: PyTorch's own ops need it after fork
    p, y = _FORK_DATA
    return N.threads(10**9), bool(torch.equal(S.scan(p, y)[0].correct, p.argmax(1).eq(y)))


@needs_kernel
def test_forked_child_runs_the_kernel_on_one_thread():
    """libgomp's team does not survive fork(): a child calls the kernel single-threaded."""
    p, y = _data(200_000, 10, "softmax", torch.float32)
    S.scan(p, y)  # the parent has used the OpenMP team
    with mp.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_child_threads_and_result).get(timeout=60) == (1, True)
    assert N.threads(10**9) == torch.get_num_threads()

