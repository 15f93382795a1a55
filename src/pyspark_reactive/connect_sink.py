"""``publish(df)`` under Spark Connect: the batch is staged on the server, the client fetches.

Under Connect, Spark runs the ``foreachBatch`` function in a Python process on the server,
out of reach of the client's subscribers, and (on Databricks serverless) the server cannot
open a connection to the client. So the transport uses nothing but Connect sessions:

1. On the server, :class:`ConnectStager` (the pickled ``foreachBatch`` function) tags each
   row with its partition, persists the micro-batch and names it with a global temporary
   view, ``global_temp.reactive_sink_<token>_<batch id>``, then waits.
2. In the client, :class:`ConnectPump` (a thread of the publisher's) finds the view
   through its own session and fetches the rows as Arrow one partition at a time, each
   fetch read to its end at once (a result left half-read would be abandoned by the
   server after some minutes), so the client holds about one partition. It offers them
   to the :class:`~pyspark_reactive.sink.ForeachBatchPublisher`'s subscribers against
   demand.
3. When every subscriber has taken the batch, the client drops the view: the server's
   function returns and Spark plans the next batch. A slow subscriber thus slows the
   query. When the batch cannot be delivered (the query is stopping, or its last
   subscriber cancelled with ``when_unsubscribed="stop"``), the client first names the
   reason in ``..._abort`` and then drops the view: the server's function raises it, so
   Spark does not commit the batch.

While a batch waits, the client renews ``..._alive`` every 2 s; a server whose client has
not done so for ``client_timeout`` seconds (the notebook's kernel died, say), or whose
client removed it (its pump failed or ended), fails the batch rather than wait forever.

Both sides poll (a round trip to the server each time): Connect offers no way to wait for
another session's change.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from .sink import HEARTBEAT_S, ForeachBatchPublisher, configure_writer

__all__ = ["ConnectPump", "ConnectStager", "connect_publish"]

log = logging.getLogger("pyspark_reactive.sink")

_PREFIX = "reactive_sink_"
# The column the stager adds: the partition each row was in, so the client can fetch one
# partition at a time.
_PART = "__reactive_partition"
# How often each side looks at the other's views: a round trip to the server each time.
POLL_S = 0.05
# Consecutive failed looks at the server after which the pump gives up.
_PUMP_RETRIES = 5


def new_token() -> str:
    """A name part no other publisher's views share."""
    return uuid.uuid4().hex[:16]


def _batch_view(token: str, batch_id: int) -> str:
    return f"{_PREFIX}{token}_{batch_id}"


def _abort_view(token: str, batch_id: int) -> str:
    return f"{_PREFIX}{token}_{batch_id}_abort"


def _alive_view(token: str) -> str:
    return f"{_PREFIX}{token}_alive"


def _exists(spark: Any, view: str) -> bool:
    return bool(spark.catalog.tableExists(f"global_temp.{view}"))


def _drop(spark: Any, view: str) -> None:
    spark.catalog.dropGlobalTempView(view)


def _put_value(spark: Any, view: str, value: str) -> None:
    spark.createDataFrame([(value,)], "value STRING").createOrReplaceGlobalTempView(view)


def _get_value(spark: Any, view: str) -> str | None:
    """The value ``view`` holds, or ``None`` when there is no such view. A failed read
    raises: read as "absent", it could commit a batch its client abandoned."""
    if not _exists(spark, view):
        return None
    try:
        row = spark.table(f"global_temp.{view}").first()
    except Exception:
        if not _exists(spark, view):
            return None  # dropped between the two looks
        raise
    return None if row is None else str(row[0])


