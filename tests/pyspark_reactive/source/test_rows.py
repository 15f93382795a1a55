"""Elements to Arrow: every accepted shape, the good prefix before a bad element, a round
trip of the batch through a real Spark Python data source, and the column-at-a-time fast
paths giving exactly the batches and errors of the element-by-element reference
(``fast=False``) under several local time zones."""

from __future__ import annotations

import datetime
import decimal
import inspect
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_reactive.source import rows as rows_module
from pyspark_reactive.source.rows import RowConversionError, RowConverter, arrow_schema

# Also runs on every older Spark line (./dev test): rows to Arrow, by the line's own converters.
pytestmark = pytest.mark.spark_lines

PAIR = StructType([StructField("id", LongType()), StructField("name", StringType())])


def one(name: str, data_type: DataType, nullable: bool = True) -> StructType:
    return StructType([StructField(name, data_type, nullable)])


def rows(schema: StructType, elements: list[Any], offset: int = 0) -> list[dict[str, Any]]:
    batch, error = RowConverter(schema).convert(elements, offset)
    assert error is None, error
    assert batch.schema.equals(arrow_schema(schema))
    result: list[dict[str, Any]] = batch.to_pylist()
    return result


def test_every_shape_of_a_row() -> None:
    elements = [(1, "a"), [2, "b"], {"id": 3, "name": "c"}, {"name": "d"},
                Row(name="e", id=5), Row(6, "f")]  # type: ignore[call-overload]
    assert rows(PAIR, elements) == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"},
        {"id": None, "name": "d"}, {"id": 5, "name": "e"}, {"id": 6, "name": "f"}]


def test_scalars_fill_a_one_column_schema() -> None:
    schema = StructType([StructField("value", LongType())])
    assert rows(schema, [1, 2, None, (4,), {"value": 5}]) == [
        {"value": v} for v in (1, 2, None, 4, 5)]


def test_strings_accept_any_value_as_spark_does() -> None:
    schema = StructType([StructField("value", StringType())])
    assert rows(schema, ["a", 7, 2.5, True]) == [
        {"value": v} for v in ("a", "7", "2.5", "true")]


def test_a_nested_column_takes_each_element_whole() -> None:
    schema = StructType([StructField("tags", ArrayType(StringType()))])
    assert rows(schema, [["a", "b"], []]) == [{"tags": ["a", "b"]}, {"tags": []}]
    point = StructType([StructField("p", StructType([StructField("x", LongType()),
                                                     StructField("y", LongType())]))])
    assert rows(point, [{"x": 1, "y": 2}, Row(x=3, y=4)]) == [
        {"p": {"x": 1, "y": 2}}, {"p": {"x": 3, "y": 4}}]


def test_nested_and_temporal_types() -> None:
    schema = StructType([
        StructField("when", TimestampType()), StructField("day", DateType()),
        StructField("price", DecimalType(10, 2)), StructField("ok", BooleanType()),
        StructField("scores", MapType(StringType(), DoubleType())),
    ])
    when = datetime.datetime(2026, 11, 22, 12, 30, tzinfo=datetime.timezone.utc)
    (row,) = rows(schema, [(when, datetime.date(2026, 1, 2), decimal.Decimal("1.5"), True,
                            {"a": 0.5})])
    assert row["when"] == when
    assert row["day"] == datetime.date(2026, 1, 2)
    assert row["price"] == decimal.Decimal("1.50")
    assert row["ok"] is True and row["scores"] == [("a", 0.5)]


def test_bad_value_keeps_the_rows_before_it_and_names_offset_column_value() -> None:
    elements: list[tuple[Any, str]] = [(i, f"n{i}") for i in range(10)]
    elements[6] = (6, "fine")
    elements[7] = ("seven", "n7")
    batch, error = RowConverter(PAIR).convert(elements, 1000)
    assert batch.num_rows == 7 and batch.column(0).to_pylist() == list(range(7))
    assert isinstance(error, RowConversionError)
    assert (error.offset, error.column, error.value) == (1007, "id", "seven")
    assert str(error).startswith("element at offset 1007: column 'id' (bigint) cannot hold "
                                 "'seven' (str)")


def test_the_earliest_bad_row_wins_across_columns() -> None:
    schema = StructType([StructField("a", LongType()), StructField("b", LongType())])
    batch, error = RowConverter(schema).convert([(1, 1), (2, "x"), ("y", 3)], 0)
    assert error is not None and (error.offset, error.column) == (1, "b")
    assert batch.num_rows == 1


