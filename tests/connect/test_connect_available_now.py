"""``publish(trigger={"availableNow": True})`` from a Spark Connect client, on every line.

The client holds only the unresolved plan: it recognises the reactive source by its names
among the streaming reads, and warns (:class:`AvailableNowWarning`) where its pyspark has
no admission control for Python sources, where Spark runs such a run as one micro-batch
(tests/pyspark_reactive/source/test_available_now_lines.py: the same in classic mode).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from test_available_now_lines import Collect

from pyspark_reactive import AvailableNowWarning, publish
from pyspark_reactive.source.admission import ADMISSION_CONTROL

# On the older lines only where Spark has no admission control for Python sources (4.0,
# 4.1): where it has (4.2), the run is the newest pyspark's, which tests/connect runs whole.
pytestmark = [] if ADMISSION_CONTROL else [pytest.mark.spark_lines]


def _run(df: Any, checkpoint: Path) -> tuple[list[Any], list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        publisher = publish(df, element="tuple", trigger={"availableNow": True},
                            checkpointLocation=checkpoint)
    subscriber = Collect()
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(180) and subscriber.error is None, subscriber.error
    return subscriber.elements, [w for w in caught
                                 if issubclass(w.category, AvailableNowWarning)]


def test_publish_warns_for_the_reactive_source_where_available_now_runs_one_batch(
        spark: SparkSession, tmp_path: Path) -> None:
    # Two batches' worth where admission control runs the whole run (each batch of
    # publish() under Connect costs seconds: two show the run goes on past the first).
    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", 450).option("maxRecordsPerTrigger", 300)
          .option("fillWaitMs", 30000).load())
    rows, told = _run(df.filter("value >= 0"), tmp_path / "checkpoint")
    if ADMISSION_CONTROL:
        assert told == [] and len(rows) == 450
    else:
        [warning] = told
        assert "Spark Connect client's pyspark" in str(warning.message)
        assert "Python data source reactive:" in str(warning.message)
        assert warning.filename == __file__
        assert len(rows) == 300


def test_publish_does_not_warn_for_files(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    spark.range(25).write.parquet(str(data))
    df = spark.readStream.schema("id BIGINT").parquet(str(data))
    rows, told = _run(df, tmp_path / "checkpoint")
    assert told == []
    assert sorted(r[0] for r in rows) == list(range(25))
