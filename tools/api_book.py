"""Write the configuration of the API reference alone (``make api``): seconds, no chapter runs.

The API pages (``book/api/*.md``) are autodoc over calib's docstrings; building them
with the whole book executes every chapter first. This writes ``_config.yml`` and
``_toc.yml`` for a book of the API pages only (execution off) into ``OUT``, so that
``jupyter-book build . --config OUT/_config.yml --toc OUT/_toc.yml`` checks the
docstrings under ``-W`` in seconds.
"""
from __future__ import annotations

import argparse
import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def api_pages(toc: dict) -> list[str]:
    """The files of the book's API part: its index and the pages under it."""
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            if chapter["file"] == "book/api/index":
                return [chapter["file"]] + [s["file"] for s in chapter.get("sections", [])]
    raise ValueError("_toc.yml has no book/api/index chapter")


def write(out: pathlib.Path) -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"] = {"execute_notebooks": "off"}
    config["title"] = config["title"] + " (API reference)"
    config.pop("bibtex_bibfiles", None)  # the API pages cite no bibliography entry
    config["sphinx"].pop("local_extensions", None)
    sphinx = config["sphinx"]["config"]
    sphinx.pop("bibtex_reference_style", None)
    sphinx.pop("bibtex_default_style", None)
    # links from the API pages to chapters resolve in the whole book (make book, -W), not here
    sphinx["suppress_warnings"] = [*sphinx.get("suppress_warnings", []), "ref.doc"]
    index, *pages = api_pages(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    toc = {"format": "jb-book", "root": index, "chapters": [{"file": p} for p in pages]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (out / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    write(parser.parse_args().out)
