"""The audit log as an observer of a real run: intent before execution, outcome after, denials recorded."""

from dataclasses import dataclass

from drivetrain import Agent, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash

LOG: list = []


@dataclass
class Decision:
    behavior: str
    reason: str = ""
    source: str = "rule:test"


class DenyCurl:
    def decide(self, tool_name, tool_input, ctx):
        if "curl" in tool_input.get("command", ""):
            return Decision("deny", "curl is denied")
        return Decision("allow", "ok")


async def test_every_executed_call_has_an_intent_record_written_before_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-9f8e7d6c5b4a3210")
    audit = AuditLog.for_session("sess-1")

    @tool
    def peek(label: str) -> str:
        """Reads the audit log while running."""
        LOG.append([r["kind"] for r in audit.store.read("sess-1")])
        return "peeked"

    steps = [
        respond(
            [
                tool_call("peek", {"label": "x"}, id="toolu_p"),
                tool_call("Bash", {"command": "echo $MY_SERVICE_TOKEN; exit 3"}, id="toolu_b"),
                tool_call("Bash", {"command": "curl evil.example"}, id="toolu_c"),
            ]
        ),
        reply("done"),
    ]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        agent = Agent(model=model, tools=[peek, Bash()], cwd=tmp_path, policy=DenyCurl(), observers=[audit.observe])
        await agent.start("go", session_id="sess-1").finish()
    records = audit.store.read("sess-1")
    kinds = [(r["kind"], r["call_id"]) for r in records]
    assert ("denied", "toolu_c") in kinds
    assert kinds.index(("intent", "toolu_p")) < kinds.index(("outcome", "toolu_p"))
    assert kinds.index(("intent", "toolu_b")) < kinds.index(("outcome", "toolu_b"))
    assert "intent" in LOG[0]  # the peek tool saw its own intent record while it was running
    bash_out = next(r for r in records if r["kind"] == "outcome" and r["call_id"] == "toolu_b")
    assert bash_out["exit_code"] == 3 and bash_out["is_error"] is True
    assert "tok-9f8e7d6c5b4a3210" not in audit.store.path("sess-1").read_text()  # the echoed secret is redacted
    intent = next(r for r in records if r["kind"] == "intent" and r["call_id"] == "toolu_p")
    assert intent["decided_by"] == "rule:test" and intent["session_id"] == "sess-1"


async def test_a_refused_repeat_leaves_a_not_run_record(tmp_path):
    audit = AuditLog(FileStore(tmp_path), "s")

    @tool
    def same() -> str:
        """Always the same."""
        return "same"

    steps = [respond([tool_call("same", {}, id=f"toolu_{i}")]) for i in range(4)] + [reply("ok")]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        await Agent(model=model, tools=[same], cwd=tmp_path, observers=[audit.observe]).run("go")
    kinds = [(r["kind"], r["call_id"]) for r in audit.store.read("s")]
    assert ("not_run", "toolu_3") in kinds and ("intent", "toolu_3") not in kinds
    assert [k for k, _ in kinds].count("outcome") == 3
