"""Permission decisions and approvals, end to end through the loop against the scripted server."""

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from drivetrain import Agent, Allow, Defer, Deny, PendingCall, PermissionDecided, Policy, ToolStarted, lint, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

ran: list[str] = []


@tool
def shell(command: str) -> str:
    """Pretend to run a command."""
    ran.append(command)
    return f"ran {command}"


@dataclass
class Decision:
    behavior: str
    reason: str = ""
    source: str = "test-policy"


class TablePolicy:
    """allow/ask/deny by the command's first word."""

    def __init__(self, **table):
        self.table = table

    def decide(self, tool_name, tool_input, ctx):
        word = tool_input.get("command", "").split()[0]
        return Decision(self.table.get(word, "ask"), f"{word} is {self.table.get(word, 'unlisted')}")


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


def agent_for(server, **kw):
    model = AnthropicModel.from_env("claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
    return Agent(model=model, tools=[shell], strict=True, **kw)


def results(body):
    return body["messages"][-1]["content"]


async def test_denied_call_reaches_the_model_as_an_error_and_the_run_goes_on():
    def check(body):
        (res,) = results(body)
        assert res["is_error"] and "Permission denied: rm is deny" in res["content"]

    steps = [respond([tool_call("shell", {"command": "rm -rf /"})]), reply("ok, I won't", expect=check)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, policy=TablePolicy(rm="deny")).run("clean up")
    assert ran == [] and result.subtype == "success" and result.result == "ok, I won't"


async def test_ask_without_an_approver_is_denied_with_the_reason():
    def check(body):
        (res,) = results(body)
        assert res["is_error"] and "non-interactive" in res["content"] and "curl is unlisted" in res["content"]

    steps = [respond([tool_call("shell", {"command": "curl x"})]), reply("fine", expect=check)]
    with ScriptedServer(steps) as server:
        await agent_for(server, policy=TablePolicy()).run("go")
    assert ran == []


async def test_approver_can_edit_input_or_deny_with_a_message_sync_or_async():
    async def approver(call):
        if call.input["command"].startswith("make"):
            return Allow({"command": "make test -j1"}, by="person")
        return Deny("Not today: use the test suite instead.", by="person")

    def check(body):
        made, refused = results(body)
        assert made["content"] == "ran make test -j1" and not made.get("is_error")
        assert refused["is_error"] and refused["content"] == "Not today: use the test suite instead."

    steps = [
        respond([tool_call("shell", {"command": "make test"}), tool_call("shell", {"command": "npm publish"})]),
        reply("done", expect=check),
    ]
    seen = []
    with ScriptedServer(steps) as server:
        agent = agent_for(server, policy=TablePolicy(), approver=approver, observers=[seen.append])
        await agent.run("go")
    assert ran == ["make test -j1"]
    decided = [(e.behavior, e.by) for e in seen if isinstance(e, PermissionDecided)]
    assert decided == [("allow", "person"), ("deny", "person")]
    started = [e.input for e in seen if isinstance(e, ToolStarted)]
    assert started == [{"command": "make test -j1"}]


async def test_allowed_calls_wait_while_another_call_is_deferred(tmp_path):
    steps = [
        respond(
            [
                tool_call("shell", {"command": "ls"}, id="toolu_ls"),
                tool_call("shell", {"command": "deploy prod"}, id="toolu_dep"),
            ]
        )
    ]
    with ScriptedServer(steps) as server:
        agent = agent_for(server, policy=TablePolicy(ls="allow"), approver=lambda call: Defer())
        result = await agent.run("deploy")
    assert result.subtype == "awaiting_approval" and not result.is_error
    assert [p.to_json() for p in result.pending] == [
        {"id": "toolu_dep", "name": "shell", "input": {"command": "deploy prod"}, "reason": ""}
    ]
    assert ran == []  # nothing runs until every call of the turn is decided
    assert lint(result.history).problems == [
        f"message 1: tool_use ids {['toolu_ls', 'toolu_dep']} have no tool_result message"
    ]


RESUME = textwrap.dedent("""
    import asyncio, json, sys
    from drivetrain import Agent, Allow, tool
    from drivetrain.models.anthropic import AnthropicModel

    @tool
    def shell(command: str) -> str:
        "Pretend to run a command."
        return f"ran {command} in pid-2"

    async def main():
        url, path = sys.argv[1], sys.argv[2]
        snap = json.load(open(path))
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"})
        run = Agent(model=model, tools=[shell], strict=True).restore(snap)
        run.resume({p.id: Allow(by="person") for p in run.pending})
        result = await run.finish()
        print(json.dumps(result.to_json()))

    asyncio.run(main())
""")


async def test_deferred_approval_resumes_in_a_new_process(tmp_path):
    def check(body):
        ls, dep = results(body)
        assert ls["content"] == "ran ls in pid-2" and dep["content"] == "ran deploy prod in pid-2"

    steps = [
        respond(
            [
                tool_call("shell", {"command": "ls"}, id="toolu_ls"),
                tool_call("shell", {"command": "deploy prod"}, id="toolu_dep"),
            ]
        ),
        reply("deployed", expect=check),
    ]
    with ScriptedServer(steps) as server:
        agent = agent_for(server, policy=TablePolicy(ls="allow"), approver=lambda call: Defer())
        run = agent.start("deploy")
        paused = await run.finish()
        assert paused.subtype == "awaiting_approval"
        snap = tmp_path / "run.json"
        snap.write_text(json.dumps(run.snapshot()))
        proc = subprocess.run(
            [sys.executable, "-c", RESUME, server.url, str(snap)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["subtype"] == "success" and result["result"] == "deployed" and result["num_turns"] == 2
    assert result["session_id"] == run.session_id


async def test_resume_needs_a_decision_for_every_pending_call():
    steps = [respond([tool_call("shell", {"command": "a"}), tool_call("shell", {"command": "b"})])]
    with ScriptedServer(steps) as server:
        run = agent_for(server, policy=TablePolicy(), approver=lambda c: Defer()).start("go")
        await run.finish()
    with pytest.raises(ValueError, match="no decision"):
        run.resume({run.pending[0].id: Allow()})


@pytest.mark.parametrize(
    "approver",
    [
        pytest.param(lambda call: (_ for _ in ()).throw(RuntimeError("the approval service is down")), id="raises"),
        pytest.param(lambda call: "yes please", id="not-a-verdict"),
    ],
)
async def test_a_failing_approver_denies_the_call_naming_the_failure_and_the_run_goes_on(approver):
    def check(body):
        (res,) = results(body)
        assert res["is_error"] and "approval step failed" in res["content"]
        assert "RuntimeError: the approval service is down" in res["content"] or "'yes please'" in res["content"]

    steps = [respond([tool_call("shell", {"command": "deploy prod"})]), reply("I could not deploy.", expect=check)]
    seen = []
    with ScriptedServer(steps) as server:
        result = await agent_for(server, policy=TablePolicy(), approver=approver, observers=[seen.append]).run("go")
    assert ran == [] and result.subtype == "success" and result.result == "I could not deploy."
    assert lint(result.history).problems == []
    assert [(e.behavior, e.by) for e in seen if isinstance(e, PermissionDecided)] == [("deny", "approver-failure")]


# ---------------------------------------------------------------- the terminal approver's "don't ask again"


class ScriptedUI:
    """The terminal's side of an approval, answered from a list: an option's index (None: Esc) or a line of text.
    ``said`` gets everything shown, the options as one line each."""

    def __init__(self, answers, said):
        self.answers, self.said = list(answers), said

    def show_call(self, call, text):
        self.said.append(text)

    def say(self, text):
        self.said.append(text)

    async def choose(self, options):
        self.said.extend(f"{i}. {o}" for i, o in enumerate(options, 1))
        return self.answers.pop(0)

    async def ask(self, question):
        self.said.append(question)
        return self.answers.pop(0)


def terminal(ws, answers, said, policy=None):
    """A TerminalApprover answered from a list, with the policy the CLI would build for ``ws``."""
    from drivetrain.cli.approve import TerminalApprover

    return TerminalApprover(ScriptedUI(answers, said), ws, policy or Policy.load(ws))


def call(name, **input):
    return PendingCall("toolu_1", name, input, "needs approval")


async def test_no_project_rule_is_offered_for_a_command_no_rule_can_express(tmp_path):
    said = []
    approver = terminal(tmp_path, [0], said)
    verdict = await approver(call("Bash", command="echo $(whoami) > who.txt"))
    assert isinstance(verdict, Allow) and verdict.by == "person"
    assert "No rule can allow exactly this call again: Bash(echo $(whoami) > who.txt) is not a valid rule" in said[1]
    assert said[2:] == ["1. Yes", "2. No, and tell the model what to do differently"]
    assert not (tmp_path / ".drivetrain").exists()
    Policy.load(tmp_path)  # the project still loads


async def test_the_options_come_in_claude_codes_order_with_the_rule_they_would_add(tmp_path):
    said = []
    await terminal(tmp_path, [0], said)(call("Bash", command="make test"))
    assert said[1:] == [
        "1. Yes",
        "2. Yes, and don't ask again for Bash(make test) this session",
        "3. Yes, and always allow Bash(make test) in this project",
        "4. No, and tell the model what to do differently",
    ]


async def test_no_with_a_reason_and_esc_deny_with_and_without_a_message(tmp_path):
    said = []
    verdict = await terminal(tmp_path, [3, "use the staging target"], said)(call("Bash", command="make deploy"))
    assert verdict == Deny("The user denied this Bash call. They said: use the staging target", by="person")
    verdict = await terminal(tmp_path, [None], said)(call("Bash", command="make deploy"))
    assert verdict == Deny("The user denied this Bash call.", by="person")  # Esc: no question follows


async def test_dont_ask_again_for_the_session_is_learnt_at_once(tmp_path):
    said = []
    policy = Policy.load(tmp_path)
    approver = terminal(tmp_path, [1], said, policy)
    assert await approver(call("Bash", command="make test")) == Allow(by="person (for this session: Bash(make test))")
    assert policy.decide("Bash", {"command": "make test"}, tmp_path).behavior == "allow"
    assert await approver(call("Bash", command="make test")) == Allow(by="person (session rule Bash(make test))")
    assert not (tmp_path / ".drivetrain").exists()


async def test_a_rule_that_would_not_match_the_call_is_not_offered(tmp_path):
    said = []
    verdict = await terminal(tmp_path, [0], said)(call("Write", file_path="a[1].py", content="x"))
    assert isinstance(verdict, Allow)
    assert (
        "Edit(a[1].py) would not allow it" in said[1]
        and len([s for s in said if s[:2] in ("1.", "2.", "3.", "4.")]) == 2
    )


async def test_always_allow_in_this_project_saves_a_checked_rule_the_next_start_loads(tmp_path):
    (tmp_path / ".drivetrain").mkdir()
    local = tmp_path / ".drivetrain" / "settings.local.json"
    local.write_text(json.dumps({"permissions": {"deny": ["Bash(rm:*)"]}, "env": {"KEEP": "me"}}))
    said = []
    policy = Policy.load(tmp_path)
    verdict = await terminal(tmp_path, [2], said, policy)(call("Bash", command="make test"))
    assert verdict == Allow(by="person (project rule Bash(make test))")
    assert json.loads(local.read_text()) == {
        "permissions": {"deny": ["Bash(rm:*)"], "allow": ["Bash(make test)"]},
        "env": {"KEEP": "me"},
    }
    assert policy.decide("Bash", {"command": "make test"}, tmp_path).behavior == "allow"  # learnt at once
    assert Policy.load(tmp_path).decide("Bash", {"command": "make test"}, tmp_path).behavior == "allow"
    assert [p.name for p in local.parent.iterdir()] == ["settings.local.json"]  # no temporary file left


async def test_a_project_rule_that_cannot_be_saved_says_why_and_allows_once(tmp_path):
    (tmp_path / ".drivetrain").mkdir()
    local = tmp_path / ".drivetrain" / "settings.local.json"
    said = []
    policy = Policy.load(tmp_path)
    local.write_text('{"permissions": {"allow": [')  # broken by hand while the session runs
    verdict = await terminal(tmp_path, [2], said, policy)(call("Bash", command="make test"))
    assert verdict == Allow(by="person")
    assert "Could not add Bash(make test)" in said[-1] and "not valid JSON" in said[-1] and "Allowed once" in said[-1]
    assert local.read_text() == '{"permissions": {"allow": ['  # left as it was
    assert policy.decide("Bash", {"command": "make test"}, tmp_path).behavior == "ask"  # nothing learnt
