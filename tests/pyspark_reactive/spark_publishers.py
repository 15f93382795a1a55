"""Publishers for the source tests. They run in Spark's source runner process, so what they
observe (every request, the most demand ever outstanding) goes to a file named by the
``recordTo`` option, which the test reads back. conftest.py puts this folder on the
runner's PYTHONPATH so ``.option("publisher", "spark_publishers:...")`` imports it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher, RangePublisher, Subscriber, Subscription
from reactive_streams.api import UNBOUNDED
from reactive_streams.publishers import IterablePublisher


class Recording:
    """What a recording publisher wrote: its requests and the most demand outstanding."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.requests: list[int] = []
        # (time.time(), elements delivered before it) of every request
        self.timeline: list[tuple[float, int]] = []
        self.max_outstanding = 0
        self.delivered = 0
        self.cancelled = False
        if os.path.exists(path):
            with open(path) as handle:
                for line in handle:
                    record = json.loads(line)
                    if "request" in record:
                        self.requests.append(record["request"])
                        self.timeline.append((record["time"], record["delivered"]))
                    self.max_outstanding = max(self.max_outstanding,
                                               record.get("outstanding", 0))
                    self.delivered = max(self.delivered, record.get("delivered", 0))
                    self.cancelled = self.cancelled or record.get("cancelled", False)


class _RecordingSubscription(Subscription, Subscriber[Any]):
    """Sits between the publisher and the source's subscriber, writing down demand."""

    def __init__(self, downstream: Subscriber[Any], path: str) -> None:
        self.downstream = downstream
        self.path = path
        self.upstream: Subscription | None = None
        self.outstanding = 0
        self.delivered = 0
        self.lock = threading.Lock()

    def _write(self, **record: Any) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def request(self, n: int) -> None:
        with self.lock:
            self.outstanding = min(UNBOUNDED, self.outstanding + n)
            self._write(request=n, outstanding=self.outstanding, delivered=self.delivered,
                        time=time.time())
        assert self.upstream is not None
        self.upstream.request(n)

    def cancel(self) -> None:
        self._write(cancelled=True, delivered=self.delivered)
        assert self.upstream is not None
        self.upstream.cancel()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.upstream = subscription
        self.downstream.on_subscribe(self)

    def on_next(self, element: Any) -> None:
        with self.lock:
            self.outstanding -= 1
            self.delivered += 1
        self.downstream.on_next(element)

    def on_error(self, error: BaseException) -> None:
        self.downstream.on_error(error)

    def on_complete(self) -> None:
        self._write(complete=True, delivered=self.delivered)
        self.downstream.on_complete()


class RecordingPublisher(Publisher[Any]):
    def __init__(self, inner: Publisher[Any], path: str) -> None:
        self.inner = inner
        self.path = path

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.inner.subscribe(_RecordingSubscription(subscriber, self.path))


def recorded_range(options: Mapping[str, str]) -> Publisher[int]:
    """``range`` of ``count`` ints (endless without ``count``), recording demand."""
    count = int(options["count"]) if "count" in options else UNBOUNDED
    return RecordingPublisher(RangePublisher(0, count), options["recordTo"])


def failing(options: Mapping[str, str]) -> Publisher[int]:
    """``count`` ints, then ``on_error(ValueError(message))``."""
    count, message = int(options["count"]), options["message"]

    def elements() -> Any:
        yield from range(count)
        raise ValueError(message)

    return IterablePublisher(elements)


def not_a_publisher(options: Mapping[str, str]) -> object:
    return [1, 2, 3]


def pairs(options: Mapping[str, str]) -> Publisher[Any]:
    """Elements of several shapes for a ``id BIGINT, name STRING`` schema; the one at
    ``badAt`` (if given) does not fit."""
    count = int(options["count"])
    bad = int(options.get("badAt", -1))

    def element(i: int) -> Any:
        if i == bad:
            return (i, "name", "one column too many")
        shapes = [(i, f"n{i}"), [i, f"n{i}"], {"id": i, "name": f"n{i}"}]
        return shapes[i % 3]

    return IterablePublisher([element(i) for i in range(count)])


def described(options: Mapping[str, str]) -> Publisher[Any]:
    """``pairs`` with the schema it needs as the factory's ``default_schema``."""
    return pairs(options)


described.default_schema = lambda options: "id BIGINT, name STRING"  # type: ignore[attr-defined]