def test_wrong_shapes_are_named() -> None:
    converter = RowConverter(PAIR)
    for element, reason in [((1, "a", "extra"), "3 values for 2 columns"),
                            ({"id": 1, "nmae": "x"}, "key 'nmae' is not a column"),
                            (Row(id=1, other=2), "Row field 'other' is not a column"),
                            (42, "a tuple, list, dict or Row of 2 values is needed")]:
        batch, error = converter.convert([(0, "ok"), element], 5)
        assert batch.num_rows == 1
        assert error is not None and error.offset == 6 and error.column is None
        assert reason in str(error), str(error)


def test_none_in_a_non_nullable_column() -> None:
    schema = StructType([StructField("id", LongType(), nullable=False)])
    batch, error = RowConverter(schema).convert([1, 2, None, 4], 0)
    assert batch.num_rows == 2
    assert error is not None and error.offset == 2 and "not nullable" in str(error)


def test_integer_overflow() -> None:
    schema = StructType([StructField("n", IntegerType())])
    batch, error = RowConverter(schema).convert([1, 2**31], 0)
    assert batch.num_rows == 1
    assert error is not None and error.offset == 1 and "(int)" in str(error)


def test_long_values_are_shortened_in_the_message() -> None:
    schema = StructType([StructField("n", LongType())])
    _, error = RowConverter(schema).convert(["x" * 500], 0)
    # The value (80 characters) and the reason (160) are shortened, not the 500 given.
    assert error is not None and len(str(error)) < 350 and "..." in str(error)


def test_the_schema_is_the_one_spark_checks_batches_against() -> None:
    schema = StructType([
        StructField("when", TimestampType(), nullable=False),
        StructField("ntz", TimestampNTZType()),
        StructField("point", StructType([StructField("x", DoubleType(), nullable=False)])),
        StructField("m", MapType(StringType(), ArrayType(LongType()))),
        StructField("price", DecimalType(12, 3)), StructField("raw", BinaryType()),
    ])
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        expected = to_arrow_schema(schema, timezone="UTC")  # what Spark 4.1+ compares with
    else:
        expected = to_arrow_schema(schema)  # Spark 4.0: timestamp_utc=True
    assert arrow_schema(schema).equals(expected)
    assert arrow_schema(schema).field("when").type == pa.timestamp("us", tz="UTC")
    assert not arrow_schema(schema).field("when").nullable
    batch, error = RowConverter(schema).convert([], 0)
    assert error is None and batch.num_rows == 0 and batch.schema.equals(expected)


@pytest.mark.parametrize(("data_type", "low", "high"), [
    (ByteType(), -2**7, 2**7 - 1), (ShortType(), -2**15, 2**15 - 1),
    (IntegerType(), -2**31, 2**31 - 1), (LongType(), -2**63, 2**63 - 1)])
def test_integer_ranges(data_type: DataType, low: int, high: int) -> None:
    schema = one("n", data_type)
    assert rows(schema, [low, high]) == [{"n": low}, {"n": high}]
    for outside in (low - 1, high + 1):
        batch, error = RowConverter(schema).convert([low, outside, high], 10)
        assert batch.column(0).to_pylist() == [low]
        assert error is not None and (error.offset, error.column, error.value) == (
            11, "n", outside)
        assert f"({data_type.simpleString()})" in str(error)


def test_plain_tuples_and_dicts_keep_sparks_value_semantics() -> None:
    # Rows of plain columns take pyarrow's fast path: these values must still come out
    # as Spark's conversion makes them, and a bad one must still be found.
    assert rows(PAIR, [(1, "a"), (2, 7), (3, True), (4, 2.5)]) == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "7"}, {"id": 3, "name": "true"},
        {"id": 4, "name": "2.5"}]
    # Where Spark would store a repr nobody meant ("b'x'"), the converter refuses (see
    # test_bad_input.py for every such case).
    batch, error = RowConverter(PAIR).convert([(1, "a"), (4, b"x")], 0)
    assert batch.num_rows == 1 and error is not None and error.value == b"x"
    assert rows(PAIR, [{"id": 1}, {"name": 2}]) == [
        {"id": 1, "name": None}, {"id": None, "name": "2"}]
    batch, error = RowConverter(PAIR).convert([{"id": 1}, {"id": 2, "nmae": "x"}], 0)
    assert batch.num_rows == 1 and error is not None and error.offset == 1
    strict = StructType([StructField("id", LongType()),
                         StructField("name", StringType(), nullable=False)])
    batch, error = RowConverter(strict).convert([(1, "a"), (2, None), (3, "c")], 0)
    assert batch.num_rows == 1
    assert error is not None and (error.offset, error.column, error.value) == (1, "name", None)


