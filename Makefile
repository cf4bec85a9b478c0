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

.PHONY: all setup book assignments test test-unit test-notebooks test-browser test-browser-only bench chromium clean help

all: setup

help:
	@echo "make book   build the book (executes every chapter) into $(HTML)"
	@echo "make test   unit/property/parity tests, nbval over every chapter, built-book browser check"
	@echo "make bench  speed comparisons (ratios against baselines run side by side)"
	@echo "make assignments  coursework: student notebooks and autograders in $(ASSIGNMENTS)"
	@echo "make clean  remove build outputs (keeps $(VENV))"

# The virtual environment, rebuilt when the dependency files change.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[book,test,course]"
	touch $(STAMP)

setup: $(STAMP)

# Coursework (book/assignments/, otter-grader): <name>/student/ to hand out and
# <name>/autograder/<name>-autograder.zip to grade with `otter run`. Add --publish to
# tools/build_assignments.py to refresh the book's copies in book/coursework/.
assignments: $(STAMP)
	$(BIN)/python tools/build_assignments.py --out $(ASSIGNMENTS)

# THREADS=1 pins each process to one core, so two executors can share the machine.
LIMIT := $(if $(THREADS),OMP_NUM_THREADS=$(THREADS) MKL_NUM_THREADS=$(THREADS))

book: $(STAMP)
	rm -rf $(HTML)
	$(LIMIT) $(BIN)/jupyter-book build . --builder html -W --keep-going
	@echo "book: open $(HTML)/index.html"

# Unit tests first (fast failures), then the two chapter executors side by side
# (nbval over book/ and the book build, one core each), then the built-book check.
test: test-unit chromium
	$(MAKE) --no-print-directory -j2 THREADS=1 test-notebooks book
	$(MAKE) --no-print-directory test-browser-only

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not browser" tests

test-notebooks: $(STAMP)
	$(LIMIT) $(BIN)/python -m pytest -q --nbval-lax book

test-browser: book chromium test-browser-only

test-browser-only: $(STAMP)
	$(BIN)/python -m pytest -q -m browser tests

# Debian's chromium for the built-book check; tools/ensure_chromium.sh says why when it can't.
chromium:
	@bash tools/ensure_chromium.sh

bench: $(STAMP)
	@for b in benchmarks/[a-z]*.py; do echo "### $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf _build .pytest_cache .hypothesis
