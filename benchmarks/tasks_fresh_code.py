"""Fresh task kinds about code (split ``fresh``: never tuned on): a config migrated to a new format, a script
that rejects the argument its user gives, and a wrong regular expression."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from taskkit import MODULES, NOUNS, WORDS, Check, Setup, Task, call_cases, digest, read_text, run_python

# ---------------------------------------------------------------- config-migrate: old INI settings into the new JSON

_LOADER = '''"""Starts the {noun} service. Its settings are read from {new}; {old} is the old format, no longer read.

The format of {new}:

    {{
      "server": {{"host": "<string>", "port": <integer>, "workers": <integer>}},
      "log_level": "<one of DEBUG, INFO, WARNING, ERROR>",
      "cache": <true or false>,
      "database": "<string>"
    }}
"""

import json


def load(path="{new}"):
    with open(path) as f:
        cfg = json.load(f)
    server = cfg["server"]
    if not isinstance(server["host"], str):
        raise TypeError("server.host must be a string")
    for key in ("port", "workers"):
        if type(server[key]) is not int:
            raise TypeError(f"server.{{key}} must be an integer, not {{server[key]!r}}")
    if cfg["log_level"] not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"log_level must be DEBUG, INFO, WARNING or ERROR, not {{cfg['log_level']!r}}")
    if type(cfg["cache"]) is not bool:
        raise TypeError("cache must be true or false")
    if not isinstance(cfg["database"], str):
        raise TypeError("database must be a string")
    return cfg


if __name__ == "__main__":
    cfg = load()
    s = cfg["server"]
    print(
        f"serving on {{s['host']}}:{{s['port']}} with {{s['workers']}} workers, log {{cfg['log_level']}}, "
        f"cache {{'on' if cfg['cache'] else 'off'}}, database {{cfg['database']}}"
    )
'''


def gen_config_migrate(rng: random.Random, ws: Path) -> Setup:
    noun = rng.choice(NOUNS)
    old = rng.choice(["settings.ini", "service.ini", f"{noun}.ini"])
    new = rng.choice(["config.json", "service.json", f"{noun}-config.json"])
    app = rng.choice(["app.py", "server.py", f"{noun}_service.py"])
    host = rng.choice(
        ["0.0.0.0", "127.0.0.1", f"{rng.choice(WORDS)}.internal", f"10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}"]
    )
    port, workers = rng.randint(1025, 9999), rng.randint(1, 16)
    level = rng.choice(["debug", "info", "warning", "error"])
    cache = rng.random() < 0.5
    cache_word = rng.choice([("yes", "no"), ("on", "off"), ("true", "false")])[0 if cache else 1]
    db = f"{rng.choice(WORDS)}_{noun}s"
    (ws / old).write_text(
        f"; {noun} service settings\n[server]\nlisten_host = {host}\nlisten_port = {port}\nworker_count = {workers}\n\n"
        f"[logging]\nlevel = {level}\n\n[features]\nenable_cache = {cache_word}\n\n[database]\nname = {db}\n"
    )
    (ws / app).write_text(_LOADER.format(noun=noun, old=old, new=new))
    want = {
        "server": {"host": host, "port": port, "workers": workers},
        "log_level": level.upper(),
        "cache": cache,
        "database": db,
    }
    line = (
        f"serving on {host}:{port} with {workers} workers, log {level.upper()}, "
        f"cache {'on' if cache else 'off'}, database {db}\n"
    )
    return Setup({"old": old, "new": new, "app": app}, {"old": old, "new": new, "app": app, "want": want, "line": line})


def _differences(want, got, path: str = "") -> list[str]:
    """Where ``got`` misses ``want`` (keys it lacks, values or types that differ); extra keys are allowed."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path or 'the file'} is not an object"]
        out = []
        for k, v in want.items():
            out += (
                _differences(v, got[k], f"{path}.{k}".lstrip("."))
                if k in got
                else [f"{path}.{k} is missing".lstrip(".")]
            )
        return out
    if type(got) is not type(want) or got != want:
        return [f"{path} is {got!r}, expected {want!r}"]
    return []