def test_binary() -> None:
    schema = one("raw", BinaryType())
    assert rows(schema, [b"\x00\x01", bytearray(b"ab"), None]) == [
        {"raw": b"\x00\x01"}, {"raw": b"ab"}, {"raw": None}]
    batch, error = RowConverter(schema).convert([b"ok", "text"], 0)
    assert batch.num_rows == 1
    assert error is not None and "binary needs bytes or bytearray" in str(error), str(error)


def test_timestamp_ntz_is_wall_time_and_takes_naive_datetimes_only() -> None:
    schema = one("at", TimestampNTZType())
    naive = datetime.datetime(2026, 3, 29, 2, 30, 0, 123456)
    assert rows(schema, [naive]) == [{"at": naive}]
    aware = naive.replace(tzinfo=datetime.timezone.utc)
    batch, error = RowConverter(schema).convert([naive, aware], 0)
    assert batch.num_rows == 1
    assert error is not None and error.value == aware and "naive datetime" in str(error)


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    """This process's local time zone is ``name`` inside the block."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.fixture
def new_york() -> Iterator[None]:
    """This process's local time zone is New York for the test."""
    with local_zone("America/New_York"):
        yield


@pytest.mark.usefixtures("new_york")
def test_a_naive_timestamp_is_local_time_as_in_spark() -> None:
    schema = one("when", TimestampType())
    utc = datetime.timezone.utc
    aware = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(
        datetime.timedelta(hours=2)))
    got = rows(schema, [datetime.datetime(2026, 7, 1, 12, 0), aware, None])
    # 12:00 in New York in July (EDT, UTC-4) is 16:00 UTC.
    assert [r["when"] for r in got] == [
        datetime.datetime(2026, 7, 1, 16, 0, tzinfo=utc), aware.astimezone(utc), None]
    _, error = RowConverter(schema).convert(["2026-07-01"], 0)
    assert error is not None and "timestamp needs a datetime" in str(error)


def test_decimals_convert_as_the_installed_spark_converts_them() -> None:
    from pyspark.sql.conversion import LocalDataToArrowConversion

    schema = one("price", DecimalType(5, 2))
    assert rows(schema, [decimal.Decimal("1.5"), decimal.Decimal(7)]) == [
        {"price": decimal.Decimal("1.50")}, {"price": decimal.Decimal("7.00")}]
    # Spark 4.3 rounds half even to the scale; Spark 4.0 passes the value on to pyarrow,
    # which refuses to drop digits.
    spark_rounds = LocalDataToArrowConversion._create_converter(DecimalType(5, 2))(
        decimal.Decimal("1.005")) == decimal.Decimal("1.00")
    batch, error = RowConverter(schema).convert(
        [decimal.Decimal("1.005"), decimal.Decimal("1.015")], 0)
    if spark_rounds:
        assert error is None
        assert batch.column(0).to_pylist() == [decimal.Decimal("1.00"), decimal.Decimal("1.02")]
    else:
        assert batch.num_rows == 0 and error is not None and error.offset == 0
    batch, error = RowConverter(schema).convert([decimal.Decimal("1"), 1.5], 0)
    assert batch.num_rows == 1 and error is not None and error.value == 1.5
    assert "decimal(5,2) needs a Decimal" in str(error)