class ConnectStager:
    """The ``foreachBatch`` function that runs on the Connect server (see the module).

    It holds only names and numbers, so it pickles as Spark Connect needs.

    Parameters
    ----------
    token : str
        Names this publisher's views.
    client_timeout : float
        Seconds a staged batch waits for a sign of life from the client before failing.
    """

    def __init__(self, token: str, client_timeout: float) -> None:
        self.token = token
        self.client_timeout = client_timeout

    def __call__(self, batch: Any, batch_id: int) -> None:
        spark = batch.sparkSession
        view = _batch_view(self.token, batch_id)
        from pyspark.sql.functions import spark_partition_id

        # Persisted: the client's reads compute the batch once, and read what this
        # function was given even from a source that would answer differently twice.
        staged = batch.withColumn(_PART, spark_partition_id()).persist()
        try:
            staged.createOrReplaceGlobalTempView(view)
            self._wait_while_staged(spark, view, batch_id)
        finally:
            try:
                if _exists(spark, view):
                    _drop(spark, view)
            finally:
                staged.unpersist()
        reason = _get_value(spark, _abort_view(self.token, batch_id))
        if reason is not None:
            _drop(spark, _abort_view(self.token, batch_id))
            # The client's own words: "ForeachBatchPublisher: batch N was not delivered:
            # why", in the form Spark takes for part of query.stop() when it stops.
            raise RuntimeError(reason)

    def _wait_while_staged(self, spark: Any, view: str, batch_id: int) -> None:
        pause = threading.Event()  # never set: a bounded wait between looks
        alive = _get_value(spark, _alive_view(self.token))
        heard = time.monotonic()
        looked = heard
        while _exists(spark, view):
            now = time.monotonic()
            if now - looked >= HEARTBEAT_S / 2:
                looked = now
                beat = _get_value(spark, _alive_view(self.token))
                if beat is None and alive is not None:
                    raise RuntimeError(
                        f"ForeachBatchPublisher: batch {batch_id} was not delivered: the "
                        "client that publishes this query stopped fetching (its log says "
                        "why)")
                if beat != alive:
                    alive, heard = beat, now
                elif now - heard > self.client_timeout:
                    raise RuntimeError(
                        f"ForeachBatchPublisher: batch {batch_id} was not delivered: the "
                        f"client process that publishes this query has given no sign of "
                        f"life for {self.client_timeout:.0f} s (publish(client_timeout=...))")
            pause.wait(POLL_S)


