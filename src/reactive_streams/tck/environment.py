"""The test environment of the TCK: timeouts, the error log, and the TCK's own
subscribers and publisher that record what an implementation under test does.

Problems seen inside signal methods (often on other threads) are not raised where they
are seen: :meth:`TestEnvironment.flop` records them, and the running check raises the
first one later (:meth:`TestEnvironment.verify_no_async_errors`). A TCK subscriber that
receives ``on_error`` records the error in the same list, where
:meth:`ManualSubscriber.expect_error` looks for it.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Final, Generic, NoReturn, TypeVar

from ..api import Publisher, Subscriber, Subscription
from ..errors import ReactiveStreamsError

__all__ = [
    "DEFAULT_TIMEOUT_MILLIS",
    "END_OF_STREAM",
    "INT_MAX",
    "LONG_MAX",
    "TEST_BUFFER_SIZE",
    "BlackholeSubscriberWithSubscriptionSupport",
    "Latch",
    "ManualPublisher",
    "ManualSubscriber",
    "ManualSubscriberWithSubscriptionSupport",
    "Promise",
    "Receptacle",
    "SubscriberBufferOverflowError",
    "TCKTestError",
    "TestEnvironment",
    "TestSubscriber",
]

T = TypeVar("T")

#: Java's ``Long.MAX_VALUE``: unbounded demand, an infinite stream, "never completes".
LONG_MAX: Final = 2**63 - 1
#: Java's ``Integer.MAX_VALUE``: thresholds the reference TCK uses.
INT_MAX: Final = 2**31 - 1
#: Default buffer of processors under test; TCK subscribers hold twice this many signals.
TEST_BUFFER_SIZE: Final = 16
DEFAULT_TIMEOUT_MILLIS: Final = 100
#: How long a publisher gets to drop a cancelled subscriber (§3.13), unless configured.
DEFAULT_PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS: Final = 300


class _EndOfStream:
    def __repr__(self) -> str:
        return "END_OF_STREAM"


#: What ``*_or_end_of_stream`` methods return for ``on_complete``.
END_OF_STREAM: Final = _EndOfStream()


class TCKTestError(ReactiveStreamsError):
    """The error the TCK's planted failures signal: ``Test Exception: Boom!``."""

    def __init__(self, message: str = "Test Exception: Boom!") -> None:
        super().__init__(message)


class SubscriberBufferOverflowError(ReactiveStreamsError, AssertionError):
    """A TCK subscriber received more unconsumed elements than it can hold."""


def _env_millis(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"Unable to parse the {name} environment variable [{value}] as an "
                         "integer number of milliseconds") from None