class _Ledger:
    """A durable cursor: how many elements were ever handed out, across query runs."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> int:
        try:
            with open(self.path) as handle:
                return int(handle.read() or 0)
        except FileNotFoundError:
            return 0

    def write(self, value: int) -> None:
        temporary = f"{self.path}.tmp"
        with open(temporary, "w") as handle:
            handle.write(str(value))
        os.replace(temporary, self.path)


class _LedgerSubscription(Subscription):
    def __init__(self, subscriber: Subscriber[int], ledger: _Ledger, total: int) -> None:
        self.subscriber = subscriber
        self.ledger = ledger
        self.total = total
        self.lock = threading.RLock()
        self.demand = 0
        self.cancelled = False
        self.emitting = False

    def request(self, n: int) -> None:
        # Synchronous and serial: each element is counted as handed out in the ledger
        # before on_next, as a message queue would mark it consumed.
        with self.lock:
            self.demand += n
            if self.emitting:
                return
            self.emitting = True
            try:
                while self.demand > 0 and not self.cancelled:
                    position = self.ledger.read()
                    if position >= self.total:
                        self.cancelled = True
                        self.subscriber.on_complete()
                        return
                    self.ledger.write(position + 1)
                    self.demand -= 1
                    self.subscriber.on_next(position)
            finally:
                self.emitting = False

    def cancel(self) -> None:
        self.cancelled = True


class LedgerPublisher(Publisher[int]):
    def __init__(self, path: str, total: int) -> None:
        self.ledger = _Ledger(path)
        self.total = total

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(_LedgerSubscription(subscriber, self.ledger, self.total))


def ledger(options: Mapping[str, str]) -> Publisher[int]:
    """0, 1, ... ``total - 1``, each handed out once across every query run."""
    return LedgerPublisher(options["ledger"], int(options["total"]))


class _Handing(Subscriber[int]):
    """Appends each element to a file as it is signalled, then passes it on."""

    def __init__(self, downstream: Subscriber[int], path: str) -> None:
        self.downstream = downstream
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_subscribe(self, subscription: Subscription) -> None:
        self.downstream.on_subscribe(subscription)

    def on_next(self, element: int) -> None:
        # Written before the signal, as a queue marks an element handed out: whatever the
        # file names was given to the source, which must deliver it.
        os.write(self.fd, f"{element}\n".encode())
        self.downstream.on_next(element)

    def on_error(self, error: BaseException) -> None:
        os.close(self.fd)
        self.downstream.on_error(error)

    def on_complete(self) -> None:
        os.close(self.fd)
        self.downstream.on_complete()


def handed_out(path: str | os.PathLike[str]) -> list[int]:
    """Every element a ``queue`` publisher signalled, in order, across query runs."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [int(line) for line in handle]


class QueuePublisher(Publisher[int]):
    def __init__(self, path: str) -> None:
        self.path = path

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        start = max(handed_out(self.path), default=-1) + 1
        RangePublisher(start, UNBOUNDED - start).subscribe(_Handing(subscriber, self.path))


def queue(options: Mapping[str, str]) -> Publisher[int]:
    """An endless queue of ints, not replayable: each is handed out once, across query runs.

    Every element signalled is appended to the file ``emittedTo``; a new subscription
    continues after the highest element recorded there, so what an earlier run was given
    never comes again, whether or not that run delivered it.
    """
    return QueuePublisher(options["emittedTo"])


def slow_start(options: Mapping[str, str]) -> Publisher[int]:
    """``count`` ints from 0, the first only ``delayMs`` after it is first asked for: a
    publisher that takes a while to connect (a broker, a socket)."""
    delay, count = int(options["delayMs"]) / 1000, int(options["count"])

    def late() -> Any:
        time.sleep(delay)
        yield from range(count)

    return IterablePublisher(late)


# -- publishers and factories that break the rules (test_bad_publishers.py) ---------------


def raising_factory(options: Mapping[str, str]) -> Publisher[int]:
    raise ConnectionError("no broker answers at 127.0.0.1:1")


def none_factory(options: Mapping[str, str]) -> None:
    return None


class _Silent(Publisher[int]):
    """Never calls on_subscribe (§1.9 says it must)."""

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        pass


def never_subscribes(options: Mapping[str, str]) -> Publisher[int]:
    return _Silent()


class _Unruly(Subscription):
    """Signals what ``request(n)`` asks for, ``extra`` more elements (§1.1), or, after
    ``count`` elements, ``on_complete`` followed by ``extra`` elements and a second
    ``on_complete`` (§1.7)."""

    def __init__(self, subscriber: Subscriber[int], extra: int, count: int | None) -> None:
        self.subscriber = subscriber
        self.extra = extra
        self.count = count
        self.sent = 0
        self.done = False

    def request(self, n: int) -> None:
        if self.done:
            return
        if self.count is None:
            for _ in range(n + self.extra):
                self.subscriber.on_next(self.sent)
                self.sent += 1
            return
        while self.sent < min(self.count, n):
            self.subscriber.on_next(self.sent)
            self.sent += 1
        if self.sent >= self.count:
            self.done = True
            self.subscriber.on_complete()
            for value in range(self.extra):
                self.subscriber.on_next(self.count + value)
            self.subscriber.on_complete()

    def cancel(self) -> None:
        self.done = True


class _UnrulyPublisher(Publisher[int]):
    def __init__(self, extra: int, count: int | None) -> None:
        self.extra, self.count = extra, count

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(_Unruly(subscriber, self.extra, self.count))


def beyond_demand(options: Mapping[str, str]) -> Publisher[int]:
    """Signals ``extra`` elements more than each request asks for."""
    return _UnrulyPublisher(int(options["extra"]), None)


def after_complete(options: Mapping[str, str]) -> Publisher[int]:
    """``count`` elements, on_complete, then ``extra`` elements and on_complete again."""
    return _UnrulyPublisher(int(options["extra"]), int(options["count"]))
