"""The two corpora: adversarial commands must never be allowed, ordinary ones never refused.

Run ``python tests/test_permissions_corpus.py`` to print the figures for the README.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from drivetrain.control.permissions import Policy, parse_rule, split_tool_list

DATA = Path(__file__).parent / "data"

# The prefixes the attacks try to ride on: read-only tools, test runners, wrappers.
ADVERSARIAL_RULES = [
    "Bash(git status:*)",
    "Bash(git log:*)",
    "Bash(git diff:*)",
    "Bash(git show:*)",
    "Bash(git branch:*)",
    "Bash(git grep:*)",
    "Bash(ls:*)",
    "Bash(npm run test:*)",
    "Bash(npm test:*)",
    "Bash(echo:*)",
    "Bash(printf:*)",
    "Bash(cat:*)",
    "Bash(head:*)",
    "Bash(tail:*)",
    "Bash(wc:*)",
    "Bash(find:*)",
    "Bash(grep:*)",
    "Bash(rg:*)",
    "Bash(sed:*)",
    "Bash(awk:*)",
    "Bash(gawk:*)",
    "Bash(sort:*)",
    "Bash(uniq:*)",
    "Bash(tree:*)",
    "Bash(file:*)",
    "Bash(date:*)",
    "Bash(fd:*)",
    "Bash(xargs:*)",
    "Bash(env:*)",
    "Bash(timeout:*)",
    "Bash(nice:*)",
    "Bash(nohup:*)",
    "Bash(time:*)",
    "Bash(command:*)",
    "Bash(true:*)",
    "Bash(test:*)",
    "Bash(cd:*)",
    "Bash(diff:*)",
    "Bash(tee:*)",
    "Bash(mv:*)",
    "Bash(sudo:*)",
    "Bash(read:*)",
    "Bash(tar:*)",
    "Bash(zip:*)",
    "Bash(man:*)",
    "Bash(less:*)",
    "Bash(vim:*)",
    "Bash(rsync -av:*)",
    "Bash(python -m pytest:*)",
    "Bash(make test:*)",
    "Bash(cargo test:*)",
    "Bash(base64:*)",
]
# …and the Read deny rule they try to get around (the workspace holds .env and config/.env).
ADVERSARIAL_DENY = ["Read(**/.env)"]
MODES = ("default", "acceptEdits", "plan")


def decode(line: str) -> str:
    named = {"NL": "\n", "CR": "\r", "TAB": "\t", "NUL": "\x00"}
    return re.sub(
        r"\{\{(NL|CR|TAB|NUL|U\+([0-9A-Fa-f]{4,6}))\}\}",
        lambda m: chr(int(m.group(2), 16)) if m.group(2) else named[m.group(1)],
        line,
    )


def adversarial() -> list[str]:
    lines = (DATA / "adversarial_commands.txt").read_text(encoding="utf-8").splitlines()
    return [decode(line) for line in lines if line.strip() and not line.startswith("#")]


def safe() -> list[tuple[str, str]]:
    lines = (DATA / "safe_commands.txt").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t", 1) for line in lines if line.strip() and not line.startswith("#")]
    return [(rules, decode(command)) for rules, command in pairs]


def workspace(tmp: Path) -> tuple[Path, Path]:
    ws, home = tmp / "ws", tmp / "home"
    for d in (ws / "src", ws / "dist", ws / "build", ws / ".git", home / "notes"):
        d.mkdir(parents=True, exist_ok=True)
    for f in ("README.md", "a.txt", "b.txt", "data.txt", "build.log", "package.json", "src/app.py"):
        (ws / f).write_text("x\n")
    (ws / "config").mkdir(exist_ok=True)
    for f in (".env", "config/.env"):
        (ws / f).write_text("API_KEY=sk-secret\n")
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text("key")
    if not (ws / "vendor").is_symlink():
        (ws / "vendor").symlink_to(home)  # a symlink in the workspace leading out of it
    return ws, home


def policy_for(ws: Path, home: Path, rules: list[str], mode: str, deny: list[str] = ADVERSARIAL_DENY) -> Policy:
    parsed = [parse_rule(r, "deny", "corpus", ws, home) for r in deny]
    parsed += [parse_rule(r, "allow", "corpus", ws, home) for r in rules]
    return Policy(mode=mode, rules=parsed, home=home)


def wrongly_allowed(ws: Path, home: Path) -> dict[str, list[str]]:
    out = {}
    for mode in MODES:
        policy = policy_for(ws, home, ADVERSARIAL_RULES, mode)
        out[mode] = [c for c in adversarial() if policy.decide("Bash", {"command": c}, ws).behavior == "allow"]
    return out


def wrongly_refused(ws: Path, home: Path) -> list[tuple[str, str, str]]:
    bad = []
    for rules, command in safe():
        tokens = [] if rules == "-" else split_tool_list([rules], "corpus")
        mode = next((t.split(":", 1)[1] for t in tokens if t.startswith("mode:")), "default")
        allow = [t for t in tokens if not t.startswith(("mode:", "deny:"))]
        policy = policy_for(ws, home, allow, mode, [t[5:] for t in tokens if t.startswith("deny:")])
        d = policy.decide("Bash", {"command": command}, ws)
        if d.behavior != "allow":
            bad.append((command, rules, f"{d.behavior}: {d.reason}"))
    return bad


def test_corpora_are_big_enough():
    assert len(adversarial()) >= 200
    assert len(safe()) >= 60


@pytest.mark.parametrize("mode", MODES)
def test_no_adversarial_command_is_allowed(tmp_path, mode):
    ws, home = workspace(tmp_path)
    policy = policy_for(ws, home, ADVERSARIAL_RULES, mode)
    allowed = [
        (c, policy.decide("Bash", {"command": c}, ws).reason)
        for c in adversarial()
        if policy.decide("Bash", {"command": c}, ws).behavior == "allow"
    ]
    assert allowed == []


def test_no_adversarial_command_is_allowed_non_interactively(tmp_path):
    ws, home = workspace(tmp_path)
    policy = policy_for(ws, home, ADVERSARIAL_RULES, "default")
    policy.interactive = False
    assert {policy.decide("Bash", {"command": c}, ws).behavior for c in adversarial()} == {"deny"}


def test_no_safe_command_is_refused(tmp_path):
    ws, home = workspace(tmp_path)
    assert wrongly_refused(ws, home) == []


def test_figures(tmp_path, capsys):
    ws, home = workspace(tmp_path)
    bad = wrongly_allowed(ws, home)
    total = len(adversarial())
    refused = wrongly_refused(ws, home)
    with capsys.disabled():
        for mode, cmds in bad.items():
            print(f"\nadversarial wrongly allowed ({mode}): {len(cmds)}/{total}")
        print(f"safe wrongly refused: {len(refused)}/{len(safe())}")
    assert all(not cmds for cmds in bad.values()) and not refused


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ws, home = workspace(Path(tmp))
        bad = wrongly_allowed(ws, home)
        for mode, cmds in bad.items():
            print(f"adversarial wrongly allowed ({mode}): {len(cmds)}/{len(adversarial())}")
            for c in cmds:
                print("   ", repr(c))
        refused = wrongly_refused(ws, home)
        print(f"safe wrongly refused: {len(refused)}/{len(safe())}")
        for c, r, why in refused:
            print(f"    {c!r} [{r}] -> {why}")
        sys.exit(1 if refused or any(bad.values()) else 0)
