"""The GitHub Actions workflows: valid against the workflow schema (offline) and wired as documented."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def check_jsonschema() -> str:
    exe = shutil.which("check-jsonschema", path=str(pathlib.Path(sys.executable).parent))
    if exe is None:
        pytest.fail("check-jsonschema is missing: it is in the test extra (pip install -e '.[test]')")
    return exe


def lint(*paths: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([check_jsonschema(), "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_workflows_match_the_github_schema():
    done = lint(*sorted(WORKFLOWS.glob("*.yml")))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_linter_catches_a_broken_workflow(tmp_path):
    bad = load("test.yml")
    bad["jobs"]["test"]["runs-on"] = {"not": "a runner"}
    bad["jobs"]["test"]["steps"][0] = {"uses": "actions/checkout@v4", "whith": {}}
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(bad))
    assert lint(path).returncode != 0


def test_test_workflow_runs_make_test_on_push_and_pull_request():
    wf = load("test.yml")
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert "push" in triggers and "pull_request" in triggers
    runs = [s.get("run", "") for s in wf["jobs"]["test"]["steps"]]
    assert any(r.startswith("make test") for r in runs)


def test_book_workflow_builds_and_deploys_the_html_to_pages():
    wf = load("book.yml")
    build = wf["jobs"]["build"]["steps"]
    assert any(s.get("run", "").startswith("make book") for s in build)
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    deploy = wf["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
