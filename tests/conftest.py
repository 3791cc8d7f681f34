"""Every test runs with a home of its own, so a developer's ``~/.drivetrain`` (settings, rules, hooks) cannot
change a result and no audit log lands in their real home.

With DRIVETRAIN_NO_SKIP=1 (set by .ci/run), a skipped test fails: CI installs everything the tests need
(ripgrep, bubblewrap, the local model), so a skip there means something is missing, not optional."""

import os
from pathlib import Path

import pytest

from drivetrain.models.weights import cache_dir
from pg import postgres_dsn  # noqa: F401  (a throwaway PostgreSQL server, for the session store tests)
from phoenix_server import phoenix  # noqa: F401  (a throwaway Arize Phoenix, for the telemetry tests)

# The assembled local models (and the disk cache of their system turns' KV state) stay where they are: a gigabyte
# is not rebuilt per test. Set once, before any fixture: a module-scoped model is made before _own_home runs.
os.environ.setdefault("DRIVETRAIN_CACHE_DIR", str(cache_dir().parent))


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory, monkeypatch):
    """HOME and DRIVETRAIN_HOME point into a fresh folder; subprocesses (the CLI, the pty) inherit them.

    DRIVETRAIN_CACHE_DIR stays as set above.
    """
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home / ".drivetrain"))
    # the local model in the test's own process, as before: tests/test_resident_model.py tests the resident one
    monkeypatch.setenv("DRIVETRAIN_LOCAL_DAEMON", "0")
    return home


def _file_seconds() -> dict[str, float]:
    """tests/durations.txt: the seconds each file took in a whole run (tests/durations.py writes it)."""
    text = (Path(__file__).parent / "durations.txt").read_text()
    rows = (line.split(maxsplit=1) for line in text.splitlines() if line and not line.startswith("#"))
    return {path: float(seconds) for seconds, path in rows}


def pytest_xdist_auto_num_workers(config):
    """-n auto: two workers a core. Many tests wait on a process, a server or a timeout, and two workers on two cores
    kept them busy 1.4 cores of 2; four ran the suite in 4:43 against 5:32 (docs/performance.md)."""
    return 2 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def pytest_collection_modifyitems(config, items):
    """The longest files first, each file's tests in their order: pytest-xdist hands files out in this order
    (--no-loadscope-reorder), so the last ones to start are short and no worker waits long for the other at the
    end. A file not in the list yet goes first: it may be long."""
    seconds = _file_seconds()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], float("inf")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("DRIVETRAIN_NO_SKIP") and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but DRIVETRAIN_NO_SKIP is set: {report.longrepr}"


# pytest-xdist's workers are started with COLUMNS=80 and LINES=24 in their environment; a terminal program the
# tests start in a pty of their own size would take those over it. A worker's environment is the parent's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)