def test_nested_values_fit_or_are_named() -> None:
    inner = StructType([StructField("x", LongType(), nullable=False),
                        StructField("tags", ArrayType(StringType(), containsNull=False))])
    schema = StructType([StructField("id", LongType()), StructField("s", inner),
                         StructField("m", MapType(StringType(), ArrayType(DoubleType())))])
    good = [(1, (1, ["a"]), {"k": [1.0, None]}), (2, {"x": 2, "tags": []}, None),
            (3, Row(x=3, tags=["b", "c"]), {})]
    assert rows(schema, good) == [
        {"id": 1, "s": {"x": 1, "tags": ["a"]}, "m": [("k", [1.0, None])]},
        {"id": 2, "s": {"x": 2, "tags": []}, "m": None},
        {"id": 3, "s": {"x": 3, "tags": ["b", "c"]}, "m": []}]
    bads: list[tuple[Any, ...]] = [(4, (None, []), None), (4, (1, ["a", None]), None),
                                   (4, None, [("k", [])])]
    for bad in bads:
        batch, error = RowConverter(schema).convert([*good, bad], 50)
        assert batch.num_rows == 3, bad
        assert error is not None and error.offset == 53 and error.column in ("s", "m"), bad


def test_a_one_column_array_or_map_takes_each_element_whole() -> None:
    assert rows(one("m", MapType(StringType(), LongType())), [{"a": 1}, {}]) == [
        {"m": [("a", 1)]}, {"m": []}]
    # Not a row of one value: a one-element list is that array.
    assert rows(one("xs", ArrayType(LongType())), [[5], [1, 2]]) == [
        {"xs": [5]}, {"xs": [1, 2]}]
    batch, error = RowConverter(one("m", MapType(StringType(), LongType()))).convert(
        [{"a": 1}, 3], 0)
    assert batch.num_rows == 1 and error is not None and error.column == "m"
    assert "needs a dict" in str(error)


def test_one_column_shapes_still_count_as_rows() -> None:
    schema = one("name", StringType())
    assert rows(schema, ["a", ("b",), ["c"], {"name": "d"}, Row(name="e"), 6]) == [
        {"name": v} for v in "abcde6"]
    batch, error = RowConverter(schema).convert(["a", ("b", "c")], 0)
    assert batch.num_rows == 1 and error is not None and error.column is None


@given(st.lists(st.tuples(st.integers(-2**33, 2**33), st.text(max_size=3)), max_size=40))
def test_prefix_plus_error_for_any_tuples(elements: list[tuple[int, str]]) -> None:
    schema = StructType([StructField("n", IntegerType()), StructField("s", StringType())])
    batch, error = RowConverter(schema).convert(elements, 7)
    first_bad = next((i for i, (n, _) in enumerate(elements) if not -2**31 <= n < 2**31),
                     None)
    good = elements if first_bad is None else elements[:first_bad]
    assert batch.to_pylist() == [{"n": n, "s": s} for n, s in good]
    assert (error is None) == (first_bad is None)
    if error is not None:
        assert first_bad is not None
        assert (error.offset, error.column) == (7 + first_bad, "n")
        assert error.value == elements[first_bad][0]


@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5), st.none()),
                max_size=50))
def test_prefix_plus_error_for_any_mix(values: list[Any]) -> None:
    schema = StructType([StructField("n", LongType())])
    batch, error = RowConverter(schema).convert(values, 0)
    first_bad = next((i for i, v in enumerate(values) if isinstance(v, str)), None)
    assert batch.num_rows == (len(values) if first_bad is None else first_bad)
    assert batch.column(0).to_pylist() == values[:batch.num_rows]
    assert (error is None) == (first_bad is None)
    if error is not None:
        assert error.offset == first_bad and error.value == values[first_bad]


# -- through Spark --------------------------------------------------------------------------

MIXED = StructType([
    StructField("id", LongType(), nullable=False), StructField("when", TimestampType()),
    StructField("point", StructType([StructField("x", DoubleType()),
                                     StructField("y", DoubleType())])),
    StructField("tags", ArrayType(StringType())), StructField("day", DateType()),
    StructField("price", DecimalType(10, 2)), StructField("attrs", MapType(StringType(),
                                                                           IntegerType())),
    StructField("name", StringType()), StructField("local", TimestampNTZType()),
])
WHEN = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.timezone.utc)
LOCAL = datetime.datetime(2026, 11, 22, 9, 30, 15, 250000)
ELEMENTS = [(1, WHEN, Row(x=1.0, y=2.0), ["a"], datetime.date(2026, 11, 22),
             decimal.Decimal("9.99"), {"k": 1}, "one", LOCAL),
            {"id": 2, "when": None, "tags": [], "name": 2}]


class _Batch(DataSource):
    @classmethod
    def name(cls) -> str:
        return "converted_rows"

    def schema(self) -> StructType:
        return MIXED

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader()


