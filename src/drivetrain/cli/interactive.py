"""The interactive session: ``drivetrain`` with no ``-p`` in a terminal.

A prompt (``cli/terminal.py``), the run's events on the screen (``cli/screen.py``), approvals as numbered
choices (``cli/approve.py``) and slash commands handled here, never sent to the model (``cli/slash.py``).
Esc or Ctrl-C while a turn runs stops it: running tools are killed with their process group, every open call is
answered as interrupted and the session is saved, so the next prompt continues the same conversation. Ctrl-C
twice at an empty prompt, Ctrl-D or /exit leave.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import signal
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from prompt_toolkit import PromptSession

from drivetrain.agent import Agent, Run
from drivetrain.cli import build, slash
from drivetrain.cli.approve import TerminalApprover, file_diff
from drivetrain.cli.screen import Screen, make_console
from drivetrain.cli.terminal import RunKeys, choose, kept_terminal, prompt_session, terminal_output
from drivetrain.control.approval import PendingCall
from drivetrain.control.permissions import PermissionMode, Policy
from drivetrain.loop.compaction import estimate_tokens
from drivetrain.loop.events import Finished, ModelResponded
from drivetrain.mcp.config import ServerSpec
from drivetrain.mcp.group import McpServers
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.models.resolve import detect_provider
from drivetrain.pricing import Wrapper, cost_usd, format_usd, window_of
from drivetrain.sessions.open import open_store
from drivetrain.sessions.report import attempts_text
from drivetrain.small.attempts import AttemptEvent, Attempts
from drivetrain.small.prompts import named_files

if TYPE_CHECKING:
    from drivetrain.models.local import GenerationProgress, GenerationStats

# what Shift-Tab cycles through, as in Claude Code
MODES: tuple[PermissionMode, ...] = ("default", "acceptEdits", "plan")
MENTION = re.compile(r"(?<!\S)@(\S+)")


@runtime_checkable
class _Measured(Protocol):
    """The local model: it measures its own generation."""

    last_stats: GenerationStats | None
    live: GenerationProgress | None  # the generation running now, if any


class Streamed:
    """The agent's model, telling the screen as a reply starts, streams its text and ends."""

    def __init__(self, inner: Model, screen: Screen):
        self.inner, self.screen, self.name = inner, screen, inner.name

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)  # the context window, the local model's n_ctx …

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.screen.model_started(self.live_rate)
        tokens, rate = 0, None
        try:
            response = await self.inner.respond(dataclasses.replace(request, on_text=self.screen.model_text))
            tokens, rate = response.usage.output_tokens, self.generation_rate()
            return response
        finally:
            self.screen.model_stopped(tokens, rate)

    def _local(self) -> _Measured | None:
        """The local model under any wrappers (it measures its own generation), else None."""
        model: object = self.inner
        while not isinstance(model, _Measured):
            if not isinstance(model, Wrapper):
                return None
            model = model.inner
        return model

    def generation_rate(self) -> float | None:
        """llama.cpp's tokens/s from the first token to the last (the local model's ``last_stats``), if known."""
        local = self._local()
        stats = local.last_stats if local is not None else None
        return stats.generation_tokens_per_s or None if stats is not None else None

    def live_rate(self) -> float | None:
        """Tokens/s of the local model's generation while it runs (tool calls included, which stream no
        text), None before its first token or for a remote model."""
        local = self._local()
        live = local.live if local is not None else None
        return live.tokens_per_s() if live is not None else None


class TerminalUI:
    """Where approvals are asked: the screen, and the keys for as long as the question is open."""

    def __init__(self, session: Session):
        self.session = session
        self.screen = session.screen
        self.questions: PromptSession[str] | None = None  # its own: a prompt's settings stick to its session

    def show_call(self, call: PendingCall, text: str) -> None:
        self.screen.pause()
        self.screen.show_call(call, text)

    def say(self, text: str) -> None:
        self.screen.say(text)

    async def choose(self, options: list[str]) -> int | None:
        self.screen.pause()
        try:
            return await choose(options, self.screen.glyphs.pointer)
        except KeyboardInterrupt:  # cancels the run like Ctrl-C anywhere in it: calls answered, session saved
            self.session.stopped_by("SIGINT")
            raise asyncio.CancelledError from None

    async def ask(self, question: str) -> str:
        try:
            self.questions = self.questions or PromptSession(output=terminal_output())
            return await self.questions.prompt_async(question)
        except KeyboardInterrupt:
            self.session.stopped_by("SIGINT")
            raise asyncio.CancelledError from None


