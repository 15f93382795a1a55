"""Blackbox verification of a Subscriber: the subscriber under test is used as it is,
with no instrumentation, so only what it does to its subscription can be checked
(§2.1, §2.3, §2.5, §2.9, §2.10, §2.13). For more, see the whitebox verification.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar

from ..api import Subscriber, Subscription
from ._base import Verification, WithOwnHelperExecutor
from .environment import LONG_MAX, Latch, Promise, TCKTestError
from .subscriber_whitebox import (
    BlackboxSubscriberProxy,
    Spec203Subscription,
    SubscriberTestStage,
    deliver_signal,
)

__all__ = ["BlackboxTestStage", "SubscriberBlackboxVerification"]

T = TypeVar("T")

#: Most elements the §2.1 check sends, whatever the subscriber requested.
SPEC201_MAX_SIGNALS: Final = 512


class BlackboxTestStage(SubscriberTestStage[T], Generic[T]):
    """A stage whose subscriber under test is wrapped in a recording :attr:`proxy`."""

    proxy: BlackboxSubscriberProxy[T]

    def subscriber_under_test(self) -> Subscriber[T]:
        return self.proxy.target


# The TCK sends the terminal signals of the §2.3 checks through these uniquely named
# functions; a subscription call is flagged only with one of their frames on the stack,
# not when some unrelated method that happens to be called on_complete makes it.
def _tck_blackbox_spec203_send_on_complete(subscriber: Subscriber[Any]) -> None:
    subscriber.on_complete()


def _tck_blackbox_spec203_send_on_error(subscriber: Subscriber[Any]) -> None:
    subscriber.on_error(TCKTestError())


_SPEC203_ON_COMPLETE_FRAME: Final = _tck_blackbox_spec203_send_on_complete.__name__
_SPEC203_ON_ERROR_FRAME: Final = _tck_blackbox_spec203_send_on_error.__name__


class _NoopSubscription(Subscription):
    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass

    def __repr__(self) -> str:
        return "NoopSubscription"


class _SecondSubscription(Subscription):
    """Handed to an already subscribed subscriber: it must be cancelled (§2.5)."""

    def __init__(self, stage: BlackboxTestStage[Any], cancelled: Latch) -> None:
        self._stage = stage
        self._cancelled = cancelled

    def request(self, n: int) -> None:
        self._stage.env.flop(f"§2.5: {self._stage.subscriber_under_test()!r} called "
                             f"request({n!r}) on a second subscription instead of cancelling it")

    def cancel(self) -> None:
        self._cancelled.close()

    def __repr__(self) -> str:
        return "SecondSubscription(should be cancelled)"


def _end_quietly(subscriber: Subscriber[Any]) -> None:
    # A bare check leaves the subscriber subscribed to a dummy; end that subscription so
    # that whatever the subscriber started for it stops too. The verdict is already in.
    try:
        subscriber.on_complete()
    except Exception:
        pass


class SubscriberBlackboxVerification(Verification, WithOwnHelperExecutor[T], ABC, Generic[T]):
    """Verification of a Subscriber as it is, without instrumentation (§2.1-§2.13).

    Subclass it as a pytest test class (``class TestMySubscriber(...)``) and implement
    :meth:`create_subscriber` and ``create_element``; override :meth:`trigger_request`
    if the subscriber requests only after an outside nudge. The subscriber under test is
    subscribed to a TCK-controlled publisher that records ``request`` and ``cancel``;
    element values come from ``create_helper_publisher``.

    Differences from the reference TCK 1.0.4, deliberately:

    - §2.1 (quirk Q1 of the catalogue): the reference loop sends elements only while
      the subscription *is* cancelled, i.e. in practice never. Here the check sends up
      to ``min(n, 512)`` elements for the first ``request(n)``, stopping as soon as the
      subscriber cancels, and then completes the stream (§1.2 allows fewer elements
      than requested). After a cancel it sends nothing more, on_complete included.
    - An exception raised by a signal method of the subscriber under test fails the
      check with a §2.13 message (the raised error is its cause).
    - Every check ends by raising the first error recorded during it, and by ending
      what it started: the value source is cancelled, and the subscriber under test is
      completed if its subscription is still open.

    Examples
    --------
    >>> from reactive_streams import SyncSubscriber
    >>> from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification
    >>> class Drop(SyncSubscriber[int]):
    ...     def on_element(self, element):
    ...         pass
    >>> class TestDrop(SubscriberBlackboxVerification[int]):
    ...     def create_subscriber(self):
    ...         return Drop(batch_size=8)
    ...     def create_element(self, element):
    ...         return element
    >>> check = TestDrop()
    >>> check.setup_method()
    >>> check_name = ("test_required_spec213_blackbox_on_next_must_throw_null_pointer_"
    ...               "exception_when_parameters_are_null")
    >>> getattr(check, check_name)()  # passes: SyncSubscriber rejects None (§2.13)
    """

    @abstractmethod
    def create_subscriber(self) -> Subscriber[T]:
        """A new subscriber under test, for each check."""

    def trigger_request(self, subscriber: Subscriber[T]) -> None:
        """Make ``subscriber`` signal demand, if it needs an outside nudge to do so.

        Called before the checks that wait for a ``request``. Does nothing by default.
        """

    # -- set-up ------------------------------------------------------------------------------

    @contextmanager
    def _bb_stage(self) -> Iterator[BlackboxTestStage[T]]:
        """A subscriber under test, wrapped in a recording proxy and subscribed."""
        stage: BlackboxTestStage[T] = BlackboxTestStage(
            self.env, self.create_helper_publisher(LONG_MAX))
        try:
            stage.proxy = BlackboxSubscriberProxy(self.env, self.create_subscriber())
            stage.subscribe(stage.proxy)
            yield stage
            self.env.verify_no_async_errors_no_delay()
        finally:
            stage.close()

    def _bb_spec203(self, signal: str, frame: str,
                    send: Callable[[Subscriber[Any]], None]) -> None:
        sub = self.create_subscriber()
        subscription = Spec203Subscription(self.env, Promise.completed(self.env, sub),
                                           signal, frame)
        deliver_signal(sub, "on_subscribe", lambda: sub.on_subscribe(subscription))
        deliver_signal(sub, signal, lambda: send(sub))
        self.env.verify_no_async_errors_no_delay()

    def _bb_spec213(self, signal: str, subscribe_first: bool,
                    send_none: Callable[[Subscriber[T]], None]) -> None:
        sub = self.create_subscriber()
        if subscribe_first:
            subscription = _NoopSubscription()
            deliver_signal(sub, "on_subscribe", lambda: sub.on_subscribe(subscription))
        try:
            send_none(sub)
        except TypeError:
            pass
        except Exception as exc:
            raise AssertionError(f"§2.13: {sub!r}: {signal}(None) raised "
                                 f"{type(exc).__name__}({exc}) instead of TypeError") from exc
        else:
            raise AssertionError(f"§2.13: {sub!r}: {signal}(None) did not raise TypeError; "
                                 "a None argument must be rejected")
        finally:
            if subscribe_first:
                _end_quietly(sub)
        self.env.verify_no_async_errors_no_delay()

    # -- checks ------------------------------------------------------------------------------

    def test_required_spec201_blackbox_must_signal_demand_via_subscription_request(
            self) -> None:
        with self._bb_stage() as stage:
            self.trigger_request(stage.subscriber_under_test())
            requested = stage.expect_request(
                error_message_addendum="after trigger_request(subscriber)")
            # Cope with the demand signalled, up to a sane bound, while not cancelled (Q1).
            for _ in range(min(requested, SPEC201_MAX_SIGNALS)):
                if stage.is_cancelled():
                    break
                stage.signal_next()
            if not stage.is_cancelled():
                stage.send_completion()  # fewer elements than requested is legal (§1.2)

    def test_untested_spec202_blackbox_should_asynchronously_dispatch(self) -> None:
        self.not_verified()

    def test_required_spec203_blackbox_must_not_call_methods_on_subscription_or_publisher_in_on_complete(  # noqa: E501
            self) -> None:
        self._bb_spec203("on_complete", _SPEC203_ON_COMPLETE_FRAME,
                         _tck_blackbox_spec203_send_on_complete)

    def test_required_spec203_blackbox_must_not_call_methods_on_subscription_or_publisher_in_on_error(  # noqa: E501
            self) -> None:
        self._bb_spec203("on_error", _SPEC203_ON_ERROR_FRAME,
                         _tck_blackbox_spec203_send_on_error)

    def test_untested_spec204_blackbox_must_consider_the_subscription_as_cancelled_in_after_recieving_on_complete_or_on_error(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_required_spec205_blackbox_must_call_subscription_cancel_if_it_already_has_an_subscription_and_receives_another_on_subscribe_signal(  # noqa: E501
            self) -> None:
        with self._bb_stage() as stage:
            cancelled = Latch(self.env)
            second = _SecondSubscription(stage, cancelled)
            sub = stage.sub()
            deliver_signal(stage.proxy, "a second on_subscribe",
                           lambda: sub.on_subscribe(second))
            cancelled.expect_close(self.env.default_timeout_millis,
                                   f"§2.5: {stage.proxy!r} did not cancel a second "
                                   "subscription received while already subscribed")
            self.env.verify_no_async_errors_no_delay()
            stage.send_completion()

    def test_untested_spec206_blackbox_must_call_subscription_cancel_if_it_is_no_longer_valid(
            self) -> None:
        self.not_verified()

    def test_untested_spec207_blackbox_must_ensure_all_calls_on_its_subscription_take_place_from_the_same_thread_or_take_care_of_synchronization(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec208_blackbox_must_be_prepared_to_receive_on_next_signals_after_having_called_subscription_cancel(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_required_spec209_blackbox_must_be_prepared_to_receive_an_on_complete_signal_with_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._bb_stage() as stage:
            self.trigger_request(stage.subscriber_under_test())
            stage.expect_request(error_message_addendum="after trigger_request(subscriber)")
            stage.send_completion()
            stage.proxy.expect_completion(rule="§2.9")

    def test_required_spec209_blackbox_must_be_prepared_to_receive_an_on_complete_signal_without_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._bb_stage() as stage:
            stage.send_completion()
            stage.proxy.expect_completion(rule="§2.9")

    def test_required_spec210_blackbox_must_be_prepared_to_receive_an_on_error_signal_with_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._bb_stage() as stage:
            self.trigger_request(stage.subscriber_under_test())
            stage.expect_request(error_message_addendum="after trigger_request(subscriber)")
            error = TCKTestError()
            stage.send_error(error)
            stage.proxy.expect_error(error, rule="§2.10")

    def test_required_spec210_blackbox_must_be_prepared_to_receive_an_on_error_signal_without_preceding_request_call(  # noqa: E501
            self) -> None:
        with self._bb_stage() as stage:
            error = TCKTestError()
            stage.send_error(error)
            stage.proxy.expect_error(error, rule="§2.10")

    def test_untested_spec211_blackbox_must_make_sure_that_all_calls_on_its_methods_happen_before_the_processing_of_the_respective_events(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec212_blackbox_must_not_call_on_subscribe_more_than_once_based_on_object_equality(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec213_blackbox_failing_on_signal_invocation(self) -> None:
        self.not_verified()

    def test_required_spec213_blackbox_on_subscribe_must_throw_null_pointer_exception_when_parameters_are_null(  # noqa: E501
            self) -> None:
        self._bb_spec213("on_subscribe", False,
                         lambda sub: sub.on_subscribe(None))  # type: ignore[arg-type]

    def test_required_spec213_blackbox_on_next_must_throw_null_pointer_exception_when_parameters_are_null(  # noqa: E501
            self) -> None:
        self._bb_spec213("on_next", True, lambda sub: sub.on_next(None))  # type: ignore[arg-type]

    def test_required_spec213_blackbox_on_error_must_throw_null_pointer_exception_when_parameters_are_null(  # noqa: E501
            self) -> None:
        self._bb_spec213("on_error", True,
                         lambda sub: sub.on_error(None))  # type: ignore[arg-type]

    def test_untested_spec301_blackbox_must_not_be_called_outside_subscriber_context(
            self) -> None:
        self.not_verified()

    def test_untested_spec308_blackbox_request_must_register_given_number_elements_to_be_produced(
            self) -> None:
        self.not_verified()

    def test_untested_spec310_blackbox_request_may_synchronously_call_on_next_on_subscriber(
            self) -> None:
        self.not_verified()

    def test_untested_spec311_blackbox_request_may_synchronously_call_on_complete_or_on_error(
            self) -> None:
        self.not_verified()

    def test_untested_spec314_blackbox_cancel_may_cause_the_publisher_to_shutdown_if_no_other_subscription_exists(  # noqa: E501
            self) -> None:
        self.not_verified()

    def test_untested_spec315_blackbox_cancel_must_not_throw_exception_and_must_signal_on_error(
            self) -> None:
        self.not_verified()

    def test_untested_spec316_blackbox_request_must_not_throw_exception_and_must_on_error_the_subscriber(  # noqa: E501
            self) -> None:
        self.not_verified()
