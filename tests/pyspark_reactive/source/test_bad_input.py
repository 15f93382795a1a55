"""The bad-input matrix (docs/troubleshooting.md): every kind of invalid option value,
unknown options, and every kind of malformed element, each giving an error that names what
was wrong and what is accepted, and losing no row accepted before it.

Option values and elements are checked where they are validated (fast, no Spark); a
representative few go through real streaming queries. The publisher-behaviour rows of the
matrix (factories, on_subscribe, demand) are in test_bad_publishers.py.
"""

from __future__ import annotations

import datetime
import decimal
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive import DefaultSource, read_stream
from pyspark_reactive.source.options import (
    DEFAULT_SUBSCRIBE_TIMEOUT_MS,
    DEFAULT_WAL_SYNC_MS,
    DEFAULT_WAL_SYNC_ROWS,
    SOURCE_OPTIONS,
    OptionError,
    check_wal_location,
    parse_source_options,
    resolve_factory,
    warn_unknown_options,
)
from pyspark_reactive.source.rows import RowConversionError, RowConverter

__all__ = ["queries", "watch"]  # fixtures shared with test_source.py

COUNT_MAX = "9223372036854775807"
MS_MAX = "2147483647"

# option -> (smallest accepted value, largest accepted value)
INTEGER_OPTIONS = {
    "maxRecordsPerTrigger": (1, COUNT_MAX),
    "numPartitions": (1, COUNT_MAX),
    "availableNowMaxRecords": (0, COUNT_MAX),
    "walSyncRows": (1, COUNT_MAX),
    "fillWaitMs": (0, MS_MAX),
    "walSyncMs": (1, MS_MAX),
    "subscribeTimeoutMs": (1, MS_MAX),
    "fillTimeoutMs": (1, MS_MAX),
}

# kind of invalid value -> (value, what the message says about it); {min} and {max} are
# the option's bounds.
INVALID_INTEGERS = {
    "not a number": ("ten", "'ten' is not a whole number"),
    "a float": ("2.5", "'2.5' is not a whole number"),
    "a whole float": ("10.0", "'10.0' is not a whole number"),
    "an exponent": ("1e6", "'1e6' is not a whole number"),
    "underscores": ("1_000", "'1_000' is not a whole number"),
    "hexadecimal": ("0x10", "'0x10' is not a whole number"),
    "non-ASCII digits": ("\u0663", "'\u0663' is not a whole number"),
    "negative": ("-5", "-5 is below {min}"),
    "below the minimum": ("{below}", "{below} is below {min}"),
    "empty": ("", "it is empty"),
    "whitespace": ("  \t", "it is blank"),
    "inner whitespace": ("1 000", "'1 000' is not a whole number"),
    "beyond the maximum": ("{above}", "it is above {max}"),
    "beyond 2**63-1": ("9223372036854775808", "it is above {max}"),
    "thousands of digits": ("9" * 5000, "it is above {max}"),
}


def _matrix() -> list[Any]:
    cases = []
    for option, (low, high) in INTEGER_OPTIONS.items():
        for kind, (value, problem) in INVALID_INTEGERS.items():
            fill = {"min": low, "max": high, "below": low - 1, "above": int(high) + 1}
            cases.append(pytest.param(option, value.format(**fill), problem.format(**fill),
                                      low, high, id=f"{option}-{kind}"))
    return cases


