"""The short crash trial: a plain (non-replayable) publisher's query killed three times.

``benchmarks/crash_trials.py`` runs publisher -> ``format("reactive")`` with ``walLocation``
-> parquet sink in a child process, ends three runs with SIGKILL of all its processes (at
seeded moments and fault points), restarts it with the same checkpoint and log, lets it
settle, and compares what the publisher recorded before each ``on_next`` with what the sink
committed. A plain publisher never hands a value out twice, so a row the source held only
in memory at a kill is gone: what a kill loses must be a tail of its run (no row lost that
was signalled before one the sink holds, none signalled more than 2 s before the kill), and none may
reach the sink twice. Runs in a pytest process of
its own (see tests/conftest.py); the full trials are in docs/explanation/crash-trials.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRIALS = ROOT / "benchmarks" / "crash_trials.py"


def test_a_plain_publisher_loses_nothing_older_than_a_sync_across_three_kills(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(TRIALS), "--kind", "plain", "--kills", "3", "--seed", "11",
         "--fault-deadline", "20", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1200)
    report_file = tmp_path / "crash_trials.json"
    assert report_file.exists(), f"the trials wrote no report:\n{done.stderr[-3000:]}"
    [plain] = json.loads(report_file.read_text())["kinds"]
    summary = f"{done.stdout}\n{done.stderr[-2000:]}"
    assert plain["kills"] == 3, summary
    assert plain["committed_rows"] > 0, summary
    # What a kill may lose is the log's commit in flight and what came after it: a tail
    # of the run, never a row signalled before one the sink holds (see crash_trials.py).
    assert plain["holes"] == 0 and plain["stale"] == 0, (
        f"rows lost before rows kept, or long before their kill, by run: "
        f"{plain['lost_by_run']}\n{summary}")
    assert plain["duplicated"] == 0, summary
    assert plain["unexpected"] == 0, summary
    assert plain["failures"] == [], summary
    assert done.returncode == 0, summary


def _verdict(tmp_path: Path, committed: list[int], killed: float = 1001.0) -> Any:
    # Run 1 signalled 0..9, one every 100 ms from t=1000 s, and was killed at t=``killed``;
    # the final run 2 signalled 10..11.
    sys.path.insert(0, str(TRIALS.parent))
    import crash_trials

    folder = tmp_path / "plain"
    folder.mkdir(parents=True)
    lines = [f"1 {v} {1000 + v / 10:.6f}" for v in range(10)]
    lines += [f"2 {v} {1002 + v / 100:.6f}" for v in (10, 11)]
    (folder / "emitted").write_text("\n".join(lines) + "\n")
    (folder / "committed").write_text("".join(f"{v}\n" for v in committed))
    result = crash_trials.KindResult("plain", runs=[
        crash_trials.Run(1, "delay 1 s", "killed", killed=killed),
        crash_trials.Run(2, "final", "finished")])
    crash_trials._compare(result, folder, 50)
    return result


def test_the_verdict_accepts_a_lost_tail_and_fails_a_hole_or_a_stale_loss(
        tmp_path: Path) -> None:
    tail = _verdict(tmp_path / "tail", [0, 1, 2, 3, 4, 5, 6, 10, 11])
    assert (tail.lost, tail.holes, tail.stale, tail.failures) == (3, 0, 0, [])
    assert tail.lost_beyond_window == 2  # 7 and 8: 300 and 200 ms before the kill
    hole = _verdict(tmp_path / "hole", [0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11])
    assert (hole.lost, hole.holes) == (1, 1)
    assert hole.failures == ["1 rows lost that were signalled before a row of their run "
                             "that the sink holds"]
    final = _verdict(tmp_path / "final", list(range(11)))  # 11 lost in the final run
    assert (final.lost, final.holes, final.stale) == (1, 0, 1)
    assert len(final.failures) == 1 and "more than 2000 ms" in final.failures[0]
    nothing_kept = _verdict(tmp_path / "none", [10, 11])  # the kill lost all of run 1
    assert (nothing_kept.lost, nothing_kept.holes, nothing_kept.stale) == (10, 0, 0)
    assert nothing_kept.failures == []


def test_the_verdict_fails_a_tail_lost_long_before_its_kill(tmp_path: Path) -> None:
    # A log that fell 2 s behind: run 1's last rows were signalled over 2 s before the kill.
    stale = _verdict(tmp_path, [0, 1, 2, 3, 4, 10, 11], killed=1003.0)
    assert (stale.lost, stale.holes, stale.stale) == (5, 0, 5)
    assert stale.failures == ["5 rows lost that were signalled more than 2000 ms before "
                              "their kill (or in the final run)"]
