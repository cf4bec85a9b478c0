"""make book: the chapters run in two one-thread lanes into the build's cache first."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_lanes  # noqa: E402


def test_lanes_split_longest_first_to_the_lane_with_less_work():
    seconds = {"a": 400.0, "b": 300.0, "c": 200.0, "d": 200.0, "e": 100.0}
    lanes = book_lanes.split(seconds, 2)
    assert lanes == [["a", "d"], ["b", "c", "e"]]
    assert sorted(sum(seconds[n] for n in lane) for lane in lanes) == [600.0, 600.0]
    assert book_lanes.split(seconds, 1) == [["a", "b", "c", "d", "e"]]


def test_the_lanes_run_every_page_the_build_executes():
    toc = (ROOT / "_toc.yml").read_text()
    executed = {f"{e}.ipynb" for e in re.findall(r"file:\s*(book/[\w/-]+)", toc)
                if (ROOT / f"{e}.ipynb").exists() and not e.startswith("book/coursework/")}
    assert {p.relative_to(ROOT).as_posix() for p in book_lanes.notebooks()} == executed
    times = book_lanes.expected_seconds([p.stem for p in book_lanes.notebooks()])
    assert all(t > 0 for t in times.values())


def test_make_book_fills_the_cache_in_lanes_then_builds_from_it_reporting_claims():
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r"^\s*execute_notebooks:\s*cache\s*$", config, re.M)  # the build reads the cache
    recipe = (ROOT / "Makefile").read_text().split("\nbook:", 1)[1].split("\n\n", 1)[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert steps[0].startswith("rm -rf") and "$(NB_CACHE)" in steps[0]
    assert "tools/book_lanes.py --cache $(NB_CACHE)" in steps[1] and "CALIB_CLAIMS=report" in steps[1]
    assert "book-html" in steps[2] and "CALIB_CLAIMS=report" in steps[2]
    assert "--report" in steps[3]


def test_a_fresh_clone_balances_on_the_committed_times(tmp_path, monkeypatch):
    """Without a last build's times, the committed fresh-clone times balance the lanes: the
    audit's AMD medians once put 653 s in one lane and 342 s in the other."""
    monkeypatch.setattr(book_lanes, "TIMES", tmp_path / "none.json")
    names = [p.stem for p in book_lanes.notebooks()]
    committed = book_lanes.json.loads(book_lanes.COMMITTED.read_text())
    times = book_lanes.expected_seconds(names)
    assert {n: times[n] for n in committed if n in times} == {n: t for n, t in committed.items() if n in times}
    loads = sorted(sum(times[n] for n in lane) for lane in book_lanes.split(times, 2))
    assert loads[1] - loads[0] <= max(times.values()) / 2