@pytest.mark.parametrize(("option", "value", "problem", "low", "high"), _matrix())
def test_every_integer_option_refuses_each_kind_of_invalid_value(
        option: str, value: str, problem: str, low: int, high: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_source_options({"publisher": "range", option: value})
    error = raised.value
    assert (error.option, error.value) == (option, value)
    accepted = "a positive integer" if low == 1 else f"an integer >= {low}"
    message = str(error)
    shown = repr(value) if len(value) < 60 else repr(value)[:40]
    assert message.startswith(f"reactive source: option {option}={shown}"), message
    assert f"is not accepted: {accepted}, at most {high}" in message, message
    assert message.endswith(problem), message


@pytest.mark.parametrize(("option", "low", "high"), [
    pytest.param(option, low, high, id=option) for option, (low, high) in INTEGER_OPTIONS.items()])
def test_the_bounds_and_spaces_around_are_accepted(option: str, low: int, high: str) -> None:
    attribute = re.sub(r"(?<!^)([A-Z])", r"_\1", option).lower()
    for text, value in [(str(low), low), (high, int(high)), (f" +{low + 7} ", low + 7)]:
        parsed = parse_source_options({"publisher": "range", option.upper(): text,
                                       "walLocation": "/unused"})
        assert getattr(parsed, attribute) == value, text


def test_defaults_of_the_new_options() -> None:
    parsed = parse_source_options({"publisher": "range"})
    assert (parsed.wal_sync_ms, parsed.wal_sync_rows, parsed.subscribe_timeout_ms) == (
        DEFAULT_WAL_SYNC_MS, DEFAULT_WAL_SYNC_ROWS, DEFAULT_SUBSCRIBE_TIMEOUT_MS)
    assert parsed.schema is None
    # 100 batches of the largest demand is more than a long holds: capped, not overflowed.
    huge = parse_source_options({"publisher": "range", "maxRecordsPerTrigger": COUNT_MAX})
    assert huge.available_now_max_records == int(COUNT_MAX)


@pytest.mark.parametrize(("options", "message"), [
    pytest.param({}, "option publisher=None is not accepted: a built-in name (mqtt, nats, "
                 "rabbitmq, range, redis, rsocket, sse, websocket) or an import path "
                 "'package.module:factory'; it is required", id="publisher-missing"),
    pytest.param({"publisher": ""}, "publisher='' is not accepted: a built-in name",
                 id="publisher-empty"),
    pytest.param({"publisher": " \t"}, "publisher=' \\t' is not accepted", id="publisher-blank"),
    pytest.param({"publisher": "range", "walLocation": ""},
                 "walLocation='' is not accepted: a local path or a filesystem URI pyarrow "
                 "understands (file:/path, hdfs://, s3://, ...); it is empty", id="wal-empty"),
    pytest.param({"publisher": "range", "walLocation": "  "}, "; it is blank", id="wal-blank"),
    pytest.param({"publisher": "range", "schema": " "},
                 "schema=' ' is not accepted: a DDL string such as 'id BIGINT, name STRING' "
                 "(or no schema option); it is blank", id="schema-blank"),
    pytest.param({"publisher": "range", "maxRecordsPerTrigger": "5",
                  "MAXRECORDSPERTRIGGER": "6"},
                 "maxRecordsPerTrigger='6' is not accepted: one value; it is also given as "
                 "maxRecordsPerTrigger='5' (option names are case-insensitive)",
                 id="given-twice"),
])
def test_other_options_refuse_each_kind_of_invalid_value(options: dict[str, str],
                                                         message: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_source_options(options)
    assert message in str(raised.value), str(raised.value)


@pytest.mark.parametrize(("publisher", "message"), [
    ("no_colon_here", "'package.module:factory'"),
    ("no_such_module_xyz:make", "importing 'no_such_module_xyz' failed"),
    ("spark_publishers:no_such_factory", "has no attribute 'no_such_factory'"),
    ("spark_publishers:UNBOUNDED", "'spark_publishers:UNBOUNDED' is a int, not callable"),
    (":make", "'package.module:factory'"),
])
def test_a_publisher_that_names_no_factory(publisher: str, message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)) as raised:
        resolve_factory(publisher)
    assert raised.value.option == "publisher" and raised.value.value == publisher


def test_a_wal_location_that_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OptionError, match="walLocation=.* a writable directory; writing "
                                          "there failed"):
        check_wal_location(str(blocker / "wal"))


# -- through Spark: options checked when the DataFrame is made ---------------------------

@pytest.mark.parametrize(("option", "value", "message"), [
    (option, value, f"{option}={value!r} is not accepted")
    for option, value in [("maxRecordsPerTrigger", " "), ("fillWaitMs", "-1"),
                          ("numPartitions", "1.5"), ("availableNowMaxRecords", "all"),
                          ("walSyncMs", "0"), ("walSyncRows", "9223372036854775808"),
                          ("subscribeTimeoutMs", "30s"), ("walLocation", "")]])
