"""``drivetrain batch report DIR [--json] [--html FILE]``: what a sweep gave, from ``DIR/results.jsonl``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from drivetrain.batch.html import render
from drivetrain.batch.results import RESULTS, interrupted, read_results
from drivetrain.batch.summary import summarize, text
from drivetrain.cli.report import write_page


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain batch report",
        description="Sum up a sweep: total, passed, pass rate, cost and turns of passes vs failures, the slowest "
        "and most expensive runs, failures grouped by subtype.",
    )
    p.add_argument("out", type=Path, metavar="DIR", help="the sweep's --out folder")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument(
        "--html",
        metavar="FILE",
        type=Path,
        default=None,
        help="also write a self-contained page with charts (- for stdout)",
    )
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not (args.out / RESULTS).is_file():
        print(
            f"drivetrain batch report: no {RESULTS} in {args.out}: run `drivetrain batch TASKS.jsonl --out "
            f"{args.out}` first.",
            file=sys.stderr,
        )
        return 1
    results = read_results(args.out)
    if args.html is not None:
        if not write_page(render(f"drivetrain · sweep {args.out}", results), args.html, "drivetrain batch report"):
            return 1
        if str(args.html) == "-":
            return 0
    summary = summarize(results, interrupted(args.out))
    print(json.dumps(summary, indent=2) if args.json else text(summary))
    return 0
