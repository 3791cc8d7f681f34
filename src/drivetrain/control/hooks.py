"""Hooks: the Claude Code hook system, as Python callables and as shell commands from settings.

A hook sees one event as a JSON payload and may answer with JSON; every matching
hook for an event runs concurrently and their answers merge into one
``HookOutcome``. Shell hooks follow Claude Code's protocol, so existing hook
scripts work unchanged:

- stdin: the payload. The caller builds it; the fields Claude Code passes are
  ``session_id``, ``cwd`` (also exported as ``$CLAUDE_PROJECT_DIR`` and
  ``$DRIVETRAIN_PROJECT_DIR``), ``hook_event_name`` (filled in by ``run``),
  optionally ``transcript_path`` and ``permission_mode``, and per event:
  PreToolUse ``tool_name, tool_input, tool_use_id``; PostToolUse the same plus
  ``tool_response``; UserPromptSubmit ``prompt``; Stop ``stop_hook_active``
  (true when a Stop hook already kept the model going: hooks check it to avoid
  endless loops); PreCompact ``trigger`` ("manual" | "auto").
- exit 0: stdout is read as JSON if it starts with ``{``; otherwise it is plain
  text, which is context for the model on UserPromptSubmit and ignored elsewhere.
- exit 2: a block; stderr is the reason. Any other exit code: a non-blocking
  error (reported, never fatal), as in Claude Code.
- JSON answers, both forms: top level ``decision`` ("block" | "approve"),
  ``reason``, ``continue`` (false: stop the whole run), ``stopReason``,
  ``systemMessage`` (for the user), ``suppressOutput`` (accepted, a UI matter);
  and ``hookSpecificOutput`` with ``hookEventName``, ``permissionDecision``
  ("allow" | "deny" | "ask"; Claude Code's "defer" is read as "ask"),
  ``permissionDecisionReason``, ``updatedInput``, ``additionalContext`` and
  ``updatedToolOutput`` (PostToolUse: replaces the result the model sees; Claude
  Code's MCP-only ``updatedMCPToolOutput`` is accepted as a synonym).

A Python hook gets a copy of the same payload dict and returns the same JSON
shape as a dict (or None). What the caller does with the outcome per event:

- PreToolUse: act on ``decision`` (deny > ask > allow); ``block`` is set exactly
  when the decision is deny. Run the tool with ``updated_input`` if set.
- PostToolUse: ``block`` → show ``reason`` to the model; show ``updated_output``
  instead of the result if set; append ``additional_context``.
- UserPromptSubmit: ``block`` → reject the prompt with ``reason``; else add
  ``additional_context``.
- Stop: ``block`` → do not stop: the model keeps working with ``reason``.
- PreCompact: ``block`` → the caller may skip compaction (Claude Code only
  shows stderr to the user).
- Any event: ``stop`` → end the run, telling the user ``stop_reason``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import re
import shutil
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, get_args

from drivetrain.control.permissions.rules import Behavior
from drivetrain.host.procs import child_env, kill_group, watch_group
from drivetrain.jsontypes import JsonObject, JsonValue

log = logging.getLogger("drivetrain.control.hooks")

HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "PreCompact"]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
TOOL_EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse")  # the only events whose hooks filter on a matcher
KILL_GRACE_S = 1.0  # between SIGTERM and SIGKILL for a hook that timed out

_RANK: dict[Behavior, int] = {"allow": 0, "ask": 1, "deny": 2}  # most restrictive wins

# A Python hook: the payload in, the JSON answer out (or None), directly or awaited.
HookFn = Callable[[JsonObject], JsonObject | Awaitable[JsonObject | None] | None]


@dataclass
class HookOutcome:
    """The merged result of every matching hook for one event (see the module docstring)."""

    decision: Behavior | None = None
    reason: str = ""
    updated_input: JsonObject | None = None
    block: bool = False
    additional_context: list[str] = field(default_factory=list)
    updated_output: str | None = None
    errors: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    stop: bool = False  # some hook said {"continue": false}: end the run
    stop_reason: str = ""  # its stopReason, for the user (not the model)
    system_messages: list[str] = field(default_factory=list)  # systemMessage: warnings for the user


class HookRunner(Protocol):
    """What fires hooks: ``Hooks``, ``HookChain``, or anything with their ``run``."""

    async def run(self, event: HookEvent, payload: JsonObject, *, tool_name: str | None = None) -> HookOutcome: ...


@dataclass(frozen=True)
class _Hook:
    event: HookEvent
    source: str  # the command text or the function's name: how errors and the audit log name it
    timeout: float
    matcher: re.Pattern[str] | None = None
    fn: HookFn | None = None
    command: str | None = None
    cwd: Path | None = None

    def matches(self, tool_name: str | None) -> bool:
        return self.matcher is None or self.matcher.fullmatch(tool_name or "") is not None


class Hooks:
    """The hooks of a run: register with ``add``/``add_command``/``from_settings``, fire with ``run``.

    Shell hooks get the harness's environment without its credentials (``drivetrain.host.procs.child_env``),
    plus the variables named in ``env_passthrough``.
    """

    def __init__(self, env_passthrough: Iterable[str] = ()) -> None:
        self._hooks: list[_Hook] = []
        self.env_passthrough = tuple(env_passthrough)

    def add(self, event: HookEvent, fn: HookFn, *, matcher: str | None = None, timeout: float = 60) -> None:
        """A Python hook: ``fn(payload)`` returns what a shell hook would print, as a dict, or None."""
        name = getattr(fn, "__qualname__", None) or repr(fn)
        self._hooks.append(_Hook(event, name, timeout, _compile(event, matcher), fn=fn))

    def add_command(
        self,
        event: HookEvent,
        command: str,
        *,
        matcher: str | None = None,
        timeout: float = 60,
        cwd: Path | None = None,
    ) -> None:
        """A shell hook, run with bash (or /bin/sh) in ``cwd``, else in the payload's ``cwd``."""
        self._hooks.append(_Hook(event, command, timeout, _compile(event, matcher), command=command, cwd=cwd))

    @classmethod
    def from_settings(cls, settings: list[tuple[Path, JsonObject]], env_passthrough: Iterable[str] = ()) -> Hooks:
        """Read the ``hooks`` of Claude Code settings files, in order. Malformed entries raise ValueError."""
        hooks = cls(env_passthrough)
        for path, data in settings:
            if not isinstance(data, dict):
                raise ValueError(f"{path}: settings must be a JSON object, got {type(data).__name__}")
            section = data.get("hooks")
            if section is None:
                continue
            if not isinstance(section, dict):
                raise ValueError(f"{path}: 'hooks' must be an object of event name → list, got {section!r}")
            for event, groups in section.items():
                hooks._add_groups(path, event, groups)
        return hooks

    def _add_groups(self, path: Path, event: str, groups: JsonValue) -> None:
        where = f"{path}: hooks.{event}"
        if not isinstance(groups, list):
            raise ValueError(f"{where} must be a list of {{matcher, hooks}} entries, got {groups!r}")
        if event not in HOOK_EVENTS:
            # Claude Code keeps adding events (SessionStart, Notification, ...); settings written for it
            # must still load here, so warn rather than refuse.
            log.warning("%s: drivetrain does not support %s hooks; they are ignored", where, event)
            return
        for i, group in enumerate(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                raise ValueError(f"{where}[{i}] must be an object with a 'hooks' list, got {group!r}")
            matcher = group.get("matcher")
            if matcher is not None and not isinstance(matcher, str):
                raise ValueError(f"{where}[{i}].matcher must be a string, got {matcher!r}")
            for j, entry in enumerate(group["hooks"]):
                at = f"{where}[{i}].hooks[{j}]"
                if not isinstance(entry, dict) or entry.get("type") != "command":
                    # Refuse, not skip: a skipped "prompt" or "agent" hook may be a policy nobody enforces.
                    raise ValueError(
                        f'{at}: only {{"type": "command", "command": ...}} hooks are supported, got {entry!r}'
                    )
                command, timeout = entry.get("command"), entry.get("timeout", 60)
                if not isinstance(command, str) or not command.strip():
                    raise ValueError(f"{at}: 'command' must be a non-empty string, got {command!r}")
                if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                    raise ValueError(f"{at}: 'timeout' must be a positive number of seconds, got {timeout!r}")
                try:
                    self.add_command(event, command, matcher=matcher, timeout=timeout)
                except ValueError as e:
                    raise ValueError(f"{where}[{i}]: {e}") from None

    def __bool__(self) -> bool:
        return bool(self._hooks)

    async def run(self, event: HookEvent, payload: JsonObject, *, tool_name: str | None = None) -> HookOutcome:
        """Run every hook matching ``event`` (and the tool, for tool events) concurrently; merge their answers.

        Never raises for a hook's failure: failures are in ``errors`` (and logged as warnings).
        """
        _check_event(event)
        payload = {**payload, "hook_event_name": payload.get("hook_event_name") or event}
        name = tool_name if tool_name is not None else payload.get("tool_name")
        chosen: list[_Hook] = []
        seen: set[tuple[str, str, Path | None] | tuple[str, int]] = set()
        for h in self._hooks:
            # The same command from two settings files runs once, as in Claude Code.
            key = ("command", h.command, h.cwd) if h.command is not None else ("fn", id(h))
            if h.event == event and h.matches(name) and key not in seen:
                seen.add(key)
                chosen.append(h)
        results = await asyncio.gather(*(_run_one(h, payload, self.env_passthrough) for h in chosen))
        return _merge(results)


class HookChain:
    """Several hook runners as one (an agent's own hooks, then its profile's): each runs, their answers merged."""

    def __init__(self, *runners: HookRunner | None) -> None:
        self.runners = [r for r in runners if r is not None]

    async def run(self, event: HookEvent, payload: JsonObject, *, tool_name: str | None = None) -> HookOutcome:
        return _merge([await r.run(event, payload, tool_name=tool_name) for r in self.runners])


# ---------------------------------------------------------------- running one hook


async def _run_one(h: _Hook, payload: JsonObject, env_passthrough: tuple[str, ...]) -> HookOutcome:
    try:
        if h.command is not None:
            return await _run_command(h, h.command, payload, env_passthrough)
        assert h.fn is not None  # a hook has a command or a function
        return await _run_callable(h, h.fn, payload)
    except Exception as e:  # a broken hook must not end the run: report it and carry on
        return _failed(h, f"failed: {type(e).__name__}: {e}")


async def _run_callable(h: _Hook, fn: HookFn, payload: JsonObject) -> HookOutcome:
    async def call() -> JsonValue:
        arg = copy.deepcopy(payload)  # one hook must not change what the others (or the caller) see
        out = fn(arg) if inspect.iscoroutinefunction(fn) else await asyncio.to_thread(fn, arg)
        return await out if inspect.isawaitable(out) else out

    try:
        out = await asyncio.wait_for(call(), h.timeout)
    except TimeoutError:
        # An async hook is cancelled; a sync one cannot be stopped and finishes in its thread, unheard.
        return _failed(h, f"timed out after {h.timeout:g}s")
    if out is None:
        return HookOutcome()
    if not isinstance(out, dict):
        return _failed(h, f"returned {type(out).__name__}, expected a dict or None")
    return _interpret(h, out)


async def _run_command(h: _Hook, command: str, payload: JsonObject, env_passthrough: tuple[str, ...]) -> HookOutcome:
    env = child_env(env_passthrough)
    if payload.get("cwd"):
        env["CLAUDE_PROJECT_DIR"] = env["DRIVETRAIN_PROJECT_DIR"] = str(payload["cwd"])
    proc = await asyncio.create_subprocess_exec(
        shutil.which("bash") or "/bin/sh",
        "-c",
        command,
        cwd=h.cwd or payload.get("cwd") or None,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )  # its own process group, so a timeout kills its children too
    watch_group(proc.pid)
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload, default=str).encode()), h.timeout)
    except TimeoutError:
        await _kill_group(proc, KILL_GRACE_S)
        return _failed(h, f"timed out after {h.timeout:g}s and was killed")
    finally:
        if proc.returncode is None:  # cancelled while running: no grace
            await _kill_group(proc, 0)
    stdout, stderr = out.decode(errors="replace").strip(), err.decode(errors="replace").strip()
    if proc.returncode == 2:
        return _blocked(h, stderr or f"blocked by hook {h.source!r} (exit 2, no reason given)")
    if proc.returncode != 0:
        return _failed(h, f"exited with code {proc.returncode}" + (f": {stderr}" if stderr else ""))
    if stdout.startswith("{"):
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError as e:
            return _failed(h, f"printed invalid JSON ({e}): {stdout[:200]}")
        return _interpret(h, data)
    if stdout and h.event == "UserPromptSubmit":
        return HookOutcome(additional_context=[stdout], sources=[h.source])
    return HookOutcome()


