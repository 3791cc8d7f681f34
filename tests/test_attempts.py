"""Several fresh attempts at one task (small/attempts.py): the real CLI against the scripted server, each attempt
routed to a script of its own by the temperature it samples at (attempt 1: 0.2, 2: 0.5, 3: 0.7)."""

import json
import re
import threading
import time
from pathlib import Path

import pytest

import cli_process
from drivetrain.loop.events import Finished
from drivetrain.loop.result import RunResult
from drivetrain.messages import Usage
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.report import attempts_text
from drivetrain.small.attempts import TEMPERATURES, AttemptEvent
from drivetrain.small.copies import apply_changes, changes, copy_tree, scan
from drivetrain.small.selection import Attempt, AttemptSpec, answer_values, choose, named_commands
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from test_cli import DRIVETRAIN, cli


def by_temperature(body):
    return str(body.get("temperature"))


def scripts(*per_attempt):
    return {str(TEMPERATURES[i]): steps for i, steps in enumerate(per_attempt)}


def writes(value, delay=0.0):
    """An attempt that writes ``value`` to out.txt and reports it."""
    return [
        respond([tool_call("Write", {"file_path": "out.txt", "content": f"{value}\n"})], delay=delay),
        reply(f"The total is {value}; written to out.txt."),
    ]


def log(home, session_id):
    path = Path(home) / ".drivetrain" / "sessions" / f"{session_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_attempts(server, ws, *extra, fmt="json"):
    return cli(
        server.url,
        "-p",
        "Add up the numbers and write the total to out.txt.",
        "--profile",
        "full",
        "--attempts",
        "3",
        "--permission-mode",
        "acceptEdits",
        "--output-format",
        fmt,
        *extra,
        cwd=ws,
    )


