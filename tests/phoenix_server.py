"""A throwaway Arize Phoenix for the telemetry tests: started from a virtualenv of its own (``.venv-phoenix``, made by
``make phoenix``, which ``make test`` runs), on free ports of 127.0.0.1, with a temp working folder (its SQLite
database), stopped when the test session ends. Its spans are read back with Phoenix's own client, in that virtualenv
(``tests/phoenix_read.py``).

Phoenix has a virtualenv of its own because it pins ``anthropic<2`` (drivetrain runs on 2.x) and brings 97 packages.
Without that virtualenv the tests that need Phoenix are skipped (and fail under DRIVETRAIN_NO_SKIP=1, see conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

VENV = Path(__file__).resolve().parent.parent / ".venv-phoenix"
READ = Path(__file__).resolve().parent / "phoenix_read.py"
START_TIMEOUT_S = 180.0  # about 25 s on the project's 2-core machine under load


@dataclass(frozen=True)
class Phoenix:
    url: str  # the UI, the REST API and OTLP over HTTP (/v1/traces)
    grpc_url: str  # OTLP over gRPC
    python: Path  # the interpreter of Phoenix's virtualenv, where its client is
    started_in_s: float

    def spans(self, session_id: str, at_least: int, timeout_s: float = 30.0) -> list[dict]:
        """The spans of the trace whose root span has this ``session.id``, read with Phoenix's client, once it holds
        ``at_least`` of them (Phoenix stores what it receives in batches) or ``timeout_s`` has passed."""
        argv = [str(self.python), str(READ), self.url, session_id, str(at_least), str(timeout_s)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 60)
        if done.returncode:
            raise RuntimeError(f"phoenix_read.py failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        spans: list[dict] = json.loads(done.stdout)
        return spans


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def phoenix():
    """A Phoenix server of its own for the session; skipped when ``.venv-phoenix`` is not there."""
    serve = VENV / "bin" / "phoenix"
    if not serve.exists():
        pytest.skip(f"Arize Phoenix's virtualenv is not there ({VENV}): make phoenix")
    work = Path(tempfile.mkdtemp(prefix="drivetrain-phoenix-"))
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",  # no usage reports leave the machine
    }
    url = f"http://127.0.0.1:{port}"
    log = (work / "server.log").open("w")
    started = time.monotonic()
    server = subprocess.Popen([str(serve), "serve"], env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    try:
        while not ready(url):
            if server.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"Phoenix did not start ({server.returncode}):\n{(work / 'server.log').read_text()}")
            time.sleep(0.2)
        yield Phoenix(url, f"http://127.0.0.1:{grpc_port}", VENV / "bin" / "python", time.monotonic() - started)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
