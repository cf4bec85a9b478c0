import numpy as np
import pytest
import torch

from calib import profile


@pytest.fixture(autouse=True)
def _the_audited_profile(monkeypatch):
    """The audit's records speak for the quick profile only (profile.audited_here): these
    tests read them there, also on a machine whose default profile is colab (CUDA)."""
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    monkeypatch.delenv("CALIB_SMOKE", raising=False)


def test_default_is_quick_without_cuda(monkeypatch):
    monkeypatch.delenv("CALIB_PROFILE", raising=False)
    expected = "colab" if torch.cuda.is_available() else "quick"
    assert profile.current() == expected


@pytest.mark.parametrize("name", profile.PROFILES)
def test_env_var_selects_profile(monkeypatch, name):
    monkeypatch.setenv("CALIB_PROFILE", name.upper())
    assert profile.current() == name
    assert profile.pick(quick=1, colab=2, paper=3) == {"quick": 1, "colab": 2, "paper": 3}[name]


def test_unknown_profile_is_refused(monkeypatch):
    monkeypatch.setenv("CALIB_PROFILE", "huge")
    with pytest.raises(ValueError, match="CALIB_PROFILE"):
        profile.current()
    with pytest.raises(ValueError, match="profile"):
        profile.pick(quick=1, colab=2, paper=3, profile="huge")


def test_describe_names_profile_and_device(monkeypatch):
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    text = profile.describe()
    assert "quick" in text and str(profile.device()) in text


def test_report_prints_each_verdict_wrapped_to_the_column(capsys):
    from calib import profile

    profile.report(True, "a")
    profile.report(False, "b")
    profile.report(None, "c " * 60)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "holds here:     a" and lines[1] == "does not hold: b"
    assert lines[2].startswith("not run yet:    c") and len(lines) > 3
    assert all(len(line) <= 80 for line in lines) and lines[3].startswith(" " * 16 + "c")


def test_work_is_pick_except_in_smoke_mode(monkeypatch):
    from calib import profile

    monkeypatch.setenv("CALIB_PROFILE", "paper")
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    assert profile.work(quick=1, colab=2, paper=3) == 3
    monkeypatch.setenv("CALIB_SMOKE", "1")
    assert profile.work(quick=1, colab=2, paper=3) == 1
    assert profile.pick(quick=1, colab=2, paper=3) == 3  # choices of code path are unchanged
    assert profile.work(quick=100, colab=2, paper=3, smoke=5) == 5  # a smaller smoke amount
    monkeypatch.delenv("CALIB_SMOKE")
    assert profile.work(quick=100, colab=2, paper=3, smoke=5) == 3
    monkeypatch.setenv("CALIB_SMOKE", "1")
    monkeypatch.setenv("CALIB_FULL_WORK", "1")  # tools/estimate_runtimes.py times the full amounts
    assert profile.work(quick=1, colab=2, paper=3) == 3


def _audit_file(folder, offset, threads, outcomes):
    import json

    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"chapter": "ch", "seed_offset": offset, "threads": threads, "status": "finished"},
             *({"kind": "procedure" if text == "procedure" else "verdict", "claim": text, "outcome": o}
               for text, o in outcomes)]
    (folder / f"offset{offset}-threads{threads}.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")