async def _kill_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the hook's process group, SIGKILL what is left after ``grace`` seconds, reap the shell."""
    await kill_group(proc.pid, grace)
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        log.warning("hook process %d did not exit after SIGKILL", proc.pid)


# ---------------------------------------------------------------- reading answers


def _interpret(h: _Hook, data: JsonObject) -> HookOutcome:
    """One hook's JSON answer as an outcome; bad fields are reported and skipped, the rest still counts."""
    o, problems = HookOutcome(), []
    decision = data.get("decision")
    if decision == "block":
        o.block, o.reason = True, _text(data.get("reason"))
        o.decision = "deny" if h.event == "PreToolUse" else None
    elif decision == "approve":
        o.decision, o.reason = ("allow", _text(data.get("reason"))) if h.event == "PreToolUse" else (None, "")
    elif decision not in (None, ""):
        problems.append(f"unknown decision {decision!r}")
    if data.get("continue") is False:
        o.stop, o.stop_reason = True, _text(data.get("stopReason"))
    if data.get("systemMessage"):
        o.system_messages.append(_text(data["systemMessage"]))
    specific = data.get("hookSpecificOutput") or {}
    if not isinstance(specific, dict):
        problems.append(f"hookSpecificOutput must be an object, got {specific!r}")
    elif specific.get("hookEventName") not in (None, h.event):
        problems.append(f"hookSpecificOutput is for {specific['hookEventName']}, not {h.event}: ignored")
    else:
        _read_specific(h, specific, o, problems)
    if h.event == "PreToolUse":
        o.block = o.decision == "deny"
    if problems:
        o.errors.append(_report(h, "; ".join(problems)))
    if o != HookOutcome(errors=o.errors):
        o.sources.append(h.source)
    return o


