"""The demo (the README's Quick start: ./dev demo) runs the whole pipeline, ends by itself and
checks its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from streaming import wait_input_rows

from pyspark_reactive.demo import main
from pyspark_reactive.progress import source_offset

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


def test_offsets_are_read_in_every_form_spark_gives_them() -> None:
    # JSON text on Spark 4.2+ and under Spark Connect; str() of the parsed offset (a dict's
    # repr, or "None") in a classic session's lastProgress and recentProgress on 4.0/4.1.
    assert source_offset('{"offset": 500}') == 500
    assert source_offset("{'offset': 500}") == 500
    assert source_offset({"offset": 7}) == 7 and source_offset({"offset": 0}) == 0
    for nothing in ("None", None, "", "  ", "null", "{}", "[1]", "{'offset': '3'}",
                    '{"offset": true}', {"topic": {"0": 5}}, "not an offset", 12):
        assert source_offset(nothing) is None, nothing


def test_offsets_of_a_real_querys_progress(spark: SparkSession, tmp_path: Path) -> None:
    # The offsets as this Spark line's classic session gives them, in both of the query's
    # forms: recentProgress (objects) and lastProgress (a dict).
    numbers = (spark.readStream.format("reactive").option("publisher", "range")
               .option("count", 1500).option("maxRecordsPerTrigger", 500).load())
    query = (numbers.writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        wait_input_rows(query, 1500)
        progress = [p for p in query.recentProgress if p.numInputRows]
        last = query.lastProgress
    finally:
        query.stop()
    sources = [p.sources[0] for p in progress]
    assert all(isinstance(s.endOffset, str) for s in sources), [s.endOffset for s in sources]
    starts = [source_offset(s.startOffset) for s in sources]
    ends = [source_offset(s.endOffset) for s in sources]
    assert starts[0] in (None, 0), sources[0].startOffset
    assert [starts[0] or 0, *ends[:-1]] == [start or 0 for start in starts]
    assert [end - (start or 0) for start, end in zip(starts, ends, strict=True)] == [
        p.numInputRows for p in progress]
    assert ends[-1] == 1500
    # latestOffset: what the source had received when it cut the batch (Spark 4.2+), the
    # batch's end on 4.0/4.1; never behind the end.
    latest = [source_offset(s.latestOffset) for s in sources]
    assert all(offset is not None and offset >= end
               for offset, end in zip(latest, ends, strict=True)), [
                   s.latestOffset for s in sources]
    assert last is not None
    assert source_offset(last["sources"][0]["endOffset"]) == 1500, last["sources"][0]