def test_recurrence_counts_draws_and_a_split_draw_for_no_outcome(tmp_path, monkeypatch):
    folder = tmp_path / "ch"
    for offset in (100, 200, 300):
        for threads in (1, 2):
            _audit_file(folder, offset, threads, [("A below B", "holds"), ("C", "holds")])
    _audit_file(folder, 400, 1, [("A below B", "holds")])
    _audit_file(folder, 400, 2, [("A below B", "undecided")])  # the threads disagree: a split draw
    r = profile.recurrence("A below B", "holds", chapter="ch", root=tmp_path)
    assert (r.k, r.n, r.split) == (3, 4, 1) and not r.every_draw  # n counts draws, never runs
    assert "holds in 3 of 4 audited draws (the other one split between thread settings;" in str(r)
    assert profile.draw_outcomes("A below B", chapter="ch", root=tmp_path) == ["holds"] * 3 + ["split"]
    assert profile.recurrence("A below B", "undecided", chapter="ch", root=tmp_path).k == 0
    monkeypatch.setattr(profile, "AUDIT_ROOT", tmp_path)  # the prose names the split draw too
    assert profile.recurrence_text("A below B", "holds", chapter="ch") == (
        "in 3 of 4 audited draws (the other one split between thread settings)")
    every = profile.recurrence("C", "holds", chapter="ch", root=tmp_path)
    assert (every.k, every.n) == (3, 3) and every.every_draw
    assert every.lower == pytest.approx(0.05 ** (1 / 3), abs=1e-9)  # k = n: alpha^(1/n)
    assert profile.recurrence("never printed", "holds", chapter="ch", root=tmp_path).n == 0
    assert "not audited" in str(profile.recurrence("never printed", "holds", chapter="ch", root=tmp_path))
    assert profile.audit_clause("C", "holds", chapter="ch", root=tmp_path) == (
        "the audit found the same in every one of the 3 audited draws")
    assert profile.audit_clause("A below B", "holds", chapter="ch", root=tmp_path).endswith("in 3 of 4 audited draws (the other one split between thread settings)")
    assert profile.audit_clause("never printed", "holds", chapter="ch", root=tmp_path) == profile.NO_AUDIT_RECORD


def test_audit_clause_counts_the_outcome_of_this_run_for_a_report(tmp_path):
    """Referee s15 N-2: a glue said "not above 99 % ... in this run; the audit found the
    same in every one of the 5 audited draws", counting "holds" for a run that failed."""
    folder = tmp_path / "ch"
    for offset, outcome in [(100, "holds"), (200, "fails"), (300, "holds")]:
        _audit_file(folder, offset, 1, [("r", outcome)])
    kw = dict(chapter="ch", root=tmp_path)
    assert profile.audit_clause("r", True, **kw) == (
        "the audit found the same in 2 of 3 audited draws (the other one: fails)")
    assert profile.audit_clause("r", False, **kw) == (
        "the audit found the same in 1 of 3 audited draws (the other 2: holds)")
    assert profile.audit_clause("r", False, **kw) == profile.audit_clause("r", "fails", **kw)
    assert profile.audit_clause("never printed", False, **kw) == profile.NO_AUDIT_RECORD
    assert profile.audit_clause("r", np.bool_(False), **kw).endswith("in 1 of 3 audited draws (the other 2: holds)")


def test_a_clause_says_what_the_other_draws_gave(tmp_path):
    """Referee s21: "the same in 0 of 5 audited draws" hid that they were undecided, not
    contradicted."""
    folder = tmp_path / "ch"
    outcomes = ["undecided"] * 3 + ["contradicted", "holds"]
    for offset, outcome in zip(range(100, 600, 100), outcomes):
        _audit_file(folder, offset, 1, [("r", outcome), ("u", "undecided")])
    kw = dict(chapter="ch", root=tmp_path)
    assert profile.audit_clause("u", "holds", **kw).endswith("in 0 of 5 audited draws (undecided in all 5)")
    assert profile.audit_clause("r", "holds", **kw).endswith(
        "in 1 of 5 audited draws (the others: undecided in 3, contradicted in 1)")
    assert profile.recurrence("r", "undecided", **kw).others == (("contradicted", 1), ("holds", 1))
    split = profile.Recurrence("holds", 0, 5, split=5)
    assert profile._draws_phrase(split) == "in 0 of 5 audited draws (all 5 split between thread settings)"
    mixed = profile.Recurrence("holds", 3, 5, split=1, others=(("undecided", 1),))
    assert profile._draws_phrase(mixed).endswith(
        "(the others: undecided in 1, split between thread settings in 1)")


def test_one_audited_draw_reads_as_one_draw(tmp_path):
    """Not "in every one of the 1 audited draws"."""
    _audit_file(tmp_path / "ch", 100, 1, [("r", "holds")])
    assert profile.audit_clause("r", "holds", chapter="ch", root=tmp_path) == (
        "the audit found the same in the one audited draw")
    assert profile.audit_clause("r", "fails", chapter="ch", root=tmp_path).endswith(
        "not in the one audited draw (it gave holds)")


def test_clopper_pearson_lower_bound_matches_scipy():
    from scipy import stats

    for k, n in [(1, 10), (5, 10), (9, 10), (3, 7)]:
        assert profile._clopper_pearson_lower(k, n) == pytest.approx(stats.beta.ppf(0.05, k, n - k + 1), abs=1e-9)
    assert profile._clopper_pearson_lower(0, 10) == 0.0


