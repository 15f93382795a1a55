"""``publish(df)`` under Spark Connect: the batch is staged on the server, the client fetches.

Under Connect, Spark runs the ``foreachBatch`` function in a Python process on the server,
out of reach of the client's subscribers, and (on Databricks serverless) the server cannot
open a connection to the client. So the transport uses nothing but Connect sessions, and
only two of them: the client's own and the one Spark binds the micro-batch to (the same
session, or on Spark 4.3+ the query's clone of it). Their temporary views are invisible to
every other session of the server.

1. On the server, :class:`ConnectStager` (the pickled ``foreachBatch`` function) tags each
   row with its partition, persists the micro-batch and names it with a temporary view of
   the batch's session, ``reactive_sink_<token>_<batch id>``. It counts the rows of each
   partition and a digest of their values, and puts a *staged* mark (which session, the
   schema, the counts and digests) in a temporary view of the client's session, signed
   with a key (HMAC-SHA256) that only the stager and the client hold: it travels inside the
   pickled function and lives in the client's memory, never in a view, table or plan.
2. In the client, :class:`ConnectPump` (a thread of the publisher's) finds the mark,
   checks its signature, and fetches the rows as Arrow one partition at a time, each read
   to its end at once (a result left half-read would be abandoned by the server after some
   minutes), so the client holds about one partition. A partition whose count or digest
   differs from the mark's, or a batch view that is gone, fails the batch with an error
   that says so; nothing of it is offered. The rows go to the
   :class:`~pyspark_reactive.sink.ForeachBatchPublisher`'s subscribers against demand.
3. The client then puts a signed *outcome* mark: delivered (with the counts and digests it
   received), or not delivered and why. The stager returns only for a delivered mark that
   carries the key and matches what it staged: the batch is committed only then. A mark
   without the key fails the batch saying so; a reason is quoted as data in the stager's
   own error. A stopping query's batch ends as Spark expects of a stop.

The client remembers each batch it settled: when putting the outcome mark fails, it puts
it again, and never delivers that batch a second time.

While a batch waits, the client renews ``..._alive`` every 2 s; a server whose client has
not done so for ``client_timeout`` seconds (the notebook's kernel died, say), or whose
client removed it (its pump failed or ended), fails the batch rather than wait forever.

Both sides poll (a round trip to the server each time): Connect offers no way to wait for
another session's change. The marks are plain strings, so the same signing carries over to
staging in tables where temporary views are not allowed.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import os
import secrets
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from .sink import _STOP_MARK, HEARTBEAT_S, ForeachBatchPublisher, _stopped, configure_writer

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
# A reason longer than this is cut: it travels as a SQL literal and ends in an error text.
_REASON_CHARS = 2000
_MARK_VERSION = "pyspark-reactive connect sink 1"
_PY4J_ERROR = "py4j.protocol.Py4JJavaError: An error occurred while calling"


def new_token() -> str:
    """A name part no other publisher's views share."""
    return uuid.uuid4().hex[:16]


def new_key() -> bytes:
    """The key a stager and its client sign their marks with."""
    return secrets.token_bytes(32)


def _batch_view(token: str, batch_id: int) -> str:
    return f"{_PREFIX}{token}_{batch_id}"


def _staged_view(token: str, batch_id: int) -> str:
    return f"{_PREFIX}{token}_{batch_id}_staged"


def _outcome_view(token: str, batch_id: int) -> str:
    return f"{_PREFIX}{token}_{batch_id}_outcome"


def _alive_view(token: str) -> str:
    return f"{_PREFIX}{token}_alive"


# -- signed marks ----------------------------------------------------------------------------