def check_config_migrate(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["new"])
    if text is None:
        return False, f"{e['new']} was not written"
    try:
        got = json.loads(text)
    except ValueError as err:
        return False, f"{e['new']} is not valid JSON: {err}"
    diff = _differences(e["want"], got)
    if diff:
        return False, f"{e['new']}: " + "; ".join(diff[:3])
    proc = run_python(ws, [e["app"]])
    if proc.returncode != 0 or proc.stdout != e["line"]:
        last = (proc.stderr.strip().splitlines() or [proc.stdout.strip()])[-1]
        return False, f"python3 {e['app']} {'fails' if proc.returncode else 'prints something else'}: {last[:100]}"
    return True, f"{e['new']} holds the old settings in the new format; {e['app']} starts"


def solve_config_migrate(ws: Path, e: dict) -> str:
    (ws / e["new"]).write_text(json.dumps(e["want"], indent=2) + "\n")
    return f"Wrote {e['new']} from {e['old']}; python3 {e['app']} prints: {e['line'].strip()}"


# ---------------------------------------------------------------- cli-arg: a script rejects the argument it is given

_SCRIPT = '''"""List the rows of a CSV file whose {col} is at least a minimum, highest first."""

import argparse
import csv
import json


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("path", help="the CSV file (columns: name, {col})")
{options}
    args = p.parse_args(argv)
    with open(args.path, newline="") as f:
        rows = [(r["name"], float(r["{col}"])) for r in csv.DictReader(f)]
    rows = [r for r in rows if r[1] >= args.min]
    rows.sort(key=lambda r: (-r[1], r[0]))
    rows = rows[: args.{limit_dest}]
    if args.format == "json":
        print(json.dumps([{{"name": n, "{col}": s}} for n, s in rows]))
    elif args.format == "csv":
        print("name,{col}")
        for n, s in rows:
            print(f"{{n}},{{s:g}}")
    else:
        for n, s in rows:
            print(f"{{n:<12}} {{s:g}}")


if __name__ == "__main__":
    main()
'''

_MIN_GOOD = '    p.add_argument("--min", type=float, default=0.0, help="the lowest {col} to list")'
_LIMIT_GOOD = '    p.add_argument("--limit", type=int, default=10, help="list at most this many rows")'
_FORMAT_GOOD = '    p.add_argument("--format", choices=["text", "json", "csv"], default="text")'


def _cli_variant(rng: random.Random) -> tuple[str, list[str], list[str], str, str]:
    """(variant, the user's arguments, hidden arguments, the good option line, its buggy version)"""
    variant = rng.choice(["type", "choices", "missing", "required"])
    low = rng.randint(3, 7) + rng.choice([0.25, 0.5, 0.75])
    if variant == "type":  # --min 5.5 where --min takes only whole numbers
        bad = _MIN_GOOD.replace("type=float", "type=int")
        return variant, ["--min", f"{low:g}"], ["--min", f"{low + 1.25:g}", "--limit", "3"], _MIN_GOOD, bad
    if variant == "choices":  # --format csv, which the script can print but its choices leave out
        bad = _FORMAT_GOOD.replace(', "csv"', "")
        return variant, ["--format", "csv"], ["--format", "csv", "--min", f"{low:g}"], _FORMAT_GOOD, bad
    if variant == "missing":  # --limit, which the script calls something else
        bad = _LIMIT_GOOD.replace('"--limit"', f'"{rng.choice(["--top", "--count", "--max-rows"])}"')
        return variant, ["--limit", str(rng.randint(2, 4))], ["--limit", "1", "--format", "json"], _LIMIT_GOOD, bad
    bad = _MIN_GOOD.replace("default=0.0", "required=True")  # --min required, though the user never gives it
    return variant, ["--limit", str(rng.randint(2, 4))], ["--format", "json"], _MIN_GOOD, bad


def _script_text(col: str, lines: list[str], limit_dest: str = "limit") -> str:
    options = "\n".join(line.format(col=col) for line in lines)
    return _SCRIPT.format(col=col, options=options, limit_dest=limit_dest)