def test_the_largest_group_wins_and_its_change_reaches_the_workspace(tmp_path, _own_home):
    ws = numbers_workspace(tmp_path)
    with ScriptedServer(scripts(writes(17), writes(18), writes(18)), route=by_temperature) as server:
        proc = run_attempts(server, ws)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    attempts = result["attempts"]
    assert attempts["count"] == 3 and attempts["chosen"] == 2, attempts
    assert attempts["reason"].startswith("2 of 3 agree"), attempts["reason"]
    assert sorted(map(sorted, attempts["groups"])) == [[1], [2, 3]]
    assert (ws / "out.txt").read_text() == "18\n"  # the winner's file, applied once
    assert result["result"] == "The total is 18; written to out.txt."
    assert result["num_turns"] == 2 and result["usage"]["output_tokens"] > 0
    assert not list(ws.glob("*.attempt"))
    # the run's session holds the winner's history and the attempts record; each attempt is a session of its own
    records = log(_own_home, result["session_id"])
    kinds = [r["kind"] for r in records]
    assert "attempts" in kinds and kinds[-1] == "result"
    for each in attempts["each"]:
        own = log(_own_home, each["session_id"])
        assert any(r["kind"] == "attempt_of" and r["session"] == result["session_id"] for r in own)
        assert each["changed"] == ["out.txt"]
        assert [r["tool"] for r in own if r["kind"] == "intent"][:1] == ["Write"]  # its calls are in its audit log
    # the run's usage is the three attempts', each billed once
    assert result["usage"]["output_tokens"] == sum(e["usage"]["output_tokens"] for e in attempts["each"])
    assert all(e["usage"]["output_tokens"] > 0 for e in attempts["each"])
    # `sessions show` puts the attempts side by side, marks the winner, says why, and shows each one's turns
    shown = cli_process.run(
        [DRIVETRAIN, "sessions", "show", result["session_id"][:13]], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert "attempts: 3, chosen: 2 (2 of 3 agree" in shown.stdout
    assert re.search(r"^\*\s+2\s+\d+\s+0\.5\s+success", shown.stdout, re.M), shown.stdout
    assert shown.stdout.count("→ Write") == 3 and "attempt 3:" in shown.stdout


def test_stream_json_marks_every_event_of_an_attempt_with_its_index(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with ScriptedServer(scripts(writes(1), writes(2), writes(2)), route=by_temperature) as server:
        proc = run_attempts(server, ws, fmt="stream-json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["subtype"] == "init" and "attempt" not in lines[0]
    assert lines[-1]["type"] == "result" and "attempt" not in lines[-1] and lines[-1]["attempts"]["chosen"] == 2
    middle = lines[1:-1]
    assert middle and all(e.get("attempt") in (1, 2, 3) for e in middle)
    ends = [e for e in middle if e.get("subtype") == "attempt_result"]
    assert sorted(e["attempt"] for e in ends) == [1, 2, 3]
    assert {e["attempt"] for e in middle if e["type"] == "assistant"} == {1, 2, 3}


def test_a_denied_call_is_denied_in_each_attempt_and_audited_there(tmp_path, _own_home):
    ws = tmp_path / "ws"
    ws.mkdir()

    def tries_curl(value):
        return [
            respond([tool_call("Bash", {"command": "curl -s http://example.com"})]),
            *writes(value),
        ]

    steps = scripts(tries_curl(3), tries_curl(3), tries_curl(4))
    with ScriptedServer(steps, route=by_temperature) as server:
        proc = run_attempts(server, ws, "--disallowedTools", "Bash(curl:*)")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["permission_denials"]) == 3  # one in each attempt
    for each in result["attempts"]["each"]:
        denied = [r for r in log(_own_home, each["session_id"]) if r["kind"] == "denied"]
        assert [r["input"]["command"] for r in denied] == ["curl -s http://example.com"], each
    assert (ws / "out.txt").read_text() == "3\n"


def test_a_command_the_task_names_decides_and_a_fixed_one_stops_the_others(tmp_path, _own_home):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "calc.py").write_text("def total(xs):\n    return sum(xs) + 1\n")
    (ws / "check.py").write_text("from calc import total\nassert total([1, 2]) == 3, total([1, 2])\nprint('ok')\n")
    fixed = "def total(xs):\n    return sum(xs)\n"
    first = [
        respond([tool_call("Write", {"file_path": "calc.py", "content": fixed})]),
        reply("Fixed: `python3 check.py` prints ok."),
    ]
    never = threading.Event()  # the other attempts' first answers are held: only stopping them ends the run
    slow = [respond([tool_call("Write", {"file_path": "calc.py", "content": "x = 1\n"})], hold=never), reply("Done.")]
    with ScriptedServer(scripts(first, slow, slow), route=by_temperature) as server:
        proc = cli(
            server.url,
            "-p",
            "Make `python3 check.py` pass.",
            "--profile",
            "full",
            "--attempts",
            "3",
            "--permission-mode",
            "bypassPermissions",
            "--output-format",
            "json",
            cwd=ws,
        )
        assert len(server.take_remaining()) == 2  # the stopped attempts never asked for their answers
    assert proc.returncode == 0, proc.stderr
    attempts = json.loads(proc.stdout)["attempts"]
    assert attempts["chosen"] == 1 and "`python3 check.py` passes (it failed before)" in attempts["reason"]
    assert [e["stopped"] for e in attempts["each"]] == [False, True, True]
    assert (ws / "calc.py").read_text() == fixed
    # the check ran again on the copies through the audited Bash tool
    checks = [r for r in log(_own_home, attempts["each"][0]["session_id"]) if r.get("decided_by") == "attempts"]
    assert checks and checks[0]["input"]["command"] == "python3 check.py"


def test_an_attempt_that_fails_the_named_command_cannot_win_though_more_agree(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "check.py").write_text("import pathlib\nassert pathlib.Path('out.txt').read_text().strip() == '6'\n")
    with ScriptedServer(scripts(writes(6), writes(5), writes(5)), route=by_temperature) as server:
        proc = cli(
            server.url,
            "-p",
            "Write 1+2+3 to out.txt so that `python3 check.py` passes.",
            "--profile",
            "full",
            "--attempts",
            "3",
            "--permission-mode",
            "bypassPermissions",
            "--output-format",
            "json",
            cwd=ws,
        )
    assert proc.returncode == 0, proc.stderr
    attempts = json.loads(proc.stdout)["attempts"]
    assert attempts["chosen"] == 1, attempts
    # 1 fixed the command, so it settled the task: the others were stopped, or failed the command if they ended first
    assert not attempts["each"][0]["hard_fail"]
    assert all(e["stopped"] or "`python3 check.py` fails" in e["hard_fail"] for e in attempts["each"][1:])
    assert (ws / "out.txt").read_text() == "6\n"


def test_when_none_can_win_the_furthest_attempts_work_is_kept_and_its_error_is_the_runs(tmp_path, _own_home):
    ws = tmp_path / "ws"
    ws.mkdir()

    def busy(value, calls):
        return [respond([tool_call("Write", {"file_path": f"out{i}.txt", "content": value})]) for i in range(calls)]

    with ScriptedServer(scripts(busy("a", 2), busy("b", 2), busy("c", 2)), route=by_temperature) as server:
        proc = run_attempts(server, ws, "--max-turns", "2")
        server.take_remaining()
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    attempts = result["attempts"]
    assert result["subtype"] == "error_max_turns" and attempts["chosen"] is None
    assert "no attempt can win" in attempts["reason"] and "the changes of attempt 1 are kept" in attempts["reason"]
    assert "no attempt can win" in result["note"]
    assert sorted(p.name for p in ws.iterdir()) == ["out0.txt", "out1.txt"] and (ws / "out0.txt").read_text() == "a"
    # the run's session continues where that attempt stopped
    history = [r for r in log(_own_home, result["session_id"]) if r["kind"] == "history"]
    assert history and "out1.txt" in json.dumps(history[-1])


def test_one_attempt_is_a_single_run(tmp_path):
    with ScriptedServer([reply("hello")]) as server:
        proc = cli(
            server.url, "-p", "hi", "--attempts", "1", "--profile", "small", "--output-format", "json", cwd=tmp_path
        )
    assert proc.returncode == 0, proc.stderr
    assert "attempts" not in json.loads(proc.stdout)


def test_attempts_below_one_is_a_clear_error(tmp_path):
    proc = cli("http://127.0.0.1:9", "-p", "hi", "--attempts", "0", "--profile", "small", cwd=tmp_path)
    assert proc.returncode == 1 and "attempts must be at least 1" in proc.stderr


# ---------------------------------------------------------------- the parts, on real files


def test_a_copy_keeps_mtimes_so_only_what_an_attempt_changed_is_seen(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a\n")
    (src / "b.txt").write_text("b\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    copy = tmp_path / "copy"
    copy_tree(src, copy)
    before = scan(src)
    assert set(before) == {"pkg/a.py", "b.txt"}  # .git is never compared
    assert changes(src, before, copy) == {}
    (copy / "pkg" / "a.py").write_text("A\n")
    (copy / "b.txt").unlink()
    (copy / "new.txt").write_text("n\n")
    (copy / ".git" / "HEAD").write_text("other\n")
    got = changes(src, before, copy)
    assert set(got) == {"pkg/a.py", "b.txt", "new.txt"} and got["b.txt"] is None


def test_a_file_the_user_changed_meanwhile_is_kept_and_the_attempts_version_goes_beside_it(tmp_path):
    cwd, base, copy = tmp_path / "cwd", tmp_path / "base", tmp_path / "copy"
    cwd.mkdir()
    (cwd / "a.txt").write_text("one\n")
    (cwd / "b.txt").write_text("two\n")
    copy_tree(cwd, base)
    copy_tree(cwd, copy)
    before = scan(cwd)
    (copy / "a.txt").write_text("one, by the attempt\n")
    (copy / "b.txt").write_text("two, by the attempt\n")
    time.sleep(0.01)
    (cwd / "a.txt").write_text("one, by the user\n")
    applied = apply_changes(copy, cwd, before, changes(base, scan(base), copy), base)
    assert applied.written == ("b.txt",) and applied.kept_both == (("a.txt", "a.txt.attempt"),)
    assert (cwd / "a.txt").read_text() == "one, by the user\n"
    assert (cwd / "a.txt.attempt").read_text() == "one, by the attempt\n"
    assert (cwd / "b.txt").read_text() == "two, by the attempt\n"
    assert "a.txt" in applied.note()


def test_named_commands_are_code_spans_whose_program_exists_in_any_language(tmp_path):
    (tmp_path / "run.sh").write_text("echo hi\n")
    prompt = "修复 `python3 -m pytest -q`，然后运行 `./run.sh` 和 `nosuchprogram --x`；`total.txt` 不是命令。"
    assert named_commands(prompt, tmp_path) == ["python3 -m pytest -q", "./run.sh"]


def test_answer_values_are_numbers_and_code_spans():
    assert answer_values("总数是 1,234，文件 `out.txt`。") == frozenset({"1234", "out.txt"})
    assert answer_values("The total is 18.") == answer_values("18 is the total")


def _attempt(index, *, subtype="success", changed=None, reruns=None, turns=2, answer=""):
    spec = AttemptSpec(index, index, 0.2, Path("/nowhere"), f"s-{index}")
    result = RunResult(subtype, "end_turn", answer, turns, spec.session_id, 0, Usage(), None, [], [])
    a = Attempt(spec, agent=None)  # the agent is not read by choose
    a.result, a.changed, a.reruns = result, changed or {}, reruns or {}
    a.values = answer_values(answer)
    return a


def test_choose_groups_by_contents_or_outputs_or_values_and_breaks_ties_by_checks_then_turns():
    same = {"f": "h1"}
    a1 = _attempt(1, changed={"f": "h0"}, answer="7")
    a2 = _attempt(2, changed=same, turns=5, answer="8")
    a3 = _attempt(3, changed=same, turns=3, answer="9")
    assert choose([a1, a2, a3], {}).chosen == 3  # 2 and 3 agree; 3 took fewer turns
    # answers alone agree too
    b = [_attempt(1, answer="42"), _attempt(2, answer="41"), _attempt(3, answer="it is 42")]
    choice = choose(b, {})
    assert choice.chosen == 1 and choice.reason.startswith("2 of 3 agree")
    # all alone: the one passing more checks
    c = [
        _attempt(1, answer="1", reruns={"t": (1, "x")}),
        _attempt(2, answer="2", reruns={"t": (0, "y")}),
        _attempt(3, subtype="error_max_turns", answer="2"),
    ]
    assert choose(c, {}).chosen == 2


def library_attempts(server, ws, prompt, **kw):
    """``Attempts`` from the library, each attempt's agent a plain one on the scripted model."""
    import asyncio

    from drivetrain import Agent
    from drivetrain.models.anthropic import AnthropicModel
    from drivetrain.small.attempts import Attempts, Sampled
    from drivetrain.tools import builtin_tools

    model = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )

    def make(spec):
        return Agent(model=Sampled(model, spec.seed, spec.temperature), tools=builtin_tools(), cwd=spec.cwd)

    main = Agent(model=model, tools=builtin_tools(), cwd=ws).start(prompt)
    attempts = Attempts(main, prompt, make, 3, seed=100, wall_s=None, **kw)

    async def go():
        return [e async for e in attempts]

    return attempts, asyncio.run(go())


CHECK_SIX = "import pathlib\nassert pathlib.Path('out.txt').read_text().strip() == '6'\n"


def test_what_a_named_command_leaves_when_run_on_the_workspace_as_it_was_is_not_in_any_attempts_copy(tmp_path):
    """The task's named commands run on the pristine workspace first (what "fixed" is measured against); they run
    in a copy of the base, so an output file or a cache they leave is not in the base the attempts start from."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "gen.py").write_text("open('made.txt', 'w').write('by the harness')\nraise SystemExit(1)\n")
    seen = []
    looks = [
        respond([tool_call("Bash", {"command": "ls"})]),
        reply("Looked.", expect=lambda body: seen.append(body["messages"][-1]["content"][0]["content"])),
    ]
    with ScriptedServer(scripts(looks, looks, looks), route=by_temperature) as server:
        attempts, _ = library_attempts(server, ws, "Make `python3 gen.py` pass.", together=False)
        server.take_remaining()
    assert attempts.base_checks["python3 gen.py"][0] == 1  # it ran on the workspace as it was
    assert seen and "gen.py" in seen[0] and "made.txt" not in seen[0], seen
    assert not (ws / "made.txt").exists()


def test_one_after_another_a_settled_task_starts_no_further_attempt(tmp_path):
    """As a local model's attempts run: attempt 1 fixes the named command, so 2 and 3 never start."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "check.py").write_text(CHECK_SIX)
    with ScriptedServer(scripts(writes(6), writes(6), writes(6)), route=by_temperature) as server:
        attempts, events = library_attempts(server, ws, "Make `python3 check.py` pass.", together=False)
        assert len(server.take_remaining()) == 4
    result = attempts.result
    assert result.attempts["count"] == 1 and result.attempts["planned"] == 3 and result.attempts["chosen"] == 1
    assert result.attempts["each"][0]["seed"] == 100
    assert (ws / "out.txt").read_text() == "6\n" and result.subtype == "success"
    assert {e.attempt for e in events[:-1]} == {1}


def test_attempts_that_fail_a_command_passing_elsewhere_cannot_win_though_they_agree(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "check.py").write_text(CHECK_SIX)
    with ScriptedServer(scripts(writes(6), writes(5), writes(5)), route=by_temperature) as server:
        attempts, _ = library_attempts(server, ws, "Make `python3 check.py` pass.", early_stop=False)
    each = attempts.result.attempts["each"]
    assert attempts.result.attempts["chosen"] == 1
    assert [e["hard_fail"] for e in each] == ["", *["`python3 check.py` fails on its copy and passes elsewhere"] * 2]


def test_an_answer_that_copies_the_harness_words_cannot_win(tmp_path):
    """A reported defect: a run's answer was the harness's own send-back, word for word, as a success."""
    ws = tmp_path / "ws"
    ws.mkdir()
    said = "The task asks for out.txt, but it does not exist. Create it with the right content."

    def echo(value):
        return [
            respond([tool_call("Write", {"file_path": "out.txt", "content": f"{value}\n"})]),
            reply("Done?"),
            reply(said),
        ]

    from drivetrain.loop.nodes import SendBack

    class Nag:  # a node that sends the model back once, with these words, as the checks do
        name, at, limit = "nag", "end_turn", 1

        async def run(self, ctx):
            return SendBack(said)

    import asyncio

    from drivetrain import Agent
    from drivetrain.models.anthropic import AnthropicModel
    from drivetrain.small.attempts import Attempts, Sampled
    from drivetrain.tools import builtin_tools

    with ScriptedServer(scripts(echo(1), writes(2), echo(1)), route=by_temperature) as server:
        model = AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
        )

        def make(spec):
            agent = Agent(model=Sampled(model, spec.seed, spec.temperature), tools=builtin_tools(), cwd=spec.cwd)
            if spec.index != 2:
                agent.nodes.append(Nag())
            return agent

        main = Agent(model=model, tools=builtin_tools(), cwd=ws).start("Write the total to out.txt.")
        attempts = Attempts(main, "Write the total to out.txt.", make, 3, wall_s=None)

        async def go():
            return [e async for e in attempts]

        asyncio.run(go())
        server.take_remaining()
    got = attempts.result.attempts
    assert [e["hard_fail"] for e in got["each"]] == [
        "its answer copies what the harness said",
        "",
        "its answer copies what the harness said",
    ]
    assert got["chosen"] == 2 and attempts.result.result != said


def test_the_wall_budget_ends_an_attempt_as_it_ends_a_single_run_and_its_work_is_kept(tmp_path):
    """The budget ends an attempt as it ends a single run, during a model call too; its work so far is kept, and no
    further attempt starts once the budget is spent."""
    import asyncio

    from drivetrain import Agent
    from drivetrain.loop.budget import Budget
    from drivetrain.models.anthropic import AnthropicModel
    from drivetrain.small.attempts import Attempts, Sampled
    from drivetrain.tools import builtin_tools

    ws = tmp_path / "ws"
    ws.mkdir()
    slow = [respond([tool_call("Write", {"file_path": "out.txt", "content": "7\n"})]), reply("7", delay=5)]
    with ScriptedServer(scripts(slow, writes(8), writes(8)), route=by_temperature) as server:
        model = AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
        )

        def make(spec):
            model_for = Sampled(model, spec.seed, spec.temperature)
            return Agent(model=model_for, tools=builtin_tools(), cwd=spec.cwd, budget=Budget(wall_time_s=1.5))

        main = Agent(model=model, tools=builtin_tools(), cwd=ws).start("Write the total to out.txt.")
        attempts = Attempts(main, "Write the total to out.txt.", make, 3, wall_s=1.5, together=False)

        async def go():
            return [e async for e in attempts]

        asyncio.run(go())
        assert len(server.take_remaining()) == 4  # the two that never started
    result = attempts.result
    assert result.subtype == "error_max_wall_time" and result.attempts["count"] == 1
    assert (ws / "out.txt").read_text() == "7\n"  # its work is kept, as a single run leaves it
    assert "the changes of attempt 1 are kept" in result.attempts["reason"]


