"""Whitebox verification of a Subscriber: the subscriber under test reports what it
receives to a probe and lets the TCK drive its demand through a puppet, so the TCK can
check rules a blackbox test cannot see (§2.1, §2.5, §2.8-§2.10, §2.13, §3.8).

Also home of what both subscriber verifications share: the stage (the TCK's manual
publisher that the subscriber under test is subscribed to) and the probe.
"""

from __future__ import annotations

import collections
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar

from ..api import Publisher, Subscriber, Subscription
from ._base import Verification, WithOwnHelperExecutor
from .environment import (
    END_OF_STREAM,
    LONG_MAX,
    Latch,
    ManualPublisher,
    ManualSubscriber,
    Promise,
    TCKTestError,
    TestEnvironment,
)

__all__ = [
    "BlackboxProbe",
    "BlackboxSubscriberProxy",
    "Spec203Subscription",
    "SubscriberPuppet",
    "SubscriberTestStage",
    "SubscriberWhiteboxVerification",
    "WhiteboxSubscriberProbe",
    "WhiteboxTestStage",
    "deliver_signal",
]

T = TypeVar("T")


def describe(subscriber: Promise[Subscriber[T]]) -> str:
    """The subscriber under test for a message, also before it is known."""
    if subscriber.is_completed():
        return repr(subscriber.value())
    return "the subscriber under test"


def deliver_signal(subscriber: object, signal: str, call: Callable[[], None]) -> None:
    """Send one signal to the subscriber under test; turn anything it raises into a
    failure that names §2.13 (the raised error stays in the cause chain)."""
    try:
        call()
    except Exception as exc:
        raise AssertionError(
            f"§2.13: {subscriber!r} raised {type(exc).__name__}({exc}) from {signal}; a "
            "subscriber must not raise from its signal methods") from exc


class SubscriberPuppet(ABC):
    """How the TCK makes a subscriber under test act; written by the implementer and
    handed to :meth:`WhiteboxSubscriberProbe.register_on_subscribe`.

    Examples
    --------
    A subscriber that requests only when told to can forward to its subscription:

    >>> from reactive_streams.tck.subscriber_whitebox import SubscriberPuppet
    >>> class Forwarding(SubscriberPuppet):
    ...     def __init__(self, subscription):
    ...         self.subscription = subscription
    ...     def trigger_request(self, elements):
    ...         self.subscription.request(elements)
    ...     def signal_cancel(self):
    ...         self.subscription.cancel()
    """

    @abstractmethod
    def trigger_request(self, elements: int) -> None:
        """Make the subscriber eventually request at least ``elements`` more in total.

        Any split is fine: one ``request(elements)``, or ``request(1)`` again after each
        arrival. A subscriber that keeps demand outstanding by itself may do nothing, as
        long as its requests add up. The TCK never sends an element before it has seen a
        ``request`` call that covers it.
        """

    @abstractmethod
    def signal_cancel(self) -> None:
        """Make the subscriber cancel its subscription (outstanding triggered requests
        may be dropped)."""


