"""``open_store``: the session store the environment names (files, or PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from drivetrain.errors import ConfigError
from drivetrain.home import drivetrain_home
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.store import STORE_ENV, SessionStore


def open_store(env: Mapping[str, str] | None = None) -> SessionStore:
    """The store ``$DRIVETRAIN_SESSION_STORE`` names: a ``postgresql://`` URL, or (unset) files under
    ``$DRIVETRAIN_HOME``."""
    env = os.environ if env is None else env
    where = env.get(STORE_ENV, "").strip()
    if not where:
        return FileStore(drivetrain_home(env))
    if where.startswith(("postgresql://", "postgres://")):
        try:
            from drivetrain.sessions.postgres import PostgresStore
        except ImportError as e:
            raise ConfigError(
                f"{STORE_ENV} names PostgreSQL, which needs psycopg: pip install 'drivetrain[postgres]' ({e})"
            ) from e
        return PostgresStore(where)
    scheme = where.split(":", 1)[0]  # not the rest: it may hold a password
    raise ConfigError(
        f"{STORE_ENV} must be a postgresql:// URL or unset (files under $DRIVETRAIN_HOME), not a {scheme!r} one"
    )
