"""The project's own files: dependencies agree, chapters are stripped and wired into the book."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import pathlib
import re
import sys
import tomllib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import sync_setup_cells  # noqa: E402


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def pyproject_requirements() -> set[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    for extra in meta["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith(meta["name"] + "[")]  # self-references
    return {_norm(r) for r in reqs}


def environment_requirements() -> set[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip() == "- pip:")
    reqs = set()
    for line in lines[start + 1 :]:
        item = line.strip()
        if not item.startswith("- "):
            break
        item = item[2:].strip()
        if not item.startswith("-e"):
            reqs.add(_norm(item))
    return reqs


def test_environment_yml_matches_pyproject():
    py, env = pyproject_requirements(), environment_requirements()
    assert py == env, f"only in pyproject: {sorted(py - env)}; only in environment.yml: {sorted(env - py)}"


def test_pyproject_keeps_lower_bounds_for_torch():
    """Colab keeps its own torch: no exact pins in the package metadata (CONTRIBUTING.md, "Conventions")."""
    for req in pyproject_requirements():
        assert "==" not in req, f"{req}: exact pins belong in constraints.txt, not pyproject.toml"
    pins = (ROOT / "constraints.txt").read_text()
    assert "torch==2.14.1" in pins and "torchvision==0.29.1" in pins


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=~!\[ ;]", _norm(r))[0] for r in reqs}


def test_the_distribution_name_is_ours_and_the_core_is_torch_numpy_tqdm():
    from calib import _optional

    meta = _project()
    assert meta["name"] == _optional.DISTRIBUTION == "torch-calib"  # PyPI's "calib" is another project
    assert _names(meta["dependencies"]) == {"torch", "numpy", "tqdm"}


def test_every_optional_import_belongs_to_the_extra_that_names_it():
    from calib import _optional

    extras = _project()["optional-dependencies"]
    for extra, modules in _optional.EXTRAS.items():
        assert set(modules.values()) <= _names(extras[extra]), extra
    assert [_norm(r) for r in extras["all"]] == [f"torch-calib[{','.join(_optional.EXTRAS)}]"]


# Run in a fresh interpreter where the optional packages cannot be imported.
_WITHOUT_EXTRAS = """
import sys
for name in ("scipy", "sklearn", "matplotlib", "sympy", "torchvision", "PIL", "pandas", "seaborn"):
    sys.modules[name] = None  # import raises ModuleNotFoundError, as if not installed
import torch
from calib import losses, metrics, models
logits, labels = torch.randn(64, 5), torch.randint(0, 5, (64,))
losses.focal_loss(logits, labels, gamma=3.0).item()
metrics.ece(logits.softmax(1), labels)
for module in {modules!r}:
    try:
        __import__(module)
        print(module, "imported")
    except ModuleNotFoundError as exc:
        print(str(exc))
"""


def test_losses_and_metrics_need_only_the_core_and_the_rest_name_their_extra():
    guarded = ["calib.posthoc", "calib.evidence", "calib.theory", "calib.plots", "calib.experiments"]
    out = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS.format(modules=guarded)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(guarded), lines
    for module, line, extra in zip(guarded, lines, ["posthoc", "tables", "theory", "plots", "tables"]):
        assert line.startswith(module + " needs ") and line.endswith(f'pip install "torch-calib[{extra}]"'), line


def chapters() -> list[pathlib.Path]:
    return sync_setup_cells.chapters()


def test_there_are_chapters():
    assert chapters(), "book/ holds no NN_topic.ipynb chapter"


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.name)
def test_chapter_is_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", sync_setup_cells.pages(), ids=lambda p: p.name)
def test_every_cell_has_an_id(path):
    """nbformat 4.5 cell ids: without them nbformat warns on every read, and will refuse."""
    nb = json.loads(path.read_text())
    missing = [i for i, cell in enumerate(nb["cells"]) if not cell.get("id")]
    assert not missing, f"{path.name}: cells {missing} have no id"


@pytest.mark.parametrize("path", sync_setup_cells.pages(), ids=lambda p: p.name)
def test_chapter_setup_cell_matches_config(path):
    """The Colab install URL comes from _config.yml's repository.url, the single source."""
    nb = json.loads(path.read_text())
    cell = sync_setup_cells.first_code_cell(nb)
    assert cell is not None
    assert "".join(cell["source"]) == sync_setup_cells.setup_source(), (
        f"{path.name}: setup cell out of date; run python tools/sync_setup_cells.py"
    )


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.name)
def test_chapter_starts_with_title_and_reports_profile(path):
    nb = json.loads(path.read_text())
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith("# ")
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    calls = re.findall(r"profile\.describe\(([^)]*)\)", code)
    assert calls, f"{path.name} does not show which profile ran"
    # describe("NN_topic") adds the expected Colab T4 time of this chapter: its own name only
    for arg in filter(None, (a.split(",")[0].strip() for a in calls)):  # keywords may follow
        assert arg.strip("'\"") == path.stem, f"{path.name} calls profile.describe({arg}), not its own name"


