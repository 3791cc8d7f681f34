"""Rules in Claude Code's syntax, path patterns, settings files and their error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drivetrain.control.permissions import (
    Policy,
    RuleError,
    SettingsError,
    decode_word,
    load_settings,
    parse_rule,
    split_tool_list,
)
from drivetrain.errors import ConfigError

ROOT, HOME = Path("/proj"), Path("/home/u")


def rule(text: str, behavior: str = "allow"):
    return parse_rule(text, behavior, "test", ROOT, HOME)


def ws(*values: str):
    return [decode_word(v, str(HOME)) for v in values]


def test_bare_and_star_rules_match_every_use():
    for text in ("Bash", "Bash(*)", "Read", "mcp__github"):
        assert rule(text).bare
    assert rule("Bash").match_words(ws("anything", "at", "all"))
    assert rule("mcp__github").covers_tool("mcp__github__create_issue")
    assert not rule("mcp__github").covers_tool("mcp__gitlab__x")


def test_bash_exact_and_prefix_rules_match_words_not_text():
    exact, prefix = rule("Bash(git status)"), rule("Bash(git status:*)")
    assert exact.match_words(ws("git", "status")) and not exact.match_words(ws("git", "status", "-s"))
    assert prefix.match_words(ws("git", "status")) and prefix.match_words(ws("git", "status", "-s"))
    assert not prefix.match_words(ws("git", "statusx"))
    assert not prefix.match_words(ws("git"))
    assert not prefix.match_words(ws("git", "$x"))
    assert prefix.match_words(ws('g""it', "'status'"))
    assert rule("Bash(npm run test:*)").match_words(ws("npm", "run", "test", "--", "-x"))
    assert not rule("Bash(npm run test:*)").match_words(ws("npm", "run", "test:e2e"))
    assert rule('Bash(grep -r "TODO":*)').match_words(ws("grep", "-r", "TODO", "src"))


@pytest.mark.parametrize(
    "text, why",
    [
        ("Bash(npm:* test)", ":* is only allowed at the end"),
        ("Bash()", "empty parentheses"),
        ("Bash(git status && rm:*)", "one simple command"),
        ("Bash(ls > x)", "one simple command"),
        ("Bash(FOO=1 ls)", "one simple command"),
        ("Bash($x:*)", "not a literal word"),
        ("Bash(git diff *)", "lone * is not a wildcard"),
        ("Bash(echo 'x)", "does not understand"),
        ("Grep(src/**)", "Read(...) covers Grep and Glob"),
        ("MyTool(arg)", "takes no specifier"),
        ("WebFetch(example.com)", "domain:HOST"),
        ("Read(!secret)", "negated patterns"),
        ("Edit(~bob/x)", "~user paths are not supported"),
        ("Edit(../x)", "'..' is not allowed"),
        ("Bash(git status", "expected ToolName"),
        ("not a rule!", "expected ToolName"),
    ],
)
def test_malformed_rules_are_errors_naming_source_and_rule(text, why):
    with pytest.raises(RuleError) as e:
        rule(text)
    assert why in str(e.value) and repr(text) in str(e.value) and "test" in str(e.value)
    assert isinstance(e.value, ConfigError)


@pytest.mark.parametrize(
    "pattern, path, cwd, hit",
    [
        ("//etc/passwd", "/etc/passwd", "/proj", True),
        ("//etc/**", "/etc/ssh/sshd_config", "/proj", True),
        ("~/.ssh/**", "/home/u/.ssh/id_rsa", "/proj", True),
        ("~/.ssh/**", "/home/u/.ssh", "/proj", True),
        ("~/.ssh", "/home/u/.ssh/id_rsa", "/proj", True),  # a matched folder covers what is inside
        ("/src/**", "/proj/src/a/b.py", "/elsewhere", True),  # /path: from the settings file's project root
        ("/src/**", "/elsewhere/src/a.py", "/elsewhere", False),
        ("src/**", "/work/src/a.py", "/work", True),  # path: from the working directory
        ("src/*.py", "/work/src/a.py", "/work", True),
        ("src/*.py", "/work/src/sub/a.py", "/work", False),  # * stays inside one folder
        ("src/**/*.py", "/work/src/sub/deep/a.py", "/work", True),
        ("src/**/*.py", "/work/src/a.py", "/work", True),
        (".env", "/work/a/b/.env", "/work", True),  # no slash: any depth
        ("*.pem", "/work/keys/x.pem", "/work", True),
        (".env", "/other/.env", "/work", False),
        ("secret?.txt", "/work/secret1.txt", "/work", True),
        ("[ab].txt", "/work/c.txt", "/work", False),
        ("**", "/work/anything/at/all", "/work", True),
    ],
)
def test_path_patterns_are_gitignore_style(pattern, path, cwd, hit):
    assert rule(f"Read({pattern})").pattern.matches(Path(path), Path(cwd)) is hit


def test_path_rules_cover_their_tools():
    assert all(rule("Read(x)").covers_tool(t) for t in ("Read", "Grep", "Glob"))
    assert all(rule("Edit(x)").covers_tool(t) for t in ("Edit", "Write"))
    assert rule("Write(x)").covers_tool("Write") and not rule("Write(x)").covers_tool("Edit")
    assert not rule("Read(x)").covers_tool("Edit")


def test_webfetch_rules_take_a_domain():
    assert rule("WebFetch(domain:Example.com)").domain == "example.com"
    assert rule("WebFetch(domain:*.example.com)").domain == "*.example.com"


def test_tool_lists_split_at_commas_and_spaces_outside_parentheses():
    assert split_tool_list(["Bash(git log:*),Edit", "Read Bash(npm run test, fast:*)"], "--allowedTools") == [
        "Bash(git log:*)",
        "Edit",
        "Read",
        "Bash(npm run test, fast:*)",
    ]
    with pytest.raises(RuleError, match="--allowedTools"):
        split_tool_list(["Bash(git log:*"], "--allowedTools")


# ---------------------------------------------------------------- settings files


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture
def env(tmp_path):
    return {"DRIVETRAIN_HOME": str(tmp_path / "dthome")}


def test_settings_merge_user_project_local(tmp_path, env):
    proj = tmp_path / "proj"
    write(
        tmp_path / "dthome" / "settings.json",
        {"permissions": {"allow": ["Bash(ls:*)"], "defaultMode": "plan", "additionalDirectories": ["~/lib"]}},
    )
    write(
        proj / ".drivetrain" / "settings.json", {"permissions": {"deny": ["Read(.env)"], "defaultMode": "acceptEdits"}}
    )
    write(
        proj / ".drivetrain" / "settings.local.json", {"permissions": {"ask": ["Bash(git push:*)"]}, "other": "ignored"}
    )
    s = load_settings(proj, env, home=tmp_path / "home")
    assert [(r.text, r.behavior, Path(r.source).name) for r in s.rules] == [
        ("Bash(git push:*)", "ask", "settings.local.json"),
        ("Read(.env)", "deny", "settings.json"),
        ("Bash(ls:*)", "allow", "settings.json"),
    ]
    assert s.default_mode == "acceptEdits"  # the most specific file that sets it
    assert s.additional_dirs == [tmp_path / "home" / "lib"]
    assert len(s.files) == 3


def test_drivetrain_home_defaults_to_dot_drivetrain(tmp_path):
    write(tmp_path / "home" / ".drivetrain" / "settings.json", {"permissions": {"allow": ["Read"]}})
    assert [r.text for r in load_settings(tmp_path / "p", {}, home=tmp_path / "home").rules] == ["Read"]


def test_missing_files_are_simply_absent(tmp_path, env):
    assert load_settings(tmp_path, env, home=tmp_path).rules == []


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
        ("[]", "must hold a JSON object"),
        ({"permissions": []}, '"permissions" must be an object'),
        ({"permissions": {"alow": []}}, 'unknown key(s) under "permissions": alow'),
        ({"permissions": {"allow": "Bash"}}, "permissions.allow must be a list of strings"),
        ({"permissions": {"deny": ["Read", 3]}}, "permissions.deny[1] must be a string"),
        ({"permissions": {"allow": ["Bash(rm:* -rf)"]}}, "Invalid permission rule 'Bash(rm:* -rf)'"),
        ({"permissions": {"defaultMode": "yolo"}}, "Unknown permission mode 'yolo'"),
        ({"permissions": {"additionalDirectories": "lib"}}, "additionalDirectories must be a list"),
    ],
)
def test_malformed_settings_name_the_file(tmp_path, env, content, message):
    path = write(tmp_path / ".drivetrain" / "settings.json", content)
    with pytest.raises(SettingsError) as e:
        load_settings(tmp_path, env, home=tmp_path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_policy_load_combines_flags_and_files(tmp_path, env):
    write(tmp_path / ".drivetrain" / "settings.json", {"permissions": {"allow": ["Bash(ls:*)"], "defaultMode": "plan"}})
    p = Policy.load(
        tmp_path,
        allowed_tools=["Bash(git log:*),Edit"],
        disallowed_tools=["WebFetch"],
        add_dirs=["../lib"],
        env=env,
        home=tmp_path / "home",
    )
    assert [(r.text, r.behavior, r.source) for r in p.rules[:3]] == [
        ("WebFetch", "deny", "--disallowedTools"),
        ("Bash(git log:*)", "allow", "--allowedTools"),
        ("Edit", "allow", "--allowedTools"),
    ]
    assert p.mode == "plan" and p.additional_dirs == [tmp_path.parent / "lib"]
    assert p.drivetrain_home == tmp_path / "dthome"
    assert Policy.load(tmp_path, mode="bypassPermissions", env=env).mode == "bypassPermissions"
    with pytest.raises(SettingsError, match="--permission-mode"):
        Policy.load(tmp_path, mode="auto", env=env)
    with pytest.raises(RuleError, match="--allowedTools"):
        Policy.load(tmp_path, allowed_tools=["Bash(a;b)"], env=env)
