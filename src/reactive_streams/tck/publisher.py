"""Verification of a Publisher: the rules of §1, and the rules of §3 that a publisher's
subscriptions decide, checked by the TCK's own subscribers against publishers the
implementer builds on request.

Subclass :class:`PublisherVerification` in a module pytest collects; each check is a
``test_*`` method named after its rule, as in the reference TCK 1.0.4.
"""

from __future__ import annotations

import gc
import random
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from ..api import Publisher, Subscriber, Subscription
from ._base import Verification
from .environment import (
    END_OF_STREAM,
    INT_MAX,
    LONG_MAX,
    BlackholeSubscriberWithSubscriptionSupport,
    Latch,
    ManualSubscriberWithSubscriptionSupport,
    Promise,
    TestEnvironment,
    TestSubscriber,
)

__all__ = [
    "SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE",
    "SKIPPING_STOCHASTIC_TESTS",
    "PublisherTestRun",
    "PublisherVerification",
]

T = TypeVar("T")

#: A check's body: it receives the publisher under test.
PublisherTestRun = Callable[[Publisher[T]], None]

SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE: Final = (
    "Skipped because no failed publisher was provided, and this check needs one. "
    "Implement PublisherVerification.create_failed_publisher to run it.")
SKIPPING_STOCHASTIC_TESTS: Final = (
    "Skipped stochastic check because skip_stochastic_tests() returned True.")

#: How long the §3.13 check keeps collecting garbage after the publisher's grace time
#: (the reference TCK waits 100 ms on its reference queue).
_GC_SETTLE_MILLIS: Final = 100


def _thread_name() -> str:
    return threading.current_thread().name


# -- the TCK's subscribers ------------------------------------------------------------------


