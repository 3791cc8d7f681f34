"""Assemble an Agent from the command line and the settings files: model, tools, policy, hooks, audit log."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path

from drivetrain.agent import Agent
from drivetrain.control.approval import Approver
from drivetrain.control.hooks import Hooks
from drivetrain.control.permissions import Policy, load_settings, make_sandbox
from drivetrain.errors import ConfigError, HarnessError
from drivetrain.host.procs import keep_environment_private
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.budget import Budget
from drivetrain.loop.nodes import Verify
from drivetrain.mcp.config import ServerSpec, configured, remember_approval, scope_file
from drivetrain.mcp.group import McpServers
from drivetrain.models.base import Model
from drivetrain.models.local import LocalModel
from drivetrain.models.resident import ResidentModel
from drivetrain.models.resolve import detect_provider, resolve_model
from drivetrain.pricing import Wrapper, prices_from_settings, set_prices
from drivetrain.prompts import default_system_prompt
from drivetrain.sessions.audit import AuditLog, attached
from drivetrain.sessions.open import open_store
from drivetrain.sessions.rewind import Checkpoints
from drivetrain.sessions.store import SessionStore
from drivetrain.small.attempts import DEFAULT_ATTEMPTS, LOCAL_ATTEMPTS, Attempts, Sampled
from drivetrain.small.profile import DEFAULT_WALL_S, select_profile
from drivetrain.small.selection import AttemptSpec
from drivetrain.subagents.definitions import load_types
from drivetrain.subagents.task import TaskTool
from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetrySettings, telemetry_env
from drivetrain.tools import builtin_tools

ApproverFactory = Callable[[Path, Policy], Approver]  # the approver may add rules to the policy


def system_prompt(args: argparse.Namespace, cwd: Path, profile_default: str | None = None) -> str:
    system: str | None = args.system_prompt
    if system is None:
        system = profile_default if profile_default is not None else default_system_prompt(cwd)
    if args.append_system_prompt:
        system = f"{system}\n\n{args.append_system_prompt}"
    return system


def build_agent(
    args: argparse.Namespace,
    cwd: Path,
    session_id: str,
    *,
    approver_factory: ApproverFactory | None = None,
    store: SessionStore | None = None,
    servers: McpServers | None = None,
    model: Model | None = None,
    env: Mapping[str, str] | None = None,
) -> Agent:
    """Raises HarnessError (ConfigError, SettingsError …) with a message for the person. ``model``: one already
    made for these flags (a batch sweep shares it between its runs); ``env``: set for every Bash command."""
    keep_environment_private()  # tools get no credentials in their environment; nor may they read ours
    settings = load_settings(cwd)
    set_prices(prices_from_settings(settings.raw))  # the settings files' "pricing" entries, over the price table
    policy = Policy.load(
        cwd,
        mode=args.permission_mode,
        allowed_tools=args.allowed_tools,
        disallowed_tools=args.disallowed_tools,
        add_dirs=args.add_dir,
        interactive=approver_factory is not None,
        settings=settings,
    )
    sandbox = make_sandbox(args.sandbox, cwd, policy.additional_dirs, settings)
    store = store or open_store()  # $DRIVETRAIN_SESSION_STORE, or files under $DRIVETRAIN_HOME
    audit = AuditLog(store, session_id)
    provider = args.provider or detect_provider(dict(os.environ))
    if model is None:
        model = resolve_model(args.provider, args.model)
        if args.seed is not None:
            model = Sampled(model, args.seed, None)
        if args.provider is None and provider == "local":
            print(
                f"drivetrain: no ANTHROPIC_* or OPENAI_* settings, so using the embedded local model ({model.name}).",
                file=sys.stderr,
                flush=True,
            )
    try:
        profile = select_profile(model.name, provider, args.profile, os.environ)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    hooks = Hooks.from_settings(settings.raw, settings.env_passthrough)
    tools = builtin_tools(sandbox=sandbox, env_passthrough=settings.env_passthrough, env=env)
    tools += servers.tools(policy) if servers is not None else []
    agent = Agent(  # the profile adds its own model wrapper, tools, hooks and nodes when a run starts
        model=model,
        tools=tools,
        system=system_prompt(args, cwd, profile.default_system()),
        max_turns=args.max_turns,
        cwd=cwd,
        policy=policy,
        hooks=hooks,
        observers=[audit.observe],
        profile=profile,
        store=store,
        budget=Budget(
            usd=args.max_budget_usd,
            tokens=args.max_tokens_total,
            wall_time_s=args.max_wall_time if args.max_wall_time is not None else profile.default_wall_s(),
            tool_calls=args.max_tool_calls,
            wrap_up=args.wrap_up_on_limit,
        ),
    )
    # the subagent's tools are the parent's as it stands now (MCP tools included), less Task itself
    agent.tools.append(TaskTool(agent, load_types(cwd), model_for=lambda name: resolve_model(args.provider, name)))
    if args.verify:
        agent.nodes.append(Verify(args.verify))
    if approver_factory is not None:
        agent.approver = approver_factory(cwd, policy)
    agent.telemetry = _telemetry(cwd, settings.raw)
    if not args.no_checkpoints and _in_git_work_tree(cwd) and shutil.which("git"):
        agent.checkpoints = Checkpoints(cwd)  # `drivetrain rewind` puts the workspace back as before a prompt
    return agent


def embedded(model: Model) -> LocalModel | ResidentModel | None:
    """The embedded model under ``model``'s wrappers (the interactive screen's Streamed, say), if it is one."""
    innermost: object = model
    while isinstance(innermost, Wrapper):
        innermost = innermost.inner
    return innermost if isinstance(innermost, LocalModel | ResidentModel) else None


def one_after_another(model: Model) -> bool:
    """Whether a task's attempts on ``model`` run one after another: an embedded model that decodes one request at
    a time (each attempt starts only after the earlier ones are known to have failed); a server, or an embedded
    model with sequences to decode them together ($DRIVETRAIN_LOCAL_PARALLEL), takes them at once."""
    local = embedded(model)
    return local is not None and local.parallel < 2


def attempts_wanted(args: argparse.Namespace, agent: Agent) -> int:
    """How many attempts a task runs as: ``--attempts``, else, under a profile with the ``attempts`` aid (the small
    one), the settings' ``attempts``, else ``LOCAL_ATTEMPTS`` for the embedded model (one after another, a further
    one starts only after a known failure; or decoded together) and ``DEFAULT_ATTEMPTS`` (one) for a server's, where
    every attempt runs and is billed; 1 under the other profiles unless asked for."""
    if not agent.profile.attempts and args.attempts is None:
        return 1
    k: int | None = args.attempts
    if k is None:  # the first settings file that says (local, project, user), else the default
        said = [v for _, raw in load_settings(agent.cwd).raw if isinstance(v := raw.get("attempts"), int)]
        k = said[0] if said else LOCAL_ATTEMPTS if embedded(agent.model) is not None else DEFAULT_ATTEMPTS
    if k < 1:
        raise ConfigError(f"attempts must be at least 1 (got {k})")
    return k


def attempts(
    args: argparse.Namespace,
    agent: Agent,
    prompt: str,
    session_id: str,
    k: int,
    *,
    store: SessionStore,
    servers: McpServers | None,
    approver_factory: ApproverFactory | None = None,
) -> Attempts:
    """The task as ``k`` attempts: each attempt's agent assembled as this one was, for its copy of the workspace,
    with its own seed and temperature, within the run's one wall budget."""
    base_model = agent.model.inner if isinstance(agent.model, Sampled) else agent.model
    started = time.monotonic()
    one = argparse.Namespace(**{**vars(args), "seed": None})

    def make(spec: AttemptSpec) -> Agent:
        attempt = build_agent(
            one,
            spec.cwd,
            spec.session_id,
            store=store,
            servers=servers,
            model=Sampled(base_model, spec.seed, spec.temperature),
            approver_factory=approver_factory,
        )
        attempt.checkpoints = None  # the run's own checkpoint covers the workspace; a copy needs none
        if agent.budget.wall_time_s is not None:
            left = agent.budget.wall_time_s - (time.monotonic() - started)
            attempt.budget = replace(attempt.budget, wall_time_s=max(1.0, left))
        return attempt

    together = not one_after_another(base_model)
    scratch = None
    if args.keep_attempts is not None:  # refused before the run starts: nothing is logged or changed
        scratch = args.keep_attempts.resolve()
        if scratch.exists() and not scratch.is_dir():
            raise ConfigError(f"--keep-attempts {args.keep_attempts}: a file, not a folder")
        if scratch.exists() and any(scratch.iterdir()):
            raise ConfigError(f"--keep-attempts {args.keep_attempts}: the folder is not empty")
    main = agent.start(prompt, session_id=session_id)
    return Attempts(
        main,
        prompt,
        make,
        k,
        seed=args.seed,
        wall_s=agent.budget.wall_time_s,
        together=together,
        scratch=scratch,
        abandon=agent.profile.abandon,
    )


