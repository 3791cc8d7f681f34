"""``drivetrain rewind SESSION_ID --to N``: put the workspace back as it was before prompt N of that session."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from drivetrain.errors import HarnessError
from drivetrain.sessions.rewind import Checkpoints


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain rewind",
        description="Restore the workspace's files as they were before a user prompt of a session: files changed "
        "or deleted since come back, files created since are removed. Files outside the workspace and "
        "ignored files the session never wrote are not touched. Without --to, list the checkpoints.",
    )
    p.add_argument("session_id")
    p.add_argument(
        "--to",
        metavar="N",
        default=None,
        help="the prompt number to go back to (the state before it), or a before-rewind-<n> checkpoint "
        "to undo an earlier rewind",
    )
    p.add_argument("--cwd", type=Path, default=None, help="the workspace (default: the current folder)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[2:] if argv is None else argv)
    checkpoints = Checkpoints(args.cwd or Path.cwd())
    try:
        if args.to is None:
            return _list(checkpoints, args)
        report = checkpoints.restore(args.session_id, int(args.to) if args.to.isdigit() else args.to)
    except HarnessError as e:
        print(f"drivetrain rewind: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json()))
        return 0
    for path in report.restored:
        print(f"restored {path}")
    for path in report.removed:
        print(f"removed  {path}")
    for path in report.skipped:
        print(f"skipped  {path} (too large when checkpointed; left as it is)")
    print(
        f"{checkpoints.workspace}: as before prompt {report.to} of {report.session_id}: "
        f"{len(report.restored)} restored, {len(report.removed)} removed, {report.unchanged} unchanged.\n"
        f"To undo: drivetrain rewind {report.session_id} --to {report.undo}",
        file=sys.stderr,
    )
    return 0


def _list(checkpoints: Checkpoints, args: argparse.Namespace) -> int:
    found = checkpoints.list(args.session_id)
    if args.json:
        print(json.dumps([{"prompt": c.prompt, "commit": c.commit, "time": c.time.isoformat()} for c in found]))
    elif not found:
        print(
            f"drivetrain rewind: no checkpoints of session {args.session_id} for {checkpoints.workspace}",
            file=sys.stderr,
        )
        return 1
    else:
        for c in found:
            print(f"{c.prompt}\t{c.time.isoformat(timespec='seconds')}\t{c.commit[:12]}")
    return 0
