"""``drivetrain report SESSION_ID --html out.html``: a session's turns, tokens, context size and cost as one
self-contained HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drivetrain.errors import HarnessError
from drivetrain.sessions.html import render
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import SessionNotFound


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain report",
        description="Write a session's report: per turn the stop reason, the tools called, input, cache-write, "
        "cache-read and output tokens, context size and cost, with a chart of context size and "
        "cumulative cost. The page needs no network.",
    )
    p.add_argument("session_id")
    p.add_argument("--html", metavar="FILE", required=True, type=Path, help="where to write the page (- for stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[2:] if argv is None else argv)
    try:
        records = open_store().read(args.session_id)
    except (SessionNotFound, HarnessError) as e:
        print(f"drivetrain report: {e}", file=sys.stderr)
        return 1
    if not write_page(render(args.session_id, records), args.html, "drivetrain report"):
        return 1
    if str(args.html) == "-":
        return 0
    print(f"{args.html}: {sum(1 for r in records if r.get('kind') == 'turn')} turns", file=sys.stderr)
    return 0


def write_page(page: str, target: Path, prog: str) -> bool:
    """Write an HTML page to ``target`` (``-``: stdout); False, with a line on stderr, when it cannot be written."""
    if str(target) == "-":
        sys.stdout.write(page)
        return True
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as e:
        print(f"{prog}: cannot write {target}: {e.strerror or e}", file=sys.stderr)
        return False
    return True
