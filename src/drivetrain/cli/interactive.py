"""Interactive mode: a conversation in the terminal, with approvals asked as they come up.

Ctrl-C stops the current run (its history stays valid, so the conversation goes
on); Ctrl-D or /exit leaves.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Callable

from drivetrain.loop.events import (
    ApprovalRequired, Compacted, Finished, ModelResponded, PermissionDecided, ToolCalled, ToolFinished,
)
from drivetrain.agent import Agent, Run


def render(event, say: Callable[[str], None]) -> None:
    match event:
        case ModelResponded(response=r):
            if r.message.text.strip():
                say(r.message.text.strip())
        case ToolCalled(call=c):
            say(f"→ {c.name} {json.dumps(c.input, ensure_ascii=False)[:200]}")
        case PermissionDecided(behavior="deny", reason=reason):
            say(f"✗ denied: {reason[:200]}")
        case ToolFinished(result=res):
            first = res.text.strip().splitlines()[0][:120] if res.text.strip() else ""
            say(f"{'✗' if res.is_error else '←'} {first}")
        case ApprovalRequired(pending=p):
            say(f"(paused: {len(p)} call(s) waiting for approval)")
        case Finished(result=res) if res.is_error:
            say(f"[{res.subtype}] {res.note or res.result}")


async def interactive(make_agent: Callable[..., Agent], first_prompt: str, session_id: str,
                      banner: Callable[[Agent], str]) -> int:
    from prompt_toolkit import PromptSession  # only interactive mode needs it

    from drivetrain.cli.approve import TerminalApprover

    session: PromptSession = PromptSession()

    def say(text: str) -> None:
        print(text, flush=True)

    async def ask(question: str) -> str:
        """A question during a run (an approval). Ctrl-C at it cancels the run like Ctrl-C anywhere in it (calls
        answered, session saved); a KeyboardInterrupt would escape the task and asyncio.run unsaved. Without
        ``handle_sigint=False`` prompt_toolkit removes the loop's SIGINT handler after the question."""
        try:
            return await session.prompt_async(question, handle_sigint=False)
        except KeyboardInterrupt:
            if run is not None:
                run.cancelled_by = "SIGINT"
            raise asyncio.CancelledError from None

    agent = make_agent(lambda cwd, policy: TerminalApprover(ask, say, cwd, policy))
    say(banner(agent))
    run: Run | None = None
    prompt = first_prompt
    loop = asyncio.get_running_loop()
    while True:
        if not prompt:
            try:
                prompt = (await session.prompt_async("> ")).strip()
            except EOFError:
                return 0
            except KeyboardInterrupt:
                continue
            if not prompt:
                continue
        if prompt in ("/exit", "/quit"):
            return 0
        if prompt == "/compact":
            if run is None:
                say("(nothing to compact yet)")
            else:
                for event in await run.compact():
                    if isinstance(event, Compacted):
                        say(f"(compaction failed: {event.failed})" if event.failed else
                            f"(compacted: about {event.tokens_before:,} → {event.tokens_after:,} tokens)")
            prompt = ""
            continue
        if run is None:
            run = agent.start(prompt, session_id=session_id)
        else:
            run.submit(prompt)  # the same session, one more user turn
        task = asyncio.ensure_future(_drive(run, say))
        loop.add_signal_handler(signal.SIGINT, _stop, run, task)
        try:
            await task
        except asyncio.CancelledError:
            say("(interrupted)")
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        prompt = ""


def _stop(run: Run, task: asyncio.Future) -> None:
    run.cancelled_by = "SIGINT"  # what the session's interrupted record says
    task.cancel()


async def _drive(run, say) -> None:
    async for event in run:
        render(event, say)
        sys.stdout.flush()
