"""``publish(df)`` under Spark Connect: each batch staged in a table, fetched by the client.

Under Connect, Spark runs the ``foreachBatch`` function in a Python process on the server,
out of reach of the client's subscribers, and (on Databricks serverless) the server cannot
open a connection to the client, keep a DataFrame with ``persist()`` or name one with a
global temporary view. So the transport uses nothing but tables of the catalog, reached by
both sides through their own Connect sessions, and statements every catalog has (``CREATE``
through ``saveAsTable``, ``ALTER TABLE ... SET TBLPROPERTIES``, ``SHOW TABLES``, ``DROP``):

1. On the server, :class:`ConnectStager` (the pickled ``foreachBatch`` function) writes the
   micro-batch to a table of its own, ``<staging>.reactive_stage_<query>_<run>_<batch
   id>``, partitioned by the Spark partition each row was in (so the client can read one
   at a time), in the catalog's default format (Delta on Databricks, parquet in OSS
   Spark). ``<staging>`` is a catalog and schema the user names (``publish(staging=...)``;
   by default the session's current ones), ``<query>`` is a digest of the checkpoint
   location (the same on every start of the same query) and ``<run>`` is random for each
   ``publish()``. A table of that batch id left by an earlier attempt is dropped first, so
   a retried batch is staged once, whatever the format. On their way into the table the
   rows pass through :class:`~pyspark_reactive.sink.digest.DigestAsWritten` (``mapInArrow``
   in the same write), which numbers each partition's rows (a column of the table) and
   digests them in that order (:class:`~pyspark_reactive.sink.digest.PartitionDigest`:
   SHA-256 over a canonical form of every value, NULLs and nested fields included); the
   write's observed metrics bring back each partition's row count and digest. Nothing is
   read back, so no other session's write can come between what is written and what is
   marked; an observation missing or not adding up fails the batch. The stager then puts a
   *staged* mark in the table's properties (the counts and digests, the columns' digest),
   signed with a key (HMAC-SHA256) that only the stager and the client hold: it travels
   inside the pickled function and lives in the client's memory, never in a table,
   property or plan.
2. In the client, :class:`ConnectPump` (a thread of the publisher's) finds the signed
   table, checks the signature, and reads the rows as Arrow one partition at a time, each
   read to its end at once (a result left half-read would be abandoned by the server after
   some minutes), puts them back in the numbered order, and digests them in this process:
   a partition whose count or digest differs from the mark's, or a table that is gone,
   fails the batch with an error that says so, before any row of that partition is
   offered. The rows go to the :class:`~pyspark_reactive.ForeachBatchPublisher`'s
   subscribers against demand; once they have taken a partition's first chunk, the next
   partition is fetched meanwhile, so the client holds at most two partitions.
3. The client then puts a signed *outcome* in the table's properties: delivered (with a
   digest of the counts and digests it received), or not delivered and why. The stager
   returns only for a delivered outcome that carries the key and matches what it staged,
   and drops the table: the batch is committed only then. An outcome without the key fails
   the batch saying so; a reason is quoted as data in the stager's own error. A stopping
   query's batch ends as Spark expects of a stop.

The client remembers each batch it settled: when putting the outcome fails, it puts it
again, and never delivers that batch a second time.

While a batch waits, the client renews a heartbeat property of its table every 2 s; a
stager that has not seen it change for ``client_timeout`` seconds (the notebook's kernel
died, say), or that finds the client's "gone" outcome (its pump ended), fails the batch
rather than wait forever, and drops the table.

Staging a dead side left (a server killed while a batch waited) is dropped when the same
query (the same checkpoint) starts again, by its first batch: Spark runs one query of a
checkpoint at a time, so those tables belong to no running query. Tables of another query
have another ``<query>`` part and are never touched.

Both sides poll (a round trip to the server each time): Connect offers no way to wait for
another session's change.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import textwrap
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .digest import DIGEST, SEQ, DigestAsWritten, PartitionDigest
from .publisher import _STOP_MARK, ForeachBatchPublisher, _stopped
from .write_stream import configure_writer

__all__ = ["HEARTBEAT_S", "ConnectPump", "ConnectStager", "connect_publish",
           "refuse_unstageable", "staging_namespace"]

log = logging.getLogger("pyspark_reactive.sink")

PREFIX = "reactive_stage_"
# The client's heartbeat while a batch waits (publish()'s smallest client_timeout leaves
# room for several).
HEARTBEAT_S = 2.0
# The column the stager adds and partitions the table by: the Spark partition each row was
# in, so the client can read one at a time.
_PART = "__reactive_partition"
# How often each side looks at the other's marks (a round trip to the server each time):
# every POLL_S for FAST_S after a change, when the other side's next step is due (a batch
# staged, delivered, committed: seconds), then backing off by half each time up to
# MAX_POLL_S while nothing changes (an idle stream, a slow subscriber).
POLL_S = 0.05
FAST_S = 3.0
MAX_POLL_S = 0.25
# How long the client leaves a batch it settled before looking whether its outcome is still
# there (the stager normally sees it and drops the table sooner), and how often at most it
# asks whether the query still runs while nothing happens: each look is a round trip.
_SETTLE_S = 1.0
_ACTIVE_S = 0.5
# Consecutive failed looks at the server after which the pump gives up.
_PUMP_RETRIES = 5
# How long the end of a query waits for the pump to finish its cleanup, and a batch for
# the last one's table to be dropped.
_PUMP_JOIN_S = 30.0
_DROP_JOIN_S = 30.0
# A reason longer than this is cut: it travels as a table property and ends in an error.
_REASON_CHARS = 1000
_MARK_VERSION = "pyspark-reactive connect sink 3"
_PY4J_ERROR = "py4j.protocol.Py4JJavaError: An error occurred while calling"
# The table properties the two sides write (keys of letters and dots, values of hex
# digits, digits, colons and minus signs: nothing to escape in SQL).
STAGED, STAGED_MAC, PART = "reactive.staged", "reactive.staged.mac", "reactive.part."
OUTCOME, OUTCOME_MAC, ALIVE = "reactive.outcome", "reactive.outcome.mac", "reactive.alive"
_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Pace:
    """The waits between one side's looks at the other's marks (see ``POLL_S``)."""

    def __init__(self) -> None:
        self.changed()

    def changed(self) -> None:
        """Something happened: the other side's next step is due soon."""
        self._since = time.monotonic()
        self._wait = POLL_S

    def next(self) -> float:
        """The seconds to wait before the next look."""
        if time.monotonic() - self._since < FAST_S:
            return POLL_S
        self._wait = min(self._wait * 1.5, MAX_POLL_S)
        return self._wait