def test_each_option_is_checked_at_load(spark: SparkSession, option: str, value: str,
                                        message: str) -> None:
    # Spark passes the names lower-cased; the error still names the option as documented.
    with pytest.raises(Exception, match=re.escape(message)):
        reactive(spark, publisher="range", **{option: value}).load()


def test_with_schema_an_invalid_option_fails_the_query_before_its_first_batch(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # With .schema(...) Spark (4.0 to 4.3) does not create the Python data source at
    # load(): it does so when the query initialises its sources, in the query's thread,
    # after start() has returned. The query then ends before any batch: nothing planned,
    # nothing in the checkpoint's offsets, the publisher never subscribed.
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                  maxRecordsPerTrigger="ten").schema("value BIGINT").load()
    query, _ = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query, timeout=60)
    assert error is not None
    assert ("option maxRecordsPerTrigger='ten' is not accepted: a positive integer, at most "
            f"{COUNT_MAX}; 'ten' is not a whole number") in error, error
    assert watch.progress[str(query.runId)] == []
    offsets = tmp_path / f"checkpoint-{query.name}" / "offsets"
    assert not offsets.exists() or not list(offsets.glob("[0-9]*"))
    assert not record.exists(), "the publisher must not be subscribed"


def test_the_schema_option_checks_every_option_at_load(spark: SparkSession) -> None:
    # The supported way to have every option checked by load() with a schema of one's
    # own: give it as the schema option, which Spark asks the data source for at load().
    schema = "id BIGINT, name STRING"
    with pytest.raises(Exception, match=re.escape("maxRecordsPerTrigger='ten'")):
        reactive(spark, publisher="spark_publishers:pairs", count=3, schema=schema,
                 maxRecordsPerTrigger="ten").load()
    df = reactive(spark, publisher="spark_publishers:pairs", count=3, schema=schema).load()
    assert df.schema.simpleString() == "struct<id:bigint,name:string>"


def test_read_stream_checks_options_in_the_callers_process(spark: SparkSession) -> None:
    with pytest.raises(OptionError, match="walSyncMs='0' is not accepted"):
        read_stream(spark, _numbers, schema="value BIGINT", walSyncMs=0)


def _numbers(options: Any) -> Any:
    from reactive_streams.publishers import IterablePublisher
    return IterablePublisher(range(3))


# -- unknown options ----------------------------------------------------------------------

def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "pyspark_reactive.source" and r.levelno == logging.WARNING]


@pytest.mark.parametrize(("typo", "meant"), [
    ("maxRecordPerTrigger", "maxRecordsPerTrigger"), ("maxOffsetsPerTrigger",
                                                      "maxRecordsPerTrigger"),
    ("fillWait", "fillWaitMs"), ("walLocaton", "walLocation"), ("numPartition", "numPartitions"),
    ("subscribeTimeout", "subscribeTimeoutMs"), ("walSyncRow", "walSyncRows"),
    ("PUBLISHERS", "publisher"),
])
def test_an_option_close_to_a_known_one_is_warned_about(
        caplog: pytest.LogCaptureFixture, typo: str, meant: str) -> None:
    with caplog.at_level(logging.WARNING, logger="pyspark_reactive.source"):
        parsed = parse_source_options({"publisher": "range", typo: "5"})
    [warning] = _warnings(caplog)
    assert f"option {typo!r} is not an option of the source; did you mean {meant!r}?" in warning
    assert ", ".join(SOURCE_OPTIONS) in warning and "case-insensitive" in warning
    assert parsed.raw[typo] == "5", "it still reaches the publisher's factory"


