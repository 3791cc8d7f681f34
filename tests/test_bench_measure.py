"""Honest measurement in the task benchmark (issue #44): seeds never reused (the ledger), the CLI's own turn cap
and a wall budget, a PATH without the benchmark's virtualenv, and McNemar's exact test between paired configs."""

import json
import os
import sys
from pathlib import Path

import pytest

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_tasks
import cli_runner
import seed_ledger as ledger
import task_runner
from report import mcnemar_p, mcnemar_table, print_tables

# ---------------------------------------------------------------- McNemar's exact test


def test_mcnemar_exact_p_values():
    assert mcnemar_p(10, 2) == pytest.approx(0.0386, abs=5e-5)  # 2 * 79 / 4096
    assert mcnemar_p(2, 10) == mcnemar_p(10, 2)
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(3, 3) == 1.0
    assert mcnemar_p(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_p(16, 10) == pytest.approx(0.3269, abs=5e-5)  # the symbols measurement's 16 / 10
    assert 0 < mcnemar_p(600, 500) < 0.01  # exact for large counts too (no float overflow of 2**n)


def _row(task, config, solved, seed, wording="zh-1", model="default"):
    return {"task": task, "config": config, "spec": config, "model": model, "run": 1, "seed": seed,
            "wording": wording, "solved": solved, "reason": "r", "turns": 3, "wall_s": 10.0}  # fmt: skip


def test_mcnemar_table_pairs_configs_on_task_seed_and_wording():
    rows = []
    for i in range(12):  # 10 solved by A only, 2 by B only, on held-out Chinese runs
        rows += [_row("locate", "A", i < 10, 100 + i), _row("locate", "B", i >= 10, 100 + i)]
    rows += [_row("todos", "A", True, 7), _row("todos", "B", True, 7)]  # concordant: counts as a pair only
    rows += [_row("todos", "A", True, 8)]  # no partner: left out
    rows += [_row("cli-arg", "A", False, 9, "en-1"), _row("cli-arg", "B", True, 9, "en-1")]  # a fresh kind
    text = mcnemar_table(rows)
    lines = {ln.split()[0]: ln.split() for ln in text.splitlines()[3:]}
    assert text.splitlines()[2] == "A vs B"
    assert lines["all"][:5] == ["all", "14", "10", "3", f"{mcnemar_p(10, 3):.4f}"]
    assert lines["heldout"][:5] == ["heldout", "13", "10", "2", "0.0386"]
    assert lines["fresh"][:4] == ["fresh", "1", "0", "1"] and lines["fresh/en"][:4] == ["fresh/en", "1", "0", "1"]
    assert "not a result" in lines["heldout"][-1] + " ".join(lines["heldout"])
    assert "tune" not in lines
    assert mcnemar_table([_row("todos", "A", True, 1), _row("todos", "B", True, 2)]) == ""  # nothing paired
    assert "different paths" not in text


def test_the_table_says_how_many_pairs_ran_at_different_paths():
    """A seeded model sees its working folder: a pair whose configs ran at different paths differs from the first
    token, so its b / c mixes sampling noise with the configs' difference (a defect of the bench once did this)."""
    rows = []
    for i in range(4):
        a, b = _row("locate", "A", True, 100 + i), _row("locate", "B", False, 100 + i)
        a["cwd"], b["cwd"] = "/s/work/x/ws-k/a1", "/s/work/x/ws-k/a1" if i else "/tmp/drivetrain-attempts-q1/a1"
        rows += [a, b]
    assert "  1 of 4 pairs ran at different paths: not paired by sampling" in mcnemar_table(rows).splitlines()


def test_the_report_prints_the_test(capsys):
    rows = [_row("locate", c, c == "A", 100 + i) for i in range(3) for c in ("A", "B", "C")]
    print_tables(rows)
    out = capsys.readouterr().out
    assert "A vs B" in out and "A vs C" in out and "B vs C" in out and "McNemar" in out


# ---------------------------------------------------------------- the seed ledger


def batch(tmp_path, *extra):
    return bench_tasks.main(
        ["--tasks", "todos", "--config", "drivetrain", "--dry-run", "--ledger", str(tmp_path / "seeds.jsonl"), *extra]
    )


def test_a_fresh_base_by_default_above_every_used_one(tmp_path, capsys):
    assert ledger.fresh_base([]) == ledger.FIRST_FRESH
    assert ledger.fresh_base([{"bases": [13]}, {"seeds": [205003]}]) == 206
    assert batch(tmp_path) == 0
    assert f"seed base: {ledger.FIRST_FRESH} (seeds {ledger.FIRST_FRESH * 1000 + 1}" in capsys.readouterr().out
    assert not (tmp_path / "seeds.jsonl").exists()  # a dry run uses no seeds


def test_the_ledger_shipped_holds_the_seeds_used_before_it():
    entries = ledger.load()
    for base in (1, 11, 12, 13, 14, 21, 26):
        assert ledger.conflicts(entries, ledger.seeds_of(base, 2), None, False), base
    assert ledger.fresh_base(entries) >= ledger.FIRST_FRESH


def test_a_used_seed_set_is_refused_unless_the_same_results_file_is_resumed(tmp_path, capsys, monkeypatch):
    results = tmp_path / "a.jsonl"
    ran = []
    monkeypatch.setattr(bench_tasks.Runner, "run", lambda self, *a: ran.append(a) or {})
    monkeypatch.setattr(bench_tasks, "print_line", lambda row: None)
    common = ["--tasks", "todos", "--config", "drivetrain", "--ledger", str(tmp_path / "seeds.jsonl")]
    common += ["--save", str(tmp_path / "save"), "--wording", "en-1"]
    assert bench_tasks.main([*common, "--seed-base", "300", "--runs", "2", "--results", str(results)]) == 0
    assert [a[2] for a in ran] == [300001, 300002]
    entries = ledger.load(tmp_path / "seeds.jsonl")  # recorded before the runs
    assert [e["seeds"] for e in entries] == [[300001, 300002]] and entries[0]["configs"] == ["drivetrain"]
    capsys.readouterr()
    for again in (
        [*common, "--seed-base", "300", "--results", str(results)],  # the same seeds, no --resume
        [*common, "--seed-base", "300", "--results", str(tmp_path / "b.jsonl"), "--resume"],  # another file
        [*common, "--seed", "300"],  # the old spelling, no results file
    ):
        with pytest.raises(SystemExit):
            bench_tasks.main(again)
        assert "seed base 300 was used before" in capsys.readouterr().err
    ran.clear()
    results.write_text("")  # nothing finished: a resume runs everything again, on the same seeds
    assert bench_tasks.main([*common, "--runs", "3", "--results", str(results), "--resume"]) == 0
    assert [a[2] for a in ran] == [300001, 300002, 300003]  # the base it began with; the third seed is new
    assert [e["seeds"] for e in ledger.load(tmp_path / "seeds.jsonl")] == [[300001, 300002], [300003]]
    ran.clear()
    assert bench_tasks.main([*common, "--results", str(tmp_path / "c.jsonl")]) == 0
    assert [a[2] for a in ran] == [301001]  # a fresh base: above the one used


def test_paired_configs_share_the_seeds_of_a_measurement():
    a, b = bench_tasks.parse_config("A=profile:small"), bench_tasks.parse_config("B=ablate:checks")
    planned = bench_tasks.plan(["todos", "cli-arg"], [a, b], 3, 400, split="heldout,fresh")
    by = {}
    for t, r, s, w, c in planned:
        by.setdefault((t, r), set()).add((s, w))
    assert all(len(v) == 1 for v in by.values()) and len(by) == 6


def test_split_takes_several_splits():
    assert bench_tasks.split_arg("heldout,fresh") == "heldout,fresh" and bench_tasks.split_arg("all") == "all"
    with pytest.raises(Exception):
        bench_tasks.split_arg("heldout,nope")


# ---------------------------------------------------------------- turn cap, wall budget, PATH


def test_the_path_leaves_out_the_virtualenv(monkeypatch, tmp_path):
    venv_bin = str(Path(sys.executable).parent)
    monkeypatch.setattr(sys, "prefix", str(Path(venv_bin).parent))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    path = os.pathsep.join([venv_bin, "/usr/local/bin", venv_bin + "/", "/usr/bin"])
    assert cli_runner.path_without_venv(path) == os.pathsep.join(["/usr/local/bin", "/usr/bin"])
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("VIRTUAL_ENV", str(Path(venv_bin).parent))
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    env = cli_runner.cli_env("small", tmp_path)
    assert venv_bin not in env["PATH"].split(os.pathsep) and "VIRTUAL_ENV" not in env
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_CONFIG_FILE"] == os.devnull and "PIP_FIND_LINKS" not in env
    assert env["DRIVETRAIN_LOCAL_DAEMON"] == "0"  # each run its own model: this checkout's code, no earlier KV state
    assert Path(cli_runner.cli_command()[0]).is_absolute()  # drivetrain itself is still found


def scripted_runner(tmp_path, server, max_wall_s=None):
    """The benchmark's runner, its CLI runs asking the scripted server (results under tmp_path/save)."""
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_MODEL": "claude-sonnet-4-6"}
    return bench_tasks.Runner(
        "small", tmp_path / "save", None, 60, provider_args=("--provider", "anthropic"), env=env, max_wall_s=max_wall_s
    )


def test_the_cli_runs_with_its_own_turn_cap_a_wall_budget_and_no_virtualenv_on_its_path(tmp_path, monkeypatch):
    venv_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", venv_bin + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setattr(sys, "base_prefix", "/nowhere")  # the tests' interpreter counts as a virtualenv here
    seen = {}

    def path_seen(body):
        seen["path"] = body["messages"][-1]["content"][0]["content"]

    steps = [respond([tool_call("Bash", {"command": "echo $PATH"})]), reply("done", expect=path_seen)]
    with ScriptedServer(steps) as server:
        runner = scripted_runner(tmp_path, server, max_wall_s=60)
        result = runner.run("todos", 1, 3, bench_tasks.parse_config("drivetrain"))
    argv = json.loads((tmp_path / "save" / "todos" / "run1-seed3-en-1" / "drivetrain" / "argv.json").read_text())
    assert "--max-turns" not in argv
    assert argv[argv.index("--max-wall-time") + 1] == "60"
    assert result["max_turns"] is None and result["max_wall_s"] == 60
    shown = seen["path"].strip().split(os.pathsep)
    assert "/usr/bin" in shown and venv_bin not in shown, seen["path"]


def test_both_configs_of_a_pair_run_seeded_in_the_same_path_and_keep_their_own_workspace(tmp_path):
    """Paired by sampling, not only by task: a seeded model sees the same tokens in both configs of a pair until
    their code differs, so the pair's seed is passed, the workspace path (in the system prompt, in every pwd) is the
    same, and `ls -l` shows the same times; each config's workspace is then kept under a path of its own."""
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def steps(name):
        def look(body):
            seen[name].append(body["messages"][-1]["content"][0]["content"])

        return [respond([tool_call("Bash", {"command": "pwd; ls -la --time-style=+%s"})]), reply("done", expect=look)]

    results = {}
    for name, extra in (("a", ""), ("b", "+arg:--seed=5")):
        with ScriptedServer(steps(name)) as server:
            results[name] = scripted_runner(tmp_path, server).run(
                "todos", 1, 3, bench_tasks.parse_config(name + "=" + "profile:full" + extra)
            )
    argv = {
        n: json.loads((tmp_path / "save" / "todos" / "run1-seed3-en-1" / n / "argv.json").read_text()) for n in "ab"
    }
    assert argv["a"][argv["a"].index("--seed") + 1] == "3" and argv["b"].count("--seed") == 0  # b sets its own
    assert seen["a"] == seen["b"] and str(task_runner.FIXED_TIME) in seen["a"][0], seen
    assert results["a"]["workspace"] != results["b"]["workspace"]
    for n in "ab":
        kept = Path(results[n]["workspace"])
        assert kept.is_dir() and (tmp_path / "save" / "todos" / "run1-seed3-en-1" / n / "ws").resolve() == kept
        assert "todos" not in str(kept.relative_to(tmp_path / "save"))


def test_a_single_runs_workspace_is_at_the_path_of_the_first_attempt_of_a_config_of_attempts(tmp_path):
    """A config of attempts works in copies (``ws-k/aN``): the other configs of its pair work at its first attempt's
    path, so the first attempt is paired by sampling with the single run (the same pwd, files and times)."""
    from drivetrain.small.attempts import TEMPERATURES

    seen: dict[str, list[str]] = {"one": [], "k2": []}

    def steps(name):
        def look(body):
            seen[name].append(body["messages"][-1]["content"][0]["content"])

        return [respond([tool_call("Bash", {"command": "pwd; ls -l --time-style=+%s"})]), reply("7", expect=look)]

    with ScriptedServer(steps("one")) as server:
        one = scripted_runner(tmp_path, server).run("todos", 1, 3, bench_tasks.parse_config("one=profile:full"))
    routes = {str(TEMPERATURES[0]): steps("k2"), str(TEMPERATURES[1]): [reply("8")]}
    with ScriptedServer(routes, route=lambda body: str(body.get("temperature"))) as server:
        config = bench_tasks.parse_config("k2=profile:full+arg:--attempts=2")
        assert config.in_copies and not bench_tasks.parse_config("k1=arg:--attempts=1").in_copies
        # at the CLI's default the embedded model runs three attempts: in copies too, unless one is asked for
        assert (
            bench_tasks.parse_config("drivetrain").in_copies and bench_tasks.parse_config("k=ablate:abandon").in_copies
        )
        for single in ("ablate:attempts", "profile:full", "arg:--attempts=1"):
            assert not bench_tasks.parse_config(f"k1={single}").in_copies, single
        assert not bench_tasks.parse_config("naive").in_copies
        result = scripted_runner(tmp_path, server).run("todos", 1, 3, config)
        server.take_remaining()
    assert seen["one"] == seen["k2"] and seen["one"][0].split()[0].endswith("/ws-k/a1"), seen
    assert result["cwd"] == one["cwd"] == seen["one"][0].split()[0]  # from each run's own session log
    assert sorted(p.name for p in Path(result["workspace"] + "-k").iterdir()) == [
        "a1",
        "a1-probe",
        "a2",
        "a2-probe",
        "base",
        "probe",
    ]
    assert [e["attempt"] for e in result["attempts"]["each"]] == [1, 2]
    assert result["trajectory"] == "a1: Bash → end_turn | a2: end_turn", result["trajectory"]


def test_a_dry_run_prints_the_first_command(tmp_path, capsys):
    assert batch(tmp_path, "--max-wall-time", "45", "--seed-base", "500") == 0
    out = capsys.readouterr().out
    assert "--max-wall-time 45" in out and "--max-turns" not in out.split("first drivetrain run")[1]
    assert "turn cap: the CLI default" in out and "seed 500001" in out


def test_a_kept_config_checks_each_attempt_in_its_own_copy_as_the_run_is_checked(tmp_path):
    """``keep``: the CLI keeps each attempt's copy (``--keep-attempts``, beside the workspace, under a path as
    neutral as it), and each attempt is checked there with its own answer: the chosen one against the first."""
    from drivetrain.small.attempts import TEMPERATURES
    from tasks import TASKS

    out = TASKS["todos"].make(3, tmp_path / "probe", "en-1").expect["out"]
    solves = [
        respond([tool_call("Bash", {"command": f"grep -n TODO *.py | cut -d: -f1,2 > {out}"})]),
        reply(f"Listed them in {out}."),
    ]
    skips = [reply("There is nothing to do.")]
    routes = {str(TEMPERATURES[0]): solves, str(TEMPERATURES[1]): skips, str(TEMPERATURES[2]): list(skips)}
    with ScriptedServer(routes, route=lambda body: str(body.get("temperature"))) as server:
        runner = scripted_runner(tmp_path, server)
        config = bench_tasks.parse_config(
            "k3=keep+profile:full+arg:--attempts=3+arg:--permission-mode=bypassPermissions"
        )
        result = runner.run("todos", 1, 3, config)
    each = {e["attempt"]: e for e in result["attempts"]["each"]}
    assert each[1]["solved"] and each[1]["reason"].endswith("TODOs"), each
    assert not each[2]["solved"] and not each[3]["solved"] and each[2]["reason"].endswith("was not written")
    assert result["attempts"]["chosen"] in (1, 2, 3) and result["attempts"]["reason"]
    kept = Path(result["workspace"] + "-k")
    assert sorted(p.name for p in kept.iterdir()) == [
        "a1",
        "a1-probe",
        "a2",
        "a2-probe",
        "a3",
        "a3-probe",
        "base",
        "probe",
    ]
    assert "todos" not in str(kept.relative_to(tmp_path / "save"))  # the attempts' pwd names no task
    with pytest.raises(ValueError, match="keep"):
        bench_tasks.parse_config("n=naive+keep")
