# calib: the two commands a reader needs are `make book` and `make test`.
# Everything below installs itself: a fresh machine needs only Python 3.11 and pip.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HTML   := _build/html
ASSIGNMENTS := _build/assignments
# Chapters and the book always execute at the CPU scale unless told otherwise.
export CALIB_PROFILE ?= quick
export PYTHONHASHSEED := 0

.PHONY: all setup lab ledger audit book book-html api assignments test test-unit test-unit-fast test-grading test-lane-smoke test-notebooks test-notebooks-and-book test-colab test-colab-colab test-colab-paper lint lint-workflows test-browser test-browser-only bench chromium fashion-mnist clean help

all: setup

help:
	@echo "make book   build the book into $(HTML) (chapters run two at a time, one thread each; times printed)"
	@echo "make api    the API reference alone from the docstrings (seconds; no chapter runs)"
	@echo "make lab    open the book's notebooks in JupyterLab from $(VENV) (readers; not run in CI)"
	@echo "make test   ruff, unit/property/parity tests, nbval over every chapter, built-book browser check"
	@echo "make test-colab  the colab and paper branches of every chapter in smoke mode on synthetic data"
	@echo "make bench  speed comparisons (ratios against baselines run side by side)"
	@echo "make audit  execute the training chapters at 5 seed offsets x 1-2 threads; records in results/audit"
	@echo "make assignments  coursework: student notebooks and autograders in $(ASSIGNMENTS)"
	@echo "make clean  remove build outputs (keeps $(VENV))"

# The virtual environment, rebuilt when the dependency files change.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[book,test,course]"
	touch $(STAMP)

setup: $(STAMP)