def test_a_verdict_in_an_audited_chapter_prints_its_recurrence(monkeypatch, capsys, tmp_path):
    from calib import evidence

    _audit_file(tmp_path / "ch", 100, 1, [("a is greater than b", "holds")])
    monkeypatch.setattr(profile, "AUDIT_ROOT", tmp_path)
    monkeypatch.setattr(profile, "_CHAPTER", "ch")
    monkeypatch.setenv("CALIB_PROFILE", "quick")
    monkeypatch.delenv("CALIB_SMOKE", raising=False)
    monkeypatch.delenv("CALIB_AUDIT_FILE", raising=False)
    v = evidence.compare([3.0, 3.1, 3.2], [1.0, 1.1, 1.3], "a is greater than b")
    profile.verdict(v)
    out = capsys.readouterr().out
    assert f"audit: {v.outcome} in" in out and "of 1 audited draws" in out
    profile.verdict(v, audited=False)  # committed ledger rows: every draw reads them alike
    out = capsys.readouterr().out
    assert "audit: not applicable" in out and "audited draws" not in out
    monkeypatch.setattr(profile, "_CHAPTER", "other")  # a page the audit does not cover: no line
    profile.verdict(v)
    assert "audit:" not in capsys.readouterr().out


@pytest.mark.parametrize("env", [{"CALIB_PROFILE": "colab"}, {"CALIB_PROFILE": "paper"},
                                 {"CALIB_SMOKE": "1"}])
def test_the_quick_audit_speaks_for_no_other_profile(monkeypatch, capsys, tmp_path, env):
    """Referee s21 F9: a colab run's grids and prose credited the quick draws to itself."""
    from calib import evidence

    _audit_file(tmp_path / "ch", 100, 1, [("a is greater than b", "holds")])
    monkeypatch.setattr(profile, "AUDIT_ROOT", tmp_path)
    monkeypatch.setattr(profile, "_CHAPTER", "ch")
    assert profile.recurrence("a is greater than b", "holds").n == 1  # at quick, it counts
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert not profile.audited_here()
    assert profile.audit_outcomes("ch") == {} and profile.recurrence("a is greater than b", "holds").n == 0
    assert profile.audit_clause("a is greater than b", "holds") == profile.NO_AUDIT_RECORD
    assert profile.recurrence_text("a is greater than b", "holds") == "in no audited draw at this profile"
    profile.verdict(evidence.compare([3.0, 3.1, 3.2], [1.0, 1.1, 1.3], "a is greater than b"))
    assert "audit:" not in capsys.readouterr().out


def test_audit_state_is_read_from_the_records(tmp_path):
    import json

    assert "no record" in profile.audit_state("ch", tmp_path)
    folder = tmp_path / "ch"
    for offset, threads, outcome in [(100, 1, "holds"), (100, 2, "holds"), (200, 1, "fails")]:
        folder.mkdir(exist_ok=True)
        lines = [{"chapter": "ch", "seed_offset": offset, "threads": threads, "status": "finished"},
                 {"kind": "claim", "claim": "x", "outcome": outcome}]
        (folder / f"offset{offset}-threads{threads}.jsonl").write_text("\n".join(map(json.dumps, lines)))
    text = profile.audit_state("ch", tmp_path)
    assert "3 times" in text and "100, 200" in text and "1 and 2 threads" in text
    assert "1 of its 1 asserted claims did not hold" in text
    reports = tmp_path / "reports"  # a chapter that only reports, audited at one thread
    reports.mkdir()
    lines = [{"chapter": "reports", "seed_offset": 100, "threads": 1, "status": "finished"},
             {"kind": "report", "claim": "x", "outcome": "holds"}]
    (reports / "offset100-threads1.jsonl").write_text("\n".join(map(json.dumps, lines)))
    text = profile.audit_state("reports", tmp_path)
    assert "once at the quick profile (seed offsets 100;" in text and "one thread" in text and "no claim was asserted" in text


