"""llama.cpp builds side by side: prompt evaluation and generation speed of the embedded model under each.

Each build is a folder holding a llama_cpp package (``pip install --target DIR --no-deps WHEEL``), or ``installed``
for the one in this virtualenv. The rounds alternate the builds, each run in a fresh process of
``bench_local.py`` (cold first turn with the tools offered, the next turn with the KV cache reused, free text);
printed: each run's figures, then each build's median and its ratio to the first build. Asserts nothing.

    python benchmarks/bench_build.py --builds /tmp/llavx2 installed [--model default] [--rounds 3] [--gen 64]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench_local.row: "… evaluated  1739 ( 98.1 tok/s) … output  64 tok ( 20.3 tok/s)"
ROW = re.compile(r"^\s+(.+?)\s+prompt .*?\(\s*([\d.]+) tok/s\).*?\(\s*([\d.]+) tok/s\)", re.MULTILINE)


def run(build: str, model: str, gen: int) -> tuple[str, dict[str, tuple[float, float]]]:
    env = dict(os.environ)
    if build != "installed":
        env["PYTHONPATH"] = os.pathsep.join([build, *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, str(HERE / "bench_local.py"), "--models", model, "--gen", str(gen), "--history"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout  # names the build it ran
    return out, {label: (float(p), float(g)) for label, p, g in ROW.findall(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", nargs="+", required=True, help="folders holding llama_cpp, or 'installed'")
    parser.add_argument("--model", default="default", help="small, default, or a .gguf path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gen", type=int, default=64, help="tokens of free text to generate")
    args = parser.parse_args()
    got: dict[str, list[dict[str, tuple[float, float]]]] = {b: [] for b in args.builds}
    for r in range(1, args.rounds + 1):
        for build in args.builds:
            text, figures = run(build, args.model, args.gen)
            print(f"--- round {r}, build {build}\n{text}", flush=True)
            got[build].append(figures)
    first = args.builds[0]

    def median(build: str, label: str, i: int) -> float:
        return statistics.median(f[label][i] for f in got[build] if label in f)

    print("medians (prompt evaluation tokens/s on the cold first turn; generation tokens/s of free text)")
    cold, free = "turn 1 (cold)", "free text, grammar on"
    for build in args.builds:
        p, g = median(build, cold, 0), median(build, free, 1)
        print(
            f"  {build:<24} prompt {p:6.1f} tok/s ({p / median(first, cold, 0):.2f}x)   "
            f"generation {g:5.1f} tok/s ({g / median(first, free, 1):.2f}x)"
        )


if __name__ == "__main__":
    main()
