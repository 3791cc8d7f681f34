"""The seeds used by measurements, so that no seed set chooses between configurations twice.

A measurement (one ``bench_tasks.py`` batch) draws its workspaces from a seed base N: run r of every kind uses
workspace seed N*1000 + r, for every config alike. Before it runs anything, the batch appends a line to the ledger
(``benchmarks/results/seeds-used.jsonl``, committed with the results) naming the seeds, the results file and what
was measured. A later batch that would use any of those seeds again is refused, unless it resumes the same results
file (``--resume``): that is the same measurement, carried on. Without ``--seed-base`` a batch takes a fresh base,
above every base in the ledger and never below ``FIRST_FRESH`` (bases under it were used by hand before the ledger).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEDGER = ROOT / "benchmarks" / "results" / "seeds-used.jsonl"
FIRST_FRESH = 100
RUNS_PER_BASE = 1000  # run r of base N uses seed N*1000 + r


def seeds_of(base: int, runs: int) -> list[int]:
    return [base * RUNS_PER_BASE + r for r in range(1, runs + 1)]


def results_id(path: Path | None) -> str:
    """How a results file is named in the ledger: relative to the repository when inside it (so that another
    checkout of it names the file alike), else absolute; empty for a batch without one."""
    if path is None:
        return ""
    full = Path(os.path.abspath(path))
    try:
        return full.relative_to(ROOT).as_posix()
    except ValueError:
        return str(full)


def load(path: Path = LEDGER) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut short
    return out


def used(entry: dict, seed: int) -> bool:
    """Whether a ledger line used ``seed``: it lists the seed, or its whole base (lines written for the batches
    run before the ledger, whose number of runs is not known, give ``bases``)."""
    return seed in entry.get("seeds", ()) or seed // RUNS_PER_BASE in entry.get("bases", ())


def fresh_base(entries: Iterable[dict]) -> int:
    bases = [int(s) // RUNS_PER_BASE for e in entries for s in e.get("seeds", [])]
    bases += [int(b) for e in entries for b in e.get("bases", [])]
    return max([FIRST_FRESH - 1, *bases]) + 1


def base_of(entries: Iterable[dict], results: Path | None) -> int | None:
    """The base the last batch recorded for ``results`` used (for a resume without ``--seed-base``)."""
    name = results_id(results)
    found = [e for e in entries if name and e.get("results") == name and e.get("seeds")]
    return int(found[-1]["seeds"][0]) // RUNS_PER_BASE if found else None


def conflicts(entries: Iterable[dict], seeds: Iterable[int], results: Path | None, resume: bool) -> list[str]:
    """Why ``seeds`` may not be used (empty: they may): each ledger line that used one of them, unless this batch
    resumes that line's results file."""
    wanted, name, out = set(seeds), results_id(results), []
    for e in entries:
        again = sorted(s for s in wanted if used(e, s))
        if again and not (resume and name and e.get("results") == name):
            where = e.get("results") or "no results file"
            out.append(f"seeds {again[0]}..{again[-1]} were used on {e.get('time', '?')} ({where})")
    return out


def new_seeds(entries: Iterable[dict], seeds: Iterable[int], results: Path | None) -> list[int]:
    """The seeds of ``seeds`` not yet recorded for this results file."""
    name = results_id(results)
    mine = [e for e in entries if name and e.get("results") == name]
    return [s for s in seeds if not any(used(e, s) for e in mine)]


def record(seeds: list[int], results: Path | None, what: dict, path: Path = LEDGER) -> dict:
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "seeds": seeds, "results": results_id(results), **what}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return entry
