"""The demo (the README's first command) runs the whole pipeline, ends by itself and
checks its bounds."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from pyspark_reactive.demo import _offset, main

# Also runs on every older Spark line (./dev test): the whole pipeline with a slow
# subscriber, and its bounds.
pytestmark = pytest.mark.spark_lines


def test_demo_runs_and_every_bound_holds(spark: SparkSession,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--rows", "3000", "--max-records", "500", "--batch-size", "16",
                   "--slow-ms", "0.2"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "3,000 of 3,000" in out and out.rstrip().endswith("ok")
    assert "BROKEN" not in out and out.count(": held") == 3
    assert all(phase in out for phase in ("fast", "slow", "fast again"))


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--batch-size", "0"])
    assert exit_info.value.code == 2
    assert "--batch-size: must be >= 1, got 0" in capsys.readouterr().err


def test_offsets_are_read_as_each_spark_line_shows_them() -> None:
    # A query's lastProgress holds the source's offsets as JSON text on Spark 4.2+, and as
    # str() of the parsed offset (a dict's repr, or "None") on 4.0 and 4.1.
    assert _offset('{"offset": 500}') == 500
    assert _offset("{'offset': 500}") == 500
    assert _offset({"offset": 7}) == 7
    assert _offset("None") is None and _offset(None) is None and _offset("") is None
