"""builtin_tools(): one of each, in order, each a valid Tool with an Anthropic-ready spec."""

import json

from drivetrain.tools import Grep, Tool, builtin_tools, tool_spec
from drivetrain.tools import grep as grep_module


def test_builtin_tools_order_and_specs():
    tools = builtin_tools()
    assert [t.name for t in tools] == ["Read", "Write", "Edit", "Bash", "Grep", "Glob"]
    for t in tools:
        assert isinstance(t, Tool)
        spec = json.loads(json.dumps(tool_spec(t)))  # plain JSON
        schema = spec["input_schema"]
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
        assert len(spec["description"]) > 80  # enough words to teach a small model


def test_grep_falls_back_without_ripgrep(monkeypatch):
    monkeypatch.setattr(grep_module.shutil, "which", lambda name: None)
    assert Grep().rg is None
