"""What the broker adapters' publishers share (``mqtt``, ``rabbitmq``, ``nats_jetstream``,
``redis_streams``): the checks of their numeric parameters, and :class:`Counting`, the
subscriber as a subscription's emitter sees it, which tells the session each element its
subscriber took, so that only those are ever acknowledged."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from ..api import Subscriber, Subscription

__all__ = ["Counting", "Signalled", "check_int", "is_number"]

T = TypeVar("T")


def is_number(value: object) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value: object, low: int, high: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int from ``low`` to
    ``high``.

    Examples
    --------
    >>> check_int("port", 0, 1, 65535)
    Traceback (most recent call last):
    ...
    ValueError: port 0: an integer from 1 to 65535 is accepted
    """
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} {value!r}: an integer from {low} to {high} is accepted")


class Signalled(Protocol):
    """A session told of each element its subscriber took."""

    def signalled(self) -> None: ...


class Counting(Subscriber[T], Generic[T]):
    """The subscriber as the emitter sees it: tells ``session`` each element it took."""

    def __init__(self, subscriber: Subscriber[T], session: Signalled) -> None:
        self._subscriber = subscriber
        self._session = session

    def __repr__(self) -> str:
        return repr(self._subscriber)

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscriber.on_subscribe(subscription)

    def on_next(self, element: T) -> None:
        self._subscriber.on_next(element)
        # Only now: a message whose on_next raised (or never ran) is not acknowledged.
        self._session.signalled()

    def on_error(self, error: BaseException) -> None:
        self._subscriber.on_error(error)

    def on_complete(self) -> None:
        self._subscriber.on_complete()
