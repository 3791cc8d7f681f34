"""The decision: the mode table, rule precedence, the tool's own settings, and why each decision was made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drivetrain.permissions import Decision, Policy, parse_rule
from drivetrain.tools import ToolContext


@pytest.fixture
def ws(tmp_path):
    w = tmp_path / "ws"
    (w / "src").mkdir(parents=True)
    (w / "src" / "a.py").write_text("a\n")
    (tmp_path / "home").mkdir()
    return w


def make(ws: Path, mode: str = "default", allow=(), ask=(), deny=(), **kw) -> Policy:
    home = ws.parent / "home"
    rules = [parse_rule(t, b, f"/cfg/{b}.json", ws, home) for b, ts in (("deny", deny), ("ask", ask),
                                                                           ("allow", allow)) for t in ts]
    return Policy(mode=mode, rules=rules, home=home, **kw)


def behavior(policy: Policy, tool: str, input: dict, ws: Path) -> str:
    return policy.decide(tool, input, ToolContext(cwd=ws)).behavior


# What each mode does with no rules at all.
CASES = {
    "read inside": ("Read", {"file_path": "src/a.py"}),
    "grep inside": ("Grep", {"pattern": "x"}),
    "glob outside": ("Glob", {"pattern": "*", "path": "/etc"}),
    "read outside": ("Read", {"file_path": "/etc/hosts"}),
    "edit inside": ("Edit", {"file_path": "src/a.py", "old_string": "a", "new_string": "b"}),
    "write inside": ("Write", {"file_path": "new.txt", "content": ""}),
    "write outside": ("Write", {"file_path": "/tmp/x.txt", "content": ""}),
    "write settings": ("Write", {"file_path": ".drivetrain/settings.json", "content": "{}"}),
    "write .git": ("Write", {"file_path": ".git/config", "content": ""}),
    "bash read-only": ("Bash", {"command": "git status && ls src"}),
    "bash write inside": ("Bash", {"command": "echo x > out.txt"}),
    "bash mkdir": ("Bash", {"command": "mkdir -p build"}),
    "bash other": ("Bash", {"command": "npm test"}),
    "bash unparsable": ("Bash", {"command": "echo $((1+2))"}),
    "bash settings": ("Bash", {"command": "echo {} > .drivetrain/settings.local.json"}),
    "user tool": ("deploy", {}),
    "webfetch": ("WebFetch", {"url": "https://example.com/x"}),
}
TABLE = {  # case: (default, acceptEdits, plan, bypassPermissions)
    "read inside": ("allow", "allow", "allow", "allow"),
    "grep inside": ("allow", "allow", "allow", "allow"),
    "glob outside": ("ask", "ask", "ask", "allow"),
    "read outside": ("ask", "ask", "ask", "allow"),
    "edit inside": ("ask", "allow", "deny", "allow"),
    "write inside": ("ask", "allow", "deny", "allow"),
    "write outside": ("ask", "ask", "deny", "allow"),
    "write settings": ("ask", "ask", "ask", "ask"),
    "write .git": ("ask", "ask", "deny", "allow"),
    "bash read-only": ("allow", "allow", "allow", "allow"),
    "bash write inside": ("ask", "allow", "deny", "allow"),
    "bash mkdir": ("ask", "allow", "deny", "allow"),
    "bash other": ("ask", "ask", "deny", "allow"),
    "bash unparsable": ("ask", "ask", "ask", "allow"),
    "bash settings": ("ask", "ask", "ask", "ask"),
    "user tool": ("ask", "ask", "ask", "allow"),
    "webfetch": ("ask", "ask", "ask", "allow"),
}
MODE_NAMES = ("default", "acceptEdits", "plan", "bypassPermissions")


@pytest.mark.parametrize("case", list(CASES))
def test_mode_table(ws, case):
    tool, input = CASES[case]
    got = tuple(behavior(make(ws, m), tool, input, ws) for m in MODE_NAMES)
    assert got == TABLE[case]


def test_every_decision_says_why(ws):
    d = make(ws, allow=["Bash(npm test:*)"]).decide("Bash", {"command": "npm test"}, ws)
    assert d == Decision("allow", d.reason, "/cfg/allow.json", "Bash(npm test:*)", d.details)
    assert "Bash(npm test:*)" in d.reason and "/cfg/allow.json" in d.reason
    d = make(ws).decide("Read", {"file_path": "src/a.py"}, ws)
    assert (d.source, d.rule) == ("mode:default", None)
    d = make(ws, "bypassPermissions").decide("Edit", {"file_path": ".drivetrain/settings.json"}, ws)
    assert (d.behavior, d.source) == ("ask", "builtin")


def test_deny_beats_ask_beats_allow(ws):
    p = make(ws, allow=["Bash(git:*)", "Read"], ask=["Bash(git push:*)"], deny=["Bash(git push --force:*)",
                                                                              "Read(**/.env)"])
    assert behavior(p, "Bash", {"command": "git log"}, ws) == "allow"
    assert behavior(p, "Bash", {"command": "git push origin"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "git push --force"}, ws) == "deny"
    assert behavior(p, "Read", {"file_path": "sub/.env"}, ws) == "deny"
    assert behavior(p, "Read", {"file_path": "/etc/hosts"}, ws) == "allow"  # a bare Read rule allows more


def test_first_matching_rule_is_reported(ws):
    p = make(ws, deny=["Bash(rm:*)", "Bash(rm -rf:*)"])
    assert p.decide("Bash", {"command": "rm -rf x"}, ws).rule == "Bash(rm:*)"


def test_deny_rules_see_through_wrappers_paths_and_unknown_wrappers(ws):
    p = make(ws, "bypassPermissions", deny=["Bash(rm:*)"])
    for c in ["rm -rf x", "timeout 5 rm x", "FOO=1 nice -n 2 rm x", "/bin/rm x", "sudo rm x", "env rm x",
              "bash -c 'rm x'", "ls | xargs rm", "find . -exec rm {} \\;", "echo $(rm x)", "mywrapper rm x",
              "eval 'rm x'", "echo $((1)); rm x"]:
        assert behavior(p, "Bash", {"command": c}, ws) == "deny", c
    assert behavior(p, "Bash", {"command": "git rm x"}, ws) == "allow"


def test_ask_rules_and_bare_rules(ws):
    p = make(ws, "bypassPermissions", ask=["Bash(git push:*)"])
    assert behavior(p, "Bash", {"command": "git status && git push"}, ws) == "ask"
    assert behavior(make(ws, allow=["Bash"]), "Bash", {"command": "make deploy; echo $((1))"}, ws) == "allow"
    assert behavior(make(ws, "bypassPermissions", deny=["Bash"]), "Bash", {"command": "ls"}, ws) == "deny"


def test_file_rules_apply_to_what_shell_commands_read_and_write(ws):
    p = make(ws, "acceptEdits", allow=["Bash(cat:*)"], deny=["Read(secrets/**)", "Edit(src/generated/**)"])
    assert behavior(p, "Bash", {"command": "cat secrets/key"}, ws) == "deny"
    assert behavior(p, "Bash", {"command": "grep x < secrets/key"}, ws) == "deny"
    assert behavior(p, "Bash", {"command": "echo x > src/generated/a.py"}, ws) == "deny"
    assert behavior(p, "Bash", {"command": "echo x > src/b.py"}, ws) == "allow"
    p = make(ws, allow=["Bash(cat:*)", "Read(//etc/hosts)", "Edit(//tmp/out/**)"])
    assert behavior(p, "Bash", {"command": "cat /etc/hosts > /tmp/out/h"}, ws) == "allow"


def test_prefix_rules_stop_at_dangers_unless_their_words_name_them(ws):
    p = make(ws, allow=["Bash(find:*)", "Bash(git branch:*)", "Bash(sed -i:*)", "Bash(find . -delete)"])
    assert behavior(p, "Bash", {"command": "find . -name x -delete"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "find . -delete"}, ws) == "allow"  # the exact rule
    assert behavior(p, "Bash", {"command": "git branch -D x"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "sed -i s/a/b/ src/a.py"}, ws) == "allow"
    assert behavior(p, "Bash", {"command": "sed -i 's/a/b/w /tmp/x' src/a.py"}, ws) == "ask"
    d = p.decide("Bash", {"command": "find . -delete -name y"}, ws)
    assert "find -delete deletes files" in d.reason and "Bash(find:*)" in d.reason


def test_prefix_rules_do_not_reach_outside_the_workspace(ws):
    p = make(ws, allow=["Bash(cat:*)", "Bash(echo:*)", "Bash(ls:*)"])
    assert behavior(p, "Bash", {"command": "cat src/a.py"}, ws) == "allow"
    assert behavior(p, "Bash", {"command": "cat ~/.ssh/id_rsa"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "echo x > ../x"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "cd .. && ls"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "cd src && ls"}, ws) == "allow"
    assert behavior(make(ws, allow=["Bash(cat /etc/hosts)"]), "Bash", {"command": "cat /etc/hosts"}, ws) == "allow"


def test_sudo_and_dangerous_assignments_ask(ws):
    p = make(ws, "acceptEdits", allow=["Bash(ls:*)", "Bash(sudo:*)"])
    assert behavior(p, "Bash", {"command": "sudo ls"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "PATH=/tmp ls"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "LC_ALL=C ls"}, ws) == "allow"
    assert behavior(make(ws, allow=["Bash(sudo apt-get update)"]), "Bash",
                    {"command": "sudo apt-get update"}, ws) == "allow"


def test_plan_mode_denies_non_read_only_even_with_a_rule(ws):
    p = make(ws, "plan", allow=["Bash(npm test:*)", "Edit"])
    assert behavior(p, "Bash", {"command": "npm test"}, ws) == "deny"
    assert behavior(p, "Edit", {"file_path": "src/a.py"}, ws) == "deny"
    assert behavior(p, "Bash", {"command": "git log | head"}, ws) == "allow"
    assert behavior(p, "Bash", {"command": "ls > /dev/null 2>&1"}, ws) == "allow"


def test_settings_are_always_asked_before_writing(ws, tmp_path):
    dthome = tmp_path / "custom-dthome"
    p = make(ws, "bypassPermissions", allow=["Edit", "Bash"], drivetrain_home=dthome)
    for tool, input in [
        ("Write", {"file_path": ".drivetrain/settings.local.json"}),
        ("Edit", {"file_path": "sub/.drivetrain/settings.json"}),
        ("Write", {"file_path": str(dthome / "settings.json")}),
        ("Write", {"file_path": str(dthome / "anything")}),
        ("Bash", {"command": "cp evil.json .drivetrain/settings.json"}),
        ("Bash", {"command": "rm -rf .drivetrain"}),
        ("Bash", {"command": "python -c 'open(\".drivetrain/settings.json\", \"w\")'"}),
        ("Bash", {"command": f"echo $((1)) > {dthome}/settings.json"}),
    ]:
        assert behavior(p, tool, input, ws) == "ask", input
    os.symlink(ws / ".drivetrain", ws / "innocent")
    (ws / ".drivetrain").mkdir()
    assert behavior(p, "Write", {"file_path": "innocent/settings.json"}, ws) == "ask"
    assert behavior(p, "Read", {"file_path": ".drivetrain/settings.json"}, ws) == "allow"


def test_git_internals_ask_in_accept_edits(ws):
    p = make(ws, "acceptEdits")
    assert behavior(p, "Write", {"file_path": ".git/hooks/pre-commit"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "echo x >> .git/config"}, ws) == "ask"
    assert behavior(make(ws, "acceptEdits", allow=["Edit(.git/**)"]), "Write",
                    {"file_path": ".git/info/exclude"}, ws) == "allow"


def test_non_interactive_turns_ask_into_deny(ws):
    p = make(ws, interactive=False)
    d = p.decide("Bash", {"command": "echo $((1+2))"}, ws)
    assert d.behavior == "deny" and "not interactive" in d.reason
    assert behavior(p, "Bash", {"command": "git status"}, ws) == "allow"


def test_webfetch_domains(ws):
    p = make(ws, allow=["WebFetch(domain:example.com)", "WebFetch(domain:*.docs.rs)"],
             deny=["WebFetch(domain:evil.example.com)"])
    assert behavior(p, "WebFetch", {"url": "https://example.com/a"}, ws) == "allow"
    assert behavior(p, "WebFetch", {"url": "https://api.docs.rs/a"}, ws) == "allow"
    assert behavior(p, "WebFetch", {"url": "https://evil.example.com/a"}, ws) == "deny"
    assert behavior(p, "WebFetch", {"url": "https://example.com.evil.net/a"}, ws) == "ask"
    assert behavior(p, "WebFetch", {"url": "not a url"}, ws) == "ask"


def test_user_tools_fall_to_bare_rules_then_the_mode(ws):
    p = make(ws, allow=["deploy", "mcp__github"], deny=["mcp__github__delete_repo"])
    assert behavior(p, "deploy", {}, ws) == "allow"
    assert behavior(p, "mcp__github__create_issue", {}, ws) == "allow"
    assert behavior(p, "mcp__github__delete_repo", {}, ws) == "deny"
    assert behavior(p, "other", {}, ws) == "ask"


def test_invalid_inputs_are_denied(ws):
    p = make(ws, "bypassPermissions")
    assert behavior(p, "Bash", {"command": ["ls"]}, ws) == "deny"
    assert behavior(p, "Read", {}, ws) == "deny"
    assert behavior(p, "Write", {"file_path": 3}, ws) == "deny"


def test_read_denied_helper_for_search_tools(ws):
    p = make(ws, deny=["Read(**/.env)"])
    assert p.read_denied("sub/.env", ws) and not p.read_denied("sub/env.py", ws)
    assert behavior(p, "Grep", {"pattern": "x", "path": "sub"}, ws) == "allow"


def test_cwd_may_be_a_path_or_a_tool_context(ws):
    p = make(ws)
    assert p.decide("Read", {"file_path": "src/a.py"}, ws).allowed
    assert p.decide("Read", {"file_path": "src/a.py"}, str(ws)).allowed
    assert p.decide("Read", {"file_path": "src/a.py"}, ToolContext(cwd=ws)).allowed


def test_git_in_a_bare_repository_the_agent_could_have_written_asks(ws):
    """A planted bare repository: git would read its config (fsmonitor, diff.external, aliases…)."""
    bare = ws / "src" / "planted"
    (bare / "objects").mkdir(parents=True)
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    p = make(ws, allow=["Bash(git status:*)"])
    assert behavior(p, "Bash", {"command": "git status"}, ws) == "allow"
    assert behavior(p, "Bash", {"command": "cd src/planted && git status"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "git -C src/planted log"}, ws) == "ask"
    assert behavior(p, "Bash", {"command": "cd src/planted/objects && git log"}, ws) == "ask"


def test_rules_can_be_added_while_running(ws):
    p = Policy.load(ws, home=ws.parent / "home", env={"DRIVETRAIN_HOME": str(ws.parent / "dt")})
    assert behavior(p, "Bash", {"command": "npm test"}, ws) == "ask"
    rule = p.allow_rule("Bash(npm test:*)")
    assert (rule.source, behavior(p, "Bash", {"command": "npm test -- -x"}, ws)) == ("session", "allow")
    p.allow_rule("Edit(/src/**)", source="settings.local.json")
    assert behavior(p, "Edit", {"file_path": str(ws / "src" / "a.py")}, ws.parent) == "allow"
    with pytest.raises(Exception, match="Invalid permission rule"):
        p.allow_rule("Bash(a; b)")
