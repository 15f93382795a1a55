"""``publish(df)`` under Spark Connect: the batch is staged on the server, the client fetches.

Under Connect, Spark runs the ``foreachBatch`` function in a Python process on the server,
out of reach of the client's subscribers, and (on Databricks serverless) the server cannot
open a connection to the client. So the transport uses nothing but Connect sessions:

1. On the server, :class:`ConnectStager` (the pickled ``foreachBatch`` function) persists
   the micro-batch and names it with a global temporary view,
   ``global_temp.reactive_sink_<token>_<batch id>``, then waits.
2. In the client, :class:`ConnectPump` (a thread of the publisher's) finds the view
   through its own session, fetches the rows as Arrow a chunk at a time (a streamed
   result, so the client holds about one chunk), and offers them to the
   :class:`~pyspark_reactive.sink.ForeachBatchPublisher`'s subscribers against demand.
3. When every subscriber has taken the batch, the client drops the view: the server's
   function returns and Spark plans the next batch. A slow subscriber thus slows the
   query. When the batch cannot be delivered (the query is stopping, or its last
   subscriber cancelled with ``when_unsubscribed="stop"``), the client first names the
   reason in ``..._abort`` and then drops the view: the server's function raises it, so
   Spark does not commit the batch.

While a batch waits, the client renews ``..._alive`` every ``heartbeat`` seconds; a
server whose client has not done so for ``client_timeout`` seconds (the notebook's kernel
died, say) fails the batch rather than wait forever.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from .sink import ForeachBatchPublisher, configure_writer

__all__ = ["ConnectPump", "ConnectStager", "connect_publish", "new_token"]

log = logging.getLogger("pyspark_reactive.sink")

_PREFIX = "reactive_sink_"
# How often each side looks at the other's views: a round trip to the server each time.
POLL_S = 0.05
HEARTBEAT_S = 2.0
#: Default of ``publish(client_timeout=...)``: seconds without a heartbeat from the client
#: after which a staged batch fails.
CLIENT_TIMEOUT_S = 120.0


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
    try:
        row = spark.table(f"global_temp.{view}").first()
    except Exception:  # dropped meanwhile
        return None
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
        # Persisted: the client's read computes the batch once, and reads what this
        # function was given even from a source that would answer differently twice.
        staged = batch.persist()
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
        ``deliver(batch_id, chunks)`` offers the chunks of rows to the subscribers and
        returns once every one has taken them; it raises to abandon the batch, and the
        exception's text is what the server's function raises.
    chunk_rows : int
        Rows cut from the fetched Arrow data per chunk.
    """

    def __init__(self, spark: Any, token: str,
                 deliver: Callable[[int, Iterator[pa.RecordBatch]], None]) -> None:
        self.spark = spark
        self.token = token
        self.deliver = deliver
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
        try:
            while not self._stopped.is_set():
                staged = self._staged()
                if staged:
                    self._deliver(staged[0])
                    continue
                if not self._query_active():
                    break
                self._stopped.wait(POLL_S)
        except Exception:
            log.exception("ForeachBatchPublisher: fetching batches from the Spark Connect "
                          "server failed; the query's batches now wait for the client")
        finally:
            self._stopped.set()
            try:
                _drop(self.spark, _alive_view(self.token))
            except Exception:
                log.debug("could not drop the heartbeat view", exc_info=True)

    def _query_active(self) -> bool:
        try:
            return bool(self.query.isActive)
        except Exception:  # the session is closing
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
            # the view is gone, so it never misses it.
            _put_value(self.spark, _abort_view(self.token, batch_id), str(error))
            log.info("ForeachBatchPublisher: batch %d abandoned: %s", batch_id, error)
        _drop(self.spark, view)

    def _fetch(self, view: str) -> Iterator[pa.RecordBatch]:
        frame = self.spark.table(f"global_temp.{view}")
        client = self.spark.client
        # A streamed result: Arrow batches arrive as the server sends them, and gRPC's
        # flow control holds the server back while the subscribers are slow.
        for part in client.to_table_as_iterator(frame._plan.to_proto(client),
                                                frame._plan.observations):
            if isinstance(part, pa.Table):
                yield from part.to_batches()

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

    ``publish()`` calls this for a Connect DataFrame; ``writer_options`` are its
    ``queryName``, ``outputMode`` and ``writeStream.option`` keywords.
    """
    if not isinstance(client_timeout, (int, float)) or isinstance(client_timeout, bool) \
            or not client_timeout > 0:
        raise ValueError(f"publish: client_timeout={client_timeout!r} is not accepted: a "
                         "positive number of seconds")
    token = new_token()
    writer = df.writeStream.foreachBatch(ConnectStager(token, float(client_timeout)))
    writer = configure_writer(writer, writer_options, trigger)
    pump = ConnectPump(df.sparkSession, token, publisher.deliver_arrow)
    query = writer.start()
    publisher.watch(query)
    pump.start(query)
