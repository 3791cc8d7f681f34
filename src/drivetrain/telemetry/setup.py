"""Telemetry switched on for a process: the OpenTelemetry SDK's providers made from ``TelemetrySettings``
(``export.py``), or, without the SDK, a message saying what to install.

The SDK is the ``otel`` extra: nothing imports it unless telemetry is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drivetrain.errors import ConfigError
from drivetrain.telemetry.settings import INSTALL_HINT, TelemetrySettings

if TYPE_CHECKING:
    from drivetrain.telemetry.export import Installed


def install(settings: TelemetrySettings) -> Installed:
    """The providers for ``settings``, exporting in the background. Raises ``ConfigError`` without the SDK."""
    try:
        from drivetrain.telemetry.export import install as install_sdk
    except ImportError as e:
        raise ConfigError(
            "Telemetry is on (DRIVETRAIN_ENABLE_TELEMETRY or CLAUDE_CODE_ENABLE_TELEMETRY), but the OpenTelemetry "
            f"SDK is not installed ({e.name or e}): {INSTALL_HINT}"
        ) from None
    return install_sdk(settings)
