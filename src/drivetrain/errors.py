"""The exceptions that end a run. Tool failures never raise past the loop: they become is_error results."""

from __future__ import annotations


class HarnessError(Exception):
    """Something the run cannot continue past. The message is written for a person to act on."""


class ModelError(HarnessError):
    """The model endpoint failed: unreachable, rejected the key, answered in the wrong shape, …"""

    def __init__(self, message: str, fault: str | None = None):
        super().__init__(message)
        # A passing fault of the upstream (a kind of docs/faults.md: "http_529", "cut", "timeout" …) that
        # persisted past the retries; None when retrying could not help (a key, a URL, a request refused).
        self.fault = fault


class ConfigError(HarnessError):
    """The configuration is wrong or incomplete (missing key, unknown provider, bad model file)."""
