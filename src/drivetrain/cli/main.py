"""``drivetrain``: the command line. ``-p`` runs one task non-interactively, as ``claude -p`` does."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import io
import json
import os
import select
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Literal, get_args

from drivetrain.agent import Run
from drivetrain.cli import build
from drivetrain.cli.describe import describe
from drivetrain.cli.model import apply_settings
from drivetrain.cli.telemetry import active_telemetry, start_telemetry, stop_telemetry
from drivetrain.control.permissions import PermissionMode, Policy
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.events import (
    INTERVENTIONS,
    Compacted,
    Event,
    Finished,
    LimitApproaching,
    LimitReached,
    LoopDetected,
    ModelResponded,
    PermissionDecided,
    ResultsSent,
    ToolCalled,
    ToolFinished,
)
from drivetrain.loop.result import RunResult
from drivetrain.mcp.group import McpServers
from drivetrain.models.resolve import PROVIDERS
from drivetrain.pricing import turn_usage, usage_line
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import SessionNotFound
from drivetrain.small.attempts import AttemptEvent, Attempts

PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
SUBCOMMANDS = {  # name -> "module:function" in drivetrain.cli, run with the rest of argv; imported only when used
    "serve": "serve:main",  # a local model behind an Anthropic/OpenAI-compatible HTTP API
    "rewind": "rewind:main",  # put the workspace back as it was before a prompt of a session
    "sessions": "sessions:main",  # the saved sessions; one's turn log and health signals
    "report": "report:main",  # a session's turns, tokens, context and cost as a self-contained HTML page
    "plan": "plan:plan_main",  # structured graph mode: ask for a plan as a DAG of steps …
    "apply": "plan:apply_main",  # … and carry one out
    "run": "plan:run_main",  # the old name of `apply`, for one release
    "mcp": "mcp:main",  # the MCP servers drivetrain uses (list, get, add, remove), and `mcp serve`: its tools as one
    "model": "model:main",  # the resident local model process: status, stop
    "batch": "batch:main",  # many tasks, each a session in a scratch workspace, here or on Ray; and their report
}
# the subcommands that run agents in this process (telemetry as -p has it), and serve (a span per request)
TRACED = ("plan", "apply", "run", "batch", "serve")
OutputFormat = Literal["text", "json", "stream-json"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = get_args(OutputFormat)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="drivetrain", description="A coding agent: the LLM agent loop, done properly.")
    p.add_argument("prompt", nargs="?", help="the task (stdin is appended when piped)")
    p.add_argument(
        "-p",
        "--print",
        dest="print_mode",
        action="store_true",
        help="run the task non-interactively and print the result",
    )
    p.add_argument("--output-format", choices=OUTPUT_FORMATS, default="text")
    add_run_arguments(p)
    p.add_argument("--verbose", action="store_true", help="print the turn log on stderr")
    p.add_argument(
        "-r",
        "--resume",
        metavar="SESSION_ID",
        default=None,
        help="continue a saved session (repaired first if it was cut short)",
    )
    p.add_argument(
        "-c",
        "--continue",
        dest="continue_latest",
        action="store_true",
        help="continue the latest session in this directory",
    )
    p.add_argument(
        "--fork-session",
        action="store_true",
        help="with --resume/--continue: continue as a new session, leaving the old one as it was",
    )
    build.add_arguments(p)
    return p


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that say how a run runs (model, turns, permissions, system prompt); ``batch`` takes them too."""
    p.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="cap on model requests; this and the other --max-* limits count from the prompt that "
        "starts this invocation (a resumed session gets them whole, as in Claude Code)",
    )
    p.add_argument("--model", default=None)
    p.add_argument(
        "--no-daemon",
        action="store_true",
        help="load the local model in this process, not in the shared resident one (any subcommand takes it)",
    )
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="default: anthropic if ANTHROPIC_* is set, openai if OPENAI_* is set, else local",
    )
    p.add_argument(
        "--permission-mode",
        choices=PERMISSION_MODES,
        default=None,
        help="default: the settings files' defaultMode, else default",
    )
    p.add_argument("--system-prompt", default=None, help="replace the default system prompt")
    p.add_argument("--append-system-prompt", default=None, help="add to the system prompt")


