"""How long the `drivetrain` command takes to start (what every CLI test and every `-p` run pays first): the median
wall time of `drivetrain --version` and of importing the CLI, over N fresh processes, and the modules that take
longest to import (python -X importtime).

    python benchmarks/bench_cli_start.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXE = Path(sys.executable).parent / "drivetrain"


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def slowest_imports(n: int = 5) -> list[tuple[int, str]]:
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import drivetrain.cli.main"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:") and "|" in line]
    timed = [(int(r[1]), r[2].strip()) for r in rows if r[1].strip().isdigit()]
    return sorted((t for t in timed if t[1].split(".")[0] != "drivetrain"), reverse=True)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    version = [wall([str(EXE), "--help"]) for _ in range(runs)]
    imports = [wall([sys.executable, "-c", "import drivetrain.cli.main"]) for _ in range(runs)]
    bare = [wall([sys.executable, "-c", "pass"]) for _ in range(runs)]
    print(f"drivetrain --help           median {statistics.median(version):.3f} s  ({runs} runs)")
    print(f"import drivetrain.cli.main  median {statistics.median(imports):.3f} s")
    print(f"python -c pass              median {statistics.median(bare):.3f} s")
    print("slowest third-party imports (cumulative µs):")
    for micros, name in slowest_imports():
        print(f"  {micros:>9,}  {name}")


if __name__ == "__main__":
    main()