def test_toc_lists_every_chapter():
    toc = (ROOT / "_toc.yml").read_text()
    listed = set(re.findall(r"file:\s*(book/[\w/-]+)", toc))
    on_disk = {f"book/{p.stem}" for p in chapters()}
    assert on_disk <= listed, f"chapters missing from _toc.yml: {sorted(on_disk - listed)}"
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md")), f"{entry} listed but missing"


def test_every_citation_has_a_bib_entry():
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "book/references.bib").read_text()))
    sources = [p.read_text() for p in (ROOT / "book").glob("*.ipynb")] + [(ROOT / "book/intro.md").read_text()]
    cited = {k.strip() for text in sources for group in re.findall(r"\{cite[pt]?\}`([^`]+)`", text) for k in group.split(",")}
    assert cited, "no citations found"
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci/run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make book" in readme


def test_readme_says_how_to_install_without_the_cuda_build():
    """Issue 43: a CPU-only user downloaded the CUDA build of torch."""
    readme = (ROOT / "README.md").read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make book" in readme
    assert "make test" in readme and "make book" in readme


def test_make_lab_opens_the_notebooks_from_the_venv_and_ci_never_runs_it():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab: \$\(STAMP\)$", makefile, re.M) and "$(BIN)/jupyter lab" in makefile
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("jupyterlab") for r in extras["book"])  # make setup installs [book,...]
    assert "make lab" in (ROOT / "README.md").read_text()
    ci = [ROOT / ".ci/run", *(ROOT / ".github/workflows").glob("*.yml")]
    for path in ci:
        assert not re.search(r"\bmake\b[^\n]*\blab\b", path.read_text()), f"{path.name} runs make lab"
    for line in re.findall(r"^(?:test|all|book)[\w-]*:.*$", makefile, re.M):
        assert not re.search(r"\blab\b", line), line


def test_every_bibliography_entry_closes_before_the_next_begins():
    """A merge that drops one closing brace breaks the whole book build (sphinxcontrib-bibtex)."""
    text = (ROOT / "book/references.bib").read_text()
    depth, line = 0, 1
    for ch in text:
        if ch == "\n":
            line += 1
        elif ch == "@":
            assert depth == 0, f"book/references.bib line {line}: an entry starts inside the previous one"
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            assert depth >= 0, f"book/references.bib line {line}: unbalanced '}}'"
    assert depth == 0, "book/references.bib: the last entry is not closed"


def test_a_bibliography_label_names_one_paper_on_every_page():
    """Each chapter lists its own references; the labels come from the whole file (calib_bib).

    pybtex makes alpha labels unique within one list only, so the two Mukhoti et al. 2020
    papers were both "MKS+20", each on other pages.
    """
    pytest.importorskip("pybtex")
    sys.path.insert(0, str(ROOT / "book/_ext"))
    try:
        import calib_bib
    finally:
        sys.path.remove(str(ROOT / "book/_ext"))
    labels = calib_bib.book_labels([ROOT / "book/references.bib"])
    assert len(set(labels.values())) == len(labels)
    assert (labels["mukhoti2020focal"], labels["mukhoti2020using"]) == ("MKS+20a", "MKS+20b")  # by title
    text = (ROOT / "book/references.bib").read_text()  # one entry per paper
    titles = [re.sub(r"\W", "", t).lower() for t in re.findall(r"^\s*title\s*=\s*\{(.+)\},?$", text, re.M)]
    assert len(titles) == len(labels) and len(set(titles)) == len(titles), "a paper has two entries"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"] == {"calib_bib": "book/_ext"}
    assert config["sphinx"]["config"]["bibtex_default_style"] == "calib"


