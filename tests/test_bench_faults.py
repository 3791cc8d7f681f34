"""benchmarks/bench_faults.py at a small scale: a sweep with every kind of fault, SIGKILLed a third of the way and
run again, passes every task, runs no tool twice by a retry, bills what the upstream billed and loses nothing."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

from bench_faults import run
from drivetrain.testing import FAULT_KINDS

# the sweep's request and stream-idle timeouts: a reply slower than this from load alone reads as a fault and is
# asked again, which the script does not hold (400 ms was too short with four test workers on two cores)
TIMEOUT_MS = 1000


def test_a_held_sweep_killed_and_resumed_keeps_every_promise_but_reruns(tmp_path):
    f = run(
        tasks=24, rate=0.1, seed=3, concurrency=6, kill_at=0.33, timeout_ms=TIMEOUT_MS, root=tmp_path, resumable=False
    )
    assert set(f["injected"]) == set(FAULT_KINDS), f["injected"]  # every kind of the table, at least once
    assert f["passed"] == 24, f["statuses"]
    assert f["tools_twice_by_retry"] == []
    assert f["usage_mismatches"] == []
    assert f["lost"] == 0 and f["finished_run_again"] == []
    assert 8 <= f["finished_before_kill"] < 24
    assert f["interrupted_listed"] == len(f["interrupted"])
    assert set(f["tools_twice_by_rerun"]) <= set(f["interrupted"])
    assert len(f["tools_twice_by_rerun"]) <= f["interrupted_with_tools_listed"]  # each one named beforehand


def test_a_default_sweep_killed_and_resumed_runs_no_tool_twice_and_bills_exactly(tmp_path):
    f = run(tasks=24, rate=0.1, seed=5, concurrency=6, kill_at=0.33, timeout_ms=TIMEOUT_MS, root=tmp_path)
    assert set(f["injected"]) == set(FAULT_KINDS), f["injected"]
    assert f["passed"] == 24, f["statuses"]
    assert f["tools_twice_by_retry"] == [] and f["tools_twice_by_rerun"] == []
    assert f["usage_mismatches"] == [] and f["lost"] == 0 and f["finished_run_again"] == []
    assert f["interrupted_listed"] == len(f["interrupted"]) > 0