def _telemetry(cwd: Path, files: list[tuple[Path, JsonObject]]) -> Telemetry | None:
    """What content the runs' telemetry may send (``OTEL_LOG_*``) and the attributes on every metric point and event
    (``OTEL_METRICS_INCLUDE_*``), a settings file's ``"env"`` too; the providers are the global ones
    ``cli.telemetry.start_telemetry`` installed. None when telemetry is off."""
    try:
        settings = TelemetrySettings.from_env(telemetry_env(os.environ, files))
    except HarnessError:  # start_telemetry said why, and left it off
        return None
    return Telemetry(content=settings.content, common=settings.common) if settings.enabled else None


def audit_log(agent: Agent) -> AuditLog | None:
    """The audit log ``build_agent`` gave the agent (it observes the run): a caller that moves the run to another
    session id moves its audit records with it."""
    return attached(agent.observers)


async def start_servers(
    args: argparse.Namespace, cwd: Path, ask: Callable[[ServerSpec], Awaitable[bool]] | None = None
) -> McpServers:
    """The run's MCP servers, started. A project server (``.mcp.json``) not yet approved is asked about (``ask``,
    interactive: the answer is kept in the local settings) or, without ``ask``, skipped with a line saying how
    to enable it."""
    found = configured(cwd, args.mcp_config, args.strict_mcp_config)
    specs = list(found.servers)
    for spec in found.unapproved:
        if ask is None:
            print(
                f"drivetrain: skipped MCP server {spec.name!r} from {spec.source} ({spec.command_line()}): "
                "project servers start only once approved. To approve it, add "
                f'"enabledMcpjsonServers": ["{spec.name}"] (or "enableAllProjectMcpServers": true) to '
                f"{scope_file('local', cwd)}, or run drivetrain interactively once.",
                file=sys.stderr,
            )
            continue
        approved = await ask(spec)
        remember_approval(cwd, spec.name, approved)
        if approved:
            specs.append(spec)
    servers = McpServers(specs, cwd)
    await servers.start()
    return servers