def test_make_lab_passes_allow_root_exactly_for_root():
    def dry(uid: str) -> str:
        out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "lab", f"UID={uid}"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return next(line for line in out.splitlines() if "jupyter lab" in line)

    assert "--allow-root" in dry("0") and "--allow-root" not in dry("1000")


@pytest.mark.skipif(not (ROOT / ".venv/bin/jupyter").exists(), reason="needs the project's .venv (make setup)")
def test_make_lab_starts_as_this_user_and_serves_the_book(tmp_path):
    """As root (every container and Colab-like image) jupyter refuses to start without the flag."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token=t"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    proc = subprocess.Popen(["make", "-o", ".venv/.installed", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline, status = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None and status is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token=t", timeout=2).status
            except OSError:
                time.sleep(1)
        why = proc.stderr.read()[-500:] if proc.poll() is not None else ""
        assert status == 200, f"jupyter lab did not serve (exit {proc.poll()}): {why}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_make_api_installs_the_docs_extra_alone():
    """Issue 43: `make api` installed the book's, the tests' and the coursework's environment
    first. Its own stamp installs ``.[docs]``: jupyter-book and calib[all] for autodoc."""
    extras = _project()["optional-dependencies"]
    docs = _names(extras["docs"])
    assert {"jupyter-book", "sphinx-mathjax-offline", "torch-calib"} <= docs
    assert not docs & {"jupyterlab", "ipykernel", "pytest", "otter-grader", "nbval"}
    assert [_norm(r) for r in extras["book"]][0] == "torch-calib[docs]"
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(API_STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and '-e ".[docs]"' in recipe.group(1) and "book" not in recipe.group(1)
    api = re.search(r"^api: (.*)$", makefile, re.M).group(1)
    assert "$(API_STAMP)" in api and "$(wildcard $(STAMP))" in api  # the full env when it is there
    out = subprocess.run(["make", "-n", "api", "VENV=" + str(ROOT / "_build" / "no-such-venv")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '-e ".[docs]"' in out.stdout and ".[book" not in out.stdout and "jupyter-book build" in out.stdout


def test_make_api_builds_every_api_page_and_executes_nothing(tmp_path):
    """`make api`: the API reference alone, from the docstrings, in seconds."""
    import yaml

    import api_book

    api_book.write(tmp_path)
    config = yaml.safe_load((tmp_path / "_config.yml").read_text())
    toc = yaml.safe_load((tmp_path / "_toc.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "off"
    pages = {toc["root"], *(c["file"] for c in toc["chapters"])}
    assert pages == {f"book/api/{p.stem}" for p in (ROOT / "book" / "api").glob("*.md")}
    assert "api:" in (ROOT / "Makefile").read_text()


def _reachable(extra: str) -> set[str]:
    """The package names an extra installs, following its self-references (torch-calib[a,b])."""
    extras, names, todo, seen = _project()["optional-dependencies"], set(), [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            if _norm(req).startswith("torch-calib["):
                todo += _norm(req).split("[", 1)[1].split("]", 1)[0].split(",")
            else:
                names |= _names([req])
    return names


def test_the_course_extra_leaves_torchvision_out_and_brings_a_kernel():
    """Issue 44: a course-only build on a CPU torch. PyPI's torchvision pins its own torch, a CUDA
    build that can replace the CPU one, and no assignment needs it; grading runs a python3 kernel."""
    course = _reachable("course")
    assert "torchvision" not in course and "pillow" not in course
    assert {"otter-grader", "ipykernel", "scipy", "scikit-learn", "sympy", "pandas", "matplotlib"} <= course
    assert "torchvision" in _reachable("all")  # the check above can fail
    page = (ROOT / "book/coursework/instructors.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if '".[course]"' in b)
    lines = block.splitlines()
    torch = next(i for i, l in enumerate(lines) if "pip install" in l and "torch" in l)
    assert "--index-url https://download.pytorch.org/whl/cpu" in lines[torch]
    assert torch < next(i for i, l in enumerate(lines) if '".[course]"' in l)
    assert "pip uninstall -y playwright" in block  # otter's PDF export: unused, 165 MiB