class TestEnvironment:
    """Timeouts and the error log shared by the checks of one verification class.

    Parameters
    ----------
    default_timeout_millis : int, optional
        How long to wait for something that should happen (an element, a request, a
        terminal signal). Default: the ``DEFAULT_TIMEOUT_MILLIS`` environment variable,
        else 100.
    default_no_signals_timeout_millis : int, optional
        How long to watch for something that should not happen. Default: the
        ``DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS`` environment variable, else the default
        timeout.
    default_poll_timeout_millis : int, optional
        Interval between looks at the error log while an error is expected. Default: the
        ``DEFAULT_POLL_TIMEOUT_MILLIS`` environment variable, else the default timeout.
    debug : bool
        Print ``[TCK-DEBUG]`` lines.

    Explicit arguments always win over environment variables.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, default_timeout_millis: int | None = None,
                 default_no_signals_timeout_millis: int | None = None,
                 default_poll_timeout_millis: int | None = None,
                 debug: bool = False) -> None:
        timeout = (default_timeout_millis if default_timeout_millis is not None
                   else self.env_default_timeout_millis())
        self.default_timeout_millis = timeout
        self.default_no_signals_timeout_millis = (
            default_no_signals_timeout_millis if default_no_signals_timeout_millis is not None
            else _env_millis("DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS", timeout))
        self.default_poll_timeout_millis = (
            default_poll_timeout_millis if default_poll_timeout_millis is not None
            else _env_millis("DEFAULT_POLL_TIMEOUT_MILLIS", timeout))
        self.debug_enabled = debug
        self._errors: list[BaseException] = []
        self._errors_lock = threading.Lock()

    # -- configuration from the environment -----------------------------------------------

    @staticmethod
    def env_default_timeout_millis() -> int:
        return _env_millis("DEFAULT_TIMEOUT_MILLIS", DEFAULT_TIMEOUT_MILLIS)

    @staticmethod
    def env_default_no_signals_timeout_millis() -> int:
        return _env_millis("DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS",
                           TestEnvironment.env_default_timeout_millis())

    @staticmethod
    def env_default_poll_timeout_millis() -> int:
        return _env_millis("DEFAULT_POLL_TIMEOUT_MILLIS",
                           TestEnvironment.env_default_timeout_millis())

    @staticmethod
    def env_publisher_reference_gc_timeout_millis() -> int:
        return _env_millis("PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS",
                           DEFAULT_PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS)

    # -- the error log ------------------------------------------------------------------------

    @property
    def async_errors(self) -> list[BaseException]:
        """A copy of the errors recorded so far, oldest first."""
        with self._errors_lock:
            return list(self._errors)

    def flop(self, message: str, error: BaseException | None = None) -> None:
        """Record a failure without raising it here: ``error`` itself if given (an
        ``on_error`` a TCK subscriber received), else an ``AssertionError(message)``."""
        recorded = error if error is not None else AssertionError(message)
        self.debug(f"flop: {message}")
        with self._errors_lock:
            self._errors.append(recorded)

    def flop_and_fail(self, message: str) -> NoReturn:
        """Record a failure and raise it now."""
        self.flop(message)
        raise AssertionError(message)

    def clear_async_errors(self) -> None:
        with self._errors_lock:
            self._errors.clear()

    def drop_async_error(self) -> BaseException | None:
        """Remove and return the oldest recorded error, if any."""
        with self._errors_lock:
            return self._errors.pop(0) if self._errors else None

    def verify_no_async_errors_no_delay(self) -> None:
        """Raise the oldest recorded error, if any."""
        with self._errors_lock:
            first = self._errors[0] if self._errors else None
        if first is None:
            return
        if isinstance(first, AssertionError):
            raise first
        raise AssertionError(f"Async error during test execution: {first}") from first

    def verify_no_async_errors(self, delay_millis: int | None = None) -> None:
        """Check the log, wait ``delay_millis`` (default: the no-signals timeout) for late
        errors, and check again."""
        self.verify_no_async_errors_no_delay()
        _sleep_millis(self.default_no_signals_timeout_millis if delay_millis is None
                      else delay_millis)
        self.verify_no_async_errors_no_delay()

    def debug(self, message: str) -> None:
        if self.debug_enabled:
            print(f"[TCK-DEBUG] {message}", flush=True)

    # -- subscribing ------------------------------------------------------------------------------

    def subscribe(self, publisher: Publisher[T], subscriber: TestSubscriber[T],
                  timeout_millis: int | None = None) -> None:
        """Subscribe and wait for ``on_subscribe`` (§1.9)."""
        timeout = self.default_timeout_millis if timeout_millis is None else timeout_millis
        publisher.subscribe(subscriber)
        subscriber.subscription.expect_completion(
            timeout, f"§1.9: could not subscribe {subscriber!r} to {publisher!r}: no "
                     "on_subscribe")
        self.verify_no_async_errors_no_delay()

    def new_manual_subscriber(self, publisher: Publisher[T],
                              timeout_millis: int | None = None
                              ) -> ManualSubscriberWithSubscriptionSupport[T]:
        subscriber: ManualSubscriberWithSubscriptionSupport[T] = \
            ManualSubscriberWithSubscriptionSupport(self)
        self.subscribe(publisher, subscriber, timeout_millis)
        return subscriber

    def new_blackhole_subscriber(self, publisher: Publisher[T]
                                 ) -> BlackholeSubscriberWithSubscriptionSupport[T]:
        subscriber: BlackholeSubscriberWithSubscriptionSupport[T] = \
            BlackholeSubscriberWithSubscriptionSupport(self)
        self.subscribe(publisher, subscriber)
        return subscriber

    # -- §2.3: who is calling? ------------------------------------------------------------------

    @staticmethod
    def called_from(function_name: str) -> bool:
        """True when a frame of the current thread's stack runs a function of that name.

        The TCK calls terminal signals through uniquely named helpers, so that a
        ``request`` made from inside them is told apart from one made by an unrelated
        method that happens to be called ``on_complete``.
        """
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == function_name:
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False


def _sleep_millis(millis: float) -> None:
    # The TCK's "nothing happens within N ms" checks are, by their nature, waits.
    threading.Event().wait(max(0.0, millis) / 1000)


class Latch:
    """A one-way gate: open until :meth:`close`; failures go to the environment."""

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self._closed = threading.Event()

    def reopen(self) -> None:
        self._closed = threading.Event()

    def is_closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        self._closed.set()

    def assert_closed(self, open_error_message: str) -> None:
        if not self.is_closed():
            self.env.flop(open_error_message)

    def assert_open(self, closed_error_message: str) -> None:
        if self.is_closed():
            self.env.flop(closed_error_message)

    def expect_close(self, timeout_millis: float, not_closed_error_message: str) -> None:
        if not self._closed.wait(timeout_millis / 1000):
            self.env.flop(f"{not_closed_error_message} within {int(timeout_millis)} ms")


class Promise(Generic[T]):
    """A value that arrives once."""

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self._value: T | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def completed(cls, env: TestEnvironment, value: T) -> Promise[T]:
        promise: Promise[T] = cls(env)
        promise.complete(value)
        return promise

    def value(self) -> T:
        if not self._done.is_set():
            self.env.flop_and_fail("Cannot access promise value before completion")
        return self._value  # type: ignore[return-value]

    def is_completed(self) -> bool:
        return self._done.is_set()

    def complete(self, value: T) -> None:
        """Complete once; a second completion is recorded as a failure."""
        with self._lock:
            if self._done.is_set():
                self.env.flop(f"Cannot complete a promise more than once! Present value: "
                              f"{self._value!r}, attempted new value: {value!r}")
                return
            self._value = value
            self._done.set()

    def complete_immediately(self, value: T) -> None:
        self.complete(value)

    def expect_completion(self, timeout_millis: float, error_message: str) -> None:
        if not self._done.wait(timeout_millis / 1000):
            self.env.flop_and_fail(f"{error_message} within {int(timeout_millis)} ms")


class Receptacle(Generic[T]):
    """What a TCK subscriber received and nobody has looked at yet, in order."""

    QUEUE_SIZE: Final = 2 * TEST_BUFFER_SIZE

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.QUEUE_SIZE)
        self.completed = Latch(env)

    def add(self, value: T) -> None:
        self.completed.assert_open(
            f"§1.7: unexpected element {value!r} received after stream completed")
        try:
            self._queue.put_nowait(value)
        except queue.Full:
            error = SubscriberBufferOverflowError(
                f"§1.1: received more than bufferSize ({self.QUEUE_SIZE}) on_next signals. "
                "The publisher probably emitted more elements than requested!")
            self.env.flop(str(error), error)
            raise error from None

    def complete(self) -> None:
        self.completed.assert_open("§1.7: unexpected additional on_complete signal received!")
        self.completed.close()
        try:
            self._queue.put_nowait(END_OF_STREAM)
        except queue.Full:
            self.env.flop("§1.1: on_complete arrived with the buffer full of unconsumed "
                          "elements")

    def _poll(self, timeout_millis: float) -> Any:
        try:
            return self._queue.get(timeout=max(0.0, timeout_millis) / 1000)
        except queue.Empty:
            return None  # elements are never None (§2.13)

    def next(self, timeout_millis: float, error_message: str) -> T:
        value = self._poll(timeout_millis)
        if value is None:
            self.env.flop_and_fail(f"{error_message} within {int(timeout_millis)} ms")
        if value is END_OF_STREAM:
            self.env.flop_and_fail("Expected element but got end-of-stream")
        return value  # type: ignore[no-any-return]

    def next_or_end_of_stream(self, timeout_millis: float, error_message: str) -> Any:
        """The next element, :data:`END_OF_STREAM`, or ``None`` (recorded) on timeout."""
        value = self._poll(timeout_millis)
        if value is None:
            self.env.flop(f"{error_message} within {int(timeout_millis)} ms")
        return value

    def next_n(self, elements: int, timeout_millis: float, error_message: str) -> list[T]:
        """``elements`` elements, all within one shared deadline."""
        deadline = time.monotonic() + timeout_millis / 1000
        return [self.next((deadline - time.monotonic()) * 1000, error_message)
                for _ in range(elements)]

    def expect_completion(self, timeout_millis: float, error_message: str) -> None:
        value = self._poll(timeout_millis)
        if value is None:
            self.env.flop(f"{error_message} within {int(timeout_millis)} ms")
        elif value is not END_OF_STREAM:
            self.env.flop(f"Expected end-of-stream but got element [{value!r}]")

    def expect_error(self, kind: type[BaseException], total_timeout_millis: float,
                     poll_timeout_millis: float, error_message: str) -> BaseException:
        """Wait for the first recorded error and check it is a ``kind``."""
        deadline = time.monotonic() + total_timeout_millis / 1000
        while True:
            remaining = (deadline - time.monotonic()) * 1000
            _sleep_millis(min(poll_timeout_millis, remaining))
            error = self.env.drop_async_error()
            if error is not None:
                if isinstance(error, kind):
                    return error
                self.env.flop_and_fail(
                    f"{error_message} within {int(total_timeout_millis)} ms; got "
                    f"{type(error).__name__}({error}) but expected {kind.__name__}")
            if time.monotonic() >= deadline:
                self.env.flop_and_fail(f"{error_message} within {int(total_timeout_millis)} ms")

    def expect_none(self, within_millis: float, error_message_prefix: str) -> None:
        """Wait ``within_millis``, then check nothing arrived."""
        _sleep_millis(within_millis)
        try:
            value = self._queue.get_nowait()
        except queue.Empty:
            return
        if value is END_OF_STREAM:
            self.env.flop("Expected no element but got end-of-stream")
        else:
            self.env.flop(f"{error_message_prefix} [{value!r}]")


class TestSubscriber(Subscriber[T], Generic[T]):
    """A subscriber for which every signal is unexpected unless a subclass says otherwise."""

    __test__ = False

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self.subscription: Promise[Subscription] = Promise(env)

    def on_subscribe(self, subscription: Subscription) -> None:
        self.env.flop(f"Unexpected on_subscribe({subscription!r})")

    def on_next(self, element: T) -> None:
        self.env.flop(f"Unexpected on_next({element!r})")

    def on_error(self, error: BaseException) -> None:
        self.env.flop(f"Unexpected on_error({error!r})", error)

    def on_complete(self) -> None:
        self.env.flop("Unexpected on_complete()")

    def cancel(self) -> None:
        if self.subscription.is_completed():
            self.subscription.value().cancel()
        else:
            self.env.flop("Cannot cancel a subscription before having received it")


class ManualSubscriber(TestSubscriber[T], Generic[T]):
    """A subscriber the check drives by hand: it requests, then looks at what arrived."""

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self.received: Receptacle[T] = Receptacle(env)

    def on_next(self, element: T) -> None:
        self.received.add(element)

    def on_complete(self) -> None:
        self.received.complete()

    def request(self, elements: int) -> None:
        self.subscription.value().request(elements)

    def _timeout(self, timeout_millis: float | None) -> float:
        return self.env.default_timeout_millis if timeout_millis is None else timeout_millis

    def request_next_element(self, timeout_millis: float | None = None,
                             error_message: str = "Did not receive expected element") -> T:
        self.request(1)
        return self.next_element(timeout_millis, error_message)

    def request_next_element_or_end_of_stream(
            self, timeout_millis: float | None = None,
            error_message: str = "Did not receive expected stream completion") -> Any:
        self.request(1)
        return self.next_element_or_end_of_stream(timeout_millis, error_message)

    def request_end_of_stream(self, timeout_millis: float | None = None,
                              error_message: str = "Did not receive expected stream completion"
                              ) -> None:
        self.request(1)
        self.expect_completion(timeout_millis, error_message)

    def request_next_elements(self, elements: int, timeout_millis: float | None = None,
                              error_message: str = "Did not receive expected element"
                              ) -> list[T]:
        self.request(elements)
        return self.next_elements(elements, timeout_millis, error_message)

    def next_element(self, timeout_millis: float | None = None,
                     error_message: str = "Did not receive expected element") -> T:
        return self.received.next(self._timeout(timeout_millis), error_message)

    def next_element_or_end_of_stream(
            self, timeout_millis: float | None = None,
            error_message: str = "Did not receive expected stream completion") -> Any:
        return self.received.next_or_end_of_stream(self._timeout(timeout_millis),
                                                   error_message)

    def next_elements(self, elements: int, timeout_millis: float | None = None,
                      error_message: str = "Did not receive expected element") -> list[T]:
        return self.received.next_n(elements, self._timeout(timeout_millis), error_message)

    def expect_next(self, expected: T, timeout_millis: float | None = None) -> None:
        received = self.next_element(timeout_millis,
                                     "Did not receive expected element on downstream")
        if received != expected:
            self.env.flop(f"Expected element {expected!r} on downstream but received "
                          f"{received!r}")

    def expect_completion(self, timeout_millis: float | None = None,
                          error_message: str = "Did not receive expected stream completion"
                          ) -> None:
        self.received.expect_completion(self._timeout(timeout_millis), error_message)

    def expect_error(self, kind: type[BaseException], timeout_millis: float | None = None,
                     poll_timeout_millis: float | None = None,
                     error_message: str | None = None) -> BaseException:
        return self.received.expect_error(
            kind, self._timeout(timeout_millis),
            self.env.default_poll_timeout_millis if poll_timeout_millis is None
            else poll_timeout_millis,
            error_message or f"Expected on_error({kind.__name__})")

    def expect_error_with_message(self, kind: type[BaseException],
                                  required_message_parts: str | Sequence[str],
                                  timeout_millis: float | None = None) -> None:
        parts = ([required_message_parts] if isinstance(required_message_parts, str)
                 else list(required_message_parts))
        error = self.expect_error(kind, timeout_millis)
        if not any(part in str(error) for part in parts):
            raise AssertionError(f"Got expected exception {type(error).__name__} but its "
                                 f"message misses any of {parts}; it was: {error}")

    def expect_none(self, within_millis: float | None = None,
                    error_message_prefix: str = "Did not expect an element but got element"
                    ) -> None:
        within = (self.env.default_no_signals_timeout_millis if within_millis is None
                  else within_millis)
        self.received.expect_none(within, error_message_prefix)


class ManualSubscriberWithSubscriptionSupport(ManualSubscriber[T], Generic[T]):
    """A manual subscriber that also checks ``on_subscribe`` came first (§1.9) and once."""

    def on_next(self, element: T) -> None:
        self.env.debug(f"{self!r}::on_next({element!r})")
        if self.subscription.is_completed():
            super().on_next(element)
        else:
            self.env.flop(f"§1.9: on_subscribe should be called prior to on_next always; "
                          f"got on_next({element!r}) first")

    def on_complete(self) -> None:
        self.env.debug(f"{self!r}::on_complete()")
        if self.subscription.is_completed():
            super().on_complete()
        else:
            self.env.flop("§1.9: on_subscribe should be called prior to on_complete always")

    def on_subscribe(self, subscription: Subscription) -> None:
        self.env.debug(f"{self!r}::on_subscribe({subscription!r})")
        if not self.subscription.is_completed():
            self.subscription.complete(subscription)
        else:
            self.env.flop("§1.9: on_subscribe called twice; expected it exactly once")

    def on_error(self, error: BaseException) -> None:
        self.env.debug(f"{self!r}::on_error({error!r})")
        if self.subscription.is_completed():
            super().on_error(error)
        else:
            self.env.flop(f"§1.9: on_subscribe should be called prior to on_error always; "
                          f"got on_error({error!r}) first", None)


class BlackholeSubscriberWithSubscriptionSupport(
        ManualSubscriberWithSubscriptionSupport[T], Generic[T]):
    """Accepts and drops every element; for checks that count signals but not values."""

    def on_next(self, element: T) -> None:
        self.env.debug(f"{self!r}::on_next({element!r})")
        if not self.subscription.is_completed():
            self.env.flop(f"§1.9: on_subscribe should be called prior to on_next always; "
                          f"got on_next({element!r}) first")

    def next_element(self, timeout_millis: float | None = None,
                     error_message: str = "") -> T:
        raise RuntimeError("Can not expect elements from a blackhole subscriber")

    def next_elements(self, elements: int, timeout_millis: float | None = None,
                      error_message: str = "") -> list[T]:
        raise RuntimeError("Can not expect elements from a blackhole subscriber")


class ManualPublisher(Publisher[T], Generic[T]):
    """A publisher the check drives by hand; it records ``request`` and ``cancel``."""

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self.pending_demand = 0
        self.subscriber: Promise[Subscriber[T]] = Promise(env)
        self.requests: Receptacle[int] = Receptacle(env)
        self.cancelled = Latch(env)

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        if self.subscriber.is_completed():
            self.env.flop("ManualPublisher doesn't support more than one subscriber")
            return
        self.subscriber.complete_immediately(subscriber)
        publisher = self

        class _Recording(Subscription):
            def request(self, n: int) -> None:
                publisher.requests.add(n)

            def cancel(self) -> None:
                publisher.cancelled.close()

        subscriber.on_subscribe(_Recording())

    def _subscriber_or_flop(self, what: str) -> Subscriber[T] | None:
        if self.subscriber.is_completed():
            return self.subscriber.value()
        self.env.flop(f"Cannot {what} before having a subscriber")
        return None

    def send_next(self, element: T) -> None:
        subscriber = self._subscriber_or_flop("send_next")
        if subscriber is not None:
            subscriber.on_next(element)

    def send_completion(self) -> None:
        subscriber = self._subscriber_or_flop("send_completion")
        if subscriber is not None:
            subscriber.on_complete()

    def send_error(self, error: BaseException) -> None:
        subscriber = self._subscriber_or_flop("send_error")
        if subscriber is not None:
            subscriber.on_error(error)

    def expect_request(self, timeout_millis: float | None = None,
                       error_message_addendum: str = "") -> int:
        """Wait for the next ``request(n)`` call; it must have ``n > 0`` (§3.9)."""
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        message = "Did not receive expected `request` call"
        if error_message_addendum:
            message = f"{message}. {error_message_addendum}"
        requested = self.requests.next(timeout, message)
        if requested <= 0:
            self.env.flop_and_fail(f"§3.9: requests cannot be zero or negative but received "
                                   f"request({requested})")
        self.pending_demand += requested
        return requested

    def expect_exact_request(self, expected: int, timeout_millis: float | None = None) -> None:
        requested = self.expect_request(timeout_millis)
        if requested != expected:
            self.env.flop(f"Received `request({requested})` on upstream but expected "
                          f"`request({expected})`")

    def expect_no_request(self, timeout_millis: float | None = None) -> None:
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        self.requests.expect_none(timeout, "Received an unexpected call to: request: ")

    def expect_cancelling(self, timeout_millis: float | None = None) -> None:
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        self.cancelled.expect_close(timeout,
                                    "Did not receive expected cancelling of upstream subscription")

    def is_cancelled(self) -> bool:
        return self.cancelled.is_closed()