def gen_cli_arg(rng: random.Random, ws: Path) -> Setup:
    col = rng.choice(["score", "points", "rating", "total"])
    script = rng.choice(["top.py", "ranking.py", f"top_{rng.choice(NOUNS)}s.py", "leaders.py"])
    data = rng.choice(["data.csv", "results.csv", f"{rng.choice(NOUNS)}s.csv"])
    names = rng.sample([f"{w}{rng.randint(1, 99)}" for w in WORDS], rng.randint(7, 11))
    rows = [(n, rng.randint(1, 20) / (2 if rng.random() < 0.3 else 1)) for n in names]
    (ws / data).write_text(f"name,{col}\n" + "".join(f"{n},{s:g}\n" for n, s in rows))
    variant, shown, hidden, good, bad = _cli_variant(rng)
    lines = [_MIN_GOOD, _LIMIT_GOOD, _FORMAT_GOOD]
    (ws / script).write_text(_script_text(col, lines))
    runs = [[script, data, *shown], [script, data, *hidden]]
    outputs = [run_python(ws, r).stdout for r in runs]  # what the script prints once it takes the arguments
    dest = bad.split('"')[1].lstrip("-").replace("-", "_") if variant == "missing" else "limit"
    (ws / script).write_text(_script_text(col, [bad if line == good else line for line in lines], dest))
    return Setup(
        {"script": script, "command": "python3 " + " ".join(runs[0]), "variant": variant},
        {"script": script, "data": data, "runs": runs, "outputs": outputs, "data_digest": digest(ws / data)},
    )


def check_cli_arg(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / e["data"]) != e["data_digest"]:
        return False, f"{e['data']} was changed"
    for i, (argv, want) in enumerate(zip(e["runs"], e["outputs"])):
        proc = run_python(ws, argv)
        which = "the command" if i == 0 else "another command of the same kind"
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return False, f"{which} (python3 {' '.join(argv)}) still fails: {last[:100]}"
        if proc.stdout != want:
            return False, f"{which} (python3 {' '.join(argv)}) prints {proc.stdout[:60]!r}, expected {want[:60]!r}"
    return True, f"python3 {' '.join(e['runs'][0])} works, and so does a command like it"


def solve_cli_arg(ws: Path, e: dict) -> str:
    path = ws / e["script"]
    text = path.read_text()
    text = text.replace("type=int, default=0.0", "type=float, default=0.0")
    text = text.replace('choices=["text", "json"]', 'choices=["text", "json", "csv"]')
    text = text.replace('required=True, help="the lowest', 'default=0.0, help="the lowest')
    text = re.sub(r'"--(top|count|max-rows)"', '"--limit"', text)
    text = re.sub(r"args\.(top|count|max_rows)\]", "args.limit]", text)
    path.write_text(text)
    return f"Fixed the option in {e['script']}; the command now works."


# ---------------------------------------------------------------- regex-fix: a function with a wrong regular expression


def _regex_tickets(rng: random.Random):
    keys = [w.upper()[: rng.randint(2, 5)] for w in rng.sample(WORDS, 3)]

    def text() -> tuple[str, list[str]]:
        ids = [f"{rng.choice(keys)}-{rng.randint(1, 999)}" for _ in range(rng.randint(1, 3))]
        glue = rng.choice(["Fixes {}.", "See {} for details", "{} (blocked)", "merged {} today"])
        return " and ".join(glue.format(i) for i in ids), ids

    shown, hidden = [text() for _ in range(2)], [text() for _ in range(3)] + [("nothing to see", [])]
    return (
        "find_ticket_ids",
        "text",
        'return re.findall(r"\\b[A-Z]-\\d+\\b", text)',
        'return re.findall(r"\\b[A-Z]+-\\d+\\b", text)',
        [([t], ids) for t, ids in shown],
        [([t], ids) for t, ids in hidden],
    )


def _regex_dates(rng: random.Random):
    def good() -> str:
        return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"

    bad = [
        f"{good()}{rng.randint(0, 9)}",
        f"{good()} extra",
        f"{rng.randint(1990, 2030)}-{rng.randint(1, 9)}-0{rng.randint(1, 9)}",
    ]
    cases = [([good()], True) for _ in range(3)] + [([b], False) for b in bad]
    rng.shuffle(cases)
    return (
        "is_iso_date",
        "text",
        'return re.match(r"\\d{4}-\\d{2}-\\d{2}", text) is not None',
        'return re.fullmatch(r"\\d{4}-\\d{2}-\\d{2}", text) is not None',
        cases[:3] + [([f"{good()}{rng.randint(0, 9)}"], False)],
        cases[3:],
    )


