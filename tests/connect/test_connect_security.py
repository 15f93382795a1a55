"""Who can touch what on a shared Spark Connect server: the local server asks for a token,
and a party that reaches the sink's staging tables (another session of the server, as
another notebook on a shared cluster; an OSS server has no grants) can read them while
they exist but cannot make a batch deliver forged rows or count as delivered: the batch
fails, saying why."""

from __future__ import annotations

import copy
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from polling import wait_until
from pyspark.sql import SparkSession
from test_connect_sink import UNTIL_DRAINED, Holding, reactive, stop_when_delivered
from test_sink import Checked

from pyspark_reactive import publish
from pyspark_reactive.sink import connect as connect_sink

PREFIX = connect_sink.PREFIX


def attach(spark: Any, session_id: str) -> Any:
    """A second client of ``session_id`` on ``spark``'s server, with ``spark``'s token: what
    someone who holds the token and learned the session's id can do."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    builder = copy.copy(spark.client._builder)
    builder._params = {**builder._params, "session_id": session_id}
    session = ConnectSession(connection=builder)
    session.release_session_on_close = False
    return session


def new_session(spark: Any) -> Any:
    """Another session of ``spark``'s server, with its token: ``newSession()`` where the
    Connect client has it (pyspark 4.3+; before, it raises JVM_ATTRIBUTE_NOT_SUPPORTED),
    else a client of a session id of its own."""
    try:
        return spark.newSession()
    except AttributeError:
        return attach(spark, str(uuid.uuid4()))


def staged_tables(session: Any) -> dict[str, dict[str, str]]:
    """The staging tables that carry a staged mark, as ``session`` sees them, with their
    properties."""
    names = [r.tableName for r in session.sql(f"SHOW TABLES LIKE '{PREFIX}*'").collect()
             if not r.isTemporary]
    found = {name: connect_sink._properties(session, name) for name in names}
    return {name: marks for name, marks in found.items()
            if marks is not None and connect_sink.STAGED in marks}


def held_at_first_row(spark: Any, tmp_path: Path) -> tuple[Any, Holding]:
    """A query of 40 rows in one batch of 4 partitions, published to a subscriber that
    holds it at its first row: batch 0 is staged and waits."""
    df = reactive(spark, publisher="range", count=40, maxRecordsPerTrigger=40,
                  numPartitions=4).load()
    publisher = publish(df, element="tuple", chunk_rows=5, trigger={"availableNow": True},
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Holding(1)
    publisher.subscribe(subscriber)
    subscriber.wait_for(1)
    return publisher, subscriber


def release(subscriber: Holding, rows: int) -> None:
    assert subscriber.subscription is not None
    subscriber.outstanding = rows
    subscriber.subscription.request(rows)


def test_a_client_without_the_token_is_refused(spark: SparkSession) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    builder: Any = spark.client._builder  # type: ignore[attr-defined]
    token = builder.token
    assert token and len(token) >= 32
    for url in (f"sc://{builder.endpoint}", f"sc://{builder.endpoint}/;token=x"):
        stranger = ConnectSession(connection=url)
        stranger.release_session_on_close = False
        try:
            with pytest.raises(Exception, match="UNAUTHENTICATED") as refused:
                stranger.range(1).count()
        finally:
            stranger.client.close()
        assert token not in str(refused.value)
    assert spark.range(3).count() == 3
    assert token not in repr(spark) and token not in repr(spark.client)


def test_no_command_line_and_not_this_process_environment_holds_the_token(
        spark: SparkSession) -> None:
    # Every user of the machine reads every process's command line (ps, /proc/PID/cmdline),
    # the server's JVM's among them.
    import os

    token = spark.client._builder.token  # type: ignore[attr-defined]
    assert token
    shown = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                line = handle.read()
        except OSError:
            continue  # ended meanwhile
        if token.encode() in line:
            shown.append(line.split(b"\0")[0].decode(errors="replace"))
    assert not shown, f"the Connect token stands in the command line of {shown}"
    assert token not in os.environ.values()


def test_another_session_that_alters_a_staged_batch_fails_it(spark: SparkSession,
                                                             tmp_path: Path) -> None:
    publisher, subscriber = held_at_first_row(spark, tmp_path)
    # Another session of the server (same token: another notebook on a shared cluster)
    # finds the staging table and appends forged rows to a partition not yet fetched.
    other = new_session(spark)
    [(table, _)] = staged_tables(other).items()
    other.sql(f"INSERT INTO {table} SELECT CAST(-1 AS BIGINT) AS c0, CAST(10 AS BIGINT) AS "
              f"{connect_sink.SEQ}, 3 AS {connect_sink._PART}")
    release(subscriber, 39)
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert [v for (v,) in subscriber.elements if v < 0] == []
    assert subscriber.error is not None and not subscriber.completed
    assert "batch 0 was not delivered" in str(subscriber.error)
    assert "altered after it was staged" in str(subscriber.error)
    assert "partition 3 holds other rows" in str(subscriber.error)
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()
    assert publisher.rows_delivered == 0


def test_a_batch_staged_without_the_key_is_never_delivered(
        spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A table named as the query's next batches would be, with forged rows and a staged
    # mark whose MAC is not the key's: the client abandons it and delivers the real ones.
    caplog.set_level(logging.INFO, logger="pyspark_reactive.sink")
    other = new_session(spark)
    _, subscriber = held_at_first_row(spark, tmp_path)
    [(table, marks)] = staged_tables(other).items()
    forged = f"{table.rsplit('_', 1)[0]}_5"
    other.sql(f"CREATE TABLE {forged} USING parquet PARTITIONED BY ({connect_sink._PART}) AS "
              f"SELECT -1 - c0 AS c0, {connect_sink._PART} FROM {table}")
    other.sql(f"ALTER TABLE {forged} SET TBLPROPERTIES (" + ", ".join(
        f"'{key}'='{value}'" for key, value in marks.items()
        if key.startswith("reactive.") and key != connect_sink.STAGED_MAC)
        + f", '{connect_sink.STAGED_MAC}'='{'0' * 64}')")
    release(subscriber, 1000)
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.completed, subscriber.error
    assert [v for (v,) in subscriber.elements] == list(range(40))
    # The client looked at it once batch 0 was delivered, before it saw the query end.
    assert "batch 5 abandoned" in caplog.text
    assert "staged mark does not carry the key" in caplog.text
    wait_until(lambda: not staged_tables(other), 60, "the staging tables dropped at the end")


def test_a_confirmation_without_the_key_fails_the_batch(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    _, subscriber = held_at_first_row(spark, tmp_path)
    other = new_session(spark)
    [(table, _)] = staged_tables(other).items()
    # A "delivered" outcome, and any MAC but the key's, put where the client puts its own:
    # the batch would otherwise commit with 39 rows unread.
    other.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{connect_sink.OUTCOME}'="
              f"'delivered:{'1' * 64}', '{connect_sink.OUTCOME_MAC}'='{'0' * 64}')")
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.error is not None and not subscriber.completed
    assert "does not carry the key" in str(subscriber.error)
    assert len(subscriber.elements) == 1
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()


def test_a_failed_outcome_mark_is_put_again_and_the_batch_never_delivered_twice(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fault injection in this (client) process: the first outcome mark the pump puts fails,
    # as a transient gRPC failure past the client's own retries would; the server is real.
    # Only this test's publisher (the pumps of earlier tests may still be ending).
    set_properties, new_token = connect_sink._set_properties, connect_sink.new_token
    tokens: list[str] = []
    outcome_puts: list[str] = []

    def recorded_token() -> str:
        tokens.append(new_token())
        return tokens[-1]

    def failing_once(session: Any, table: str, values: dict[str, str]) -> None:
        if tokens and f"_{tokens[0]}_" in table and connect_sink.OUTCOME in values:
            outcome_puts.append(table)
            if len(outcome_puts) == 1:
                raise ConnectionError("injected: the gRPC call failed (UNAVAILABLE)")
        set_properties(session, table, values)

    monkeypatch.setattr(connect_sink, "new_token", recorded_token)
    monkeypatch.setattr(connect_sink, "_set_properties", failing_once)
    df = reactive(spark, publisher="range", count=60, maxRecordsPerTrigger=30).load()
    publisher = publish(df, element="tuple", trigger=UNTIL_DRAINED,
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(1000)
    publisher.subscribe(subscriber)
    stop_when_delivered(publisher, 60, subscriber)
    assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.completed and subscriber.error is None
    assert sorted(v for (v,) in subscriber.elements) == list(range(60))  # each row once
    assert outcome_puts[:2] == [outcome_puts[0]] * 2 and outcome_puts[0].endswith("_0`")


_STRANGER = """
import json, os, sys
from pyspark.sql.connect.session import SparkSession

