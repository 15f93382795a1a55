"""Subscribers that publish into a broker and request more only as the broker confirms.

:class:`ConfirmingSubscriber` is the common part of the broker subscribers
(``RabbitMQSubscriber``, ``JetStreamSubscriber``, ``RedisStreamSubscriber``): a thread of
the subscription's own connects, then requests ``window`` elements; ``on_next`` only queues
an element (§2.2: it never waits on the network); the thread hands what is queued to the
broker in one go (:meth:`ConfirmingSubscriber._send`, which returns once the broker has
confirmed every element of it) and only then requests as many more. So at most ``window``
elements are ever unconfirmed, a slow broker slows the publisher, and a refusal stops the
stream: the subscriber cancels, and the failure is kept for :meth:`wait_done`.

**Where the elements come from decides what a failure fails.** With a subscription that
can defer confirmation (:func:`pyspark_reactive.publish`: a micro-batch then ends only once
the broker confirmed all of its rows) the subscriber also fails the batch through the
subscription's ``fail_batch(error)``, so Spark does not commit it; with
``SubscriberForeachWriter`` the writer's ``close`` calls :meth:`wait_done`, which raises the
failure, so the task fails and Spark runs it again.

**Keys.** Every element gets a key that a retried batch gives it again, which a subclass
turns into the broker's message identity (a ``Nats-Msg-Id``, a ``message-id``, a
deduplication key): ``"<prefix><scope>.<n>"``, where ``scope`` names the batch (the
subscription's ``batch_scope()`` when it has one: the query, batch and partition under
Spark; else one made per subscription) and ``n`` counts the elements this subscriber
received in that scope, from 0. A retried batch gives each row its key again only when it
gives the rows in the same order (deterministic output, as Spark's own ``foreach``
guarantee asks): after a round-robin ``repartition``, key the rows by a column instead.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..api import Subscriber, Subscription
from ..errors import ReactiveStreamsError
from ..signalling import require_not_none

__all__ = ["BrokerRefused", "ConfirmingSubscriber"]

T = TypeVar("T")


class BrokerRefused(ReactiveStreamsError, ConnectionError):
    """The broker did not confirm an element (a negative acknowledgement, a returned
    message, an error reply), or the connection to it failed while elements were
    unconfirmed."""


class ConfirmingSubscriber(Subscriber[T], ABC, Generic[T]):
    """Publishes each element into a broker, requesting more only as the broker confirms.

    Subclasses implement :meth:`_open`, :meth:`_send` and :meth:`_close`, which all run on
    the subscription's own thread, one at a time.

    Parameters
    ----------
    window : int
        The most elements requested and not yet confirmed (at least 1), default 256.
        Each call of :meth:`_send` gets at most this many.
    prefix : str
        Put before every element's key (see the module): give each query writing into
        the same stream or subject a prefix of its own when the keys deduplicate.

    Attributes
    ----------
    confirmed : int
        Elements the broker has confirmed so far.
    failure : BaseException or None
        Why the subscriber stopped early (its :meth:`_open` or :meth:`_send` raised).

    Examples
    --------
    >>> from reactive_streams import IterablePublisher
    >>> class Collect(ConfirmingSubscriber[int]):
    ...     def _open(self): self.sent = []
    ...     def _send(self, elements): self.sent += elements
    ...     def _close(self): pass
    >>> sink = Collect(window=2, prefix="demo-")
    >>> IterablePublisher(lambda: iter([5, 6, 7])).subscribe(sink)
    >>> sink.wait_done(timeout=5)
    >>> [key.split(".")[-1] for key, _ in sink.sent], [e for _, e in sink.sent]
    (['0', '1', '2'], [5, 6, 7])
    """

    def __init__(self, *, window: int = 256, prefix: str = "") -> None:
        if type(window) is not int or window < 1:
            raise ValueError(f"window {window!r}: a whole number of elements >= 1 is "
                             f"accepted")
        if not isinstance(prefix, str):
            raise ValueError(f"prefix {prefix!r}: a string is accepted")
        self.window = window
        self.prefix = prefix
        self.confirmed = 0
        self.failure: BaseException | None = None
        self._changed = threading.Condition()
        self._queue: deque[tuple[str, T]] = deque()
        self._subscription: Subscription | None = None
        self._used = False  # subscribed once: a subscriber serves one stream
        self._batch_scope: Callable[[], object] | None = None
        self._ended = False  # on_complete or on_error came
        self._upstream_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._deferred = False
        self._own_scope = uuid.uuid4().hex[:12]
        self._scope: object = None
        self._counted = 0

    # -- for subclasses ---------------------------------------------------------------------

    @abstractmethod
    def _open(self) -> None:
        """Connect to the broker (before the first request)."""

    @abstractmethod
    def _send(self, elements: Sequence[tuple[str, T]]) -> None:
        """Publish ``(key, element)`` pairs, in order, and return once the broker has
        confirmed every one; raise (:class:`BrokerRefused`, or the client's error) when it
        refused one or the connection failed."""

    @abstractmethod
    def _close(self) -> None:
        """Disconnect; called once after :meth:`_open` was called, whatever happened."""

    # -- Subscriber -------------------------------------------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "the subscription", "§2.13")
        with self._changed:
            if self._subscription is not None or self._used:
                # §2.5: one subscription at a time; and one in all: a second after the
                # first ended would start from the first's end (its elements unsent).
                subscription.cancel()
                return
            self._subscription = subscription
            self._used = True
            # Looked up once: on_next asks it for every element.
            scope = getattr(subscription, "batch_scope", None)
            self._batch_scope = scope if callable(scope) else None
        defer = getattr(subscription, "defer_confirmation", None)
        self._deferred = callable(defer)
        if defer is not None and self._deferred:
            defer()  # a batch ends only once the broker confirmed its elements
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"{type(self).__name__}-sends")
        self._thread.start()

    def on_next(self, element: T) -> None:
        require_not_none(element, "the element", "§2.13")
        scope = self._scope_now()
        if scope != self._scope:
            self._scope, self._counted = scope, 0
        key = f"{self.prefix}{scope}.{self._counted}"
        self._counted += 1
        with self._changed:
            self._queue.append((key, element))
            self._changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "the error", "§2.13")
        with self._changed:
            self._ended, self._upstream_error = True, error
            self._changed.notify_all()

    def on_complete(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    # -- waiting ----------------------------------------------------------------------------

    def wait_done(self, timeout: float | None = None) -> None:
        """Wait until every element received was confirmed after the stream's end, or the
        subscriber stopped early; raise the failure in the second case.

        Raises
        ------
        BaseException
            :attr:`failure`, when :meth:`_open` or :meth:`_send` raised.
        TimeoutError
            When ``timeout`` seconds passed first.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"{type(self).__name__}: elements were still unconfirmed "
                               f"after {timeout} s ({self.confirmed} confirmed so far)")
        if self.failure is not None:
            raise self.failure

    # -- the subscription's thread ----------------------------------------------------------

    def _scope_now(self) -> object:
        scope = self._batch_scope
        value = scope() if scope is not None else None
        return self._own_scope if value is None else value

    def _run(self) -> None:
        subscription = self._subscription
        assert subscription is not None
        opened = False
        try:
            self._open()
            opened = True
            subscription.request(self.window)
            while True:
                with self._changed:
                    while not self._queue and not self._ended:
                        self._changed.wait()
                    taken = [self._queue.popleft()
                             for _ in range(min(len(self._queue), self.window))]
                    ended = self._ended and not self._queue
                if taken:
                    self._send(taken)
                    self.confirmed += len(taken)
                    if self._deferred:
                        subscription.confirm(self.confirmed)  # type: ignore[attr-defined]
                    if not ended:
                        subscription.request(len(taken))
                if ended:
                    break
        except Exception as error:
            self.failure = error
            fail_batch = getattr(subscription, "fail_batch", None)
            if callable(fail_batch):
                fail_batch(error)
            subscription.cancel()
        finally:
            try:
                if opened or self.failure is not None:
                    self._close()
            finally:
                self._subscription = None  # §3.13
                self._done.set()
