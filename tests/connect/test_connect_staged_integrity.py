"""A staged batch that another session alters is never delivered as genuine (issue 27,
finding 3): a value moved through a NULL, a field changed inside a struct that holds a map,
two rows swapped within a partition, a partition overwritten or emptied between the
stager's write and its mark. Each fails the batch, uncommitted, before any row of the
altered partition is offered, with an error that says so. Rows a table returns in another
order arrive in the staged one, and a write whose observation came back empty is never
marked as staged."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import staging_faults
from polling import wait_until
from pyspark.sql import SparkSession
from test_connect_security import new_session, release
from test_connect_sink import Holding, reactive

from pyspark_reactive import publish
from pyspark_reactive.sink import connect as connect_sink

PART = connect_sink._PART
ROWS = 40


@pytest.fixture
def other(spark: SparkSession) -> Iterator[Any]:
    """Another session of the server (another notebook on a shared cluster), closed after
    the test: one left to the garbage collector may close its channel as the interpreter
    exits, which gRPC can wait on forever."""
    session = new_session(spark)
    yield session
    session.stop()


def expected(value: int) -> dict[str, Any]:
    """The row the query makes of ``value``."""
    return {"id": value, "debit": value * 100 if value % 2 == 0 else None,
            "credit": value * 100 if value % 2 == 1 else None,
            "s": {"amount": value * 10, "tags": {"k": "v"}}}


def publish_held(spark: SparkSession, tmp_path: Path) -> tuple[Any, Holding]:
    """A batch of 40 rows in 4 partitions (ids, a debit or a credit, NULL in the other, and
    a struct holding a map), published to a subscriber that holds it at its first row."""
    df = (reactive(spark, publisher="range", count=ROWS, maxRecordsPerTrigger=ROWS,
                   numPartitions=4).load()
          .selectExpr("value AS id", "CASE WHEN value % 2 = 0 THEN value * 100 END AS debit",
                      "CASE WHEN value % 2 = 1 THEN value * 100 END AS credit",
                      "named_struct('amount', value * 10, 'tags', map('k', 'v')) AS s"))
    publisher = publish(df, element="dict", chunk_rows=5, trigger={"availableNow": True},
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Holding(1)
    publisher.subscribe(subscriber)
    return publisher, subscriber


def staging_table(other: Any) -> str:
    """The one staging table there is, as ``other`` names it (marked or not yet)."""
    names: list[str] = []

    def found() -> bool:
        names[:] = [row.tableName for row in other.sql(
            f"SHOW TABLES LIKE '{connect_sink.PREFIX}*'").collect() if not row.isTemporary]
        return len(names) == 1

    wait_until(found, 120, "one staging table")
    return names[0]


def rewrite(other: Any, table: str, partition: int,
            edit: Callable[[list[list[Any]], list[str]], None]) -> list[int]:
    """Rewrite ``partition`` of ``table`` through ``other`` with its rows as ``edit`` left
    them (a list of each row's values, and the columns' names); returns the ids it held."""
    frame = other.read.table(table).where(f"{PART} = {partition}").drop(PART)
    rows = [list(row) for row in frame.collect()]
    ids = [row[0] for row in rows]
    edit(rows, frame.columns)
    view = f"forged_{uuid.uuid4().hex[:8]}"
    other.createDataFrame([tuple(row) for row in rows], frame.schema).createOrReplaceTempView(
        view)
    other.sql(f"INSERT OVERWRITE TABLE {table} PARTITION ({PART} = {partition}) "
              f"SELECT * FROM {view}")
    return ids


def data_columns(names: list[str]) -> list[int]:
    """The positions of the query's own columns (c0, c1, ...) among ``names``."""
    return [index for index, name in enumerate(names) if name[:1] == "c" and name[1:].isdigit()]


def move_a_debit_to_credit(rows: list[list[Any]], names: list[str]) -> None:
    row = next(row for row in rows if row[1] is not None)
    row[1], row[2] = None, row[1]


def change_a_struct_field(rows: list[list[Any]], names: list[str]) -> None:
    from pyspark.sql import Row

    rows[2][3] = Row(amount=999999, tags=rows[2][3].tags)


def swap_two_rows(rows: list[list[Any]], names: list[str]) -> None:
    # The values of the query's columns trade places; any other column stays where it was.
    for index in data_columns(names):
        rows[0][index], rows[1][index] = rows[1][index], rows[0][index]


def forge_one_row(rows: list[list[Any]], names: list[str]) -> None:
    rows[:] = [[-1, *rows[0][1:]]]