def test_audit_state_leaves_out_claims_the_chapter_no_longer_asserts(tmp_path):
    """Referee s14 08-R2: ch. 8 turned its one claim into a report, yet four records of the
    same procedure still hold it as a claim; "each of its asserted claims held" misled."""
    import json

    folder = tmp_path / "ch"
    folder.mkdir()
    for offset, kind in [(100, "claim"), (200, "report")]:
        lines = [{"chapter": "ch", "seed_offset": offset, "threads": 1, "status": "finished"},
                 {"kind": kind, "claim": "x", "outcome": "holds"}]
        (folder / f"offset{offset}-threads1.jsonl").write_text("\n".join(map(json.dumps, lines)))
    assert "each of its asserted claims held" in profile.audit_state("ch", tmp_path)
    text = profile.audit_state("ch", tmp_path, asserts=())
    assert "2 times" in text and "this version of the chapter asserts no claim" in text
    assert "asserted claims" not in text
    assert "each of its asserted claims held" in profile.audit_state("ch", tmp_path, asserts=["x"])
    assert "no claim was asserted" in profile.audit_state("ch", tmp_path, asserts=["y"])
    assert profile.audit_threads("ch", tmp_path) == [1]
    assert profile.audit_threads("none", tmp_path) == []


def test_a_new_procedure_leaves_the_old_records_out(tmp_path, monkeypatch):
    _audit_file(tmp_path / "ch", 100, 1, [("x", "holds")])  # no procedure line: procedure 1
    monkeypatch.setattr(profile, "_PROCEDURE", 1)
    assert profile.recurrence("x", "holds", chapter="ch", root=tmp_path).n == 1
    monkeypatch.setattr(profile, "_PROCEDURE", 2)
    assert profile.recurrence("x", "holds", chapter="ch", root=tmp_path).n == 0
    assert "current procedure" in profile.audit_state("ch", tmp_path)
    _audit_file(tmp_path / "ch", 200, 1, [("procedure", "2"), ("x", "undecided")])
    r = profile.recurrence("x", "undecided", chapter="ch", root=tmp_path)
    assert (r.k, r.n) == (1, 1)
    with pytest.raises(ValueError, match="procedure"):
        profile.describe("ch", procedure=0)


def test_glue_is_myst_nb_in_the_book_and_a_print_elsewhere(monkeypatch, capsys):
    """Issue 43: the quickstart imported myst_nb, which the library's extras do not bring."""
    import sys
    import types

    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: calls.append((name, value, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    profile.glue("key", 1.5, display=False)
    assert calls == [("key", 1.5, False)] and capsys.readouterr().out == ""
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # not installed: import raises
    monkeypatch.setitem(sys.modules, "IPython", None)  # a plain script
    profile.glue("key", 2.5, display=False)
    assert calls == [("key", 1.5, False)] and capsys.readouterr().out == "key: 2.5\n"


def test_a_family_says_how_many_outcomes_recurred_and_names_the_decided_rest(tmp_path, monkeypatch):
    """Chapters 11 and 13 counted "k of these n outcomes recurred" each in its own code."""
    from types import SimpleNamespace as V

    for offset, b in [(100, "holds"), (200, "undecided"), (300, "undecided")]:
        _audit_file(tmp_path / "ch", offset, 1, [("A", "holds"), ("B", b), ("C", "undecided")])
    monkeypatch.setattr(profile, "AUDIT_ROOT", tmp_path)
    fam = [V(claim="A", outcome="holds"), V(claim="B", outcome="holds"),
           V(claim="C", outcome="undecided"), V(claim="new", outcome="contradicted")]
    text = profile.family_recurrence(fam, "ch")
    assert text.startswith("2 of these 4 outcomes recurred in every one of the 3 audited draws")
    assert "“B” (holds here) recurred in 1 of 3 audited draws (the other 2: undecided)" in text
    assert "“new” (contradicted here) is in no audited draw" in text and "“C”" not in text
    assert profile.family_recurrence(fam, "ch", name_the_rest=False) == (
        "2 of these 4 outcomes recurred in every one of the 3 audited draws")
    assert profile.family_recurrence(fam[:1], "ch") == (
        "this outcome recurred in every one of the 3 audited draws")
    assert profile.family_recurrence(fam[1:2], "ch", name_the_rest=False) == (
        "this outcome did not recur in every one of the 3 audited draws")
    assert profile.family_recurrence(fam, "no such chapter") == profile.NO_AUDIT_RECORD
    monkeypatch.setenv("CALIB_PROFILE", "colab")  # the audit's draws do not speak there
    assert profile.family_recurrence(fam, "ch") == profile.NO_AUDIT_RECORD