def new_token() -> str:
    """A name part of one ``publish()``'s tables that no other run's share."""
    return secrets.token_hex(6)


def new_key() -> bytes:
    """The key a stager and its client sign their marks with."""
    return secrets.token_bytes(32)


def query_part(checkpoint: Any, token: str) -> str:
    """The name part of a query's staging tables: a digest of its checkpoint location,
    the same on every start of the query, or (no location given: the query cannot be
    started again) one of this run's own."""
    if checkpoint is None or not str(checkpoint).strip():
        return f"run{token}"[:16]
    return hashlib.sha256(str(checkpoint).rstrip("/").encode()).hexdigest()[:16]


def staging_namespace(spark: Any, staging: str | None) -> str:
    """The quoted ``catalog.schema`` that ``publish(staging=...)`` names, checked.

    ``None`` means the session's current catalog and schema; ``"schema"`` a schema of the
    current catalog.

    Raises
    ------
    ValueError
        For a name not of one or two parts of letters, digits, ``_`` and ``-``, or a
        schema that does not exist (or that this session cannot see).
    """
    accepted = ("a schema ('scratch') or a catalog and schema ('main.scratch'), each of "
                "letters, digits, '_' and '-', or None for the session's current ones")
    if staging is None:
        parts = [spark.catalog.currentCatalog(), spark.catalog.currentDatabase()]
    elif not isinstance(staging, str):
        raise ValueError(f"publish: staging={staging!r} is not accepted: {accepted}")
    else:
        parts = staging.split(".")
        if not (1 <= len(parts) <= 2
                and all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", part) for part in parts)):
            raise ValueError(f"publish: staging={staging!r} is not accepted: {accepted}")
        if len(parts) == 1:
            parts.insert(0, spark.catalog.currentCatalog())
    namespace = ".".join("`" + str(part).replace("`", "``") + "`" for part in parts)
    if not spark.catalog.databaseExists(namespace):
        raise ValueError(
            f"publish: staging={staging!r}: the schema {namespace} does not exist or this "
            "session cannot see it; name one where it may create tables (publish(staging="
            "'catalog.schema')), where each micro-batch is staged under Spark Connect")
    return namespace


# -- signed marks ----------------------------------------------------------------------------


def _sign(key: bytes, kind: str, table: str, batch_id: int, value: str) -> str:
    """HMAC-SHA256 of a mark: what it is, for which table and batch, and its value."""
    message = "\n".join((_MARK_VERSION, kind, table, str(batch_id), value)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _signed(key: bytes, kind: str, table: str, batch_id: int, value: str, mac: str) -> bool:
    return hmac.compare_digest(_sign(key, kind, table, batch_id, value), mac)


def _parts_text(parts: list[list[Any]]) -> str:
    """The counts and digests of the partitions, as one text both sides compute alike."""
    return ";".join(":".join(str(figure) for figure in part) for part in parts)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- the catalog ---------------------------------------------------------------------------


def _exists(spark: Any, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def _drop(spark: Any, table: str) -> None:
    spark.sql(f"DROP TABLE IF EXISTS {table}")


def _properties(spark: Any, table: str, *, expected: bool = False) -> dict[str, str] | None:
    """The table's properties, or ``None`` when there is no such table. A failed read of
    a table that exists raises: read as "absent", it could mislead either side.
    ``expected``: the table should exist (the stager's own, while it waits), so it is
    read at once, a round trip fewer, and looked up only when the read fails."""
    # Otherwise looked up first: a SHOW of a missing table (the next batch's, not staged
    # yet; one just dropped) fails on the server, which logs it as an ERROR for every poll.
    if not expected and not _exists(spark, table):
        return None
    try:
        rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    except Exception:
        if not _exists(spark, table):
            return None
        raise
    return {str(row[0]): str(row[1]) for row in rows}


def _set_properties(spark: Any, table: str, values: dict[str, str]) -> None:
    for key, value in values.items():  # what is written is never SQL to escape
        if not (re.fullmatch(r"[a-z.0-9]+", key) and re.fullmatch(r"[0-9a-z:;-]*", value)):
            raise ValueError(f"not a property this transport writes: {key!r}={value!r}")
    pairs = ", ".join(f"'{key}'='{value}'" for key, value in values.items())
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({pairs})")


def _tables(spark: Any, namespace: str, prefix: str) -> list[str]:
    """The names of the tables (not temporary views) in ``namespace`` that start with
    ``prefix``."""
    rows = spark.sql(f"SHOW TABLES IN {namespace} LIKE '{prefix}*'").collect()
    return [str(row.tableName) for row in rows
            if str(row.tableName).startswith(prefix) and not getattr(row, "isTemporary", False)]


def _schema_digest(schema: Any) -> str:
    """A digest of the columns' names and types (not their nullability, which a table's
    format may change)."""
    return _digest(";".join(f"{field.name}:{field.dataType.simpleString()}"
                            for field in schema.fields))


class ConnectStager:
    """The ``foreachBatch`` function that runs on the Connect server (see the module).

    It holds only names, numbers and the key, so it pickles as Spark Connect needs.

    Parameters
    ----------
    namespace : str
        The quoted catalog and schema of the staging tables.
    query : str
        The name part of this query's tables (:func:`query_part`).
    token : str
        The name part of this run's tables.
    client_timeout : float
        Seconds a staged batch waits for a sign of life from the client before failing.
    key : bytes
        Signs and checks the marks; known only to this function and the client.
    """

    def __init__(self, namespace: str, query: str, token: str, client_timeout: float,
                 key: bytes) -> None:
        self.namespace = namespace
        self.query = query
        self.token = token
        self.client_timeout = client_timeout
        self.key = key
        self._swept = False
        # Dropping the last delivered batch's table, while Spark commits it and plans the
        # next one (made on the server, never pickled).
        self._dropping: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dropping": None}

    def __repr__(self) -> str:  # never the key
        return (f"ConnectStager(staging={self.namespace}, query={self.query!r}, "
                f"token={self.token!r}, client_timeout={self.client_timeout})")

    def table(self, batch_id: int) -> str:
        """The staging table of ``batch_id``, quoted."""
        return f"{self.namespace}.`{PREFIX}{self.query}_{self.token}_{batch_id}`"

    def __call__(self, batch: Any, batch_id: int) -> None:
        session = batch.sparkSession
        self._dropped()
        if not self._swept:
            self._sweep(session)
            self._swept = True
        table = self.table(batch_id)
        delivered = False
        try:
            summary = self._stage(batch, batch_id, table)
            value = f"{len(summary['parts'])}:{summary['schema']}"
            _set_properties(session, table, {
                **{f"{PART}{part[0]}": _parts_text([part[1:]]) for part in summary["parts"]},
                STAGED: value,
                STAGED_MAC: _sign(self.key, "staged", table, batch_id,
                                  f"{value}\n{_parts_text(summary['parts'])}")})
            self._wait_for_outcome(session, table, batch_id, summary)
            delivered = True
        finally:
            if delivered:
                # Delivered: Spark may commit it now; the table goes meanwhile (a process
                # ended before that leaves it to the client, or to the next start).
                dropping = threading.Thread(
                    target=self._drop_table, args=(session, table, batch_id, "delivered"),
                    daemon=True, name=f"reactive-stage-drop-{batch_id}")
                try:
                    dropping.start()
                    self._dropping = dropping
                except RuntimeError:  # no thread to be had: dropped here instead
                    self._drop_table(session, table, batch_id, "delivered")
            else:
                self._drop_table(session, table, batch_id, "not delivered")

    @staticmethod
    def _drop_table(session: Any, table: str, batch_id: int, outcome: str) -> None:
        try:
            _drop(session, table)
        except Exception:
            # Left for the client or the next start of this query to drop: failing now
            # would hide why the batch failed, or have a delivered batch delivered again.
            log.warning("ForeachBatchPublisher: could not drop the staging table %s of "
                        "batch %d (%s)", table, batch_id, outcome, exc_info=True)

    def _dropped(self) -> None:
        """Wait (bounded) for the last delivered batch's table to be dropped."""
        if self._dropping is not None:
            self._dropping.join(_DROP_JOIN_S)
            self._dropping = None

    def _sweep(self, session: Any) -> None:
        """Drop what earlier runs of this query left: no run of it but this one runs.
        A table that cannot be dropped (another user's, say) is left, with a warning."""
        own = f"{PREFIX}{self.query}_{self.token}_"
        try:
            names = _tables(session, self.namespace, f"{PREFIX}{self.query}_")
        except Exception:
            log.warning("ForeachBatchPublisher: could not list %s for tables an earlier run "
                        "of this query left", self.namespace, exc_info=True)
            return
        for name in names:
            if not name.startswith(own):
                log.info("ForeachBatchPublisher: dropping %s, staged by an earlier run of "
                         "this query that ended before it was delivered", name)
                try:
                    _drop(session, f"{self.namespace}.`{name}`")
                except Exception:
                    log.warning("ForeachBatchPublisher: could not drop %s", name,
                                exc_info=True)

    def _stage(self, batch: Any, batch_id: int, table: str) -> dict[str, Any]:
        """Write ``batch`` to ``table``; return the columns' digest and, per partition, its
        id, rows and digest, taken from the rows as they are written."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        # Columns by position (c0, c1, ...): whatever the query's names (duplicates,
        # characters a table format refuses), the client restores them. The schemas are
        # made here from the batch's, each asked of the server being a round trip.
        fields = batch.schema.fields
        names = [f"c{index}" for index in range(len(fields))]
        staged = StructType([StructField(name, field.dataType, field.nullable, field.metadata)
                             for name, field in zip(names, fields, strict=True)])
        # The rows pass through DigestAsWritten on their way into the table: what is
        # digested is what is written, in the same pass, so no other session's write can
        # come between the two. The digests come back as an observed metric of the write.
        framed = batch.toDF(*names).withColumn(_PART, F.spark_partition_id())
        passed = framed.mapInArrow(DigestAsWritten(len(names)), StructType([
            *staged.fields, StructField(_PART, IntegerType(), False),
            StructField(SEQ, LongType(), False), StructField(DIGEST, StringType())]))

        def write() -> Any:
            """Write the rows to ``table``; the write's observation (one per write)."""
            seen = Observation(f"reactive_stage_{secrets.token_hex(8)}")
            # Joined as one string: Spark 4.0's Connect cannot return an array metric.
            (passed.observe(seen, F.count(F.lit(1)).alias("rows"),
                            F.concat_ws(";", F.collect_list(DIGEST)).alias("digests"))
             .select(*names, SEQ, _PART).write.partitionBy(_PART).saveAsTable(table))
            return seen

        try:
            try:
                seen = write()
            except Exception:
                # A table of this batch id left by an earlier attempt (a batch is staged
                # once): dropped, and the batch written again. Looked for only when the
                # write failed, a round trip fewer for every batch.
                if not _exists(batch.sparkSession, table):
                    raise
                _drop(batch.sparkSession, table)
                seen = write()
        except Exception as error:
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} could not be staged in "
                f"{table}: {type(error).__name__}: {error}. publish(staging=...) names "
                f"a schema where the query's user may create, alter and drop tables "
                f"(now {self.namespace})") from error
        return {"schema": _schema_digest(staged), "parts": self._summary(batch_id, seen)}

    def _summary(self, batch_id: int, seen: Any) -> list[list[Any]]:
        """Each partition's id, rows and digest, from the write's observation: an
        observation that is missing, empty or that does not add up fails the batch."""
        def unseen(detail: str) -> RuntimeError:
            return RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not staged: the server returned "
                f"no usable observed metrics for its write ({detail}), so its rows could not "
                "be digested as written. A table format that runs a write of its own, as "
                "Delta Lake and Iceberg do, may report none under Spark Connect: stage where "
                "the default format reports them (spark.sql.sources.default=parquet)")

        try:
            metrics = dict(seen.get or {})
        except Exception as error:
            raise unseen(f"{type(error).__name__}: {error}") from error
        rows, digests = metrics.get("rows"), metrics.get("digests")
        if not isinstance(rows, int) or not isinstance(digests, str):
            raise unseen(f"got {sorted(metrics) or 'none'}")
        parts: list[list[Any]] = []
        for item in filter(None, digests.split(";")):
            figures = item.split(":")
            if not (len(figures) == 3 and figures[0].isdigit() and figures[1].isdigit()
                    and re.fullmatch(r"[0-9a-f]{64}", figures[2])):
                raise unseen(f"a partition's digest reads {item[:100]!r}")
            parts.append([int(figures[0]), int(figures[1]), figures[2]])
        parts.sort()
        if (sum(part[1] for part in parts) != rows
                or len({part[0] for part in parts}) != len(parts)):
            raise unseen(f"{rows} rows, and partition digests that do not add up to them")
        return parts

    def _wait_for_outcome(self, session: Any, table: str, batch_id: int,
                          summary: dict[str, Any]) -> None:
        pause = threading.Event()  # never set: a bounded wait between looks
        alive: str | None = None
        heard = time.monotonic()
        pace = Pace()
        failed_since: float | None = None
        while True:
            try:
                marks = _properties(session, table, expected=True)
                failed_since = None
            except Exception:
                # A look that failed (the server busy): tried again for as long as a
                # silent client would be waited for.
                now = time.monotonic()
                failed_since = now if failed_since is None else failed_since
                if now - failed_since > self.client_timeout:
                    raise
                log.debug("a look at %s failed", table, exc_info=True)
                pause.wait(MAX_POLL_S)
                continue
            if marks is None:
                raise RuntimeError(
                    f"ForeachBatchPublisher: batch {batch_id} was not delivered: its "
                    f"staging table {table} was dropped before the client confirmed it "
                    "(by another session of the server?)")
            if OUTCOME in marks:
                self._settle(table, batch_id, summary, marks[OUTCOME],
                             marks.get(OUTCOME_MAC, ""))
                return
            now = time.monotonic()
            if marks.get(ALIVE) != alive:
                alive, heard = marks.get(ALIVE), now
            elif now - heard > self.client_timeout:
                raise RuntimeError(
                    f"ForeachBatchPublisher: batch {batch_id} was not delivered: the "
                    f"client process that publishes this query has given no sign of "
                    f"life for {self.client_timeout:.0f} s (publish(client_timeout=...))")
            pause.wait(pace.next())

    def _settle(self, table: str, batch_id: int, summary: dict[str, Any], value: str,
                mac: str) -> None:
        """Return for a signed delivered mark matching what was staged; raise otherwise."""
        if not _signed(self.key, "outcome", table, batch_id, value, mac):
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not delivered: the mark that "
                "confirms it does not carry the key of this query's client (another session "
                "of the server wrote or changed it); the batch is not committed")
        kind, _, detail = value.partition(":")
        if kind == "delivered":
            if detail != _digest(_parts_text(summary["parts"])):
                raise RuntimeError(
                    f"ForeachBatchPublisher: batch {batch_id} was not delivered as staged: "
                    "the client received other rows than this batch holds; the batch is not "
                    "committed")
            return
        if kind == "stopped":
            raise _stopped(batch_id)  # in the words Spark takes for part of a stop
        if kind == "gone":
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not delivered: the client "
                "that publishes this query stopped fetching (its log says why)")
        reason = bytes.fromhex(detail).decode(errors="replace")[:_REASON_CHARS]
        # Spark takes an error for part of a stop when its text holds a Py4J error for an
        # interruption (sink._STOP_MARK): only the stopped kind above may read so.
        reason = reason.replace(_PY4J_ERROR, _PY4J_ERROR.removeprefix("py4j.protocol."))
        # The client's words are data: quoted under this function's own message.
        raise RuntimeError(
            f"ForeachBatchPublisher: batch {batch_id} was not delivered; the client that "
            f"publishes this query gave this reason:\n{textwrap.indent(reason, '  | ')}")