def _regex_versions(rng: random.Random):
    def v() -> str:
        return f"{rng.randint(0, 12)}.{rng.randint(0, 20)}.{rng.randint(0, 30)}"

    def text() -> tuple[str, list[str]]:
        a, b = v(), v()
        return rng.choice([f"upgrade from {a} to {b}", f"{rng.choice(WORDS)} {a}, {rng.choice(WORDS)} {b}"]), [a, b]

    shown, hidden = [text() for _ in range(2)], [text() for _ in range(3)]
    return (
        "find_versions",
        "text",
        'return re.findall(r"\\d+\\.\\d+", text)',
        'return re.findall(r"\\d+\\.\\d+\\.\\d+", text)',
        [([t], vs) for t, vs in shown],
        [([t], vs) for t, vs in hidden],
    )


def _regex_durations(rng: random.Random):
    def d() -> tuple[str, int]:
        h, m, s = rng.choice([0, rng.randint(1, 30)]), rng.randint(10, 59), rng.choice([0, rng.randint(10, 59)])
        text = (f"{h}h" if h else "") + f"{m}m" + (f"{s}s" if s else "")
        return text, h * 3600 + m * 60 + s

    shown, hidden = [d() for _ in range(2)], [d() for _ in range(3)] + [("7m", 420), ("5s", 5)]
    body = (
        'm = re.fullmatch(r"(?:(\\d)h)?(?:(\\d)m)?(?:(\\d)s)?", text)\n'
        "    if not m or not text:\n        raise ValueError(f'not a duration: {text!r}')\n"
        "    h, mi, s = (int(g) if g else 0 for g in m.groups())\n    return h * 3600 + mi * 60 + s"
    )
    return (
        "duration_seconds",
        "text",
        body,
        body.replace("(\\d)", "(\\d+)"),
        [([t], n) for t, n in shown],
        [([t], n) for t, n in hidden],
    )


REGEX_BUGS = [_regex_tickets, _regex_dates, _regex_versions, _regex_durations]


def gen_regex_fix(rng: random.Random, ws: Path) -> Setup:
    func, params, bad, good, shown, hidden = rng.choice(REGEX_BUGS)(rng)
    mod = rng.choice(["textutil", "parsing", f"{rng.choice(MODULES)}_text", "patterns"])
    test = f"test_{mod}.py"
    (ws / f"{mod}.py").write_text(f'"""Text helpers."""\n\nimport re\n\n\ndef {func}({params}):\n    {bad}\n')
    (ws / test).write_text(
        f"from {mod} import {func}\n\n"
        + "".join(
            f"assert {func}({', '.join(map(repr, a))}) == {w!r}, {func}({', '.join(map(repr, a))})\n" for a, w in shown
        )
        + 'print("all tests passed")\n'
    )
    return Setup(
        {"module": mod, "test": test, "func": func},
        {
            "module": mod,
            "test": test,
            "func": func,
            "bad": bad,
            "good": good,
            "cases": shown + hidden,
            "test_digest": digest(ws / test),
        },
    )


def check_regex_fix(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / e["test"]) != e["test_digest"]:
        return False, f"{e['test']} was changed"
    proc = run_python(ws, [e["test"]])
    if proc.returncode != 0:
        return False, f"python3 {e['test']} still fails: {(proc.stderr.strip().splitlines() or ['?'])[-1][:100]}"
    return call_cases(ws, e["module"], e["func"], e["cases"])


def solve_regex_fix(ws: Path, e: dict) -> str:
    path = ws / f"{e['module']}.py"
    path.write_text(path.read_text().replace(e["bad"], e["good"], 1))
    return f"Fixed the regular expression in {e['func']}; python3 {e['test']} passes."


TASKS = [
    Task(
        "config-migrate",
        "migrate an old INI settings file into the JSON format a loader now reads (types, names, nesting)",
        gen_config_migrate,
        check_config_migrate,
        solve_config_migrate,
        names=("old", "new", "app"),
    ),
    Task(
        "cli-arg",
        "a script rejects an argument a stated command gives it: fix the script so the command (and one like it) works",
        gen_cli_arg,
        check_cli_arg,
        solve_cli_arg,
        names=("script", "command"),
    ),
    Task(
        "regex-fix",
        "a function's regular expression is wrong and its test script fails: fix the function; hidden cases",
        gen_regex_fix,
        check_regex_fix,
        solve_regex_fix,
        names=("module", "test", "func"),
    ),
]
