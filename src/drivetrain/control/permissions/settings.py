"""Loading permissions from settings files and command-line flags.

Files, highest precedence first: ``.drivetrain/settings.local.json`` and
``.drivetrain/settings.json`` in the project, then the user's ``settings.json`` in
``$DRIVETRAIN_HOME`` (default ``~/.drivetrain``). Each may hold::

    {"permissions": {"allow": [...], "ask": [...], "deny": [...],
                     "additionalDirectories": [...], "defaultMode": "default"}}

Rules from every source apply together (deny before ask before allow); ``defaultMode`` comes
from the most specific file that sets it. ``{"shellEnvironment": {"passthrough": ["GITHUB_TOKEN", "AWS_*"]}}``
names the variables Bash, hooks and the sandbox get although drivetrain would withhold them (see
``drivetrain.host.procs``); the names from every file add up. A file that is not valid JSON, has an unknown key
under ``permissions``, or holds a rule that does not parse is an error naming the file and
the rule; a missing file is simply absent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from drivetrain.home import drivetrain_home
from drivetrain.host.sandbox import Sandbox
from drivetrain.jsontypes import JsonObject

from .rules import BEHAVIORS, Rule, RuleError, SettingsError, parse_rule

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions"]
MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
PERMISSION_KEYS = (*BEHAVIORS, "additionalDirectories", "defaultMode")


@dataclass
class Settings:
    rules: list[Rule] = field(default_factory=list)
    additional_dirs: list[Path] = field(default_factory=list)
    default_mode: PermissionMode | None = None
    files: list[Path] = field(default_factory=list)  # the files that were found and read
    raw: list[tuple[Path, JsonObject]] = field(default_factory=list)  # each file's whole JSON, in the order of files
    env_passthrough: list[str] = field(default_factory=list)  # shellEnvironment.passthrough, from every file


def settings_files(project_dir: Path, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """Most specific first: local, project, user."""
    d = Path(project_dir) / ".drivetrain"
    return [d / "settings.local.json", d / "settings.json", drivetrain_home(env, home) / "settings.json"]


def check_mode(mode: str, source: str) -> PermissionMode:
    if mode not in MODES:
        raise SettingsError(f"Unknown permission mode {mode!r} in {source}; use one of: {', '.join(MODES)}")
    return mode


def load_settings_file(path: Path, home: Path) -> Settings | None:
    """One file's permissions; None if it does not exist. Relative paths are from its project root."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SettingsError(f"Cannot read settings file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SettingsError(f"Cannot read settings file {path}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SettingsError(
            f"Settings file {path} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}"
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(f"Settings file {path} must hold a JSON object, not {type(data).__name__}")
    out = Settings(files=[path], raw=[(path, data)], env_passthrough=_passthrough(data, path))
    perms = data.get("permissions")
    if perms is None:
        return out
    if not isinstance(perms, dict):
        raise SettingsError(f'In {path}: "permissions" must be an object with keys {", ".join(PERMISSION_KEYS)}')
    unknown = sorted(set(perms) - set(PERMISSION_KEYS))
    if unknown:
        raise SettingsError(
            f'In {path}: unknown key(s) under "permissions": {", ".join(unknown)}; '
            f"the known keys are {', '.join(PERMISSION_KEYS)}"
        )
    root = path.parent.parent  # the project root: the folder holding .drivetrain/
    for behavior in BEHAVIORS:
        for text_rule in _string_list(perms, behavior, path):
            out.rules.append(parse_rule(text_rule, behavior, str(path), root, home))
    for d in _string_list(perms, "additionalDirectories", path):
        d = str(home) + d[1:] if d == "~" or d.startswith("~/") else d
        out.additional_dirs.append(Path(os.path.normpath(root / d)))
    if "defaultMode" in perms:
        mode = perms["defaultMode"]
        if not isinstance(mode, str):
            raise SettingsError(f"In {path}: permissions.defaultMode must be a string, one of {', '.join(MODES)}")
        out.default_mode = check_mode(mode, str(path))
    return out


def _passthrough(data: JsonObject, path: Path) -> list[str]:
    section = data.get("shellEnvironment", {})
    names = section.get("passthrough", []) if isinstance(section, dict) else None
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) and n for n in names)
        or set(section) - {"passthrough"}
    ):
        raise SettingsError(f'In {path}: "shellEnvironment" must be like {{"passthrough": ["GITHUB_TOKEN", "AWS_*"]}}')
    return names


def _string_list(perms: JsonObject, key: str, path: Path) -> list[str]:
    value = perms.get(key, [])
    if not isinstance(value, list):
        raise SettingsError(f"In {path}: permissions.{key} must be a list of strings, not {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RuleError(str(path), json.dumps(item), f"permissions.{key}[{i}] must be a string")
    return value


def load_settings(project_dir: Path, env: Mapping[str, str] | None = None, home: Path | None = None) -> Settings:
    """Every settings file's permissions merged: rules in order local, project, user."""
    home = home or Path.home()
    merged = Settings()
    for path in settings_files(project_dir, env, home):
        s = load_settings_file(path, home)
        if s is None:
            continue
        merged.rules.extend(s.rules)
        merged.additional_dirs.extend(s.additional_dirs)
        merged.files.append(path)
        merged.raw.extend(s.raw)
        merged.env_passthrough.extend(s.env_passthrough)
        if merged.default_mode is None:
            merged.default_mode = s.default_mode
    return merged


def make_sandbox(forced: bool, cwd: Path, extra_writable: Sequence[Path | str], settings: Settings) -> Sandbox | None:
    """Bash's sandbox when ``forced`` (``--sandbox``) or a settings file turns it on, checked to work (fail closed,
    before the
    model is even asked); None when it is off."""
    sections = [_sandbox_section(path, data) for path, data in settings.raw]
    if not (forced or any(s.get("enabled") for s in sections)):
        return None
    sandbox = Sandbox(cwd, extra_writable=list(extra_writable), allow_network=any(s.get("network") for s in sections))
    sandbox.check()
    return sandbox


def _sandbox_section(path: Path, data: JsonObject) -> JsonObject:
    section = data.get("sandbox", {})
    if not isinstance(section, dict):
        raise SettingsError(f'In {path}: "sandbox" must be an object like {{"enabled": true, "network": false}}')
    return section
