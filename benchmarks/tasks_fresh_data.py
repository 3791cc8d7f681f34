"""Fresh task kinds about data and documents (split ``fresh``: never tuned on): a join of a CSV and a JSON file
into a result file, a row added to a Markdown table in its sorted place, and a link added to an HTML page's nav."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path

from taskkit import WORDS, Check, Setup, Task, digest, read_text

# ---------------------------------------------------------------- join-data: a CSV and a JSON file into a result

# (people file, their name, events file, the key naming a person in an event, the amount field)
_JOINS = [
    ("customers.csv", "customer", "orders.json", "customer_id", "amount"),
    ("users.csv", "user", "payments.json", "user_id", "value"),
    ("members.csv", "member", "donations.json", "member_id", "amount"),
    ("teams.csv", "team", "expenses.json", "team_id", "cost"),
]
_FIRST = ["Ada", "Bo", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena", "Mei", "Nils"]


def gen_join_data(rng: random.Random, ws: Path) -> Setup:
    people, who, events, key, field = rng.choice(_JOINS)
    names = rng.sample(_FIRST, rng.randint(4, 7))
    if who == "team":
        names = [w.capitalize() for w in rng.sample(WORDS, len(names))]
    ids = rng.sample(range(100, 999), len(names))
    as_int = rng.random() < 0.5  # ids are numbers in the JSON but text in the CSV: a join must match them
    city = rng.sample(["Oslo", "Lima", "Pune", "Kyoto", "Accra", "Porto", "Quito", "Riga"], len(names))
    rows = list(zip(ids, names, city))
    rng.shuffle(rows)
    (ws / people).write_text("id,name,city\n" + "".join(f"{i},{n},{c}\n" for i, n, c in rows))
    totals = dict.fromkeys(names, 0.0)
    records = []
    for _ in range(rng.randint(8, 14)):
        i, n, _c = rng.choice(rows[:-1])  # the last person has no events: their total is 0
        amount = rng.randint(100, 9999) / 100
        totals[n] += amount
        records.append({"id": len(records) + 1, key: i if as_int else str(i), field: amount})
    (ws / events).write_text(json.dumps(records, indent=1) + "\n")
    out = rng.choice(["totals.csv", f"{who}_totals.csv", "summary.csv"])
    want = [[n, round(totals[n], 2)] for n in sorted(names)]
    return Setup(
        {"people": people, "events": events, "out": out, "key": key, "field": field},
        {
            "people": people,
            "events": events,
            "out": out,
            "want": want,
            "digests": [digest(ws / people), digest(ws / events)],
        },
    )


def check_join_data(ws: Path, answer: str, e: dict) -> Check:
    if [digest(ws / e["people"]), digest(ws / e["events"])] != e["digests"]:
        return False, f"{e['people']} or {e['events']} was changed"
    text = read_text(ws / e["out"])
    if text is None:
        return False, f"{e['out']} was not written"
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text.strip())) if any(c.strip() for c in r)]
    if not rows or [c.lower() for c in rows[0]] != ["name", "total"]:
        return False, f"{e['out']} does not start with the header name,total: {rows[:1]}"
    got = rows[1:]
    if [r[0] for r in got] != [n for n, _ in e["want"]]:
        return False, f"{e['out']} names {[r[0] for r in got]}, expected {[n for n, _ in e['want']]} (by name)"
    for r, (name, total) in zip(got, e["want"]):
        try:
            value = float(r[1])
        except (IndexError, ValueError):
            return False, f"{e['out']}: the total of {name} is {r[1:]}, not a number"
        if len(r) != 2 or abs(value - total) > 0.005:
            return False, f"{e['out']}: {name} has {','.join(r[1:])}, expected {total:.2f}"
    return True, f"{e['out']} holds the {len(got)} totals, by name"


def solve_join_data(ws: Path, e: dict) -> str:
    lines = ["name,total"] + [f"{n},{t:.2f}" for n, t in e["want"]]
    (ws / e["out"]).write_text("\n".join(lines) + "\n")
    return f"Wrote {len(e['want'])} totals to {e['out']}."


# ---------------------------------------------------------------- markdown-table: a row in its sorted place

_OPTIONS = [
    ("--color", "auto", "Colour the output: auto, always or never"),
    ("--config", "none", "Read settings from this file"),
    ("--dry-run", "false", "Show what would change without changing it"),
    ("--exclude", "none", "Skip paths matching this pattern"),
    ("--force", "false", "Overwrite files that already exist"),
    ("--jobs", "1", "Run this many jobs in parallel"),
    ("--log-file", "none", "Also write the log to this file"),
    ("--output", "stdout", "Where to write the result"),
    ("--quiet", "false", "Print errors only"),
    ("--retries", "3", "Retry a failed download this many times"),
    ("--since", "none", "Only consider changes after this date"),
    ("--timeout", "30", "Give up on a request after this many seconds"),
    ("--verbose", "false", "Print more detail"),
    ("--watch", "false", "Run again whenever a file changes"),
]


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _option_row(opt: tuple[str, str, str]) -> str:
    return _md_row([f"`{opt[0]}`", f"`{opt[1]}`", opt[2]])


def gen_markdown_table(rng: random.Random, ws: Path) -> Setup:
    tool = f"{rng.choice(WORDS)}{rng.choice(['ctl', 'sync', 'fmt', 'check', ''])}"
    picked = sorted(rng.sample(_OPTIONS, rng.randint(6, 9)))
    new = picked.pop(rng.randrange(1, len(picked)))  # never first: its place is after some row
    file = rng.choice(["README.md", "docs/usage.md", "USAGE.md"])
    head = [
        f"# {tool}",
        "",
        f"`{tool}` keeps a folder of {rng.choice(['reports', 'notes', 'images', 'configs'])} in order.",
        "",
        "## Install",
        "",
        "```sh",
        f"pip install {tool}",
        "```",
        "",
        "## Options",
        "",
        "Options are listed alphabetically.",
        "",
        _md_row(["Option", "Default", "Description"]),
        "| --- | --- | --- |",
    ]
    tail = ["", "## License", "", rng.choice(["MIT", "Apache-2.0", "BSD-3-Clause"]), ""]
    (ws / file).parent.mkdir(parents=True, exist_ok=True)
    (ws / file).write_text("\n".join(head + [_option_row(o) for o in picked] + tail))
    want = head + [_option_row(o) for o in sorted([*picked, new])] + tail
    return Setup(
        {"file": file, "option": new[0], "default": new[1], "desc": new[2]},
        {"file": file, "want": want},
    )


def _md_norm(line: str) -> str:
    """A line compared by its content: a table row cell by cell (spaces and backticks aside; the rule row as ---)."""
    line = line.rstrip()
    if not line.lstrip().startswith("|"):
        return line
    cells = [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]
    return "|".join("---" if re.fullmatch(r":?-{3,}:?", c) else c for c in cells)


def check_markdown_table(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["file"])
    if text is None:
        return False, f"{e['file']} is gone"
    got = [_md_norm(x) for x in text.rstrip().splitlines()]
    want = [_md_norm(x) for x in "\n".join(e["want"]).rstrip().splitlines()]
    if got == want:
        return True, f"{e['file']} has the new row in its place and nothing else changed"
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return False, f"{e['file']} line {i + 1} is {g[:70]!r}, expected {w[:70]!r}"
    return False, f"{e['file']} has {len(got)} lines, expected {len(want)}"


def solve_markdown_table(ws: Path, e: dict) -> str:
    (ws / e["file"]).write_text("\n".join(e["want"]))
    return f"Added the row to the options table in {e['file']}."


# ---------------------------------------------------------------- html-edit: a link in the nav, after a given one

_PAGES = ["Home", "Docs", "Blog", "Pricing", "About", "Contact", "Careers", "Changelog", "Support", "Status"]


class _Links(HTMLParser):
    """The (href, text) of each link inside <nav>, the number of <li> there, and the page's text outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.items, self.outside, self._nav, self._href = 0, [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "nav":
            self._nav += 1
        elif self._nav and tag == "a":
            self._href = dict(attrs).get("href") or ""
            self.links.append((self._href, ""))
        elif self._nav and tag == "li":
            self.items += 1
        if not self._nav:
            self.outside.append(f"<{tag} {sorted(attrs)}>")

    def handle_endtag(self, tag):
        if tag == "nav":
            self._nav -= 1
        elif tag == "a":
            self._href = None
        if not self._nav and tag != "nav":
            self.outside.append(f"</{tag}>")

    def handle_data(self, data):
        if self._nav and self._href is not None:
            self.links[-1] = (self.links[-1][0], (self.links[-1][1] + data).strip())
        elif not self._nav and data.strip():
            self.outside.append(" ".join(data.split()))