class _Ahead:
    """``fetch(*args)`` on a thread of its own, its result (or error) taken with
    :meth:`result`; the one that starts it waits for it before it lets go."""

    def __init__(self, fetch: Callable[..., pa.Table], *args: Any) -> None:
        self._fetch, self._args = fetch, args
        self._value: pa.Table | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="reactive-sink-connect-fetch")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fetch(*self._args)
        except BaseException as error:  # handed to whoever takes the result
            self._error = error

    def result(self, wait_only: bool = False) -> pa.Table:
        """The fetched partition, once fetched; raises the fetch's error. With
        ``wait_only``, waits for the fetch to end and returns nothing of it."""
        self._thread.join()
        value, error = self._value, self._error
        self._value = self._error = None
        if wait_only:
            return pa.table({})
        if error is not None:
            raise error
        assert value is not None
        return value


class _Settled:
    """What the client made of one batch: its signed outcome, whether it is put, and the
    staged mark it answers (an abandoned batch whose table is staged anew, by the query's
    function after a forger's, is looked at again)."""

    def __init__(self, value: str, mac: str, staged_mac: str) -> None:
        self.value = value
        self.mac = mac
        self.staged_mac = staged_mac
        self.put = False
        self.put_at = 0.0  # time.monotonic() of the last put