class _BatchReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batch, error = RowConverter(MIXED).convert(ELEMENTS, 0)
        assert error is None
        yield batch


def test_a_converted_batch_reads_back_through_spark(spark: SparkSession) -> None:
    spark.dataSource.register(_Batch)
    got = spark.read.format("converted_rows").load().orderBy("id").collect()
    assert [r.id for r in got] == [1, 2]
    first, second = got
    assert first.when.astimezone(datetime.timezone.utc) == WHEN
    assert (first.point.x, first.point.y, first.tags) == (1.0, 2.0, ["a"])
    assert (first.day, first.price, first.attrs) == (
        datetime.date(2026, 11, 22), decimal.Decimal("9.99"), {"k": 1})
    assert (first.name, first.local) == ("one", LOCAL)
    assert second.when is None and second.point is None and second.tags == []
    assert (second.day, second.price, second.attrs, second.name, second.local) == (
        None, None, None, "2", None)


# -- the fast paths against the reference (fast=False) ------------------------------------

FIVE = StructType([
    StructField("id", LongType()), StructField("name", StringType()),
    StructField("price", DoubleType()), StructField("at", TimestampType()),
    StructField("ok", BooleanType()),
])
# The other columns with a fast path of their own, one non-nullable.
MORE = StructType([
    StructField("local", TimestampNTZType()), StructField("raw", BinaryType()),
    StructField("n", IntegerType(), nullable=False),
])
# Time zones whose naive local time has moved: DST gaps and folds (New York), an offset
# of 19 min 32 s until 1937 (Amsterdam), a 30-minute DST (Lord Howe), and none (UTC).
LOCAL_ZONES = ["America/New_York", "Europe/Amsterdam", "Australia/Lord_Howe", "UTC"]


class _Odd(datetime.tzinfo):
    """A zone class of the user's own, 90 minutes and a microsecond ahead of UTC (pyarrow
    would drop the microsecond)."""

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(minutes=90, microseconds=1)

    def dst(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(0)

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "odd"


ZONES: list[datetime.tzinfo | None] = [
    None, None, None, datetime.timezone.utc,
    datetime.timezone(datetime.timedelta(hours=-3, minutes=-30)),
    datetime.timezone(datetime.timedelta(hours=1, microseconds=7)),  # astimezone keeps the 7
    ZoneInfo("America/New_York"), ZoneInfo("Europe/Amsterdam"), _Odd()]
# Any (the ends of datetime's range too), hours around New York's DST gap and fold and
# Lord Howe's, and events a few milliseconds apart (many values in one second).
MOMENTS = st.one_of(
    st.datetimes(),
    st.datetimes(datetime.datetime(2026, 3, 8, 1), datetime.datetime(2026, 3, 8, 4)),
    st.datetimes(datetime.datetime(2026, 11, 1, 0), datetime.datetime(2026, 11, 1, 3)),
    st.datetimes(datetime.datetime(2026, 4, 5, 1), datetime.datetime(2026, 4, 5, 3)),
    st.datetimes(datetime.datetime(2026, 10, 4, 1), datetime.datetime(2026, 10, 4, 3)),
    st.integers(0, 5000).map(lambda ms: datetime.datetime(2026, 11, 1, 5, 59, 58)
                             + datetime.timedelta(milliseconds=ms)))
TIMESTAMPS = st.builds(lambda moment, fold, zone: moment.replace(fold=fold, tzinfo=zone),
                       MOMENTS, st.integers(0, 1), st.sampled_from(ZONES))
GOOD = {
    "id": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    "name": st.one_of(st.none(), st.text(max_size=6)),
    "price": st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-2**53, 2**53)),
    "at": st.one_of(st.none(), TIMESTAMPS),
    "ok": st.one_of(st.none(), st.booleans()),
    "local": st.one_of(st.none(), MOMENTS),
    "raw": st.one_of(st.none(), st.binary(max_size=3)),
    "n": st.integers(-2**31, 2**31 - 1),
}
# Values Spark converts differently from pyarrow, or refuses, by column.
ODD = {
    "id": st.one_of(st.floats(allow_nan=False), st.booleans(), st.just("1"),
                    st.just(2**63), st.just(decimal.Decimal(1))),
    "name": st.one_of(st.integers(), st.booleans(), st.floats(allow_nan=False),
                      st.binary(max_size=2), st.just(["a"]), st.just("a\ud800")),
    "price": st.one_of(st.just("1.5"), st.booleans()),
    "at": st.one_of(st.dates(), st.just("2026-01-01"), st.sampled_from([
        datetime.datetime.max.replace(tzinfo=datetime.timezone(-datetime.timedelta(hours=1))),
        datetime.datetime.min.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
        datetime.datetime.max, datetime.datetime.min])),
    "ok": st.one_of(st.integers(0, 1), st.just("true")),
    "local": st.one_of(TIMESTAMPS, st.dates()),
    "raw": st.one_of(st.text(max_size=2), st.builds(bytearray, st.binary(max_size=2))),
    "n": st.one_of(st.none(), st.just(2**31), st.just(1.0)),
}