try:
    spark = SparkSession(connection="sc://" + sys.argv[1])  # no token of any kind
    spark.release_session_on_close = False
    print(json.dumps({"ran": spark.range(3).count()}))
except Exception as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error}"[:600]}))
# Out at once: once refused, the client's exit can wait on threads of its own (it once
# printed the refusal and was still running 90 s later); the answer is all that counts.
sys.stdout.flush()
os._exit(0)
"""


def test_another_local_user_without_the_token_is_refused(spark: SparkSession) -> None:
    from other_user import other_user_reason, run_as_other_user

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    endpoint = spark.client._builder.endpoint  # type: ignore[attr-defined]
    done = run_as_other_user(_STRANGER, endpoint, site_packages=True, timeout=90)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the other user: {done.stdout[-800:]} {done.stderr[-800:]}"
    result = json.loads(lines[-1])
    assert "ran" not in result, f"another uid ran a query with no token: {result}"
    assert "UNAUTHENTICATED" in result["error"], result


_SQUATTER = """
import errno, json, socket, sys

port, found = int(sys.argv[1]), {}
for family, address in ((socket.AF_INET6, "::1"), (socket.AF_INET6, "::"),
                        (socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0")):
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Whatever would let a second socket share the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if address == "::1":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(8)
        found[address] = "listening"
    except OSError as error:
        found[address] = errno.errorcode.get(error.errno, str(error.errno))
    finally:
        sock.close()
print(json.dumps(found))
"""


@pytest.mark.spark_lines  # each line's Connect client dials localhost with its own gRPC
def test_another_local_user_cannot_listen_where_clients_dial_and_new_sessions_work(
        spark: SparkSession, tmp_path: Path) -> None:
    # Clients dial localhost:PORT, which gRPC tries on ::1 first: whoever listened there
    # would be sent the token by the next new connection (newSession(), the foreachBatch
    # worker of a new query, a reconnect).
    from other_user import other_user_reason, run_as_other_user

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    endpoint = spark.client._builder.endpoint  # type: ignore[attr-defined]
    host, port = endpoint.rsplit(":", 1)
    assert host == "localhost"
    done = run_as_other_user(_SQUATTER, port, timeout=60)
    assert done.returncode == 0, done.stderr[-800:]
    found = json.loads(done.stdout.splitlines()[-1])
    # EADDRNOTAVAIL for ::1 where the machine has no IPv6 loopback: nobody listens there.
    assert "listening" not in found.values(), f"uid 65534 listened on port {port}: {found}"
    assert found["::1"] in ("EADDRINUSE", "EADDRNOTAVAIL"), found
    # The user's own new connections still reach the server: a new session, and Spark's
    # foreachBatch worker of a new query, which opens a session of its own.
    assert new_session(spark).range(5).count() == 5
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "part.json").write_text("".join(f'{{"v": {v}}}\n' for v in range(6)))
    table = f"squat_check_{uuid.uuid4().hex[:12]}"

    def keep(batch: Any, batch_id: int) -> None:
        batch.write.mode("append").saveAsTable(table)

    query = (spark.readStream.schema("v BIGINT").json(str(rows)).writeStream
             .foreachBatch(keep).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        assert query.awaitTermination(120), "the foreachBatch query did not end"
        assert query.exception() is None, query.exception()
        assert sorted(r.v for r in spark.table(table).collect()) == list(range(6))
    finally:
        query.stop()
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_another_local_user_gets_no_answer_from_sparks_own_rpc(spark: SparkSession) -> None:
    # The token guards the gRPC port only; the server's driver also listens for Spark's
    # own RPC (its endpoints, and the block manager), which spark.authenticate guards.
    from other_user import other_user_reason
    from pyspark import SparkContext
    from spark_rpc_probe import assert_refused

    reason = other_user_reason(site_packages=True)
    if reason is not None:
        pytest.skip(reason)
    driver = spark.conf.get("spark.driver.port")
    context = SparkContext._active_spark_context  # the server's, in this process
    assert context is not None
    # local[2]: one block manager, the driver's ("host:port").
    [block_manager] = [int(address.rsplit(":", 1)[1]) for address in context._jsc.sc()
                       .getExecutorMemoryStatus().keySet().mkString(",").split(",")]
    assert_refused([f"endpoint:{driver}:BlockManagerMaster", f"blocks:{block_manager}"])


def test_a_copy_of_a_delivered_batch_is_never_delivered_again(
        spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Another session copies batch 0's table, marks and all, while it waits, and puts the
    # copy back under its name once the batch function dropped it: the signature is
    # right, but batch 0 was delivered, and batch ids only grow within a run.
    caplog.set_level(logging.INFO, logger="pyspark_reactive.sink")
    df = reactive(spark, publisher="range", count=40, maxRecordsPerTrigger=20).load()
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Holding(1)
    publisher.subscribe(subscriber)
    subscriber.wait_for(1)
    other = new_session(spark)
    [(table, marks)] = staged_tables(other).items()
    copy_name = f"{table}_copy"
    other.sql(f"CREATE TABLE {copy_name} USING parquet PARTITIONED BY ({connect_sink._PART}) "
              f"AS SELECT * FROM {table}")
    release(subscriber, 1000)
    subscriber.wait_for(40)
    wait_until(lambda: table not in staged_tables(other), 60, "batch 0's table dropped")
    other.sql(f"ALTER TABLE {copy_name} RENAME TO {table}")
    other.sql(f"ALTER TABLE {table} SET TBLPROPERTIES (" + ", ".join(
        f"'{key}'='{value}'" for key, value in marks.items() if key.startswith("reactive."))
        + ")")
    wait_until(lambda: "batch 0 was delivered already" in caplog.text, 60,
               "the copy found and ignored")
    publisher.query.stop()
    assert subscriber.done.wait(60) and subscriber.completed, subscriber.error
    assert [v for (v,) in subscriber.elements] == list(range(40))
    other.sql(f"DROP TABLE IF EXISTS {table}")
