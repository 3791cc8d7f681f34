"""A profile is one object: ``Agent(profile=SMALL)`` in the library runs exactly as the CLI's small profile."""

from pathlib import Path

from drivetrain import Agent, builtin_tools
from drivetrain.cli.build import build_agent
from drivetrain.cli.main import build_parser
from drivetrain.loop.draft import Deps
from drivetrain.loop.profile import FULL
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.small.codeact import CodeActionModel
from drivetrain.small.profile import SMALL

ENV = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}


def equipped(agent):
    """What a run of the agent works with: the outfit its profile made."""
    return Deps.of(agent).outfit


def shape(agent, cwd: Path):
    a = equipped(agent)
    inner = a.model.inner if isinstance(a.model, CodeActionModel) else a.model
    return (
        type(a.model).__name__,
        [t.name for t in a.tools],
        a.system,
        [n.name for n in a.nodes],
        type(inner).__name__,
    )


def test_the_library_agent_with_the_small_profile_is_the_cli_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "a.py").write_text("print(1)\n")
    args = build_parser().parse_args(["-p", "x", "--profile", "small", "--provider", "anthropic"])
    cli = build_agent(args, tmp_path, "s1")
    lib = Agent(model=AnthropicModel.from_env(env=ENV), tools=builtin_tools(), cwd=tmp_path, profile=SMALL)
    assert shape(lib, tmp_path) == shape(cli, tmp_path)
    assert shape(lib, tmp_path)[0] == "CodeActionModel" and sorted(shape(lib, tmp_path)[1]) == ["Bash", "Edit", "Write"]
    assert shape(lib, tmp_path)[3] == ["WorkChecks"]


def test_equipping_leaves_the_agent_as_it_was_and_each_run_gets_its_own_checks(tmp_path):
    agent = Agent(model=AnthropicModel.from_env(env=ENV), tools=builtin_tools(), cwd=tmp_path, profile=SMALL)
    first, second = equipped(agent), equipped(agent)
    assert agent.system == "" and agent.nodes == [] and len(agent.tools) == 6
    assert not isinstance(agent.model, CodeActionModel)
    assert first.nodes[0] is not second.nodes[0]


def test_the_full_profile_adds_nothing_but_an_empty_system_prompt(tmp_path):
    agent = Agent(model=AnthropicModel.from_env(env=ENV), tools=builtin_tools(), cwd=tmp_path, profile=FULL)
    a = equipped(agent)
    assert a.model is agent.model and list(a.tools) == agent.tools and a.system == "" and a.nodes == ()
    assert a.hooks is agent.hooks
    kept = Agent(model=agent.model, system="Be brief.", profile=FULL)
    assert equipped(kept).system == "Be brief."


def test_a_change_to_the_agent_after_a_run_started_reaches_it(tmp_path):
    """The run reads the agent's own settings live, beside what the profile made: a plan raising a retry's turn
    limit (or an observer raising a budget) reaches the running loop, with a profile as without."""
    agent = Agent(
        model=AnthropicModel.from_env(env=ENV), tools=builtin_tools(), cwd=tmp_path, profile=SMALL, max_turns=2
    )
    run = agent.start("x")
    agent.max_turns = 7
    assert run.deps.agent.max_turns == 7 and run.deps.system.startswith("You are a coding agent")


def test_the_cli_attempts_abandon_a_misfire_unless_the_aid_is_ablated(tmp_path, monkeypatch):
    """``DRIVETRAIN_ABLATE=abandon`` keeps an attempt whose first calls misfire (the ablation of the abandoning)."""
    from drivetrain.cli.build import attempts
    from drivetrain.sessions.open import open_store

    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["-p", "x", "--profile", "small", "--provider", "anthropic"])
    for ablate, abandon in (("", True), ("abandon", False)):
        monkeypatch.setenv("DRIVETRAIN_ABLATE", ablate)
        agent = build_agent(args, tmp_path, "s1")
        run = attempts(args, agent, "x", "s1", 3, store=open_store(), servers=None)
        assert run.abandon is abandon
        assert agent.profile.attempts