@st.composite
def _records(draw: st.DrawFn, schema: StructType) -> list[dict[str, Any]]:
    """Records of good values; or with one odd value, so that nothing else hides it."""
    names = schema.fieldNames()
    records = draw(st.lists(st.fixed_dictionaries({name: GOOD[name] for name in names}),
                            max_size=30))
    odd: bool = draw(st.booleans())
    if records and odd:
        name = draw(st.sampled_from(names))
        records[draw(st.integers(0, len(records) - 1))][name] = draw(ODD[name])
    return records


def _shaped(schema: StructType, values: dict[str, Any], shape: str) -> Any:
    names = schema.fieldNames()
    if shape == "tuple":
        return tuple(values[name] for name in names)
    if shape == "list":
        return [values[name] for name in names]
    if shape == "dict":
        return dict(values)
    if shape == "dict, a key missing":
        return {name: value for name, value in values.items() if name != names[-1]}
    if shape == "dict, a key too many":
        return {**values, "extra": 1}
    if shape == "Row":
        return Row(**values)
    if shape == "Row, other order":
        return Row(**dict(reversed(values.items())))
    if shape == "Row, a field missing":
        return Row(**{name: value for name, value in values.items() if name != names[0]})
    if shape == "Row by position":
        return Row(*(values[name] for name in names))
    if shape == "Row of a factory":
        return Row(*names)(*(values[name] for name in names))
    assert shape == "tuple too short"
    return tuple(values[name] for name in names[1:])


UNIFORM = ["tuple", "list", "dict", "dict, a key missing", "Row", "Row, other order",
           "Row, a field missing", "Row by position", "Row of a factory"]
SHAPES = [*UNIFORM, "dict, a key too many", "tuple too short"]


def assert_same_as_reference(schema: StructType, elements: list[Any]) -> pa.RecordBatch:
    """The fast paths give what the element-by-element, value-by-value path gives."""
    batch, error = RowConverter(schema).convert(elements, 40)
    expected, expected_error = RowConverter(schema, fast=False).convert(elements, 40)
    assert batch.schema.equals(expected.schema)
    assert batch.equals(expected), (batch.to_pylist(), expected.to_pylist())
    if expected_error is None:
        assert error is None, error
    else:
        assert error is not None, expected_error
        assert (error.offset, error.column, str(error)) == (
            expected_error.offset, expected_error.column, str(expected_error))
    return batch


@pytest.mark.parametrize("zone", LOCAL_ZONES)
@pytest.mark.parametrize("schema", [FIVE, MORE], ids=["five", "more"])
@settings(deadline=None)  # pyarrow imports pandas on its first datetime
@given(data=st.data())
def test_the_fast_paths_give_the_references_batches_and_errors(
        zone: str, schema: StructType, data: st.DataObject) -> None:
    rows = data.draw(_records(schema))
    # Mostly one shape (the fast paths), sometimes any mix.
    shapes = data.draw(st.one_of(st.sampled_from(UNIFORM).map(lambda s: [s] * len(rows)),
                                 st.lists(st.sampled_from(SHAPES), min_size=len(rows),
                                          max_size=len(rows))), "shapes")
    elements = [_shaped(schema, values, shape) for values, shape in zip(rows, shapes,
                                                                         strict=True)]
    with local_zone(zone):
        assert_same_as_reference(schema, elements)


