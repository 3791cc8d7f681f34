"""A throwaway PostgreSQL server for the tests: its own data folder, a unix socket in a temp folder, no TCP port,
stopped when the test session ends. The cluster the Debian package sets up (if it runs) is never touched.

The server binaries come from the Debian package (apt-get install postgresql). initdb refuses to run as root, so
as root the server runs as the package's ``postgres`` user. Without the binaries the tests that need the server
are skipped (and fail under DRIVETRAIN_NO_SKIP=1, see conftest.py).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

INSTALL = "apt-get install postgresql"


def server_binaries() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl, else the ones on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


@pytest.fixture(scope="session")
def postgres_dsn():
    """The URL of a fresh PostgreSQL server's ``postgres`` database (superuser ``drivetrain``, trust auth)."""
    bin_dir = server_binaries()
    if bin_dir is None:
        pytest.skip(f"the PostgreSQL server binaries (initdb, pg_ctl) are not installed: {INSTALL}")
    pytest.importorskip("psycopg", reason="pip install 'drivetrain[postgres]'")
    as_server: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="drivetrain-pg-"))  # short: a socket path has ~100 bytes at most
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip(f"running as root and there is no 'postgres' user to run the server as: {INSTALL}")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_server = ["runuser", "-u", "postgres", "--"]

    def run(*argv: str) -> None:
        done = subprocess.run([*as_server, *argv], cwd=root, capture_output=True, text=True, timeout=120)
        if done.returncode:
            log = root / "server.log"
            raise RuntimeError(
                f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                + (log.read_text() if log.exists() else "")
            )

    data = root / "data"
    run(
        str(bin_dir / "initdb"),
        "-D",
        str(data),
        "-U",
        "drivetrain",
        "--auth=trust",
        "--no-sync",
        "--encoding=UTF8",
        "--locale=C",
    )
    run(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(root / "server.log"),
        "-w",
        "-t",
        "60",
        "-o",
        f"-c listen_addresses='' -k {root} -c fsync=off -c shared_buffers=16MB",
        "start",
    )
    try:
        yield f"postgresql://drivetrain@/postgres?host={root}"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