class BlackboxProbe(Generic[T]):
    """Records the signals a subscriber under test received, in order, and checks them.

    The ``register_*`` methods are called from the subscriber's signal methods (on any
    thread) and never raise: what they find wrong goes to the environment's error log.
    The ``expect_*`` methods are called by the checks and fail at once.

    Parameters
    ----------
    env : TestEnvironment
        Timeouts and the error log.
    subscriber : Promise
        The subscriber under test, once known; used in messages.
    """

    def __init__(self, env: TestEnvironment, subscriber: Promise[Subscriber[T]]) -> None:
        self.env = env
        self.subscriber = subscriber
        # Unbounded: a blackbox check may deliver hundreds of elements nobody expects.
        self._signals: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._terminal: str | None = None
        self._error: Promise[BaseException] = Promise(env)

    def _sub(self) -> str:
        return describe(self.subscriber)

    # -- called by the subscriber under test ---------------------------------------------

    def register_on_next(self, element: T) -> None:
        """Report an ``on_next(element)`` received."""
        with self._lock:
            terminal = self._terminal
        if terminal is not None:
            self.env.flop(f"§1.7: {self._sub()} reported on_next({element!r}) after "
                          f"{terminal}")
        if element is None:
            self.env.flop(f"§2.13: {self._sub()} reported on_next(None)")
            return
        self._signals.put(element)

    def register_on_complete(self) -> None:
        """Report an ``on_complete()`` received."""
        with self._lock:
            terminal, self._terminal = self._terminal, self._terminal or "on_complete"
        if terminal is not None:
            self.env.flop(f"§1.7: {self._sub()} reported on_complete after {terminal}")
            return
        self._signals.put(END_OF_STREAM)

    def register_on_error(self, error: BaseException) -> None:
        """Report an ``on_error(error)`` received."""
        with self._lock:
            terminal, self._terminal = self._terminal, self._terminal or "on_error"
        if terminal is not None:
            self.env.flop(f"§1.7: {self._sub()} reported on_error({error!r}) after "
                          f"{terminal}")
            return
        self._error.complete(error)

    # -- called by the checks --------------------------------------------------------------

    def _timeout(self, timeout_millis: float | None) -> float:
        return self.env.default_timeout_millis if timeout_millis is None else timeout_millis

    def _take(self, timeout_millis: float) -> Any:
        try:
            return self._signals.get(timeout=max(0.0, timeout_millis) / 1000)
        except queue.Empty:
            return None

    def expect_next(self, expected: T, timeout_millis: float | None = None,
                    rule: str = "Whitebox probe") -> None:
        """The next reported signal must be ``on_next(expected)``."""
        timeout = self._timeout(timeout_millis)
        received = self._take(timeout)
        if received is None:
            self.env.flop_and_fail(f"{rule}: {self._sub()} did not call "
                                   f"register_on_next({expected!r}) within {int(timeout)} ms")
        if received is END_OF_STREAM:
            self.env.flop_and_fail(f"{rule}: {self._sub()} reported on_complete where "
                                   f"on_next({expected!r}) was expected")
        if received != expected:
            self.env.flop_and_fail(f"{rule}: {self._sub()} called register_on_next("
                                   f"{received!r}) but the TCK sent {expected!r}")

    def expect_completion(self, timeout_millis: float | None = None,
                          rule: str = "Whitebox probe") -> None:
        """The next reported signal must be ``on_complete``."""
        timeout = self._timeout(timeout_millis)
        received = self._take(timeout)
        if received is None:
            self.env.flop_and_fail(f"{rule}: {self._sub()} did not call "
                                   f"register_on_complete() within {int(timeout)} ms")
        if received is not END_OF_STREAM:
            self.env.flop_and_fail(f"{rule}: {self._sub()} reported on_next({received!r}) "
                                   "where on_complete was expected")

    def expect_error(self, expected: BaseException, timeout_millis: float | None = None,
                     rule: str = "Whitebox probe") -> None:
        """``on_error`` must have been reported with the very object the TCK sent."""
        timeout = self._timeout(timeout_millis)
        self._error.expect_completion(
            timeout, f"{rule}: {self._sub()} did not call register_on_error({expected!r})")
        received = self._error.value()
        if received is not expected:
            self.env.flop_and_fail(f"{rule}: {self._sub()} called register_on_error("
                                   f"{received!r}) but the TCK signalled {expected!r}")

    def expect_none(self, within_millis: float | None = None,
                    rule: str = "Whitebox probe") -> None:
        """Wait the no-signals timeout; nothing more may have been reported."""
        within = (self.env.default_no_signals_timeout_millis if within_millis is None
                  else within_millis)
        received = self._take(within)
        if received is END_OF_STREAM:
            self.env.flop_and_fail(f"{rule}: {self._sub()} reported on_complete, but the "
                                   "TCK sent none")
        if received is not None:
            self.env.flop_and_fail(f"{rule}: {self._sub()} reported on_next({received!r}) "
                                   "beyond the elements the TCK sent")