class _DemandCountingSubscriber(ManualSubscriberWithSubscriptionSupport[T], Generic[T]):
    """A manual subscriber that counts the demand it signalled and the ``on_next`` it
    received, and records the first ``on_next`` beyond that demand as it happens (§1.1).

    Requests made after :meth:`cancel` are not counted: they must be no-ops (§3.6).
    """

    def __init__(self, env: TestEnvironment, publisher: str) -> None:
        super().__init__(env)
        self.publisher = publisher
        self.demand = 0
        self.on_next_count = 0
        self.requests_after_cancel = 0
        self.cancel_called = False
        self._surplus_reported = False
        self._changed = threading.Condition()

    def request(self, elements: int) -> None:
        with self._changed:
            if self.cancel_called:
                self.requests_after_cancel += 1
            elif elements > 0:
                self.demand = min(self.demand + elements, LONG_MAX)
        super().request(elements)

    def cancel(self) -> None:
        with self._changed:
            self.cancel_called = True
        super().cancel()

    def on_next(self, element: T) -> None:
        if self.subscription.is_completed():
            with self._changed:
                self.on_next_count += 1
                count, demand = self.on_next_count, self.demand
                surplus = count > demand and not self._surplus_reported
                if surplus:
                    self._surplus_reported = True
                self._changed.notify_all()
            if surplus:
                self.env.flop(self._surplus_message(count, demand))
        super().on_next(element)

    def _surplus_message(self, count: int, demand: int) -> str:
        observed = f"received {count} on_next for a total demand of {demand} from {self.publisher}"
        after = self.requests_after_cancel
        if after:
            calls = "call" if after == 1 else "calls"
            return (f"§3.6: {observed}, after {after} request() {calls} made after cancel(), "
                    f"which must be {'a no-op' if after == 1 else 'no-ops'}")
        return f"§1.1: {observed}"

    def wait_for_on_next(self, count: int, timeout_millis: float) -> bool:
        """Wait until ``count`` elements have arrived in total; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.on_next_count >= count,
                                          max(0.0, timeout_millis) / 1000)

    def expect_end_of_stream(self, expectation: str) -> None:
        """The next signal must be ``on_complete``; ``expectation`` says who should have
        completed when, e.g. "§1.5: after its 3 elements, P must signal on_complete"."""
        timeout = self.env.default_timeout_millis
        nothing = f"{expectation}, but signalled nothing"
        got = self.received.next_or_end_of_stream(timeout, nothing)
        if got is None:
            raise AssertionError(f"{nothing} within {int(timeout)} ms")
        if got is not END_OF_STREAM:
            self.env.flop_and_fail(f"{expectation}, but signalled element [{got!r}] instead")

    def __repr__(self) -> str:
        return "TCKSubscriber"


class _FromSignalsRequestingSubscriber(_DemandCountingSubscriber[T], Generic[T]):
    """Requests 1 three times from ``on_subscribe`` and once from every ``on_next`` (§3.2)."""

    def on_subscribe(self, subscription: Subscription) -> None:
        first = not self.subscription.is_completed()
        super().on_subscribe(subscription)
        if first:
            for _ in range(3):
                self.request(1)

    def on_next(self, element: T) -> None:
        super().on_next(element)
        if self.subscription.is_completed():
            self.request(1)


class _RecursionDepthSubscriber(ManualSubscriberWithSubscriptionSupport[T], Generic[T]):
    """Requests 1 from inside every ``on_next`` and measures, per thread, how deeply
    ``on_next`` calls nest (§3.3)."""

    def __init__(self, env: TestEnvironment, publisher: str, bound: int, signals: int,
                 finished: Latch) -> None:
        super().__init__(env)
        self.publisher = publisher
        self.bound = bound
        self.signals = signals
        self.finished = finished
        self.on_next_count = 0
        self._depth = threading.local()

    def on_next(self, element: T) -> None:
        # The element itself is not kept: this check is about stack depth only.
        if not self.subscription.is_completed():
            self.env.flop(f"§1.9: on_subscribe should be called prior to on_next always; "
                          f"got on_next({element!r}) first")
            return
        self.on_next_count += 1
        depth = getattr(self._depth, "value", 0) + 1
        self._depth.value = depth
        try:
            if depth > self.bound:
                self.env.flop(
                    f"§3.3: {self.publisher} nested on_next {depth} deep on thread "
                    f"{_thread_name()} (on_next -> request -> on_next ...), but the recursion "
                    f"bound is {self.bound} (bounded_depth_of_on_next_and_request_recursion())")
                self.finished.close()  # and stop the chain here
                return
            if self.on_next_count >= self.signals:
                self.finished.close()
                return
            self.request(1)  # the publisher must not answer this with a deeper on_next
        finally:
            self._depth.value = depth - 1

    def on_complete(self) -> None:
        super().on_complete()
        self.finished.close()

    def on_error(self, error: BaseException) -> None:
        super().on_error(error)
        self.finished.close()

    def __repr__(self) -> str:
        return "TCKSubscriber"


class _DemandOverflowSubscriber(BlackholeSubscriberWithSubscriptionSupport[T], Generic[T]):
    """Requests ``LONG_MAX - 1`` from each of its first ten ``on_next`` calls, pushing the
    pending demand far past ``LONG_MAX``, then cancels (§3.17)."""

    REQUESTS: Final = 10

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self.requests_left = self.REQUESTS
        self.on_next_count = 0
        self._changed = threading.Condition()

    def on_next(self, element: T) -> None:
        if not self.subscription.is_completed():
            super().on_next(element)  # records the §1.9 violation
            return
        with self._changed:
            self.on_next_count += 1
            self._changed.notify_all()
        subscription = self.subscription.value()
        if self.requests_left > 0:
            self.requests_left -= 1
            subscription.request(LONG_MAX - 1)
        else:
            subscription.cancel()

    def wait_for_on_next(self, count: int, timeout_millis: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.on_next_count >= count,
                                          max(0.0, timeout_millis) / 1000)

    def __repr__(self) -> str:
        return "TCKSubscriber"


class _SignalOverlapDetector:
    """Flags a signal that starts on one thread while a signal is still running on
    another (§1.3). A signal nested in another on the same thread is not an overlap: a
    synchronous publisher may signal from inside ``request``, called from ``on_next``."""

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._owner_name = ""
        self._depth = 0
        self._running = ""

    def enter(self, signal: str) -> bool:
        """Mark ``signal`` as running; False (and a recorded failure) on an overlap."""
        me = threading.get_ident()
        with self._lock:
            if self._owner is None or self._owner == me:
                self._owner, self._owner_name = me, _thread_name()
                self._depth += 1
                self._running = signal
                return True
            owner, running = self._owner_name, self._running
        self.env.flop(f"§1.3: illegal concurrent access detected: {signal} started on thread "
                      f"{_thread_name()} while {running} was still running on thread {owner}; "
                      "signals must not overlap")
        return False

    def leave(self, entered: bool) -> None:
        if not entered:
            return
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None


class _SequentialSignalsSubscriber(Subscriber[T], Generic[T]):
    """Requests one element at a time, one more than the stream holds, and flags signals
    that overlap across threads (§1.3). Repeated terminal signals are not this check's
    business and are tolerated."""

    def __init__(self, env: TestEnvironment, elements: int) -> None:
        self.env = env
        self.elements = elements
        self.completed = threading.Event()
        self.subscription: Promise[Subscription] = Promise(env)
        self.on_next_count = 0
        self._overlaps = _SignalOverlapDetector(env)

    def on_subscribe(self, subscription: Subscription) -> None:
        entered = self._overlaps.enter("on_subscribe()")
        try:
            if not self.subscription.is_completed():
                self.subscription.complete(subscription)
            subscription.request(1)
        finally:
            self._overlaps.leave(entered)

    def on_next(self, element: T) -> None:
        entered = self._overlaps.enter(f"on_next({element!r})")
        try:
            self.on_next_count += 1
            # One request more than the stream holds: some publishers only see their
            # end when asked for more.
            if self.on_next_count <= self.elements:
                self.subscription.value().request(1)
        finally:
            self._overlaps.leave(entered)

    def on_error(self, error: BaseException) -> None:
        entered = self._overlaps.enter(f"on_error({error!r})")
        try:
            self.env.flop(f"Unexpected on_error({error!r})", error)
        finally:
            self._overlaps.leave(entered)

    def on_complete(self) -> None:
        entered = self._overlaps.enter("on_complete()")
        self._overlaps.leave(entered)
        self.completed.set()

    def __repr__(self) -> str:
        return "TCKSubscriber"


class _OnSubscribeFirstSubscriber(Subscriber[T], Generic[T]):
    """Flags any signal that comes before ``on_subscribe``, and a second ``on_subscribe``
    (§1.9)."""

    def __init__(self, env: TestEnvironment, publisher: str) -> None:
        self.env = env
        self.publisher = publisher
        self.subscribed = Latch(env)
        self.subscription: Promise[Subscription] = Promise(env)

    def _before_on_subscribe(self, signal: str) -> None:
        self.subscribed.assert_closed(f"§1.9: {self.publisher} called {signal} before "
                                      "on_subscribe; on_subscribe must be the first signal")

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscribed.assert_open(f"§1.9: {self.publisher} called on_subscribe twice; it "
                                    "must be called exactly once")
        self.subscribed.close()
        if not self.subscription.is_completed():
            self.subscription.complete(subscription)

    def on_next(self, element: T) -> None:
        self._before_on_subscribe(f"on_next({element!r})")

    def on_error(self, error: BaseException) -> None:
        self._before_on_subscribe(f"on_error({error!r})")

    def on_complete(self) -> None:
        self._before_on_subscribe("on_complete()")

    def __repr__(self) -> str:
        return "TCKSubscriber"


class _FailedPublisherSubscriber(TestSubscriber[T], Generic[T]):
    """Expects exactly ``on_subscribe`` then exactly one ``on_error`` (§1.4, §1.9);
    ``on_next`` and ``on_complete`` are recorded as unexpected."""

    def __init__(self, env: TestEnvironment, publisher: str) -> None:
        super().__init__(env)
        self.publisher = publisher
        self.subscribed = Latch(env)
        self.errored = Latch(env)

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscribed.assert_open(f"§1.9: the failed publisher {self.publisher} called "
                                    "on_subscribe twice; it must be called exactly once")
        self.subscribed.close()

    def on_error(self, error: BaseException) -> None:
        self.subscribed.assert_closed(f"§1.9: the failed publisher {self.publisher} called "
                                      f"on_error({error!r}) before on_subscribe")
        self.errored.assert_open(f"§1.7: the failed publisher {self.publisher} called on_error "
                                 "twice on one subscriber")
        self.errored.close()

    def __repr__(self) -> str:
        return "TCKSubscriber"


# -- the verification ------------------------------------------------------------------------


class PublisherVerification(Verification, ABC, Generic[T]):
    """Verification of a Publisher (§1, and §3 as far as its subscriptions decide).

    Subclass it as a pytest test class (``class TestMyPublisher(...)``) and implement
    :meth:`create_publisher` and :meth:`create_failed_publisher`. Each check is a
    ``test_*`` method named after the reference TCK's (``required_``, ``optional_``,
    ``stochastic_`` or ``untested_``, then the rule). A required check fails on a
    violation; an optional one is skipped instead (except ``optional_spec104``, which
    really fails); a stochastic one repeats its scenario; an untested one always skips
    with "Not verified by this TCK.". A check that needs more elements than
    :meth:`max_elements_from_publisher` allows, or an ``on_complete`` the publisher
    cannot give, is skipped.

    Python mappings of Java facts: ``subscribe(None)`` must raise ``TypeError`` (§1.9);
    a non-positive ``request`` must be answered with ``on_error(ValueError)`` (§3.9);
    ``LONG_MAX = 2**63 - 1`` is unbounded demand and an infinite stream (§3.17).

    Differences from the reference TCK 1.0.4, deliberately:

    - every element a TCK subscriber receives beyond the demand it signalled is a §1.1
      failure in any check (requests made after ``cancel()`` do not count, §3.6);
    - no check passes on silence where something was expected: §3.2 needs the 6
      elements it requested from inside signals, §3.3 the elements of its recursion,
      and the "pending above LONG_MAX" check of §3.17 the 11 elements it drives;
    - ``optional_spec104`` says whether ``subscribe`` raised or a signal went wrong,
      instead of calling every failure "threw exception";
    - optional checks also fail (so skip) on errors recorded while they ran;
    - when a check stops on one failure after an earlier one was recorded, the earlier
      one is reported first;
    - every check ends what it started: subscriptions still open are cancelled.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.tck.publisher import PublisherVerification
    >>> class TestRange(PublisherVerification[int]):
    ...     def create_publisher(self, elements):
    ...         return RangePublisher(0, elements)
    ...     def create_failed_publisher(self):
    ...         return None  # a range cannot fail: the two checks that need one skip
    >>> check = TestRange()
    >>> check.setup_method()
    >>> check.test_required_spec102_may_signal_less_than_requested_and_terminate_subscription()
    """

    #: Subscriptions of the TCK's subscribers in the running check, cancelled at its end.
    _pv_open: list[Promise[Subscription]]

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def create_publisher(self, elements: int) -> Publisher[T]:
        """A new publisher of exactly ``elements`` elements followed by ``on_complete``.

        ``LONG_MAX`` means an infinite stream. The checks ask for 0, 1, 3, 5, 6, 10, 20,
        ``bounded_depth_of_on_next_and_request_recursion() + 1`` and ``INT_MAX``
        elements, never more than :meth:`max_elements_from_publisher`.
        """

    @abstractmethod
    def create_failed_publisher(self) -> Publisher[T] | None:
        """A publisher that calls ``on_subscribe`` and then ``on_error`` (§1.9), or
        ``None`` to skip the two checks that need one."""

    def max_elements_from_publisher(self) -> int:
        """Most elements the publisher can produce; checks that need more are skipped.

        Returns ``LONG_MAX - 1`` by default: huge, but finite. Return
        :meth:`publisher_unable_to_signal_on_complete` for a publisher that never
        completes; every check that needs ``on_complete`` is then skipped.
        """
        return LONG_MAX - 1

    def publisher_unable_to_signal_on_complete(self) -> int:
        """The value of :meth:`max_elements_from_publisher` that means "never completes"."""
        return LONG_MAX

    def bounded_depth_of_on_next_and_request_recursion(self) -> int:
        """Deepest nesting of ``on_next -> request -> on_next`` allowed on one thread
        (§3.3); at least 1."""
        return 1

    def skip_stochastic_tests(self) -> bool:
        """Return True to skip the checks that repeat a scenario hoping to catch a race."""
        return False

    def stochastic_runs(self, default: int) -> int:
        """How often a stochastic check repeats its scenario (at least 1; default as the
        reference kit). Lower it for a publisher whose every run is costly, such as one
        that starts a streaming query; the check then catches rarer races less often."""
        return default

    def publisher_reference_gc_timeout_millis(self) -> int:
        """How long a publisher may keep a cancelled subscriber reachable (§3.13).

        Default: the ``PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS`` environment variable, else
        300.
        """
        return TestEnvironment.env_publisher_reference_gc_timeout_millis()

    # -- harness -----------------------------------------------------------------------------

    def active_publisher_test(self, elements: int, completion_required: bool,
                              body: PublisherTestRun[T]) -> None:
        """Run ``body`` on ``create_publisher(elements)``, then raise the first error
        recorded meanwhile. Skips when the publisher cannot give ``elements`` elements,
        or, with ``completion_required``, cannot signal ``on_complete``."""
        self._pv_skip_unless_supported(elements, completion_required)
        self._pv_run(self.create_publisher(elements), body)

    def optional_active_publisher_test(self, elements: int, completion_required: bool,
                                       body: PublisherTestRun[T]) -> None:
        """As :meth:`active_publisher_test`, for a MAY rule: a failure becomes a skip."""
        self._pv_skip_unless_supported(elements, completion_required)
        publisher = self.create_publisher(elements)
        self.optional_test(lambda: self._pv_run(publisher, body))

    def when_has_error_publisher_test(self, body: PublisherTestRun[T]) -> None:
        """Run ``body`` on ``create_failed_publisher()``; skip if there is none."""
        publisher = self.create_failed_publisher()
        if publisher is None:
            self.not_verified(SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE)
        self._pv_run(publisher, body)

    def stochastic_test(self, n: int, body: Callable[[int], None]) -> None:
        """Run ``body(i)`` for ``i`` in ``range(n)``; every run must pass."""
        if self.skip_stochastic_tests():
            self.not_verified(SKIPPING_STOCHASTIC_TESTS)
        for run in range(n):
            body(run)

    # -- harness internals (prefixed: processor verifications inherit these too) ------------

    def _pv_skip_unless_supported(self, elements: int, completion_required: bool) -> None:
        most = self.max_elements_from_publisher()
        if elements > most:
            self.not_verified(f"Skipped because this check needs a publisher of {elements} "
                              f"elements, but max_elements_from_publisher() is {most}.")
        if completion_required and most == self.publisher_unable_to_signal_on_complete():
            self.not_verified("Skipped because this check needs on_complete, which this "
                              "publisher cannot signal (max_elements_from_publisher() returned "
                              "publisher_unable_to_signal_on_complete()).")

    def _pv_run(self, publisher: Publisher[T], body: PublisherTestRun[T]) -> None:
        self._pv_open = []
        try:
            try:
                body(publisher)
            except Exception as exc:
                self._pv_report_earlier_problem(exc)
                raise
            self.env.verify_no_async_errors_no_delay()
        finally:
            self._pv_end_open_subscriptions()

    def _pv_report_earlier_problem(self, error: Exception) -> None:
        """If a different problem was recorded before ``error``, raise with it first."""
        try:
            self.env.verify_no_async_errors_no_delay()
        except AssertionError as first:
            if str(first) not in str(error):  # not the same problem, nor a restatement of it
                raise AssertionError(f"{first}\n(and then: {error})") from error

    def _pv_end_open_subscriptions(self) -> None:
        open_subscriptions, self._pv_open = self._pv_open, []
        for subscription in open_subscriptions:
            if subscription.is_completed():
                try:
                    subscription.value().cancel()  # §3.7: harmless if already ended
                except Exception:
                    pass  # the check has its verdict already

    def _pv_subscribe(self, publisher: Publisher[T]) -> _DemandCountingSubscriber[T]:
        """Subscribe a TCK subscriber and wait for its ``on_subscribe``; the check
        cancels it at the end if its subscription is still open."""
        sub: _DemandCountingSubscriber[T] = _DemandCountingSubscriber(self.env, repr(publisher))
        self._pv_open.append(sub.subscription)
        self.env.subscribe(publisher, sub)
        return sub

    def _pv_verify(self, context: str, delay: bool = False) -> None:
        """Raise the first recorded error; name ``context`` unless it names a rule."""
        try:
            if delay:
                self.env.verify_no_async_errors()
            else:
                self.env.verify_no_async_errors_no_delay()
        except AssertionError as exc:
            if str(exc).startswith("§"):
                raise
            raise AssertionError(f"{context}: {exc}") from exc

    def _pv_next_or_end(self, sub: _DemandCountingSubscriber[T], publisher: Publisher[T],
                        index: int, total: int) -> None:
        """Request one element of a stream of ``total``; it must not be the end yet."""
        setup = f"create_publisher({total})"
        nothing = (f"{setup}: {publisher!r} signalled neither element {index} of {total} nor "
                   "on_complete after request(1)")
        got = sub.request_next_element_or_end_of_stream(None, nothing)
        if got is None:
            raise AssertionError(f"{nothing} within {int(self.env.default_timeout_millis)} ms")
        if got is END_OF_STREAM:
            self.env.flop_and_fail(f"{setup} must produce a stream of exactly {total} elements, "
                                   f"but {publisher!r} signalled on_complete after "
                                   f"{index - 1}")

    def _pv_request_non_positive(self, sub: _DemandCountingSubscriber[T],
                                 publisher: Publisher[T], n: int) -> None:
        try:
            sub.request(n)
        except Exception as exc:
            raise AssertionError(
                f"§3.9: {publisher!r} raised {type(exc).__name__}({exc}) from request({n}); a "
                "non-positive request must be signalled through on_error, not raised") from exc

    def _pv_same_sequence(self, first: Sequence[Any], second: Sequence[Any],
                          first_name: str, second_name: str, publisher: Publisher[T]) -> None:
        if list(first) == list(second):
            return
        at = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
                  min(len(first), len(second)))
        raise AssertionError(
            f"§1.11: expected the same elements in the same order for the {first_name} and "
            f"{second_name} subscribers of {publisher!r}, but they differ at index {at}: "
            f"{list(first)} vs {list(second)}")

    def _pv_subscribe_and_cancel(self, publisher: Publisher[T],
                                 collected: threading.Event) -> weakref.ref[Any]:
        """Subscribe, take one element, cancel; return only a weak reference to the
        subscriber, so that nothing of the TCK keeps it alive (§3.13)."""
        sub: _DemandCountingSubscriber[T] = _DemandCountingSubscriber(self.env,
                                                                     repr(publisher))
        reference = weakref.ref(sub, lambda _: collected.set())
        self.env.subscribe(publisher, sub)
        sub.request(1)
        sub.next_element(None, f"§3.13: {publisher!r} did not signal the element requested")
        sub.cancel()
        return reference

    # -- setup checks ------------------------------------------------------------------------

    def test_required_create_publisher1_must_produce_a_stream_of_exactly1_element(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            self._pv_next_or_end(sub, pub, 1, 1)
            sub.request(1)
            sub.expect_end_of_stream(f"create_publisher(1) must produce a stream of exactly 1 "
                                     f"element: after it, {pub!r} must signal on_complete")

        self.active_publisher_test(1, True, body)

    def test_required_create_publisher3_must_produce_a_stream_of_exactly3_elements(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            for index in (1, 2, 3):
                self._pv_next_or_end(sub, pub, index, 3)
            sub.request(1)
            sub.expect_end_of_stream(f"create_publisher(3) must produce a stream of exactly 3 "
                                     f"elements: after them, {pub!r} must signal on_complete")

        self.active_publisher_test(3, True, body)

    def test_required_validate_max_elements_from_publisher(self) -> None:
        most = self.max_elements_from_publisher()
        assert most >= 0, f"max_elements_from_publisher() must return a number >= 0, got {most}"

    def test_required_validate_bounded_depth_of_on_next_and_request_recursion(self) -> None:
        bound = self.bounded_depth_of_on_next_and_request_recursion()
        assert bound >= 1, ("bounded_depth_of_on_next_and_request_recursion() must return a "
                            f"number >= 1, got {bound}")

    # -- §1: Publisher ---------------------------------------------------------------------------

    def test_required_spec101_subscription_request_must_result_in_the_correct_number_of_produced_elements(  # noqa: E501
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.expect_none(None, f"§1.1: {pub!r} signalled an element before the first "
                                  "request: got element")
            sub.request(1)
            sub.next_element(None, f"§1.1: {pub!r} signalled no element after the first "
                                   "request(1)")
            sub.expect_none(None, f"§1.1: {pub!r} signalled more than the 1 element "
                                  "requested: got element")
            sub.request(1)
            sub.request(2)
            sub.next_elements(3, None, f"§1.1: {pub!r} signalled fewer than 3 elements after "
                                       "request(1) and request(2)")
            sub.expect_none(None, f"§1.1: {pub!r} signalled more than the 4 elements "
                                  "requested: got element")

        self.active_publisher_test(5, False, body)

    def test_required_spec102_may_signal_less_than_requested_and_terminate_subscription(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(10)
            sub.next_elements(3, None, f"§1.2: {pub!r} signalled fewer than its 3 elements "
                                       "after request(10)")
            sub.expect_end_of_stream(f"§1.2: with 10 requested, after its 3 elements {pub!r} "
                                     "must signal on_complete")

        self.active_publisher_test(3, True, body)

    def test_stochastic_spec103_must_signal_on_methods_sequentially(self) -> None:
        iterations, elements = max(1, self.stochastic_runs(100)), 10

        def run(number: int) -> None:
            def body(pub: Publisher[T]) -> None:
                sub: _SequentialSignalsSubscriber[T] = _SequentialSignalsSubscriber(
                    self.env, elements)
                self._pv_open.append(sub.subscription)
                pub.subscribe(sub)
                timeout = elements * self.env.default_timeout_millis
                if not sub.completed.wait(timeout / 1000):
                    self.env.flop(f"§1.3: in run {number + 1} of {iterations}, {pub!r} did not "
                                  f"signal on_complete within {int(timeout)} ms after "
                                  f"{elements} elements requested one at a time (received "
                                  f"{sub.on_next_count})")

            self.active_publisher_test(elements, True, body)

        self.stochastic_test(iterations, run)

    def test_optional_spec104_must_signal_on_error_when_fails(self) -> None:
        # Optional, yet a failure here is a real failure, not a skip.
        def body(pub: Publisher[T]) -> None:
            sub: _FailedPublisherSubscriber[T] = _FailedPublisherSubscriber(self.env, repr(pub))
            try:
                pub.subscribe(sub)
            except Exception as exc:
                raise AssertionError(
                    f"§1.4: the failed publisher {pub!r} raised {type(exc).__name__}({exc}) from "
                    "subscribe() instead of signalling on_error") from exc
            sub.subscribed.expect_close(self.env.default_timeout_millis,
                                        f"§1.9: the failed publisher {pub!r} did not call "
                                        "on_subscribe")
            sub.errored.expect_close(self.env.default_timeout_millis,
                                     f"§1.4: the failed publisher {pub!r} did not signal "
                                     "on_error")
            self._pv_verify("§1.4", delay=True)

        self.when_has_error_publisher_test(body)

    def test_required_spec105_must_signal_on_complete_when_finite_stream_terminates(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            for index in (1, 2, 3):
                sub.request_next_element(None, f"§1.5: {pub!r} did not signal element {index} "
                                               "of 3 after request(1)")
            sub.request(1)
            sub.expect_end_of_stream(f"§1.5: after its 3 elements, {pub!r} must signal "
                                     "on_complete")
            sub.expect_none(None, f"§1.7: {pub!r} signalled after on_complete: got element")

        self.active_publisher_test(3, True, body)

    def test_optional_spec105_empty_stream_must_terminate_by_signalling_on_complete(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(1)
            sub.expect_end_of_stream(f"§1.5: an empty stream must be terminated by "
                                     f"on_complete, so {pub!r} must signal it")
            sub.expect_none(None, f"§1.7: {pub!r} signalled after on_complete: got element")

        self.optional_active_publisher_test(0, True, body)

    def test_untested_spec106_must_consider_subscription_cancelled_after_on_error_or_on_complete_has_been_called(  # noqa: E501
            self) -> None:
        self.not_verified()  # needs more control over the publisher than the TCK has

    def test_required_spec107_must_not_emit_further_signals_once_on_complete_has_been_signalled(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(10)
            sub.next_element(None, f"§1.7: {pub!r} did not signal its 1 element after "
                                   "request(10)")
            sub.expect_end_of_stream(f"§1.5: after its 1 element, {pub!r} must signal "
                                     "on_complete")
            sub.request(10)
            sub.expect_none(None, f"§1.7: {pub!r} signalled after on_complete: got element")

        self.active_publisher_test(1, True, body)

    def test_untested_spec107_must_not_emit_further_signals_once_on_error_has_been_signalled(
            self) -> None:
        self.not_verified()

    def test_untested_spec108_possibly_canceled_subscription_should_not_receive_on_error_or_on_complete_signals(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec109_subscribe_should_not_throw_non_fatal_throwable(self) -> None:
        self.not_verified()

    def test_required_spec109_subscribe_throw_npe_on_null_subscriber(self) -> None:
        # Java's NullPointerException is Python's TypeError.
        def body(pub: Publisher[T]) -> None:
            try:
                pub.subscribe(None)  # type: ignore[arg-type]
            except TypeError:
                pass
            except Exception as exc:
                raise AssertionError(
                    f"§1.9: {pub!r}.subscribe(None) raised {type(exc).__name__}({exc}); it must "
                    "raise TypeError") from exc
            else:
                self.env.flop(f"§1.9: {pub!r} did not raise TypeError when subscribe was "
                              "called with None")
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(0, False, body)

    def test_required_spec109_must_issue_on_subscribe_for_non_null_subscriber(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub: _OnSubscribeFirstSubscriber[T] = _OnSubscribeFirstSubscriber(self.env,
                                                                              repr(pub))
            self._pv_open.append(sub.subscription)
            pub.subscribe(sub)
            sub.subscribed.expect_close(self.env.default_timeout_millis,
                                        f"§1.9: {pub!r} did not call on_subscribe")
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(0, False, body)

    def test_required_spec109_may_reject_calls_to_subscribe_if_publisher_is_unable_or_unwilling_to_serve_them_rejection_must_trigger_on_error_after_on_subscribe(  # noqa: E501
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub: _FailedPublisherSubscriber[T] = _FailedPublisherSubscriber(self.env, repr(pub))
            pub.subscribe(sub)
            sub.subscribed.expect_close(self.env.default_timeout_millis,
                                        f"§1.9: the failed publisher {pub!r} did not call "
                                        "on_subscribe")
            sub.errored.expect_close(self.env.default_timeout_millis,
                                     f"§1.9: the failed publisher {pub!r} did not signal "
                                     "on_error after on_subscribe")
            self.env.verify_no_async_errors_no_delay()

        self.when_has_error_publisher_test(body)

    def test_untested_spec110_reject_a_subscription_request_if_the_same_subscriber_subscribes_twice(
            self) -> None:
        self.not_verified()

    def test_optional_spec111_may_support_multi_subscribe(self) -> None:
        def body(pub: Publisher[T]) -> None:
            self._pv_subscribe(pub)
            self._pv_subscribe(pub)
            self._pv_verify("§1.11", delay=True)

        self.optional_active_publisher_test(1, False, body)

    def test_optional_spec111_registered_subscribers_must_receive_on_next_or_on_complete_signals(
            self) -> None:
        # Unicast or multicast is the publisher's choice: each subscriber gets the element
        # or on_complete.
        def body(pub: Publisher[T]) -> None:
            first = self._pv_subscribe(pub)
            second = self._pv_subscribe(pub)
            for sub, name in ((first, "1st"), (second, "2nd")):
                sub.request_next_element_or_end_of_stream(
                    None, f"§1.11: {pub!r} signalled neither an element nor on_complete to its "
                          f"{name} subscriber after request(1)")
            self._pv_verify("§1.11", delay=True)

        self.optional_active_publisher_test(1, False, body)

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_one_by_one(  # noqa: E501
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            subs = [self._pv_subscribe(pub) for _ in range(3)]
            names = ("1st", "2nd", "3rd")
            seen: list[list[Any]] = [[], [], []]

            def take(which: int, n: int) -> None:
                subs[which].request(n)
                seen[which].extend(subs[which].next_elements(
                    n, None, f"§1.11: {pub!r} did not signal the {n} requested elements to "
                             f"its {names[which]} subscriber"))

            def end(which: int) -> None:
                subs[which].request(1)
                subs[which].expect_end_of_stream(
                    f"§1.11: after 5 elements, {pub!r} must signal on_complete to its "
                    f"{names[which]} subscriber")

            take(0, 1)
            take(1, 2)
            take(0, 1)
            take(2, 3)
            take(2, 1)
            take(2, 1)
            end(2)
            take(1, 3)
            end(1)
            take(0, 2)
            take(0, 1)
            end(0)
            self._pv_same_sequence(seen[0], seen[1], "1st", "2nd", pub)
            self._pv_same_sequence(seen[0], seen[2], "1st", "3rd", pub)

        self.optional_active_publisher_test(5, True, body)

    def _pv_three_upfront(self, pub: Publisher[T], completion: bool) -> None:
        # Four requested from a stream of three: a publisher that must touch its source to
        # see the end completes only when asked for more than it holds.
        subs = [self._pv_subscribe(pub) for _ in range(3)]
        names = ("1st", "2nd", "3rd")
        for sub in subs:
            sub.request(4)
        received = [sub.next_elements(3, None, f"§1.11: {pub!r} did not signal its 3 elements "
                                               f"to its {name} subscriber after request(4)")
                    for sub, name in zip(subs, names, strict=True)]
        if completion:
            for sub, name in zip(subs, names, strict=True):
                sub.expect_end_of_stream(f"§1.11: after its 3 elements, {pub!r} must signal "
                                         f"on_complete to its {name} subscriber")
        self._pv_same_sequence(received[0], received[1], "1st", "2nd", pub)
        self._pv_same_sequence(received[1], received[2], "2nd", "3rd", pub)

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_many_upfront(  # noqa: E501
            self) -> None:
        # Completion is not checked: the publisher may be unable to signal it.
        self.optional_active_publisher_test(3, False,
                                            lambda pub: self._pv_three_upfront(pub, False))

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_many_upfront_and_complete_as_expected(  # noqa: E501
            self) -> None:
        self.optional_active_publisher_test(3, True,
                                            lambda pub: self._pv_three_upfront(pub, True))

    # -- §3: Subscription ----------------------------------------------------------------------

    def test_required_spec302_must_allow_synchronous_request_calls_from_on_next_and_on_subscribe(
            self) -> None:
        elements = 6

        def body(pub: Publisher[T]) -> None:
            sub: _FromSignalsRequestingSubscriber[T] = _FromSignalsRequestingSubscriber(
                self.env, repr(pub))
            self._pv_open.append(sub.subscription)
            pub.subscribe(sub)  # errors in answer to the requests are judged below
            sub.subscription.expect_completion(self.env.default_timeout_millis,
                                               f"§1.9: {pub!r} did not call on_subscribe")
            arrived = sub.wait_for_on_next(elements, self.env.default_timeout_millis)
            self._pv_verify("§3.2: with request called from inside on_subscribe and on_next",
                            delay=True)
            if not arrived:
                raise AssertionError(
                    f"§3.2: {pub!r} signalled only {sub.on_next_count} of its {elements} "
                    "elements while request was called from inside on_subscribe and on_next "
                    f"(a total demand of {sub.demand}) within "
                    f"{int(self.env.default_timeout_millis)} ms")

        self.active_publisher_test(elements, False, body)

    def test_required_spec303_must_not_allow_unbounded_recursion(self) -> None:
        bound = self.bounded_depth_of_on_next_and_request_recursion()
        signals = bound + 1

        def body(pub: Publisher[T]) -> None:
            finished = Latch(self.env)
            sub: _RecursionDepthSubscriber[T] = _RecursionDepthSubscriber(
                self.env, repr(pub), bound, signals, finished)
            self._pv_open.append(sub.subscription)
            self.env.subscribe(pub, sub)
            sub.request(1)  # starts request -> on_next -> request -> on_next ...
            finished.expect_close(self.env.default_timeout_millis,
                                  f"§3.3: could not measure the recursion depth: {pub!r} "
                                  f"signalled neither {signals} elements, requested one at a "
                                  "time from inside on_next, nor a terminal signal")
            self._pv_verify("§3.3")
            if sub.on_next_count < signals:
                raise AssertionError(
                    f"§3.3: could not measure the recursion depth: {pub!r} signalled "
                    f"on_complete after {sub.on_next_count} of its {signals} elements")

        self.active_publisher_test(signals, False, body)

    def test_untested_spec304_request_should_not_perform_heavy_computations(self) -> None:
        self.not_verified()

    def test_untested_spec305_cancel_must_not_synchronously_perform_heavy_computation(
            self) -> None:
        self.not_verified()

    def test_required_spec306_after_subscription_is_cancelled_request_must_be_nops(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.cancel()
            for _ in range(3):
                sub.request(1)
            sub.expect_none(None, f"§3.6: {pub!r} signalled after cancel(), although request() "
                                  "must then be a no-op: got element")
            self._pv_verify("§3.6: request() after cancel() must be a no-op")

        self.active_publisher_test(3, False, body)

    def test_required_spec307_after_subscription_is_cancelled_additional_cancelations_must_be_nops(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            for _ in range(3):
                sub.cancel()
            sub.expect_none(None, f"§3.7: {pub!r} signalled after cancel(): got element")
            self._pv_verify("§3.7: cancel() after cancel() must be a no-op")

        self.active_publisher_test(1, False, body)

    def test_required_spec309_request_zero_must_signal_illegal_argument_exception(
            self) -> None:
        # Java's IllegalArgumentException is Python's ValueError.
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            self._pv_request_non_positive(sub, pub, 0)
            sub.expect_error(ValueError, error_message=f"§3.9: {pub!r} did not signal "
                                                       "on_error(ValueError) after request(0)")

        self.active_publisher_test(10, False, body)

    def test_required_spec309_request_negative_number_must_signal_illegal_argument_exception(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            n = -random.randrange(INT_MAX) - 1
            self._pv_request_non_positive(sub, pub, n)
            sub.expect_error(ValueError, error_message=f"§3.9: {pub!r} did not signal "
                                                       f"on_error(ValueError) after request({n})")

        self.active_publisher_test(10, False, body)

    def test_optional_spec309_request_negative_number_may_signal_illegal_argument_exception_with_specific_message(  # noqa: E501
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            self._pv_request_non_positive(sub, pub, -random.randrange(INT_MAX) - 1)
            sub.expect_error_with_message(ValueError, ["3.9", "non-positive subscription request",
                                                       "negative subscription request"])

        self.optional_active_publisher_test(10, False, body)

    def test_required_spec312_cancel_must_make_the_publisher_to_eventually_stop_signaling(
            self) -> None:
        first_demand, second_demand = 10, 5
        total = first_demand + second_demand

        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(first_demand)
            sub.request(second_demand)
            # Cancel only once an element has arrived: an asynchronous publisher may
            # otherwise legally see the cancel before it ever signals.
            sub.next_element(None, f"§3.12: {pub!r} signalled no element after request("
                                   f"{first_demand}) and request({second_demand})")
            sub.cancel()
            quiet = self.env.default_no_signals_timeout_millis
            while True:
                seen = sub.on_next_count
                if seen > total:
                    raise AssertionError(
                        f"§3.12: {pub!r} signalled {seen} elements, which is more than the "
                        f"signalled demand: {total}; after cancel() it must eventually stop")
                if not sub.wait_for_on_next(seen + 1, quiet):
                    break  # quiet for the no-signals timeout: it stopped
            self._pv_verify("§3.12")

        self.active_publisher_test(20, False, body)

    def test_required_spec313_cancel_must_make_the_publisher_eventually_drop_all_references_to_the_subscriber(  # noqa: E501
            self) -> None:
        grace = self.publisher_reference_gc_timeout_millis()

        def body(pub: Publisher[T]) -> None:
            collected = threading.Event()
            reference = self._pv_subscribe_and_cancel(pub, collected)
            # The publisher may release the subscriber asynchronously: give it the grace
            # time (or less, if it is collected sooner), then force a collection.
            if not collected.wait(grace / 1000):
                gc.collect()
                collected.wait(_GC_SETTLE_MILLIS / 1000)
            if reference() is not None:
                self.env.flop(f"§3.13: {pub!r} did not drop its reference to the TCK's "
                              f"subscriber within {grace} ms after cancel(): the subscriber "
                              "could not be garbage-collected")
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(3, False, body)

    def test_required_spec317_must_support_a_pending_element_count_up_to_long_max_value(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(LONG_MAX)
            sub.next_elements(3, None, f"§3.17: {pub!r} signalled fewer than its 3 elements "
                                       "after request(LONG_MAX)")
            sub.expect_end_of_stream(f"§3.17: with LONG_MAX requested, after its 3 elements "
                                     f"{pub!r} must signal on_complete")
            self._pv_verify("§3.17: after request(LONG_MAX)")

        self.active_publisher_test(3, True, body)

    def test_required_spec317_must_support_a_cumulative_pending_element_count_up_to_long_max_value(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self._pv_subscribe(pub)
            sub.request(LONG_MAX // 2)
            sub.request(LONG_MAX // 2)
            sub.request(1)  # pending demand is now exactly LONG_MAX
            context = ("§3.17: with requests adding up to exactly LONG_MAX (LONG_MAX // 2, "
                       "LONG_MAX // 2, 1)")
            sub.next_elements(3, None, f"{context}, {pub!r} signalled fewer than its 3 "
                                       "elements")
            sub.expect_end_of_stream(f"{context}, after its 3 elements {pub!r} must signal "
                                     "on_complete")
            self._pv_verify(context)

        self.active_publisher_test(3, True, body)

    def test_required_spec317_must_not_signal_on_error_when_pending_above_long_max_value(
            self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub: _DemandOverflowSubscriber[T] = _DemandOverflowSubscriber(self.env)
            signals = sub.REQUESTS + 1
            self._pv_open.append(sub.subscription)
            self.env.subscribe(pub, sub)
            # Each of the first ten on_next requests LONG_MAX - 1 more; the eleventh cancels.
            sub.request(1)
            arrived = sub.wait_for_on_next(signals, self.env.default_timeout_millis)
            self._pv_verify("§3.17: with pending demand above LONG_MAX", delay=True)
            if not arrived:
                raise AssertionError(
                    f"§3.17: {pub!r} signalled only {sub.on_next_count} elements after "
                    f"request(1) and {sub.REQUESTS} requests of LONG_MAX - 1 from inside "
                    f"on_next; expected {signals} within "
                    f"{int(self.env.default_timeout_millis)} ms")

        self.active_publisher_test(INT_MAX, False, body)
