"""The claims audit: claim() asserts only outcomes results/audit/ shows held in every run."""
import ast
import json
import pathlib

import pytest

from calib import profile
from calib.experiments import audit

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _code(chapter: str) -> str:
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    lines = ("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join("\n".join(x for x in block.splitlines() if not x.lstrip().startswith(("%", "!")))
                     for block in lines)


def claim_texts(source: str) -> list[object]:
    """The text argument of every claim(...) call: a str, or the AST node when not a literal."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "claim"
                                           or getattr(node.func, "attr", None) == "claim"):
            text = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "text"), None)
            out.append(text.value if isinstance(text, ast.Constant) and isinstance(text.value, str) else text)
    return out


def test_claim_texts_are_found_and_literals_flagged():
    texts = claim_texts('claim(x > 1, "a")\nprofile.claim(ok, text="b")\nclaim(y, f"c{1}")')
    assert texts[:2] == ["a", "b"] and isinstance(texts[2], ast.JoinedStr)


@pytest.mark.parametrize("chapter", audit.TRAINING_CHAPTERS)
def test_asserted_claims_held_in_every_audited_run(chapter):
    texts = claim_texts(_code(chapter))
    assert all(isinstance(t, str) for t in texts), (
        f"{chapter}: a claim() text is not a string literal, so the audit cannot match it")
    if not texts:
        return  # nothing empirical is asserted: verdicts and facts need no audit record
    rows = [r for r in audit.current_records() if r["chapter"] == chapter]
    runs = {(r["seed_offset"], r["threads"]) for r in rows if r["status"] == "finished"}
    assert len({o for o, _ in runs}) >= 5 and len({t for _, t in runs}) >= 2, (
        f"{chapter}: audited at {sorted(runs)}; make audit CHAPTERS={chapter} runs 5 offsets x 2 threads")
    for text in texts:
        seen = [r["outcome"] for r in rows if r["claim"] == text and r["kind"] == "claim"]
        assert len(seen) >= len(runs), f"{chapter}: claim {text!r} has no audit record in every run"
        assert set(seen) == {"holds"}, (f"{chapter}: claim {text!r} failed in {seen.count('fails')} of "
                                        f"{len(seen)} audited runs: report it as a verdict instead")


def audit_state_calls(source: str) -> list[ast.Call]:
    """Every audit_state(...) call of ``source``."""
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and "audit_state" in (getattr(node.func, "id", None), getattr(node.func, "attr", None))]


@pytest.mark.parametrize("chapter", audit.TRAINING_CHAPTERS)
def test_a_chapter_that_asserts_no_claim_says_so_in_its_audit_state(chapter):
    """Referee s15 N-1: chapter 10 only reports, yet audit_state() counted the claim lines of
    older records of its procedure and said "each of its asserted claims held"."""
    code = _code(chapter)
    if claim_texts(code):
        return
    for call in audit_state_calls(code):
        given = {k.arg: k.value for k in call.keywords}
        assert "asserts" in given and isinstance(given["asserts"], (ast.Tuple, ast.List)) and not (
            given["asserts"].elts), f"{chapter} asserts no claim(): call profile.audit_state(asserts=())"


def test_audit_state_calls_are_found():
    calls = audit_state_calls("profile.audit_state()\naudit_state(asserts=())\nx.claim(1, 'a')")
    assert [len(c.keywords) for c in calls] == [0, 1]


def test_failing_claim_stops_tests_but_not_a_readers_build(monkeypatch, capsys):
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    monkeypatch.delenv("CALIB_AUDIT_FILE", raising=False)
    monkeypatch.delenv("CALIB_CLAIMS", raising=False)
    with pytest.raises(AssertionError, match="x grows"):
        profile.claim(False, "x grows")
    monkeypatch.setenv("CALIB_CLAIMS", "report")
    assert profile.claim(False, "x grows") is False
    assert "DOES NOT HOLD HERE" in capsys.readouterr().out
    monkeypatch.setenv("CALIB_CLAIMS", "maybe")
    with pytest.raises(ValueError, match="CALIB_CLAIMS"):
        profile.claim(False, "x grows")


def test_audit_file_records_every_kind(monkeypatch, tmp_path):
    from calib import evidence

    path = tmp_path / "a.jsonl"
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    monkeypatch.setenv("CALIB_AUDIT_FILE", str(path))
    profile.claim(False, "c")  # recorded, not raised
    profile.fact(True, "f")
    profile.report(None, "r")
    profile.verdict(evidence.compare([3.0, 4.0, 3.5], [1.0, 1.2, 0.9], "v"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["kind"], x["claim"], x["outcome"]) for x in lines] == [
        ("claim", "c", "fails"), ("fact", "f", "holds"), ("report", "r", "not run"), ("verdict", "v", "holds")]


def test_seed_offset(monkeypatch):
    monkeypatch.delenv("CALIB_SEED_OFFSET", raising=False)
    assert profile.seeds(3) == [0, 1, 2]
    monkeypatch.setenv("CALIB_SEED_OFFSET", "100")
    assert profile.seeds(2) == [100, 101] and profile.seed_offset() == 100
    for bad in ("-1", "x"):
        monkeypatch.setenv("CALIB_SEED_OFFSET", bad)
        with pytest.raises(ValueError, match="CALIB_SEED_OFFSET"):
            profile.seed_offset()
    with pytest.raises(ValueError, match="n must be"):
        profile.seeds(0)


def test_audit_runs_a_chapter_once_and_records_it(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": "from calib import profile\nprofile.claim(profile.seed_offset() == 7, 'offset 7')\n"
                        "profile.report(True, 'r')"}]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    (book / "99_tiny.ipynb").write_text(json.dumps(nb))
    written = audit.run(["99_tiny"], offsets=(7,), threads=(1,), root=tmp_path / "results")
    assert [p.name for p in written] == ["offset7-threads1.jsonl"]
    rows = audit.records(tmp_path / "results")
    assert [(r["claim"], r["outcome"], r["status"], r["seed_offset"]) for r in rows] == [
        ("offset 7", "holds", "finished", 7), ("r", "holds", "finished", 7)]
    assert audit.run(["99_tiny"], offsets=(7,), threads=(1,), root=tmp_path / "results") == []
    rates = audit.hold_rates(tmp_path / "results")
    assert list(rates["hold rate"]) == [1.0, 1.0] and list(rates["draws"]) == [1, 1]
    with pytest.raises(ValueError, match="no chapter"):
        audit.run(["nope"], root=tmp_path / "results")


def test_a_new_procedure_is_audited_afresh_beside_the_old_records(tmp_path):
    """A chapter that moves to procedure 2 (``describe(..., procedure=2)``) is run again at an
    offset its procedure-1 file already covers; the old file stays, and the hold rates count
    only the current procedure."""
    book = tmp_path / "book"
    book.mkdir()
    src = "from calib import profile\nprofile.describe('99_tiny', procedure={})\nprofile.report(True, 'r')"

    def write(version):
        cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                  "source": src.format(version)}]
        nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        (book / "99_tiny.ipynb").write_text(json.dumps(nb))

    write(1)
    assert audit.procedure("99_tiny", book) == 1
    assert [p.name for p in audit.run(["99_tiny"], offsets=(7,), threads=(1,), root=tmp_path / "results")] == [
        "offset7-threads1.jsonl"]
    write(2)
    assert audit.procedure("99_tiny", book) == 2
    assert [p.name for p in audit.run(["99_tiny"], offsets=(7,), threads=(1,), root=tmp_path / "results")] == [
        "offset7-threads1-p2.jsonl"]
    assert sorted(r["procedure"] for r in audit.records(tmp_path / "results")) == [1, 2]
    assert [r["procedure"] for r in audit.current_records(tmp_path / "results")] == [2]
    assert list(audit.hold_rates(tmp_path / "results")["runs"]) == [1]
