"""Elements to Arrow: every accepted shape, the good prefix before a bad element, and a
round trip of the batch through a real Spark Python data source."""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_reactive.rows import RowConversionError, RowConverter, arrow_schema

PAIR = StructType([StructField("id", LongType()), StructField("name", StringType())])


def rows(schema: StructType, elements: list[Any], offset: int = 0) -> list[dict[str, Any]]:
    batch, error = RowConverter(schema).convert(elements, offset)
    assert error is None, error
    assert batch.schema.equals(arrow_schema(schema))
    result: list[dict[str, Any]] = batch.to_pylist()
    return result


def test_every_shape_of_a_row() -> None:
    elements = [(1, "a"), [2, "b"], {"id": 3, "name": "c"}, {"name": "d"},
                Row(name="e", id=5), Row(6, "f")]
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
    elements = [(i, f"n{i}") for i in range(10)]
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
    StructField("id", LongType()), StructField("when", TimestampType()),
    StructField("point", StructType([StructField("x", DoubleType()),
                                     StructField("y", DoubleType())])),
    StructField("tags", ArrayType(StringType())),
])
WHEN = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.timezone.utc)
ELEMENTS = [(1, WHEN, Row(x=1.0, y=2.0), ["a"]), {"id": 2, "when": None, "tags": []}]


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
    assert got[0].when.astimezone(datetime.timezone.utc) == WHEN
    assert (got[0].point.x, got[0].point.y, got[0].tags) == (1.0, 2.0, ["a"])
    assert got[1].when is None and got[1].point is None and got[1].tags == []
