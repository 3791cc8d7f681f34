"""The interactive session, driven as a person drives it: the real program in a tmux pane (a real pseudo-terminal,
80 columns, NO_COLOR) against the scripted server, asserting on the captured screen.

One session serves the scenes below, in order (approvals, slash commands, Ctrl-C mid-tool, /clear, /resume, /exit):
starting Python and the SDKs is the slow part on a busy two-core machine. Every step waits for what the screen
shows, never for a fixed time; the timeout only bounds a failure.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from drivetrain.messages import lint
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.log import load
from drivetrain.testing import ScriptedServer, reply, respond, text, tool_call

TMUX = shutil.which("tmux")
DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")
TIMEOUT = 180  # seconds: generous for a busy machine; on an idle one each step takes well under a second
pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed"),
    pytest.mark.xdist_group("interactive"),  # the scenes take turns in one session, in order: one worker
]


class Pane:
    """A tmux pane running one command; ``expect`` waits for a text to appear once more than it was on the
    screen before the last keys were sent (or than the last ``expect`` of it found)."""

    def __init__(self, command: list[str], cwd: Path, env: dict, width: int = 80, height: int = 30):
        self.socket = f"dt-{uuid.uuid4().hex[:8]}"
        line = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command])
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            f"{line}; echo EXIT=$?; stty -a; echo STTY-END",
            ";",
            "set-option",
            "-t",
            "t",
            "remain-on-exit",
            "on",
        )
        self.seen: dict[str, int] = {}
        self.before = ""  # the screen as it was when the last keys were sent

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            [TMUX, "-L", self.socket, "-f", "/dev/null", *args], check=True, capture_output=True, text=True
        ).stdout

    def screen(self, escapes: bool = False) -> str:
        """The whole pane, scrollback included, as a person would see it."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t", *(["-e"] if escapes else []))

    def expect(self, wanted: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while True:
            screen = self.screen()
            if screen.count(wanted) > max(self.seen.get(wanted, 0), self.before.count(wanted)):
                self.seen[wanted] = screen.count(wanted)
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{wanted!r} did not appear; the screen:\n{screen}")
            time.sleep(0.05)  # polling the screen, not waiting for a time

    def keys(self, *keys: str) -> None:
        self.before = self.screen()
        self.tmux("send-keys", "-t", "t", *keys)

    def type(self, line: str) -> None:
        """Type a line at the prompt once the prompt is there, and send it."""
        self.expect_prompt()
        self.keys("-l", line)
        self.tmux("send-keys", "-t", "t", "Enter")

    def expect_prompt(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not self.screen().rstrip().splitlines()[-1:] or not self._at_prompt():
            if time.monotonic() > deadline:
                raise AssertionError(f"no prompt; the screen:\n{self.screen()}")
            time.sleep(0.05)

    def _at_prompt(self) -> bool:
        visible = self.tmux("capture-pane", "-p", "-t", "t").rstrip("\n").splitlines()
        lines = [ln for ln in visible if ln.strip()]
        return len(lines) >= 2 and lines[-2].rstrip() == ">"  # the empty prompt above the status line

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], capture_output=True)


def colours(screen: str) -> set[str]:
    """The colour codes of the SGR sequences on the screen (not bold, dim, reverse or a reset to the default)."""
    found = set()
    for params in re.findall(r"\x1b\[([0-9;]*)m", screen):
        for p in params.split(";"):
            if p.isdigit() and (30 <= int(p) <= 38 or 40 <= int(p) <= 48 or 90 <= int(p) <= 107):
                found.add(p)
    return found


def body_text(body: dict) -> str:
    """Every text the request carries, tool results included."""
    out = []
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]:
            out.append(b.get("text") or (b.get("content") if isinstance(b.get("content"), str) else ""))
    return "\n".join(out)


def last_results(body: dict) -> list[dict]:
    return [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]


