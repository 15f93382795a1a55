"""One shard's share of one micro-batch, read in a Spark task on an executor.

:func:`read_epoch` is all a task does: when the shard's log already has the epoch (a
retried task, a restarted query, a second attempt that lost), it returns those rows;
otherwise it makes the shard's publisher (the factory called with the shard and where its
stream goes on), subscribes, requests the epoch's share and takes elements while they keep
coming: until the share is full, the shard completes, none comes for ``fillWaitMs`` (for
the first one, at least :data:`FIRST_ELEMENT_S`), or :data:`EPOCH_CAP_S` have passed. It
asks a publisher that can tell how much the shard still holds (``pending()``), converts
the elements, keeps them in the shard's log, tells the publisher they are durable
(``on_durable``), cancels, and waits for a publisher that can say so (``wait_closed``) to
have written its acknowledgements. Nothing is held between tasks: the subscription lives
for one task.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from reactive_streams import Subscriber, Subscription

from .._testing.faults import crash_point
from ..errors import PySparkReactiveError
from .durability import FactoryOptions, ResumePoint
from .options import SourceOptions
from .rows import RowConversionError, RowConverter
from .shard_log import EpochRecord, ShardLog
from .shards import Shard

__all__ = ["ENDINGS", "EPOCH_CAP_S", "IDENTITY_WINDOW", "ShardTake", "epoch_batches",
           "read_epoch"]

#: How many epochs' worth of message identities a shard remembers (times its share): a
#: redelivery is dropped while its identity is among the newest that many.
IDENTITY_WINDOW = 2
#: The longest a task takes elements that keep coming without filling its share.
EPOCH_CAP_S = 30.0
#: The least a task waits for its shard's first element (fillWaitMs, if longer).
FIRST_ELEMENT_S = 1.0
#: How long a task waits, after its cancel, for a publisher that says when its connection
#: is closed (``wait_closed``), so that its acknowledgements go out before the task ends.
CLOSE_WAIT_S = 2.0
#: With badPayloads=skip, the elements converted at a time after one that cannot become a
#: row (doubled while they fit).
SKIP_CHUNK = 64
#: Why a task's taking ended: its share full, the shard completed, no element for
#: fillWaitMs, or EPOCH_CAP_S passed while elements still came.
ENDINGS = ("full", "completed", "paused", "capped")

log = logging.getLogger("pyspark_reactive.source")


class ShardTake(Subscriber[Any]):
    """Requests ``share`` elements at once and holds what arrives, until :meth:`wait`
    ends: the share is full, the shard completed or failed, or the time is up."""

    def __init__(self, share: int) -> None:
        self.share = share
        self.elements: list[Any] = []
        self.error: BaseException | None = None
        self.completed = False
        self.subscription: Subscription | None = None
        self._changed = threading.Condition()

    def on_subscribe(self, subscription: Subscription) -> None:
        with self._changed:
            if self.subscription is not None:
                subscription.cancel()  # §2.5: one subscription only
                return
            self.subscription = subscription
            self._changed.notify_all()
        subscription.request(self.share)

    def on_next(self, element: Any) -> None:
        with self._changed:
            if len(self.elements) >= self.share:
                self.error = self.error or PySparkReactiveError(
                    f"the shard's publisher signalled more than the {self.share} elements "
                    "requested (rule §1.1)")
            else:
                self.elements.append(element)
            self._changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        with self._changed:
            self.error = error
            self._changed.notify_all()

    def on_complete(self) -> None:
        with self._changed:
            self.completed = True
            self._changed.notify_all()

    def wait(self, subscribe_s: float, gap_s: float, cap_s: float) -> tuple[list[Any], str]:
        """The elements taken, and why the taking ended (:data:`ENDINGS`): waits up to
        ``subscribe_s`` for ``on_subscribe``, then takes elements while they keep coming,
        until the share is full, the shard completes, none comes for ``gap_s``, or
        ``cap_s`` have passed. The subscription is then cut at what arrived (later
        elements are not taken).

        Raises
        ------
        TimeoutError
            When ``on_subscribe`` did not come in time.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: self.subscription is not None or
                                          self.error is not None, subscribe_s):
                raise TimeoutError(f"the shard's publisher did not call on_subscribe "
                                   f"within subscribeTimeoutMs ({subscribe_s * 1000:g} ms)")
            cap = time.monotonic() + cap_s
            ended = ""
            while not ended:
                seen = len(self.elements)
                left = cap - time.monotonic()
                # A network publisher (mqtt) calls on_subscribe before it has connected:
                # its first element may come a round trip or a few later.
                gap = gap_s if seen else max(gap_s, FIRST_ELEMENT_S)
                self._changed.wait_for(functools.partial(self._moved, seen),
                                       max(0.0, min(gap, left)))
                if self.error is not None:
                    raise self.error
                if len(self.elements) >= self.share:
                    ended = "full"
                elif self.completed:
                    ended = "completed"
                elif len(self.elements) == seen:
                    ended = "paused" if left > gap else "capped"
                elif time.monotonic() >= cap:
                    ended = "capped"
            return list(self.elements), ended

    def _moved(self, seen: int) -> bool:
        """Whether an element came since ``seen`` were held, or the taking is over."""
        return (len(self.elements) > seen or len(self.elements) >= self.share
                or self.completed or self.error is not None)

    def held(self) -> int:
        """How many elements have arrived, those after :meth:`wait` ended included."""
        with self._changed:
            return len(self.elements)

    def cancel(self) -> None:
        subscription = self.subscription
        if subscription is not None:
            subscription.cancel()


