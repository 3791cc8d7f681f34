"""Telemetry for a CLI session: on when the variables say so (the process environment, or a settings file's
``"env"``), the SDK's providers installed as the global ones for the session, and shut down at its end within a
bounded wait."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from drivetrain.control.permissions import load_settings
from drivetrain.errors import HarnessError
from drivetrain.telemetry.settings import EXPORTER_VARS, TelemetrySettings, telemetry_env
from drivetrain.telemetry.setup import install

if TYPE_CHECKING:
    from drivetrain.telemetry.export import Installed


_active: list[Installed] = []  # the session's, for an exit that cannot wait for the ``finally`` that stops it


def active_telemetry() -> Installed | None:
    return _active[-1] if _active else None


def telemetry_settings(cwd: Path, environ: Mapping[str, str] | None = None) -> TelemetrySettings:
    """What the variables say; raises ``HarnessError`` (a settings file or a value that cannot be used)."""
    files = load_settings(cwd).raw
    return TelemetrySettings.from_env(telemetry_env(os.environ if environ is None else environ, files))


def start_telemetry(cwd: Path, environ: Mapping[str, str] | None = None) -> Installed | None:
    """The session's telemetry, installed as OpenTelemetry's global providers; None when it is off. A problem
    with it is said on stderr and leaves it off: telemetry never stops a run."""
    try:
        settings = telemetry_settings(cwd, environ)
    except HarnessError as e:
        print(f"drivetrain: telemetry is off: {e}", file=sys.stderr)
        return None
    if not settings.enabled:
        return None
    if not settings.exporting:
        print(
            f"drivetrain: telemetry is on, but no exporter is chosen: set {', '.join(EXPORTER_VARS.values())} "
            "(otlp or console).",
            file=sys.stderr,
        )
        return None
    try:
        installed = install(settings)
    except HarnessError as e:
        print(f"drivetrain: {e}", file=sys.stderr)
        return None
    from opentelemetry import _logs, metrics, trace

    if installed.tracer_provider is not None:
        trace.set_tracer_provider(installed.tracer_provider)
    if installed.meter_provider is not None:
        metrics.set_meter_provider(installed.meter_provider)
    if installed.logger_provider is not None:
        _logs.set_logger_provider(installed.logger_provider)
    _active.append(installed)
    return installed


def stop_telemetry(installed: Installed | None) -> None:
    """Send what is left (waiting at most the shutdown timeout), and say what could not be delivered."""
    if installed is None or not any(i is installed for i in _active):
        return  # off, or stopped already
    _active[:] = [i for i in _active if i is not installed]
    installed.shutdown()
    if lost := {s: installed.dropped.of(s) for s in ("traces", "metrics", "logs") if installed.dropped.of(s)}:
        what = ", ".join(f"{n} {s}" for s, n in lost.items())
        print(f"drivetrain: telemetry: not delivered: {what} (is the collector up?)", file=sys.stderr)