def _events(count: int) -> list[dict[str, Any]]:
    start = datetime.datetime(2026, 7, 1, 12, 0)
    zones = [None, datetime.timezone.utc, ZoneInfo("Europe/Berlin")]
    return [{"id": i, "name": None if i % 100 == 7 else f"user{i % 37}" * (i % 3 + 1),
             "price": i / 4,
             "at": None if i % 101 == 5 else (start + datetime.timedelta(
                 milliseconds=i)).replace(tzinfo=zones[i % 3]),
             "ok": i % 2 == 0} for i in range(count)]


@pytest.mark.parametrize("shape", ["dict", "tuple", "Row", "Row, other order"])
def test_event_records_are_converted_column_by_column(shape: str) -> None:
    # The property test above is only as good as the fast paths are taken: records like
    # the benchmark's (benchmarks/rows_throughput.py) must be, naive times included.
    elements = [_shaped(FIVE, event, shape) for event in _events(3000)]
    with local_zone("America/New_York"):
        converter = RowConverter(FIVE)
        assert converter._by_columns(elements, set(map(type, elements))) is not None
        ats = [event["at"] for event in _events(3000)]
        assert rows_module._timestamps(ats, pa.timestamp("us", tz="UTC")) is not None
        batch = assert_same_as_reference(FIVE, elements)
    # 12:00 naive in New York in July (UTC-4), 12:00:00.001 UTC, 12:00:00.002 in Berlin.
    assert batch.column("at")[:3].to_pylist() == [
        datetime.datetime(2026, 7, 1, 16, 0, tzinfo=ZoneInfo("UTC")),
        datetime.datetime(2026, 7, 1, 12, 0, 0, 1000, tzinfo=ZoneInfo("UTC")),
        datetime.datetime(2026, 7, 1, 10, 0, 0, 2000, tzinfo=ZoneInfo("UTC"))]


def test_a_folded_local_time_follows_its_fold() -> None:
    # 01:30 on 2026-11-01 happens twice in New York: fold 0 is EDT (UTC-4), fold 1 EST.
    twice = datetime.datetime(2026, 11, 1, 1, 30)
    utc = ZoneInfo("UTC")
    with local_zone("America/New_York"):
        got = rows(one("at", TimestampType()), [twice, twice.replace(fold=1),
                                                datetime.datetime(2026, 11, 1, 12, 0)])
    assert [r["at"] for r in got] == [datetime.datetime(2026, 11, 1, 5, 30, tzinfo=utc),
                                      datetime.datetime(2026, 11, 1, 6, 30, tzinfo=utc),
                                      datetime.datetime(2026, 11, 1, 17, 0, tzinfo=utc)]


TEXTS = StructType([StructField("a", StringType()), StructField("b", StringType())])
EDGES: dict[str, tuple[StructType, list[Any]]] = {
    "after datetime.max in UTC": (FIVE, [(1, "a", 1.0, datetime.datetime(2026, 1, 1), True),
                                         (2, "b", 2.0, datetime.datetime.max.replace(
                                             tzinfo=datetime.timezone(
                                                 -datetime.timedelta(hours=1))), False)]),
    "before datetime.min in UTC": (one("at", TimestampType()), [
        datetime.datetime.min.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=1)))]),
    "naive datetime.max, local time behind UTC": (one("at", TimestampType()), [
        datetime.datetime(2026, 1, 1), datetime.datetime.max]),
    "Rows by position and by name": (TEXTS, [Row("p", "q"), Row(b="s", a="r")]),  # type: ignore[call-overload]
    "Rows by position, too short": (PAIR, [Row(1), Row(2)]),  # type: ignore[call-overload]
    "Rows of a factory, fewer values than names": (PAIR, [Row("id", "name")(1),
                                                          Row("id", "name")(2)]),
    "Rows with a name twice": (PAIR, [Row("id", "id")(1, 2), Row("id", "id")(3, 4)]),
    "Rows with a name that is no column": (PAIR, [Row(id=1, nmae="a"), Row(id=2, nmae="b")]),
    "dicts, a key that is no column": (PAIR, [{"id": 1}, {"id": 2, "nmae": "b"}]),
    "one column, scalars and tuples": (one("n", LongType()), [1, (2,), 3.0]),
}


@pytest.mark.parametrize(("schema", "elements"), [
    pytest.param(*case, id=name) for name, case in EDGES.items()])
def test_edges_give_the_references_batches_and_errors(schema: StructType,
                                                      elements: list[Any]) -> None:
    with local_zone("America/New_York"):
        assert_same_as_reference(schema, elements)