class WhiteboxSubscriberProbe(BlackboxProbe[T], Generic[T]):
    """The probe a whitebox subscriber reports to; also receives its puppet.

    From ``on_subscribe`` the subscriber calls :meth:`register_on_subscribe` with a
    :class:`SubscriberPuppet`, and from ``on_next``, ``on_error`` and ``on_complete``
    it calls :meth:`register_on_next`, :meth:`register_on_error` and
    :meth:`register_on_complete`.
    """

    def __init__(self, env: TestEnvironment, subscriber: Promise[Subscriber[T]]) -> None:
        super().__init__(env, subscriber)
        self._puppet: Promise[SubscriberPuppet] = Promise(env)

    def register_on_subscribe(self, puppet: SubscriberPuppet) -> None:
        """Hand over the puppet; only the first one counts (a second ``on_subscribe``
        must be cancelled, §2.5, not reported)."""
        if puppet is None:
            self.env.flop(f"{self._sub()} called register_on_subscribe(None)")
            return
        if not self._puppet.is_completed():
            self._puppet.complete(puppet)

    def expect_puppet(self, timeout_millis: float | None = None) -> SubscriberPuppet:
        self._puppet.expect_completion(
            self._timeout(timeout_millis),
            f"Whitebox set-up: {self._sub()} did not call register_on_subscribe")
        return self._puppet.value()

    def puppet(self) -> SubscriberPuppet:
        return self._puppet.value()


class BlackboxSubscriberProxy(BlackboxProbe[T], Subscriber[T], Generic[T]):
    """Wraps a subscriber under test and reports every signal it is sent, before
    passing the signal on."""

    def __init__(self, env: TestEnvironment, subscriber: Subscriber[T]) -> None:
        super().__init__(env, Promise.completed(env, subscriber))
        self.target = subscriber

    def on_subscribe(self, subscription: Subscription) -> None:
        self.target.on_subscribe(subscription)

    def on_next(self, element: T) -> None:
        self.register_on_next(element)
        self.target.on_next(element)

    def on_error(self, error: BaseException) -> None:
        self.register_on_error(error)
        self.target.on_error(error)

    def on_complete(self) -> None:
        self.register_on_complete()
        self.target.on_complete()

    def __repr__(self) -> str:
        return repr(self.target)


class _StageSubscription(Subscription):
    def __init__(self, stage: SubscriberTestStage[Any]) -> None:
        self._stage = stage

    def request(self, n: int) -> None:
        self._stage._record_request(n)

    def cancel(self) -> None:
        self._stage.cancelled.close()

    def __repr__(self) -> str:
        return "TCKStageSubscription"