def _parse(text: str) -> _Links:
    p = _Links()
    p.feed(text)
    p.close()
    return p


def gen_html_edit(rng: random.Random, ws: Path) -> Setup:
    site = f"{rng.choice(WORDS).capitalize()} {rng.choice(['Labs', 'Cloud', 'Studio', 'Works'])}"
    pages = rng.sample(_PAGES[1:], rng.randint(4, 6))
    new = pages.pop()
    pages = ["Home", *pages]
    style = rng.choice(["/{}/", "/{}.html", "{}.html"])
    href = {p: "/" if p == "Home" else style.format(p.lower()) for p in [*pages, new]}
    after = rng.choice(pages)
    file = rng.choice(["index.html", "site/index.html", "public/index.html"])
    nav = "".join(f'      <li><a href="{href[p]}">{p}</a></li>\n' for p in pages)
    (ws / file).parent.mkdir(parents=True, exist_ok=True)
    (ws / file).write_text(
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n  <title>{site}</title>\n'
        f'  <link rel="stylesheet" href="/style.css">\n</head>\n<body>\n  <header>\n    <nav class="main-nav">\n'
        f"    <ul>\n{nav}    </ul>\n    </nav>\n  </header>\n  <main>\n    <h1>{site}</h1>\n"
        f"    <p>{rng.choice(['Tools for small teams.', 'Fast builds, fewer surprises.', 'Data you can trust.'])}</p>\n"
        f"  </main>\n  <footer>&copy; {rng.randint(2019, 2026)} {site}</footer>\n</body>\n</html>\n"
    )
    order = [*pages]
    order.insert(pages.index(after) + 1, new)
    parsed = _parse((ws / file).read_text())
    return Setup(
        {"file": file, "text": new, "href": href[new], "after": after},
        {"file": file, "links": [[href[p], p] for p in order], "outside": parsed.outside},
    )


