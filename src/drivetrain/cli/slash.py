"""Slash commands of the interactive session: handled here, never sent to the model.

Each reads or changes the session (``SlashSession``: what ``cli/interactive.py``'s ``Session`` offers) with what
the other parts already provide: the session log and its report (``sessions/``), compaction (``Run.compact``),
checkpoints (``sessions/rewind.py``), the policy's rules and the model resolver.
"""

from __future__ import annotations

import difflib
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from enum import Enum
from pathlib import Path
from typing import Protocol

from drivetrain.agent import Agent, Run
from drivetrain.cli.approve import TerminalApprover, local_settings, remove_project_rule
from drivetrain.cli.screen import Screen
from drivetrain.cli.sessions import resolve
from drivetrain.control.permissions import Policy
from drivetrain.errors import HarnessError
from drivetrain.loop.context import history_tokens
from drivetrain.loop.events import Compacted
from drivetrain.mcp.group import McpServers
from drivetrain.messages import CHARS_PER_TOKEN
from drivetrain.models.base import Model
from drivetrain.models.resolve import resolve_model
from drivetrain.pricing import cost_usd, format_usd, window_of
from drivetrain.sessions import report
from drivetrain.sessions.store import SessionNotFound, SessionStore
from drivetrain.tools.base import tool_spec


class Chooser(Protocol):
    async def choose(self, options: list[str]) -> int | None: ...


class SlashSession(Protocol):
    """What a slash command reads and changes of the interactive session (``cli.interactive.Session`` is one)."""

    agent: Agent
    run: Run | None
    screen: Screen
    store: SessionStore
    servers: McpServers | None
    policy: Policy
    session_id: str
    cwd: Path
    provider: str
    context_used: int | None

    @property
    def ui(self) -> Chooser: ...

    def switch_to(self, session_id: str, run: Run | None) -> None: ...
    def use_model(self, model: Model) -> None: ...
    async def interruptible(self, work: Awaitable[None]) -> None: ...


class Outcome(Enum):
    """What a command tells the session, besides what it printed (nothing: go on)."""

    EXIT = "exit"  # what /exit returns
    FAILED = "failed"  # what a command that could not be done returns


EXIT, FAILED = Outcome.EXIT, Outcome.FAILED
HELP = {
    "/help": "the commands",
    "/cost": "tokens in/out/cache and USD so far (/cost turns: per request)",
    "/context": "how much of the context window is used, by part",
    "/compact": "summarise the conversation now (/compact FOCUS: what to keep)",
    "/clear": "start a new session (this one stays saved)",
    "/resume": "go back to a saved session of this directory (/resume ID)",
    "/rewind": "put the files back as they were before a prompt of this session",
    "/model": "the model in use (/model NAME: switch, same provider)",
    "/permissions": "the permission rules (/permissions remove N: take rule N out)",
    "/trace": "this session's turn log, trajectory and health signals",
    "/mcp": "the MCP servers of this session, their state and tools",
    "/exit": "leave",
}
COMMAND = re.compile(r"/[A-Za-z][\w-]*(?=\s|$)")  # "/etc/hosts is missing" is a prompt, not a command


def is_command(text: str) -> bool:
    return COMMAND.match(text) is not None


async def run(session: SlashSession, text: str) -> Outcome | None:
    name, _, arg = text.partition(" ")
    handler = COMMANDS.get(name.lower())
    if handler is None:
        close = difflib.get_close_matches(name.lower(), list(HELP), n=1)
        session.screen.error(f"unknown command {name}" + (f" (did you mean {close[0]}?)" if close else ""))
        session.screen.note("/help lists the commands; nothing was sent to the model.")
        return None
    try:
        return await handler(session, arg.strip())
    except (HarnessError, SessionNotFound, ValueError, OSError) as e:
        session.screen.error(f"{name}: {e}")
        return FAILED


async def help_(s: SlashSession, arg: str) -> None:
    width = max(map(len, HELP))
    for name, about in HELP.items():
        s.screen.say(f"  {name.ljust(width)}  {about}")
    s.screen.note(
        "  @path attaches a file; Esc-Enter or a trailing \\ starts a new line.\n"
        "  Shift-Tab cycles the permission mode; Esc or Ctrl-C stops a turn."
    )


async def exit_(s: SlashSession, arg: str) -> Outcome:
    return EXIT