def test_options_of_publishers_and_known_options_in_any_case_are_not_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    # Options the test and built-in publishers read: none is close to a source option.
    factory_options = ["count", "start", "rowsPerSecond", "recordTo", "emittedTo", "message",
                       "badAt", "ledger", "total", "shift", "topic", "host", "port"]
    options = {name: "1" for name in factory_options}
    options.update({name.upper(): "1" for name in SOURCE_OPTIONS if name != "walLocation"})
    options["PUBLISHER"] = "range"
    options["SCHEMA"] = "value BIGINT"
    with caplog.at_level(logging.WARNING, logger="pyspark_reactive.source"):
        assert warn_unknown_options(options) == []
    assert _warnings(caplog) == []


def test_the_data_source_warns_when_spark_creates_it(caplog: pytest.LogCaptureFixture) -> None:
    # Spark creates DefaultSource (at load(), or as the query starts) with the options it
    # was given, lower-cased; the warning goes to that Python worker's log (stderr).
    with caplog.at_level(logging.WARNING, logger="pyspark_reactive.source"):
        DefaultSource({"publisher": "range", "maxrecordpertrigger": "5"})
    [warning] = _warnings(caplog)
    assert "'maxrecordpertrigger'" in warning and "'maxRecordsPerTrigger'" in warning