def _printable_everywhere() -> None:
    """Text the terminal's encoding cannot show (an ASCII locale, PYTHONIOENCODING=ascii) is printed as '?', not
    raised: the help and the answers hold characters such as "…" and Chinese."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _printable_everywhere()
    if argv[:1] == ["graph"]:  # the loop's states and edges, as Mermaid, from the code
        if argv[1:] == ["--layers"]:  # the package's layers are a development check now, beside the tests
            print(
                "drivetrain: the package's layers are drawn by `python tests/layers.py` in a source checkout.",
                file=sys.stderr,
            )
            return 2
        from drivetrain.loop.graph import mermaid

        print(mermaid())
        return 0
    argv = apply_settings(argv)  # --no-daemon, and the resident model's settings
    if argv[:1] == ["compact"]:  # replace a saved session's history by a summary, now
        return asyncio.run(_compact(argv[1:]))
    if argv and argv[0] in SUBCOMMANDS:
        module, _, function = SUBCOMMANDS[argv[0]].partition(":")
        subcommand: Callable[[list[str]], int] = getattr(importlib.import_module(f"drivetrain.cli.{module}"), function)
        if argv[0] not in TRACED:
            return subcommand(argv[1:])
        installed = start_telemetry(Path.cwd())
        try:
            return subcommand(argv[1:])
        finally:
            stop_telemetry(installed)
    args = build_parser().parse_args(argv)
    if args.fork_session and not (args.resume or args.continue_latest):
        print("drivetrain: --fork-session goes with --resume SESSION_ID or --continue.", file=sys.stderr)
        return 2
    prompt = _read_prompt(args) if args.print_mode else ""
    if args.print_mode and not prompt and not (args.resume or args.continue_latest):
        print("drivetrain: -p needs a prompt (as an argument or on stdin).", file=sys.stderr)
        return 2
    installed = start_telemetry(Path.cwd())  # None unless DRIVETRAIN_ENABLE_TELEMETRY / CLAUDE_CODE_… say so
    try:
        if not args.print_mode:
            return _interactive(args)
        try:
            return asyncio.run(_print_mode(args, prompt))
        except KeyboardInterrupt:
            print("drivetrain: interrupted.", file=sys.stderr)
            return 130
    finally:
        stop_telemetry(installed)


def _read_prompt(args: argparse.Namespace) -> str:
    prompt = args.prompt or ""
    if sys.stdin is None or sys.stdin.isatty():
        return prompt.strip()
    # With a prompt given, read stdin only if something is there: an open pipe nobody writes to must not hang.
    if not prompt or select.select([sys.stdin], [], [], 0.5)[0]:
        piped = sys.stdin.read()
        if piped.strip():
            prompt = f"{prompt}\n\n{piped}" if prompt else piped
    return prompt.strip()


async def _print_mode(args: argparse.Namespace, prompt: str) -> int:
    try:  # the MCP servers start first, together, each within its start timeout (MCP_TIMEOUT)
        servers = await build.start_servers(args, Path.cwd())
    except HarnessError as e:
        return _fail(args, str(e))
    try:
        return await _print_run(args, prompt, servers)
    finally:
        await servers.close()


async def _print_run(args: argparse.Namespace, prompt: str, servers: McpServers) -> int:
    cwd = Path.cwd()
    try:
        store = open_store()
        resume_id = args.resume
        if args.continue_latest:
            latest = store.latest(str(cwd))
            if latest is None:
                return _fail(args, f'no saved session in {cwd} to continue; start one with -p "PROMPT".')
            resume_id = latest.session_id
        session_id = str(uuid.uuid4()) if resume_id is None or args.fork_session else resume_id
        agent = build.build_agent(args, cwd, session_id, store=store, servers=servers)
        # What the command has imported and built lives until it exits: out of the collector's way, each full
        # collection of a long run walks only what the run made (it walked the ~200,000 objects of the imports)
        gc.freeze()
        run: Run | Attempts
        if resume_id is None and (k := build.attempts_wanted(args, agent)) > 1:
            run = build.attempts(args, agent, prompt, session_id, k, store=store, servers=servers)
        elif resume_id is None:
            run = agent.start(prompt, session_id=session_id)
        else:
            run = agent.resume(resume_id, prompt or None, fork=args.fork_session, fork_id=session_id)
    except (HarnessError, SessionNotFound, ValueError) as e:
        return _fail(args, str(e))
    out = Output(args, run)
    out.init()
    signals = _stop_on_signals(run)
    try:
        async for event in run:
            out.event(event)
    except asyncio.CancelledError:
        if not signals:
            raise
        # Run.step saved the run (every open call answered as interrupted): say how to go on, and leave now,
        # without waiting for a model thread or anything else still finishing.
        print(
            f"drivetrain: interrupted ({signals[0]}); session saved. Continue it with: "
            f'drivetrain -p --resume {run.session_id} "…"',
            file=sys.stderr,
            flush=True,
        )
        if args.output_format != "text":
            out._emit(
                {
                    "type": "result",
                    "subtype": "error_interrupted",
                    "is_error": True,
                    "result": "",
                    "num_turns": run.num_turns,
                    "session_id": run.session_id,
                    "signal": signals[0],
                }
            )
        sys.stdout.flush()
        stop_telemetry(active_telemetry())  # the interrupted run's spans too (bounded; a second signal exits at once)
        os._exit(130 if signals[0] == "SIGINT" else 143)
    return 1 if run.result.is_error else 0


async def _compact(argv: list[str]) -> int:
    """``drivetrain compact SESSION_ID [model flags]``: the PreCompact hook fires with trigger "manual"."""
    args = build_parser().parse_args(argv[1:] + ["-p"]) if argv else None
    if args is None or not argv[0] or argv[0].startswith("-"):
        print("usage: drivetrain compact SESSION_ID [--provider … --model …]", file=sys.stderr)
        return 2
    try:
        store = open_store()
        run = build.build_agent(args, Path.cwd(), argv[0], store=store).load(argv[0])
        before = len(run.history)
        events = await run.compact()
    except (HarnessError, SessionNotFound, ValueError, RuntimeError) as e:
        print(f"drivetrain: {e}", file=sys.stderr)
        return 1
    done = [e for e in events if isinstance(e, Compacted)]
    if not done or done[0].failed:
        print(f"drivetrain: compaction failed: {done[0].failed if done else 'nothing happened'}", file=sys.stderr)
        return 1
    print(
        f"compacted {argv[0]}: {before} messages, about {done[0].tokens_before:,} tokens → "
        f"{len(run.history)} messages, about {done[0].tokens_after:,} tokens"
    )
    return 0


def _stop_on_signals(run: Run | Attempts) -> list[str]:
    """SIGINT/SIGTERM cancel the run (tools killed, open calls answered, the session saved); a second one
    exits at once — the log is still loadable, each record being one flushed line."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None  # called from the run's task
    got: list[str] = []

    def stop(name: str) -> None:
        if got:
            os._exit(130 if name == "SIGINT" else 143)
        got.append(name)
        # The second signal must end the process even when the orderly stop is stuck in a blocking call (a
        # store write on a hung disk or database): the loop's handler would wait for the loop, but a plain
        # handler runs as soon as the signal interrupts that call.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_at_once)
        run.cancelled_by = name
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig.name)
    return got


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    os._exit(130 if signum == signal.SIGINT else 143)


