"""Where drivetrain keeps its own files: user settings, session logs (``sessions/``) and their index."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path


def drivetrain_home(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``$DRIVETRAIN_HOME`` (made absolute), or ``.drivetrain`` in ``home`` (default: the user's home).

    ``env`` defaults to ``os.environ``. Nothing is created here.
    """
    env = os.environ if env is None else env
    if env.get("DRIVETRAIN_HOME"):
        return Path(os.path.expanduser(env["DRIVETRAIN_HOME"])).absolute()
    return (home or Path.home()) / ".drivetrain"


def session_outputs(session_id: str) -> Path:
    """Where a session's full tool outputs are saved: ``$DRIVETRAIN_HOME/sessions/<id>/outputs``."""
    return drivetrain_home() / "sessions" / safe_name(session_id) / "outputs"


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "_"