def assert_failed_unaltered(publisher: Any, subscriber: Holding, tmp_path: Path,
                            partition_ids: list[int], what: str) -> None:
    """The batch failed, uncommitted, saying ``what``, with no altered row and no row of
    the altered partition delivered."""
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.error is not None and not subscriber.completed, "delivered as genuine"
    assert "batch 0 was not delivered" in str(subscriber.error)
    assert what in str(subscriber.error), subscriber.error
    assert [row for row in subscriber.elements if row != expected(row["id"])] == []
    assert [row["id"] for row in subscriber.elements if row["id"] in partition_ids] == []
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()
    assert publisher.rows_delivered == 0


@pytest.mark.parametrize("edit", [
    # Once on every Spark line: the observed digests travel as Spark 4.0 can return them.
    pytest.param(move_a_debit_to_credit, marks=pytest.mark.spark_lines),
    change_a_struct_field, swap_two_rows])
def test_a_partition_altered_while_staged_fails_the_batch(
        spark: SparkSession, other: Any, tmp_path: Path, edit: Callable[..., None]) -> None:
    publisher, subscriber = publish_held(spark, tmp_path)
    subscriber.wait_for(1)  # batch 0 is staged, marked, and read no further than its start
    ids = rewrite(other, staging_table(other), 2, edit)
    release(subscriber, ROWS - 1)
    assert_failed_unaltered(publisher, subscriber, tmp_path, ids,
                            "altered after it was staged (by another session of the "
                            "server?): partition 2 holds other rows")


def test_rows_a_table_returns_in_another_order_arrive_in_the_staged_one(
        spark: SparkSession, other: Any, tmp_path: Path) -> None:
    # A table format keeps no order of rows (files read biggest first, compaction): here
    # another session stores a partition's rows, each whole, in reverse.
    _, subscriber = publish_held(spark, tmp_path)
    subscriber.wait_for(1)
    rewrite(other, staging_table(other), 2, lambda rows, names: rows.reverse())
    release(subscriber, ROWS - 1)
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.completed, subscriber.error
    assert subscriber.elements == [expected(value) for value in range(ROWS)]


@pytest.mark.parametrize("change", ["overwritten", "emptied"])
def test_a_partition_changed_between_the_write_and_the_mark_fails_the_batch(
        spark: SparkSession, other: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        change: str) -> None:
    # The batch function stops right after its write (staging_faults.PausedStager), while
    # another session overwrites partition 1 with a forged row or leaves it empty: a mark
    # taken from what the table then holds would sign the forgery or leave that partition
    # out (its rows never delivered, the batch committed).
    signals = tmp_path / "signals"
    signals.mkdir()
    monkeypatch.setattr(staging_faults.PausedStager, "folder", str(signals))
    monkeypatch.setattr(connect_sink, "ConnectStager", staging_faults.PausedStager)
    publisher, subscriber = publish_held(spark, tmp_path)
    wait_until((signals / "written").exists, 120, "batch 0 written")
    table = staging_table(other)
    ids = [row[0] for row in other.read.table(table).where(f"{PART} = 1").collect()]
    if change == "overwritten":
        rewrite(other, table, 1, forge_one_row)
    else:
        other.sql(f"ALTER TABLE {table} DROP PARTITION ({PART} = 1)")
    (signals / "go").touch()
    subscriber.wait_for(1)
    release(subscriber, ROWS - 1)
    assert_failed_unaltered(publisher, subscriber, tmp_path, [*ids, -1],
                            "partition 1 holds other rows")


def test_a_write_whose_observation_came_back_empty_fails_the_batch(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_sink, "ConnectStager", staging_faults.UnobservedStager)
    _, subscriber = publish_held(spark, tmp_path)
    assert subscriber.done.wait(120), "no terminal signal"
    assert subscriber.error is not None and subscriber.elements == []
    assert ("batch 0 was not staged: the server returned no usable observed metrics for its "
            "write (got none), so its rows could not be digested as written"
            in str(subscriber.error)), subscriber.error
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()


@pytest.mark.parametrize(("expression", "what"), [
    ("INTERVAL '2' MONTH", "a year-month interval"),
    ("named_struct('v', parse_json('[1]'))", "a variant"),
])
def test_a_type_a_staged_batch_cannot_carry_checked_is_refused_at_publish(
        spark: SparkSession, tmp_path: Path, expression: str, what: str) -> None:
    df = reactive(spark, publisher="range", count=3).load().selectExpr(
        "value", f"{expression} AS odd")
    running = {query.id for query in spark.streams.active}
    with pytest.raises(TypeError, match=rf"publish: column 'odd' is \(or holds\) {what}"):
        publish(df, checkpointLocation=tmp_path / "checkpoint")
    assert {query.id for query in spark.streams.active} <= running  # none started
