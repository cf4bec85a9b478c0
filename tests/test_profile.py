import pytest
import torch

from calib import profile


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
    monkeypatch.setenv("CALIB_FULL_WORK", "1")  # tools/estimate_runtimes.py times the full amounts
    assert profile.work(quick=1, colab=2, paper=3) == 3


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
