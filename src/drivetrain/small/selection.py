"""What is read of each attempt once it ended, and the choice among them (``small/attempts.py`` runs them).

Never the words of the task or of an answer: the files it changed (content hashes), what the task's named commands
and the tests any attempt ran print and return when run again on its copy (the attempt's own gate and Bash tool,
audited), the values its answer reports, and the work checks its end state fails (``small/checks.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drivetrain.agent import Agent, Run
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.result import RunResult
from drivetrain.messages import Message, TextBlock, Usage
from drivetrain.sessions.audit import attached
from drivetrain.small.answer import FACTS_HEAD
from drivetrain.small.checks import CHECKS, WorkChecks
from drivetrain.small.readings import TEST_RUNNER
from drivetrain.tools.base import ToolContext

RERUN_TIMEOUT_S = 20.0
_CODE_SPAN = re.compile(r"`([^`\n]{2,200})`")
_VALUE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|-?\d+(?:\.\d+)?|`[^`\n]{1,80}`")


@dataclass(frozen=True)
class AttemptSpec:
    """What makes attempt ``index`` (1-based) its own: its seed, temperature, workspace copy and session."""

    index: int
    seed: int
    temperature: float
    cwd: Path
    session_id: str


@dataclass
class Attempt:
    """One attempt and what was read of it after it ended."""

    spec: AttemptSpec
    agent: Agent
    run: Run | None = None
    result: RunResult | None = None
    error: str = ""  # why it could not run or finish (a crash, a cancellation)
    changed: dict[str, str | None] = field(default_factory=dict)
    reruns: dict[str, tuple[int, str]] = field(default_factory=dict)  # command -> (exit code, output hash)
    values: frozenset[str] = frozenset()  # the answer's numbers and code spans
    hard_fail: str = ""  # the check it fails, if any
    failed_checks: tuple[str, ...] = ()  # the work checks (small/checks.py) its end state fails
    objections: tuple[str, ...] = ()  # the work checks still failing when its run's stop was let through
    evidence: str = ""  # strong evidence its work is done (small/evidence.py), if any
    probe: Path | None = None  # a copy of its end state that the checks' commands run in
    stopped: bool = False  # stopped because another attempt won early
    abandoned: str = ""  # why it was left for a fresh attempt early (a call misfired: small/misfires.py)
    took_s: float = 0.0  # from its start to its end

    @property
    def finished(self) -> bool:
        """Ended with an answer: only such an attempt may win."""
        return self.result is not None and self.result.subtype == "success" and not self.stopped

    @property
    def passed(self) -> int:
        """Checks passed: the commands run again on its copy, less the work checks its end state fails or that
        still objected when its run was let stop."""
        return sum(1 for code, _ in self.reruns.values() if code == 0) - len({*self.failed_checks, *self.objections})

    @property
    def known_failed(self) -> bool:
        """It ended, and what it left is known to be wrong: no answer, a hard check failed, or the work checks
        still objected when its run was let stop."""
        ended = self.result is not None or bool(self.error or self.abandoned)
        return ended and (not self.finished or bool(self.hard_fail or self.objections))

    @property
    def turns(self) -> int:
        return self.result.num_turns if self.result else self.run.num_turns if self.run else 0

    def summary(self) -> JsonObject:
        return {
            "attempt": self.spec.index,
            "session_id": self.spec.session_id,
            "seed": self.spec.seed,
            "temperature": self.spec.temperature,
            "subtype": self.result.subtype if self.result else "error_during_execution",
            "num_turns": self.turns,
            "took_s": round(self.took_s, 1),
            "usage": (self.run.usage if self.run is not None else Usage()).to_wire(),
            "changed": sorted(self.changed),
            "checks": {cmd: code for cmd, (code, _) in self.reruns.items()},
            "hard_fail": self.hard_fail,
            "failed_checks": list(self.failed_checks),
            "objections": list(self.objections),
            "evidence": self.evidence,
            "stopped": self.stopped,
            "abandoned": self.abandoned,
            "error": self.error,
            "result": self.result.result[:500] if self.result else "",
        }


@dataclass(frozen=True)
class Choice:
    """Which attempt won and why, in words a person reads (``2 of 3 agree; `pytest -q` passes``)."""

    chosen: int | None  # the attempt's index; None: none could win
    reason: str
    groups: tuple[tuple[int, ...], ...] = ()


# ---------------------------------------------------------------- evidence


def named_commands(prompt: str, cwd: Path) -> list[str]:
    """The commands the task names: its code spans whose program exists (on PATH, or a file of the workspace).
    Code spans and program names read the same in any language."""
    out: list[str] = []
    for span in _CODE_SPAN.findall(prompt):
        words = span.split()
        if len(words) < 1 or span in out:
            continue
        program = words[0]
        if "/" in program or program.endswith((".py", ".sh")):
            exists = (cwd / program).is_file()
        else:
            exists = shutil.which(program) is not None and (len(words) > 1 or program in ("make", "pytest"))
        if exists:
            out.append(span)
    return out


def tests_ran(result: RunResult | None) -> list[str]:
    """The test commands an attempt ran (a test runner's name in the command: ``pytest``, ``npm test`` …)."""
    if result is None:
        return []
    out: list[str] = []
    for msg in result.history:
        for use in msg.tool_uses:
            command = use.input.get("command")
            if use.name == "Bash" and isinstance(command, str) and TEST_RUNNER.search(command) and command not in out:
                out.append(command)
    return out


def harness_words(history: Sequence[Message]) -> list[str]:
    """What the harness said during a run: the text of every user turn after the task (send-backs, notes), but the
    record of what the agent did that ends an answer's send-back (``answer.facts``): a copy of it is an answer."""
    users = [m for m in history if m.role == "user"]
    texts = [b.text for m in users[1:] for b in m.content if isinstance(b, TextBlock) and b.text.strip()]
    return [t.split("\n\n" + FACTS_HEAD + "\n")[0] for t in texts]


def answer_values(answer: str) -> frozenset[str]:
    """The answer's numbers (thousands separators dropped) and code spans: what two answers must share to agree."""
    return frozenset(v.replace(",", "") if not v.startswith("`") else v.strip("` ") for v in _VALUE.findall(answer))


async def rerun(agent: Agent, command: str, cwd: Path, session_id: str) -> tuple[int, str] | None:
    """``command`` run again in ``cwd`` (``run_again``): (exit code, hash of its output), None when not run."""
    got = await run_again(agent, command, cwd, session_id)
    return None if got[0] is None else (got[0], hashlib.sha256(got[1].encode()).hexdigest()[:16])


async def run_again(agent: Agent, command: str, cwd: Path, session_id: str) -> tuple[int | None, str]:
    """``command`` run again in ``cwd`` as the attempt's own Bash call would be: the policy decides (not allowed:
    None, not run), the Bash tool runs it (sandboxed when the run is), and the audit log records it. Returns
    (exit code, the output with the copy's path written as ``.``); a timeout is exit code -1."""
    bash = next((t for t in agent.tools if t.name == "Bash"), None)
    if bash is None:
        return None, ""
    if agent.policy is not None and agent.policy.decide("Bash", {"command": command}, cwd).behavior != "allow":
        return None, ""
    call_id = f"check_{secrets.token_hex(6)}"
    audit = attached(agent.observers)
    if audit is not None:
        audit.intent(call_id, "Bash", {"command": command}, "allow", "attempts", "a check of the attempts, run again")
    started = time.time()
    ctx = ToolContext(cwd=cwd, roots=[cwd], session_id=session_id, tool_use_id=call_id)
    try:
        result = await asyncio.wait_for(
            bash.call({"command": command, "timeout": int(RERUN_TIMEOUT_S * 1000)}, ctx), RERUN_TIMEOUT_S + 5
        )
    except TimeoutError:
        return -1, "timeout"
    exit_code = result.meta.get("exit_code")
    code = exit_code if isinstance(exit_code, int) else int(result.is_error)
    if audit is not None:
        audit.outcome(call_id, "Bash", started, time.time(), result.is_error, exit_code=code)
    return code, result.text.replace(os.path.realpath(cwd), ".").replace(str(cwd), ".")


async def _not_run(command: str) -> tuple[int | None, str]:
    return None, ""


READ_ONLY = tuple(c for c in CHECKS if not c.runs_commands and not c.last)


def work_checks(a: Attempt) -> WorkChecks | None:
    """The small profile's checks node of an attempt's run (the profile adds it when the run starts: ``Deps.of``),
    if it has one."""
    nodes = a.run.deps.nodes if a.run is not None else tuple(a.agent.nodes)
    return next((n for n in nodes if isinstance(n, WorkChecks)), None)


async def failed_checks(a: Attempt) -> tuple[str, ...]:
    """The work checks that only read (no command run again: the reruns are read apart) that a finished attempt's
    end state fails: the same ``Check`` objects that send a run back."""
    checks = work_checks(a)
    if not a.finished or a.result is None or checks is None:
        return ()
    return tuple((await checks.findings(a.result.result, run=_not_run, checks=READ_ONLY)).failed)


def choose(attempts: Sequence[Attempt], base: dict[str, tuple[int, str]]) -> Choice:
    """The winner among the attempts, from the evidence read of them (see the module's docstring)."""
    finished = [a for a in attempts if a.finished and not a.hard_fail]
    if not finished:
        why = "; ".join(f"attempt {a.spec.index}: {_why_not(a)}" for a in attempts)
        return Choice(None, f"no attempt can win ({why})")
    # behaviour groups: agree when the changed contents, the commands' outputs or the answer's values are the same
    parent = {a.spec.index: a.spec.index for a in finished}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    keys: list[Callable[[Attempt], object]] = [
        lambda a: tuple(sorted(a.changed.items())) if a.changed else None,
        lambda a: tuple(sorted(a.reruns.items())) if a.reruns else None,
        lambda a: a.values or None,
    ]
    for key in keys:
        seen: dict[object, int] = {}
        for a in finished:
            k = key(a)
            if k is None:
                continue
            if k in seen:
                parent[root(a.spec.index)] = root(seen[k])
            else:
                seen[k] = a.spec.index
    by_root: dict[int, list[Attempt]] = {}
    for a in finished:
        by_root.setdefault(root(a.spec.index), []).append(a)
    groups = sorted(
        by_root.values(),
        key=lambda g: (-len(g), -max(a.passed for a in g), min(a.turns for a in g), min(a.spec.index for a in g)),
    )
    best = groups[0]
    winner = min(best, key=lambda a: (-a.passed, a.turns, a.spec.index))
    reasons = [f"{len(best)} of {len(attempts)} agree" if len(best) > 1 else f"attempt {winner.spec.index} alone"]
    passing = [cmd for cmd, (code, _) in winner.reruns.items() if code == 0]
    fixed = [cmd for cmd in passing if base.get(cmd, (0, ""))[0] != 0]
    if winner.evidence:
        reasons.append(winner.evidence)
    if fixed:
        reasons.append(", ".join(f"`{c}` passes (it failed before)" for c in fixed[:2]))
    elif passing:
        reasons.append(", ".join(f"`{c}` passes" for c in passing[:2]))
    if len(best) == 1 and len(finished) > 1:
        reasons.append(f"the groups were {'/'.join(str(len(g)) for g in groups)}; ties go to checks passed, then turns")
    return Choice(winner.spec.index, "; ".join(reasons), tuple(tuple(a.spec.index for a in g) for g in groups))


def _why_not(a: Attempt) -> str:
    if a.stopped:
        return "stopped when another won"
    if a.hard_fail:
        return a.hard_fail
    if a.abandoned:
        return f"abandoned: {a.abandoned}"
    if a.result is None:
        return a.error or "did not finish"
    return a.result.subtype


def strong(a: Attempt, base: dict[str, tuple[int, str]]) -> str:
    """A strong check the attempt passes: a command that fails on the base passes on its copy ("" when none)."""
    if not a.finished or a.hard_fail:
        return ""
    for cmd, (code, _) in a.reruns.items():
        if code == 0 and cmd in base and base[cmd][0] != 0:
            return f"`{cmd}` passes (it failed before)"
    return a.evidence