class Session:
    """One terminal session: the agent, the current run (None before the first prompt) and the screen."""

    def __init__(self, args: argparse.Namespace, cwd: Path, servers: McpServers | None = None):
        self.args, self.cwd, self.servers = args, cwd, servers
        self.store = open_store()
        self.session_id = str(uuid.uuid4())
        self.provider = args.provider or detect_provider(dict(os.environ))
        self.screen = Screen(make_console(), diff_of=lambda call: file_diff(call, cwd))
        self.screen.status = self.status
        self.ui = TerminalUI(self)
        self.agent: Agent = build.build_agent(
            args,
            cwd,
            self.session_id,
            store=self.store,
            servers=servers,
            approver_factory=lambda cwd, policy: TerminalApprover(self.ui, cwd, policy),
        )
        self.agent.model = Streamed(self.agent.model, self.screen)
        policy = self.agent.policy
        assert isinstance(policy, Policy)  # build_agent's: its mode and rules are shown and changed here
        self.policy = policy
        self.modes = MODES + ((policy.mode,) if policy.mode not in MODES else ())
        self.run: Run | None = None
        self.context_used: int | None = None  # tokens the last request sent
        self.prompt = prompt_session(cwd, slash.HELP, self.status, self.cycle_mode)
        self.keys = RunKeys()

    # -- what the status line says

    def status(self) -> str:
        sep = f" {self.screen.glyphs.sep} "
        model = self.agent.model.name
        parts = [
            model if model.startswith(self.provider) else f"{self.provider}/{model}",
            self.session_id[:8],
            f"ctx {_k(self.context_tokens())}/{_k(window_of(self.agent.model))}",
        ]
        if self.provider == "local":
            rate = self.screen.last_rate
            parts.append(f"{rate:.1f} tok/s" if rate else "- tok/s")
        else:
            parts.append(format_usd(cost_usd(model, self.run.usage)) if self.run else "$0")
        parts.append(self.policy.mode)
        return sep.join(parts)

    def context_tokens(self) -> int:
        if self.context_used is not None:
            return self.context_used
        return estimate_tokens(self.run.history, self.agent.system) if self.run else 0

    def cycle_mode(self) -> None:
        policy = self.policy
        policy.mode = self.modes[(self.modes.index(policy.mode) + 1) % len(self.modes)]

    # -- sessions

    def switch_to(self, session_id: str, run: Run | None) -> None:
        """Go on in another session (/clear: a new one; /resume: a saved one); the audit log follows."""
        self.session_id, self.run, self.context_used = session_id, run, None
        audit = build.audit_log(self.agent)
        if audit is not None:
            audit.session_id = session_id

    def use_model(self, model: Model) -> None:
        """/model NAME: the same conversation, its next requests to ``model``."""
        self.agent.model = Streamed(model, self.screen)
        if self.run is not None:
            self.run = self.agent.load(self.session_id)  # a run's parts are made once, with the model it had

    def stopped_by(self, how: str) -> None:
        """What the session's interrupted record will say stopped the run (Ctrl-C at a question, SIGTERM)."""
        if self.run is not None:
            self.run.cancelled_by = how

    # -- the conversation

    async def main(self, first_prompt: str) -> int:
        a = self.agent
        self.screen.say(
            f"drivetrain {self.screen.glyphs.sep} {a.model.name} {self.screen.glyphs.sep} "
            f"{self.policy.mode} mode {self.screen.glyphs.sep} {self.cwd}",
            "bold",
        )
        self.screen.note("/help for commands, @ to attach a file, Esc to stop a turn, /exit to leave")
        if self.args.resume or self.args.continue_latest:  # as /resume, before the first prompt
            if await slash.run(self, f"/resume {self.args.resume or '--latest'}") is slash.FAILED:
                return 1
        prompt, armed = first_prompt, False
        while True:
            if not prompt:
                try:
                    prompt = (await self.prompt.prompt_async("> ")).strip()
                except EOFError:
                    return 0
                except KeyboardInterrupt:
                    if armed:
                        return 0
                    armed = True
                    self.screen.note("(press Ctrl-C again to exit)")
                    continue
            armed = False
            if slash.is_command(prompt):
                if await slash.run(self, prompt) is slash.EXIT:
                    return 0
            elif prompt:
                await self.turn(self.with_mentions(prompt))
            prompt = ""

    def with_mentions(self, prompt: str) -> str:
        """The prompt with the files it @-mentions attached, numbered as ``cat -n`` numbers them."""
        names = list(dict.fromkeys(MENTION.findall(prompt)))
        if not names:
            return prompt
        policy = self.policy

        def readable(path: str) -> bool:
            return policy.decide("Read", {"file_path": path}, self.cwd).behavior != "deny"

        shown = named_files(self.cwd, " ".join(names), readable, files=len(names), lines=200, chars=20_000)
        attached = re.findall(r"^\$ cat -n (\S+)$", shown, re.M)
        for name in names:
            if name in attached:
                self.screen.note(f"(attached {name})")
            else:
                self.screen.error(f"@{name}: not attached (not a readable text file in {self.cwd})")
        return f"{prompt}\n\nThe files mentioned:\n{shown}" if shown else prompt

    async def turn(self, prompt: str) -> None:
        if self.run is None and (k := build.attempts_wanted(self.args, self.agent)) > 1:
            # A new session's first task runs as k attempts (small/attempts.py); the next prompts continue the
            # winner's conversation as one run.
            attempts = build.attempts(
                self.args,
                self.agent,
                prompt,
                self.session_id,
                k,
                store=self.store,
                servers=self.servers,
                approver_factory=lambda cwd, policy: TerminalApprover(self.ui, cwd, policy),
            )
            await self.interruptible(self._drive_attempts(attempts))
            return
        if self.run is None:
            self.run = self.agent.start(prompt, session_id=self.session_id)
        else:
            self.run.submit(prompt)  # the same session, one more user turn
        await self.interruptible(self._drive(self.run))

    async def interruptible(self, work: Awaitable[None]) -> None:
        """Do ``work`` (a turn, a compaction) so that Esc, Ctrl-C or SIGINT stop it and the prompt comes back."""
        run, loop = self.run, asyncio.get_running_loop()
        task = asyncio.ensure_future(work)

        def stop(how: str) -> None:
            if not task.done():
                if run is not None:
                    run.cancelled_by = how  # what the session's interrupted record says
                task.cancel()

        loop.add_signal_handler(signal.SIGINT, stop, "SIGINT")
        try:
            with self.keys.watch(stop):
                await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the session itself is ending (SIGTERM)
            self.screen.end(interrupted=True)
            self.screen.say("(interrupted: the session is saved; say what to do next)", "yellow")
        except Exception as e:  # a harness bug must not end the session: the run's value is still valid
            self.screen.end()
            self.screen.error(f"internal error: {type(e).__name__}: {e}")
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            ignore_sigint()
            self.screen.end()

    async def _drive(self, run: Run) -> None:
        async for event in run:
            if isinstance(event, ModelResponded):
                u = event.response.usage
                self.context_used = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            self.screen.event(event)

    async def _drive_attempts(self, attempts: Attempts) -> None:
        """Each attempt's events under its own heading, then the attempts side by side and why the winner won."""
        shown = 0
        async for event in attempts:
            if not isinstance(event, AttemptEvent):
                if isinstance(event, Finished):
                    self.screen.end()
                    for line in attempts_text([{"kind": "attempts", **(event.result.attempts or {})}], {}):
                        self.screen.say(line)
                    if not event.result.is_error:
                        self.screen.say(event.result.result)
                    self.screen.event(event)
                    self.run = self.agent.load(self.session_id)  # the winner's history: the next prompt goes on
                continue
            if event.attempt != shown:
                shown = event.attempt
                self.screen.end()
                self.screen.say(f"attempt {shown} of {attempts.k}", "bold")
            if isinstance(event.event, Finished):
                ended = event.event.result
                self.screen.end()
                self.screen.note(f"(attempt {shown} ended: {ended.subtype} after {ended.num_turns} turns)")
            else:
                self.screen.event(event.event)


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}".removesuffix(".0") + "k" if tokens >= 1000 else str(tokens)


