"""Bash: run a shell command in its own process group, with a timeout that really kills.

The command gets the harness's environment without its credentials (``drivetrain.host.procs.child_env``;
``env_passthrough`` names the variables it may have anyway), and its process group is handed
to the watchdog, so what it leaves running ends when drivetrain does, even on ``kill -9``.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import signal
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar

from drivetrain.host.procs import child_env, kill_group, signal_group, watch_group
from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult

if TYPE_CHECKING:
    from drivetrain.host.sandbox import Sandbox

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
OUTPUT_CAP = 30_000
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
DRAIN_S = 0.5  # how long to wait for pipes after the shell exits
# The command waits for a line from the harness, written once its process group is in the watchdog's hands;
# without it, a harness killed between the spawn and ``watch_group`` (the spawn awaits, other calls run
# meanwhile) left the command running for good. EOF instead (the harness died first): it never starts.
HOLD = ["/bin/bash", "-c", 'read -r _ || exit 125; exec "$@" </dev/null', "drivetrain-hold"]


class _Capture:
    """One output stream: its first and last OUTPUT_CAP/2 characters and a total count.

    Memory stays bounded however much a command prints.
    """

    def __init__(self, keep: int = OUTPUT_CAP // 2):
        self.keep = keep
        self.head = ""
        self.tail = ""
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        s = self._decoder.decode(data, final=final)
        self.total += len(s)
        if len(self.head) < self.keep:
            take = self.keep - len(self.head)
            self.head, s = self.head + s[:take], s[take:]
        if s:
            self.tail = (self.tail + s)[-self.keep :]

    def render(self, budget: int) -> str:
        if self.total <= budget:
            return self.head + self.tail  # everything, since budget <= 2 * keep
        half = budget // 2
        return (
            self.head[:half]
            + f"\n[... {self.total - 2 * half} characters cut ...]\n"
            + self.tail[len(self.tail) - half :]
        )


async def _pump(reader: asyncio.StreamReader, capture: _Capture) -> None:
    while chunk := await reader.read(65536):
        capture.feed(chunk)
    capture.feed(b"", final=True)


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    # Our own pipe, not asyncio's PIPE: we must be able to close the read end ourselves
    # when a backgrounded grandchild keeps the write end open forever.
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


def _combine(out: _Capture, err: _Capture) -> str:
    # Share the cap: stderr gets at least a third when both are big, all it needs when small.
    err_budget = min(err.total, max(OUTPUT_CAP // 3, OUTPUT_CAP - out.total))
    text = out.render(OUTPUT_CAP - err_budget).rstrip("\n")
    if err.total:
        text += ("\n" if text else "") + "stderr:\n" + err.render(err_budget).rstrip("\n")
    return text


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"Exit code: {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"Exit code: {code}"


class Bash:
    """Claude Code's ``Bash``: a command in its own process group (killed whole on timeout or cancel), without the
    harness's credentials in its environment, inside the sandbox when the run has one; output capped head and tail."""

    name = "Bash"
    description = (
        "Run a shell command with /bin/bash -c in the working directory and return its output "
        "(stdout, then stderr under `stderr:`) and the exit code if it is not 0. Each call is a "
        "new shell: `cd` and variables do not carry over, so chain with && "
        "(e.g. `cd sub && make test`). There is no input: never run interactive programs "
        "(editors, pagers, prompts); pass flags like -y or --no-pager. Default timeout 120000 ms, "
        "max 600000 (timeout is in milliseconds). Long output is cut in the middle. Prefer "
        "Read/Grep/Glob/Edit over cat/grep/find/sed. To start a server, background it with its "
        "output in a file: `nohup cmd > server.log 2>&1 &`."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command to run."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_MS,
                "description": f"Timeout in milliseconds (default {DEFAULT_TIMEOUT_MS}).",
            },
            "description": {"type": "string", "description": "What the command does, in 5-10 words."},
        },
        "required": ["command"],
    }

    def __init__(
        self,
        kill_grace: float = KILL_GRACE_S,
        sandbox: Sandbox | None = None,
        env_passthrough: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
    ):
        self.kill_grace = kill_grace
        self.sandbox = sandbox  # when set, every command runs inside it or not at all
        self.env_passthrough = tuple(env_passthrough)  # names (or globs) of withheld variables to pass anyway
        self.env = dict(env or {})  # set for every command (a batch task's "env")

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        command = input.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult("command is required: the shell command to run.", is_error=True)
        timeout = input.get("timeout", DEFAULT_TIMEOUT_MS)
        if timeout is None:
            timeout = DEFAULT_TIMEOUT_MS
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return ToolResult(
                f"timeout must be a positive number of milliseconds (max {MAX_TIMEOUT_MS}), got {timeout!r}.",
                is_error=True,
            )
        timeout = min(timeout, MAX_TIMEOUT_MS)
        left = (ctx.deadline - time.monotonic()) * 1000 if ctx.deadline is not None else timeout
        if not ctx.cwd.is_dir():
            return ToolResult(f"The working directory {ctx.cwd} does not exist.", is_error=True)
        # the run's wall budget, when it ends first, ends the command
        return await self._run(command, max(min(timeout, left), 1.0), ctx, budget=left < timeout)

    async def _run(self, command: str, timeout_ms: float, ctx: ToolContext, budget: bool = False) -> ToolResult:
        argv = ["/bin/bash", "-c", command]
        if self.sandbox is None:
            code, text, timed_out = await self._execute(
                argv, {**child_env(self.env_passthrough), **self.env}, timeout_ms, ctx
            )
            meta: JsonObject = {"exit_code": code}
        else:
            # Fail closed: SandboxUnavailable (a HarnessError) ends the run; the command never runs bare.
            await asyncio.to_thread(self.sandbox.check)
            argv = self.sandbox.wrap(argv, cwd=ctx.cwd)
            try:
                code, text, timed_out = await self._execute(
                    argv, {**self.sandbox.environment(self.env_passthrough), **self.env}, timeout_ms, ctx
                )
            finally:
                self.sandbox.release()
            meta = {"exit_code": code, "sandboxed": True}
        if timed_out:
            return ToolResult(
                (
                    f"Command stopped after {timeout_ms:.0f} ms, when the run's wall-time budget ran out, and killed."
                    if budget
                    else f"Command timed out after {timeout_ms:g} ms and was killed."
                )
                + (f" Output so far:\n{text}" if text else ""),
                is_error=True,
                meta={**meta, "timed_out": True},
            )
        if code != 0:
            return ToolResult((text + "\n" if text else "") + _exit_text(code), is_error=True, meta=meta)
        return ToolResult(text or "(no output)", meta=meta)

    async def _execute(
        self, argv: list[str], env: dict[str, str], timeout_ms: float, ctx: ToolContext
    ) -> tuple[int, str, bool]:
        """Run ``argv`` in its own process group: (exit code, output, timed out)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        go_r, go_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *HOLD, *argv, cwd=ctx.cwd, env=env, stdin=go_r, stdout=out_w, stderr=err_w, start_new_session=True
            )
            watch_group(proc.pid)  # so what it leaves running ends with drivetrain, even on kill -9
            os.write(go_w, b"\n")  # only now may the command start
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, go_r, go_w):  # the child has its copies; ours would keep EOF from coming
                os.close(fd)
        out, err = _Capture(), _Capture()
        transports: list[asyncio.BaseTransport] = []
        pumps: list[asyncio.Task[None]] = []
        timed_out = False
        try:
            for fd, capture in ((out_r, out), (err_r, err)):
                reader, transport = await _pipe_reader(fd)
                transports.append(transport)
                pumps.append(asyncio.create_task(_pump(reader, capture)))
            try:
                await asyncio.wait_for(proc.wait(), timeout_ms / 1000)
            except TimeoutError:
                timed_out = True
                await kill_group(proc.pid, self.kill_grace)
                await proc.wait()
            # Background grandchildren may hold the pipes open; take what came and move on.
            await asyncio.wait(pumps, timeout=DRAIN_S)
        finally:
            if proc.returncode is None:  # cancelled (or failed) while running: no grace, kill now
                signal_group(proc.pid, signal.SIGKILL)
            for task in pumps:
                task.cancel()
            for t in transports:
                t.close()
        assert proc.returncode is not None
        return proc.returncode, _combine(out, err), timed_out
