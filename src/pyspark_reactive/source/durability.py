"""Two optional extensions a publisher can implement so that a hard kill loses nothing.

A publisher that knows neither works as before: with ``walLocation`` a hard kill loses at
most what arrived within the last ``walSyncMs``; a stop or restart loses nothing.

**Resuming.** The factory of the ``reactive`` source is called with the options mapping,
whose attribute ``resume`` is a :class:`ResumePoint`: the offset the next element gets
(every element before it is durable: in the write-ahead log, or committed by Spark when
there is no log) and the position key the publisher attached to the element before it.
A publisher over an upstream that can seek (a sequence, a file, a Kafka partition, a queue
with an index) starts right after that element, and a kill then loses and repeats nothing.
To attach keys, give the publisher a method ``position_key(element) -> str | None``; the
source calls it for the last element of each group commit and keeps the key in the log.

**Acknowledging.** Give the publisher a method ``on_durable(count: int) -> None``. The
source calls it serially, from its log's thread (and once more as it stops, after that
thread has ended; and, for a redelivery it drops, from the thread that signalled it: see
:mod:`~pyspark_reactive.source.redeliveries`), never while holding up a batch, once the
first ``count`` elements signalled to this subscription are durable (counted from 1 in
signal order, increasing with each call): written to the log with ``walLocation``,
committed by Spark without it. A publisher over an upstream that redelivers what was not
acknowledged (an MQTT QoS 1 session, a message queue) acknowledges them upstream then. A
kill can then repeat only elements that were durable and not yet acknowledged; see
docs/how-to/exactly-once.md for dropping them.

**Identities** (shards read on the executors, :mod:`~pyspark_reactive.source.sharded`).
Give an acknowledging publisher a method ``identity(element) -> str | None`` (a message
id): each epoch of a shard keeps its messages' identities, and a message the epoch before
kept that comes back (its acknowledgement was lost to a kill) is dropped, and
acknowledged, rather than read twice.

**Backlog** (shards). Give a shard's publisher a method ``pending() -> int | None``: how
many elements the shard holds that it has not signalled yet (a queue's depth, a
consumer's pending count, the rest of a finite stream), or None when it cannot tell. The
task asks it once, on the task's thread, right after it stops taking elements and before
it cancels. The epoch keeps the answer (with the elements signalled after the task stopped
taking, which it does not keep), query progress shows it as the shard's ``lag``, and a
shard that told 0 is read again only with the idle shards, after their pause, and not
again in an ``availableNow`` run. A publisher without the method, or that answers None,
changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .options import CaseInsensitiveOptions

__all__ = ["FactoryOptions", "ResumePoint"]


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumable publisher starts.

    Attributes
    ----------
    offset : int
        The stream offset of the next element. With a write-ahead log, elements
        ``0 .. offset - 1`` are durable in it; without one it is the offset Spark asks
        for next, and the rows of a batch Spark planned but had not committed when the
        previous run ended are gone.
    key : str or None
        The key the publisher's ``position_key`` gave the element at ``offset - 1``;
        ``None`` when there is none (a fresh stream, or a publisher without keys).
    """

    offset: int = 0
    key: str | None = None


class FactoryOptions(CaseInsensitiveOptions):
    """The options a publisher factory is called with: the reader's options (names compare
    case-insensitively), :attr:`resume`, where a resumable publisher starts,
    :attr:`schema`, the ``StructType`` the source makes rows of (``None`` where unknown:
    a factory called only to check its options), and :attr:`shard`, the
    :class:`~pyspark_reactive.source.shards.Shard` a sharded factory makes (``None``
    where the feed is read whole, on the driver), whose ``resume`` counts that shard's
    elements alone."""

    def __init__(self, options: Mapping[str, str], resume: ResumePoint | None = None,
                 schema: Any = None, shard: Any = None) -> None:
        super().__init__(options)
        self.resume = resume if resume is not None else ResumePoint()
        self.schema = schema
        self.shard = shard
