"""Task kinds about files and data: compute a value and write it, find files, edit a config, create a file."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from pathlib import Path

from taskkit import (
    MODULES,
    NOUNS,
    WORDS,
    Check,
    Setup,
    Task,
    check_number_file,
    fmt_number,
    func_names,
    norm_path,
    python_module,
    read_text,
)

# ---------------------------------------------------------------- 1, 2: the quick-start task (line count)


def _py_files(rng: random.Random, ws: Path) -> int:
    """2–4 .py files and one non-.py distractor; returns the .py files' total line count."""
    names = rng.sample(MODULES, rng.randint(2, 4))
    total = 0
    for name in names:
        text = python_module(rng, func_names(rng, rng.randint(1, 3)), rng.choice(["import os", "import sys", ""]))
        (ws / f"{name}.py").write_text(text)
        total += text.count("\n")
    (ws / rng.choice(["README.md", "notes.txt", "CHANGES.txt"])).write_text(
        "".join(f"{rng.choice(WORDS)} {rng.choice(NOUNS)}\n" for _ in range(rng.randint(3, 8)))
    )
    return total


def gen_linecount(rng: random.Random, ws: Path) -> Setup:
    out = rng.choice(["total.txt", "line_total.txt", "lines.txt"])
    total = _py_files(rng, ws)
    return Setup({"out": out}, {"out": out, "total": total})


def gen_linecount_nowc(rng: random.Random, ws: Path) -> Setup:
    setup = gen_linecount(rng, ws)
    return Setup(setup.fields, setup.expect, deny=("Bash(wc:*)",))


def check_total(ws: Path, answer: str, e: dict) -> Check:
    return check_number_file(ws, e["out"], e["total"], answer)


def solve_linecount(ws: Path, e: dict) -> str:
    total = sum(p.read_text().count("\n") for p in ws.glob("*.py"))
    (ws / e["out"]).write_text(f"{total}\n")
    return f"The .py files have {total} lines in total; I wrote {total} to {e['out']}."


# ---------------------------------------------------------------- 3: TODO comments as file:line


def gen_todos(rng: random.Random, ws: Path) -> Setup:
    out = rng.choice(["todos.txt", "TODO_LIST.txt", "open_todos.txt"])
    found = []
    for name in rng.sample(MODULES, rng.randint(2, 4)):
        lines = python_module(rng, func_names(rng, rng.randint(2, 3))).splitlines()
        for _ in range(rng.randint(0, 2)):
            at = rng.randrange(len(lines) + 1)
            indent = "    " if at and lines[at - 1].startswith(("    ", "def ")) else ""
            lines.insert(
                at, f"{indent}# TODO: {rng.choice(['handle', 'test', 'speed up', 'log'])} {rng.choice(NOUNS)}s"
            )
        lines[:0] = [f"todo_{rng.choice(NOUNS)}s = []", "", ""]  # a name, not a TODO comment
        (ws / f"{name}.py").write_text("\n".join(lines) + "\n")
        found += [f"{name}.py:{i}" for i, line in enumerate(lines, 1) if "TODO" in line]
    if not found:  # at least one
        name = next(iter(ws.glob("*.py")))
        with name.open("a") as f:
            f.write("# TODO: write tests\n")
        found.append(f"{name.name}:{name.read_text().count(chr(10))}")
    return Setup({"out": out}, {"out": out, "todos": sorted(found)})


def check_todos(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["out"])
    if text is None:
        return False, f"{e['out']} was not written"
    listed = {f"{norm_path(m.group(1), ws)}:{m.group(2)}" for m in re.finditer(r"([\w./-]+\.py):(\d+)", text)}
    want = set(e["todos"])
    if listed != want:
        missing, extra = sorted(want - listed), sorted(listed - want)
        return False, f"{e['out']}: missing {missing[:3]}{'…' if len(missing) > 3 else ''}, extra {extra[:3]}"
    return True, f"{e['out']} lists the {len(want)} TODOs"


