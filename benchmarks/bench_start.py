"""Time to first token of a new process on the embedded model: the small profile's prompt prefix evaluated
vs loaded from the on-disk KV cache.

Each measurement is a fresh Python process (as a CLI start is): load the model, then one request with the
small profile's fixed system prompt and a short task, one output token. Three ways, interleaved, N rounds:

- ``off``: no prefix cache (the whole prompt is evaluated);
- ``miss``: prefix cache on, empty cache folder (evaluated, then saved: what the very first run costs);
- ``hit``: prefix cache on, the folder the ``miss`` run filled (loaded).

    python benchmarks/bench_start.py [--rounds 3] [--model default|small]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import asyncio, json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from drivetrain.messages import Message
from drivetrain.models.base import ModelRequest
from drivetrain.small.codeact import grammar
from drivetrain.models.local import LocalModel
from drivetrain.small.prompts import small_system_prompt
model, mode, folder = sys.argv[1], sys.argv[2], sys.argv[3]
m = LocalModel(model, temperature=0.0)
m.prefix_cache, m.prefix_cache_dir = mode != "off", Path(folder)
t1 = time.perf_counter()
m.load()
t2 = time.perf_counter()
req = ModelRequest([Message.user("Count the .txt files here.")], small_system_prompt(True, True), [], max_tokens=1,
                   grammar=grammar("any"))
asyncio.run(m.respond(req))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_token_s": t3 - t2, "total_s": t3 - t0,
                  "evaluated": m.last_stats.prompt_eval_tokens, "prompt": m.last_stats.prompt_tokens,
                  "hit": m.prefix_cache_hit}))
"""


def measure(model: str, mode: str, folder: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, model, mode, str(folder)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", choices=["default", "small"], default="default")
    args = p.parse_args()
    rows: dict[str, list[dict]] = {"off": [], "miss": [], "hit": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for mode in ("off", "miss", "hit"):  # hit reuses what miss saved in the same folder
                rows[mode].append(measure(args.model, mode, Path(tmp)))
    print(f"model {args.model}; {args.rounds} rounds; medians (a new process each time)")
    print("mode   evaluated/prompt tokens   load s   first token s   process total s")
    for mode, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("load_s", "first_token_s", "total_s")}
        ev = statistics.median(r["evaluated"] for r in rs)
        print(
            f"{mode:<6} {ev:>8.0f}/{rs[0]['prompt']:<16} {med['load_s']:7.2f}  {med['first_token_s']:14.2f}  "
            f"{med['total_s']:15.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
