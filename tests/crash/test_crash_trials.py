"""The short crash trial: a plain (non-replayable) publisher's query killed three times.

``benchmarks/crash_trials.py`` runs publisher -> ``format("reactive")`` with ``walLocation``
-> parquet sink in a child process, ends three runs with SIGKILL of all its processes (at
seeded moments and fault points), restarts it with the same checkpoint and log, lets it
settle, and compares what the publisher recorded before each ``on_next`` with what the sink
committed. A plain publisher never hands a value out twice, so a row the source held only
in memory at a kill is gone: none may be lost that was signalled more than ``walSyncMs``
+ 100 ms before its kill, and none may reach the sink twice. Runs in a pytest process of
its own (see tests/conftest.py); the full trials are in docs/explanation/crash-trials.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert plain["lost_beyond_window"] == 0, (
        f"rows lost that were signalled long before their kill, by run: "
        f"{plain['lost_by_run']}\n{summary}")
    assert plain["duplicated"] == 0, summary
    assert plain["unexpected"] == 0, summary
    assert plain["failures"] == [], summary
    assert done.returncode == 0, summary
