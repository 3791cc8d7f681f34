"""``drivetrain plan "TASK" -o plan.json`` and ``drivetrain apply plan.json``: structured graph mode from the shell.

Usage::

    drivetrain plan "add a --json flag to the report command" -o plan.json
        # one request, no tools: the plan as a list and as Mermaid; the file is yours to read and edit
    drivetrain apply plan.json                    # carry it out: ready steps at once (--concurrency 2),
                                                  # each its own loop
    drivetrain apply plan.json --resume           # the latest unfinished run of plan.json in this directory
    drivetrain apply plan.json -p --output-format json   # one result object: statuses, timings, Mermaid
    drivetrain apply plan.json --html report.html # the graph, statuses and timings as a page

A run's state is saved after every node under ``$DRIVETRAIN_HOME/plans/``; each step is a session of its own
(``drivetrain sessions show ID``). A step whose check fails is retried with the failure, then re-planned, then
(in a terminal, without ``-p``) the person is asked; otherwise it fails and the plan fails.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import html
import json
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from drivetrain.agent import Agent
from drivetrain.cli import build
from drivetrain.cli.main import OUTPUT_FORMATS, PERMISSION_MODES, Printer, _fail
from drivetrain.errors import HarnessError
from drivetrain.home import drivetrain_home
from drivetrain.loop.budget import Budget
from drivetrain.loop.events import Event, ModelResponded, ResultsSent, ToolCalled
from drivetrain.models.resolve import PROVIDERS
from drivetrain.plans.plan import Plan, PlanError, Step, make_plan, step_agent
from drivetrain.plans.scheduler import PlanEvent, PlanResult, apply_plan, write_atomic
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.open import open_store


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None)
    p.add_argument("--provider", choices=PROVIDERS, default=None)
    p.add_argument("--permission-mode", choices=PERMISSION_MODES, default=None)
    p.add_argument("--system-prompt", default=None, help="replace the default system prompt of the steps")
    p.add_argument("--append-system-prompt", default=None)
    p.add_argument("--max-turns", type=int, default=None, help="turns for the whole plan (the steps' add up to it)")
    p.add_argument("--output-format", choices=OUTPUT_FORMATS, default="text")
    p.add_argument("--verbose", action="store_true", help="progress and the turn log on stderr")
    build.add_arguments(p)


def plan_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="drivetrain plan", description="Ask the model (no tools) for a plan of TASK.")
    p.add_argument("task", help="the task")
    p.add_argument("-o", "--output", type=Path, default=Path("plan.json"), help="where to write it (plan.json)")
    _common(p)
    return p


def apply_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="drivetrain apply", description="Carry out a plan file as a DAG of agent loops.")
    p.add_argument("plan", type=Path)
    p.add_argument("--resume", action="store_true", help="continue the latest unfinished run of this plan here")
    p.add_argument(
        "-p",
        "--print",
        dest="print_mode",
        action="store_true",
        help="never ask the person: a step that fails its escalations fails the plan",
    )
    p.add_argument("--concurrency", type=int, default=2, help="steps run at once (2)")
    p.add_argument("--check-timeout", type=float, default=300.0, help="seconds a step's check may take (300)")
    p.add_argument("--html", type=Path, default=None, help="also write the graph and statuses as an HTML page")
    _common(p)
    return p


# ---------------------------------------------------------------- drivetrain plan


def plan_main(argv: list[str]) -> int:
    args = plan_parser().parse_args(argv)
    cwd = Path.cwd()
    try:
        agent = build.build_agent(args, cwd, str(uuid.uuid4()), store=open_store())
        budget = Budget(tokens=args.max_tokens_total)
        plan = asyncio.run(make_plan(agent, args.task, budget=budget, max_turns=args.max_turns))
    except (HarnessError, ValueError) as e:
        return _fail(args, str(e))
    write_atomic(args.output, json.dumps(plan.to_json(), indent=2) + "\n")
    if args.output_format == "text":
        print(plan.describe())
        print(f"\n```mermaid\n{plan.mermaid()}\n```\n")
        print(f"Wrote {args.output}. Read or edit it, then: drivetrain apply {args.output}")
    else:
        print(json.dumps({"type": "plan", "path": str(args.output), "plan": plan.to_json(), "mermaid": plan.mermaid()}))
    return 0


# ---------------------------------------------------------------- drivetrain apply


def apply_main(argv: list[str]) -> int:
    args = apply_parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130


def run_main(argv: list[str]) -> int:
    """``drivetrain run PLAN``: the old name of ``drivetrain apply`` ("a run" is one walk of the agent loop)."""
    print(
        "drivetrain: `drivetrain run PLAN` is now `drivetrain apply PLAN`; the old name goes in the next release.",
        file=sys.stderr,
    )
    return apply_main(argv)


def runs_dir(plan_path: Path, cwd: Path) -> Path:
    """Where the runs of one plan file, started in one directory, keep their state."""
    key = hashlib.sha256(f"{cwd.resolve()}\0{plan_path.resolve()}".encode()).hexdigest()[:16]
    return drivetrain_home() / "plans" / f"{plan_path.stem}-{key}"


def latest_unfinished(folder: Path) -> Path | None:
    found = []
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("status") != "success":
            found.append((data.get("updated_at", 0), path))
    return max(found)[1] if found else None


async def _run(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    try:
        plan = Plan.from_json(args.plan.read_text())
        store = open_store()
        base = build.build_agent(args, cwd, str(uuid.uuid4()), store=store)
        problems = plan.validate(
            [t.name for t in base.tools], Budget(tokens=args.max_tokens_total), max_turns=args.max_turns
        )
        if problems:
            raise PlanError(f"{args.plan} is not a plan that can run:\n" + "\n".join(f"  - {p}" for p in problems))
        folder = runs_dir(args.plan, cwd)
        state_path = latest_unfinished(folder) if args.resume else None
        if args.resume and state_path is None:
            raise PlanError(f"no unfinished run of {args.plan} in {cwd} to resume")
        state_path = state_path or folder / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.json"
    except OSError as e:
        return _fail(args, f"cannot read {args.plan}: {e.strerror}")
    except (HarnessError, ValueError) as e:
        return _fail(args, str(e))
    out = PlanOutput(args)
    audits: dict[str, AuditLog] = {}

    def make_agent(step: Step) -> Agent:
        step_args = argparse.Namespace(**{**vars(args), "model": step.model or args.model, "no_checkpoints": True})
        agent = build.build_agent(step_args, cwd, str(uuid.uuid4()), store=store)
        audit = build.audit_log(agent)
        if audit is not None:
            audits[step.id] = audit
        return step_agent(agent, step)

    def on_event(e: PlanEvent) -> None:
        if e.kind == "session" and e.step_id in audits:  # the step's audit records go in its session's log
            audits[e.step_id].session_id = e.data["session_id"]
        out.event(e)

    out.init(plan, state_path)
    task = asyncio.current_task()
    assert task is not None  # a coroutine runs in a task
    got: list[str] = []

    def stop(name: str) -> None:
        got.append(name)
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop, sig.name)
    try:
        result = await apply_plan(
            plan,
            make_agent,
            state_path=state_path,
            concurrency=args.concurrency,
            on_event=on_event,
            resume=args.resume,
            ask=None if args.print_mode else _ask_person(),
            check_timeout=args.check_timeout,
        )
    except asyncio.CancelledError:
        if not got:
            raise
        print(
            f"drivetrain: interrupted ({got[0]}); the plan's state is saved. Continue it with: "
            f"drivetrain apply {args.plan} --resume",
            file=sys.stderr,
            flush=True,
        )
        return 130 if got[0] == "SIGINT" else 143
    except (HarnessError, ValueError) as e:
        return _fail(args, str(e))
    if args.html is not None:
        write_atomic(args.html, render_html(result))
    out.finish(result)
    return 1 if result.is_error else 0


def _ask_person() -> Callable[[Step, str], Awaitable[str | None]] | None:
    """In a terminal: the person may give guidance for one more try (empty: the step fails)."""
    if sys.stdin is None or not sys.stdin.isatty():
        return None

    async def ask(step: Step, failure: str) -> str | None:
        print(f"\ndrivetrain: step {step.id} is still failing:\n{failure}\n", file=sys.stderr, flush=True)
        answer = await asyncio.to_thread(input, f"Guidance for step {step.id} (empty: fail it): ")
        return answer.strip() or None

    return ask


class PlanOutput(Printer):
    """A plan run's events on stdout in the chosen format (as ``-p`` writes a single run's), progress on stderr."""

    def init(self, plan: Plan, state_path: Path) -> None:
        self._log(f"drivetrain: plan of {len(plan.steps)} steps; state in {state_path}")
        if self.format == "stream-json":
            self._emit(
                {"type": "system", "subtype": "plan_init", "plan": plan.to_json(), "state_path": str(state_path)}
            )

    def event(self, e: PlanEvent) -> None:
        if e.kind == "agent":
            self._agent_event(e.step_id, e.event)
            return
        shown = " ".join(
            f"{k}={round(v, 2) if isinstance(v, float) else v}"
            for k, v in e.data.items()
            if k in ("status", "level", "exit_code", "duration_s", "session_id")
        )
        self._log(f"[{e.step_id or 'plan'}] {e.kind} {shown}")
        if self.format == "stream-json" and e.kind != "plan_finished":
            self._emit({"type": "system", "subtype": e.kind, "step_id": e.step_id, **e.data})

    def _agent_event(self, step_id: str | None, event: Event | None) -> None:
        match event:
            case ModelResponded(turn=turn, response=r):
                self._log(f"  [{step_id} turn {turn}] stop_reason={r.stop_reason}")
                if self.format == "stream-json":
                    self._emit(
                        {
                            "type": "assistant",
                            "step_id": step_id,
                            "message": {
                                "id": r.id,
                                "type": "message",
                                "role": "assistant",
                                "model": r.model,
                                "content": [b.to_wire() for b in r.content],
                                "stop_reason": r.stop_reason,
                                "usage": r.usage.to_wire(),
                            },
                        }
                    )
            case ToolCalled(call=c):
                self._log(f"  [{step_id}] → {c.name} {json.dumps(c.input, ensure_ascii=False)[:160]}")
            case ResultsSent(message=m):
                if self.format == "stream-json":
                    self._emit({"type": "user", "step_id": step_id, "message": m.to_wire()})

    def finish(self, result: PlanResult) -> None:
        if self.format == "text":
            print(result.plan.describe(result.statuses()), file=sys.stderr)
            self._log(f"```mermaid\n{result.mermaid()}\n```")
            if result.is_error:
                print(f"drivetrain: the plan failed:\n{result.result}", file=sys.stderr)
            else:
                print(result.result)
        else:
            self._emit(result.to_json())


def render_html(result: PlanResult) -> str:
    """One self-contained page (nothing fetched, no script): the graph as inline SVG, coloured by status, with its
    Mermaid source, and a table of the steps."""
    rows = "".join(
        f"<tr class='{n.status}'><td>{html.escape(i)}</td><td>{n.status}</td><td>{_secs(n.duration_s)}</td>"
        f"<td>{n.attempts}</td><td>{html.escape(', '.join(n.escalations))}</td><td>{n.num_turns}</td>"
        f"<td>{html.escape((n.result or n.error)[:300])}</td></tr>"
        for i, n in result.nodes.items()
    )
    return f"""<!doctype html><meta charset="utf-8"><title>drivetrain plan {html.escape(result.run_id)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top}}
