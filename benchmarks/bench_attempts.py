"""The attempts' model calls decoded together vs one by one: wall time of k conversations on the local model.

Each conversation is what an attempt of the quick-start task sends: the small profile's system prompt, the task,
then ``--turns`` turns, each a reply of up to ``--tokens`` tokens followed by a short tool result. Measured side by
side in one process, on the same weights:

  one         a single conversation (the plain llama.cpp path: what --attempts 1 does)
              (every path takes the system turn's KV from the disk cache, as the CLI does: only the first
              request of all evaluates it)
  sequential  k conversations, one after another, on that path
  batched     k conversations at once, on the batch engine (one context, a sequence each, one batch per step)
  processes   k conversations at once, each in a process of its own with its own copy of the model and
              cores // k threads (timed from when all have loaded; the load is printed apart)

The target (issue 44): batched k=3 ≤ 1.6 × one.

``--copy N`` measures instead what an attempt's workspace costs: copying a tree of N small files (``cp -a
--reflink=auto``, as each attempt gets one), scanning it, and finding what an attempt changed in it.

    python benchmarks/bench_attempts.py [--k 3] [--turns 3] [--tokens 48] [--repeat 2] [--threads N]
    python benchmarks/bench_attempts.py --copy 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from drivetrain.messages import Message, TextBlock
from drivetrain.models.base import ModelRequest
from drivetrain.models.local import LocalModel
from drivetrain.small.prompts import small_system_prompt

TASK = "Count the lines of each .py file in this directory, write the total to total.txt, and report the total."
RESULTS = ["app.py\nconfig.py\nutil.py", "  9 app.py\n  3 config.py\n  6 util.py\n 18 total", "(no output)"]


async def conversation(model: LocalModel, seed: int, turns: int, tokens: int) -> int:
    """One attempt's calls; returns the tokens generated."""
    system = small_system_prompt(True, True)
    history = [Message.user(TASK)]
    out = 0
    for turn in range(turns):
        request = ModelRequest(list(history), system, [], tokens, temperature=0.7, seed=seed)
        response = await model.respond(request)
        out += response.usage.output_tokens
        history += [response.message, Message("user", (TextBlock(RESULTS[turn % len(RESULTS)]),))]
    return out


async def timed(model: LocalModel, seeds: list[int], turns: int, tokens: int, together: bool) -> tuple[float, int]:
    start = time.perf_counter()
    if together:
        counts = await asyncio.gather(*(conversation(model, s, turns, tokens) for s in seeds))
    else:
        counts = [await conversation(model, s, turns, tokens) for s in seeds]
    return time.perf_counter() - start, sum(counts)


def _process(seed: int, turns: int, tokens: int, threads: int, ready, go, out) -> None:
    """One conversation in a process of its own (``processes``): load, say so, wait for the others, run."""
    started = time.perf_counter()
    model = LocalModel(n_threads=threads)
    model.prefix_cache = True
    model.load()
    ready.put(time.perf_counter() - started)
    go.wait()
    out.put(asyncio.run(conversation(model, seed, turns, tokens)))


def in_processes(seeds: list[int], turns: int, tokens: int, threads: int) -> tuple[float, int, float]:
    """(wall from when all have loaded to the last one's end, tokens out, the slowest load)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_process, args=(s, turns, tokens, threads, ready, go, out)) for s in seeds]
    for proc in procs:
        proc.start()
    load = max(ready.get() for _ in procs)
    started = time.perf_counter()
    go.set()
    made = sum(out.get() for _ in procs)
    wall = time.perf_counter() - started
    for proc in procs:
        proc.join()
    return wall, made, load


def copy_costs(files: int) -> None:
    import tempfile

    from drivetrain.small.copies import changes, copy_tree, scan

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        per = 100
        for d in range(-(-files // per)):
            (src / f"d{d}").mkdir(parents=True)
            for f in range(min(per, files - d * per)):
                (src / f"d{d}" / f"f{f}.py").write_text(f"x = {d * per + f}\n" * 20)
        size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
        started = time.perf_counter()
        copy_tree(src, Path(tmp) / "copy")
        copied = time.perf_counter() - started
        started = time.perf_counter()
        before = scan(src)
        scanned = time.perf_counter() - started
        (Path(tmp) / "copy" / "d0" / "f0.py").write_text("changed\n")
        started = time.perf_counter()
        found = changes(src, before, Path(tmp) / "copy")
        compared = time.perf_counter() - started
        print(
            f"{files:,} files, {size / 1e6:.1f} MB: copy {copied:.2f} s, scan {scanned:.2f} s, changes {compared:.2f} s"
        )
        assert list(found) == ["d0/f0.py"], found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--copy", type=int, default=0, metavar="N", help="measure a workspace copy of N files instead")
    args = p.parse_args()
    if args.copy:
        copy_costs(args.copy)
        return 0
    single = LocalModel(n_threads=args.threads)
    batched = LocalModel(n_threads=args.threads, parallel=args.k)
    single.load()
    batched._llm = single._llm  # the same weights: only the contexts differ
    for model in (single, batched):  # the system turn's KV from the disk cache, as the CLI has it (prefixcache)
        model.prefix_cache = True
        asyncio.run(conversation(model, 0, 1, 1))  # saved there once, before anything is timed
    rows: dict[str, list[tuple[float, int]]] = {"one": [], "sequential": [], "batched": [], "processes": []}
    cores = os.cpu_count() or 1
    loads: list[float] = []
    for r in range(args.repeat):  # interleaved, so load falls on all alike; fresh seeds each round
        seeds = [1000 * r + i for i in range(args.k)]
        single._loaded.reset()  # no KV left from the round before
        rows["one"].append(asyncio.run(timed(single, seeds[:1], args.turns, args.tokens, False)))
        single._loaded.reset()
        rows["sequential"].append(asyncio.run(timed(single, seeds, args.turns, args.tokens, False)))
        batched._engine = None  # a fresh context
        rows["batched"].append(asyncio.run(timed(batched, seeds, args.turns, args.tokens, True)))
        wall, made, load = in_processes(seeds, args.turns, args.tokens, max(1, cores // args.k))
        rows["processes"].append((wall, made))
        loads.append(load)
    one = statistics.median(t for t, _ in rows["one"])
    print(f"k={args.k} turns={args.turns} tokens/reply≤{args.tokens} threads={single.n_threads} repeat={args.repeat}")
    print(f"{'config':<12}{'wall s (median)':>16}{'range':>14}{'tokens out':>12}{'× one':>8}")
    for name, got in rows.items():
        walls = [t for t, _ in got]
        wall = statistics.median(walls)
        out = statistics.median(n for _, n in got)
        span = f"{min(walls):.1f}–{max(walls):.1f}"
        print(f"{name:<12}{wall:>16.1f}{span:>14}{out:>12.0f}{wall / one:>8.2f}")
    print(f"processes: {args.k} × the weights in memory, each loaded in {statistics.median(loads):.1f} s (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
