"""The built book, as a reader sees it: every chapter page in headless Chromium.

Needs `make book` first (the Makefile's `test-browser` target builds it). Each chapter
page must load, show no error output or traceback, have its equations typeset by the
locally served MathJax (no raw TeX delimiters left, no MathJax from the network) and
its figures present.

The reader's checks (issue "the book as a reader meets it"), on every page of the book:
laid out at 1280 px, no image is wider than the content column, every image has alt text
that says something (not a file name), every figure has a caption, no code or output
block scrolls sideways; the rendered text names no paper by a numeric label such as
"004 Fig. 1" or "000 §4.3"; and every internal link points at a page (and an anchor)
that exists. Layout is measured by a small script the test server appends to each page:
it writes its measurements into the DOM, which headless Chromium dumps.
"""
from __future__ import annotations

import functools
import html
import http.server
import json
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


def _all_pages() -> list[pathlib.Path]:
    """Every page of the table of contents, as its source file."""
    toc = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"(?:root|file):\s*(book/[\w/-]+)", toc)
    out = []
    for entry in entries:
        for ext in (".ipynb", ".md"):
            if (ROOT / f"{entry}{ext}").exists():
                out.append(ROOT / f"{entry}{ext}")
                break
    return out


# Appended to every HTML page the test server sends: measures the layout once the page
# (and MathJax) has settled and writes the result, as JSON, into <pre id="calib-layout">.
LAYOUT_PROBE = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const article = document.querySelector("article.bd-article") || document.body;
  const col = article.getBoundingClientRect();
  const visible = (el) => el.offsetParent !== null && el.getClientRects().length > 0;
  const images = [...article.querySelectorAll("img")].filter(visible).map((img) => {
    const r = img.getBoundingClientRect();
    const fig = img.closest("figure");
    return {src: img.getAttribute("src") || "", alt: img.getAttribute("alt"),
            left: r.left, right: r.right, width: r.width,
            natural: img.naturalWidth,
            figure: !!fig, caption: !!(fig && fig.querySelector("figcaption") &&
              fig.querySelector("figcaption").textContent.trim().length > 0)};
  });
  const blocks = [...article.querySelectorAll("pre, table, div.output, div.cell_output")]
    .filter(visible)
    .map((el) => {
      const r = el.getBoundingClientRect();
      const ox = getComputedStyle(el).overflowX;
      return {tag: el.tagName, text: el.textContent.trim().slice(0, 80),
              scroll: el.scrollWidth, client: el.clientWidth, right: r.right,
              scrolls: (ox === "auto" || ox === "scroll") &&
                       el.scrollWidth > el.clientWidth + 2};
    });
  const out = document.createElement("pre");
  out.id = "calib-layout";
  out.textContent = JSON.stringify({column: {left: col.left, right: col.right,
                                            width: col.width},
                                   images: images, blocks: blocks});
  document.body.appendChild(out);
}, 500));
</script>
"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files, with the layout probe appended to every HTML page."""

    def log_message(self, *args, **kwargs) -> None:
        pass

    def do_GET(self) -> None:
        path = self.translate_path(self.path.split("?", 1)[0].split("#", 1)[0])
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not path.endswith(".html") or not os.path.exists(path):
            return super().do_GET()
        body = pathlib.Path(path).read_bytes().replace(b"</body>", LAYOUT_PROBE.encode() + b"</body>")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make book` first")
    if _chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("headless Chromium is required under CI (tools/ensure_chromium.sh installs it)")
        pytest.skip("headless Chromium not available (apt-get install chromium): browser check SKIPPED")
    handler = functools.partial(_Handler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def render(url: str, width: int = 1280, screenshot: pathlib.Path | None = None) -> str:
    """The DOM after scripts ran (MathJax included), from headless Chromium at ``width`` px.

    With ``screenshot``, a PNG of the first screen is written there instead (and the
    DOM is not returned): a person can look at what the test measured.
    """
    with tempfile.TemporaryDirectory() as profile_dir:
        cmd = [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile_dir}", "--virtual-time-budget=20000",
            "--hide-scrollbars", f"--window-size={width},900",
            f"--screenshot={screenshot}" if screenshot else "--dump-dom", url,
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


# ----------------------------------------------------------------------------------------
# The reader's checks: every page of the book.

# A paper named by its file number: "004 Fig. 1a", "000 §4.3", "paper 001", "(003, Table 2)":
# a standalone 000-004 anywhere a reader reads (0.001, 10,000 or 2004 do not match).
NUMERIC_LABEL = re.compile(r"(?<![\w.,:/\-])00[0-4](?![\w%]|[.,:/\-]\d)")
ALT_FILE_NAME = re.compile(r"^[\w./-]+\.(?:png|svg|jpe?g|gif)$|^[0-9a-f]{16,}$", re.IGNORECASE)


def _page_html(source: pathlib.Path) -> pathlib.Path:
    rel = source.relative_to(ROOT)
    if rel.as_posix() == "book/intro.md":  # the root page is also served as index.html
        return HTML / "book" / "intro.html"
    return HTML / rel.with_suffix(".html")


def _prose_text(raw: str) -> str:
    """Visible text without code, output, math or navigation: the words a reader reads."""
    article = raw.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0]
    article = re.sub(r"(?s)<(script|style|pre|code|math|mjx-container)\b.*?</\1>", " ", article)
    article = re.sub(r'(?s)<span class="math[^"]*">.*?</span>', " ", article)
    article = re.sub(r'(?s)<div class="math[^"]*">.*?</div>', " ", article)
    return html.unescape(re.sub(r"<[^>]+>", " ", article))


@pytest.mark.parametrize("source", _all_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_names_papers_by_author_not_number(source):
    page = _page_html(source)
    assert page.exists(), f"{page.relative_to(HTML)} was not built"
    raw = page.read_text()
    visible = visible_text(raw.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0])
    hits = sorted({m.group(0) for m in NUMERIC_LABEL.finditer(visible)})
    assert not hits, f"{page.relative_to(HTML)}: numeric paper labels a reader cannot decode: {hits}"
    for phrase in ("seed collection", "seed paper", "source paper"):
        assert phrase not in _prose_text(raw).lower(), f"{page.relative_to(HTML)}: says {phrase!r}"


@pytest.mark.parametrize("source", _all_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_internal_links_resolve(source):
    page = _page_html(source)
    assert page.exists(), f"{page.relative_to(HTML)} was not built"
    raw = page.read_text()
    ids_cache: dict[pathlib.Path, set[str]] = {}
    broken = []
    for href in set(re.findall(r'<a\b[^>]*\bhref="([^"]*)"', raw)):
        href = html.unescape(href)
        if re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", href, re.IGNORECASE) or not href:
            continue  # http(s), mailto, javascript: not ours to check offline
        target, _, frag = href.partition("#")
        dest = (page.parent / target).resolve() if target else page
        if dest.is_dir():
            dest = dest / "index.html"
        if not dest.exists():
            broken.append(href)
            continue
        if frag and dest.suffix == ".html":
            if dest not in ids_cache:
                ids_cache[dest] = set(re.findall(r'\bid="([^"]+)"', dest.read_text()))
            if frag not in ids_cache[dest]:
                broken.append(href)
    assert not broken, f"{page.relative_to(HTML)}: links to nothing: {sorted(broken)}"


# Input cells wrap (book/_static/calib.css); every other code or output block is shown
# as it is, so its lines must fit: 88 characters (CONTRIBUTING.md, "Chapters").
CELL_INPUT = re.compile(r'(?s)<div class="cell_input docutils container">\s*'
                        r'<div class="highlight-[\w-]+ notranslate"><div class="highlight">'
                        r'<pre>.*?</pre>')


def _verbatim_lines(raw: str) -> list[str]:
    """Lines of the page's output, code-block and docstring blocks (not input cells)."""
    article = raw.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0]
    lines = []
    for block in re.findall(r"(?s)<pre\b[^>]*>(.*?)</pre>", CELL_INPUT.sub(" ", article)):
        lines += html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines()
    return lines


def test_verbatim_lines_skip_input_cells():
    page = ('<article class="bd-article"><div class="cell_input docutils container">\n'
            '<div class="highlight-ipython3 notranslate"><div class="highlight"><pre>'
            '<span>x = 1</span></pre></div></div><div class="output"><pre>a &lt; b\nc'
            "</pre></div></article>")
    assert _verbatim_lines(page) == ["a < b", "c"]


@pytest.mark.parametrize("source", _all_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_output_and_code_lines_fit_88_columns(source):
    page = _page_html(source)
    assert page.exists(), f"{page.relative_to(HTML)} was not built"
    long = [line for line in _verbatim_lines(page.read_text()) if len(line.rstrip()) > 88]
    assert not long, (f"{page.relative_to(HTML)}: {len(long)} output or code lines over 88 "
                      f"characters, e.g. {long[0][:100]!r}")


@pytest.mark.parametrize("source", _all_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_layout_reads_at_1280px(server, source):
    page = _page_html(source)
    assert page.exists(), f"{page.relative_to(HTML)} was not built"
    dom = render(f"{server}/{page.relative_to(HTML).as_posix()}", width=1280)
    # The theme gives every <pre> a tabindex (0 where it scrolls, as this one-line JSON
    # does) a moment after the DOM changes, so the dumped tag may carry one: match any.
    found = re.search(r'<pre id="calib-layout"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, f"{page.relative_to(HTML)}: the layout probe did not run"
    layout = json.loads(html.unescape(found.group(1)))
    col = layout["column"]
    name = page.relative_to(HTML)
    problems = []
    for img in layout["images"]:
        src = img["src"].rsplit("/", 1)[-1]
        if img["right"] > col["right"] + 1 or img["left"] < col["left"] - 1:
            problems.append(f"image {src} sticks out of the content column")
        if img["natural"] > col["width"] + 1:
            problems.append(f"image {src} is {img['natural']} px wide, shrunk into a "
                            f"{col['width']:.0f} px column (figures at most 7 in)")
        alt = (img["alt"] or "").strip()
        if not alt or ALT_FILE_NAME.match(alt) or alt.lower() in ("image", "figure", "png", "svg"):
            problems.append(f"image {src} has no alt text that says what it shows ({alt!r})")
        if not (img["figure"] and img["caption"]):
            problems.append(f"image {src} has no numbered caption (use glue + {{glue:figure}})")
    for block in layout["blocks"]:
        if block["scrolls"]:
            problems.append(f"{block['tag'].lower()} scrolls sideways "
                            f"({block['scroll']} > {block['client']} px): {block['text']!r}")
        elif block["right"] > col["right"] + 2:
            problems.append(f"{block['tag'].lower()} sticks out of the column: {block['text']!r}")
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)