SCRIPT = [
    # 1: numbered approval, 1 (yes): the file is written
    respond(
        [text("Writing it."), tool_call("Write", {"file_path": "hello.py", "content": "print('hi')\n"}, id="toolu_w")]
    ),
    reply("Wrote **hello.py**.", expect=(lambda b: not last_results(b)[0].get("is_error"))),
    # 2: 4 with a reason: the reason reaches the model with the is_error result
    respond([tool_call("Bash", {"command": "make deploy"}, id="toolu_d")]),
    reply(
        "Staging it is.",
        expect=(
            lambda b: (
                (last_results(b)[0]["is_error"], last_results(b)[0]["content"])
                == (True, "The user denied this Bash call. They said: use staging")
            )
        ),
    ),
    # 3: 2 (this session): the same call again is not asked about
    respond([tool_call("Bash", {"command": "touch a.txt"}, id="toolu_t1")]),
    respond([tool_call("Bash", {"command": "touch a.txt"}, id="toolu_t2")]),
    reply("Touched twice."),
    # 4: @mention (Tab-completed) and a prompt of three lines (a trailing backslash, then Esc-Enter)
    reply(
        "It prints hi.",
        expect=(
            lambda b: (
                "look at @hello.py \nand say\nwhat it does" in body_text(b)
                and "$ cat -n hello.py" in body_text(b)
                and "print('hi')" in body_text(b)
            )
        ),
    ),
    # 5: Ctrl-C while a tool runs: the call is answered as interrupted, the next prompt continues
    respond([tool_call("Bash", {"command": "sleep 97"}, id="toolu_s")]),
    reply(
        "Back.",
        expect=(
            lambda b: (
                last_results(b)[0]["is_error"]
                and last_results(b)[0]["content"].startswith("Interrupted")
                and b["messages"][-1]["content"][-1]["text"] == "go on"
            )
        ),
    ),
    respond([tool_call("Bash", {"command": "sleep 98"}, id="toolu_e")]),  # stopped with Esc
    reply("Never sent: the model is stopped while it answers.", hold=threading.Event()),
    # 6: /clear: a new conversation; /resume: the first one again
    reply("Fresh.", expect=(lambda b: len(b["messages"]) == 1)),
    reply("We wrote hello.py.", expect=(lambda b: "Writing it." in body_text(b) and "go on" in body_text(b))),
    # 7: /compact with a focus
    reply(
        "Summary: hello.py written.",
        expect=(lambda b: "Above all, keep what concerns: the file names" in body_text(b) and not b.get("tools")),
    ),
]


@pytest.fixture(scope="module")
def tui(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    ws = tmp_path_factory.mktemp("ws")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # checkpoints, for /rewind
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "DRIVETRAIN_HOME": str(home / ".drivetrain"),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "ANTHROPIC_API_KEY": "sk-test",
        **{k: os.environ[k] for k in ("PYTHONPATH", "DRIVETRAIN_CACHE_DIR") if k in os.environ},
    }
    with ScriptedServer(SCRIPT) as server:
        calc = {
            "mcpServers": {
                "calc": {"command": sys.executable, "args": [str(Path(__file__).with_name("mcp_calc_server.py"))]}
            }
        }
        pane = Pane([DRIVETRAIN, "--mcp-config", json.dumps(calc)], ws, {**env, "ANTHROPIC_BASE_URL": server.url})
        try:
            pane.expect("/help for commands")
            yield pane, server, ws, home / ".drivetrain"
        finally:
            pane.close()


def test_approve_with_1_writes_the_file_and_shows_the_options_in_claude_codes_order(tui):
    pane, _server, ws, _ = tui
    pane.type("write hello")
    screen = pane.expect("4. No, and tell the model what to do differently")
    assert "+print('hi')" in screen  # the diff, before the choice
    options = screen[screen.index("1. Yes") :].splitlines()[:4]
    assert [o.strip(" ❯") for o in options] == [
        "1. Yes",
        "2. Yes, and don't ask again for Edit(hello.py) this session",
        "3. Yes, and always allow Edit(hello.py) in this project",
        "4. No, and tell the model what to do differently",
    ]
    pane.keys("1")
    pane.expect("Wrote hello.py.")
    assert (ws / "hello.py").read_text() == "print('hi')\n"


def test_no_with_a_reason_goes_back_to_the_model(tui):
    pane, _server, _ws, _ = tui
    pane.type("deploy it")
    pane.expect("$ make deploy")
    pane.expect("4. No, and tell the model what to do differently")
    pane.keys("4")
    pane.expect("What should the model do instead?")
    pane.keys("-l", "use staging")
    pane.keys("Enter")
    pane.expect("Staging it is.")


def test_yes_for_the_session_asks_no_second_time(tui):
    pane, _server, ws, _ = tui
    pane.type("touch it twice")
    pane.expect("2. Yes, and don't ask again for Bash(touch a.txt) this session")
    pane.keys("2")
    screen = pane.expect("Touched twice.")
    assert screen.count("$ touch a.txt") == 1 and screen.count("● Bash(touch a.txt)") == 2  # asked once, ran twice
    assert not (ws / ".drivetrain").exists()  # a session rule is not written anywhere


