"""The verdict grid: a family of verdicts as an HTML table of claims by conditions."""
import html
import re

import pytest

from calib import evidence, plots


def _family() -> evidence.Family:
    fam = evidence.Family(["2,500", "10,000", "55,000"], min_n=3)
    fam.add("CE over-confident", "2,500", [1.40, 1.50, 1.45], 1.0, "CE T > 1 at 2,500")
    fam.add("CE over-confident", "10,000", [0.90, 0.85, 0.88], 1.0, "CE T > 1 at 10,000")
    fam.add("CE over-confident", "55,000", [1.2], 1.0, "CE T > 1 at 55,000")  # one seed so far
    fam.add("focal <T> 1", "2,500", [1.02, 0.95, 1.01], 1.0, "focal T > 1 at 2,500")
    return fam


def _cells(grid) -> list[tuple[str, str]]:
    """(class, visible text) of every body cell, in order."""
    found = re.findall(r'<td class="calib-(\w+)"[^>]*>(.*?)</td>', grid.html, re.S)
    return [(cls, html.unescape(re.sub(r"<[^>]+>", " ", body)).split()) for cls, body in found]


def test_grid_is_a_table_of_claims_by_conditions():
    grid = plots.verdict_grid(_family(), title="CE's T", row_label="loss")
    assert grid.html.count("<table") == 1 and 'class="calib-verdicts"' in grid.html
    # the table scrolls in its own box on a phone, not the page
    assert re.search(r"\.calib-scroll\{overflow-x:auto", grid.html) and 'class="calib-scroll"' in grid.html
    heads = re.findall(r'<th scope="col">(.*?)</th>', grid.html)
    assert heads == ["loss", "2,500", "10,000", "55,000"]
    rows = re.findall(r'<th scope="row">(.*?)</th>', grid.html)
    assert [html.unescape(r) for r in rows] == ["CE over-confident", "focal <T> 1"]
    assert grid.html.count("<tr>") == 3 and len(_cells(grid)) == 6  # every row has every column
    assert '<div class="calib-title">CE&#x27;s T</div>' in grid.html


def test_each_outcome_has_its_symbol_and_word_so_greyscale_reads():
    grid = plots.verdict_grid(_family())
    cells = _cells(grid)
    classes = [c for c, _ in cells]
    assert classes == ["holds", "contradicted", "waiting", "undecided", "waiting", "waiting"]
    for cls, words in cells:
        if cls != "waiting":  # the symbol and the word, not the tint alone
            assert words[:2] == [plots.SYMBOLS[cls], cls]
    # a cell never added is outside the design: "—", not "not run yet"
    assert cells[2][1] == ["1", "of", "3", "seeds"] and cells[4][1] == ["—"]
    assert "— no test in this cell" in str(grid)  # the legend says what the dash means


def test_cells_show_the_corrected_difference_and_interval():
    fam = _family()
    grid = plots.verdict_grid(fam)
    first = fam.verdicts()[0]
    assert first.family_size == 3  # Holm over the three tested cells
    words = _cells(grid)[0][1]
    assert words[2] == evidence.number(first.effect)
    assert " ".join(words[3:5]) == evidence.interval(first.low, first.high)
    assert "Holm, 3 tests" in grid.html and "95 % interval per comparison" in grid.html
    assert str(grid).splitlines()[1].startswith("CE over-confident: 2,500: ✓ ")


def test_legend_counts_hypotheses_where_an_equivalence_claim_brings_two():
    fam = _family()  # three one-sided verdicts: three hypotheses, "3 tests"
    fam.add("focal <T> 1", "10,000", [1.01, 0.99, 1.00], 1.0, "focal T within 0.1 of 1",
            direction="equivalent", margin=0.1)
    verdicts = fam.verdicts()
    assert len(verdicts) == 4 and {v.family_size for v in verdicts} == {5}  # p and p_beyond
    grid = plots.verdict_grid(fam)
    assert "Holm, 4 verdicts, 5 hypotheses" in grid.html and "tests)" not in grid.html
    one = evidence.Family(["a"], min_n=3)  # one equivalence verdict is still a family of two
    one.add("r", "a", [1.01, 0.99, 1.00], 1.0, "T within 0.1 of 1", direction="equivalent", margin=0.1)
    assert "Holm, 1 verdict, 2 hypotheses" in str(plots.verdict_grid(one))


def test_recurrence_counts_the_audited_draws_with_the_same_outcome():
    fam = _family()
    v = {x.claim: x for x in fam.verdicts()}
    rec = {"CE T > 1 at 2,500": ["holds"] * 9 + ["undecided"],
           "CE T > 1 at 10,000": ["contradicted"] * 10}
    grid = plots.verdict_grid(fam, recurrence=rec)
    cells = _cells(grid)
    assert cells[0][1][-1] == "9/10" and v["CE T > 1 at 2,500"].outcome == "holds"
    assert cells[1][1][-1] == "10/10"
    assert cells[3][1][-2:] == ["not", "audited"]
    assert "k/n: in k of n audited draws the same outcome" in grid.html
    assert "/10" not in plots.verdict_grid(fam).html  # no recurrence asked, none shown


def test_audited_outcomes_reads_the_audit_records_by_draw(tmp_path):
    folder = tmp_path / "audit" / "02_x"  # root: the results folder
    folder.mkdir(parents=True)

    def head(offset, threads):
        return f'{{"chapter": "02_x", "seed_offset": {offset}, "threads": {threads}}}\n'

    (folder / "offset100-threads1.jsonl").write_text(
        head(100, 1) + '{"kind": "verdict", "claim": "c", "outcome": "holds"}\n'
        '{"kind": "claim", "claim": "k", "outcome": "holds"}\n')
    # the same offset's second thread setting agrees: one draw, not two
    (folder / "offset100-threads2.jsonl").write_text(head(100, 2) + '{"kind": "verdict", "claim": "c", "outcome": "holds"}\n')
    (folder / "offset200-threads1.jsonl").write_text(head(200, 1) + '{"kind": "verdict", "claim": "c", "outcome": "undecided"}\n')
    assert plots.audited_outcomes("02_x", root=tmp_path) == {"c": ["holds", "undecided"]}


def test_a_family_takes_verdicts_computed_elsewhere():
    fam = evidence.Family(["step 1", "step 2"])
    raw = [evidence.compare([3.0, 3.2, 3.1], [1.0, 1.1, 0.9], "a above b"),
           evidence.compare([1.0, 1.3, 0.8], [1.0, 1.1, 0.9], "c above d")]
    fam.put("above", "step 1", raw[0])
    fam.put("above", "step 2", raw[1])
    assert [v.p_adjusted for v in fam.verdicts()] == [v.p_adjusted for v in evidence.decide(raw)]
    with pytest.raises(ValueError, match="column"):
        fam.put("above", "step 3", raw[0])
    with pytest.raises(TypeError, match="verdict must be"):
        fam.put("above", "step 1", 3.0)


def test_grid_refuses_bad_input():
    with pytest.raises(TypeError, match="family"):
        plots.verdict_grid([evidence.compare([1.0, 2.0], 0.0)])
    with pytest.raises(ValueError, match="no cells"):
        plots.verdict_grid(evidence.Family(["a"]))
    with pytest.raises(TypeError, match="recurrence"):
        plots.verdict_grid(_family(), recurrence=[("c", "holds")])