def test_a_further_attempt_starts_only_with_the_time_the_quickest_finished_one_took(tmp_path):
    from drivetrain.small.attempts import MIN_START_S, Attempts

    attempts = Attempts(main=None, prompt="", make_agent=None, k=3)  # only its bookkeeping is read here
    assert attempts._room() == MIN_START_S  # nothing ran yet
    slow = _attempt(1, subtype="error_max_wall_time")
    slow.took_s = 50.0
    attempts.attempts = [slow]
    assert attempts._room() == 50.0  # it was cut short after 50 s: another needs at least that
    quick = _attempt(2)
    quick.took_s = 22.0
    attempts.attempts = [slow, quick]
    assert attempts._room() == 22.0
    quick.took_s = 3.0
    assert attempts._room() == MIN_START_S


def test_a_list_of_numbers_is_not_read_as_one_number():
    assert answer_values("1,2,3") == frozenset({"1", "2", "3"})
    assert answer_values("12,345.5 and 7") == frozenset({"12345.5", "7"})


def checked_attempts(server, ws, prompt, seen=None, store=None, **kw):
    """``Attempts`` whose agents carry the small profile's work checks as a node that reads but never sends back,
    saved to ``store`` if given; their events go to ``seen``."""
    seen = [] if seen is None else seen
    import asyncio

    from drivetrain import Agent
    from drivetrain.control.hooks import Hooks
    from drivetrain.models.anthropic import AnthropicModel
    from drivetrain.small.attempts import Attempts, Sampled
    from drivetrain.small.checks import WorkChecks
    from drivetrain.tools import builtin_tools

    model = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )

    def make(spec):
        hooks = Hooks()
        checks = WorkChecks(spec.cwd, work_limit=0, answer_limit=0).install(hooks)
        sampled = Sampled(model, spec.seed, spec.temperature)
        return Agent(
            model=sampled, tools=builtin_tools(), cwd=spec.cwd, hooks=hooks, nodes=[checks], max_turns=3, store=store
        )

    main = Agent(model=model, tools=builtin_tools(), cwd=ws).start(prompt)
    attempts = Attempts(main, prompt, make, kw.pop("k", 3), wall_s=kw.pop("wall_s", None), **kw)

    async def go():
        return [e async for e in attempts]

    seen.extend(asyncio.run(go()))
    server.take_remaining()
    return attempts.result.attempts


