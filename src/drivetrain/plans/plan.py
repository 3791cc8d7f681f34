"""Structured graph mode: a task planned ahead as a DAG of steps, each small enough to be its own agent loop.

A ``Plan`` is plain data a person can write by hand (``Plan.from_json``) or ask the model for
(``make_plan``: one request with no tools). ``Plan.validate`` says what is wrong with it: unknown
dependencies, a cycle (named), unknown tools, budgets over the run's. ``drivetrain.plans.scheduler`` runs it.

The file format (``FORMAT_VERSION``; a file without ``version`` is read as the current one)::

    {"version": 1, "task": "…", "budget": {"max_turns": 40, "max_tokens": 400000},
     "steps": [{"id": "a", "goal": "…", "depends_on": [], "tools": ["Bash", "Read"], "max_turns": 8,
                "max_tokens": 50000, "check": "pytest -q tests/test_a.py"}, …]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

from drivetrain.agent import Agent
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.budget import Budget
from drivetrain.loop.profile import FULL

FORMAT_VERSION = 1
DEFAULT_MAX_TURNS = 8
StepStatus = Literal["pending", "running", "done", "failed", "skipped"]  # a step's, in a plan run
STATUSES: tuple[StepStatus, ...] = get_args(StepStatus)
COLOURS: dict[StepStatus, str] = {
    "pending": "fill:#eeeeee,stroke:#999999",
    "running": "fill:#fff3b0,stroke:#c9a400",
    "done": "fill:#c8f0c8,stroke:#2e8b57",
    "failed": "fill:#f8c8c8,stroke:#c0392b",
    "skipped": "fill:#f4f4f4,stroke:#bbbbbb,stroke-dasharray:4,color:#999999",
}
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class PlanError(HarnessError):
    """A plan that could not be read, or that the model could not get right."""


@dataclass(frozen=True)
class Step:
    id: str
    goal: str
    depends_on: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int | None = None  # the step's token budget (input + output + cache), None: no own limit
    check: str | None = None  # a shell command run in the workspace after the step; exit 0 means done
    model: str | None = None  # a model for this step only (None: the run's)

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "goal": self.goal,
            "depends_on": list(self.depends_on),
            "tools": list(self.tools),
            "max_turns": self.max_turns,
        }
        optional = {"max_tokens": self.max_tokens, "check": self.check, "model": self.model}
        out.update({name: value for name, value in optional.items() if value is not None})
        return out

    @classmethod
    def from_json(cls, data: JsonValue, where: str = "step") -> Step:
        if not isinstance(data, Mapping):
            raise PlanError(f"{where} is not an object")
        unknown = set(data) - {"id", "goal", "depends_on", "tools", "max_turns", "max_tokens", "check", "model"}
        if unknown:
            raise PlanError(f"{where} has unknown field(s): {', '.join(sorted(unknown))}")
        sid, goal = data.get("id"), data.get("goal")
        if not isinstance(sid, str) or not _ID.match(sid):
            raise PlanError(f'{where}: "id" must be a short name (letters, digits, _ . -), got {sid!r}')
        if not isinstance(goal, str) or not goal.strip():
            raise PlanError(f'step {sid}: "goal" must be a non-empty string')
        deps, tools = data.get("depends_on", []), data.get("tools", [])
        for name, value in (("depends_on", deps), ("tools", tools)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise PlanError(f'step {sid}: "{name}" must be a list of strings')
        turns, tokens = data.get("max_turns", DEFAULT_MAX_TURNS), data.get("max_tokens")
        if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
            raise PlanError(f'step {sid}: "max_turns" must be a whole number of at least 1')
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1):
            raise PlanError(f'step {sid}: "max_tokens" must be a whole number of at least 1, or absent')
        check, model = data.get("check"), data.get("model")
        if check is not None and (not isinstance(check, str) or not check.strip()):
            raise PlanError(f'step {sid}: "check" must be a shell command, or absent')
        if model is not None and not isinstance(model, str):
            raise PlanError(f'step {sid}: "model" must be a string, or absent')
        return cls(sid, goal.strip(), tuple(deps), tuple(tools), turns, tokens, check, model)


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    task: str = ""
    max_turns: int | None = None  # the plan's own budget, over all its steps
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    # -- structure

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.steps]

    def ready(self, done: Iterable[str]) -> list[Step]:
        """The steps not done whose dependencies all are, in plan order."""
        done = set(done)
        return [s for s in self.steps if s.id not in done and all(d in done for d in s.depends_on)]

    def dependants(self, step_id: str) -> list[str]:
        """Every step that depends on ``step_id``, directly or through others, in plan order."""
        found = {step_id}
        changed = True
        while changed:
            changed = False
            for s in self.steps:
                if s.id not in found and found.intersection(s.depends_on):
                    found.add(s.id)
                    changed = True
        return [s.id for s in self.steps if s.id in found and s.id != step_id]

    def cycle(self) -> list[str] | None:
        """A dependency cycle as the ids along it (first id repeated at the end), or None."""
        deps = {s.id: [d for d in s.depends_on if d in self.ids] for s in self.steps}
        colour: dict[str, int] = {}  # 1: on the current path, 2: finished
        path: list[str] = []

        def visit(node: str) -> list[str] | None:
            colour[node] = 1
            path.append(node)
            for d in deps[node]:
                if colour.get(d) == 1:
                    return path[path.index(d) :] + [d]
                if d not in colour and (found := visit(d)):
                    return found
            path.pop()
            colour[node] = 2
            return None

        for s in self.steps:
            if s.id not in colour and (found := visit(s.id)):
                return list(reversed(found))  # in the direction the work flows: a -> b -> a
        return None

    def validate(
        self, known_tools: Iterable[str] | None = None, budget: Budget | None = None, *, max_turns: int | None = None
    ) -> list[str]:
        """What is wrong with the plan, one sentence each (empty: nothing). ``budget``/``max_turns``: the run's
        limits; the steps' budgets added up must fit in them, and in the plan's own."""
        problems: list[str] = []
        if not self.steps:
            return ["the plan has no steps"]
        seen: set[str] = set()
        for s in self.steps:
            if s.id in seen:
                problems.append(f"step id {s.id!r} is used twice")
            seen.add(s.id)
        for s in self.steps:
            for d in s.depends_on:
                if d == s.id:
                    problems.append(f"step {s.id} depends on itself")
                elif d not in seen:
                    problems.append(f"step {s.id} depends on unknown step {d!r}")
        if (cycle := self.cycle()) and len(cycle) > 2:
            problems.append("the steps depend on each other in a cycle: " + " -> ".join(cycle))
        if known_tools is not None:
            known = list(known_tools)
            for s in self.steps:
                bad = [t for t in s.tools if t not in known]
                if bad:
                    problems.append(f"step {s.id} uses unknown tool(s) {', '.join(bad)} (known: {', '.join(known)})")
        problems += self._over_budget(budget, max_turns)
        return problems

    def _over_budget(self, budget: Budget | None, max_turns: int | None) -> list[str]:
        out = []
        turns = sum(s.max_turns for s in self.steps)
        for limit, whose in ((max_turns, "the run's"), (self.max_turns, "the plan's")):
            if limit is not None and turns > limit:
                out.append(f"the steps' max_turns add up to {turns}, over {whose} limit of {limit} turns")
        token_limits = [(budget.tokens if budget else None, "the run's"), (self.max_tokens, "the plan's")]
        for limit, whose in token_limits:
            if limit is None:
                continue
            unbounded = [s.id for s in self.steps if s.max_tokens is None]
            if unbounded:
                out.append(
                    f"{whose} token limit is {limit}, so every step needs a max_tokens "
                    f"(missing: {', '.join(unbounded)})"
                )
            elif (tokens := sum(s.max_tokens or 0 for s in self.steps)) > limit:
                out.append(f"the steps' max_tokens add up to {tokens}, over {whose} limit of {limit} tokens")
        return out

    # -- the file

    def to_json(self) -> JsonObject:
        out: JsonObject = {"version": FORMAT_VERSION}
        if self.task:
            out["task"] = self.task
        plan_budget = {k: v for k, v in (("max_turns", self.max_turns), ("max_tokens", self.max_tokens)) if v}
        if plan_budget:
            out["budget"] = plan_budget
        out["steps"] = [s.to_json() for s in self.steps]
        return out

    @classmethod
    def from_json(cls, data: JsonValue) -> Plan:
        """A plan from its JSON (a dict, or the text of one). Raises PlanError saying what is malformed."""
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except ValueError as e:
                raise PlanError(f"the plan is not valid JSON: {e}") from None
        if not isinstance(data, Mapping):
            raise PlanError('a plan is a JSON object: {"steps": [...]}')
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise PlanError(
                f"plan format version {version!r} is not supported (this drivetrain reads version {FORMAT_VERSION})"
            )
        steps = data.get("steps")
        if not isinstance(steps, list):
            raise PlanError('a plan needs "steps": a list of step objects')
        budget = data.get("budget") or {}
        if not isinstance(budget, Mapping) or set(budget) - {"max_turns", "max_tokens"}:
            raise PlanError('"budget" is an object with "max_turns" and/or "max_tokens"')
        task = data.get("task", "")
        return cls(
            tuple(Step.from_json(s, f"step {i + 1}") for i, s in enumerate(steps)),
            task if isinstance(task, str) else "",
            budget.get("max_turns"),
            budget.get("max_tokens"),
        )

    def replace_subtree(self, step_id: str, replacement: Iterable[Step]) -> Plan:
        """This plan with ``step_id`` and its dependants replaced by ``replacement`` (re-planning)."""
        gone = {step_id, *self.dependants(step_id)}
        kept = [s for s in self.steps if s.id not in gone]
        return replace(self, steps=(*kept, *replacement))

    # -- pictures

    def describe(self, statuses: Mapping[str, StepStatus] | None = None) -> str:
        """The plan as a numbered list a person can read and approve."""
        lines = [f"Plan: {self.task}"] if self.task else []
        for i, s in enumerate(self.steps, 1):
            state = f" [{statuses[s.id]}]" if statuses and s.id in statuses else ""
            lines.append(f"{i}. {s.id}{state}: {s.goal}")
            after = f"after {', '.join(s.depends_on)}" if s.depends_on else "first"
            budget = f"{s.max_turns} turn{'s' if s.max_turns != 1 else ''}" + (
                f", {s.max_tokens:,} tokens" if s.max_tokens else ""
            )
            lines.append(f"   {after}; tools: {', '.join(s.tools) or 'none'}; budget: {budget}")
            if s.check:
                lines.append(f"   check: {s.check}")
        return "\n".join(lines)

    def mermaid(
        self, statuses: Mapping[str, StepStatus] | None = None, timings: Mapping[str, float | None] | None = None
    ) -> str:
        """A Mermaid flowchart of the steps; with ``statuses`` coloured by status, ``timings`` (seconds) in labels."""
        names = {s.id: f"s{i}" for i, s in enumerate(self.steps)}
        lines = ["flowchart TD"]
        for s in self.steps:
            label = f"<b>{s.id}</b><br/>{_short(s.goal)}"
            if statuses and s.id in statuses:
                label += (
                    f"<br/><i>{statuses[s.id]}"
                    + (f" · {timings[s.id]:.1f}s" if timings and timings.get(s.id) is not None else "")
                    + "</i>"
                )
            lines.append(f'    {names[s.id]}["{_escape(label)}"]')
        for s in self.steps:
            lines += [f"    {names[d]} --> {names[s.id]}" for d in s.depends_on if d in names]
        if statuses:
            used = [st for st in STATUSES if st in statuses.values()]
            lines += [f"    classDef {st} {COLOURS[st]}" for st in used]
            lines += [f"    class {','.join(names[i] for i in self.ids if statuses.get(i) == st)} {st}" for st in used]
        return "\n".join(lines)


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _escape(text: str) -> str:
    return text.replace('"', "#quot;")


# ---------------------------------------------------------------- asking the model for a plan

PLANNER_SYSTEM = """You plan coding tasks for an agent harness. You do not do the task and cannot use tools now: \
you answer with a plan only. The plan is a DAG of small steps; each step is run later by its own agent loop with \
only the tools you give it, sees only the task, its own goal and the final answers of the steps it depends on, \
and should be one focused piece of work. Steps that do not depend on each other run at the same time."""

SCHEMA = """Answer with one JSON object in a ```json block, of this form:
{"steps": [{"id": "short_name", "goal": "what this step must do and report", "depends_on": ["ids of earlier steps"],
  "tools": ["tool names"], "max_turns": 8, "max_tokens": 60000, "check": "a shell command whose exit code 0 \
means the step is done, or null"}]}
"max_tokens" is optional unless a token limit is given below. Keep the plan small: as few steps as the task needs."""


def planning_prompt(
    task: str, tools: Mapping[str, str], *, budget: Budget | None = None, max_turns: int | None = None
) -> str:
    listed = "\n".join(f"- {name}: {_short(desc, 100)}" for name, desc in tools.items()) or "- (none)"
    limits = []
    if max_turns is not None:
        limits.append(f"the steps' max_turns must add up to at most {max_turns}")
    if budget is not None and budget.tokens is not None:
        limits.append(f"every step needs max_tokens, adding up to at most {budget.tokens}")
    said = ("\nLimits: " + "; ".join(limits) + ".") if limits else ""
    return f"Task: {task}\n\nTools the steps may use:\n{listed}\n\n{SCHEMA}{said}"


def parse_plan(text: str, task: str = "") -> Plan:
    """The plan in a model's answer: a fenced ```json block, or else the outermost {...}. Raises PlanError."""
    fenced = re.findall(r"```(?:json|JSON)?\s*\n(.*?)```", text, re.S)
    candidates = [b for b in fenced if b.strip().startswith("{")]
    if not candidates and "{" in text and "}" in text:
        candidates = [text[text.index("{") : text.rindex("}") + 1]]
    if not candidates:
        raise PlanError("the answer holds no JSON object")
    try:
        data = json.loads(candidates[-1])
    except ValueError as e:
        raise PlanError(f"the plan is not valid JSON: {e}") from None
    plan = Plan.from_json(data)
    return replace(plan, task=plan.task or task)


async def make_plan(agent: Agent, task: str, *, budget: Budget | None = None, max_turns: int | None = None) -> Plan:
    """Ask ``agent``'s model for a plan of ``task`` (no tools offered); the steps may use ``agent``'s tools.

    A plan that cannot be read or does not validate is sent back once with its problems listed;
    if the second answer is no better, PlanError says what was wrong with it."""
    tools = {t.name: t.description or "" for t in agent.tools}
    run = planner_for(agent).start(planning_prompt(task, tools, budget=budget, max_turns=max_turns))
    problems: list[str] = []
    for attempt in range(2):
        if attempt:
            run.submit(
                "That plan cannot be used:\n"
                + "\n".join(f"- {p}" for p in problems)
                + "\n\nAnswer with the whole corrected plan as one ```json block."
            )
        result = await run.finish()
        if result.is_error:
            raise PlanError(f"the model gave no plan: {result.note or result.result or result.subtype}")
        try:
            plan = parse_plan(result.result, task)
            problems = plan.validate(tools, budget, max_turns=max_turns)
        except PlanError as e:
            problems = [str(e)]
        if not problems:
            return plan
    raise PlanError(
        "the model's plan was rejected twice; the problems with the second one:\n"
        + "\n".join(f"  - {p}" for p in problems)
    )


def planner_for(agent: Agent) -> Agent:
    """An agent with the same model and session store that cannot call tools: it only answers."""
    return Agent(
        model=agent.model,
        tools=[],
        system=PLANNER_SYSTEM,
        cwd=agent.cwd,
        store=agent.store,
        observers=list(agent.observers),
        profile=FULL,
        max_tokens=agent.max_tokens,
    )


# ---------------------------------------------------------------- re-planning a failed subtree


async def replan(
    agent: Agent, plan: Plan, step_id: str, failure: str, known_tools: Iterable[str] | None = None
) -> Plan | None:
    """Ask the model for a replacement of ``step_id`` and its dependants, after it failed as ``failure`` says.

    Returns the new plan, or None when the answer is unusable (the next escalation then applies)."""
    subtree = [plan.step(step_id), *(plan.step(i) for i in plan.dependants(step_id))]
    tools = list(known_tools) if known_tools is not None else [t.name for t in agent.tools]
    prompt = (
        f"Task: {plan.task}\n\nThis part of the plan failed, even after one retry:\n```json\n"
        + json.dumps({"steps": [s.to_json() for s in subtree]}, indent=1)
        + f"\n```\nStep {step_id} failed:\n{failure}\n\nSteps outside this part, which you may depend on: "
        + (", ".join(i for i in plan.ids if i not in {s.id for s in subtree}) or "none")
        + ".\nGive a replacement for this part: the same steps with revised goals, or different steps "
        + "(ids not used by the other steps). Tools the steps may use: "
        + ", ".join(tools)
        + ".\n"
        + SCHEMA
    )
    result = await planner_for(agent).run(prompt)
    if result.is_error:
        return None
    try:
        new = plan.replace_subtree(step_id, parse_plan(result.result).steps)
    except PlanError:
        return None
    return None if new.validate(tools) else new


def step_agent(base: Agent, step: Step) -> Agent:
    """``base`` narrowed to one step: only the step's tools, its turn limit, its token budget."""
    budget = replace(base.budget)
    if step.max_tokens is not None:
        budget = replace(budget, tokens=min(step.max_tokens, budget.tokens or step.max_tokens))
    return replace(
        base,
        tools=[t for t in base.tools if t.name in step.tools],
        max_turns=step.max_turns,
        budget=budget,
        observers=list(base.observers),
    )


__all__ = ["FORMAT_VERSION", "Plan", "PlanError", "Step", "make_plan", "parse_plan", "replan", "step_agent"]