def read_epoch(options: SourceOptions, schema: StructType, factory: Callable[..., Any],
               shard: Shard, epoch: int, share: int) -> tuple[ShardLog, EpochRecord]:
    """The record of ``shard``'s epoch ``epoch``, read from the publisher and kept first
    if no attempt kept it before."""
    assert options.wal_location is not None  # parse_source_options requires it with shards
    shard_log = ShardLog(options.wal_location, shard.index,
                         owner_check=options.wal_owner_check)
    done = shard_log.record(epoch)
    if done is not None:
        return shard_log, done
    resume = shard_log.resume_point(epoch)
    publisher = _make(factory, options, schema, shard, resume)
    take = ShardTake(share)
    publisher.subscribe(take)
    subscribe_s = options.subscribe_timeout_ms / 1000
    try:
        signalled, ended = take.wait(subscribe_s, options.fill_wait_ms / 1000, EPOCH_CAP_S)
        pending = _pending(publisher, take, len(signalled), shard)
        crash_point("shard-taken")
        elements, identities = _new_ones(publisher, signalled, shard_log, epoch,
                                         IDENTITY_WINDOW * share)
        converter = RowConverter(schema)
        skip = getattr(publisher, "skip_unfit_elements", False) is True
        batches, left_out = _convert(converter, elements, resume.offset, skip)
        if left_out:
            log.warning("reactive source: shard %d left out %d element%s of epoch %d that "
                        "cannot become rows, as %r asks (badPayloads=skip); they are "
                        "acknowledged with the rows around them. The first: %s",
                        shard.index, len(left_out), "" if len(left_out) == 1 else "s", epoch,
                        publisher, left_out[0])
        key = resume.key
        position_key = getattr(publisher, "position_key", None)
        if elements and callable(position_key):
            key = position_key(elements[-1])
        record, mine = shard_log.publish(epoch, resume.offset, batches,
                                         converter.arrow_schema, key, identities, ended,
                                         pending)
        crash_point("shard-kept")
        on_durable = getattr(publisher, "on_durable", None)
        if mine and signalled and callable(on_durable):
            # Every element signalled is durable now: this epoch's, and the redeliveries
            # of the epoch before, which its record holds. Said before the cancel, while
            # the publisher's connection is open to acknowledge them.
            on_durable(len(signalled))
    finally:
        take.cancel()
        closed = getattr(publisher, "wait_closed", None)
        if callable(closed):
            # The task's process may end next: let the acknowledgements go out first.
            closed(CLOSE_WAIT_S)
    return shard_log, record


