"""A query's output as a Publisher where streams run only as ``availableNow`` runs.

Databricks serverless (and a scheduled job anywhere) runs a streaming query only with
``trigger(availableNow=True)``: each run reads what its source offers up to a bound, then
ends. :func:`publish_on_demand` turns that into backpressure across runs: it starts one
``availableNow`` run after another on the same checkpoint, each bounded by the demand its
subscribers have outstanding, and starts none while they request nothing.

A built DataFrame's source options cannot change between runs, so the query is given as a
function of the bound, called once per run::

    def build(bound: int) -> DataFrame:
        return (spark.readStream.format("reactive")
                .option("publisher", "mqtt").option("walLocation", wal)
                .option("availableNowMaxRecords", bound).load())

    publisher = publish_on_demand(build, checkpointLocation=checkpoint)
    publisher.subscribe(subscriber)

Each run is a run of :func:`~pyspark_reactive.publish` (classic or Spark Connect, with its
guarantees: every row once per run, in order, never more than requested), under its own
``runId`` and the same query ``id``. With ``walLocation`` the reactive source keeps what
its publisher signalled beyond a run's bound and offers it first in the next run, so no
row is lost or repeated across runs; without it, rows a publisher signals beyond what was
requested (it should not: the source requests exactly the bound) are lost with the run.
Spark 4.0/4.1 have no admission control for Python sources: each run there is one
micro-batch, which an explicit ``availableNowMaxRecords`` sizes and which, without
``walLocation``, takes every row it requested (or fails the run after ``fillTimeoutMs`` of
silence from the publisher), so no row signalled within the bound is left to a run that
has ended.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from reactive_streams.signalling import COMPLETE

from ..errors import PySparkReactiveError
from ..progress import source_completed
from .connect import connect_publish
from .publish import MIN_CLIENT_TIMEOUT_S
from .publisher import Element, ForeachBatchPublisher, WhenStalled, _is_connect
from .write_stream import configure_writer

__all__ = ["OnDemandPublisher", "publish_on_demand"]

log = logging.getLogger("pyspark_reactive.sink")

# How often the runs' thread looks at the subscribers' demand between runs.
_DEMAND_POLL_S = 0.05
_RUN = {"availableNow": True}


class OnDemandPublisher(ForeachBatchPublisher):
    """The Publisher :func:`publish_on_demand` returns: a :class:`ForeachBatchPublisher`
    that serves a sequence of ``availableNow`` runs of one query (one checkpoint).

    Attributes
    ----------
    query : StreamingQuery or None
        The current run, or the last one.
    runs : int
        Runs that ended by themselves (not failed, not stopped).
    run_bounds : list of int
        The bound each run was started with, in order.
    """

    def __init__(self, build: Callable[[int], Any], options: dict[str, Any], *,
                 max_run_records: int, empty_runs: int | None, client_timeout: float,
                 staging: str | None, **publisher: Any) -> None:
        super().__init__(**publisher)
        self._build = build
        self._options = options
        self.max_run_records = max_run_records
        self.empty_runs = empty_runs
        self.client_timeout = client_timeout
        self.staging = staging
        self.runs = 0
        self.run_bounds: list[int] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="reactive-sink-on-demand-runs")

    def start(self) -> OnDemandPublisher:
        self._thread.start()
        return self

    def watch(self, query: Any) -> threading.Thread:
        """Serve ``query``, the current run (called for each run; its end is handled by
        the runs' thread, which starts the next)."""
        with self._changed:
            self.query = query
            stopping = self._stopping.is_set()
        if stopping:  # stop() came while this run was starting
            query.stop()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        """Start no more runs, stop the current one (its batch under way is not committed,
        and comes again in the next run of the same checkpoint), and complete the stream.
        Waits up to ``timeout`` seconds (``None``: as long as it takes) for the runs'
        thread."""
        self._stopping.set()
        with self._changed:
            query = self.query
            self._changed.notify_all()
        if query is not None:
            try:
                query.stop()
            except Exception:  # already ended
                log.debug("stopping the current run failed", exc_info=True)
        if self._thread.ident is not None:
            self._thread.join(timeout)

    # -- the runs --------------------------------------------------------------------------

    def demand(self) -> int | None:
        """The demand a run may be bounded by: the least any current subscriber has
        outstanding (in rows: an ``element="arrow"`` subscriber's batches count
        ``chunk_rows`` each), at most ``max_run_records``; ``None`` with no subscriber."""
        with self._changed:
            outstanding = [emitter.demand for emitter, mailbox in self._outlets
                           if not mailbox.closed and not emitter.cancelled]
        if not outstanding:
            return None
        per = self.chunk_rows if self.element == "arrow" else 1
        return min(min(outstanding) * per, self.max_run_records)

    def _wait_for_demand(self) -> int | None:
        """The bound of the next run, once some is requested; ``None`` once the stream
        ended or :meth:`stop` was called."""
        with self._changed:
            while True:
                if self._terminal is not None or self._stopping.is_set():
                    return None
                bound = self.demand() if self._outlets else None
                if bound:
                    return bound
                self._changed.wait(_DEMAND_POLL_S)

    def _serve(self) -> None:
        empty = 0
        try:
            while True:
                bound = self._wait_for_demand()
                if bound is None:
                    break
                delivered_before = self.rows_delivered
                query = self._start_run(bound)
                try:
                    query.awaitTermination()
                    failure = query.exception()
                except Exception as error:  # how a failed run ends awaitTermination
                    failure = error
                self._transport_ended()
                if failure is not None:
                    self._end(failure, f"run {len(self.run_bounds)} of query {query.id} failed")
                    return
                if self._stopping.is_set():
                    break
                self.runs += 1
                read, complete = _run_report(query)
                # Progress may lack the run's last report: rows delivered count as read.
                read = max(read, self.rows_delivered - delivered_before)
                log.info("publish_on_demand: run %d (bound %d) read %d rows%s",
                         self.runs, bound, read, ", and its source completed" if complete
                         else "")
                if read:
                    empty = 0
                    continue
                if complete:
                    self._end(COMPLETE, "the source completed and a run read nothing")
                    return
                empty += 1
                if self.empty_runs is not None and empty >= self.empty_runs:
                    self._end(COMPLETE, f"{empty} runs in a row read nothing (empty_runs)")
                    return
        except _Stopped:
            pass
        except Exception as error:
            log.exception("publish_on_demand: a run could not be started or followed")
            self._end(error, "a run could not be started")
            return
        self._end(COMPLETE, "stop() was called")

    def _start_run(self, bound: int) -> Any:
        df = self._build(bound)
        if not getattr(df, "isStreaming", False):
            raise ValueError(f"publish_on_demand: build({bound}) returned {type(df).__name__}, "
                             "not a streaming DataFrame (spark.readStream...load())")
        if self._stopping.is_set():
            raise _Stopped()
        self.run_bounds.append(bound)
        with self._changed:
            self.query = None  # a batch of the new run finds its query (see _admit)
        if _is_connect(df):
            connect_publish(df, self, self._options, _RUN, self.client_timeout, self.staging)
            return self.query
        query = configure_writer(df.writeStream.foreachBatch(self), self._options,
                                 _RUN).start()
        self.watch(query)
        return query


class _Stopped(PySparkReactiveError):
    """stop() was called while a run was being built."""


def _run_report(query: Any) -> tuple[int, bool]:
    """Rows the run's sources read, and whether a reactive source reported its publisher
    complete (Spark 4.2+, which shows ``reportLatestOffset`` in query progress)."""
    read, complete = 0, False
    for progress in query.recentProgress or []:
        report = progress if isinstance(progress, dict) else getattr(progress, "json", None)
        if callable(report):
            report = json.loads(report())
        if not isinstance(report, dict):
            continue
        read += int(report.get("numInputRows") or 0)
        complete = complete or any(source_completed(source.get("latestOffset"))
                                   for source in report.get("sources") or [])
    return read, complete


def publish_on_demand(build: Callable[[int], Any], *, checkpointLocation: Any,
                      element: Element = "row", chunk_rows: int = 1024,
                      demand_timeout: float | None = None, when_stalled: WhenStalled = "fail",
                      max_run_records: int = 100_000, empty_runs: int | None = None,
                      client_timeout: float = 120.0, staging: str | None = None,
                      **options: Any) -> OnDemandPublisher:
    """Publish a query's output as ``availableNow`` runs started on demand.

    For as long as subscribers request, runs one ``availableNow`` run of the query
    ``build(bound)`` after another on ``checkpointLocation``, each bounded by the demand
    its subscribers have outstanding when it starts; starts none while any current
    subscriber has nothing outstanding (or there is none); completes when a run reads
    nothing and its reactive source reported that its publisher completed (Spark 4.2+),
    or after ``empty_runs`` runs in a row that read nothing. See the module for the
    guarantees across runs.

    Parameters
    ----------
    build : callable
        ``build(bound)`` returns the streaming DataFrame of one run, whose reactive source
        takes at most ``bound`` elements: pass it as ``availableNowMaxRecords``. Called
        on the publisher's own thread, once per run.
    checkpointLocation : str or path
        The query's checkpoint, shared by every run (required).
    element, chunk_rows, demand_timeout, when_stalled
        As for :class:`~pyspark_reactive.ForeachBatchPublisher`. ``when_unsubscribed`` is
        ``"wait"``: with no subscriber, no run starts.
    max_run_records : int
        The largest bound (default 100,000): a subscriber that requests without bound
        gets runs of this many source elements.
    empty_runs : int, optional
        Complete after this many runs in a row that read nothing (for Spark 4.0/4.1,
        which cannot report a completed source, or a publisher whose pause means the
        end). ``None`` (default): only a completed source ends the stream.
    client_timeout, staging
        Spark Connect only, as for :func:`~pyspark_reactive.publish`.
    **options
        ``queryName``, ``outputMode`` and ``writeStream.option`` values, as for
        :func:`~pyspark_reactive.publish`. The trigger is always ``availableNow``.

    Returns
    -------
    OnDemandPublisher
        Subscribe to it; the first run starts once a subscriber requests. Call
        :meth:`OnDemandPublisher.stop` to end the stream early.

    Raises
    ------
    ValueError
        For an argument not accepted (the message names it); for a ``build`` that does
        not return a streaming DataFrame, the stream fails with it.
    """
    if checkpointLocation is None or not str(checkpointLocation).strip():
        raise ValueError("publish_on_demand: checkpointLocation is required: every run "
                         "continues from the one before on the same checkpoint")
    if not callable(build):
        raise ValueError(f"publish_on_demand: build={build!r} is not accepted: a function "
                         "of the bound that returns a streaming DataFrame")
    if type(max_run_records) is not int or max_run_records < 1:
        raise ValueError(f"publish_on_demand: max_run_records={max_run_records!r} is not "
                         "accepted: a positive int")
    if empty_runs is not None and (type(empty_runs) is not int or empty_runs < 1):
        raise ValueError(f"publish_on_demand: empty_runs={empty_runs!r} is not accepted: "
                         "None or a positive int")
    if (not isinstance(client_timeout, (int, float)) or isinstance(client_timeout, bool)
            or not client_timeout >= MIN_CLIENT_TIMEOUT_S):
        raise ValueError(f"publish_on_demand: client_timeout={client_timeout!r} is not "
                         f"accepted: a number of seconds >= {MIN_CLIENT_TIMEOUT_S:.0f}")
    if "trigger" in options:
        raise ValueError("publish_on_demand: trigger is not accepted: every run is an "
                         "availableNow run")
    if "when_unsubscribed" in options:
        raise ValueError("publish_on_demand: when_unsubscribed is not accepted: with no "
                         "subscriber no run starts (as 'wait')")
    publisher = OnDemandPublisher(
        build, {**options, "checkpointLocation": str(checkpointLocation)},
        max_run_records=max_run_records, empty_runs=empty_runs,
        client_timeout=float(client_timeout), staging=staging, element=element,
        chunk_rows=chunk_rows, demand_timeout=demand_timeout, when_stalled=when_stalled)
    return publisher.start()