# The API reference needs only the docs extra (jupyter-book and calib[all] for autodoc): its
# own stamp, unless the whole environment above is installed already.
API_STAMP := $(VENV)/.installed-docs
$(API_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[docs]"
	touch $(API_STAMP)

# For readers and students: JupyterLab on book/ with the kernel of $(VENV) (never run by CI).
# Jupyter refuses to start as root without --allow-root, and containers and Colab-like
# images run as root: the flag is passed exactly when the user is root.
UID ?= $(shell id -u)
LAB_ARGS ?=
lab: $(STAMP)
	@echo "lab: open the http://localhost:8888/lab?token=... address printed below; Ctrl+C stops it"
	$(BIN)/jupyter lab --notebook-dir=book $(if $(filter 0,$(UID)),--allow-root) $(LAB_ARGS)

# Coursework (book/assignments/, otter-grader): <name>/student/ to hand out and
# <name>/autograder/<name>-autograder.zip to grade with `otter run`. Add --publish to
# tools/build_assignments.py to refresh the book's copies in book/coursework/.
assignments: $(STAMP)
	$(BIN)/python tools/build_assignments.py --out $(ASSIGNMENTS)

# THREADS=1 pins each process to one core, so two executors can share the machine.
LIMIT := $(if $(THREADS),OMP_NUM_THREADS=$(THREADS) MKL_NUM_THREADS=$(THREADS))

# The build executes each chapter unless jupyter-cache (_build/.jupyter_cache, keyed by the
# hash of a chapter's code cells) holds its run: `make book` empties it, so a reader's
# build always runs the chapters against the calib of the checkout.
NB_CACHE := _build/.jupyter_cache

# A reader's build runs each chapter on one thread, as the test lanes do, so the pages show
# what CI checked on that CPU; a claim that fails there is shown as a note, not a stop
# (CALIB_CLAIMS=report). Sphinx's saved doctrees would let an unchanged chapter skip its
# run: gone too. tools/book_lanes.py executes the chapters two at a time (two one-thread
# lanes balanced on the chapters' times) into $(NB_CACHE) through nbval, as make test does;
# the build then reads them from the cache (it runs only a chapter that failed there) and
# the chapters' times are printed at the end, longest first.
BOOK_LANES ?= 2
book: $(STAMP) fashion-mnist
	rm -rf $(HTML) $(NB_CACHE) _build/.doctrees _build/jupyter_execute
	CALIB_CLAIMS=report $(BIN)/python tools/book_lanes.py --cache $(NB_CACHE) --lanes $(BOOK_LANES)
	$(MAKE) --no-print-directory book-html THREADS=1 CALIB_CLAIMS=report
	@$(BIN)/python tools/book_lanes.py --report

book-html: $(STAMP) fashion-mnist
	rm -rf $(HTML)
	$(LIMIT) $(if $(CALIB_CLAIMS),CALIB_CLAIMS=$(CALIB_CLAIMS)) $(BIN)/jupyter-book build . --builder html -W --keep-going
	@echo "book: open $(HTML)/index.html"

# The API reference alone (book/api, autodoc over the docstrings, -W): seconds, no chapter runs.
api: $(if $(wildcard $(STAMP)),$(STAMP),$(API_STAMP))
	rm -rf _build/api
	$(BIN)/python tools/api_book.py _build/api-config
	$(BIN)/jupyter-book build . --config _build/api-config/_config.yml --toc _build/api-config/_toc.yml \
		--path-output _build/api --builder html -W --keep-going
	@echo "api: open _build/api/_build/html/book/api/index.html"

# Unit tests first (fast failures); then two lanes, one core each. Lane 1: nbval over book/
# at the quick profile, the book build from nbval's run (book/conftest.py stores each passed
# chapter in $(NB_CACHE), so no chapter executes twice) and the built-book check. Lane 2:
# nbval of $(NB_LANE2) (into the same cache, long before lane 1 builds the book), the colab
# and paper smoke passes and the coursework's otter gradings. The chapters moved to lane 2
# balance the lanes (a fresh clone, session 12: lane 1 990 s, lane 2 1,065 s with chapters
# 12 and 10 there; jsonschema<4.25 in constraints.txt then cut about 5 CPU-s from each of
# lane 2's 29 gradings, so chapter 1 and the evidence page, 27 s at quick, moved over too).
NB_LANE2 := book/12_beyond_temperature_scaling.ipynb book/10_bench_of_regularisers.ipynb \
	book/01_measuring_calibration.ipynb book/evidence.ipynb
test: fashion-mnist lint test-unit-fast chromium
	rm -rf $(NB_CACHE)
	$(MAKE) --no-print-directory -j2 THREADS=1 test-notebooks-and-book test-lane-smoke

# ruff over the package, tests, tools and benchmarks (rules in pyproject.toml, [tool.ruff]);
# the prose statistics of every page of _toc.yml, each held to d2l's limits (issue 45).
lint: $(STAMP)
	$(BIN)/ruff check calib tests tools benchmarks
	$(BIN)/python tools/prose_stats.py --check --all

test-notebooks-and-book: $(STAMP) fashion-mnist
	$(MAKE) --no-print-directory test-notebooks CALIB_NB_CACHE=$(abspath $(NB_CACHE)) \
		NB_ARGS="book $(foreach nb,$(NB_LANE2),--ignore=$(nb))"
	$(MAKE) --no-print-directory book-html
	$(MAKE) --no-print-directory test-browser-only

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not browser" --durations=10 tests

# The unit tests less the otter gradings of the coursework (solutions, blanks and typical
# mistakes: a kernel each, ~8 CPU-minutes), which `make test` runs on the core the smoke
# passes leave idle while nbval finishes.
test-unit-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not browser and not grading" --durations=10 tests

test-grading: $(STAMP)
	$(LIMIT) $(BIN)/python -m pytest -q -p no:cacheprovider -m grading tests/test_assignments.py tests/test_assignment_variants.py

test-lane-smoke: $(STAMP)
	$(MAKE) --no-print-directory test-notebooks CALIB_NB_CACHE=$(abspath $(NB_CACHE)) NB_ARGS="$(NB_LANE2)"
	$(MAKE) --no-print-directory test-colab
	$(MAKE) --no-print-directory test-grading

NB_ARGS := book
test-notebooks: $(STAMP) fashion-mnist
	$(LIMIT) $(if $(CALIB_NB_CACHE),CALIB_NB_CACHE=$(CALIB_NB_CACHE)) $(BIN)/python -m pytest -q --nbval-lax $(NB_ARGS)

# The GPU profiles' code paths on a CPU: CALIB_SMOKE=1 caps the work (calib.profile.smoke,
# calib.train.smoke_config) and CALIB_DATA points the loaders at tiny synthetic datasets in
# the real on-disk formats (python -m calib fake-data). Claims are reported, not asserted.
FAKE_DATA := _build/fake-data
SMOKE = CALIB_SMOKE=1 CALIB_DATA=$(abspath $(FAKE_DATA)) CALIB_PROGRESS=0

$(FAKE_DATA)/.done: $(STAMP) calib/data/fake.py
	rm -rf $(FAKE_DATA)
	$(BIN)/python -m calib fake-data $(FAKE_DATA)
	touch $@

# The two smoke passes one after the other (in `make test` they share a core with nbval).
test-colab: $(STAMP)
	$(MAKE) --no-print-directory test-colab-colab
	$(MAKE) --no-print-directory test-colab-paper

# Pages whose code does not branch on the profile (tests/test_book_style.py checks it):
# their smoke passes would only repeat nbval's run of them on synthetic data.
SMOKE_SKIP := book/01_measuring_calibration.ipynb book/03_loss_field_guide.ipynb \
	book/04_focal_entropy.ipynb book/14_when_losses_help.ipynb book/evidence.ipynb \
	book/conformance.ipynb
test-colab-colab test-colab-paper: test-colab-%: $(STAMP) $(FAKE_DATA)/.done
	$(LIMIT) $(SMOKE) CALIB_PROFILE=$* $(BIN)/python -m pytest -q -p no:cacheprovider --nbval-lax book \
		$(foreach nb,$(SMOKE_SKIP),--ignore=$(nb))

# GitHub Actions workflows against their JSON schema, offline (also run by the unit tests).
lint-workflows: $(STAMP)
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

test-browser: book chromium test-browser-only

test-browser-only: $(STAMP)
	$(BIN)/python -m pytest -q -m browser tests

# Debian's chromium for the built-book check; tools/ensure_chromium.sh says why when it can't.
chromium:
	@bash tools/ensure_chromium.sh

# Real images for the quick profile: Debian's dataset-fashion-mnist (as root), else one line on how.
fashion-mnist: $(STAMP)
	@bash tools/ensure_fashion_mnist.sh $(BIN)/python

bench: $(STAMP)
	@for b in benchmarks/[a-z]*.py; do echo "### $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf _build .pytest_cache .hypothesis

# The claims audit (results/audit/, calib.experiments.audit): every training chapter at five
# seed offsets x 1 and 2 threads, resumable; CHAPTERS="02_overconfidence ..." picks chapters.
audit: $(STAMP) fashion-mnist
	$(BIN)/python -m calib audit $(CHAPTERS)

# The results ledger (results/, calib.experiments.ledger): hours of one-thread CPU runs, resumable;
# LEDGER=name runs one sweep.
ledger: $(STAMP) fashion-mnist
	$(BIN)/python -m calib ledger $(LEDGER) --jobs 2
