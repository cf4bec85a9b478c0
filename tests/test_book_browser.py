"""The built book, as a reader sees it: every chapter page in headless Chromium.

Needs `make book` first (the Makefile's `test-browser` target builds it). Each chapter
page must load, show no error output or traceback, have its equations typeset by the
locally served MathJax (no raw TeX delimiters left, no MathJax from the network) and
its figures present.
"""
from __future__ import annotations

import functools
import html
import http.server
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.browser


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _pages() -> list[pathlib.Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")) + [ROOT / "book" / "intro.md"]


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make book` first")
    if _chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("headless Chromium is required under CI (tools/ensure_chromium.sh installs it)")
        pytest.skip("headless Chromium not available (apt-get install chromium): browser check SKIPPED")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def render(url: str) -> str:
    """The DOM after scripts ran (MathJax included), from headless Chromium."""
    with tempfile.TemporaryDirectory() as profile_dir:
        cmd = [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile_dir}", "--virtual-time-budget=20000",
            "--dump-dom", url,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def visible_text(dom: str) -> str:
    dom = re.sub(r"(?s)<(script|style|mjx-assistive-mml)\b.*?</\1>", " ", dom)
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


@pytest.mark.parametrize("source", _pages(), ids=lambda p: p.name)
def test_chapter_page_renders(server, source):
    rel = source.relative_to(ROOT).with_suffix(".html")
    page = HTML / rel
    assert page.exists(), f"{rel} was not built"
    raw = page.read_text()
    dom = render(f"{server}/{rel.as_posix()}")
    text = visible_text(dom)

    # Loaded, with a title.
    assert "<h1" in dom, f"{rel}: no heading; the page did not load"
    # No error output from execution.
    for marker in ("Traceback (most recent call last)", "output error", "output traceback"):
        assert marker not in dom, f"{rel}: error output on the page ({marker!r})"
    for err in ("Error:", "Exception:"):
        assert not re.search(rf"\b\w+{err}", visible_text(raw)), f"{rel}: an exception is printed"
    # MathJax is served by the build, never from the network.
    for src in re.findall(r'<script[^>]+src="([^"]+)"', raw):
        if "mathjax" in src.lower():
            assert not src.startswith(("http:", "https:", "//")), f"{rel}: MathJax from the network: {src}"
    # Equations typeset: MathJax containers present, no raw TeX delimiters left.
    has_math = "\\(" in raw or "\\[" in raw or 'class="math' in raw
    if has_math:
        assert "<mjx-container" in dom, f"{rel}: equations were not typeset by MathJax"
        for delim in ("\\(", "\\)", "\\[", "\\]", "$$"):
            assert delim not in text, f"{rel}: raw TeX {delim!r} left on the page"
    # Figures present and served.
    if source.suffix == ".ipynb":
        nb = source.read_text()
        if "calib.plots" in nb or "plots." in nb:
            imgs = re.findall(r'<img[^>]+src="([^"]+\.(?:png|svg|jpg))"', raw)
            assert imgs, f"{rel}: no figure on the page"
            for src in imgs:
                assert (page.parent / src).resolve().exists(), f"{rel}: figure {src} missing"