def _in_git_work_tree(cwd: Path) -> bool:
    """Checkpoints snapshot what git would see; outside a repository that could be a whole home folder."""
    return any((d / ".git").exists() for d in (cwd, *cwd.parents))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The permission and sandbox flags, with Claude Code's names (and kebab-case twins)."""
    p.add_argument(
        "--allowedTools",
        "--allowed-tools",
        dest="allowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help='rules to allow, e.g. "Bash(git status:*)" Edit',
    )
    p.add_argument(
        "--disallowedTools",
        "--disallowed-tools",
        dest="disallowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="rules to deny",
    )
    p.add_argument(
        "--add-dir",
        dest="add_dir",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="more folders the file tools may use",
    )
    p.add_argument(
        "--profile",
        choices=["small", "full"],
        default=None,
        help="how much the loop helps the model; default: small for the embedded model and small "
        "OpenAI-compatible models (by name), full otherwise",
    )
    p.add_argument(
        "--max-budget-usd", type=float, default=None, help="stop before a request once this invocation cost this"
    )
    p.add_argument(
        "--max-tokens-total",
        type=int,
        default=None,
        help="stop once this invocation's requests read and wrote this many tokens (cache tokens included)",
    )
    p.add_argument(
        "--max-wall-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"stop after this long (the small profile: {DEFAULT_WALL_S:g} s unless set, for all its attempts)",
    )
    p.add_argument(
        "--attempts",
        type=int,
        default=None,
        metavar="K",
        help="run the task as K fresh attempts, each in a copy of the workspace, and keep "
        'the one the evidence backs (default: the settings\' "attempts", else 1: a single run)',
    )
    p.add_argument(
        "--keep-attempts",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each attempt's copy of the workspace in DIR/aN (and the pristine copy in DIR/base) for "
        "inspection, instead of removing them when the run ends",
    )
    p.add_argument(
        "--seed", type=int, default=None, help="the sampling seed (the local model: the same seed, the same run)"
    )
    p.add_argument("--max-tool-calls", type=int, default=None, help="stop once the model asked for this many calls")
    p.add_argument(
        "--verify",
        metavar="COMMAND",
        default=None,
        help='when the model wants to finish, run COMMAND (e.g. "pytest -q"); on failure it goes back '
        "to work with the output (twice at most)",
    )
    p.add_argument(
        "--wrap-up-on-limit",
        action="store_true",
        help="on reaching a limit, one last request without tools for a summary of what was done",
    )
    p.add_argument(
        "--no-checkpoints",
        action="store_true",
        help="do not snapshot the workspace before each prompt (on by default inside a git repository)",
    )
    p.add_argument(
        "--mcp-config",
        dest="mcp_config",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE_OR_JSON",
        help='MCP servers, as a file or JSON text like \'{"mcpServers": {"calc": {"command": "…"}}}\'',
    )
    p.add_argument(
        "--strict-mcp-config",
        action="store_true",
        help="use only the --mcp-config servers (not .mcp.json nor the settings files')",
    )
    p.add_argument(
        "--sandbox",
        action="store_true",
        help="run Bash inside bubblewrap: workspace writable, the rest read-only, no network",
    )
