# make run: set up .venv and show gradcalc at work.  make test: set up and run the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench fuzz clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# Byte-compile now: with PYTHONDONTWRITEBYTECODE set, every start would compile the sources.
	$(BIN)/python -m compileall -q core cli
	touch $(STAMP)

run: $(STAMP)
	@$(BIN)/python -m compileall -q core cli
	$(BIN)/gradcalc grad 'sin(x)*y' --at x=1,y=2
	$(BIN)/gradcalc grad samples/tf_linear_regression.grad
	$(BIN)/gradcalc grad samples/rosenbrock.grad -f json
	$(BIN)/gradcalc jacobian samples/least_squares.grad
	$(BIN)/gradcalc check samples/

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

fuzz: $(STAMP)
	$(BIN)/python tests/fuzz_long.py --examples 20000

bench: $(STAMP)
	@$(BIN)/python -m compileall -q core cli
	$(BIN)/python bench/bench.py
