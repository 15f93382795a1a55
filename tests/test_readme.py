"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


def _uses_spark(block: str) -> bool:
    return "spark" in block.replace("pyspark_reactive", "")


@pytest.mark.parametrize("block", [b for b in BLOCKS if "test_my_streams.py" not in b
                                   and not _uses_spark(b)])
def test_usage_example_runs(block: str) -> None:
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def _connect(block: str) -> bool:
    return "local_connect_session()" in block


def test_spark_examples_run_in_one_session() -> None:
    # In README order, in one process: the first defines `spark`, the others use it.
    blocks = [b for b in BLOCKS if _uses_spark(b) and not _connect(b)]
    assert blocks and "local_session()" in blocks[0]
    # One Spark session runs every query of the README (the adapters' examples too).
    result = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True,
                            text=True, timeout=480)
    assert result.returncode == 0, result.stderr[-3000:]
    # The source example printed the rows its availableNow query read, the RecordBatch
    # example its rows and that no micro-batch exceeded maxRecordsPerTrigger, the sink
    # example the sum of the squares of 0..99 that its subscriber received, the runs on
    # demand every value once and each run's bound.
    assert result.stdout.split() == ["2345", "100000", "True",
                                     str(sum(i * i for i in range(100))),
                                     "True", "[100,", "1000,", "850]"], \
        result.stdout[-2000:]


def test_spark_connect_example_runs_in_a_process_of_its_own() -> None:
    # A process holds one Spark application: this one is a Connect server and its client.
    [block] = [b for b in BLOCKS if _connect(b)]
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["pyspark.sql.connect.session", "5"], result.stdout
