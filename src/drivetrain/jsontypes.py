"""JSON as it comes off the wire or out of a file: the one place drivetrain's types say ``Any``.

A value parsed from JSON (an API body, a tool's input, a settings file, a session record) is arbitrary until it is
read into a typed object; these names say that, where ``dict`` alone would say nothing and ``Any`` would hide it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonValue: TypeAlias = Any  # what json.loads returns: a str, number, bool, None, or a list or dict of these
JsonObject: TypeAlias = dict[str, Any]  # a JSON object: an API body, a tool's input, a settings entry, a record
