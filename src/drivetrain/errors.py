"""The exceptions that end a run. Tool failures never raise past the loop: they become is_error results."""

from __future__ import annotations


class HarnessError(Exception):
    """Something the run cannot continue past. The message is written for a person to act on."""


class ModelError(HarnessError):
    """The model endpoint failed: unreachable, rejected the key, answered in the wrong shape, …"""


class ConfigError(HarnessError):
    """The configuration is wrong or incomplete (missing key, unknown provider, bad model file)."""
