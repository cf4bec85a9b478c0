"""One bibliography label per paper across the whole book (a Sphinx extension).

Every chapter ends with its own bibliography, and pybtex's alpha labels are made unique
only within one list. The two Mukhoti et al. 2020 papers (the ICML workshop paper this
book reads and the NeurIPS paper it became) both came out as "MKS+20", naming one paper
on chapter 2's list and the other on chapter 8's. This style labels the whole references
file once, with alpha's a/b suffixes on a collision, so a label names the
same paper on every page. The a/b order is the lists' own (author, year, title), so a list
holding both shows "a" above "b". ``_config.yml`` loads it (``local_extensions``) and selects it
(``bibtex_default_style: calib``).
"""
from __future__ import annotations

import pathlib
from collections.abc import Iterable

from pybtex.database import parse_file
from pybtex.plugin import register_plugin
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels.alpha import LabelStyle as AlphaLabels


def book_labels(bibfiles: Iterable[str | pathlib.Path]) -> dict[str, str]:
    """Bib key -> alpha label, made unique over all entries of ``bibfiles`` together."""
    entries = [entry for path in bibfiles for entry in parse_file(str(path)).entries.values()]
    entries = AlphaStyle().sort(entries)
    return dict(zip((entry.key for entry in entries), AlphaLabels().format_labels(entries)))


class BookLabels(AlphaLabels):
    """Alpha labels looked up in the book-wide table (filled when the build starts)."""

    labels: dict[str, str] = {}

    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            yield self.labels.get(entry.key) or self.format_label(entry)


class Style(AlphaStyle):
    """pybtex's alpha style with :class:`BookLabels`."""

    default_label_style = BookLabels


def _fill_labels(app) -> None:
    paths = [pathlib.Path(app.srcdir) / f for f in app.config.bibtex_bibfiles]
    BookLabels.labels = book_labels(paths)


def setup(app):
    register_plugin("pybtex.style.formatting", "calib", Style, force=True)
    app.connect("builder-inited", _fill_labels)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