def _sign(key: bytes, kind: str, token: str, batch_id: int, value: str) -> str:
    """HMAC-SHA256 of a mark: what it is, for which query and batch, and its value."""
    message = "\n".join((_MARK_VERSION, kind, token, str(batch_id), value)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _signed(key: bytes, kind: str, token: str, batch_id: int, value: str, mac: str) -> bool:
    return hmac.compare_digest(_sign(key, kind, token, batch_id, value), mac)


def _encode(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# -- temporary views of one session ----------------------------------------------------------


def _exists(spark: Any, view: str) -> bool:
    return bool(spark.catalog.tableExists(view))


def _drop(spark: Any, view: str) -> None:
    spark.catalog.dropTempView(view)


def _put_mark(spark: Any, view: str, value: str, mac: str = "") -> None:
    # A SQL literal rather than createDataFrame, which a client newer than its server may
    # encode in a way the server cannot read. Hex, so no text needs escaping.
    spark.sql(f"SELECT CAST(X'{value.encode().hex()}' AS STRING) AS value, "
              f"CAST(X'{mac.encode().hex()}' AS STRING) AS mac").createOrReplaceTempView(view)


def _get_mark(spark: Any, view: str) -> tuple[str, str] | None:
    """The ``(value, mac)`` that ``view`` holds, or ``None`` when there is no such view. A
    failed read raises: read as "absent", it could mislead either side."""
    if not _exists(spark, view):
        return None
    try:
        row = spark.table(view).first()
    except Exception:
        if not _exists(spark, view):
            return None  # dropped between the two looks
        raise
    if row is None:
        return None
    return str(row[0]), str(row[1] or "")


def _digest_columns(schema: Any) -> list[str]:
    """The columns a row's digest covers: every column whose type Spark can hash (not a
    map or variant, anywhere inside). The row counts cover the others."""
    return [field.name for field in schema.fields
            if not any(word in field.dataType.simpleString() for word in ("map<", "variant"))]


def _checks(names: list[str]) -> list[Any]:
    """The figures both sides compute over a partition, the stager when it stages and the
    client in the query that fetches it: the row count and the sums of the low and high
    32 bits of each row's xxhash64 over ``names`` (summed apart so they cannot overflow)."""
    from pyspark.sql import functions as F

    digest = (F.xxhash64(*[F.col("`" + name.replace("`", "``") + "`") for name in names])
              if names else F.lit(0).cast("bigint"))
    return [F.count(F.lit(1)).alias("n"),
            F.sum(digest.bitwiseAND(F.lit(0xFFFFFFFF))).alias("low"),
            F.sum(F.shiftright(digest, 32)).alias("high")]


class ConnectStager:
    """The ``foreachBatch`` function that runs on the Connect server (see the module).

    It holds only names, numbers and the key, so it pickles as Spark Connect needs.

    Parameters
    ----------
    token : str
        Names this publisher's views.
    client_timeout : float
        Seconds a staged batch waits for a sign of life from the client before failing.
    key : bytes
        Signs and checks the marks; known only to this function and the client.
    client_session : str
        The client's session id: its temporary views hold the marks.
    """

    def __init__(self, token: str, client_timeout: float, key: bytes,
                 client_session: str) -> None:
        self.token = token
        self.client_timeout = client_timeout
        self.key = key
        self.client_session = client_session
        self._control: Any = None

    def __repr__(self) -> str:  # never the key
        return f"ConnectStager(token={self.token!r}, client_timeout={self.client_timeout})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_control": None}

    def __call__(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql.functions import spark_partition_id

        session = batch.sparkSession
        control = self._client_session(session)
        view = _batch_view(self.token, batch_id)
        # Persisted: the digests and the client's reads compute the batch once, and read
        # what this function was given even from a source that would answer differently.
        staged = batch.withColumn(_PART, spark_partition_id()).persist()
        delivered = False
        try:
            staged.createOrReplaceTempView(view)
            summary = self._summary(staged, session)
            value = _encode(summary)
            _put_mark(control, _staged_view(self.token, batch_id), value,
                      _sign(self.key, "staged", self.token, batch_id, value))
            self._wait_for_outcome(control, batch_id, summary)
            delivered = True
        finally:
            # The staged mark first: the client settles a batch once, and forgets it once
            # its staged mark is gone, so a later outcome mark would not be put again.
            for where, name in ((control, _staged_view(self.token, batch_id)),
                                (control, _outcome_view(self.token, batch_id)),
                                (session, view)):
                try:
                    if _exists(where, name):
                        _drop(where, name)
                except Exception:
                    if not delivered:
                        raise
                    # Delivered: failing now would have the batch delivered again later.
                    log.warning("ForeachBatchPublisher: could not drop %s after batch %d was "
                                "delivered", name, batch_id, exc_info=True)
            staged.unpersist()

    def _client_session(self, batch_session: Any) -> Any:
        """The client's own session, where the marks live."""
        if batch_session.session_id == self.client_session:
            return batch_session
        if self._control is None:
            # Spark 4.3+ binds the batch to the query's clone of the client's session; the
            # worker reaches the server through this URL (its token included).
            url = os.environ.get("SPARK_CONNECT_LOCAL_URL")
            if not url:
                raise RuntimeError(
                    "ForeachBatchPublisher: this Spark Connect server runs foreachBatch in a "
                    "session other than the client's and gives no way to reach the client's; "
                    "set spark.sql.connect.streaming.foreachBatch.useClonedSession=false in "
                    "the client's session before publish()")
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            control = ConnectSession(connection=f"{url};session_id={self.client_session}")
            control.release_session_on_close = False  # the client's, never ended from here
            self._control = control
        return self._control

    def _summary(self, staged: Any, session: Any) -> dict[str, Any]:
        names = _digest_columns(staged.drop(_PART).schema)
        counts = staged.groupBy(_PART).agg(*_checks(names)).collect()
        parts = sorted([int(p), int(n), int(low), int(high)] for p, n, low, high in counts)
        return {"session": session.session_id, "schema": staged.schema.json(),
                "digested": names, "parts": parts, "rows": sum(p[1] for p in parts)}

    def _wait_for_outcome(self, control: Any, batch_id: int, summary: dict[str, Any]) -> None:
        pause = threading.Event()  # never set: a bounded wait between looks
        outcome_view = _outcome_view(self.token, batch_id)
        alive = _get_mark(control, _alive_view(self.token))
        heard = time.monotonic()
        looked = heard
        while True:
            mark = _get_mark(control, outcome_view)
            if mark is not None:
                self._settle(batch_id, summary, *mark)
                return
            now = time.monotonic()
            if now - looked >= HEARTBEAT_S / 2:
                looked = now
                beat = _get_mark(control, _alive_view(self.token))
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

    def _settle(self, batch_id: int, summary: dict[str, Any], value: str, mac: str) -> None:
        """Return for a signed delivered mark matching what was staged; raise otherwise."""
        if not _signed(self.key, "outcome", self.token, batch_id, value, mac):
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not delivered: the mark that "
                "confirms it does not carry the key of this query's client (another session "
                "of the server wrote or changed it); the batch is not committed")
        outcome = json.loads(value)
        kind = outcome.get("kind")
        if kind == "delivered":
            if outcome.get("parts") != summary["parts"]:
                raise RuntimeError(
                    f"ForeachBatchPublisher: batch {batch_id} was not delivered as staged: "
                    "the client received other rows than this batch holds; the batch is not "
                    "committed")
            return
        if kind == "stopped":
            raise _stopped(batch_id)  # in the words Spark takes for part of a stop
        reason = str(outcome.get("reason", ""))[:_REASON_CHARS]
        # Spark takes an error for part of a stop when its text holds a Py4J error for an
        # interruption (sink._STOP_MARK): only the stopped kind above may read so.
        reason = reason.replace(_PY4J_ERROR, _PY4J_ERROR.removeprefix("py4j.protocol."))
        # The client's words are data: quoted under this function's own message.
        raise RuntimeError(
            f"ForeachBatchPublisher: batch {batch_id} was not delivered; the client that "
            f"publishes this query gave this reason:\n{textwrap.indent(reason, '  | ')}")


class _Settled:
    """What the client made of one batch: its signed outcome mark, and whether it is put."""

    def __init__(self, value: str, mac: str) -> None:
        self.value = value
        self.mac = mac
        self.put = False


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
        exception's text is quoted in the error the server's function raises.
    failed : callable
        ``failed(error)`` is told when the pump cannot go on (the server stopped
        answering); the server's batch function then fails too.
    key : bytes
        As given to the :class:`ConnectStager`.
    """

    def __init__(self, spark: Any, token: str,
                 deliver: Callable[[int, Iterator[pa.RecordBatch]], None],
                 failed: Callable[[BaseException], None], *, key: bytes) -> None:
        self.spark = spark
        self.token = token
        self.deliver = deliver
        self.failed = failed
        self._key = key
        self.query: Any = None
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        # Batches delivered or abandoned, until the stager has cleared their staged mark.
        self._settled: dict[int, _Settled] = {}
        self._sessions: dict[str, Any] = {}  # batch sessions other than the client's

    def __repr__(self) -> str:  # never the key
        return f"ConnectPump(token={self.token!r})"

    def start(self, query: Any) -> None:
        """Deliver the batches of ``query`` until it ends."""
        self.query = query
        _put_mark(self.spark, _alive_view(self.token), "0")
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
                    if self._step():
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
            for session in self._sessions.values():
                try:
                    session.client.close()  # the channel only: the session is the query's
                except Exception:
                    log.debug("could not close a channel", exc_info=True)
        if failure is not None:
            self.failed(failure)

    def _step(self) -> bool:
        """Do the next thing the staged batches ask for; ``False`` when there is none."""
        staged = self._staged()
        for batch_id in [b for b in self._settled if b not in staged]:
            del self._settled[batch_id]  # the stager is done with it
        for batch_id in staged:
            settled = self._settled.get(batch_id)
            if settled is None:
                self._deliver(batch_id)
                return True
            if not settled.put:
                # Finding the batch still staged is no reason to deliver it again: only
                # the outcome mark, which failed to go out, is put again.
                self._put_outcome(batch_id, settled)
                return True
        return False

    def _query_active(self) -> bool:
        try:
            return bool(self.query.isActive)
        except Exception as error:  # the session is closing
            log.info("ForeachBatchPublisher: the query's state cannot be read (%s); the "
                     "client stops fetching", error)
            return False

    def _staged(self) -> list[int]:
        prefix = f"{_PREFIX}{self.token}_"
        rows = self.spark.sql(f"SHOW VIEWS LIKE '{prefix}*_staged'").collect()
        ids = []
        for row in rows:
            name = str(row.viewName)
            if not (name.startswith(prefix) and name.endswith("_staged")):
                continue
            rest = name[len(prefix):-len("_staged")]
            if rest.isdigit():
                ids.append(int(rest))
        return sorted(ids)

    def _deliver(self, batch_id: int) -> None:
        # Read before anything is offered: a failed read is retried by the loop.
        mark = _get_mark(self.spark, _staged_view(self.token, batch_id))
        if mark is None:
            return  # gone since the listing: the stager gave up on it
        received: list[list[int]] = []
        try:
            staged = self._check_staged(batch_id, *mark)
            self.deliver(batch_id, self._fetch(batch_id, staged, received))
            outcome: dict[str, Any] = {"kind": "delivered", "parts": received}
        except Exception as error:
            # The publisher's own errors say which batch and why (a stop in the words
            # Spark takes for a stop); any other (the batch's computation failed: a UDF
            # raised) is named as the cause.
            reason = str(error)
            stopping = reason.endswith(f"({_STOP_MARK})")
            if not reason.startswith("ForeachBatchPublisher: "):
                reason = (f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                          f"fetching it failed: {type(error).__name__}: {reason.strip()}")
            outcome = {"kind": "stopped" if stopping else "abandoned",
                       "reason": reason[:_REASON_CHARS]}
            log.info("ForeachBatchPublisher: batch %d abandoned: %s", batch_id, reason)
        value = _encode(outcome)
        settled = _Settled(value, _sign(self._key, "outcome", self.token, batch_id, value))
        self._settled[batch_id] = settled  # from here on, this batch is never offered again
        self._put_outcome(batch_id, settled)

    def _put_outcome(self, batch_id: int, settled: _Settled) -> None:
        _put_mark(self.spark, _outcome_view(self.token, batch_id), settled.value, settled.mac)
        settled.put = True

    def _check_staged(self, batch_id: int, value: str, mac: str) -> dict[str, Any]:
        if not _signed(self._key, "staged", self.token, batch_id, value, mac):
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not delivered: its staged mark "
                "does not carry the key of this query's batch function (another session of "
                "the server wrote or changed it)")
        staged: dict[str, Any] = json.loads(value)
        return staged

    def _fetch(self, batch_id: int, staged: dict[str, Any],
               received: list[list[int]]) -> Iterator[pa.RecordBatch]:
        session = self._session(str(staged["session"]))
        view = _batch_view(self.token, batch_id)
        altered = (f"ForeachBatchPublisher: batch {batch_id} was not delivered: the staged "
                   f"batch was altered after it was staged (by another session of the "
                   f"server?): ")
        if not _exists(session, view):
            raise RuntimeError(f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                               "the staged batch is missing (its view was dropped)")
        frame = session.table(view)
        if frame.schema.json() != staged["schema"]:
            raise RuntimeError(altered + "its columns differ")
        from pyspark.sql import Observation

        checks = _checks(list(staged["digested"]))
        for part, count, low, high in staged["parts"]:
            # Read whole, and checked, before its rows are offered: the client holds one
            # partition, and no result stays half-read on the server meanwhile. The count
            # and digest are observed by the very query that returns the rows (metrics
            # come with its result), so what is checked is what arrived, and no digest
            # column travels with the rows (narrow rows: half the bytes).
            seen = Observation(f"reactive_sink_check_{uuid.uuid4().hex}")
            table = (frame.where(frame[_PART] == part).drop(_PART)
                     .observe(seen, *checks).toArrow())
            metrics = seen.get
            if "n" not in metrics:
                raise RuntimeError(f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                                   f"the server returned no observed metrics for partition "
                                   f"{part}, so its rows could not be checked against what "
                                   "was staged")
            got = [part, int(metrics.get("n") or 0), int(metrics.get("low") or 0),
                   int(metrics.get("high") or 0)]
            if got != [part, count, low, high] or table.num_rows != count:
                raise RuntimeError(altered + f"partition {part} holds other rows "
                                   f"({table.num_rows} against {count} staged, or other values)")
            received.append(got)
            yield from table.to_batches()

    def _session(self, session_id: str) -> Any:
        """The session the batch is bound to: the client's, or the query's clone of it."""
        if session_id == self.spark.session_id:
            return self.spark
        session = self._sessions.get(session_id)
        if session is None:
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            builder = copy.copy(self.spark.client._builder)  # this client's server and token
            builder._params = {**builder._params, "session_id": session_id}
            session = ConnectSession(connection=builder)
            session.release_session_on_close = False  # the query's, never ended from here
            self._sessions[session_id] = session
        return session

    def _beat(self) -> None:
        count = 0
        while not self._stopped.wait(HEARTBEAT_S):
            count += 1
            try:
                _put_mark(self.spark, _alive_view(self.token), str(count))
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
    token, key = new_token(), new_key()
    spark = df.sparkSession
    writer = df.writeStream.foreachBatch(
        ConnectStager(token, float(client_timeout), key, spark.session_id))
    writer = configure_writer(writer, writer_options, trigger)
    pump = ConnectPump(spark, token, publisher.deliver_arrow,
                       lambda error: publisher.fail(RuntimeError(
                           f"ForeachBatchPublisher: fetching from the Spark Connect server "
                           f"failed: {error}")), key=key)
    query = writer.start()
    try:
        publisher.watch(query)
        pump.start(query)
    except BaseException:
        query.stop()  # nobody would fetch its batches
        raise