def _convert(converter: RowConverter, elements: list[Any], offset: int,
             skip: bool) -> tuple[list[pa.RecordBatch], list[RowConversionError]]:
    """The rows of ``elements`` (the first at ``offset``), and those left out: with
    ``skip`` (the publisher's ``skip_unfit_elements``, the built-ins' ``badPayloads=skip``)
    an element that cannot become a row is left out and takes no offset; otherwise it
    fails the task (raised), and every retry, as on the driver's path.

    After a bad element the rest goes in chunks of :data:`SKIP_CHUNK`, doubled while they
    fit: a bad element costs the conversion of at most one chunk, not of the rest."""
    batches: list[pa.RecordBatch] = []
    left_out: list[RowConversionError] = []
    position, chunk = 0, len(elements)
    while position < len(elements) or not batches:
        batch, error = converter.convert(elements[position:position + chunk], offset)
        if batch.num_rows or not batches:
            batches.append(batch)
        offset += batch.num_rows
        position += batch.num_rows
        if error is None:
            chunk *= 2
            if position >= len(elements):
                break
            continue
        if not skip:
            raise error
        left_out.append(error)
        position += 1  # it takes no offset: the next row gets the one it would have had
        chunk = SKIP_CHUNK
    return [batch for batch in batches if batch.num_rows], left_out


def _pending(publisher: Any, take: ShardTake, taken: int, shard: Shard) -> int | None:
    """How many elements the shard still holds as the task stops taking, where its
    publisher can tell (``pending()``; None where it cannot): those it has not signalled,
    and those it signalled after the task stopped taking, which are not kept, so the shard
    gives them again."""
    pending = getattr(publisher, "pending", None)
    if not callable(pending):
        return None
    try:
        told = pending()
    except Exception as error:  # a hint for planning: never worth the task's rows
        log.warning("reactive source: pending() of shard %d's publisher failed (%s: %s); "
                    "its lag is taken as unknown", shard.index, type(error).__name__, error)
        return None
    if told is None:
        return None
    if type(told) is not int or told < 0:
        raise TypeError(f"reactive source: pending() of shard {shard.index}'s publisher "
                        f"returned {told!r}, not an int >= 0 or None")
    return told + take.held() - taken


def _new_ones(publisher: Any, signalled: list[Any], shard_log: ShardLog, epoch: int,
              window: int) -> tuple[list[Any], list[str] | None]:
    """The elements that are not redeliveries (by the publisher's ``identity(element)``,
    where it has one) of a message the shard remembers, and what it remembers next: the
    newest ``window`` identities of those it remembered, the redeliveries dropped and the
    new messages."""
    identity = getattr(publisher, "identity", None)
    if not callable(identity):
        return signalled, None
    before = shard_log.record(epoch - 1) if epoch > 1 else None
    remembered = shard_log.identities(before) if before is not None else []
    seen = set(remembered)
    elements, dropped, new = [], [], []
    for element in signalled:
        held = identity(element)
        key = None if held is None else str(held)
        if key is not None and key in seen:
            dropped.append(key)  # kept before, then redelivered: its ack was lost
            continue
        elements.append(element)
        if key is not None:
            new.append(key)
            seen.add(key)
    again = set(dropped)
    return elements, ([i for i in remembered if i not in again] + dropped + new)[-window:]


def epoch_batches(shard_log: ShardLog, record: EpochRecord) -> list[pa.RecordBatch]:
    """The epoch's rows, as Spark takes them from ``read()``."""
    batches: list[pa.RecordBatch] = shard_log.rows(record).to_batches()
    return batches


def _make(factory: Callable[..., Any], options: SourceOptions, schema: StructType,
          shard: Shard, resume: ResumePoint) -> Any:
    made = factory(FactoryOptions(options.raw, resume, schema, shard))
    if not callable(getattr(made, "subscribe", None)):
        raise TypeError(f"reactive source: the factory of publisher={options.publisher!r} "
                        f"returned {type(made).__name__} for shard {shard.index}, not a "
                        "Publisher")
    return made