def solve_todos(ws: Path, e: dict) -> str:
    rows = [
        f"{p.name}:{i}"
        for p in sorted(ws.glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "TODO" in line
    ]
    (ws / e["out"]).write_text("\n".join(rows) + "\n")
    return f"Found {len(rows)} TODOs and listed them in {e['out']}."


# ---------------------------------------------------------------- 9: sum a CSV column


def gen_csv_sum(rng: random.Random, ws: Path) -> Setup:
    name = rng.choice(["sales.csv", "orders.csv", "expenses.csv", "inventory.csv"])
    out = rng.choice(["sum.txt", "total.txt", "column_total.txt"])
    col = rng.choice(["quantity", "amount", "units", "price"])
    cents = col in ("amount", "price")
    header = ["id", rng.choice(["item", "product", "customer"]), col, rng.choice(["region", "status", "date"])]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    total = 0
    for i in range(rng.randint(5, 12)):
        value = round(rng.randint(100, 99999) / 100, 2) if cents else rng.randint(1, 250)
        total += round(value * 100)
        w.writerow(
            [
                i + 1,
                f"{rng.choice(WORDS)}-{rng.randint(10, 99)}",
                f"{value:.2f}" if cents else value,
                rng.choice(["north", "south", "open", "closed", "2024-05-01"]),
            ]
        )
    (ws / name).write_text(buf.getvalue())
    return Setup({"col": col, "csv": name, "out": out}, {"out": out, "total": total / 100, "csv": name, "col": col})


def check_csv_sum(ws: Path, answer: str, e: dict) -> Check:
    return check_number_file(ws, e["out"], e["total"], answer)


def solve_csv_sum(ws: Path, e: dict) -> str:
    with (ws / e["csv"]).open() as f:
        total = sum(round(float(row[e["col"]]) * 100) for row in csv.DictReader(f)) / 100
    (ws / e["out"]).write_text(fmt_number(total) + "\n")
    return f"The {e['col']} column sums to {fmt_number(total)} (written to {e['out']})."


# ---------------------------------------------------------------- 11: count matching files / the largest file


def _tree(rng: random.Random, ws: Path) -> dict[str, int]:
    """A small tree of files of several extensions, in 2–3 folders; returns path -> size."""
    dirs = ["."] + rng.sample(["src", "docs", "data", "scripts", "assets"], rng.randint(1, 2))
    sizes: dict[str, int] = {}
    used = set()
    for d in dirs:
        (ws / d).mkdir(exist_ok=True)
        for _ in range(rng.randint(2, 4)):
            ext = rng.choice(["py", "md", "json", "txt", "csv"])
            stem = rng.choice(MODULES + WORDS)
            rel = f"{stem}.{ext}" if d == "." else f"{d}/{stem}.{ext}"
            if rel in used:
                continue
            used.add(rel)
            size = rng.randint(20, 900)
            (ws / rel).write_text((f"{stem} " * size)[:size])
            sizes[rel] = size
    biggest = max(sizes, key=sizes.get)  # make the largest one clearly the largest
    sizes[biggest] += 1500
    (ws / biggest).write_text("x" * sizes[biggest])
    return sizes


def gen_find_files(rng: random.Random, ws: Path) -> Setup:
    sizes = _tree(rng, ws)
    out = rng.choice(["answer.txt", "result.txt", "found.txt"])
    if rng.random() < 0.5:
        # not .txt: the answer file is one, and whether it counts would be a question of timing
        ext = rng.choice(sorted({p.rsplit(".", 1)[1] for p in sizes} - {"txt"}) or ["md"])
        n = sum(p.endswith("." + ext) for p in sizes)
        return Setup(
            {"variant": "count", "ext": ext, "out": out}, {"out": out, "count": n, "kind": "count", "ext": ext}
        )
    biggest = max(sizes, key=sizes.get)
    return Setup({"variant": "largest", "out": out}, {"out": out, "path": biggest, "kind": "largest"})


def check_find_files(ws: Path, answer: str, e: dict) -> Check:
    if e["kind"] == "count":
        return check_number_file(ws, e["out"], e["count"], answer)
    text = read_text(ws / e["out"])
    if text is None:
        return False, f"{e['out']} was not written"
    written = norm_path(text.strip(), ws)
    if written != e["path"]:
        return False, f"{e['out']} holds {text.strip()[:60]!r}, expected {e['path']}"
    if Path(e["path"]).name not in (answer or ""):
        return False, f"{e['out']} is right but the answer does not name {e['path']}"
    return True, f"{e['out']} = {e['path']}, reported"


def solve_find_files(ws: Path, e: dict) -> str:
    files = [p for p in ws.rglob("*") if p.is_file() and p.name != e["out"]]
    if e["kind"] == "count":
        n = sum(p.suffix == "." + e["ext"] for p in files)
        (ws / e["out"]).write_text(f"{n}\n")
        return f"There are {n} .{e['ext']} files."
    biggest = max(files, key=lambda p: p.stat().st_size).relative_to(ws).as_posix()
    (ws / e["out"]).write_text(biggest + "\n")
    return f"The largest file is {biggest}."


# ---------------------------------------------------------------- 13: count matching lines in a log


def gen_log_errors(rng: random.Random, ws: Path) -> Setup:
    name = rng.choice(["app.log", "server.log", "worker.log"])
    level = rng.choice(["ERROR", "WARNING"])
    out = rng.choice(["errors.txt", "count.txt", f"{level.lower()}s.txt"])
    lines, n = [], 0
    for i in range(rng.randint(15, 40)):
        lv = rng.choice(["INFO", "INFO", "DEBUG", "ERROR", "WARNING"])
        n += lv == level
        lines.append(
            f"2024-05-{rng.randint(1, 28):02d} 12:{i % 60:02d}:{rng.randint(0, 59):02d} {lv} "
            f"{rng.choice(NOUNS)} {rng.choice(['saved', 'failed', 'retried', 'skipped', 'loaded'])}"
        )
    (ws / name).write_text("\n".join(lines) + "\n")
    return Setup({"level": level, "log": name, "out": out}, {"out": out, "total": n, "log": name, "level": level})


def solve_log_errors(ws: Path, e: dict) -> str:
    n = sum(f" {e['level']} " in line for line in (ws / e["log"]).read_text().splitlines())
    (ws / e["out"]).write_text(f"{n}\n")
    return f"{e['log']} has {n} {e['level']} lines."


# ---------------------------------------------------------------- 10: change one config value


def _settings(rng: random.Random) -> list[tuple[str, str]]:
    keys = rng.sample(
        [
            "host",
            "port",
            "timeout",
            "retries",
            "log_level",
            "workers",
            "cache_size",
            "region",
            "user",
            "max_connections",
            "debug",
            "theme",
        ],
        7,
    )
    values = {
        "host": "localhost",
        "port": str(rng.choice([8000, 8080, 5432])),
        "timeout": str(rng.randint(5, 60)),
        "retries": str(rng.randint(1, 5)),
        "log_level": "info",
        "workers": str(rng.randint(2, 8)),
        "cache_size": f"{rng.randint(1, 9)}00",
        "region": rng.choice(["eu-west", "us-east"]),
        "user": rng.choice(WORDS),
        "max_connections": str(rng.randint(10, 100)),
        "debug": "false",
        "theme": rng.choice(["dark", "light"]),
    }
    return [(k, values[k]) for k in keys]


_NEW_VALUE = {
    "port": "9090",
    "user": "deploy",
    "host": "db.internal",
    "log_level": "debug",
    "region": "ap-south",
    "debug": "true",
    "theme": "solarized",
}


def _render_config(fmt: str, pairs: list[tuple[str, str]], section: str) -> str:
    if fmt == "ini":
        return f"# {section} settings\n[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in pairs)
    if fmt == "env":
        return f"# {section}\n" + "".join(f"{k.upper()}={v}\n" for k, v in pairs)
    return json.dumps({section: {k: _json_value(v) for k, v in pairs}}, indent=2) + "\n"


def _json_value(v: str):
    return int(v) if v.isdigit() else {"true": True, "false": False}.get(v, v)


def gen_config_edit(rng: random.Random, ws: Path) -> Setup:
    fmt = rng.choice(["ini", "env", "json"])
    name = {
        "ini": rng.choice(["settings.ini", "app.cfg", "service.ini"]),
        "env": rng.choice([".env", "app.env"]),
        "json": rng.choice(["config.json", "settings.json"]),
    }[fmt]
    section = rng.choice(["server", "database", "app", "worker"])
    pairs = _settings(rng)
    key, old = rng.choice(pairs)
    new = _NEW_VALUE.get(key) or str(int(old) * 2 + rng.randint(1, 9))
    shown = key.upper() if fmt == "env" else key
    (ws / name).write_text(_render_config(fmt, pairs, section))
    after = [(k, new if k == key else v) for k, v in pairs]
    (ws / "README.md").write_text(f"# {section}\n\nThe {section} reads its settings from {name}.\n")
    return Setup(
        {"file": name, "key": shown, "new": new},
        {"file": name, "fmt": fmt, "after": _render_config(fmt, after, section), "key": shown},
    )


def check_config_edit(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["file"])
    if text is None:
        return False, f"{e['file']} is gone"
    if e["fmt"] == "json":
        try:
            same = json.loads(text) == json.loads(e["after"])
        except ValueError as exc:
            return False, f"{e['file']} is no longer valid JSON ({exc})"
    else:
        same = [ln.rstrip() for ln in text.strip().splitlines()] == e["after"].strip().splitlines()
    if not same:
        return False, f"{e['file']} does not hold exactly the requested change to {e['key']}"
    return True, f"{e['file']}: {e['key']} changed, the rest intact"


def solve_config_edit(ws: Path, e: dict) -> str:
    (ws / e["file"]).write_text(e["after"])
    return f"Changed {e['key']} in {e['file']}."


# ---------------------------------------------------------------- 7a: create a JSON file from a description


def gen_create_json(rng: random.Random, ws: Path) -> Setup:
    name = rng.choice(["config.json", "settings.json", "deploy.json", "project.json"])
    want: dict = {"name": f"{rng.choice(WORDS)}-{rng.choice(MODULES)}"}
    if rng.random() < 0.5:
        want["version"] = f"{rng.randint(0, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
    want[rng.choice(["port", "workers", "max_retries"])] = rng.randint(2, 9000)
    want[rng.choice(["debug", "enabled", "verbose"])] = rng.random() < 0.5
    want[rng.choice(["tags", "regions", "owners"])] = rng.sample(WORDS, rng.randint(2, 3))
    (ws / "README.md").write_text(f"# {want['name']}\n\nConfiguration lives in {name}.\n")
    pairs = [(k, json.dumps(v)) for k, v in want.items()]
    return Setup(
        {
            "file": name,
            "desc": ", ".join(f"{k} {v}" for k, v in pairs),
            "desc_lines": "".join(f"\n   - {k}: {v}" for k, v in pairs),
            "desc_zh": "，".join(f"{k} 为 {v}" for k, v in pairs),
        },
        {"file": name, "want": want},
    )


def check_create_json(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["file"])
    if text is None:
        return False, f"{e['file']} was not created"
    try:
        got = json.loads(text)
    except ValueError as exc:
        return False, f"{e['file']} is not valid JSON ({exc})"
    if got != e["want"]:
        return False, f"{e['file']} holds {json.dumps(got)[:100]}, expected {json.dumps(e['want'])[:100]}"
    return True, f"{e['file']} holds the {len(e['want'])} keys"


def solve_create_json(ws: Path, e: dict) -> str:
    (ws / e["file"]).write_text(json.dumps(e["want"], indent=2) + "\n")
    return f"Created {e['file']}."


# ---------------------------------------------------------------- 14: unique sorted lines


def gen_unique(rng: random.Random, ws: Path) -> Setup:
    name = rng.choice(["names.txt", "emails.txt", "hosts.txt"])
    out = rng.choice(["unique.txt", "sorted.txt", f"unique_{name}"])
    pool = [f"{w}{rng.randint(1, 9)}" for w in rng.sample(WORDS, rng.randint(5, 9))]
    if name == "emails.txt":
        pool = [f"{p}@example.com" for p in pool]
    elif name == "hosts.txt":
        pool = [f"{p}.internal" for p in pool]
    lines = pool + rng.choices(pool, k=rng.randint(3, 8))
    rng.shuffle(lines)
    (ws / name).write_text("\n".join(lines) + "\n")
    return Setup({"src": name, "out": out}, {"src": name, "out": out, "want": sorted(set(pool))})


def check_unique(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["out"])
    if text is None:
        return False, f"{e['out']} was not written"
    got = [ln.strip() for ln in text.strip().splitlines()]
    if got != e["want"]:
        return False, f"{e['out']} has {len(got)} lines, not the {len(e['want'])} unique sorted ones"
    return True, f"{e['out']} holds the {len(got)} unique lines, sorted"


def solve_unique(ws: Path, e: dict) -> str:
    lines = sorted(set((ws / e["src"]).read_text().split()))
    (ws / e["out"]).write_text("\n".join(lines) + "\n")
    return f"Wrote {len(lines)} unique lines to {e['out']}."


TASKS = [
    Task(
        "linecount",
        "count the lines of the .py files, write the total to a named file, report it (the quick start)",
        gen_linecount,
        check_total,
        solve_linecount,
        names=("out",),
    ),
    Task(
        "linecount-nowc",
        "the same, with Bash(wc:*) denied: the likely first call is refused and must be rerouted",
        gen_linecount_nowc,
        check_total,
        solve_linecount,
        names=("out",),
        tags=("permissions",),
    ),
    Task(
        "todos",
        "list the TODO comments of the .py files as file:line in a named file",
        gen_todos,
        check_todos,
        solve_todos,
        names=("out",),
    ),
    Task(
        "csv-sum",
        "sum one column of a CSV file, write the sum to a named file, report it",
        gen_csv_sum,
        check_csv_sum,
        solve_csv_sum,
        names=("col", "csv", "out"),
    ),
    Task(
        "find-files",
        "count the files with an extension in a small tree, or name the largest file; write and report",
        gen_find_files,
        check_find_files,
        solve_find_files,
        names=("ext", "out"),
    ),
    Task(
        "log-count",
        "count the ERROR (or WARNING) lines of a log, write and report the count",
        gen_log_errors,
        check_total,
        solve_log_errors,
        names=("level", "log", "out"),
    ),
    Task(
        "config-edit",
        "change one value in an .ini/.env/.json config without touching the rest",
        gen_config_edit,
        check_config_edit,
        solve_config_edit,
        names=("file", "key", "new"),
    ),
    Task(
        "create-json",
        "create a JSON file with given keys and values",
        gen_create_json,
        check_create_json,
        solve_create_json,
        names=("file",),
    ),
    Task(
        "unique-lines",
        "write a file's lines sorted with duplicates removed to a named file",
        gen_unique,
        check_unique,
        solve_unique,
        names=("src", "out"),
    ),
]
