"""The built book's Colab launch links: each chapter opens its own notebook in the configured repository.

Needs `make book` first (the `browser` marker: `make test` runs these after the build).
The launch button of chapter ``book/NN_x.ipynb`` must point at
``{colab_url}/github/{owner}/{repo}/blob/{branch}/{path_to_book}book/NN_x.ipynb`` with
owner, repo and branch from ``repository`` in ``_config.yml``, and the page's setup cell
must install calib from that same repository and branch.
"""
from __future__ import annotations

import html
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.browser
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def config() -> dict:
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make book` first")
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def expected_link(config: dict, notebook: pathlib.Path) -> str:
    repo = config["repository"]
    owner, name = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", repo["url"]).groups()
    prefix = (repo.get("path_to_book") or "").strip("/")
    path = "/".join(p for p in (prefix, notebook.relative_to(ROOT).as_posix()) if p)
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    return f"{colab}/github/{owner}/{name}/blob/{repo.get('branch', 'main')}/{path}"


def colab_links(page: str, colab_url: str) -> set[str]:
    hrefs = {html.unescape(h) for h in re.findall(r'href="([^"]+)"', page)}
    return {h for h in hrefs if h.startswith(colab_url.rstrip("/"))}


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_colab_link_opens_this_chapter(config, notebook):
    page_path = HTML / notebook.relative_to(ROOT).with_suffix(".html")
    assert page_path.is_file(), f"{page_path} was not built"
    page = page_path.read_text()
    want = expected_link(config, notebook)
    assert colab_links(page, config["launch_buttons"]["colab_url"]) == {want}
    assert (ROOT / notebook.relative_to(ROOT)).is_file()


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_setup_cell_installs_from_the_same_repository_and_branch(config, notebook):
    page = html.unescape(re.sub(r"<[^>]+>", "", (HTML / notebook.relative_to(ROOT).with_suffix(".html")).read_text()))
    repo = config["repository"]
    assert f"git+{repo['url']}@{repo.get('branch', 'main')}" in page


def test_expected_link_format():
    cfg = {"repository": {"url": "https://github.com/me/fork", "branch": "dev", "path_to_book": ""},
           "launch_buttons": {"colab_url": "https://colab.research.google.com"}}
    nb = ROOT / "book" / "02_overconfidence.ipynb"
    assert expected_link(cfg, nb) == ("https://colab.research.google.com/github/me/fork/blob/dev/"
                                      "book/02_overconfidence.ipynb")


PAGES_WITH_GLUE = sorted(p for p in (ROOT / "book").glob("*.ipynb") if "{glue:" in p.read_text())


@pytest.mark.parametrize("notebook", PAGES_WITH_GLUE, ids=lambda p: p.stem)
def test_glued_values_render_as_text_not_quoted_strings(config, notebook):
    """A str glued into prose with {glue:} shows as its repr ('5.1', quotes included);
    chapters glue Markdown(text) and paste it with {glue:md}."""
    page = (HTML / notebook.relative_to(ROOT).with_suffix(".html")).read_text()
    pasted = re.findall(r'<span class="pasted-text">(.*?)</span>', page, re.S)
    quoted = [t for t in pasted if re.fullmatch(r"\s*(&#x27;|'|&quot;|\").*(&#x27;|'|&quot;|\")\s*", t)]
    assert not quoted, f"{notebook.name}: glued values shown as quoted strings: {quoted[:5]}"
