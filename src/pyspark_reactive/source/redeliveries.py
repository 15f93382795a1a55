"""Redeliveries the write-ahead log already holds, dropped on the driver's path.

An acknowledging publisher (``on_durable``) acknowledges upstream right after each group
commit; a kill between the commit and the acknowledgement leaves messages that are in the
log and that the broker sends again to the restarted query. A publisher that also gives
each message an identity (``identity(element) -> str | None``: a JetStream stream
sequence, a Redis entry ID, a RabbitMQ ``message-id``) lets the source drop them.

The intake keeps the identities of each segment it writes in the segment
(:data:`IDENTITIES_METADATA`), and at each commit of Spark's (which deletes the committed
segments) the newest :data:`IDENTITY_WINDOW` of them in the log's file
:data:`RECENT_IDENTITIES`. When a run subscribes, :func:`remembered_identities` reads them
back, and :class:`RedeliveryFilter` drops an element whose identity is among them, once
(and, when the publisher has ``redelivered(element)``, only if that says the broker sent
it before: a producer may reuse an id), asking upstream for one more in its place and
acknowledging it in its turn, so the broker forgets it too. An identity must be unique to
a message within the newest few thousand.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from reactive_streams import Publisher, Subscriber, Subscription

from .wal import WriteAheadLog

__all__ = ["IDENTITIES_METADATA", "IDENTITY_WINDOW", "RECENT_IDENTITIES", "RedeliveryFilter",
           "remembered_identities"]

log = logging.getLogger("pyspark_reactive.source")

#: Schema metadata of a segment: the identities of its elements, a JSON list.
IDENTITIES_METADATA = b"reactive.identities"
#: The log's file holding the newest identities of the segments Spark committed.
RECENT_IDENTITIES = "recent-identities"
#: How many identities of committed segments the log keeps. A redelivery comes back at the
#: restart only if it was durable and not yet acknowledged when the run died: the elements
#: of the last group commit or two, which are far fewer.
IDENTITY_WINDOW = 4096
# The file is a JSON list of IDENTITY_WINDOW strings: more than this is not one.
_MOST_BYTES = 16 * 2**20


def remembered_identities(wal: WriteAheadLog) -> list[str]:
    """The identities the log holds, oldest first: the newest of those Spark committed,
    then those of its segments in offset order. A file that cannot be read is named in a
    warning and ignored (redeliveries are then kept, at least once, as without
    identities)."""
    found: dict[str, None] = {}
    held = wal.get(RECENT_IDENTITIES, _MOST_BYTES)
    texts = [] if held is None else [(RECENT_IDENTITIES, held)]
    for entry in wal.entries():
        try:
            metadata = wal.metadata(entry)
        except Exception as error:
            log.warning("reactive source: the identities of segment %s cannot be read (%s); "
                        "its messages, if redelivered, are kept again", entry.name, error)
            continue
        if IDENTITIES_METADATA in metadata:
            texts.append((entry.name, metadata[IDENTITIES_METADATA]))
    for name, text in texts:
        try:
            values = json.loads(text)
        except ValueError as error:
            log.warning("reactive source: the identities in %s of the write-ahead log at %s "
                        "cannot be read (%s); redeliveries of them are kept", name,
                        wal.location, error)
            continue
        if isinstance(values, list):
            found.update((str(value), None) for value in values)
    return list(found)


class RedeliveryFilter(Publisher[Any]):
    """``publisher`` without the redeliveries of messages whose identities are in
    ``remembered`` (each dropped once).

    Every attribute but ``subscribe`` and ``on_durable`` is the publisher's own
    (``position_key``, ``identity``, ``skip_unfit_elements``...). ``on_durable(count)``
    counts the elements the source received; the publisher is told the count of those it
    signalled, the dropped ones included.
    """

    def __init__(self, publisher: Any, remembered: Iterable[str]) -> None:
        self._publisher = publisher
        self._identity = publisher.identity
        self._remembered = set(remembered)
        self._lock = threading.Lock()
        # (elements kept, elements signalled upstream by then, dropped ones after it
        # included): the newest mark per kept element not yet told durable.
        self._marks: deque[tuple[int, int]] = deque()
        self._kept = 0
        self._signalled = 0
        self._durable = 0  # the count on_durable was last given (elements kept)
        self._telling = threading.Lock()
        self._told = 0  # the count the publisher was last told
        marked = getattr(publisher, "redelivered", None)
        self._marked = marked if callable(marked) else None
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._publisher, name)

    def __repr__(self) -> str:
        return repr(self._publisher)

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        self._publisher.subscribe(_Dropping(subscriber, self))

    def on_durable(self, count: int) -> None:
        with self._lock:
            upstream = 0
            while self._marks and self._marks[0][0] <= count:
                upstream = self._marks.popleft()[1]
            self._durable = max(self._durable, count)
            if not self._marks and self._durable >= self._kept:
                # Nothing kept waits: the drops since the last kept one are durable too.
                upstream = self._signalled
        self._tell(upstream)

    def _tell(self, upstream: int) -> None:
        # One call at a time, counts only growing: from the log's thread (on_durable) and
        # from the signalling thread (a drop when nothing kept waits).
        with self._telling:
            if upstream <= self._told:
                return
            self._told = upstream
            self._publisher.on_durable(upstream)

    # -- on the publisher's signalling thread ------------------------------------------------

    def _arrived(self, element: Any) -> bool:
        """Count ``element``; False when it is a redelivery to drop."""
        try:
            identity = self._identity(element)
        except Exception:
            log.exception("reactive source: the publisher's identity() raised; the element "
                          "is kept")
            identity = None
        with self._lock:
            self._signalled += 1
            if identity is not None and str(identity) in self._remembered and (
                    self._redelivered(element)):
                self._remembered.discard(str(identity))
                self.dropped += 1
                if self._marks:
                    # Acknowledged with the kept element before it, once that is durable.
                    kept, _ = self._marks[-1]
                    self._marks[-1] = (kept, self._signalled)
                    return False
                # Every element kept before it is durable (or none was kept): it is in the
                # log already, so it is acknowledged now (or it would hold the broker's
                # window until another element came, which a full window never lets come).
                upstream = self._signalled if self._durable >= self._kept else 0
            else:
                self._kept += 1
                self._marks.append((self._kept, self._signalled))
                return True
        self._tell(upstream)
        return False

    def _redelivered(self, element: Any) -> bool:
        """Whether the publisher marks ``element`` as sent before (True when it cannot
        tell: the identity alone decides then, which must be unique to a message)."""
        marked = self._marked
        if marked is None:
            return True
        try:
            return bool(marked(element))
        except Exception:
            log.exception("reactive source: the publisher's redelivered() raised")
            return True


class _Dropping(Subscriber[Any]):
    def __init__(self, subscriber: Subscriber[Any], owner: RedeliveryFilter) -> None:
        self._subscriber = subscriber
        self._owner = owner
        self._subscription: Subscription | None = None

    def __repr__(self) -> str:
        return repr(self._subscriber)

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._subscriber.on_subscribe(subscription)

    def on_next(self, element: Any) -> None:
        if self._owner._arrived(element):
            self._subscriber.on_next(element)
            return
        log.info("reactive source: dropped a redelivery of a message the write-ahead log "
                 "holds (%d so far)", self._owner.dropped)
        if self._subscription is not None:
            self._subscription.request(1)  # the demand it took goes to the next one

    def on_error(self, error: BaseException) -> None:
        self._subscriber.on_error(error)

    def on_complete(self) -> None:
        self._subscriber.on_complete()
