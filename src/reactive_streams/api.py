"""The four Reactive Streams interfaces, mapped to Python.

Each docstring says what a caller may rely on and cites the rule of the specification
(https://github.com/reactive-streams/reactive-streams-jvm, version 1.0.4) that grants it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Final, Generic, TypeVar

__all__ = ["UNBOUNDED", "Processor", "Publisher", "Subscriber", "Subscription"]

T = TypeVar("T")
R = TypeVar("R")

#: Demand of ``2**63 - 1`` (Java's ``Long.MAX_VALUE``) means "unbounded" (§3.17).
#: Accumulated demand is capped here and never overflows.
UNBOUNDED: Final[int] = 2**63 - 1


class Subscription(ABC):
    """The one-to-one link between a Publisher and a Subscriber.

    Only the Subscriber that received it in ``on_subscribe`` may call its methods, and
    only one at a time (§2.7).
    """

    @abstractmethod
    def request(self, n: int) -> None:
        """Add ``n`` to the demand: the publisher may then signal up to ``n`` more elements.

        May be called synchronously from ``on_subscribe`` and ``on_next`` (§3.2) without
        unbounded recursion (§3.3), returns promptly (§3.4) and never raises (§3.5).
        A non-positive ``n`` is answered with ``on_error(ValueError)``, not raised (§3.9).
        Demand accumulates up to :data:`UNBOUNDED`, which means "no limit" (§3.17).
        After cancellation or a terminal signal it does nothing (§3.6).
        """

    @abstractmethod
    def cancel(self) -> None:
        """Ask the publisher to stop signalling and to release the subscriber.

        Idempotent and thread-safe (§3.5, §3.7); returns promptly (§3.5). Signals already
        under way may still arrive (§3.12), but eventually stop, and the publisher drops
        its reference to the subscriber (§3.13).
        """


class Subscriber(ABC, Generic[T]):
    """Receives the signals of one subscription, in order and never concurrently (§1.3).

    A subscriber must not raise from its methods except ``TypeError`` for a ``None``
    argument (§2.13): a subscriber that raises is treated as having cancelled.
    """

    @abstractmethod
    def on_subscribe(self, subscription: Subscription) -> None:
        """First signal of every subscription (§1.9). No element arrives before ``request``."""

    @abstractmethod
    def on_next(self, element: T) -> None:
        """One element, never more in total than requested (§1.1); never ``None`` (§2.13)."""

    @abstractmethod
    def on_error(self, error: BaseException) -> None:
        """Terminal signal: the stream failed (§1.4). No signal follows (§1.7)."""

    @abstractmethod
    def on_complete(self) -> None:
        """Terminal signal: the stream ended normally (§1.5). No signal follows (§1.7)."""


class Publisher(ABC, Generic[T]):
    """A provider of a possibly unbounded sequence of elements, sent on demand.

    A subscriber calls :meth:`subscribe`, receives a :class:`Subscription` in
    ``on_subscribe``, and asks for elements with ``subscription.request(n)``. The
    publisher then signals at most that many ``on_next`` calls (§1.1), one at a time
    (§1.3), and at most one terminal signal: ``on_complete`` or ``on_error`` (§1.7).
    ``subscription.cancel()`` stops it. Nothing is sent that was not asked for, so a slow
    subscriber is never drowned.

    Write one by subclassing and implementing :meth:`subscribe`; the project's publishers
    let an :class:`~reactive_streams.signalling.Emitter` do the signalling, and
    :func:`reactive_streams.create` makes one from a client that pushes. The narrative
    pages are :doc:`/getting-started/concepts` and :doc:`/how-to/own-publisher`, and
    every implementation can check itself with the TCK (:doc:`/how-to/tck`).

    Examples
    --------
    Any publisher can be read in a plain loop, with bounded demand:

    >>> from reactive_streams import RangePublisher, to_iterable
    >>> [x * x for x in to_iterable(RangePublisher(0, 5), prefetch=2)]
    [0, 1, 4, 9, 16]

    A publisher of your own, on the project's signalling core:

    >>> from reactive_streams import Publisher, collect
    >>> from reactive_streams.signalling import COMPLETE, Emitter, Source
    >>> class Countdown(Source[int]):
    ...     def __init__(self, start): self.next = start
    ...     def pull(self, n):
    ...         taken = list(range(self.next, max(self.next - n, 0), -1))
    ...         self.next -= len(taken)
    ...         return taken, (COMPLETE if self.next == 0 else None)
    >>> class CountdownPublisher(Publisher[int]):
    ...     def subscribe(self, subscriber):
    ...         Emitter(subscriber, Countdown(3)).start()
    >>> collect(CountdownPublisher())
    [3, 2, 1]
    """

    @abstractmethod
    def subscribe(self, subscriber: Subscriber[T]) -> None:
        """Start a subscription: ``subscriber.on_subscribe`` is called exactly once (§1.9).

        Raises ``TypeError`` synchronously when ``subscriber`` is ``None`` (§1.9); any
        other refusal is signalled as ``on_error`` after ``on_subscribe``.
        """


class Processor(Subscriber[T], Publisher[R], Generic[T, R]):
    """Both a Subscriber (of ``T``) and a Publisher (of ``R``), obeying both contracts (§4.1).

    It may recover from an upstream error or propagate it to its subscribers (§4.2).
    """