def numbers_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "numbers.txt").write_text("5 6 7\n")
    return ws


NUMBERS_PROMPT = "Add up the numbers in numbers.txt and write the total to out.txt."


def computes_total():
    """An attempt that computes the total of numbers.txt into out.txt and reports it."""
    return [
        respond([tool_call("Bash", {"command": "python3 -c 'print(5+6+7)' > out.txt"})]),
        reply("The total is 18, in out.txt."),
    ]


def writes_placeholder():
    """An attempt that writes a placeholder to out.txt instead of the total, and says it is done."""
    return [
        respond([tool_call("Write", {"file_path": "out.txt", "content": "<total>\n"})]),
        reply("Done: out.txt."),
    ]


def test_the_work_checks_an_end_state_fails_count_against_it_in_selection(tmp_path):
    """The same check objects that send a run back (small/checks.py) are read of each attempt's end: alone in their
    groups, the attempt that wrote a placeholder loses to the one that computed the value, though it took fewer
    turns."""
    ws = numbers_workspace(tmp_path)
    placeholder = writes_placeholder()
    computed = [
        respond([tool_call("Bash", {"command": "python3 -c 'print(5+6+7)'"})]),
        respond([tool_call("Write", {"file_path": "out.txt", "content": "18\n"})]),
        reply("The total is 18, in out.txt."),
    ]
    crashed = [respond([tool_call("Bash", {"command": "true"})])] * 4  # more turns than its cap: cannot win
    with ScriptedServer(scripts(placeholder, computed, crashed), route=by_temperature) as server:
        got = checked_attempts(server, ws, "Add up the numbers in numbers.txt and write the total to out.txt.")
    each = {e["attempt"]: e for e in got["each"]}
    assert each[1]["failed_checks"] == ["placeholders"], each[1]
    assert got["chosen"] == 2, [(e["attempt"], e["subtype"], e["failed_checks"], e["num_turns"]) for e in got["each"]]
    assert (ws / "out.txt").read_text() == "18\n"