def check_html_edit(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["file"])
    if text is None:
        return False, f"{e['file']} is gone"
    p = _parse(text)
    got = [list(x) for x in p.links]
    if got != e["links"]:
        return False, f"the nav's links are {[t for _, t in got]} ({[h for h, _ in got]}), expected {e['links']}"
    if p.items != len(got):
        return False, f"the nav has {len(got)} links but {p.items} list items: the new link is not its own <li>"
    if p.outside != e["outside"]:
        return False, f"{e['file']} changed outside the nav"
    return True, f"the nav of {e['file']} has the new link in its place; nothing else changed"


def solve_html_edit(ws: Path, e: dict) -> str:
    path = ws / e["file"]
    lines = path.read_text().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if "<ul>" in line)
    items = [f'      <li><a href="{h}">{t}</a></li>\n' for h, t in e["links"]]
    end = next(n for n, line in enumerate(lines) if "</ul>" in line)
    path.write_text("".join(lines[: i + 1] + items + lines[end:]))
    return f"Added the link to the nav of {e['file']}."


TASKS = [
    Task(
        "join-data",
        "join a CSV of people and a JSON of their records (ids typed differently in some) into per-person totals",
        gen_join_data,
        check_join_data,
        solve_join_data,
        names=("people", "events", "out"),
    ),
    Task(
        "markdown-table",
        "add a row to a Markdown options table in its alphabetical place; nothing else in the file changes",
        gen_markdown_table,
        check_markdown_table,
        solve_markdown_table,
        names=("file", "option", "default"),
    ),
    Task(
        "html-edit",
        "add a link to an HTML page's nav, as its own list item right after a given link; nothing else changes",
        gen_html_edit,
        check_html_edit,
        solve_html_edit,
        names=("file", "text", "href", "after"),
    ),
]
