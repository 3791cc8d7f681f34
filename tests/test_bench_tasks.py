"""The task benchmark (benchmarks/bench_tasks.py): its checkers against reference solutions and against wrong
work, its config syntax and run order, its results file, and both runners on a scripted model (no weights)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_tasks  # noqa: E402
import naive  # noqa: E402
from report import tables  # noqa: E402
from tasks import TASKS, check_one  # noqa: E402


def test_the_suite_has_the_kinds_the_issue_asks_for():
    assert len(TASKS) >= 12
    assert {"linecount", "linecount-nowc", "todos", "fix-test", "rename", "off-by-one", "create-json",
            "create-function", "locate", "csv-sum", "config-edit", "find-files", "syntax-fix"} <= set(TASKS)


@pytest.mark.parametrize("name", list(TASKS))
def test_checker_fails_untouched_and_passes_the_reference_solution(name, tmp_path):
    for seed in (1, 2, 3):
        assert check_one(TASKS[name], seed, tmp_path) == []


def make(name, tmp_path, seed=1):
    ws = tmp_path / name
    inst = TASKS[name].make(seed, ws)
    return ws, json.loads(json.dumps(inst.expect)), inst


def test_seeds_vary_the_workspace(tmp_path):
    prompts = {TASKS["csv-sum"].make(s, tmp_path / str(s)).prompt for s in range(1, 6)}
    assert len(prompts) > 1


def test_linecount_denies_wc_only_in_its_rerouting_variant(tmp_path):
    assert make("linecount", tmp_path, 4)[2].deny == ()
    assert make("linecount-nowc", tmp_path, 4)[2].deny == ("Bash(wc:*)",)


def test_number_file_must_hold_just_the_number_and_be_reported(tmp_path):
    ws, e, _ = make("linecount", tmp_path)
    (ws / e["out"]).write_text(f"Total: {e['total']}\n")
    assert TASKS["linecount"].check(ws, f"{e['total']} lines", e)[0] is False
    (ws / e["out"]).write_text(f"{e['total'] + 1}\n")
    assert TASKS["linecount"].check(ws, f"{e['total'] + 1} lines", e)[0] is False
    (ws / e["out"]).write_text(f"{e['total']}\n")
    assert TASKS["linecount"].check(ws, "done", e)[0] is False
    assert TASKS["linecount"].check(ws, f"The total is {e['total']}.", e)[0] is True


def test_fixing_the_test_instead_of_the_module_fails(tmp_path):
    ws, e, _ = make("fix-test", tmp_path)
    (ws / e["test"]).write_text("print('all tests passed')\n")
    ok, reason = TASKS["fix-test"].check(ws, "", e)
    assert not ok and "was changed" in reason


def test_rewriting_a_broken_script_is_not_a_fix(tmp_path):
    ws, e, _ = make("syntax-fix", tmp_path)
    (ws / e["script"]).write_text(f"print({e['output'].rstrip()!r})\n")
    ok, reason = TASKS["syntax-fix"].check(ws, "", e)
    assert not ok and "rewrite" in reason


def test_renaming_only_the_definition_fails(tmp_path):
    ws, e, _ = make("rename", tmp_path)
    lib = ws / f"{e['lib']}.py"
    lib.write_text(lib.read_text().replace(f"def {e['old']}(", f"def {e['new']}("))
    ok, reason = TASKS["rename"].check(ws, "", e)
    assert not ok and e["old"] in reason


def test_a_config_edit_that_drops_a_line_fails(tmp_path):
    for seed in range(1, 8):  # a text format (not JSON): lines are compared
        ws, e, _ = make("config-edit", tmp_path / str(seed), seed)
        if e["fmt"] != "json":
            break
    (ws / e["file"]).write_text("\n".join(e["after"].splitlines()[:-1]) + "\n")
    assert TASKS["config-edit"].check(ws, "", e)[0] is False
    (ws / e["file"]).write_text(e["after"] + "\n\n")  # trailing blank lines are harmless
    assert TASKS["config-edit"].check(ws, "", e)[0] is True


def test_locate_needs_the_right_line(tmp_path):
    ws, e, _ = make("locate", tmp_path)
    path, line = e["at"].split(":")
    assert TASKS["locate"].check(ws, f"{path}:{int(line) + 1}", e)[0] is False
    assert TASKS["locate"].check(ws, f"It is defined in ./{path}:{line}.", e)[0] is True


def test_off_by_one_checked_on_hidden_cases(tmp_path):
    ws, e, _ = make("off-by-one", tmp_path)
    mod = ws / f"{e['module']}.py"
    mod.write_text(mod.read_text() + f"\n\ndef {e['func']}(*args):\n    return None\n")  # shadowed by a stub
    ok, reason = TASKS["off-by-one"].check(ws, "", e)
    assert not ok and "returned None" in reason


def test_config_syntax():
    assert bench_tasks.parse_config("drivetrain") == bench_tasks.Config("drivetrain", "drivetrain")
    assert bench_tasks.parse_config("naive").naive
    c = bench_tasks.parse_config("lean=ablate:checks,collapse+profile:full+arg:--verbose")
    assert (c.name, c.ablate, c.args) == ("lean", ("checks", "collapse"), ("--profile", "full", "--verbose"))
    assert c.env == {"DRIVETRAIN_ABLATE": "checks,collapse"}
    assert bench_tasks.parse_config("plain=naive").naive
    for bad in ("nochecks", "x=ablate", "x=profile:full+naive", "x=frobnicate:1", "=ablate:checks", "x=src:/nowhere"):
        with pytest.raises(ValueError):
            bench_tasks.parse_config(bad)


def test_a_config_can_run_the_code_of_another_checkout(tmp_path):
    (tmp_path / "old" / "src" / "drivetrain").mkdir(parents=True)
    (tmp_path / "old" / "src" / "drivetrain" / "__init__.py").write_text("WHICH = 'old'\n")
    c = bench_tasks.parse_config(f"before=src:{tmp_path / 'old'}")
    env = {**os.environ, **c.env}
    which = subprocess.run([sys.executable, "-c", "import drivetrain; print(drivetrain.WHICH)"], env=env,
                           capture_output=True, text=True, cwd=tmp_path)
    assert which.stdout.strip() == "old", which.stderr  # before the installed drivetrain


def test_runs_interleave_the_configs():
    a, b = bench_tasks.parse_config("drivetrain"), bench_tasks.parse_config("naive")
    order = [(t, r, c.name) for t, r, _, c in bench_tasks.plan(["todos", "rename"], [a, b], 2, 1)]
    assert order == [("todos", 1, "drivetrain"), ("todos", 1, "naive"), ("rename", 1, "drivetrain"),
                     ("rename", 1, "naive"), ("todos", 2, "drivetrain"), ("todos", 2, "naive"),
                     ("rename", 2, "drivetrain"), ("rename", 2, "naive")]
    seeds = {(t, r): s for t, r, s, _ in bench_tasks.plan(["todos"], [a, b], 2, 7)}
    assert seeds == {("todos", 1): 7001, ("todos", 2): 7002}  # the same workspace for both configs


def row(task, config, solved, wall, turns, run=1, seed=1001, spec=None, model="default"):
    return {"task": task, "config": config, "spec": spec or config, "model": model, "run": run, "seed": seed,
            "solved": solved, "reason": "r", "turns": turns, "wall_s": wall}


def test_tables_count_per_task_and_config():
    rows = [row("todos", "drivetrain", True, 10, 3), row("todos", "naive", False, 2, 1),
            row("rename", "drivetrain", False, 30, 12), row("rename", "naive", True, 4, 2),
            row("rename", "drivetrain", True, 20, 5, run=2)]
    summary, per_task, md = tables(rows)
    assert "drivetrain        2/3   67%" in summary
    lines = md.splitlines()
    assert lines[0] == "| task | drivetrain | naive |"
    assert "| todos | 1/1 | 0/1 |" in lines and "| rename | 1/2 | 1/1 |" in lines
    assert lines.index("| todos | 1/1 | 0/1 |") < lines.index("| rename | 1/2 | 1/1 |")  # the suite's order
    assert "| **total** | **2/3 (67%)** | **1/2 (50%)** |" in lines
    assert "| median wall per run | 20.0 s | 3.0 s |" in lines


def test_resume_skips_runs_in_the_results_file_and_reports_them(tmp_path, capsys):
    results = tmp_path / "runs.jsonl"
    done = [row("todos", "drivetrain", True, 10, 3, run=r, seed=1000 + r) for r in (1, 2)]
    results.write_text("".join(json.dumps(r) + "\n" for r in done) + '{"task": "todos", "cut sh')
    code = bench_tasks.main(["--tasks", "todos", "--config", "drivetrain", "--runs", "2", "--results", str(results),
                             "--resume", "--save", str(tmp_path / "save")])
    out = capsys.readouterr().out
    assert code == 0 and "to run: 0" in out and "| todos | 2/2 |" in out
    assert bench_tasks.main(["--report", str(results)]) == 0
    assert "| **total** | **2/2 (100%)** |" in capsys.readouterr().out


def test_drivetrain_runner_through_the_real_cli(tmp_path):
    """The task's deny rule and the config's ablations and arguments reach the CLI; the checker sees its work."""
    probe, e, _ = make("linecount-nowc", tmp_path / "probe", 3)

    def denied(body):
        assert body["messages"][-1]["content"][0]["is_error"], "wc should have been denied"
        assert "be brief" in json.dumps(body["system"])

    def ablate_seen(body):
        assert "checks,final" in body["messages"][-1]["content"][0]["content"]

    steps = [respond([tool_call("Bash", {"command": "wc -l *.py"})]),
             respond([tool_call("Bash", {"command": "printenv DRIVETRAIN_ABLATE"})], expect=denied),
             respond([tool_call("Write", {"file_path": e["out"], "content": f"{e['total']}\n"})], expect=ablate_seen),
             reply(f"The total is {e['total']}.")]
    config = bench_tasks.parse_config("x=ablate:checks,final+arg:--append-system-prompt=be brief")
    with ScriptedServer(steps) as server:
        runner = bench_tasks.Runner("small", tmp_path / "save", 12, 60, provider_args=("--provider", "anthropic"),
                                    env={"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test",
                                         "ANTHROPIC_MODEL": "claude-sonnet-4-6"})
        result = runner.run("linecount-nowc", 1, 3, config)
    assert result["solved"], result
    assert result["turns"] == 4 and result["trajectory"] == "Bash! → Bash → Write → end_turn"
    logs = tmp_path / "save" / "linecount-nowc" / "run1-seed3" / "x"
    assert (logs / "instance.json").is_file() and (logs / "stderr.log").is_file()
    assert (logs / "ws" / e["out"]).is_file()  # a link to the workspace, whose own path gives nothing away
    assert "linecount" not in result["workspace"] and "/x/" not in result["workspace"]


class ScriptedLlama:
    """Stands in for llama_cpp.Llama: replies from a script, and records what it was sent."""

    def __init__(self, replies):
        self.replies, self.sent = list(replies), []

    def create_chat_completion(self, messages, **kw):
        self.sent.append([dict(m) for m in messages])
        return {"choices": [{"message": {"content": self.replies.pop(0)}, "finish_reason": "stop"}]}


def test_naive_loop_enforces_the_tasks_deny_rules(tmp_path):
    ws, e, inst = make("linecount-nowc", tmp_path, 2)
    call = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'
    llm = ScriptedLlama([call.format("Bash", json.dumps({"command": "wc -l *.py"})),
                         call.format("Write", json.dumps({"file_path": e["out"], "content": str(e["total"])})),
                         f"The total is {e['total']}."])
    run = naive.run_naive(llm, inst.prompt, ws, sampling={}, seed=1, max_turns=12, max_tokens=None,
                          policy=naive.deny_policy(inst.deny, ws, tmp_path / "home"))
    assert "Permission denied" in llm.sent[1][-1]["content"]
    assert run.trajectory == "Bash! → Write → end_turn" and run.subtype == "success" and run.turns == 3
    assert TASKS["linecount-nowc"].check(ws, run.answer, e)[0]


def test_naive_loop_stops_at_the_turn_cap(tmp_path):
    llm = ScriptedLlama(['{"name": "Glob", "arguments": {"pattern": "*.py"}}'] * 3)
    run = naive.run_naive(llm, "go", tmp_path, sampling={}, seed=1, max_turns=3, max_tokens=None)
    assert (run.turns, run.subtype, run.trajectory) == (3, "error_max_turns", "Glob → Glob → Glob")


def test_naive_loop_ends_cleanly_when_the_history_outgrows_the_context(tmp_path):
    class Full(ScriptedLlama):
        def create_chat_completion(self, messages, **kw):
            if len(messages) > 3:
                raise ValueError("Requested tokens (9000) exceed context window of 8192")
            return super().create_chat_completion(messages, **kw)

    llm = Full(['{"name": "Glob", "arguments": {"pattern": "*"}}'])
    run = naive.run_naive(llm, "go", tmp_path, sampling={}, seed=1, max_turns=12, max_tokens=None)
    assert run.subtype.startswith("error_during_execution (Requested tokens") and run.trajectory == "Glob → error"


def test_a_run_that_cannot_start_is_recorded_with_its_reason(tmp_path):
    runner = bench_tasks.Runner("small", tmp_path / "save", 12, 60)
    result = runner.run("todos", 1, 1, bench_tasks.parse_config("odd=arg:--no-such-flag"))
    assert not result["solved"] and "exit 2" in result["reason"] and "--no-such-flag" in result["reason"]
    broken = bench_tasks.Runner(str(tmp_path / "missing.gguf"), tmp_path / "save", 12, 60)
    result = broken.run("todos", 1, 1, bench_tasks.parse_config("naive"))
    assert not result["solved"] and result["reason"].startswith("bench error (") and "missing.gguf" in result["reason"]