def test_a_mention_attaches_the_file_and_a_prompt_has_several_lines(tui):
    pane, _server, _ws, _ = tui
    pane.expect_prompt()
    pane.keys("-l", "look at @hel")
    pane.keys("Tab")
    pane.expect("look at @hello.py")
    pane.keys("-l", " \\")
    pane.keys("Enter")
    pane.keys("-l", "and say")
    pane.keys("M-Enter")
    pane.keys("-l", "what it does")
    pane.keys("Enter")
    pane.expect("(attached hello.py)")
    pane.expect("It prints hi.")


def test_cost_help_by_tab_shift_tab_and_an_unknown_command(tui):
    pane, server, _ws, _ = tui
    requests = len(server.requests)
    pane.expect_prompt()
    pane.keys("-l", "/he")
    pane.keys("Tab")
    pane.expect("> /help")
    pane.keys("Enter")
    pane.expect("Shift-Tab cycles the permission mode")  # /help, completed
    pane.type("/cost")
    screen = pane.expect("Requests:")  # the last line of it: the ones above are on the screen too
    assert re.search(r"Tokens: +[\d,]+ in, [\d,]+ out, [\d,]+ cache read, [\d,]+ cache write", screen), screen
    pane.type("/cost turns")
    pane.expect("turn   8")
    pane.type("/frobnicate")
    pane.expect("unknown command /frobnicate")
    pane.expect("nothing was sent to the model")
    pane.expect_prompt()
    pane.keys("BTab")
    pane.expect("acceptEdits")
    pane.keys("BTab", "BTab", "BTab")  # plan, then back to default
    assert len(server.requests) == requests


def test_ctrl_c_while_a_tool_runs_stops_the_turn_and_the_next_prompt_continues(tui):
    pane, _server, ws, home = tui
    pane.type("wait a bit")
    pane.expect("Bash(sleep 97)")
    pane.keys("C-c")
    pane.expect("(interrupted: the session is saved")
    screen = pane.expect("Interrupted by the user")
    assert screen.index("Bash(sleep 97)") < screen.index("Interrupted by the user")
    store = FileStore(home)
    [info] = list(store.list(cwd=str(ws)))
    history = load(store, info.session_id).value.history
    assert lint(list(history)).problems == [] and history[-1].content[0].is_error  # saved, answered, valid
    pane.type("go on")
    pane.expect("Back.")
    pane.type("wait again")
    pane.expect("Bash(sleep 98)")
    pane.keys("Escape")
    pane.expect("(interrupted: the session is saved")
    pane.type("think it over")
    pane.expect("thinking")  # the model's live line, while its answer is held back
    pane.keys("C-c")
    pane.expect("(interrupted: the session is saved")
    records = store.read(info.session_id)
    assert [r["during"] for r in records if r["kind"] == "interrupted"] == ["RunTools", "RunTools", "CallModel"]


def test_clear_starts_a_new_session_and_resume_goes_back(tui):
    pane, _server, _ws, _home = tui
    pane.type("/clear")
    pane.expect("New session")
    pane.type("hello again")
    pane.expect("Fresh.")
    pane.type("/resume")
    pane.expect("turns  write hello")  # the first session, by its first prompt (the current one is not listed)
    pane.keys("1")
    pane.expect("Resumed")
    pane.type("where were we?")
    pane.expect("We wrote hello.py.")


def test_context_trace_model_permissions_compact_and_rewind(tui):
    pane, _server, ws, _ = tui
    pane.type("/context")
    screen = pane.expect("compacted by itself at 80% of the window")  # its last line
    assert re.search(r"system prompt +[\d,]+", screen) and re.search(r"messages +[\d,]+", screen)
    pane.type("/trace")
    pane.expect("trajectory: tool_use → end_turn")
    pane.expect("answer grounding:")
    pane.type("/model")
    pane.expect("Model: claude-sonnet-4-6 (anthropic)")
    pane.type("/permissions")
    screen = pane.expect("allow Bash(touch a.txt)")
    number = re.search(r"(\d+)\. allow Bash\(touch a\.txt\)", screen).group(1)
    pane.type(f"/permissions remove {number}")
    pane.expect("Removed allow Bash(touch a.txt) for this session.")
    pane.type("/compact the file names")
    pane.expect("Compacted: about")
    pane.type("/rewind")
    pane.expect("before prompt 1")
    pane.keys("1")
    pane.expect("Files as before prompt 1")
    assert not (ws / "hello.py").exists() and not (ws / "a.txt").exists()


def wait_for(check, what: str):
    deadline = time.monotonic() + TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen")
        time.sleep(0.05)  # polling, not waiting for a time