def test_one_after_another_a_further_attempt_starts_only_where_the_checks_still_objected(tmp_path):
    """Attempt 1 leaves a placeholder and the checks still object when its stop is let through: attempt 2 starts,
    computes the value and wins; nothing is known against attempt 2, so attempt 3 never starts."""
    ws = numbers_workspace(tmp_path)
    placeholder = writes_placeholder()
    computed, prompt = computes_total(), NUMBERS_PROMPT
    with ScriptedServer(scripts(placeholder, computed, computed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, together=False)
    assert got["count"] == 2 and got["chosen"] == 2, got
    assert got["each"][0]["objections"] == ["placeholders"] and got["each"][1]["objections"] == [], got
    assert (ws / "out.txt").read_text() == "18\n"
    shown = attempts_text([{"kind": "attempts", **got}], {})
    assert "the checks still objected: placeholders" in shown[2] and "objected" not in shown[3], shown


def test_a_quoted_line_printed_exactly_is_strong_evidence_and_no_further_attempt_starts(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.py").write_text("print('Hello World')\n")
    fixed = [
        respond([tool_call("Write", {"file_path": "hello.py", "content": "print('Hello, World!')\n"})]),
        respond([tool_call("Bash", {"command": "python3 hello.py"})]),
        reply("It prints Hello, World! now."),
    ]
    prompt = 'Make `python3 hello.py` print exactly "Hello, World!"'
    with ScriptedServer(scripts(fixed, fixed, fixed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, together=False)
    assert got["count"] == 1 and got["chosen"] == 1, got
    assert got["each"][0]["evidence"] == "`python3 hello.py` prints 'Hello, World!' exactly"
    assert "prints 'Hello, World!' exactly" in got["reason"]


def test_an_output_file_holding_what_its_own_command_prints_is_strong_evidence_a_typed_value_is_not(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    (ws / "b.py").write_text("z = 3\n")
    by_command = [
        respond([tool_call("Bash", {"command": "cat a.py b.py | wc -l > total.txt"})]),
        reply("The total is 3, in total.txt."),
    ]
    typed = [
        respond([tool_call("Write", {"file_path": "total.txt", "content": "3\n"})]),
        reply("The total is 3, in total.txt."),
    ]
    prompt = "Count the lines of a.py and b.py together and write the total to total.txt."
    with ScriptedServer(scripts(by_command, typed, typed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, together=False)
    assert got["count"] == 1 and got["each"][0]["evidence"] == "total.txt holds what `cat a.py b.py | wc -l` prints"
    (ws / "total.txt").unlink()
    with ScriptedServer(scripts(typed, by_command, typed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, together=False)
    # typed: no strong evidence, and the checks object to a value typed rather than computed: the second starts
    assert got["count"] == 2 and got["each"][0]["evidence"] == "", got
    assert got["each"][0]["objections"] == ["uncomputed"], got
    assert got["each"][1]["evidence"].startswith("total.txt holds what")


def test_through_the_cli_the_small_profiles_own_checks_read_each_attempt_and_strong_evidence_settles_it(
    tmp_path, _own_home
):
    """The small profile adds its checks when a run starts (not to the agent): selection and early stop read them
    there. An attempt whose asked-for file holds what its own command prints settles the task; a typed value does
    not."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    computed = [reply("Count and write it.\n```bash\nwc -l < a.py > total.txt\n```"), reply("DONE: 2, in total.txt.")]
    typed = [reply("Write it.\n```bash\necho 2 > total.txt\n```"), *[reply("DONE: 2, in total.txt.")] * 4]
    with ScriptedServer(scripts(typed, computed, typed), route=by_temperature) as server:
        proc = cli(
            server.url,
            "-p",
            "Count the lines of a.py and write the total to total.txt.",
            *("--profile", "small", "--attempts", "3", "--permission-mode", "bypassPermissions"),
            *("--output-format", "json"),
            cwd=ws,
        )
        server.take_remaining()
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["attempts"]
    each = {e["attempt"]: e for e in got["each"]}
    assert each[2]["evidence"] == "total.txt holds what `wc -l < a.py` prints", each
    assert each[1]["evidence"] == "" and got["chosen"] == 2, got  # `echo 2` typed it
    assert "total.txt holds what `wc -l < a.py` prints" in got["reason"]
    assert (ws / "total.txt").read_text().strip() == "2"


def test_keep_attempts_leaves_each_attempts_copy_for_inspection_and_a_used_folder_is_refused(tmp_path):
    ws = numbers_workspace(tmp_path)
    kept = tmp_path / "kept"
    with ScriptedServer(scripts(writes(17), writes(18), writes(18)), route=by_temperature) as server:
        proc = run_attempts(server, ws, "--keep-attempts", str(kept))
    assert proc.returncode == 0, proc.stderr
    assert [(kept / f"a{i}" / "out.txt").read_text() for i in (1, 2, 3)] == ["17\n", "18\n", "18\n"]
    assert not (kept / "base" / "out.txt").exists() and (kept / "base" / "numbers.txt").exists()
    with ScriptedServer([]) as server:
        again = run_attempts(server, ws, "--keep-attempts", str(kept))
    said = json.loads(again.stdout)["result"]
    assert again.returncode != 0 and "--keep-attempts" in said and "not empty" in said, said
    assert (ws / "out.txt").read_text() == "18\n"  # the refused run changed nothing
    (tmp_path / "afile").write_text("x")
    with ScriptedServer([]) as server:
        on_file = run_attempts(server, ws, "--keep-attempts", str(tmp_path / "afile"))
    assert on_file.returncode != 0 and "a file, not a folder" in json.loads(on_file.stdout)["result"]


def test_an_attempt_whose_first_call_misfires_is_abandoned_for_a_fresh_one(tmp_path):
    """One after another: attempt 1's first command fails in its own code (a program that does not exist), so it
    is left at once, with what it left discarded; attempt 2 computes the value and wins. The last attempt is never
    abandoned: it would leave no attempt to go on."""
    ws = numbers_workspace(tmp_path)
    misfired = [
        respond([tool_call("Bash", {"command": "mkdir -p tmp && nosuchprogram numbers.txt > out.txt"})]),
        reply("The total is 99, in out.txt."),  # never asked for
    ]
    computed, prompt = computes_total(), NUMBERS_PROMPT
    seen = []
    store = FileStore(tmp_path / "home")
    with ScriptedServer(scripts(misfired, computed, computed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, seen, store=store, together=False)
        assert [r.body.get("temperature") for r in server.requests] == [0.2, 0.5, 0.5], server.requests
    assert got["count"] == 2 and got["chosen"] == 2, got
    assert got["each"][0]["abandoned"].startswith("its call 1 misfired (a program it named"), got["each"][0]
    shown = attempts_text([{"kind": "attempts", **got}], {})
    assert "abandoned" in shown[2] and "abandoned for a fresh attempt: its call 1 misfired" in shown[2], shown
    assert (ws / "out.txt").read_text() == "18\n" and not (ws / "tmp").exists()
    ends = [(e.attempt, e.event.result) for e in seen if isinstance(e, AttemptEvent) and isinstance(e.event, Finished)]
    assert [(i, r.subtype) for i, r in ends] == [(1, "error_during_execution"), (2, "success")], ends
    assert (
        ends[0][1].note.startswith("abandoned for a fresh attempt: its call 1 misfired") and ends[0][1].num_turns == 1
    )
    # the abandoned attempt's own log ends with its result, so it is not listed as running
    left = store.read(got["each"][0]["session_id"])[-1]
    assert left["kind"] == "result" and left["subtype"] == "error_during_execution", left
    assert str(left["note"]).startswith("abandoned for a fresh attempt"), left
    assert store.info(got["each"][0]["session_id"]).status == "error_during_execution"


def test_without_abandoning_or_at_the_last_attempt_a_misfire_is_the_models_to_recover_from(tmp_path):
    ws = numbers_workspace(tmp_path)
    misfired_then_fixed = [
        respond([tool_call("Bash", {"command": "nosuchprogram numbers.txt"})]),
        respond([tool_call("Bash", {"command": "python3 -c 'print(5+6+7)' > out.txt"})]),
        reply("The total is 18, in out.txt."),
    ]
    prompt = NUMBERS_PROMPT
    for kw in ({"abandon": False}, {"k": 1}):
        with ScriptedServer(scripts(misfired_then_fixed), route=by_temperature) as server:
            got = checked_attempts(server, ws, prompt, together=False, **kw)
        assert got["count"] == 1 and got["chosen"] == 1 and got["each"][0]["abandoned"] == "", (kw, got)
        (ws / "out.txt").unlink()


def test_the_embedded_models_default_is_three_attempts_a_servers_one_a_settings_file_may_say(tmp_path, _own_home):
    """Three on the embedded model, whose attempts run one after another (a further one only after a known
    failure); one on a server's model, where each attempt would run at once and be billed; one under the full
    profile. A settings file's "attempts" wins over the default."""
    from argparse import Namespace

    from drivetrain import Agent
    from drivetrain.cli.build import attempts_wanted
    from drivetrain.loop.profile import FULL
    from drivetrain.models.local import LocalModel
    from drivetrain.models.openai import OpenAIModel
    from drivetrain.small.profile import SMALL

    asked = Namespace(attempts=None)
    server = OpenAIModel.from_env(
        "qwen2.5-coder:1.5b", {"OPENAI_BASE_URL": "http://127.0.0.1:9", "OPENAI_API_KEY": "k"}
    )
    assert attempts_wanted(asked, Agent(model=LocalModel(), cwd=tmp_path, profile=SMALL)) == 3
    assert attempts_wanted(asked, Agent(model=server, cwd=tmp_path, profile=SMALL)) == 1
    assert attempts_wanted(asked, Agent(model=LocalModel(), cwd=tmp_path, profile=FULL)) == 1
    assert attempts_wanted(Namespace(attempts=2), Agent(model=server, cwd=tmp_path, profile=SMALL)) == 2
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text('{"attempts": 1}')
    assert attempts_wanted(asked, Agent(model=LocalModel(), cwd=tmp_path, profile=SMALL)) == 1


def test_the_embedded_model_takes_its_attempts_at_once_when_it_decodes_several_together():
    """$DRIVETRAIN_LOCAL_PARALLEL > 1 gives the embedded model sequences to decode requests together, so a task's
    attempts run at once on it (as on a server's model) rather than each after the last is known to have failed; a
    setting that is not a whole number of sequences is a clear error."""
    from drivetrain.cli.build import one_after_another
    from drivetrain.errors import ConfigError
    from drivetrain.models.local import LocalModel
    from drivetrain.models.resident import ResidentModel

    assert one_after_another(LocalModel.from_env(env={}))
    assert one_after_another(ResidentModel(env={}))
    together = LocalModel.from_env(env={"DRIVETRAIN_LOCAL_PARALLEL": "3"})
    assert together.parallel == 3 and not one_after_another(together)
    assert not one_after_another(ResidentModel(env={"DRIVETRAIN_LOCAL_PARALLEL": "2"}))
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match="DRIVETRAIN_LOCAL_PARALLEL"):
            LocalModel.from_env(env={"DRIVETRAIN_LOCAL_PARALLEL": bad})


def test_a_misfire_is_not_abandoned_when_the_next_attempt_would_have_no_room(tmp_path, monkeypatch):
    """Abandoning leaves the next attempt only what is left of the budget, and it is given no less than the
    abandoned one took: a 1.5B's first reply took 26 s, its second attempt's 17 s, and the third had no room, so the
    run ended with nothing. Now the attempt goes on when the next would have no room."""
    import drivetrain.small.attempts as attempts_module

    monkeypatch.setattr(attempts_module, "MIN_START_S", 0.5)
    ws = numbers_workspace(tmp_path)
    slow_misfire_then_fixed = [
        respond([tool_call("Bash", {"command": "nosuchprogram numbers.txt"})], delay=1.5),
        respond([tool_call("Bash", {"command": "python3 -c 'print(5+6+7)' > out.txt"})]),
        reply("The total is 18, in out.txt."),
    ]
    prompt = NUMBERS_PROMPT
    with ScriptedServer(scripts(slow_misfire_then_fixed), route=by_temperature) as server:
        got = checked_attempts(server, ws, prompt, together=False, wall_s=2.8)
    assert got["count"] == 1 and got["chosen"] == 1 and got["each"][0]["abandoned"] == "", got
    assert (ws / "out.txt").read_text() == "18\n"