def _interactive(args: argparse.Namespace) -> int:
    from drivetrain.cli.interactive import run_interactive

    if not sys.stdin.isatty():
        print('drivetrain: interactive mode needs a terminal; use -p "PROMPT" in scripts.', file=sys.stderr)
        return 2
    if args.fork_session:
        print("drivetrain: --fork-session works with -p only, for now.", file=sys.stderr)
        return 2
    try:
        return run_interactive(args, Path.cwd())
    except HarnessError as e:
        print(f"drivetrain: {e}", file=sys.stderr)
        return 1


def _fail(args: argparse.Namespace, message: str) -> int:
    if args.output_format == "text":
        print(f"drivetrain: {message}", file=sys.stderr)
    else:
        print(
            json.dumps(
                {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "is_error": True,
                    "result": message,
                    "num_turns": 0,
                }
            )
        )
    return 1


class Printer:
    """JSON lines on stdout (json, stream-json), the log on stderr (--verbose)."""

    def __init__(self, args: argparse.Namespace):
        self.format: OutputFormat = args.output_format
        self.verbose: bool = args.verbose

    def _emit(self, obj: JsonObject) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def _log(self, line: str) -> None:
        if self.verbose:
            print(line, file=sys.stderr, flush=True)


class Output(Printer):
    """Writes a run's events in the chosen format on stdout, and the turn log on stderr."""

    def __init__(self, args: argparse.Namespace, run: Run | Attempts):
        super().__init__(args)
        self.args = args
        self.run = run
        self.denials: list[JsonObject] = []
        self.attempt: int | None = None  # the attempt whose event is being written, if the run has several

    def _emit(self, obj: JsonObject) -> None:
        super()._emit(obj if self.attempt is None else {**obj, "attempt": self.attempt})

    def _log(self, line: str) -> None:
        super()._log(line if self.attempt is None else f"[attempt {self.attempt}] {line}")

    def init(self) -> None:
        agent = self.run.agent
        self._log(f"drivetrain: model {agent.model.name}, cwd {agent.cwd}")
        if self.format == "stream-json":
            self._emit(
                {
                    "type": "system",
                    "subtype": "init",
                    "session_id": self.run.session_id,
                    "model": agent.model.name,
                    "cwd": str(agent.cwd),
                    "tools": list(self.run.deps.tools),
                    "permissionMode": agent.policy.mode if isinstance(agent.policy, Policy) else "bypassPermissions",
                }
            )

    def event(self, event: Event | AttemptEvent) -> None:
        if isinstance(event, AttemptEvent):
            self.attempt = event.attempt
            try:
                if isinstance(event.event, Finished):  # one attempt's end: the run's result comes after them all
                    ended = event.event.result
                    why = f" ({ended.note})" if ended.note else ""
                    self._log(f"ended: {ended.subtype} after {ended.num_turns} turns{why}")
                    if self.format == "stream-json":
                        self._emit(
                            {**ended.to_json(), "type": "system", "subtype": "attempt_result", "outcome": ended.subtype}
                        )
                else:
                    self.event(event.event)
            finally:
                self.attempt = None
            return
        sid = self.run.session_id
        match event:
            case ModelResponded(turn=turn, response=r):
                usage = turn_usage(self.run.agent.model.name, r.usage)
                self._log(f"[turn {turn}] stop_reason={r.stop_reason}  {usage_line(usage)}")
                if r.message.text.strip():  # the plan line before a call, or the answer
                    self._log(f'  " {" ".join(r.message.text.split())[:160]}')
                if self.format == "stream-json":
                    self._emit(
                        {
                            "type": "assistant",
                            "message": {
                                "id": r.id,
                                "type": "message",
                                "role": "assistant",
                                "model": r.model,
                                "content": [b.to_wire() for b in r.content],
                                "stop_reason": r.stop_reason,
                                "usage": r.usage.to_wire(),
                            },
                            "session_id": sid,
                        }
                    )
                    self._emit(
                        {
                            "type": "system",
                            "subtype": "turn_usage",
                            "turn": turn,
                            "stop_reason": r.stop_reason,
                            **usage,
                            "session_id": sid,
                        }
                    )
            case ToolCalled(call=c):
                self._log(f"  → {c.name} {json.dumps(c.input, ensure_ascii=False)[:200]}")
            case PermissionDecided(call=c, behavior=behavior, by=by, reason=reason):
                if behavior != "allow":
                    self._log(f"  ! {c.name} {behavior} by {by}: {reason[:200]}")
                    self.denials.append({"tool_name": c.name, "tool_use_id": c.id, "tool_input": c.input})
                if self.format == "stream-json":
                    self._emit(
                        {
                            "type": "system",
                            "subtype": "permission",
                            "tool_use_id": c.id,
                            "tool_name": c.name,
                            "decision": behavior,
                            "decided_by": by,
                            "reason": reason,
                            "session_id": sid,
                        }
                    )
            case ToolFinished(result=res):
                mark = "✗" if res.is_error else "←"
                self._log(f"  {mark} {res.text[:100]!r}")
            case ResultsSent(message=m):
                if self.format == "stream-json":
                    self._emit({"type": "user", "message": m.to_wire(), "session_id": sid})
            case LoopDetected() | LimitApproaching() | LimitReached() | Compacted():
                self._log(f"  ! {describe(event)}")
                if self.format == "stream-json":
                    self._emit(
                        {"type": "system", "subtype": INTERVENTIONS[type(event)], **asdict(event), "session_id": sid}
                    )
            case Finished(result=res):
                self._finish(res)

    def _finish(self, res: RunResult) -> None:
        self._log("trajectory: " + " → ".join(res.trajectory))
        if res.attempts is not None:
            self._log(
                f"attempts: {res.attempts.get('count')}, chosen {res.attempts.get('chosen')}: "
                f"{res.attempts.get('reason')}"
            )
        if res.note:
            print(f"drivetrain: {res.note}", file=sys.stderr)
        if self.format == "text":
            if res.subtype in ("error_during_execution", "error_upstream"):
                print(f"drivetrain: {res.result}", file=sys.stderr)
            elif res.result:
                print(res.result)
        else:
            self._emit({**res.to_json(), "permission_denials": self.denials})


if __name__ == "__main__":
    sys.exit(main())
