"""The source's subscription to its publisher, one per query run, made in the runner.

:func:`make_publisher` calls the factory (the one shipped by :func:`~pyspark_reactive.
read_stream`, or the one the ``publisher`` option names) with the options and where to
resume; :class:`Upstream` holds what the subscription is made of: the publisher, the
:class:`~pyspark_reactive.source.demand_buffer.DemandBuffer` subscribed to it and the
:class:`~pyspark_reactive.source.intake.Intake` that converts and logs what arrives. It
knows how far the publisher has got, tells a publisher that never called ``on_subscribe``
or that signalled ``on_error``, and, when the run stops, cancels the subscription and keeps
what the buffer still holds in the write-ahead log.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from .demand_buffer import DemandBuffer, PublisherError
from .durability import FactoryOptions, ResumePoint
from .intake import Intake
from .options import SHIPPED_FACTORY, SourceOptions, describe, resolve_factory
from .rows import RowConverter
from .wal import WriteAheadLog

__all__ = ["Factory", "Upstream", "make_publisher", "publisher_failed"]

log = logging.getLogger("pyspark_reactive.source")

#: A publisher factory: called with the options (a
#: :class:`~pyspark_reactive.source.durability.FactoryOptions`), returns a Publisher.
Factory = Callable[[Mapping[str, str]], Any]


def make_publisher(options: SourceOptions, schema: StructType, factory: Factory | None,
                   resume: ResumePoint) -> Any:
    """The publisher of this run: ``factory``'s (shipped with the data source), or that of
    the ``publisher`` option, called with the options, ``resume`` and ``schema``."""
    factory_options = FactoryOptions(options.raw, resume, schema)
    make = factory or resolve_factory(options.publisher)
    name = ("the factory given to read_stream()" if factory
            else f"the factory of publisher={options.publisher!r}")
    try:
        publisher = make(factory_options)
    except Exception as error:
        raise RuntimeError(f"reactive source: {name} raised {type(error).__name__}: "
                           f"{error}; no publisher, so no rows") from error
    if not callable(getattr(publisher, "subscribe", None)):
        raise TypeError(f"reactive source: {name} returned {type(publisher).__name__}, "
                        "not a Publisher (an object with subscribe(subscriber))"
                        f"{not_a_publisher_hint(publisher)}")
    return publisher


def not_a_publisher_hint(made: object) -> str:
    """How to make a Publisher of what a factory returned, where that can be told."""
    if hasattr(made, "__aiter__"):
        return ("; wrap an async generator or iterable: "
                "reactive_streams.AsyncIterablePublisher(lambda: <the async generator>)")
    if hasattr(made, "__iter__") and not isinstance(made, (str, bytes)):
        return ("; wrap a generator or iterable: reactive_streams.IterablePublisher(lambda: "
                "<a new iterator>), so that each subscription iterates afresh")
    return ""


class Upstream:
    """One subscription: ``publisher``, the ``buffer`` subscribed to it, and the ``intake``
    that takes its elements from the buffer, from offset ``base`` on.

    ``released`` counts the elements of this subscription offered in a batch so far.
    """

    def __init__(self, options: SourceOptions, publisher: Any, buffer: DemandBuffer,
                 converter: RowConverter, schema: pa.Schema, wal: WriteAheadLog | None,
                 base: int) -> None:
        self.options = options
        self.publisher = publisher
        self.buffer = buffer
        self.wal = wal
        self.released = 0
        self.since: float | None = None  # when subscribe() was called
        self.intake = Intake(buffer, converter, schema, wal, base,
                             sync_ms=options.wal_sync_ms, sync_rows=options.wal_sync_rows,
                             publisher=publisher)

    def start(self) -> float:
        """Subscribe the buffer to the publisher; returns when (``time.monotonic()``)."""
        log.info("reactive source: subscribing to %r from offset %d (%s)", self.publisher,
                 self.intake.base, describe(self.options))
        self.since = time.monotonic()
        self.buffer.start(self.publisher)
        return self.since

    @property
    def released_end(self) -> int:
        """The offset after the last element offered in a batch."""
        return self.intake.base + self.released

    def reported(self) -> int:
        """How far the publisher has got: the offset after the last element received.
        Elements left out (``badPayloads=skip``) take no offset, so they do not count."""
        return self.intake.base + self.buffer.received - self.intake.skipped

    def check_subscribed(self) -> None:
        """Raise once the publisher has not called ``on_subscribe`` within
        ``subscribeTimeoutMs`` of ``subscribe()``."""
        if self.buffer.subscribed or self.since is None:
            return
        waited = time.monotonic() - self.since
        if waited * 1000 >= self.options.subscribe_timeout_ms:
            raise RuntimeError(
                f"reactive source: the publisher ({_name(self.options)}) did not call "
                f"on_subscribe within {waited:.1f} s of subscribe() (subscribeTimeoutMs="
                f"{self.options.subscribe_timeout_ms}); a Publisher must "
                "call on_subscribe first (§1.9)")

    def failure(self) -> BaseException | None:
        """What latestOffset raises for the publisher's ``on_error`` (None: no error)."""
        error = self.buffer.error
        return None if error is None else publisher_failed(self.options, error)

    def stop(self) -> None:
        """Cancel the subscription and stop the intake; with a log, keep the rows the
        publisher signalled that Spark never saw there, so that the restarted query is
        offered them after those it already knows of."""
        buffer, intake = self.buffer, self.intake
        buffer.cancel(timeout=1.0)
        # The log's thread stops first: it takes elements from the buffer too.
        intake.stop()
        left = buffer.drain()
        buffer.close()
        if self.wal is not None:
            try:
                intake.finish(left)
            except Exception:
                log.exception("reactive source: could not keep %d buffered rows in the "
                              "write-ahead log at %s; they are lost", buffer.count(left),
                              self.wal.location)
            else:
                if left:
                    log.info("reactive source: kept %d buffered rows in the write-ahead log",
                             buffer.count(left))
        else:
            lost = buffer.count(left) + intake.end - self.released_end
            if lost:
                log.warning("reactive source: %d buffered rows are lost (no walLocation)",
                            lost)


def _name(options: SourceOptions) -> str:
    return "read_stream()" if options.publisher == SHIPPED_FACTORY else options.publisher


def publisher_failed(options: SourceOptions, error: BaseException) -> BaseException:
    """The error latestOffset raises for the publisher's ``on_error``: its message first.

    Spark shows the formatted traceback of what the runner raised, and Python formats an
    exception's causes before it: raised ``from error``, a library's traceback behind the
    publisher's error (25 lines of websockets and asyncio for a refused connection) would
    come before what happened. So the cause is not chained but follows the message, as
    text: the first line the user reads says what failed, the library's traceback comes
    after it.
    """
    # A PublisherError is the source's own finding (the publisher broke a rule of the
    # specification), not a signal of the publisher's.
    what = ("broke the Reactive Streams rules" if isinstance(error, PublisherError)
            else "signalled on_error")
    message = (f"reactive source: the publisher ({_name(options)}) {what}: "
               f"{type(error).__name__}: {error}")
    if error.__traceback__ is not None or error.__cause__ is not None or (
            error.__context__ is not None and not error.__suppress_context__):
        told = "".join(traceback.format_exception(error)).rstrip("\n")
        message += f"\n\nThe publisher's error, after its causes:\n{told}"
    failure = RuntimeError(message)
    failure.__suppress_context__ = True
    return failure