class SubscriberTestStage(ManualPublisher[T], Generic[T]):
    """The TCK's side of a subscriber check: the manual publisher the subscriber under
    test is subscribed to, plus a source of element values.

    Every ``request`` call is kept in an unbounded log (``ManualPublisher.requests``
    holds only 32, and a legal subscriber may well make more calls than a check looks
    at). :meth:`signal_next` waits for a recorded request that covers the element
    before it sends it: the TCK never signals without real demand (§1.1).

    Parameters
    ----------
    env : TestEnvironment
        Timeouts and the error log.
    values : Publisher, optional
        Where element values come from (the verification's helper publisher); consumed
        one element at a time by a TCK subscriber.
    """

    def __init__(self, env: TestEnvironment, values: Publisher[T] | None = None) -> None:
        super().__init__(env)
        self._request_log: collections.deque[int] = collections.deque()
        self._request_arrived = threading.Condition()
        self.terminated = False
        self.last_element: T | None = None
        self.values: ManualSubscriber[T] | None = None
        if values is not None:
            self.values = env.new_manual_subscriber(values)

    def sub(self) -> Subscriber[T]:
        """The subscriber under test (or the proxy around it)."""
        return self.subscriber.value()

    def _sub(self) -> str:
        return describe(self.subscriber)

    # -- Publisher ---------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        if self.subscriber.is_completed():
            self.env.flop("The TCK stage supports one subscriber only")
            return
        self.subscriber.complete(subscriber)
        subscription = _StageSubscription(self)
        deliver_signal(subscriber, "on_subscribe",
                       lambda: subscriber.on_subscribe(subscription))

    def _record_request(self, n: int) -> None:
        with self._request_arrived:
            self._request_log.append(n)
            self._request_arrived.notify_all()

    # -- demand ----------------------------------------------------------------------------

    def expect_request(self, timeout_millis: float | None = None,
                       error_message_addendum: str = "") -> int:
        """Wait for the next recorded ``request(n)``; add ``n`` to the pending demand."""
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        with self._request_arrived:
            arrived = self._request_arrived.wait_for(lambda: bool(self._request_log),
                                                     timeout / 1000)
            n = self._request_log.popleft() if arrived else None
        if n is None:
            addendum = f" ({error_message_addendum})" if error_message_addendum else ""
            self.env.flop_and_fail(f"§2.1: {self._sub()} did not call request(n) within "
                                   f"{int(timeout)} ms{addendum}")
        if type(n) is not int or n <= 0:
            self.env.flop_and_fail(f"§3.9: {self._sub()} called request({n!r}); a "
                                   "subscriber must request a positive number of elements")
        self.pending_demand = min(self.pending_demand + n, LONG_MAX)
        return n

    def expect_exact_request(self, expected: int, timeout_millis: float | None = None) -> None:
        requested = self.expect_request(timeout_millis)
        if requested != expected:
            self.env.flop(f"{self._sub()} called request({requested}) where request("
                          f"{expected}) was expected")

    def expect_no_request(self, timeout_millis: float | None = None) -> None:
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        with self._request_arrived:
            if self._request_arrived.wait_for(lambda: bool(self._request_log),
                                              timeout / 1000):
                self.env.flop(f"{self._sub()} made an unexpected call to request("
                              f"{self._request_log[0]!r})")

    def expect_cancelling(self, timeout_millis: float | None = None,
                          rule: str = "Whitebox puppet") -> None:
        """Wait for the subscriber under test to cancel; fail at once if it does not."""
        timeout = self.env.default_timeout_millis if timeout_millis is None else timeout_millis
        message = f"{rule}: {self._sub()} did not cancel its subscription"
        self.cancelled.expect_close(timeout, message)
        if not self.is_cancelled():
            raise AssertionError(f"{message} within {int(timeout)} ms")

    # -- signalling --------------------------------------------------------------------------

    def next_value(self) -> T:
        """Take the next element value from the value source."""
        if self.values is None:
            raise RuntimeError("this stage was made without a source of element values")
        element = self.values.request_next_element(
            error_message="The helper publisher did not deliver the next element value")
        self.last_element = element
        return element

    def signal_next(self) -> T:
        """Send the next element once a recorded ``request`` covers it; return it."""
        while self.pending_demand == 0:
            self.expect_request(error_message_addendum="the TCK waits for demand before "
                                                      "it signals on_next")
        element = self.next_value()
        self.send_next(element)
        if self.pending_demand != LONG_MAX:
            self.pending_demand -= 1
        return element

    def send_next(self, element: T) -> None:
        subscriber = self._subscriber_or_flop("send_next")
        if subscriber is not None:
            deliver_signal(subscriber, f"on_next({element!r})",
                           lambda: subscriber.on_next(element))

    def send_completion(self) -> None:
        subscriber = self._subscriber_or_flop("send_completion")
        if subscriber is not None:
            self.terminated = True
            deliver_signal(subscriber, "on_complete", subscriber.on_complete)

    def send_error(self, error: BaseException) -> None:
        subscriber = self._subscriber_or_flop("send_error")
        if subscriber is not None:
            self.terminated = True
            deliver_signal(subscriber, f"on_error({error!r})",
                           lambda: subscriber.on_error(error))

    def close(self) -> None:
        """End what the stage started: cancel the value source, and complete the
        subscriber under test unless its subscription already ended."""
        if self.values is not None and self.values.subscription.is_completed():
            self.values.subscription.value().cancel()
        if self.subscriber.is_completed() and not self.terminated and not self.is_cancelled():
            self.terminated = True
            subscriber = self.subscriber.value()
            try:
                subscriber.on_complete()
            except Exception:
                pass  # the check has its verdict already


class WhiteboxTestStage(SubscriberTestStage[T], Generic[T]):
    """A stage whose subscriber reports to :attr:`probe` and is driven by its puppet."""

    probe: WhiteboxSubscriberProbe[T]

    def puppet(self) -> SubscriberPuppet:
        return self.probe.puppet()


# The TCK sends the terminal signals of the §2.3 checks through these uniquely named
# functions; a subscription call is flagged only with one of their frames on the stack.
def _tck_whitebox_spec203_send_on_complete(subscriber: Subscriber[Any]) -> None:
    subscriber.on_complete()


def _tck_whitebox_spec203_send_on_error(subscriber: Subscriber[Any]) -> None:
    subscriber.on_error(TCKTestError())