def test_read_stream_warns_in_the_callers_process(spark: SparkSession,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pyspark_reactive.source"):
        read_stream(spark, _numbers, schema="value BIGINT", fillWait=500)
    assert any("'fillWait'" in w and "'fillWaitMs'" in w for w in _warnings(caplog))


# -- malformed elements, at the converter -------------------------------------------------

PAIR = StructType([StructField("id", LongType()), StructField("name", StringType())])
STRICT = StructType([StructField("id", LongType(), nullable=False),
                     StructField("name", StringType())])
GOOD = [(i, f"n{i}") for i in range(5)]

# case -> (schema, bad element, column named (None: the element's shape), what the
# message says is wrong or accepted)
ELEMENT_CASES: dict[str, tuple[StructType, Any, str | None, str]] = {
    "tuple too short": (PAIR, (5,), None, "1 value for 2 columns"),
    "tuple too long": (PAIR, (5, "a", "b"), None, "3 values for 2 columns"),
    "list too long": (PAIR, [5, "a", "b"], None, "3 values for 2 columns"),
    "empty tuple": (PAIR, (), None, "0 values for 2 columns"),
    "dict with an unknown key": (PAIR, {"id": 5, "nmae": "x"}, None,
                                 "key 'nmae' is not a column (columns: id, name)"),
    "Row with an unknown field": (PAIR, Row(id=5, other=1), None,
                                  "Row field 'other' is not a column"),
    "a scalar for two columns": (PAIR, 5, None,
                                 "a tuple, list, dict or Row of 2 values is needed"),
    "None as the element": (PAIR, None, None, "None is not a row"),
    "str for bigint": (PAIR, ("five", "n5"), "id", "bigint takes an int"),
    "float for bigint": (PAIR, (5.5, "n5"), "id",
                         "bigint takes an int, and a float is not one (it would be truncated)"),
    "whole float for bigint": (PAIR, (5.0, "n5"), "id", "bigint takes an int, and a float"),
    "float for int, one column": (StructType([StructField("n", IntegerType())]), 2.5, "n",
                                  "int takes an int, and a float"),
    "Decimal for bigint": (PAIR, (decimal.Decimal("5.5"), "n5"), "id",
                           "bigint takes an int, and a Decimal"),
    "int out of range": (StructType([StructField("n", IntegerType())]), 2**31, "n",
                         "int takes an int from -2147483648 to 2147483647"),
    "bool for bigint": (PAIR, (True, "n5"), "id", "Expected integer, got bool"),
    "str for double": (StructType([StructField("x", DoubleType())]), "1.5", "x",
                       "double takes a float or an int"),
    "str for boolean": (StructType([StructField("b", BooleanType())]), "yes", "b",
                        "boolean takes a bool"),
    "str for date": (StructType([StructField("d", DateType())]), "2026-01-02", "d",
                     "date takes a date"),
    "str for binary": (StructType([StructField("raw", BinaryType())]), "text", "raw",
                       "binary needs bytes or bytearray"),
    "int for an array": (StructType([StructField("xs", ArrayType(LongType()))]), 5, "xs",
                         "array<bigint> needs a list"),
    "list for a map": (StructType([StructField("m", MapType(StringType(), LongType()))]),
                       [1], "m", "needs a dict"),
    "None in a non-nullable column": (STRICT, (None, "n5"), "id", "the column is not nullable"),
    "dict for bigint": (PAIR, ({"a": 1}, "n5"), "id",
                        "bigint takes one value, not a dict: declare the column ARRAY, MAP or "
                        "STRUCT"),
    "list for bigint": (PAIR, ([1, 2], "n5"), "id", "bigint takes one value, not a list"),
    "dict for string": (PAIR, (5, {"a": 1}), "name", "string takes one value, not a dict"),
    "list for string": (PAIR, (5, ["a"]), "name", "string takes one value, not a list"),
    "tuple for string": (PAIR, (5, ("a", "b")), "name", "string takes one value, not a tuple"),
    "set for string": (PAIR, (5, {"a"}), "name", "string takes one value, not a set"),
    "bytes for string": (PAIR, (5, b"caf\xc3\xa9"), "name",
                         "string takes text, and bytes is not text: decode it "
                         "(value.decode('utf-8')) or declare the column BINARY"),
    "bytearray for string": (PAIR, (5, bytearray(b"x")), "name", "bytearray is not text"),
    "lone surrogate": (PAIR, (5, "ab\ud800"), "name",
                       "not valid text: '\\ud800' at position 2 cannot be encoded as UTF-8 "
                       "(surrogates not allowed)"),
    "lone surrogate in an array": (
        StructType([StructField("tags", ArrayType(StringType()))]), ["ok", "\udcff"], "tags",
        "not valid text"),
    "lone surrogate, one-column string": (StructType([StructField("s", StringType())]),
                                          "\udfff", "s", "not valid text"),
}


def _good_for(schema: StructType) -> list[Any]:
    if schema in (PAIR, STRICT):
        return list(GOOD)
    # A value each of the other one-column schemas accepts.
    sample = {"n": 1, "x": 1.0, "b": True, "raw": b"r", "xs": [1], "m": {"k": 1},
              "tags": ["t"], "s": "s", "d": datetime.date(2026, 1, 2)}
    return [sample[schema.fieldNames()[0]]] * 5


@pytest.mark.parametrize(("schema", "bad", "column", "reason"), [
    pytest.param(*case, id=name) for name, case in ELEMENT_CASES.items()])
def test_each_kind_of_malformed_element_is_named_and_the_rows_before_it_kept(
        schema: StructType, bad: Any, column: str | None, reason: str) -> None:
    good = _good_for(schema)
    later = good[:2]  # elements after the bad one are not converted
    batch, error = RowConverter(schema).convert([*good, bad, *later], 1000)
    assert isinstance(error, RowConversionError)
    assert (error.offset, error.column) == (1000 + len(good), column)
    assert error.value is bad or error.value == bad or (
        isinstance(bad, tuple) and error.value in bad)
    message = str(error)
    assert message.startswith(f"element at offset {1000 + len(good)}: "), message
    if column is not None:
        assert f"column {column!r} (" in message, message
    assert reason in message, message
    assert batch.num_rows == len(good)
    assert batch.to_pylist() == RowConverter(schema).convert(good, 0)[0].to_pylist()


def test_a_bad_element_first_keeps_nothing_and_loses_nothing_else() -> None:
    batch, error = RowConverter(PAIR).convert([(0, b"x"), *GOOD], 0)
    assert batch.num_rows == 0 and error is not None and error.offset == 0


def test_strings_still_take_any_scalar_as_spark_does() -> None:
    batch, error = RowConverter(PAIR).convert([(1, 7), (2, 2.5), (3, True), (4, None)], 0)
    assert error is None
    assert batch.column(1).to_pylist() == ["7", "2.5", "true", None]


# -- malformed elements, end to end -------------------------------------------------------

def _run(spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
         tmp_path: Path, factory: Callable[[Any], Any], schema: str,
         **options: Any) -> tuple[str, str | None]:
    """Run ``factory``'s publisher into a memory table: its name and the query's error."""
    df = read_stream(spark, factory, schema=schema, **options)
    query, name = to_memory(df, queries, tmp_path)
    return name, watch.wait_terminated(query, timeout=60)


def test_a_nested_value_for_a_string_column_fails_the_query_after_the_rows_before(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    def factory(options: Any) -> Any:
        from reactive_streams.publishers import IterablePublisher
        return IterablePublisher([(i, {"a": i} if i == 12 else f"n{i}") for i in range(30)])

    name, error = _run(spark, watch, queries, tmp_path, factory, "id BIGINT, name STRING",
                        maxRecordsPerTrigger=5)
    assert error is not None
    assert ("element at offset 12: column 'name' (string) cannot hold {'a': 12} (dict): string "
            "takes one value, not a dict") in error, error
    got = sorted((r.id, r.name) for r in spark.table(name).collect())
    assert got == [(i, f"n{i}") for i in range(12)]


def test_a_lone_surrogate_fails_the_query_after_the_rows_before(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    def factory(options: Any) -> Any:
        from reactive_streams.publishers import IterablePublisher
        return IterablePublisher(["\ud800" if i == 7 else f"w{i}" for i in range(20)])

    name, error = _run(spark, watch, queries, tmp_path, factory, "word STRING",
                       maxRecordsPerTrigger=4)
    assert error is not None
    assert "element at offset 7: column 'word' (string)" in error, error
    assert "not valid text" in error
    assert sorted(r.word for r in spark.table(name).collect()) == sorted(
        f"w{i}" for i in range(7))


def test_a_none_element_fails_the_query_after_the_rows_before(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # §2.13: None is never an element. The source refuses it (TypeError to the caller of
    # on_next); a reference publisher then signals on_error, which fails the query.
    def factory(options: Any) -> Any:
        from reactive_streams.publishers import IterablePublisher
        return IterablePublisher([None if i == 9 else i for i in range(15)])

    name, error = _run(spark, watch, queries, tmp_path, factory, "value BIGINT",
                       maxRecordsPerTrigger=4)
    assert error is not None and "§2.13" in error, error
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(9))


def test_a_publisher_that_signals_none_itself_fails_the_query_after_the_rows_before(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # A hand-written publisher calling on_next(None): the source raises TypeError to it
    # (§2.13) and must end the stream there too, or the query would wait for ever.
    def factory(options: Any) -> Any:
        class Signals:
            def __init__(self, subscriber: Any) -> None:
                self.subscriber = subscriber
                self.sent = False

            def request(self, n: int) -> None:
                if not self.sent:
                    self.sent = True
                    for element in [0, 1, 2, 3, 4, 5, None, 7]:
                        self.subscriber.on_next(element)

            def cancel(self) -> None:
                pass

        class HandWritten:
            def subscribe(self, subscriber: Any) -> None:
                subscriber.on_subscribe(Signals(subscriber))

        return HandWritten()

    name, error = _run(spark, watch, queries, tmp_path, factory, "value BIGINT",
                       maxRecordsPerTrigger=10)
    assert error is not None and "§2.13" in error, error
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(6))


def test_an_element_larger_than_a_partition_travels_whole_and_loses_nothing(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # Partitions aim at 1 MiB of Arrow each; one element of 3 MiB cannot fit that budget
    # and is delivered all the same (Spark warns about the task's size), through the
    # write-ahead log too.
    big = 3 << 20

    def factory(options: Any) -> Any:
        from reactive_streams.publishers import IterablePublisher
        return IterablePublisher(lambda: ((i, "y" * big if i == 10 else f"n{i}")
                                          for i in range(25)))

    df = read_stream(spark, factory, schema="id BIGINT, name STRING", maxRecordsPerTrigger=8,
                     fillWaitMs=30000, walLocation=tmp_path / "wal")
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 25)
    got = {r.id: r.size for r in spark.sql(f"SELECT id, length(name) AS size FROM {name}")
           .collect()}
    assert got == {i: big if i == 10 else len(f"n{i}") for i in range(25)}
