""":func:`publish`: start a query whose output is a
:class:`~pyspark_reactive.ForeachBatchPublisher`.

It checks its arguments, warns where ``availableNow`` will run one micro-batch, and starts
``df.writeStream.foreachBatch(publisher)`` in classic mode, or, under Spark Connect, the
query of the table transport (:func:`~pyspark_reactive.sink.connect.connect_publish`),
whose pump feeds the publisher in this process.
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import Any

from pyspark.sql import DataFrame

from ..errors import PySparkReactiveError
from .connect import HEARTBEAT_S, connect_publish
from .publisher import Element, ForeachBatchPublisher, WhenStalled, WhenUnsubscribed, _is_connect
from .write_stream import configure_writer

__all__ = ["MIN_CLIENT_TIMEOUT_S", "AvailableNowWarning", "publish"]

log = logging.getLogger("pyspark_reactive.sink")

# The smallest client_timeout (Spark Connect) that leaves room for several heartbeats.
MIN_CLIENT_TIMEOUT_S = 5 * HEARTBEAT_S


class AvailableNowWarning(PySparkReactiveError, UserWarning):
    """:func:`publish` was given ``availableNow`` where Spark runs it as one micro-batch.

    Without admission control for Python streaming sources
    (:data:`~pyspark_reactive.source.admission.ADMISSION_CONTROL` false: Spark 4.0/4.1),
    Spark runs an ``availableNow`` query that reads a Python data source (such as
    ``reactive``) as a single micro-batch, then ends it. Filter it with
    ``warnings.filterwarnings("ignore", category=AvailableNowWarning)``.
    """


# The names the reactive source goes by: DefaultSource.name(), and read_stream()'s.
_REACTIVE_NAME = re.compile(r"reactive(_[0-9a-f]{12})?", re.IGNORECASE)


def _python_sources(df: Any) -> list[str] | None:
    """The Python data sources the streaming DataFrame reads, by name (None: not known).

    Classic: every ``StreamingRelationV2`` over a ``PythonTable`` in the analyzed plan
    (views resolved), whatever the source. Spark Connect: the client holds only the
    unresolved plan, so the reactive source's own names (``reactive``, and those of
    :func:`~pyspark_reactive.read_stream`) among its streaming reads by format; a stream
    read by table name is not seen.
    """
    try:
        if _is_connect(df):
            return _connect_reactive_reads(df)
        leaves = df._jdf.queryExecution().analyzed().collectLeaves()
        names = []
        for index in range(leaves.size()):
            leaf = leaves.apply(index)
            if (leaf.getClass().getSimpleName() == "StreamingRelationV2"
                    and leaf.table().getClass().getSimpleName() == "PythonTable"):
                names.append(str(leaf.sourceName()))
        return names
    except Exception:  # internals of another Spark: say what may happen, not what does
        log.debug("could not tell which sources the query reads", exc_info=True)
        return None


def _connect_reactive_reads(df: Any) -> list[str]:
    names: list[str] = []

    def walk(message: Any) -> None:  # a protobuf message of the plan
        if (message.DESCRIPTOR.full_name == "spark.connect.Read"
                and message.is_streaming
                and message.WhichOneof("read_type") == "data_source"):
            name = message.data_source.format
            if _REACTIVE_NAME.fullmatch(name):
                names.append(name)
        for field, value in message.ListFields():
            if field.type != field.TYPE_MESSAGE:
                continue
            # A message, or a repeated field's (or a map's) container of them.
            for item in ([value] if hasattr(value, "ListFields") else value):
                if hasattr(item, "ListFields"):  # not a map's key
                    walk(item)

    walk(df._plan.to_proto(df.sparkSession.client))
    return names


def _warn_if_single_batch(df: Any, trigger: dict[str, Any] | None) -> None:
    """Warn (:class:`AvailableNowWarning`) where ``availableNow`` will run one micro-batch."""
    from ..source.admission import ADMISSION_CONTROL

    if ADMISSION_CONTROL or not trigger or trigger.get("availableNow") is not True:
        return
    sources = _python_sources(df)
    if sources == []:
        return  # Kafka, files and other JVM sources run availableNow in full
    if sources is None:
        reads = "if this query reads a Python data source (such as reactive), "
    else:
        reads = (f"this query reads the Python data source"
                 f"{'s' if len(set(sources)) > 1 else ''} {', '.join(sorted(set(sources)))}: ")
    where = ("this Spark Connect client's pyspark has no admission control for Python "
             "streaming sources (a server that has it, such as a Databricks Runtime with "
             "SPARK-55304, runs availableNow in full: then ignore this warning)"
             if _is_connect(df) else
             "this Spark has no admission control for Python streaming sources (no "
             "pyspark.sql.streaming.datasource: Spark 4.0 and 4.1)")
    warnings.warn(
        f"publish(trigger={{'availableNow': True}}): {where}; {reads}Spark then runs each "
        "availableNow run as a single micro-batch and ends it. A reactive source reads at "
        "most maxRecordsPerTrigger rows in that batch, or availableNowMaxRecords if that "
        "option is given (it then sizes the first batch of every run of the source, "
        "whatever the trigger); what the publisher holds beyond it waits for the next run. "
        "For runs of several batches bounded by availableNowMaxRecords, use Spark 4.2 or "
        "newer.", AvailableNowWarning, stacklevel=3)


def publish(df: DataFrame, *, element: Element = "row", chunk_rows: int = 1024,
            when_unsubscribed: WhenUnsubscribed = "wait", demand_timeout: float | None = None,
            when_stalled: WhenStalled = "fail", trigger: dict[str, Any] | None = None,
            client_timeout: float = 120.0, staging: str | None = None,
            **options: Any) -> ForeachBatchPublisher:
    """Start a streaming query whose output is a Publisher.

    Every subscriber gets every row of each micro-batch, in order, never more than it
    requested, and a batch ends only once every subscriber has taken all of it: a slow
    subscriber slows the query. The narrative page is :doc:`/how-to/consume-output`;
    :doc:`/reference/publish` lists every argument with its consequences.

    Parameters
    ----------
    df : DataFrame
        A streaming DataFrame.
    element : {"row", "dict", "tuple", "arrow"}
        What a subscriber receives: a ``pyspark.sql.Row`` (default), a dict, a tuple, or
        a ``pyarrow.RecordBatch`` of up to ``chunk_rows`` rows (demand then counts
        batches).
    chunk_rows : int
        Rows offered at a time (1,024); this process holds about one Arrow batch of Spark
        plus one chunk, whatever the micro-batch's size.
    when_unsubscribed : {"wait", "stop"}
        With no subscriber, ``"wait"`` (default) holds the batch until one subscribes;
        ``"stop"`` ends the query once its last subscriber has cancelled.
    demand_timeout : float, optional
        Seconds a subscriber that has received all it requested may request nothing more
        before ``when_stalled`` applies; ``None`` (default) waits as long as it takes.
    when_stalled : {"fail", "cancel"}
        What a ``demand_timeout`` does: fail the batch and the query (``"fail"``, the
        default; nothing is lost), or cancel that subscription alone (``"cancel"``).
        :class:`ForeachBatchPublisher` gives the details of these five.
    trigger : dict, optional
        Given to ``writeStream.trigger(**trigger)``, e.g. ``{"availableNow": True}``.
    client_timeout : float
        Spark Connect only: seconds a micro-batch staged on the server waits for a sign
        of life from this process (it sends one every 2 s) before the batch, and so the
        query, fails. Default 120; at least 10.
    staging : str, optional
        Spark Connect only: the schema (``"scratch"``) or catalog and schema
        (``"main.scratch"``) where each micro-batch is staged as a table of its own while
        it is delivered; ``None`` (default) means the session's current catalog and
        schema. The query's user needs to create and drop tables there. Ignored in
        classic mode.
    **options
        ``queryName`` and ``outputMode`` go to their ``writeStream`` methods; any other
        (``checkpointLocation`` among them) is a ``writeStream.option``.

    Returns
    -------
    ForeachBatchPublisher
        Already started: ``.query`` is the running ``StreamingQuery``, and subscribers get
        ``on_complete`` or ``on_error`` when it ends.

    Raises
    ------
    ValueError
        For an argument not accepted.

    Warns
    -----
    AvailableNowWarning
        For ``trigger={"availableNow": True}`` where pyspark has no admission control for
        Python streaming sources (Spark 4.0/4.1; detected by the API, not the version)
        and the query reads a Python data source such as ``reactive`` (or that cannot be
        told): Spark then runs each run as one micro-batch. Under Spark Connect the
        client's pyspark is what is looked at, and only ``reactive`` sources read by
        format are recognised.

    Examples
    --------
    A plain loop over the output, which holds the query to its pace:

    >>> for row in publish(df, trigger={"availableNow": True}):    # doctest: +SKIP
    ...     print(row)

    A subscriber, and the running query:

    >>> from reactive_streams import AsyncSubscriber
    >>> class Print(AsyncSubscriber):
    ...     def on_element(self, row):
    ...         print(row)
    >>> publisher = publish(df, element="dict",                      # doctest: +SKIP
    ...                     checkpointLocation="/tmp/checkpoint")
    >>> publisher.subscribe(Print(batch_size=256))                  # doctest: +SKIP
    >>> publisher.query.stop()                                      # doctest: +SKIP

    Notes
    -----
    Under Spark Connect the batch function runs on the server: it writes each micro-batch
    to a table of its own in ``staging`` (partitioned by Spark partition), and this
    process reads it a partition at a time, each checked against the batch function's
    signed counts and digests (in the table's properties) before its rows are offered;
    the batch function returns once the subscribers here have taken it and this process
    has put an outcome signed with the query's key (which lives only here and in the
    pickled batch function), and then drops the table. This uses only what Databricks
    serverless allows (no ``persist()``, global temporary view or JVM access), and nothing
    connects from the server to this process. Tables a killed server left are dropped
    when the same query (same ``checkpointLocation``) starts again. While a batch is
    staged, whoever may read the staging schema can read it (on Unity Catalog, its owner
    and those granted access to the schema; on an OSS server, every session).
    """
    publisher = ForeachBatchPublisher(element=element, chunk_rows=chunk_rows,
                                      when_unsubscribed=when_unsubscribed,
                                      demand_timeout=demand_timeout, when_stalled=when_stalled)
    if (not isinstance(client_timeout, (int, float)) or isinstance(client_timeout, bool)
            or not client_timeout >= MIN_CLIENT_TIMEOUT_S):
        raise ValueError(f"publish: client_timeout={client_timeout!r} is not accepted: a "
                         f"number of seconds >= {MIN_CLIENT_TIMEOUT_S:.0f} (the client "
                         f"renews its heartbeat every {HEARTBEAT_S:.0f} s)")
    _warn_if_single_batch(df, trigger)
    if _is_connect(df):
        connect_publish(df, publisher, options, trigger, client_timeout, staging)
        return publisher
    writer = configure_writer(df.writeStream.foreachBatch(publisher), options, trigger)
    publisher.watch(writer.start())
    return publisher