_SPEC203_ON_COMPLETE_FRAME: Final = _tck_whitebox_spec203_send_on_complete.__name__
_SPEC203_ON_ERROR_FRAME: Final = _tck_whitebox_spec203_send_on_error.__name__


class Spec203Subscription(Subscription):
    """A subscription that flags calls made from inside a TCK-sent terminal signal."""

    def __init__(self, env: TestEnvironment, subscriber: Promise[Subscriber[Any]],
                 signal: str, frame: str) -> None:
        self.env = env
        self.subscriber = subscriber
        self.signal = signal
        self.frame = frame

    def _check(self, call: str) -> None:
        if self.env.called_from(self.frame):
            self.env.flop(f"§2.3: {describe(self.subscriber)} called Subscription.{call} "
                          f"from within {self.signal}; a subscriber must not call its "
                          f"subscription or publisher from on_complete or on_error")

    def request(self, n: int) -> None:
        self._check(f"request({n!r})")

    def cancel(self) -> None:
        self._check("cancel()")

    def __repr__(self) -> str:
        return f"Spec203Subscription({self.signal})"


class _IgnoredSubscription(Subscription):
    def __init__(self, cancelled: Latch) -> None:
        self._cancelled = cancelled

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        self._cancelled.close()

    def __repr__(self) -> str:
        return "SecondSubscription(should be cancelled)"


