"""The task benchmark (benchmarks/bench_tasks.py): its checkers against reference solutions and against wrong
work, its config syntax and run order, its results file, and both runners on a scripted model (no weights)."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_tasks
import naive
from report import (
    breakdowns,
    row_wording,
    tables,
)
from taskkit import Wording
from tasks import FRESH, MOVED_TO_TUNE, TASKS, check_one, split_of, wording_problems, wordings_for

NEW_KINDS = {
    "move-function",
    "exact-output",
    "data-stat",
    "run-question",
    "readonly-question",
    "pytest-fix",
    "dedupe-order",
}


def test_the_suite_has_the_kinds_the_issue_asks_for():
    assert len(TASKS) >= 22
    assert {
        "linecount",
        "linecount-nowc",
        "todos",
        "fix-test",
        "rename",
        "off-by-one",
        "create-json",
        "create-function",
        "locate",
        "csv-sum",
        "config-edit",
        "find-files",
        "syntax-fix",
    } | NEW_KINDS <= set(TASKS)


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


# ---------------------------------------------------------------- wordings and the split


@pytest.mark.parametrize("name", list(TASKS))
def test_every_kind_has_three_wordings_one_in_chinese(name):
    ids = [w.id for w in TASKS[name].wordings]
    assert len(ids) >= 3 and len(set(ids)) == len(ids) and ids[0] == "en-1"
    assert {w.lang for w in TASKS[name].wordings} == {"en", "zh"}
    assert all(w.id.split("-")[0] == w.lang and w.lang in ("en", "zh") for w in TASKS[name].wordings)


@pytest.mark.parametrize("name", list(TASKS))
def test_every_wording_renders_and_names_what_the_checker_needs(name, tmp_path):
    for seed in (1, 2, 3):
        assert wording_problems(TASKS[name], seed, tmp_path / str(seed)) == []


def test_a_wording_that_leaves_out_the_output_file_is_caught(tmp_path):
    bad = TASKS["csv-sum"].wordings + (
        Wording("en-9", "Add up the {col} column of {csv} and tell me."),
        Wording("zh-9", "Sum {col} of {csv}, write it to {out}."),
    )
    problems = wording_problems(replace(TASKS["csv-sum"], wordings=bad), 1, tmp_path)
    assert any(p.startswith("en-9 does not name the out") for p in problems)
    assert "zh-9 is not written in zh" in problems


def test_wordings_differ_in_shape_not_only_in_words(tmp_path):
    """No two wordings of a kind are near copies (a synonym swapped into one template). They are compared with
    every field shown as one mark, so a long shared field (a description, a JSON object) does not count."""
    import difflib
    import random

    for name, task in TASKS.items():
        (tmp_path / name).mkdir()
        fields = task.generate(random.Random(f"{name}/1"), tmp_path / name).fields
        marks = {k: v if k == "variant" else "#" for k, v in fields.items()}
        shapes = {w.id: w.render(marks) for w in task.wordings}
        for a in shapes:
            for b in shapes:
                if a < b:
                    ratio = difflib.SequenceMatcher(None, shapes[a], shapes[b]).ratio()
                    assert ratio < 0.7, (name, a, b, ratio)


def test_a_wording_changes_the_prompt_not_the_workspace(tmp_path):
    from tasks import snapshot

    a = TASKS["rename"].make(5, tmp_path / "a", "en-1")
    b = TASKS["rename"].make(5, tmp_path / "b", "zh-1")
    assert a.expect == b.expect and snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
    assert (b.wording, b.lang) == ("zh-1", "zh") and a.expect["old"] in b.prompt and "重命名" in b.prompt
    with pytest.raises(KeyError):
        TASKS["rename"].make(5, tmp_path / "c", "fr-1")


def test_en_1_is_the_prompt_the_kinds_had_before_wordings():
    """Results recorded before wordings existed used this text: en-1 must keep it word for word."""
    assert (
        TASKS["linecount"].wordings[0].render({"out": "total.txt"})
        == "Count the lines of each .py file in this directory, write the total to total.txt, and report the total."
    )


def test_the_split_holds_out_chinese_everywhere_and_tunes_on_some():
    pairs = [(k, w.id, w.lang) for k, t in TASKS.items() if k not in FRESH for w in t.wordings]
    held = [p for p in pairs if split_of(p[0], p[1]) == "heldout"]
    assert 0.35 < len(held) / len(pairs) < 0.6  # about half
    for kind in set(TASKS) - FRESH:
        assert split_of(kind, "en-1") == "tune"  # the wording the small profile was tuned on
        assert any(lang == "zh" for k, _, lang in held if k == kind)
        assert any(lang == "en" for k, _, lang in held if k == kind)
    assert len({k for k, w, lang in pairs if lang == "zh" and split_of(k, w) == "tune"}) >= 5
    assert {split_of(k, w) for k, w, _ in pairs} == {"tune", "heldout"}


def test_the_fresh_kinds_are_never_tuned_on():
    """Six kinds of work the suite did not have, each with two English and two Chinese wordings, all in "fresh"."""
    assert len(FRESH) >= 6 and set(TASKS) >= FRESH
    assert not FRESH & NEW_KINDS
    for kind in FRESH:
        ids = [w.id for w in TASKS[kind].wordings]
        assert sum(i.startswith("en-") for i in ids) >= 2 and sum(i.startswith("zh-") for i in ids) >= 2
        assert {split_of(kind, i) for i in ids} == {"fresh"}
        assert wordings_for(kind, "tune") == [] and wordings_for(kind, "heldout") == []
        assert wordings_for(kind, "heldout,fresh") == ids
    assert all(split_of(k, w.id) != "fresh" for k in set(TASKS) - FRESH for w in TASKS[k].wordings)
    a = bench_tasks.parse_config("drivetrain")
    planned = bench_tasks.plan(list(TASKS), [a], 4, 1, split="heldout,fresh")
    assert {t for t, *_ in planned} == set(TASKS)
    assert {split_of(t, w) for t, _, _, w, _ in planned} == {"heldout", "fresh"}


def test_a_moved_wording_is_tuned_on(monkeypatch):
    assert split_of("locate", "zh-1") == "heldout"
    monkeypatch.setitem(MOVED_TO_TUNE, ("locate", "zh-1"), "a change was made for it")
    assert split_of("locate", "zh-1") == "tune" and split_of("todos", "zh-1") == "heldout"


def test_runs_go_round_the_selected_wordings_the_same_for_every_config():
    a, b = bench_tasks.parse_config("drivetrain"), bench_tasks.parse_config("naive")
    planned = bench_tasks.plan(["csv-sum", "locate"], [a, b], 6, 1, split="heldout")
    for task in ("csv-sum", "locate"):
        by_run = {}
        for t, r, _, w, c in planned:
            if t == task:
                by_run.setdefault(r, set()).add(w)
        assert all(len(ws) == 1 for ws in by_run.values())  # both configs see the same prompt
        seen = [next(iter(by_run[r])) for r in sorted(by_run)]
        assert set(seen) == set(wordings_for(task, "heldout")) and seen[0] != seen[1]
    assert all(split_of(t, w) == "heldout" for t, _, _, w, _ in planned)
    zh = bench_tasks.plan(list(TASKS), [a], 2, 1, lang="zh")
    assert {t for t, *_ in zh} == set(TASKS) and all(w.startswith("zh-") for _, _, _, w, _ in zh)
    assert bench_tasks.plan(list(TASKS), [a], 1, 1, lang="zh", split="tune")  # Chinese is tuned on somewhere
    assert [w for *_, w, _ in bench_tasks.plan(["todos"], [a], 3, 1, wordings=("en-2",))] == ["en-2"] * 3
    assert bench_tasks.plan(["locate"], [a], 1, 1, lang="zh", split="tune") == []  # no such wording: left out


def test_unknown_wording_ids_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench_tasks.main(["--tasks", "todos", "--wording", "en-7"])
    assert "unknown wordings ['en-7']" in capsys.readouterr().err


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


# ---------------------------------------------------------------- the new kinds: wrong work fails


def test_copying_a_function_instead_of_moving_it_fails(tmp_path):
    ws, e, _ = make("move-function", tmp_path)
    src = (ws / e["app"]).read_text()
    start = src.index(f"def {e['func']}(")
    (ws / f"{e['new']}.py").write_text(src[start : src.index("\n\n", start)] + "\n")
    ok, reason = TASKS["move-function"].check(ws, "", e)
    assert not ok and "copied, not moved" in reason
    TASKS["move-function"].solve(ws, e)
    (ws / f"{e['new']}.py").write_text((ws / f"{e['new']}.py").read_text() + "print('loaded')\n")
    ok, reason = TASKS["move-function"].check(ws, "", e)
    assert not ok and "prints something else" in reason


@pytest.mark.parametrize("extra", ["!", " ", "\n", ".\n"])
def test_exact_output_fails_on_one_stray_character(extra, tmp_path):
    ws, e, inst = make("exact-output", tmp_path)
    assert e["line"] in inst.prompt
    (ws / e["script"]).write_text(f"print({(e['line'] + extra)!r})\n")
    assert TASKS["exact-output"].check(ws, "", e)[0] is False
    (ws / e["script"]).write_text(f"print({e['line']!r})\n")
    assert TASKS["exact-output"].check(ws, "", e)[0] is True


def test_exact_output_starts_with_a_debug_line_and_a_near_miss(tmp_path):
    for seed in range(1, 6):
        ws, e, _ = make("exact-output", tmp_path / str(seed), seed)
        out = subprocess.run([sys.executable, e["script"]], cwd=ws, capture_output=True, text=True).stdout
        assert out.startswith("debug:") and e["line"] not in out.splitlines()


def test_data_stat_needs_the_right_value_written_and_reported(tmp_path):
    for seed in range(1, 9):
        ws, e, _inst = make("data-stat", tmp_path / str(seed), seed)
        value = e["value"]
        (ws / e["out"]).write_text(f"{value + 1}\n")
        assert TASKS["data-stat"].check(ws, f"It is {value + 1}.", e)[0] is False
        (ws / e["out"]).write_text(f"{value}\n")
        assert TASKS["data-stat"].check(ws, "Done.", e)[0] is False
        assert TASKS["data-stat"].check(ws, f"It is {value}.", e)[0] is True
        assert round(value, 2) == value  # a mean of 10, 20 or 25 integers ends within two decimals
    kinds = {make("data-stat", tmp_path / f"k{s}", s)[1]["stat"] for s in range(1, 30)}
    assert kinds == {"mean", "max", "count", "sum_where"}


def test_run_question_value_is_not_in_the_source_and_must_be_given(tmp_path):
    funcs = set()
    for seed in range(1, 13):
        ws, e, inst = make("run-question", tmp_path / str(seed), seed)
        funcs.add(e["call"].split("(")[0])
        assert str(e["value"]) not in (ws / f"{e['module']}.py").read_text()
        assert e["call"] in inst.prompt
        wrong = e["value"] + 1 if isinstance(e["value"], int) else e["value"][::-1]
        assert TASKS["run-question"].check(ws, f"It returns {wrong}.", e)[0] is (wrong == e["value"])
        assert TASKS["run-question"].check(ws, f"It returns {e['value']}.", e)[0] is True
    assert len(funcs) >= 3


def test_readonly_question_fails_on_any_change_even_with_the_right_answer(tmp_path):
    ws, e, _ = make("readonly-question", tmp_path)
    answer = f"It is {e['value']}."
    assert TASKS["readonly-question"].check(ws, answer, e)[0] is True
    (ws / "__pycache__").mkdir()  # running the code is not changing it
    (ws / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert TASKS["readonly-question"].check(ws, answer, e)[0] is True
    (ws / "scratch.py").write_text("print(1)\n")
    ok, reason = TASKS["readonly-question"].check(ws, answer, e)
    assert not ok and "created: scratch.py" in reason
    (ws / "scratch.py").unlink()
    readme = ws / "README.md"
    readme.write_text(readme.read_text() + "\n")
    ok, reason = TASKS["readonly-question"].check(ws, answer, e)
    assert not ok and "README.md" in reason


def test_pytest_fix_is_judged_by_pytest(tmp_path):
    ws, e, _ = make("pytest-fix", tmp_path)
    plain = subprocess.run([sys.executable, e["test"]], cwd=ws, capture_output=True, text=True)
    assert "ModuleNotFoundError" in plain.stderr  # not a script to run by hand: pytest (and its pytest.ini) runs it
    ok, reason = TASKS["pytest-fix"].check(ws, "", e)
    assert not ok and "pytest still fails" in reason
    (ws / e["test"]).write_text("def test_nothing():\n    pass\n")
    ok, reason = TASKS["pytest-fix"].check(ws, "", e)
    assert not ok and "was changed" in reason


def test_dedupe_order_fails_when_the_lines_are_sorted(tmp_path):
    ws, e, _ = make("dedupe-order", tmp_path)
    (ws / e["file"]).write_text("\n".join(sorted(e["want"])) + "\n")
    ok, reason = TASKS["dedupe-order"].check(ws, "", e)
    assert not ok and "sorted?" in reason
    (ws / e["file"]).write_text("\n".join(e["want"]) + "\n")
    assert TASKS["dedupe-order"].check(ws, "", e)[0] is True


def test_config_syntax():
    assert bench_tasks.parse_config("drivetrain") == bench_tasks.Config("drivetrain", "drivetrain")
    assert bench_tasks.parse_config("naive").naive
    c = bench_tasks.parse_config("lean=ablate:checks,collapse+profile:full+arg:--verbose")
    assert (c.name, c.ablate, c.args) == ("lean", ("checks", "collapse"), ("--profile", "full", "--verbose"))
    assert c.env == {"DRIVETRAIN_ABLATE": "checks,collapse"}
    wide = bench_tasks.parse_config("wide=env:DRIVETRAIN_LOCAL_PARALLEL=3+ablate:abandon")
    assert wide.env == {"DRIVETRAIN_ABLATE": "abandon", "DRIVETRAIN_LOCAL_PARALLEL": "3"}
    assert bench_tasks.parse_config("plain=naive").naive
    for bad in (
        "nochecks",
        "x=ablate",
        "x=profile:full+naive",
        "x=frobnicate:1",
        "=ablate:checks",
        "x=src:/nowhere",
        "x=lib:/nowhere",
        "x=naive+lib:/tmp",
        "x=env:NOVALUE",
        "x=naive+env:A=1",
    ):
        with pytest.raises(ValueError):
            bench_tasks.parse_config(bad)


def test_a_config_can_run_the_code_of_another_checkout(tmp_path):
    import cli_runner

    pkg = tmp_path / "old" / "src" / "drivetrain"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHICH = 'old'\n")
    (pkg / "__main__.py").write_text("import os, sys\nfrom drivetrain import WHICH\nprint(WHICH, sys.argv[1:])\n")
    c = bench_tasks.parse_config(f"before=src:{tmp_path / 'old'}")
    assert "PYTHONPATH" not in c.env  # it would reach the agent's shells too
    which = subprocess.run([*cli_runner.cli_command(c.src), "-p", "hi"], capture_output=True, text=True, cwd=tmp_path)
    assert which.stdout.strip() == "old ['-p', 'hi']", which.stderr  # before the installed drivetrain


def test_a_config_can_run_with_another_build_of_a_package(tmp_path):
    import cli_runner

    pkg = tmp_path / "old" / "src" / "drivetrain"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import json\nprint(json.BUILD)\n")
    lib = tmp_path / "lib" / "json"  # a package the virtualenv has too: the lib's goes first
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("BUILD = 'the other build'\n")
    c = bench_tasks.parse_config(f"avx2=src:{tmp_path / 'old'}+lib:{tmp_path / 'lib'}")
    assert (c.lib, "PYTHONPATH" in c.env) == (str(tmp_path / "lib"), False)
    which = subprocess.run([*cli_runner.cli_command(c.src, c.lib)], capture_output=True, text=True, cwd=tmp_path)
    assert which.stdout.strip() == "the other build", which.stderr


def test_runs_interleave_the_configs():
    a, b = bench_tasks.parse_config("drivetrain"), bench_tasks.parse_config("naive")
    order = [(t, r, c.name) for t, r, _, _, c in bench_tasks.plan(["todos", "rename"], [a, b], 2, 1)]
    assert order == [
        ("todos", 1, "drivetrain"),
        ("todos", 1, "naive"),
        ("rename", 1, "drivetrain"),
        ("rename", 1, "naive"),
        ("todos", 2, "drivetrain"),
        ("todos", 2, "naive"),
        ("rename", 2, "drivetrain"),
        ("rename", 2, "naive"),
    ]
    seeds = {(t, r): s for t, r, s, _, _ in bench_tasks.plan(["todos"], [a, b], 2, 7)}
    assert seeds == {("todos", 1): 7001, ("todos", 2): 7002}  # the same workspace for both configs


def row(task, config, solved, wall, turns, run=1, seed=1001, spec=None, model="default"):
    return {
        "task": task,
        "config": config,
        "spec": spec or config,
        "model": model,
        "run": run,
        "seed": seed,
        "solved": solved,
        "reason": "r",
        "turns": turns,
        "wall_s": wall,
    }


def test_tables_count_per_task_and_config():
    rows = [
        row("todos", "drivetrain", True, 10, 3),
        row("todos", "naive", False, 2, 1),
        row("rename", "drivetrain", False, 30, 12),
        row("rename", "naive", True, 4, 2),
        row("rename", "drivetrain", True, 20, 5, run=2),
    ]
    summary, _per_task, md = tables(rows)
    assert "drivetrain        2/3   67%" in summary
    lines = md.splitlines()
    assert lines[0] == "| task | drivetrain | naive |"
    assert "| todos | 1/1 | 0/1 |" in lines and "| rename | 1/2 | 1/1 |" in lines
    assert lines.index("| todos | 1/1 | 0/1 |") < lines.index("| rename | 1/2 | 1/1 |")  # the suite's order
    assert "| **total** | **2/3 (67%)** | **1/2 (50%)** |" in lines
    assert "| median wall per run | 20.0 s | 3.0 s |" in lines


def test_breakdowns_put_configs_side_by_side_per_split_language_and_kind():
    rows = [
        {**row("locate", "drivetrain", True, 10, 3), "wording": "zh-1"},
        {**row("locate", "naive", False, 30, 3), "wording": "zh-1"},
        {**row("locate", "drivetrain", False, 20, 3), "wording": "en-1"},
        {**row("locate", "naive", True, 4, 3), "wording": "en-1"},
        row("todos", "drivetrain", True, 6, 3),
    ]  # from before wordings: en-1, tune
    assert row_wording(rows[-1]) == ("en-1", "en", "tune")
    text = breakdowns(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["split", "drivetrain", "naive"]
    assert lines[1].split() == ["heldout", "1/1", "100%", "10.0s", "0/1", "0%", "30.0s"]
    assert lines[2].split() == ["tune", "1/2", "50%", "13.0s", "1/1", "100%", "4.0s"]
    assert ["zh", "1/1", "100%", "10.0s", "0/1", "0%", "30.0s"] in [ln.split() for ln in lines]
    assert ["heldout/zh", "1/1", "100%", "10.0s", "0/1", "0%", "30.0s"] in [ln.split() for ln in lines]
    assert ["todos", "1/1", "100%", "6.0s", "-"] in [ln.split() for ln in lines]
    md = tables(rows)[2].splitlines()
    assert "| *language zh* | 1/1 | 0/1 |" in md and "| *split heldout* | 1/1 | 0/1 |" in md


def test_report_filters_by_split_and_language(tmp_path, capsys):
    results = tmp_path / "runs.jsonl"
    rows = [
        {**row("locate", "drivetrain", True, 10, 3), "wording": "zh-1"},
        {**row("locate", "drivetrain", False, 20, 3), "wording": "en-1"},
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench_tasks.main(["--report", str(results), "--split", "heldout"]) == 0
    assert "| **total** | **1/1 (100%)** |" in capsys.readouterr().out
    assert bench_tasks.main(["--report", str(results), "--lang", "en"]) == 0
    assert "| **total** | **0/1 (0%)** |" in capsys.readouterr().out


def test_resume_skips_runs_in_the_results_file_and_reports_them(tmp_path, capsys):
    results = tmp_path / "runs.jsonl"
    done = [row("todos", "drivetrain", True, 10, 3, run=r, seed=1000 + r) for r in (1, 2)]
    results.write_text("".join(json.dumps(r) + "\n" for r in done) + '{"task": "todos", "cut sh')
    code = bench_tasks.main(
        [
            "--tasks",
            "todos",
            "--config",
            "drivetrain",
            "--runs",
            "2",
            "--results",
            str(results),
            "--resume",
            "--save",
            str(tmp_path / "save"),
            "--wording",
            "en-1",
            "--ledger",
            str(tmp_path / "seeds.jsonl"),
        ]
    )  # rows without a
    # wording were run with en-1
    out = capsys.readouterr().out
    assert code == 0 and "to run: 0" in out and "| todos | 2/2 |" in out
    assert bench_tasks.main(["--report", str(results)]) == 0
    assert "| **total** | **2/2 (100%)** |" in capsys.readouterr().out


def test_drivetrain_runner_through_the_real_cli(tmp_path):
    """The task's deny rule and the config's ablations and arguments reach the CLI; the checker sees its work."""
    _probe, e, _ = make("linecount-nowc", tmp_path / "probe", 3)

    def denied(body):
        assert body["messages"][-1]["content"][0]["is_error"], "wc should have been denied"
        assert "be brief" in json.dumps(body["system"])

    def ablate_seen(body):
        assert "checks,final" in body["messages"][-1]["content"][0]["content"]

    steps = [
        respond([tool_call("Bash", {"command": "wc -l *.py"})]),
        respond([tool_call("Bash", {"command": "printenv DRIVETRAIN_ABLATE"})], expect=denied),
        respond([tool_call("Write", {"file_path": e["out"], "content": f"{e['total']}\n"})], expect=ablate_seen),
        reply(f"The total is {e['total']}."),
    ]
    config = bench_tasks.parse_config("x=ablate:checks,final+arg:--append-system-prompt=be brief")
    with ScriptedServer(steps) as server:
        runner = bench_tasks.Runner(
            "small",
            tmp_path / "save",
            12,
            60,
            provider_args=("--provider", "anthropic"),
            env={
                "ANTHROPIC_BASE_URL": server.url,
                "ANTHROPIC_API_KEY": "sk-test",
                "ANTHROPIC_MODEL": "claude-sonnet-4-6",
            },
        )
        result = runner.run("linecount-nowc", 1, 3, config)
    assert result["solved"], result
    assert (result["wording"], result["lang"], result["split"]) == ("en-1", "en", "tune")
    assert result["turns"] == 4 and result["trajectory"] == "Bash! → Bash → Write → end_turn"
    logs = tmp_path / "save" / "linecount-nowc" / "run1-seed3-en-1" / "x"
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
    llm = ScriptedLlama(
        [
            call.format("Bash", json.dumps({"command": "wc -l *.py"})),
            call.format("Write", json.dumps({"file_path": e["out"], "content": str(e["total"])})),
            f"The total is {e['total']}.",
        ]
    )
    run = naive.run_naive(
        llm,
        inst.prompt,
        ws,
        sampling={},
        seed=1,
        max_turns=12,
        max_tokens=None,
        policy=naive.deny_policy(inst.deny, ws, tmp_path / "home"),
    )
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
    result = runner.run("todos", 1, 1, bench_tasks.parse_config("odd=arg:--no-such-flag"), "zh-1")
    assert not result["solved"] and "exit 2" in result["reason"] and "--no-such-flag" in result["reason"]
    assert (result["wording"], result["lang"], result["split"]) == ("zh-1", "zh", "heldout")
    assert "TODO" in result["prompt"] and "注释" in result["prompt"]
    broken = bench_tasks.Runner(str(tmp_path / "missing.gguf"), tmp_path / "save", 12, 60)
    result = broken.run("todos", 1, 1, bench_tasks.parse_config("naive"))
    assert not result["solved"] and result["reason"].startswith("bench error (") and "missing.gguf" in result["reason"]


# ---------------------------------------------------------------- the fresh kinds: wrong work fails


def test_config_migrate_needs_the_types_of_the_new_format(tmp_path):
    ws, e, inst = make("config-migrate", tmp_path)
    assert e["old"] in inst.prompt and e["new"] in inst.prompt
    want = e["want"]
    loose = {**want, "server": {**want["server"], "port": str(want["server"]["port"])}}
    (ws / e["new"]).write_text(json.dumps(loose))
    ok, reason = TASKS["config-migrate"].check(ws, "", e)
    assert not ok and "server.port" in reason
    (ws / e["new"]).write_text(json.dumps({**want, "log_level": want["log_level"].lower()}))
    ok, reason = TASKS["config-migrate"].check(ws, "", e)
    assert not ok and "log_level" in reason
    (ws / e["new"]).write_text(json.dumps({**want, "version": 2}))  # an extra key does no harm
    assert TASKS["config-migrate"].check(ws, "", e)[0] is True


def test_cli_arg_command_fails_before_and_a_hard_coded_fix_fails(tmp_path):
    variants = set()
    for seed in range(1, 25):
        ws, e, inst = make("cli-arg", tmp_path / str(seed), seed)
        variants.add(e["runs"][0][2])
        assert "python3 " + " ".join(e["runs"][0]) in inst.prompt
        before = subprocess.run([sys.executable, *e["runs"][0]], cwd=ws, capture_output=True, text=True)
        assert before.returncode == 2 and "error:" in before.stderr
    (ws / e["script"]).write_text(f"print({e['outputs'][0]!r}, end='')\n")  # prints the one answer it was shown
    ok, reason = TASKS["cli-arg"].check(ws, "", e)
    assert not ok and "another command" in reason
    assert variants >= {"--min", "--format", "--limit"}


def test_regex_fix_is_judged_on_hidden_cases(tmp_path):
    funcs = set()
    for seed in range(1, 16):
        ws, e, _ = make("regex-fix", tmp_path / str(seed), seed)
        funcs.add(e["func"])
        shown = [c for c in e["cases"] if repr(c[0][0]) in (ws / e["test"]).read_text()]
        table = {repr(a[0]): w for a, w in shown}
        (ws / f"{e['module']}.py").write_text(
            f"def {e['func']}(text):\n    return {table!r}[repr(text)]\n"
        )  # passes the test script only
        ok, reason = TASKS["regex-fix"].check(ws, "", e)
        assert not ok and ("raised" in reason or "returned" in reason), reason
    assert len(funcs) >= 3


def test_join_data_needs_everyone_the_zero_totals_and_the_order(tmp_path):
    ws, e, _ = make("join-data", tmp_path)
    want = e["want"]
    assert any(t == 0 for _, t in want)  # someone has no records
    lines = ["name,total"] + [f"{n},{t}" for n, t in want]
    (ws / e["out"]).write_text("\n".join(["name,total"] + [f"{n},{t}" for n, t in want if t]))  # an inner join
    assert TASKS["join-data"].check(ws, "", e)[0] is False
    (ws / e["out"]).write_text("\n".join(lines[:1] + lines[:0:-1]))  # reversed
    assert TASKS["join-data"].check(ws, "", e)[0] is False
    (ws / e["out"]).write_text("\n".join(lines[1:]))  # no header
    assert TASKS["join-data"].check(ws, "", e)[0] is False
    (ws / e["out"]).write_text("\r\n".join(["name, total"] + [f"{n}, {t:.2f}" for n, t in want]) + "\r\n")
    assert TASKS["join-data"].check(ws, "", e)[0] is True


def test_markdown_table_needs_the_sorted_place_and_nothing_else_changed(tmp_path):
    for seed in range(1, 20):  # one whose new row does not go last
        ws, e, _ = make("markdown-table", tmp_path / str(seed), seed)
        path = ws / e["file"]
        rows = [ln for ln in e["want"] if ln.startswith("| `")]
        new = next(r for r in rows if r not in path.read_text())
        if new != rows[-1]:
            break
    original = path.read_text()
    path.write_text(original.replace("\n## License", new + "\n\n## License"))  # appended, not in its place
    ok, reason = TASKS["markdown-table"].check(ws, "", e)
    assert not ok and "expected" in reason
    TASKS["markdown-table"].solve(ws, e)
    path.write_text(path.read_text().replace("## License", "## Licence"))
    assert TASKS["markdown-table"].check(ws, "", e)[0] is False
    loose = "\n".join(e["want"]).replace(new, new.replace("`", "").replace(" | ", "|"))  # spacing, no backticks
    path.write_text(loose)
    assert TASKS["markdown-table"].check(ws, "", e)[0] is True


def test_html_edit_needs_its_own_item_after_the_given_link(tmp_path):
    for seed in range(1, 20):  # one whose new link does not go last
        ws, e, _ = make("html-edit", tmp_path / str(seed), seed)
        path = ws / e["file"]
        original = path.read_text()
        href, text = next((h, t) for h, t in e["links"] if f'"{h}"' not in original)
        if e["links"][-1] != [href, text]:
            break
    path.write_text(original.replace("    </ul>", f'      <li><a href="{href}">{text}</a></li>\n    </ul>'))
    ok, reason = TASKS["html-edit"].check(ws, "", e)
    assert not ok and "expected" in reason
    TASKS["html-edit"].solve(ws, e)
    solved = path.read_text()
    path.write_text(solved.replace("</footer>", " (draft)</footer>"))
    ok, reason = TASKS["html-edit"].check(ws, "", e)
    assert not ok and "outside the nav" in reason
    joined = solved.replace(f'</a></li>\n      <li><a href="{href}">', f' </a><a href="{href}">', 1)
    path.write_text(joined)
    ok, reason = TASKS["html-edit"].check(ws, "", e)
    assert not ok


def test_write_test_needs_tests_that_catch_each_broken_behaviour(tmp_path):
    funcs = set()
    for seed in range(1, 12):
        ws, e, _ = make("write-test", tmp_path / str(seed), seed)
        funcs.add(e["func"])
        test = ws / e["test"]
        first = e["checks"][0]  # one behaviour tested: some broken version still passes
        test.write_text(f"from {e['module']} import {e['func']}\n\n{first}\n")
        ok, reason = TASKS["write-test"].check(ws, "", e)
        assert not ok and "still passes when" in reason, reason
        test.write_text(f"from {e['module']} import {e['func']}\n\nassert False\n")
        ok, reason = TASKS["write-test"].check(ws, "", e)
        assert not ok and "fails on the function as it is" in reason
    TASKS["write-test"].solve(ws, e)
    module = ws / f"{e['module']}.py"
    module.write_text(module.read_text() + "\n")
    ok, reason = TASKS["write-test"].check(ws, "", e)
    assert not ok and "was changed" in reason
    assert funcs == {"shipping_cost", "grade", "parse_size"}
