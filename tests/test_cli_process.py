"""tests/cli_process.py: a CLI forked from the zygote behaves as the console script started anew."""

import os
import signal
import subprocess
import time

import pytest

import cli_process
from cli_process import DRIVETRAIN, ForkedProcess


@pytest.fixture(autouse=True)
def _forked(monkeypatch):
    monkeypatch.delenv("DRIVETRAIN_TEST_SUBPROCESS", raising=False)


def both(args, **kwargs):
    """The same command as a real subprocess and through cli_process (which must have forked it)."""
    real = subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)
    forked = cli_process.run(args, capture_output=True, text=True, timeout=60, **kwargs)
    return real, forked


def test_the_forked_cli_gives_the_same_exit_status_output_and_errors_in_the_given_folder_and_environment(tmp_path):
    env = {**os.environ, "DRIVETRAIN_HOME": str(tmp_path / "home")}
    for args in ([DRIVETRAIN, "--help"], [DRIVETRAIN, "sessions", "list"], [DRIVETRAIN, "--no-such-flag"]):
        real, forked = both(args, cwd=tmp_path, env=env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == 2 and "--no-such-flag" in real.stderr
    assert str(tmp_path) in both([DRIVETRAIN, "sessions", "list"], cwd=tmp_path, env=env)[1].stderr  # its cwd


def test_a_forked_cli_is_a_process_of_its_own_that_a_signal_ends(tmp_path):
    env = {**os.environ, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "sk-test"}
    proc = cli_process.Popen(
        [DRIVETRAIN, "-p"], cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert isinstance(proc, ForkedProcess) and proc.pid != os.getpid()
    time.sleep(0.2)
    assert proc.poll() is None  # reading its prompt from stdin
    assert os.readlink(f"/proc/{proc.pid}/cwd") == str(tmp_path)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    proc.stdin.close()
    proc.stdout.close()


def test_what_the_zygote_cannot_take_over_gets_a_real_process(tmp_path):
    other_locale = {**os.environ, "LC_ALL": "C.UTF-8"}
    proc = cli_process.Popen([DRIVETRAIN, "--help"], env=other_locale, stdout=subprocess.DEVNULL)
    assert isinstance(proc, subprocess.Popen) and proc.wait(60) == 0
    proc = cli_process.Popen(["true"])
    assert isinstance(proc, subprocess.Popen) and proc.wait(60) == 0
