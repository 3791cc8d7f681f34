"""``drivetrain sessions list`` and ``drivetrain sessions show ID``: the saved sessions, and what one of them did.

Usage::

    drivetrain sessions list                  # sessions of this directory, newest first
    drivetrain sessions list --all --limit 20 # of every directory
    drivetrain sessions list --cwd ~/proj --query "failing test"   # id or first prompt contains the text
    drivetrain sessions show 5ac92135         # the turn log: calls, first 100 chars of each result,
                                              # tokens and cost per turn; the trajectory; the health signals
    drivetrain sessions show 5ac92135 --json  # the same as one JSON object (list --json: a JSON array)
    # a subagent's session (a Task call) is shown nested under the call that ran it
    # an id prefix naming exactly one session is enough, as with git's short hashes;
    # an unknown or ambiguous id exits with status 1. The store is $DRIVETRAIN_SESSION_STORE's,
    # or the files under $DRIVETRAIN_HOME (default ~/.drivetrain).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.graph import walked
from drivetrain.sessions import report
from drivetrain.sessions.log import apply_state
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import SessionInfo, SessionNotFound, SessionStore

PROMPT_CHARS = 40


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="drivetrain sessions", description="The saved sessions, and what one of them did.")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the sessions of this directory (or --cwd DIR, or --all), newest first")
    where = ls.add_mutually_exclusive_group()
    where.add_argument("--cwd", type=Path, default=None, help="the sessions started in DIR (default: this directory)")
    where.add_argument("--all", action="store_true", help="the sessions of every directory")
    ls.add_argument("--query", default=None, help="only sessions whose id or first prompt contains TEXT")
    ls.add_argument("--limit", type=int, default=None, metavar="N")
    ls.add_argument("--json", action="store_true", help="a JSON array of the index entries")
    show = sub.add_parser("show", help="a session's turn log, stop_reason trajectory and health signals")
    show.add_argument("session_id", metavar="ID", help="a session id, or a prefix naming exactly one")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--graph",
        action="store_true",
        help="the loop's graph as Mermaid, each edge labelled with how often this session took it",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[2:] if argv is None else argv)
    try:
        store = open_store()
        return _list(store, args) if args.command == "list" else _show(store, args)
    except (HarnessError, SessionNotFound, ValueError) as e:
        print(f"drivetrain sessions: {e}", file=sys.stderr)
        return 1


def _list(store: SessionStore, args: argparse.Namespace) -> int:
    cwd = None if args.all else str((args.cwd or Path.cwd()).expanduser().resolve())
    found = store.list(cwd=cwd, query=args.query, limit=args.limit)
    if args.json:
        print(json.dumps([s.to_json() for s in found]))
        return 0
    if not found:
        where = f" in {cwd} (--all lists every directory)" if cwd else ""
        print(
            f"drivetrain sessions: no sessions{' matching ' + repr(args.query) if args.query else ''}{where}",
            file=sys.stderr,
        )
        return 0
    print(table(found))
    return 0


def table(sessions: list[SessionInfo]) -> str:
    """Plain aligned columns (no table library is a dependency)."""
    header = ("ID", "DIRECTORY", "FIRST PROMPT", "TURNS", "COST", "LAST ACTIVITY", "STATUS")
    rows = [header] + [
        (
            s.session_id[:8],
            _shorten_left(s.cwd or "?", 32),
            _prompt(s.first_prompt),
            str(s.num_turns),
            report.cost_text(s.total_cost_usd),
            s.updated_at[:19].replace("T", " ") + "Z",
            s.status,
        )
        for s in sessions
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {3, 4}  # numbers
    return "\n".join(
        "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    )


def _prompt(text: str | None) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= PROMPT_CHARS else line[: PROMPT_CHARS - 1] + "…"


def _shorten_left(path: str, width: int) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1) :]


def _show(store: SessionStore, args: argparse.Namespace) -> int:
    records = store.read(resolve(store, args.session_id))
    if args.graph:
        counters: JsonObject = {}
        for r in records:
            if r.get("kind") == "state":
                counters = apply_state(counters, r)
        print(walked(counters.get("path", [])))
        return 0
    children = {r["tool_use_id"]: store.read(r["session"]) for r in records if r.get("kind") == "subagent"}
    for r in records:  # a run of several attempts: each attempt's own session
        if r.get("kind") == "attempts":
            for e in r.get("each", []):
                with contextlib.suppress(SessionNotFound, ValueError):
                    children[f"attempt-{e['attempt']}"] = store.read(e["session_id"])
    if args.json:
        print(
            json.dumps(
                {**report.to_json(records), "subagents": {k: report.to_json(v) for k, v in children.items()}},
                ensure_ascii=False,
            )
        )
    else:
        print(report.render_text(records, {k: report.render_text(v) for k, v in children.items()}))
    return 0


def resolve(store: SessionStore, given: str) -> str:
    """The session ``given`` names: an id, or a prefix of exactly one. ``SessionNotFound`` otherwise."""
    matches = [s.session_id for s in store.list(query=given) if s.session_id.startswith(given)]
    if given in matches or (not matches and _exists(store, given)):
        return given
    if len(matches) == 1:
        return matches[0]
    # a session's subagents and attempts share its id as their prefix
    parents = [m for m in matches if ".task-" not in m and "-attempt-" not in m]
    if len(parents) == 1 and all(m.startswith(parents[0]) for m in matches):
        return parents[0]
    if not matches:
        raise SessionNotFound(f"no session {given!r} (drivetrain sessions list --all shows them)")
    raise SessionNotFound(
        f"{given!r} names {len(matches)} sessions ({', '.join(sorted(matches)[:5])}"
        f"{', …' if len(matches) > 5 else ''}); give more of the id"
    )


def _exists(store: SessionStore, session_id: str) -> bool:
    """A log the index does not know yet still counts."""
    try:
        return bool(store.read(session_id))
    except (SessionNotFound, ValueError):
        return False
