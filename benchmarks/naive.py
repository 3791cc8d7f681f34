"""The naive loop the benchmarks compare drivetrain with: the same GGUF, nothing else of drivetrain's loop.

``llama_cpp.Llama.create_chat_completion`` with a plain system prompt describing Read/Write/Bash/Glob in
prose, no grammar, no workspace listing; calls found by regex (``<tool_call>{…}</tool_call>``, else a bare
JSON object), run with drivetrain's own tool classes, results sent back as plain user text; a turn cap.
No permission checks, except that a task's deny rules (e.g. ``Bash(wc:*)``) are enforced with drivetrain's
own rule matching, so a task that denies a tool denies it in both loops.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drivetrain.tools import Bash, Glob, Read, Write
from drivetrain.tools.base import ToolContext

NAIVE_SYSTEM = """You are a helpful coding assistant. You can use tools to work with the files in the current directory.

Tools:
- Read: read a text file. Arguments: file_path (string), and optionally offset (integer, the first line to read) and limit (integer, how many lines).
- Write: create or overwrite a file. Arguments: file_path (string), content (string, the whole new content).
- Bash: run a shell command in the current directory. Arguments: command (string), and optionally timeout (integer, milliseconds).
- Glob: find files whose path matches a glob pattern such as **/*.py. Arguments: pattern (string), and optionally path (string, the folder to search).

To call a tool, answer with a JSON object inside <tool_call></tool_call> tags, for example:
<tool_call>
{"name": "Read", "arguments": {"file_path": "notes.txt"}}
</tool_call>
The result will be sent back to you. When the task is done, give your final answer without calling a tool."""

TOOLS = {t.name: t for t in (Read(), Write(), Bash(), Glob())}
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def find_calls(text: str) -> list[dict | str]:
    """Tool calls in a reply: dicts, or a string saying why a call could not be read."""
    found = _TAGGED.findall(text)
    if not found:  # no tags: a bare JSON object with a "name" counts as a call
        obj = _OBJECT.search(text)
        if not obj:
            return []
        try:
            value = json.loads(obj.group(0))
        except ValueError:
            return []
        return [value] if isinstance(value, dict) and "name" in value else []
    calls: list[dict | str] = []
    for raw in found:
        try:
            value = json.loads(raw)
        except ValueError as e:
            calls.append(f"the tool call is not valid JSON ({e}): {raw[:200]}")
            continue
        calls.append(value if isinstance(value, dict) else f"the tool call is not a JSON object: {raw[:200]}")
    return calls


def deny_policy(rules: Sequence[str], ws: Path, home: Path):
    """A drivetrain Policy that allows everything (bypassPermissions) except ``rules``; None without rules."""
    if not rules:
        return None
    from drivetrain.control.permissions.policy import Policy

    home.mkdir(parents=True, exist_ok=True)
    return Policy.load(
        ws,
        mode="bypassPermissions",
        disallowed_tools=list(rules),
        interactive=False,
        env={"DRIVETRAIN_HOME": str(home)},
        home=home,
    )


async def run_call(call: dict | str, ws: Path, policy=None) -> tuple[str, str, bool]:
    """(tool name, result text, is_error) for one call, run with drivetrain's own tool classes."""
    if isinstance(call, str):
        return "?", call, True
    name = call.get("name")
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if name not in TOOLS:
        return str(name), f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}", True
    if not isinstance(args, dict):
        return name, "arguments must be a JSON object", True
    if policy is not None:
        decision = policy.decide(name, args, ws)
        if not decision.allowed:
            return name, f"Permission denied: {decision.reason}", True
    try:
        res = await TOOLS[name].call(args, ToolContext(cwd=ws))
    except Exception as e:
        return name, f"{type(e).__name__}: {e}", True
    text = res.content if isinstance(res.content, str) else json.dumps(res.content)
    return name, text or "(no output)", res.is_error


@dataclass
class NaiveRun:
    answer: str = ""
    subtype: str = "error_max_turns"  # success | error_max_turns | timeout | error_during_execution (why)
    turns: int = 0
    steps: list[str] = field(default_factory=list)  # per turn: 'Bash+Read!' ('!' an error result) or the stop
    messages: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def trajectory(self) -> str:
        return " → ".join(self.steps)


def sampling_of(probe) -> dict:
    """LocalModel's sampling settings, in create_chat_completion's names (both loops sample alike)."""
    s = probe.sampling
    return {
        "temperature": s["temp"],
        "top_p": s["top_p"],
        "top_k": s["top_k"],
        "min_p": s["min_p"],
        "repeat_penalty": s["repeat_penalty"],
    }


def load_llama(model: str):
    """(Llama, LocalModel probe, load seconds): the GGUF LocalModel would use, with its context and threads."""
    from llama_cpp import Llama

    from drivetrain.models.local import LocalModel
    from drivetrain.models.weights import resolve_model

    probe = LocalModel(model)  # not loaded: only its settings are read
    path = resolve_model(model)
    t = time.perf_counter()
    llm = Llama(
        model_path=str(path),
        n_ctx=probe.n_ctx,
        n_threads=probe.n_threads,
        n_threads_batch=probe.n_threads,
        verbose=False,
    )
    return llm, probe, time.perf_counter() - t


def run_naive(
    llm,
    task: str,
    ws: Path,
    *,
    sampling: dict,
    seed: int,
    max_turns: int,
    max_tokens: int | None,
    policy=None,
    timeout_s: float | None = None,
) -> NaiveRun:
    """One task in the naive loop; turn t samples with seed ``seed + t``. ``timeout_s`` is checked between turns."""
    run = NaiveRun(messages=[{"role": "system", "content": NAIVE_SYSTEM}, {"role": "user", "content": task}])
    started, cpu_started = time.perf_counter(), time.process_time()
    while run.turns < max_turns:
        if timeout_s is not None and time.perf_counter() - started > timeout_s:
            run.subtype = "timeout"
            break
        run.turns += 1
        try:
            reply = llm.create_chat_completion(run.messages, seed=seed + run.turns, max_tokens=max_tokens, **sampling)
        except ValueError as e:  # llama-cpp-python: the history no longer fits the context window
            run.subtype = f"error_during_execution ({str(e)[:120]})"
            run.steps.append("error")
            break
        text = reply["choices"][0]["message"]["content"] or ""
        run.messages.append({"role": "assistant", "content": text})
        calls = find_calls(text)
        if not calls:
            run.answer, run.subtype = text, "success"
            run.steps.append((reply["choices"][0]["finish_reason"] == "length" and "max_tokens") or "end_turn")
            break
        parts, names = [], []
        for call in calls:
            name, result, is_error = asyncio.run(run_call(call, ws, policy))
            names.append(name + ("!" if is_error else ""))
            parts.append(f"{'Error from' if is_error else 'Result of'} {name}:\n{result}")
        run.steps.append("+".join(names))
        run.messages.append({"role": "user", "content": "\n\n".join(parts)})
    run.wall_s, run.cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    return run
