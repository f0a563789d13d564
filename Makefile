# make run: set up .venv and show gradcalc at work.  make test: set up and run the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench fuzz clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gradcalc grad 'sin(x)*y' --at x=1,y=2
	$(BIN)/gradcalc grad samples/tf_linear_regression.grad
	$(BIN)/gradcalc grad samples/rosenbrock.grad -f json
	$(BIN)/gradcalc jacobian samples/least_squares.grad

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

bench: $(STAMP)
	$(BIN)/python bench/bench.py