def _read_specific(h: _Hook, s: JsonObject, o: HookOutcome, problems: list[str]) -> None:
    pd = s.get("permissionDecision")
    if pd is not None:
        pd = "ask" if pd == "defer" else pd  # a pause for a human is our nearest to Claude Code's defer
        if pd in _RANK:
            # permissionDecision supersedes the older top-level decision, as in Claude Code
            o.decision, o.reason = pd, _text(s.get("permissionDecisionReason")) or o.reason
        else:
            problems.append(f"unknown permissionDecision {pd!r}")
    if "updatedInput" in s:
        if isinstance(s["updatedInput"], dict):
            o.updated_input = s["updatedInput"]
        else:
            problems.append(f"updatedInput must be an object, got {s['updatedInput']!r}")
    if s.get("additionalContext"):
        o.additional_context.append(_text(s["additionalContext"]))
    new_output = s.get("updatedToolOutput", s.get("updatedMCPToolOutput"))
    if new_output is not None:
        o.updated_output = new_output if isinstance(new_output, str) else json.dumps(new_output)


def _merge(results: list[HookOutcome]) -> HookOutcome:
    """Deterministic, in registration order: decisions by rank, lists concatenated, updates last-wins."""
    out = HookOutcome()
    for r in results:
        if r.decision and (out.decision is None or _RANK[r.decision] > _RANK[out.decision]):
            out.decision = r.decision
        out.block |= r.block
        out.stop |= r.stop
        if r.updated_input is not None:
            out.updated_input = r.updated_input
        if r.updated_output is not None:
            out.updated_output = r.updated_output
        for name in ("additional_context", "errors", "sources", "system_messages"):
            getattr(out, name).extend(getattr(r, name))
    # The reason is the deciding hooks' reasons: who blocked, or who chose the winning decision.
    deciders = (
        [r for r in results if r.block]
        if out.block
        else [r for r in results if out.decision and r.decision == out.decision]
    )
    out.reason = "\n".join(r.reason for r in deciders if r.reason)
    out.stop_reason = "\n".join(r.stop_reason for r in results if r.stop_reason)
    return out


def _blocked(h: _Hook, reason: str) -> HookOutcome:
    return HookOutcome(
        block=True, reason=reason, decision="deny" if h.event == "PreToolUse" else None, sources=[h.source]
    )


def _failed(h: _Hook, what: str) -> HookOutcome:
    return HookOutcome(errors=[_report(h, what)])


def _report(h: _Hook, what: str) -> str:
    message = f"{h.event} hook {h.source!r} {what}"
    log.warning("%s", message)  # loud now, and kept in the outcome for the audit log
    return message


def _text(value: JsonValue) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _check_event(event: str) -> None:
    if event not in HOOK_EVENTS:
        raise ValueError(f"unknown hook event {event!r}; the events are {', '.join(HOOK_EVENTS)}")


def _compile(event: str, matcher: str | None) -> re.Pattern[str] | None:
    _check_event(event)
    if event not in TOOL_EVENTS or matcher in (None, "", "*"):
        return None
    try:
        return re.compile(matcher)
    except re.error as e:
        raise ValueError(f"matcher {matcher!r} is not a valid regular expression: {e}") from None
