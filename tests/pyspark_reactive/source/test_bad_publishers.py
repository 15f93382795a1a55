"""Factories and publishers that break the rules, through real streaming queries: each
gives an error that names what was wrong, and no row accepted before it is lost. The
docs/troubleshooting.md lists them beside the options and elements."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive import read_stream

__all__ = ["queries", "watch"]  # fixtures shared with test_source.py


def _fails(spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
           tmp_path: Path, **options: object) -> tuple[str, StreamingQuery, str]:
    df = reactive(spark, schema="value BIGINT", **options).load()
    query, name = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None, "the query must fail"
    return error, query, name


def test_factory_that_raises(spark: SparkSession, watch: ProgressWatch,
                             queries: list[StreamingQuery], tmp_path: Path) -> None:
    error, query, _ = _fails(spark, watch, queries, tmp_path,
                             publisher="spark_publishers:raising_factory")
    assert ("the factory of publisher='spark_publishers:raising_factory' raised "
            "ConnectionError: no broker answers at 127.0.0.1:1") in error
    assert watch.batch_sizes(query) == []


def test_factory_that_returns_none(spark: SparkSession, watch: ProgressWatch,
                                   queries: list[StreamingQuery], tmp_path: Path) -> None:
    error, query, _ = _fails(spark, watch, queries, tmp_path,
                             publisher="spark_publishers:none_factory")
    assert "publisher='spark_publishers:none_factory' returned NoneType, not a Publisher" in error
    assert watch.batch_sizes(query) == []


def test_factory_that_returns_a_generator(spark: SparkSession, watch: ProgressWatch,
                                         queries: list[StreamingQuery],
                                         tmp_path: Path) -> None:
    # A generator is no Publisher: the error says so, and how to wrap it.
    df = read_stream(spark, lambda options: (n for n in range(3)), schema="value BIGINT")
    query, _ = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None
    assert ("the factory given to read_stream() returned generator, not a Publisher (an "
            "object with subscribe(subscriber)); wrap a generator or iterable: "
            "reactive_streams.IterablePublisher(lambda: <a new iterator>)") in error
    assert watch.batch_sizes(query) == []


def test_a_generator_function_is_refused_as_a_factory_at_once(spark: SparkSession) -> None:
    def readings(options: object) -> Iterator[tuple[str, float]]:
        yield ("a", 1.0)

    with pytest.raises(TypeError, match=r"the factory readings is a generator function.*"
                       r"IterablePublisher\(lambda: readings\(options\)\)"):
        read_stream(spark, readings, schema="sensor STRING, reading DOUBLE")


def test_publisher_that_never_subscribes(spark: SparkSession, watch: ProgressWatch,
                                         queries: list[StreamingQuery], tmp_path: Path) -> None:
    error, query, _ = _fails(spark, watch, queries, tmp_path, subscribeTimeoutMs=1500,
                             publisher="spark_publishers:never_subscribes")
    assert "did not call on_subscribe within" in error and "subscribeTimeoutMs=1500" in error
    assert watch.batch_sizes(query) == []


def test_publisher_that_signals_beyond_demand(spark: SparkSession, watch: ProgressWatch,
                                              queries: list[StreamingQuery],
                                              tmp_path: Path) -> None:
    error, _, name = _fails(spark, watch, queries, tmp_path, maxRecordsPerTrigger=10,
                            extra=5, publisher="spark_publishers:beyond_demand")
    assert "§1.1: the publisher signalled 11 elements for a total demand of 10" in error
    # The source found the breach; the publisher signalled no on_error.
    assert "(spark_publishers:beyond_demand) broke the Reactive Streams rules" in error
    # The ten signalled within the demand were delivered before the error.
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(10))


def test_publisher_that_signals_after_complete(spark: SparkSession, watch: ProgressWatch,
                                               queries: list[StreamingQuery],
                                               tmp_path: Path) -> None:
    df = reactive(spark, schema="value BIGINT", maxRecordsPerTrigger=100, count=7, extra=3,
                  publisher="spark_publishers:after_complete").load()
    # availableNow ends the query once a trigger finds nothing more: the three elements
    # after on_complete must not be rows, and must not fail it.
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(7))