class ConnectPump:
    """The client side (see the module): finds staged batches and delivers them.

    Parameters
    ----------
    spark : pyspark.sql.connect.session.SparkSession
        The client's session, the one that started the query.
    stager : ConnectStager
        The query's batch function: the pump reads its tables' names from it (the key is
        given apart, as ``key``).
    deliver : callable
        ``deliver(batch_id, record_batches)`` offers the rows to the subscribers and
        returns once every one has taken them; it raises to abandon the batch, and the
        exception's text is quoted in the error the server's function raises.
    failed : callable
        ``failed(error)`` is told when the pump cannot go on (the server stopped
        answering); the server's batch function then fails too.
    key : bytes
        As given to the :class:`ConnectStager`.
    columns : list of str
        The query's column names, which the stager replaces by position (``c0``, ...).
    chunk_rows : int
        The rows of a chunk the subscribers are offered: the next partition is fetched
        once they have taken a partition's first chunk.
    """

    def __init__(self, spark: Any, stager: ConnectStager,
                 deliver: Callable[[int, Iterator[pa.RecordBatch]], None],
                 failed: Callable[[BaseException], None], *, key: bytes,
                 columns: list[str], chunk_rows: int = 1024) -> None:
        self.spark = spark
        self.stager = stager
        self.deliver = deliver
        self.failed = failed
        self._key = key
        self.columns = list(columns)
        self.chunk_rows = chunk_rows
        self.query: Any = None
        self._active, self._active_at = True, float("-inf")
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        # Batches delivered or abandoned, until the stager has dropped their table.
        self._settled: dict[int, _Settled] = {}
        # The highest batch id delivered: a batch's ids only grow within a run, so a table
        # of this id or a lower one is a copy (a replay), never delivered.
        self._delivered_upto = -1
        self._replays: set[int] = set()  # the copies warned of
        self._current: str | None = None  # the table of the batch being delivered
        # Held around every write of properties: Spark rewrites a table's whole property
        # map, so a heartbeat at the same time as the outcome could undo it.
        self._writing = threading.Lock()
        self.beats = 0

    def __repr__(self) -> str:  # never the key
        return f"ConnectPump(stager={self.stager!r})"

    def start(self, query: Any) -> None:
        """Deliver the batches of ``query`` until it ends."""
        self.query = query
        token = self.stager.token
        for target, name in ((self._run, "pump"), (self._beat, "heartbeat")):
            thread = threading.Thread(target=target, daemon=True,
                                      name=f"reactive-sink-connect-{name}-{token[:6]}")
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
        pace = Pace()
        try:
            while not self._stopped.is_set():
                if self._session_closed():
                    log.info("ForeachBatchPublisher: the Spark Connect session was closed; "
                             "the client stops fetching")
                    return
                try:
                    if self._step():
                        misses = 0
                        pace.changed()
                        continue
                    if not self._still_active():
                        break
                    misses = 0
                except Exception as error:
                    # A look at the server failed: try again a few times, then give up.
                    misses += 1
                    if misses >= _PUMP_RETRIES:
                        raise
                    log.warning("ForeachBatchPublisher: a look at the Spark Connect server "
                                "failed (%d of %d): %s", misses, _PUMP_RETRIES, error)
                self._stopped.wait(pace.next())
        except Exception as error:
            failure = error
            log.exception("ForeachBatchPublisher: fetching batches from the Spark Connect "
                          "server failed; the batch the server holds fails with the query")
        finally:
            self._stopped.set()
            self._clear()
        if failure is not None:
            self.failed(failure)

    def _still_active(self) -> bool:
        """Whether the query runs, asked of the server (a round trip) at most every
        ``_ACTIVE_S`` while nothing else happens."""
        now = time.monotonic()
        if now - self._active_at >= _ACTIVE_S:
            self._active = bool(self.query.isActive)
            self._active_at = now
        return self._active

    def _session_closed(self) -> bool:
        return bool(getattr(self.spark.client, "_closed", False))

    def _clear(self) -> None:
        """Once the query has ended, drop this run's tables that a stopped batch function
        left; while it runs, tell the batch its function waits for that nobody will fetch
        it. Nothing once the session is closed (a later start of the query drops them)."""
        if self._session_closed():
            return
        if not self._query_active():
            try:
                # Terminated, not only stopping: its batch function has returned.
                self.query.awaitTermination(10)
                for batch_id in self._batches():
                    _drop(self.spark, self.stager.table(batch_id))
            except Exception:
                log.debug("could not drop the staging tables of a stopped query",
                          exc_info=True)
            return
        try:
            for batch_id in self._batches():
                if batch_id not in self._settled:
                    table = self.stager.table(batch_id)
                    self._set(table, {
                        OUTCOME: "gone",
                        OUTCOME_MAC: _sign(self._key, "outcome", table, batch_id, "gone")})
        except Exception:
            log.debug("could not mark the staged batches as not fetched", exc_info=True)

    def _batches(self) -> list[int]:
        """The batch ids of this run's staging tables, in order."""
        prefix = f"{PREFIX}{self.stager.query}_{self.stager.token}_"
        return sorted(int(name[len(prefix):])
                      for name in _tables(self.spark, self.stager.namespace, prefix)
                      if name[len(prefix):].isdigit())

    def _step(self) -> bool:
        """Do the next thing the staged batches ask for; ``False`` when there is none."""
        batches = self._batches()
        for batch_id in [b for b in self._settled if b not in batches]:
            del self._settled[batch_id]  # the stager is done with it
        for batch_id in batches:
            settled = self._settled.get(batch_id)
            if settled is None:
                if batch_id <= self._delivered_upto:
                    # A copy of a delivered batch (see _delivered_upto): never read.
                    if batch_id not in self._replays:
                        self._replays.add(batch_id)
                        log.warning("ForeachBatchPublisher: ignoring %s: batch %d was "
                                    "delivered already (a copy put there by another "
                                    "session?)", self.stager.table(batch_id), batch_id)
                    continue
                # Just listed: read at once (looked up only if that fails).
                marks = _properties(self.spark, self.stager.table(batch_id), expected=True)
                if marks is None or STAGED not in marks:
                    continue  # still being written, or gone since the listing
                self._deliver(batch_id, marks)
                return True
            if not settled.put:
                # Finding the batch still staged is no reason to deliver it again: only
                # the outcome, which failed to go out, is put again.
                self._put_outcome(batch_id, settled)
                return True
            if time.monotonic() - settled.put_at < _SETTLE_S:
                continue  # the stager sees the outcome and drops the table meanwhile
            settled.put_at = time.monotonic()  # looked at again after as long
            marks = _properties(self.spark, self.stager.table(batch_id))
            if marks is None:
                continue
            if (not settled.value.startswith("delivered:")
                    and marks.get(STAGED_MAC) != settled.staged_mac):
                del self._settled[batch_id]  # staged anew: looked at next time
                return True
            if marks.get(OUTCOME) != settled.value:
                self._put_outcome(batch_id, settled)  # undone by a concurrent write
                return True
        return False

    def _query_active(self) -> bool:
        try:
            return bool(self.query.isActive)
        except Exception as error:  # the session is closing
            log.info("ForeachBatchPublisher: the query's state cannot be read (%s); the "
                     "client stops fetching", error)
            return False

    def _deliver(self, batch_id: int, marks: dict[str, str]) -> None:
        table = self.stager.table(batch_id)
        received: list[list[Any]] = []
        try:
            staged = self._check_staged(table, batch_id, marks)
            self._current = table
            fetched = self._fetch(table, batch_id, staged, received)
            try:
                self.deliver(batch_id, fetched)
            finally:
                fetched.close()  # waits for a partition still being fetched ahead
            outcome = f"delivered:{_digest(_parts_text(received))}"
            self._delivered_upto = max(self._delivered_upto, batch_id)
        except Exception as error:
            # The publisher's own errors say which batch and why (a stop in the words
            # Spark takes for a stop); any other (the server failed a read) is named as
            # the cause.
            reason = str(error)
            stopping = reason.endswith(f"({_STOP_MARK})")
            if not reason.startswith("ForeachBatchPublisher: "):
                reason = (f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                          f"fetching it failed: {type(error).__name__}: {reason.strip()}")
            outcome = ("stopped" if stopping else
                       f"abandoned:{reason[:_REASON_CHARS].encode().hex()}")
            log.info("ForeachBatchPublisher: batch %d abandoned: %s", batch_id, reason)
        finally:
            with self._writing:
                self._current = None
        settled = _Settled(outcome, _sign(self._key, "outcome", table, batch_id, outcome),
                           marks.get(STAGED_MAC, ""))
        self._settled[batch_id] = settled  # from here on, this batch is never offered again
        self._put_outcome(batch_id, settled)

    def _put_outcome(self, batch_id: int, settled: _Settled) -> None:
        self._set(self.stager.table(batch_id), {OUTCOME: settled.value, OUTCOME_MAC: settled.mac})
        settled.put = True
        settled.put_at = time.monotonic()

    def _set(self, table: str, values: dict[str, str]) -> None:
        with self._writing:
            _set_properties(self.spark, table, values)

    def _check_staged(self, table: str, batch_id: int,
                      marks: dict[str, str]) -> dict[str, Any]:
        value = marks[STAGED]
        count, _, schema = value.partition(":")
        parts = sorted([int(key[len(PART):]), int(figures.split(":")[0]), figures.split(":")[1]]
                       for key, figures in marks.items()
                       if key.startswith(PART) and key[len(PART):].isdigit()
                       and re.fullmatch(r"\d+:[0-9a-f]{64}", figures))
        if not (count.isdigit() and int(count) == len(parts) and _signed(
                self._key, "staged", table, batch_id, f"{value}\n{_parts_text(parts)}",
                marks.get(STAGED_MAC, ""))):
            raise RuntimeError(
                f"ForeachBatchPublisher: batch {batch_id} was not delivered: its staged mark "
                "does not carry the key of this query's batch function (another session of "
                "the server wrote or changed it)")
        return {"schema": schema, "parts": parts}

    def _fetch(self, table: str, batch_id: int, staged: dict[str, Any],
               received: list[list[Any]]) -> Generator[pa.RecordBatch, None, None]:
        """The batch's rows, a partition at a time, each checked whole against the mark
        before any of its rows is offered; the next partition is fetched while the
        subscribers take this one, once they have taken its first chunk."""
        frame = self.spark.read.table(table)
        data = frame.drop(_PART, SEQ)
        try:
            schema = data.schema  # its mark was just read: looked up only if this fails
        except Exception:
            if _exists(self.spark, table):
                raise
            raise RuntimeError(f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                               f"its staging table {table} is missing (it was dropped)"
                               ) from None
        if (_schema_digest(schema) != staged["schema"]
                or len(data.columns) != len(self.columns)):
            raise RuntimeError(self._altered(batch_id) + "its columns differ")
        parts = staged["parts"]
        ahead: _Ahead | None = None
        try:
            for index, (part, count, digest) in enumerate(parts):
                if ahead is None:
                    ahead = _Ahead(self._partition, frame, batch_id, part, count, digest)
                arrow = ahead.result()
                ahead = None
                received.append([part, count, digest])
                following = parts[index + 1] if index + 1 < len(parts) else None
                for position, piece in enumerate(arrow.to_batches(self.chunk_rows)):
                    if position == 1 and following is not None:
                        # The subscribers took this partition's first chunk (a generator
                        # resumes only when they have): fetch the next meanwhile. Never
                        # sooner: a subscriber that takes a row now and then has the next
                        # partition read only once it wants it, as it is by then.
                        ahead = _Ahead(self._partition, frame, batch_id, *following)
                    yield piece
                del arrow
        finally:
            if ahead is not None:
                ahead.result(wait_only=True)

    def _partition(self, frame: Any, batch_id: int, part: int, count: int,
                   digest: str) -> pa.Table:
        """Partition ``part`` of the staged table, in the order the stager digested it,
        checked against its ``count`` and ``digest``, with the query's column names."""
        # Read whole (no result stays half-read on the server while subscribers take it),
        # then checked here, in this process, over the very rows that will be offered.
        arrow = frame.where(frame[_PART] == part).drop(_PART).toArrow()
        altered = self._altered(batch_id) + f"partition {part} holds other rows"
        if arrow.num_rows != count or arrow.column_names[-1:] != [SEQ]:
            raise RuntimeError(f"{altered} ({arrow.num_rows} against {count} staged)")
        order = pa.array(range(count), pa.int64())
        places = arrow.column(SEQ)
        if not places.equals(pa.chunked_array([order])):
            # A table format keeps no order of rows: put them back in the staged one.
            arrow = arrow.take(pc.sort_indices(places))
            if not arrow.column(SEQ).equals(pa.chunked_array([order])):
                raise RuntimeError(f"{altered} (its rows' places are not 0 to {count - 1})")
        arrow = arrow.drop_columns([SEQ])
        check = PartitionDigest(arrow.schema)
        check.update(arrow)
        if not hmac.compare_digest(check.hexdigest(), digest):
            raise RuntimeError(f"{altered} (their digest differs from the staged one)")
        return arrow.rename_columns(self.columns)

    @staticmethod
    def _altered(batch_id: int) -> str:
        return (f"ForeachBatchPublisher: batch {batch_id} was not delivered: the staged batch "
                "was altered after it was staged (by another session of the server?): ")

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_S):
            try:
                with self._writing:  # never beside the outcome (see _writing)
                    table = self._current
                    if table is None:
                        continue
                    self.beats += 1
                    _set_properties(self.spark, table, {ALIVE: str(self.beats)})
            except Exception:
                if self._stopped.is_set():
                    return
                log.debug("heartbeat failed", exc_info=True)