class SubscriberWhiteboxVerification(Verification, WithOwnHelperExecutor[T], ABC, Generic[T]):
    """Verification of a Subscriber that reports to the TCK's probe (§2, §3.8).

    Subclass it as a pytest test class (``class TestMySubscriber(...)``) and implement
    :meth:`create_subscriber` and ``create_element``. Element values come from
    ``create_helper_publisher`` (by default ``create_element(0)``, ``create_element(1)``,
    ... published on :meth:`publisher_executor_service`); the subscriber under test is
    subscribed to a TCK-controlled publisher that records ``request`` and ``cancel``.

    Before each check that needs it, the set-up waits the default timeout for
    ``probe.register_on_subscribe(puppet)`` and fails with "did not call
    register_on_subscribe within" otherwise. The TCK then drives the subscriber only
    through ``puppet.trigger_request(n)`` and ``puppet.signal_cancel()``, and it never
    sends an element before it has seen a real ``request`` call covering it.

    Differences from the reference TCK 1.0.4, deliberately:

    - the ``with_preceding_request_call`` checks of §2.9 and §2.10 wait for the
      requested demand to arrive before the terminal signal is sent (the reference
      sends it right after ``trigger_request``), so "preceding" really holds;
    - an exception raised by a signal method of the subscriber under test fails the
      check with a §2.13 message (the raised error is its cause);
    - every check ends by raising the first error recorded during it, and by ending
      what it started: the value source is cancelled, and the subscriber under test is
      completed if its subscription is still open.

    Examples
    --------
    >>> from reactive_streams import Subscriber
    >>> from reactive_streams.tck.subscriber_whitebox import (
    ...     SubscriberPuppet, SubscriberWhiteboxVerification)
    >>> class Reporting(Subscriber[int]):
    ...     def __init__(self, probe):
    ...         self.probe = probe
    ...     def on_subscribe(self, subscription):
    ...         if subscription is None:
    ...             raise TypeError("§2.13: subscription must not be None")
    ...         class Puppet(SubscriberPuppet):
    ...             def trigger_request(self, elements):
    ...                 subscription.request(elements)
    ...             def signal_cancel(self):
    ...                 subscription.cancel()
    ...         self.probe.register_on_subscribe(Puppet())
    ...     def on_next(self, element):
    ...         self.probe.register_on_next(element)
    ...     def on_error(self, error):
    ...         self.probe.register_on_error(error)
    ...     def on_complete(self):
    ...         self.probe.register_on_complete()
    >>> class TestReporting(SubscriberWhiteboxVerification[int]):
    ...     def create_subscriber(self, probe):
    ...         return Reporting(probe)
    ...     def create_element(self, element):
    ...         return element
    >>> check = TestReporting()
    >>> check.setup_method()
    >>> check_name = ("test_required_spec203_must_not_call_methods_on_subscription_or_"
    ...               "publisher_in_on_complete")
    >>> getattr(check, check_name)()  # passes: nothing is called from on_complete (§2.3)
    """

    @abstractmethod
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[T]) -> Subscriber[T]:
        """A new subscriber under test that reports to ``probe`` (see
        :class:`WhiteboxSubscriberProbe`)."""

    # -- set-up ------------------------------------------------------------------------------

    @contextmanager
    def _wb_stage(self) -> Iterator[WhiteboxTestStage[T]]:
        """A subscriber under test, subscribed and with its puppet registered."""
        stage: WhiteboxTestStage[T] = WhiteboxTestStage(
            self.env, self.create_helper_publisher(LONG_MAX))
        try:
            stage.probe = WhiteboxSubscriberProbe(self.env, stage.subscriber)
            stage.subscribe(self.create_subscriber(stage.probe))
            stage.probe.expect_puppet()
            self.env.verify_no_async_errors_no_delay()
            yield stage
            self.env.verify_no_async_errors_no_delay()
        finally:
            stage.close()

    def _wb_spec203(self, signal: str, frame: str,
                    send: Callable[[Subscriber[Any]], None]) -> None:
        subscriber: Promise[Subscriber[Any]] = Promise(self.env)
        probe: WhiteboxSubscriberProbe[T] = WhiteboxSubscriberProbe(self.env, subscriber)
        sub = self.create_subscriber(probe)
        subscriber.complete(sub)
        subscription = Spec203Subscription(self.env, subscriber, signal, frame)
        deliver_signal(sub, "on_subscribe", lambda: sub.on_subscribe(subscription))
        deliver_signal(sub, signal, lambda: send(sub))
        self.env.verify_no_async_errors_no_delay()

    def _wb_spec213(self, signal: str, send_none: Callable[[Subscriber[T]], None]) -> None:
        with self._wb_stage() as stage:
            sub = stage.sub()
            try:
                send_none(sub)
            except TypeError:
                pass
            except Exception as exc:
                raise AssertionError(
                    f"§2.13: {sub!r}: {signal}(None) raised {type(exc).__name__}({exc}) "
                    "instead of TypeError") from exc
            else:
                raise AssertionError(f"§2.13: {sub!r}: {signal}(None) did not raise "
                                     "TypeError; a None argument must be rejected")
            self.env.verify_no_async_errors_no_delay()

    # -- checks ------------------------------------------------------------------------------

    def test_required_exercise_whitebox_happy_path(self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            stage.expect_request()
            stage.probe.expect_next(stage.signal_next())
            stage.puppet().trigger_request(1)
            stage.probe.expect_next(stage.signal_next())
            stage.puppet().signal_cancel()
            stage.expect_cancelling(rule="Whitebox puppet: after signal_cancel()")
            self.env.verify_no_async_errors()

    def test_required_spec201_must_signal_demand_via_subscription_request(self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(1)
            stage.expect_request(error_message_addendum="after trigger_request(1)")
            stage.signal_next()

    def test_untested_spec202_should_asynchronously_dispatch(self) -> None:
        self.not_verified()

    def test_required_spec203_must_not_call_methods_on_subscription_or_publisher_in_on_complete(
            self) -> None:
        self._wb_spec203("on_complete", _SPEC203_ON_COMPLETE_FRAME,
                         _tck_whitebox_spec203_send_on_complete)

    def test_required_spec203_must_not_call_methods_on_subscription_or_publisher_in_on_error(
            self) -> None:
        self._wb_spec203("on_error", _SPEC203_ON_ERROR_FRAME,
                         _tck_whitebox_spec203_send_on_error)

    def test_untested_spec204_must_consider_the_subscription_as_cancelled_in_after_recieving_on_complete_or_on_error(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_required_spec205_must_call_subscription_cancel_if_it_already_has_an_subscription_and_receives_another_on_subscribe_signal(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            cancelled = Latch(self.env)
            sub = stage.sub()
            second = _IgnoredSubscription(cancelled)
            deliver_signal(sub, "a second on_subscribe", lambda: sub.on_subscribe(second))
            cancelled.expect_close(self.env.default_timeout_millis,
                                   f"§2.5: {sub!r} did not cancel a second subscription "
                                   "received while already subscribed")
            self.env.verify_no_async_errors()

    def test_untested_spec206_must_call_subscription_cancel_if_it_is_no_longer_valid(
            self) -> None:
        self.not_verified()

    def test_untested_spec207_must_ensure_all_calls_on_its_subscription_take_place_from_the_same_thread_or_take_care_of_synchronization(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_required_spec208_must_be_prepared_to_receive_on_next_signals_after_having_called_subscription_cancel(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(1)
            stage.expect_request(error_message_addendum="after trigger_request(1)")
            stage.puppet().signal_cancel()
            stage.expect_cancelling(rule="§2.8: after signal_cancel()")
            # Within the demand requested before the cancel: a late element (§2.8).
            stage.signal_next()
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            self.env.verify_no_async_errors()

    def test_required_spec209_must_be_prepared_to_receive_an_on_complete_signal_with_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(1)
            stage.expect_request(error_message_addendum="after trigger_request(1)")
            stage.send_completion()
            stage.probe.expect_completion(rule="§2.9")
            self.env.verify_no_async_errors()

    def test_required_spec209_must_be_prepared_to_receive_an_on_complete_signal_without_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            stage.send_completion()
            stage.probe.expect_completion(rule="§2.9")
            self.env.verify_no_async_errors()

    def test_required_spec210_must_be_prepared_to_receive_an_on_error_signal_with_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            stage.expect_request(error_message_addendum="after trigger_request(1)")
            error = TCKTestError()
            stage.send_error(error)
            stage.probe.expect_error(error, rule="§2.10")
            self.env.verify_no_async_errors_no_delay()

    def test_required_spec210_must_be_prepared_to_receive_an_on_error_signal_without_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._wb_stage() as stage:
            error = TCKTestError()
            stage.send_error(error)
            stage.probe.expect_error(error, rule="§2.10")
            self.env.verify_no_async_errors_no_delay()

    def test_untested_spec211_must_make_sure_that_all_calls_on_its_methods_happen_before_the_processing_of_the_respective_events(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec212_must_not_call_on_subscribe_more_than_once_based_on_object_equality_spec_violation(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec213_failing_on_signal_invocation(self) -> None:
        self.not_verified()

    def test_required_spec213_on_subscribe_must_throw_null_pointer_exception_when_parameters_are_null(  # noqa: E501
            self) -> None:
        self._wb_spec213("on_subscribe", lambda sub: sub.on_subscribe(None))  # type: ignore[arg-type]

    def test_required_spec213_on_next_must_throw_null_pointer_exception_when_parameters_are_null(
            self) -> None:
        self._wb_spec213("on_next", lambda sub: sub.on_next(None))  # type: ignore[arg-type]

    def test_required_spec213_on_error_must_throw_null_pointer_exception_when_parameters_are_null(
            self) -> None:
        self._wb_spec213("on_error", lambda sub: sub.on_error(None))  # type: ignore[arg-type]

    def test_untested_spec301_must_not_be_called_outside_subscriber_context(self) -> None:
        self.not_verified()

    def test_required_spec308_request_must_register_given_number_elements_to_be_produced(
            self) -> None:
        with self._wb_stage() as stage:
            stage.puppet().trigger_request(2)
            stage.expect_request(error_message_addendum="after trigger_request(2)")
            # A subscriber may request one at a time: signal_next waits for each request.
            stage.probe.expect_next(stage.signal_next(), rule="§3.8")
            stage.probe.expect_next(stage.signal_next(), rule="§3.8")
            stage.probe.expect_none(rule="§3.8")
            stage.puppet().trigger_request(3)
            self.env.verify_no_async_errors()

    def test_untested_spec310_request_may_synchronously_call_on_next_on_subscriber(
            self) -> None:
        self.not_verified()

    def test_untested_spec311_request_may_synchronously_call_on_complete_or_on_error(
            self) -> None:
        self.not_verified()

    def test_untested_spec314_cancel_may_cause_the_publisher_to_shutdown_if_no_other_subscription_exists(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec315_cancel_must_not_throw_exception_and_must_signal_on_error(
            self) -> None:
        self.not_verified()

    def test_untested_spec316_request_must_not_throw_exception_and_must_on_error_the_subscriber(
            self) -> None:
        self.not_verified()