async def interactive(args: argparse.Namespace, cwd: Path) -> int:
    servers = await build.start_servers(args, cwd, ask=trust_project_server)
    try:
        return await _session(Session(args, cwd, servers))
    finally:
        await servers.close()


async def _session(session: Session) -> int:
    main = asyncio.current_task()
    assert main is not None  # a coroutine runs in a task
    loop = asyncio.get_running_loop()

    def terminate() -> None:  # a run in progress is stopped and saved first
        session.stopped_by("SIGTERM")
        main.cancel()

    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await session.main(session.args.prompt or "")
    except asyncio.CancelledError:
        return 143
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def trust_project_server(spec: ServerSpec) -> bool:
    """Asked once per project MCP server, before it ever runs: a cloned repository must not run code on open."""
    question = (
        f"The project's {spec.source} wants to start the MCP server {spec.name!r}:\n  {spec.command_line()}\n"
        "Start it (now and in later sessions here)? [y/N] "
    )
    try:
        answer = await asyncio.to_thread(input, question)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def run_interactive(args: argparse.Namespace, cwd: Path) -> int:
    previous = signal.getsignal(signal.SIGINT)
    with kept_terminal():
        ignore_sigint()
        try:
            return asyncio.run(interactive(args, cwd))
        finally:
            signal.signal(signal.SIGINT, previous)


def ignore_sigint() -> None:
    """A SIGINT between prompts (a Ctrl-C typed while the terminal is not in raw mode) does nothing: by default it
    would end the session (asyncio cancels the main task). At a prompt and in a turn, Ctrl-C has its own meaning."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)