table{{border-collapse:collapse}}.done{{background:#c8f0c8}}.failed{{background:#f8c8c8}}.skipped{{color:#999}}
.running{{background:#fff3b0}}</style>
<h1>{html.escape(result.plan.task or "plan")} — {result.subtype}</h1><p>{result.duration_ms / 1000:.1f} s</p>
{_svg(result)}
<details><summary>Mermaid</summary><pre>{html.escape(result.mermaid())}</pre></details>
<table><tr><th>step</th><th>status</th><th>time</th><th>attempts</th><th>escalations</th><th>turns</th>
<th>answer / failure</th></tr>{rows}</table>
"""


_FILL = {"done": "#c8f0c8", "failed": "#f8c8c8", "running": "#fff3b0", "skipped": "#eeeeee", "pending": "#ffffff"}


def _svg(result: PlanResult) -> str:
    """The DAG drawn in layers (a step one layer right of its deepest dependency), an arrow per dependency."""
    steps = {s.id: s for s in result.plan.steps}
    layer: dict[str, int] = {}

    def depth(i: str) -> int:
        if i not in layer:
            layer[i] = 1 + max((depth(d) for d in steps[i].depends_on if d in steps), default=-1)
        return layer[i]

    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for i in steps:
        col = depth(i)
        where[i] = (20 + col * 190, 20 + rows.get(col, 0) * 70)
        rows[col] = rows.get(col, 0) + 1
    width = 20 + (max(layer.values(), default=0) + 1) * 190
    height = 20 + max(rows.values(), default=1) * 70
    parts = []
    for i, s in steps.items():
        for d in s.depends_on:
            if d in where:
                (x1, y1), (x2, y2) = where[d], where[i]
                parts.append(
                    f'<line x1="{x1 + 150}" y1="{y1 + 22}" x2="{x2}" y2="{y2 + 22}" stroke="#666" '
                    'marker-end="url(#arrow)"/>'
                )
    for i, (x, y) in where.items():
        node = result.nodes.get(i)
        status = node.status if node else "pending"
        label = f"{i} · {status}" + (f" · {_secs(node.duration_s)}" if node and node.duration_s is not None else "")
        parts.append(
            f'<g class="step {status}"><rect x="{x}" y="{y}" width="150" height="44" rx="6" '
            f'fill="{_FILL.get(status, "#fff")}" stroke="#333"/><text x="{x + 8}" y="{y + 27}" '
            f'font-size="12">{html.escape(label)}</text></g>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"><defs><marker id="arrow" '
        'viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path '
        'd="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>' + "".join(parts) + "</svg>"
    )


def _secs(s: float | None) -> str:
    return "" if s is None else f"{s:.1f} s"