async def cost(s: SlashSession, arg: str) -> None:
    run = s.run
    if run is None:
        s.screen.say("No requests yet in this session.")
        return
    u, model = run.usage, s.agent.model.name
    usd = cost_usd(model, u)
    money = (
        "none: the model runs on this machine"
        if s.provider == "local"
        else format_usd(usd)
        if usd is not None
        else f"unknown (no price for {model})"
    )
    s.screen.say(f"Total cost:  {money}")
    s.screen.say(
        f"Tokens:      {u.input_tokens:,} in, {u.output_tokens:,} out, {u.cache_read_input_tokens:,} cache "
        f"read, {u.cache_creation_input_tokens:,} cache write"
    )
    rate = s.screen.last_rate if s.provider == "local" else None
    s.screen.say(f"Requests:    {run.num_turns}" + (f" (last reply {rate:.1f} tokens/s)" if rate else ""))
    if arg == "turns":
        for t in report.turn_log(s.store.read(s.session_id)):
            tu = t.usage  # as the session log recorded it
            s.screen.say(
                f"  turn {t.turn:>3}  {t.stop_reason or '?':<10} {tu.get('input_tokens', 0):>7,} in "
                f"{tu.get('output_tokens', 0):>6,} out {tu.get('cache_read_input_tokens', 0):>7,} cache read  "
                f"{report.cost_text(t.cost_usd)}"
            )