def test_piped_stdout_is_plain_text_ascii_terminal_ctrl_d_and_ctrl_c_twice(tmp_path):
    """stdout not a terminal: the plain lines, no escapes (the prompt is drawn on the terminal); then, with
    --continue, in a terminal without Unicode (LANG=C): ASCII separators; Ctrl-D and Ctrl-C twice at an empty
    prompt leave."""
    out = tmp_path / "out.txt"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DRIVETRAIN_HOME": str(tmp_path / ".drivetrain"),
        "TERM": "xterm-256color",
        "LANG": "C",
        "ANTHROPIC_API_KEY": "sk-test",
        **{k: os.environ[k] for k in ("PYTHONPATH", "DRIVETRAIN_CACHE_DIR") if k in os.environ},
    }
    with ScriptedServer([respond([tool_call("Glob", {"pattern": "*.md"})]), reply("Done: **none** found.")]) as server:
        script = f"{shlex.quote(DRIVETRAIN)} > {shlex.quote(str(out))}; echo PIPED=$?; {shlex.quote(DRIVETRAIN)} -c"
        pane = Pane(["sh", "-c", script], tmp_path, {**env, "ANTHROPIC_BASE_URL": server.url})
        try:
            pane.type("find the docs")
            wait_for(lambda: "Done: **none** found." in out.read_text(), "the answer on stdout")
            pane.expect_prompt()
            pane.keys("C-d")
            pane.expect("PIPED=0")
            pane.expect("drivetrain | claude-sonnet-4-6 | default mode")  # the second run, in the terminal
            pane.expect("Resumed")  # --continue: the session the first run saved
            pane.expect_prompt()
            pane.keys("C-c")
            pane.expect("(press Ctrl-C again to exit)")
            pane.expect_prompt()  # drawn, so the terminal is in raw mode again: Ctrl-C is a key, not a SIGINT
            pane.keys("C-c")
            pane.expect("EXIT=0")
        finally:
            pane.close()
    lines = out.read_text().splitlines()
    assert lines[0] == f"drivetrain · claude-sonnet-4-6 · default mode · {tmp_path}", lines  # one line each
    assert lines[2] == '→ Glob {"pattern": "*.md"}' and lines[3].startswith("← No files match *.md"), lines
    assert lines[4:] == ["Done: **none** found."], lines
    assert "\x1b" not in out.read_text()


def test_mcp_lists_the_servers_and_their_tools(tui):
    pane, server, _, _ = tui
    before = len(server.requests)
    pane.type("/mcp")
    screen = pane.expect("mcp__calc__add")
    assert re.search(r"calc: connected · \d+ tools", screen) and "mcp_calc_server.py" in screen
    assert len(server.requests) == before  # handled here, not sent


def test_exit_leaves_and_the_terminal_is_restored(tui):
    pane, server, _ws, _ = tui
    pane.type("/exit")
    screen = pane.expect("STTY-END")
    settings = screen[screen.index("EXIT=0") :]
    assert re.search(r"(?<!-)icanon", settings) and re.search(r"(?<!-)echo ", settings), settings
    assert colours(pane.screen(escapes=True)) == set()  # NO_COLOR: bold, dim and reverse, no colour
    server.assert_complete()


def test_a_first_task_runs_as_attempts_shown_side_by_side_and_the_next_prompt_continues_the_winner(tmp_path):
    """The interactive screen shows each attempt under its heading, then the attempts side by side and why the
    winner won; the next prompt goes on in the winner's conversation."""
    from test_attempts import scripts, writes

    (tmp_path / "numbers.txt").write_text("5 6 7\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DRIVETRAIN_HOME": str(tmp_path / ".drivetrain"),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "ANTHROPIC_API_KEY": "sk-test",
        **{k: os.environ[k] for k in ("PYTHONPATH", "DRIVETRAIN_CACHE_DIR") if k in os.environ},
    }
    winner_next = [reply("It holds 18.", expect=lambda b: "The total is 18; written to out.txt." in body_text(b))]
    per = scripts(writes(17), [*writes(18), *winner_next], writes(18))
    # each attempt samples at its own temperature; the next prompt, at none, goes on in the winner's (0.5)
    with ScriptedServer(per, route=lambda b: str(b.get("temperature", 0.5))) as server:
        argv = [DRIVETRAIN, "--attempts", "3", "--permission-mode", "acceptEdits"]
        pane = Pane(argv, tmp_path, {**env, "ANTHROPIC_BASE_URL": server.url})
        try:
            pane.expect_prompt()
            pane.type("Add up the numbers and write the total to out.txt.")
            pane.expect("attempt 3 of 3")
            pane.expect("attempts: 3, chosen: 2 (2 of 3 agree")
            pane.expect_prompt()
            pane.type("What does out.txt hold?")
            pane.expect("It holds 18.")
            pane.expect_prompt()
        finally:
            pane.close()
    assert (tmp_path / "out.txt").read_text() == "18\n"
