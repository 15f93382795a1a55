"""RecordBatch elements: conformed to the declared schema column by column (casts, refusals
and their messages), converted by the intake without the row converter, and through the
source with real Spark: rows once and in order, micro-batches of maxRecordsPerTrigger rows,
a bad batch failing the query with its message, with a write-ahead log."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType
from spark_publishers import Recording, RecordingPublisher
from streaming import ProgressWatch
from test_source import queries, watch

from pyspark_reactive import read_stream
from pyspark_reactive.source.admission import ADMISSION_CONTROL
from pyspark_reactive.source.arrow_elements import ArrowElementError, ArrowElements, arrow_batches
from pyspark_reactive.source.demand_buffer import DemandBuffer
from pyspark_reactive.source.intake import Intake
from pyspark_reactive.source.rows import RowConverter, arrow_schema
from reactive_streams import IterablePublisher, Publisher, Subscription

__all__ = ["queries", "watch"]  # fixtures shared with test_source.py

DECLARED = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _batch(columns: Mapping[str, Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def _pairs(first: int, count: int) -> pa.RecordBatch:
    """Rows ``first .. first + count - 1`` as the producer has them: ``name`` first, ``id``
    as int32 (the schema declares ``id BIGINT, name STRING``)."""
    ids = pa.array(range(first, first + count), pa.int32())
    return _batch({"name": pc.binary_join_element_wise("n", pc.cast(ids, pa.string()), ""),
                   "id": ids})


def _conform(batch: pa.RecordBatch, schema: pa.Schema = DECLARED, offset: int = 7
             ) -> pa.RecordBatch:
    batches, error = ArrowElements(schema).convert([batch], offset)
    if error is not None:
        raise error
    return batches[0]


# -- conforming a batch to the declared schema -----------------------------------------------

@pytest.mark.spark_lines
def test_a_batch_of_the_declared_schema_passes_as_it_is() -> None:
    batch = _batch({"id": pa.array([1, 2]), "name": pa.array(["a", "b"])})
    assert _conform(batch) is batch


@pytest.mark.spark_lines
def test_columns_are_matched_by_name_and_safe_casts_made() -> None:
    conformed = _conform(_pairs(5, 3))
    assert conformed.schema == DECLARED
    assert conformed.to_pylist() == [{"id": i, "name": f"n{i}"} for i in (5, 6, 7)]
    dictionary = _batch({"id": pa.array([1, 2], pa.int8()),
                         "name": pa.array(["x", "y"]).dictionary_encode()})
    assert _conform(dictionary).column("name").to_pylist() == ["x", "y"]
    nulls = _batch({"id": pa.array([1, 2]), "name": pa.nulls(2)})
    assert _conform(nulls).column("name").to_pylist() == [None, None]


@pytest.mark.spark_lines
def test_timestamps_with_a_zone_become_spark_timestamps_truncated_to_microseconds() -> None:
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC"))])
    nanos = pa.array([1_000_001_999], pa.timestamp("ns", tz="Europe/Paris"))
    conformed = _conform(_batch({"at": nanos}), schema)
    assert conformed.column(0).to_pylist() == [
        datetime.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=datetime.timezone.utc)]
    with pytest.raises(ArrowElementError, match=r"column 'at' is timestamp\[ns\], which does "
                       r"not cast safely to the declared timestamp .*no time zone"):
        _conform(_batch({"at": pa.array([1], pa.timestamp("ns"))}), schema)


@pytest.mark.parametrize(("columns", "message"), [
    ({"id": pa.array(["1"]), "name": pa.array(["a"])},
     r"RecordBatch at offset 7: column 'id' is string, which does not cast safely to the "
     r"declared bigint \(int64\): only integer columns cast to an integer type"),
    ({"id": pa.array([1.5]), "name": pa.array(["a"])},
     r"column 'id' is double, which does not cast safely to the declared bigint"),
    ({"id": pa.array([1]), "name": pa.array([1])},
     r"column 'name' is int64, which does not cast safely to the declared string"),
    ({"name": pa.array(["a"])},
     r"RecordBatch at offset 7: column 'id' \(declared bigint\) is missing; the batch has "
     r"\['name'\]"),
    ({"ID": pa.array([1]), "name": pa.array(["a"])},
     r"column 'id' \(declared bigint\) is missing \(the batch has 'ID': names must match "
     r"exactly\)"),
    ({"id": pa.array([1]), "name": pa.array(["a"]), "extra": pa.array([True])},
     r"column 'extra' \(bool\) is not in the declared schema \(id bigint, name string\)"),
])
@pytest.mark.spark_lines
def test_a_batch_that_does_not_fit_names_the_column_its_type_and_the_declared_one(
        columns: dict[str, pa.Array], message: str) -> None:
    with pytest.raises(ArrowElementError, match=message) as caught:
        _conform(_batch(columns))
    assert caught.value.offset == 7


@pytest.mark.spark_lines
def test_values_are_checked_by_the_cast_and_nulls_against_not_null() -> None:
    schema = pa.schema([pa.field("small", pa.int32(), nullable=False)])
    with pytest.raises(ArrowElementError, match=r"RecordBatch at offset 7 \(2 rows\): column "
                       r"'small' \(int64\) does not fit the declared int \(int32\): Integer "
                       r"value 4294967296 not in range"):
        _conform(_batch({"small": pa.array([1, 2**32])}), schema)
    with pytest.raises(ArrowElementError, match="column 'small' holds 1 nulls but is declared "
                       "NOT NULL"):
        _conform(_batch({"small": pa.array([1, None], pa.int32())}), schema)


@pytest.mark.spark_lines
def test_the_good_prefix_is_kept_and_the_error_names_the_row_offset() -> None:
    good, bad = _pairs(0, 4), _batch({"id": pa.array(["x"]), "name": pa.array(["y"])})
    batches, error = ArrowElements(DECLARED).convert([good, good, bad, good], 100)
    assert len(batches) == 2 and error is not None
    assert error.offset == 108 and error.column == "id"
    batches, error = ArrowElements(DECLARED, declared=True).convert([good, {"id": 1}], 0)
    assert len(batches) == 1
    assert str(error) == ("element at offset 4: expected a pyarrow.RecordBatch (the publisher "
                          "declares arrow_batches), got dict {'id': 1}; a publisher signals "
                          "rows or RecordBatches, not both")


@pytest.mark.spark_lines
def test_arrow_batches_declares_and_passes_the_durability_hooks_through() -> None:
    class Keyed(IterablePublisher[pa.RecordBatch]):
        def position_key(self, element: pa.RecordBatch) -> str:
            return "k"

    declared = arrow_batches(Keyed([]))
    assert declared.arrow_batches is True  # type: ignore[attr-defined]
    assert declared.position_key(_pairs(0, 1)) == "k"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="arrow_batches: publisher must be a Publisher"):
        arrow_batches([1, 2])  # type: ignore[arg-type]


# -- the intake --------------------------------------------------------------------------------

class _Silent(Subscription):
    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class _NoRows:
    """A RowConverter stand-in that fails the test if RecordBatches reach it."""

    def convert(self, elements: Any, first_offset: int) -> Any:
        raise AssertionError("RecordBatch elements went through the row converter")


SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType())])


def _intake(buffer: DemandBuffer, converter: Any, publisher: Any = None) -> Intake:
    return Intake(buffer, converter, arrow_schema(SCHEMA), None, 0, sync_ms=60_000,
                  sync_rows=10**9, publisher=publisher)


@pytest.mark.spark_lines
def test_the_intake_conforms_batches_without_the_row_converter() -> None:
    buffer = DemandBuffer(1000, own_thread=False)
    intake = _intake(buffer, _NoRows())
    try:
        buffer.on_subscribe(_Silent())
        for first in range(0, 30, 10):
            buffer.on_next(_pairs(first, 10))
        intake.sync()
        assert intake.end == 30 and intake.error is None
        (segment,) = intake.snapshot()
        assert (segment.start, segment.end) == (0, 30)
        assert segment.table is not None
        assert segment.table.column("id").to_pylist() == list(range(30))
        buffer.on_next({"id": 30, "name": "a row"})
        buffer.on_next(_pairs(31, 5))
        intake.sync()
        assert intake.end == 30
        assert str(intake.error).startswith(
            "element at offset 30: expected a pyarrow.RecordBatch (the stream's first element "
            "was one), got dict")
    finally:
        intake.stop()
        buffer.close()


@pytest.mark.spark_lines
def test_a_record_batch_in_a_stream_of_rows_fails_at_its_offset() -> None:
    buffer = DemandBuffer(1000, own_thread=False)
    intake = _intake(buffer, RowConverter(SCHEMA))
    try:
        buffer.on_subscribe(_Silent())
        buffer.on_next({"id": 0, "name": "a"})
        buffer.on_next((1, "b"))
        buffer.on_next(_pairs(2, 3))
        buffer.on_next((5, "c"))
        intake.sync()
        assert intake.end == 2
        assert intake.error is not None and intake.error.offset == 2
        assert str(intake.error).startswith(
            "element at offset 2: a pyarrow.RecordBatch in a stream of rows (its first "
            "element was a dict)")
    finally:
        intake.stop()
        buffer.close()


# -- through the source, with real Spark --------------------------------------------------------

def _pairs_publisher(options: Any) -> Publisher[pa.RecordBatch]:
    """``total`` rows in RecordBatches of ``size``, from the row the source resumes at; the
    one starting at row ``badAt`` has a string ``id``. Runs in Spark's source runner."""
    size, total = int(options["size"]), int(options["total"])
    bad = int(options.get("badAt", -1))
    resume = options.resume.offset
    if "resumedTo" in options:
        with open(options["resumedTo"], "a") as out:
            out.write(f"{resume}\n")

    def batches() -> Iterator[pa.RecordBatch]:
        for first in range(resume - resume % size, total, size):
            batch = _pairs(first, min(size, total - first))
            if first == bad:
                batch = _batch({"id": pc.cast(batch.column("id"), pa.string()),
                                "name": batch.column("name")})
            yield batch.slice(max(0, resume - first))  # rows count: resume mid-batch

    return arrow_batches(RecordingPublisher(IterablePublisher(batches), options["recordTo"]))