async def context(s: SlashSession, arg: str) -> None:
    # as the profile equips the run: its own prompt and tools
    system, tools = (s.run.deps.system, list(s.run.deps.tools.values())) if s.run else (s.agent.system, s.agent.tools)
    window = window_of(s.agent.model)
    parts = [
        ("system prompt", len(system) // CHARS_PER_TOKEN),
        (f"tools ({len(tools)})", len(json.dumps([tool_spec(t) for t in tools])) // CHARS_PER_TOKEN),
        ("messages", history_tokens(s.run.history) if s.run else 0),
    ]
    used = sum(n for _, n in parts)
    s.screen.say(
        f"Context: about {used:,} of {window:,} tokens ({used / window:.0%})"
        + (f"; the last request sent {s.context_used:,}" if s.context_used is not None else "")
    )
    for name, n in parts + [("free", max(window - used, 0))]:
        s.screen.say(f"  {name:<15} {n:>9,}  {n / window:>4.0%}")
    s.screen.note(f"  compacted by itself at {s.agent.compact_at:.0%} of the window; /compact does it now")


async def compact(s: SlashSession, arg: str) -> None:
    run = s.run
    if run is None or not run.history:
        s.screen.say("Nothing to compact yet.")
        return

    async def work() -> None:
        for event in await run.compact(arg):
            if isinstance(event, Compacted):
                if event.failed:
                    s.screen.error(f"Compaction failed: {event.failed}")
                else:
                    s.context_used = None
                    s.screen.say(f"Compacted: about {event.tokens_before:,} -> {event.tokens_after:,} tokens.")

    await s.interruptible(work())


async def clear(s: SlashSession, arg: str) -> None:
    old = s.session_id
    s.switch_to(str(uuid.uuid4()), None)
    s.screen.say(
        f"New session {s.session_id[:8]}."
        + (f" The last one ({old[:8]}) is saved: /resume goes back to it." if s.store.info(old) is not None else "")
    )


async def resume(s: SlashSession, arg: str) -> None:
    if arg == "--latest":  # drivetrain --continue
        latest = s.store.latest(str(s.cwd))
        if latest is None:
            raise SessionNotFound(f"no saved session in {s.cwd} to continue")
        chosen = latest.session_id
    elif arg:
        chosen = resolve(s.store, arg)
    else:
        found = [i for i in s.store.list(cwd=str(s.cwd), limit=9) if i.session_id != s.session_id]
        if not found:
            s.screen.say(f"No other saved session in {s.cwd}.")
            return
        labels = [
            f"{i.session_id[:8]}  {i.updated_at[:16].replace('T', ' ')}  {i.num_turns} turns  "
            f"{' '.join((i.first_prompt or '').split())[:40]}"
            for i in found
        ]
        picked = await s.ui.choose(labels)
        if picked is None:
            return
        chosen = found[picked].session_id
    run = s.agent.load(chosen)
    s.switch_to(chosen, run)
    history = run.history
    last = next((m.text for m in reversed(history) if m.role == "assistant" and m.text.strip()), "")
    s.screen.say(f"Resumed {chosen[:8]}: {len(history)} messages, {run.num_turns} requests so far.")
    if last:
        s.screen.note(f"  last answer: {' '.join(last.split())[:200]}")


async def rewind(s: SlashSession, arg: str) -> None:
    checkpoints = s.agent.checkpoints
    if checkpoints is None:
        s.screen.say("No checkpoints: they are taken inside a git work tree, unless --no-checkpoints is given.")
        return
    found = checkpoints.list(s.session_id)
    if not found:
        s.screen.say("No checkpoints in this session yet (one is taken before each prompt).")
        return
    prompts = [m.text for m in s.run.history if m.role == "user" and m.text.strip()] if s.run else []
    labels = [
        f"before prompt {c.prompt} ({c.time.astimezone().strftime('%H:%M:%S')})"
        + (f": {' '.join(prompts[c.prompt - 1].split())[:50]}" if c.prompt <= len(prompts) else "")
        for c in found
    ]
    picked = await s.ui.choose(labels)
    if picked is None:
        return
    done = checkpoints.restore(s.session_id, found[picked].prompt)
    s.screen.say(
        f"Files as before prompt {done.to}: {len(done.restored)} restored, {len(done.removed)} removed, "
        f"{done.unchanged} unchanged. Undo: drivetrain rewind {s.session_id} --to {done.undo}"
    )


async def model(s: SlashSession, arg: str) -> None:
    if not arg:
        s.screen.say(f"Model: {s.agent.model.name} ({s.provider}). /model NAME switches to another.")
        return
    s.use_model(resolve_model(s.provider, arg))
    s.screen.say(f"Model: {s.agent.model.name}.")


async def permissions(s: SlashSession, arg: str) -> None:
    policy = s.policy
    if arg.startswith("remove"):
        number = arg.removeprefix("remove").strip()
        if not number.isdigit() or not 1 <= int(number) <= len(policy.rules):
            s.screen.error(f"/permissions remove N: N is a rule's number, 1 to {len(policy.rules)}")
            return
        rule = policy.rules.pop(int(number) - 1)
        if isinstance(s.agent.approver, TerminalApprover):
            s.agent.approver.session_rules.discard(rule.text)
        where = "for this session"
        if Path(rule.source) == local_settings(s.cwd) and rule.behavior == "allow":
            where = f"and from {remove_project_rule(s.cwd, rule.text, policy.home)}"
        elif rule.source not in ("session", "check"):
            where += f" (it is still in {rule.source})"
        s.screen.say(f"Removed {rule.behavior} {rule.text} {where}.")
        return
    s.screen.say(f"Permission mode: {policy.mode} (Shift-Tab cycles it)")
    if not policy.rules:
        s.screen.say("No rules: every call that is not read-only inside the workspace is asked about.")
    for i, rule in enumerate(policy.rules, 1):
        s.screen.say(f"  {i:>2}. {rule.behavior:<5} {rule.text}   ({rule.source})")
    if policy.rules:
        s.screen.note("  /permissions remove N takes rule N out.")


async def trace(s: SlashSession, arg: str) -> None:
    records = s.store.read(s.session_id) if s.store.info(s.session_id) is not None else []
    if not records:
        s.screen.say("Nothing in this session yet.")
        return
    s.screen.say(report.render_text(records))


async def mcp(s: SlashSession, arg: str) -> None:
    servers = s.servers
    connections = servers.connections if servers is not None else []
    if servers is None or not connections:
        s.screen.say(
            "No MCP servers in this session. Add one with `drivetrain mcp add NAME -- CMD ARGS…` (or a "
            "project's .mcp.json, once approved); see docs/mcp.md."
        )
        return
    allowed = {t.name for t in servers.tools(s.policy)}
    for c in connections:
        where = c.spec.url if c.spec.transport != "stdio" else " ".join([c.spec.command, *c.spec.args])  # no env values
        s.screen.say(f"  {c.spec.name}: " + (c.failed or f"connected · {len(c.tools)} tools"))
        s.screen.note(f"    {where}")
        for tool in c.tools:
            name = f"mcp__{c.spec.name}__{tool.name}"
            s.screen.say(f"      {name}" + ("" if name in allowed else "   (denied by a rule: not offered)"))


COMMANDS: dict[str, Callable[[SlashSession, str], Awaitable[Outcome | None]]] = {
    "/help": help_,
    "/mcp": mcp,
    "/exit": exit_,
    "/quit": exit_,
    "/cost": cost,
    "/context": context,
    "/compact": compact,
    "/clear": clear,
    "/resume": resume,
    "/rewind": rewind,
    "/model": model,
    "/permissions": permissions,
    "/trace": trace,
}