class ConnectPump:
    """The client side (see the module): finds staged batches and delivers them.

    Parameters
    ----------
    spark : pyspark.sql.connect.session.SparkSession
        The client's session, the one that started the query.
    token : str
        As given to the :class:`ConnectStager`.
    deliver : callable
        ``deliver(batch_id, record_batches)`` offers the rows to the subscribers and
        returns once every one has taken them; it raises to abandon the batch, and the
        exception's text is what the server's function raises.
    failed : callable
        ``failed(error)`` is told when the pump cannot go on (the server stopped
        answering); the server's batch function then fails too.
    """

    def __init__(self, spark: Any, token: str,
                 deliver: Callable[[int, Iterator[pa.RecordBatch]], None],
                 failed: Callable[[BaseException], None]) -> None:
        self.spark = spark
        self.token = token
        self.deliver = deliver
        self.failed = failed
        self.query: Any = None
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, query: Any) -> None:
        """Deliver the batches of ``query`` until it ends."""
        self.query = query
        _put_value(self.spark, _alive_view(self.token), "0")
        for target, name in ((self._run, "pump"), (self._beat, "heartbeat")):
            thread = threading.Thread(target=target, daemon=True,
                                      name=f"reactive-sink-connect-{name}-{self.token[:6]}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop fetching (idempotent); the query is not touched."""
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)

    # -- the pump ---------------------------------------------------------------------

    def _run(self) -> None:
        failure: BaseException | None = None
        misses = 0
        try:
            while not self._stopped.is_set():
                try:
                    staged = self._staged()
                    if staged:
                        self._deliver(staged[0])
                        misses = 0
                        continue
                    if not self._query_active():
                        break
                    misses = 0
                except Exception as error:
                    # A look at the server failed: try again a few times, then give up.
                    misses += 1
                    if misses >= _PUMP_RETRIES:
                        raise
                    log.warning("ForeachBatchPublisher: a look at the Spark Connect server "
                                "failed (%d of %d): %s", misses, _PUMP_RETRIES, error)
                self._stopped.wait(POLL_S)
        except Exception as error:
            failure = error
            log.exception("ForeachBatchPublisher: fetching batches from the Spark Connect "
                          "server failed; the batch the server holds fails with the query")
        finally:
            self._stopped.set()
            try:
                # Gone, the server's batch function stops waiting for this client.
                _drop(self.spark, _alive_view(self.token))
            except Exception:
                log.debug("could not drop the heartbeat view", exc_info=True)
        if failure is not None:
            self.failed(failure)

    def _query_active(self) -> bool:
        try:
            return bool(self.query.isActive)
        except Exception as error:  # the session is closing
            log.info("ForeachBatchPublisher: the query's state cannot be read (%s); the "
                     "client stops fetching", error)
            return False

    def _staged(self) -> list[int]:
        prefix = f"{_PREFIX}{self.token}_"
        rows = self.spark.sql(f"SHOW VIEWS IN global_temp LIKE '{prefix}*'").collect()
        ids = []
        for row in rows:
            rest = str(row.viewName)[len(prefix):]
            if rest.isdigit():
                ids.append(int(rest))
        return sorted(ids)

    def _deliver(self, batch_id: int) -> None:
        view = _batch_view(self.token, batch_id)
        try:
            self.deliver(batch_id, self._fetch(view))
        except Exception as error:
            # Named first, then the view dropped: the server reads the reason only once
            # the view is gone, so it never misses it. The publisher's own errors say
            # which batch and why (a stop in the words Spark takes for a stop); any other
            # (the batch's computation failed: a UDF raised) is named as the cause.
            reason = str(error)
            if not reason.startswith("ForeachBatchPublisher: "):
                reason = (f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                          f"fetching it failed: {type(error).__name__}: {reason.strip()}")
            _put_value(self.spark, _abort_view(self.token, batch_id), reason)
            log.info("ForeachBatchPublisher: batch %d abandoned: %s", batch_id, reason)
        _drop(self.spark, view)

    def _fetch(self, view: str) -> Iterator[pa.RecordBatch]:
        frame = self.spark.table(f"global_temp.{view}")
        parts = sorted(int(row[0]) for row in frame.select(_PART).distinct().collect())
        for part in parts:
            # Read whole before its rows are offered: the client holds one partition, and
            # no result stays half-read on the server while a subscriber is slow.
            table = frame.where(frame[_PART] == part).drop(_PART).toArrow()
            yield from table.to_batches()

    def _beat(self) -> None:
        count = 0
        while not self._stopped.wait(HEARTBEAT_S):
            count += 1
            try:
                _put_value(self.spark, _alive_view(self.token), str(count))
            except Exception:
                if self._stopped.is_set():
                    return
                log.debug("heartbeat failed", exc_info=True)


def connect_publish(df: Any, publisher: ForeachBatchPublisher, writer_options: dict[str, Any],
                    trigger: dict[str, Any] | None, client_timeout: float) -> None:
    """Start ``df``'s query under Spark Connect with ``publisher`` fed through the server.

    ``publish()`` calls this for a Connect DataFrame, with its arguments checked;
    ``writer_options`` are its ``queryName``, ``outputMode`` and ``writeStream.option``
    keywords.
    """
    token = new_token()
    writer = df.writeStream.foreachBatch(ConnectStager(token, float(client_timeout)))
    writer = configure_writer(writer, writer_options, trigger)
    pump = ConnectPump(df.sparkSession, token, publisher.deliver_arrow,
                       lambda error: publisher.fail(RuntimeError(
                           f"ForeachBatchPublisher: fetching from the Spark Connect server "
                           f"failed: {error}")))
    query = writer.start()
    try:
        publisher.watch(query)
        pump.start(query)
    except BaseException:
        query.stop()  # nobody would fetch its batches
        raise
