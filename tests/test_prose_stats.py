"""tools/prose_stats.py: the prose statistics on small known texts, and the enforced pages."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import prose_stats as ps  # noqa: E402


def _words(n: int, end: str = ".") -> str:
    return " ".join(["word"] * (n - 1)) + " last" + end


def test_sentences_split_at_full_stops_but_not_at_abbreviations():
    text = "Lin et al. (2024) show it. The loss, e.g. focal loss, helps! Does it help? Yes. See Fig. 3 now."
    assert ps.sentences(text) == ["Lin et al. (2024) show it.", "The loss, e.g. focal loss, helps!",
                                  "Does it help?", "See Fig. 3 now."]  # "Yes." is a fragment


def test_statistics_of_a_known_page():
    long = "A " + _words(44)  # 45 words
    short = "This one is short (really) and has nine words."
    page = [f"# A heading that is not prose\n\n{long} {short}\n\n{short} {short}"]
    s = ps.stats(page)
    assert s.sentences == 4 and s.words == 45 + 3 * 9
    assert s.mean == pytest.approx(72 / 4) and s.long_share == pytest.approx(0.25)
    assert s.parens == pytest.approx(100 * 3 / 72)
    assert s.longest == 54 and s.over == 0
    assert s.problems() == ["25 % of sentences over 40 words (limit 8 %)",
                            f"{100 * 3 / 72:.1f} parentheses per 100 words (limit 1.2)"]


def test_markup_is_not_prose():
    page = ["Text with $x^2 (y)$ math, `code (x)` and {cite}`lin2024` roles, a\n"
            "{term}`temperature <Temperature T>` and a [link](https://x.org/a_b).\n\n"
            "```python\nprint('(not prose)')\n```\n\n$$\n(a + b)\n$$\n\n| a (b) | c |\n|---|---|\n\n"
            "(ch2-label)=\n## Heading (not prose)\n"]
    [(kind, text)] = ps.blocks(page[0])
    assert kind == "paragraph"
    assert text == "Text with MATH math, CODE and REF roles, a temperature and a link."
    assert ps.stats(page).parens == 0


def test_a_written_out_citation_reads_as_the_role_it_replaces():
    page = ["As shown (Mukhoti et al., 2020) and (Lin et al., 2024; Guo et al., 2017), "
            "Mukhoti et al. (2020) found it, but (this aside) stays an aside.\n"]
    [(_, text)] = ps.blocks(page[0])
    assert text.count("REF") == 3 and "(this aside)" in text
    assert text.count("(") == 1  # only the aside counts


def test_lists_and_admonitions_count_as_sentences_but_not_as_paragraphs():
    body = _words(200)
    page = [f"- {body}\n- item two has words enough here.\n\n"
            f"```{{note}}\n:class: dropdown\n{body}\n```\n\n:::{{tip}}\n{body}\n:::\n\n"
            f"```{{glossary}}\nTerm\n  {body}\n```\n\n```{{glue:figure}} key\n:name: x\n{body}\n```"]
    kinds = [k for k, _ in ps.blocks(page[0])]
    assert kinds == ["admonition", "admonition", "admonition", "list", "list"]  # the caption: gone
    s = ps.stats(page)
    assert s.over == 0 and s.longest == 0 and s.sentences == 5
    para = ps.stats([body])
    assert para.over == 1 and para.longest == 200
    assert "1 paragraph(s) over 180 words, the longest 200" in para.problems()


def test_every_listed_page_exists_and_the_enforced_ones_pass():
    pages = ps.pages()
    assert {"book/14_when_losses_help.ipynb", "book/api/posthoc.md"} <= set(pages)  # API pages' own prose too
    assert set(ps.ENFORCED) <= set(pages)
    failing = {p: ps.page_stats(p).problems() for p in ps.ENFORCED}
    assert not {p: f for p, f in failing.items() if f}


def test_check_exits_non_zero_on_an_enforced_page_over_the_limits(capsys, tmp_path):
    over = tmp_path / "long.md"  # every page of the book passes now: a page made to fail
    over.write_text(" ".join(["This sentence runs on and on"] * 12) + " without a stop.\n")
    assert ps.page_stats(str(over)).problems()
    assert ps.main([str(over)]) == 0  # printed, not enforced
    assert ps.main(["--check", "--all", str(over)]) == 1
    assert f"prose: {over}:" in capsys.readouterr().err


def test_make_lint_and_so_make_test_check_the_enforced_pages():
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "tools/prose_stats.py --check --all" in lint  # every page of the book, not a list
    assert "lint" in makefile.split("\ntest:", 1)[1].splitlines()[0]


def test_each_list_item_is_read_on_its_own():
    page = ["- The first item has one sentence here\n- the second item starts lower-case and\n"
            "  runs on to a second line\n"]
    assert [kind for kind, _ in ps.blocks(page[0])] == ["list", "list"]
    assert ps.stats(page).sentences == 2  # not one long sentence across the items