def refuse_unstageable(schema: Any) -> None:
    """Refuse, naming the column, a type that a staged batch cannot carry checked.

    Raises
    ------
    TypeError
        For a column that is or holds a variant (Spark does not read a variant back with
        the bytes it wrote, so the client could not check it against the stager's digest)
        or a year-month interval (PySpark's Arrow path, the way the rows pass through the
        digest and reach the client, cannot carry one).
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    def held(data_type: Any) -> str | None:
        kind = type(data_type).__name__
        if kind == "VariantType":
            return "a variant, which Spark does not read back with the bytes it wrote"
        if kind == "YearMonthIntervalType":
            return "a year-month interval, which PySpark's Arrow path cannot carry"
        inner: list[Any] = []
        if isinstance(data_type, StructType):
            inner = [field.dataType for field in data_type.fields]
        elif isinstance(data_type, MapType):
            inner = [data_type.keyType, data_type.valueType]
        elif isinstance(data_type, ArrayType):
            inner = [data_type.elementType]
        return next(filter(None, map(held, inner)), None)

    for field in schema.fields:
        what = held(field.dataType)
        if what is not None:
            raise TypeError(
                f"publish: column {field.name!r} is (or holds) {what}, so under Spark Connect "
                "its staged copy could not be checked before its rows are offered; select "
                "it as a string first (to_json(col) for a variant; CAST(col AS INT) months, "
                "or a string, for a year-month interval)")


def connect_publish(df: Any, publisher: ForeachBatchPublisher, writer_options: dict[str, Any],
                    trigger: dict[str, Any] | None, client_timeout: float,
                    staging: str | None = None) -> None:
    """Start ``df``'s query under Spark Connect with ``publisher`` fed through the server.

    ``publish()`` calls this for a Connect DataFrame, with its arguments checked;
    ``writer_options`` are its ``queryName``, ``outputMode`` and ``writeStream.option``
    keywords; ``staging`` names the catalog and schema of the staging tables.
    """
    spark = df.sparkSession
    refuse_unstageable(df.schema)
    namespace = staging_namespace(spark, staging)
    token, key = new_token(), new_key()
    checkpoint = next((value for name, value in writer_options.items()
                       if name.lower() == "checkpointlocation"), None)
    stager = ConnectStager(namespace, query_part(checkpoint, token),
                           token, float(client_timeout), key)
    writer = configure_writer(df.writeStream.foreachBatch(stager), writer_options, trigger)
    pump = ConnectPump(spark, stager, publisher.deliver_arrow,
                       lambda error: publisher.fail(RuntimeError(
                           f"ForeachBatchPublisher: fetching from the Spark Connect server "
                           f"failed: {error}")), key=key, columns=df.columns,
                       chunk_rows=publisher.chunk_rows)
    # Subscribers learn of the end once the pump has cleaned up and stopped using the
    # session (a session closed under a running pump's call can crash gRPC).
    publisher.transport_end = lambda: pump.join(_PUMP_JOIN_S)
    query = writer.start()
    try:
        publisher.watch(query)
        pump.start(query)
    except BaseException:
        query.stop()  # nobody would fetch its batches
        raise