def _start(spark: SparkSession, tmp_path: Path, queries: list[StreamingQuery],
           checkpoint: Path, **options: Any) -> tuple[StreamingQuery, str]:
    df = read_stream(spark, _pairs_publisher, schema="id BIGINT, name STRING",
                     fillWaitMs=30_000, **options)
    name = f"arrow_{uuid.uuid4().hex[:8]}"
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint)).start())
    queries.append(query)
    return query, name


def test_record_batches_arrive_once_in_order_in_micro_batches_of_max_records_rows(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    query, name = _start(spark, tmp_path, queries, tmp_path / "checkpoint", size=300,
                         total=2500, maxRecordsPerTrigger=1000, walLocation=tmp_path / "wal",
                         recordTo=record)
    watch.wait_rows(query, 2500)
    # Batches of 300 rows cut at 1000-row boundaries: the source slices them.
    assert watch.batch_sizes(query) == [1000, 1000, 500]
    rows = [(r.id, r.name) for r in spark.table(name).collect()]
    assert sorted(rows) == [(i, f"n{i}") for i in range(2500)], "a row lost or repeated"
    seen = Recording(record)
    # Demand counts batches, one at a time: never more than capacity rows plus one batch.
    assert set(seen.requests) == {1} and seen.max_outstanding == 1
    assert len(seen.requests) <= 2500 // 300 + 2


@pytest.mark.spark_lines
def test_a_batch_that_does_not_fit_fails_the_query_after_the_rows_before_it(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    query, name = _start(spark, tmp_path, queries, tmp_path / "checkpoint", size=300,
                         total=3000, badAt=600, maxRecordsPerTrigger=1000,
                         walLocation=tmp_path / "wal", recordTo=tmp_path / "requests.jsonl")
    failure = watch.wait_terminated(query)
    assert failure is not None
    assert ("RecordBatch at offset 600: column 'id' is string, which does not cast safely "
            "to the declared bigint (int64)") in failure
    assert watch.batch_sizes(query) == [600]
    assert sorted(r.id for r in spark.table(name).collect()) == list(range(600))


def test_a_restarted_query_resumes_the_publisher_at_a_row_inside_a_batch(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # Without a log, a run ends with the rows past its last batch unplanned; the next run
    # resumes the publisher at the row Spark asks for next, inside one of its batches.
    output, checkpoint, resumed = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "at"
    df = read_stream(spark, _pairs_publisher, schema="id BIGINT, name STRING",
                     fillWaitMs=30_000, size=300, total=2500, maxRecordsPerTrigger=1000,
                     availableNowMaxRecords=1300, resumedTo=resumed,
                     recordTo=tmp_path / "requests.jsonl")
    sizes: list[int] = []
    # Spark 4.2+: 1300 rows a run in batches of 1000; 4.0/4.1: one batch a run, which the
    # explicit availableNowMaxRecords sizes (1300 rows: the Arrow batch that crosses it is
    # sliced, and its rest is lost with the run, as there is no log).
    for _ in range(4):
        query = (df.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        queries.append(query)
        assert watch.wait_terminated(query) is None
        sizes += watch.batch_sizes(query)
        if sum(sizes) >= 2500:
            break
    assert max(sizes) <= (1000 if ADMISSION_CONTROL else 1300), sizes
    ids = [r.id for r in spark.read.parquet(str(output)).collect()]
    assert sorted(ids) == list(range(2500)), "a row lost or repeated across the restarts"
    starts = [int(line) for line in resumed.read_text().split()]
    assert starts[0] == 0 and any(start % 300 for start in starts), starts
