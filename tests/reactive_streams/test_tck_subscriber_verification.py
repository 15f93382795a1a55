"""Self-tests of the subscriber verifications: every planted violation of the reference
TCK's own tests (TCK.md 3.2 B1-B12, 3.3 W1-W11, 3.5 N1-N12) must make its check fail
with our message, and correct subscribers (3.7) must pass.

All subscribers below named ``Broken...`` or planted in a test are wrong on purpose.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tck_selftest import require_test_failure, require_test_pass, require_test_skip

from reactive_streams import Subscriber, Subscription
from reactive_streams.tck._base import NOT_VERIFIED
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.subscriber_blackbox import (
    SPEC201_MAX_SIGNALS,
    SubscriberBlackboxVerification,
)
from reactive_streams.tck.subscriber_whitebox import (
    SubscriberPuppet,
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

#: Half the default timeout: how long the "slow" puppets delay request and cancel.
HALF_TIMEOUT_MILLIS = TestEnvironment.env_default_timeout_millis() / 2

BLACKBOX_CHECKS = sorted(n for n in dir(SubscriberBlackboxVerification) if n.startswith("test_"))
WHITEBOX_CHECKS = sorted(n for n in dir(SubscriberWhiteboxVerification) if n.startswith("test_"))


def _check(checks: list[str], fragment: str) -> str:
    (name,) = [n for n in checks if fragment in n]
    return name


# Checks by rule, found by a unique fragment of their name.
BB_201 = _check(BLACKBOX_CHECKS, "spec201_blackbox")
BB_203_COMPLETE = _check(BLACKBOX_CHECKS, "spec203_blackbox_must_not_call_methods_on_subscription_"
                                          "or_publisher_in_on_complete")
BB_203_ERROR = _check(BLACKBOX_CHECKS, "spec203_blackbox_must_not_call_methods_on_subscription_or_"
                                       "publisher_in_on_error")
BB_205 = _check(BLACKBOX_CHECKS, "required_spec205_blackbox")
BB_209_WITH = _check(BLACKBOX_CHECKS, "spec209_blackbox_must_be_prepared_to_receive_an_on_"
                                      "complete_signal_with_preceding")
BB_209_WITHOUT = _check(BLACKBOX_CHECKS, "spec209_blackbox_must_be_prepared_to_receive_an_on_"
                                         "complete_signal_without_preceding")
BB_210_WITH = _check(BLACKBOX_CHECKS, "spec210_blackbox_must_be_prepared_to_receive_an_on_error_"
                                      "signal_with_preceding")
BB_213_SUBSCRIBE = _check(BLACKBOX_CHECKS, "spec213_blackbox_on_subscribe")
BB_213_NEXT = _check(BLACKBOX_CHECKS, "spec213_blackbox_on_next")
BB_213_ERROR = _check(BLACKBOX_CHECKS, "spec213_blackbox_on_error")

WB_HAPPY = _check(WHITEBOX_CHECKS, "exercise_whitebox_happy_path")
WB_201 = _check(WHITEBOX_CHECKS, "required_spec201")
WB_203_COMPLETE = _check(WHITEBOX_CHECKS, "spec203_must_not_call_methods_on_subscription_or_"
                                          "publisher_in_on_complete")
WB_203_ERROR = _check(WHITEBOX_CHECKS, "spec203_must_not_call_methods_on_subscription_or_"
                                       "publisher_in_on_error")
WB_205 = _check(WHITEBOX_CHECKS, "required_spec205")
WB_208 = _check(WHITEBOX_CHECKS, "required_spec208")
WB_209_WITH = _check(WHITEBOX_CHECKS, "spec209_must_be_prepared_to_receive_an_on_complete_signal_"
                                      "with_preceding")
WB_209_WITHOUT = _check(WHITEBOX_CHECKS, "spec209_must_be_prepared_to_receive_an_on_complete_"
                                         "signal_without_preceding")
WB_210_WITH = _check(WHITEBOX_CHECKS, "spec210_must_be_prepared_to_receive_an_on_error_signal_"
                                      "with_preceding")
WB_210_WITHOUT = _check(WHITEBOX_CHECKS, "spec210_must_be_prepared_to_receive_an_on_error_signal_"
                                         "without_preceding")
WB_213_SUBSCRIBE = _check(WHITEBOX_CHECKS, "required_spec213_on_subscribe")
WB_213_NEXT = _check(WHITEBOX_CHECKS, "required_spec213_on_next")
WB_213_ERROR = _check(WHITEBOX_CHECKS, "required_spec213_on_error")
WB_308 = _check(WHITEBOX_CHECKS, "required_spec308")

#: What the §2.13 wrapper says when the planted on_error raises "Wrong, don't do this!"
#: from the TCK's error; the TCK's "Test Exception: Boom!" is part of it.
RAISED_FROM_ON_ERROR = ("raised RuntimeError(Wrong, don't do this!) from "
                        "on_error(TCKTestError('Test Exception: Boom!'))")


class Delays:
    """Timer threads owned by one test: :meth:`after` starts one, :meth:`close` cancels
    the pending ones and joins them all."""

    def __init__(self) -> None:
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()

    def after(self, millis: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(millis / 1000, action)
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def close(self) -> None:
        with self._lock:
            timers = list(self._timers)
        for timer in timers:
            timer.cancel()
            timer.join()


@pytest.fixture
def delays() -> Iterator[Delays]:
    owner = Delays()
    yield owner
    owner.close()


# -- subscribers ------------------------------------------------------------------------------


class Noop(Subscriber[int]):
    """Does nothing at all: never requests, accepts None."""

    def on_subscribe(self, subscription: Subscription) -> None:
        pass

    def on_next(self, element: int) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass


class KeepSubscription(Noop):
    subscription: Subscription

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription


class OneByOne(Subscriber[int]):
    """A correct blackbox subscriber: one subscription, request(1) per element."""

    def __init__(self) -> None:
        self.subscription: Subscription | None = None
        self.received: list[int] = []
        self.completed = threading.Event()

    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("§2.13: subscription is None")
        if self.subscription is not None:
            subscription.cancel()  # §2.5
            return
        self.subscription = subscription
        subscription.request(1)

    def on_next(self, element: int) -> None:
        if element is None:
            raise TypeError("§2.13: element is None")
        self.received.append(element)
        assert self.subscription is not None
        self.subscription.request(1)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("§2.13: error is None")

    def on_complete(self) -> None:
        self.completed.set()


class Unrelated(Subscriber[Any]):
    """A subscriber of something else, whose own on_complete / on_error touch the given
    subscription: such calls are not made from the TCK's terminal signal (§2.3)."""

    def __init__(self, subscription: Subscription, call: str) -> None:
        self.subscription = subscription
        self.call = call

    def _touch(self) -> None:
        if self.call == "cancel":
            self.subscription.cancel()
        else:
            self.subscription.request(1)

    def on_subscribe(self, subscription: Subscription) -> None:
        pass

    def on_next(self, element: Any) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        self._touch()

    def on_complete(self) -> None:
        self._touch()


class Forwarding(SubscriberPuppet):
    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def trigger_request(self, elements: int) -> None:
        self.subscription.request(elements)

    def signal_cancel(self) -> None:
        self.subscription.cancel()


class Reporting(Subscriber[int]):
    """A correct whitebox subscriber: reports every signal, requests only when told."""

    def __init__(self, probe: WhiteboxSubscriberProbe[int]) -> None:
        self.probe = probe
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("§2.13: subscription is None")
        if self.subscription is not None:
            subscription.cancel()  # §2.5
            return
        self.subscription = subscription
        self.probe.register_on_subscribe(Forwarding(subscription))

    def on_next(self, element: int) -> None:
        if element is None:
            raise TypeError("§2.13: element is None")
        self.probe.register_on_next(element)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("§2.13: error is None")
        self.probe.register_on_error(error)

    def on_complete(self) -> None:
        self.probe.register_on_complete()


# -- verifications of given subscribers (no Test prefix: run only through the helpers) ------


class BlackboxOf(SubscriberBlackboxVerification[int]):
    def __init__(self, make: Callable[[], Subscriber[int]]) -> None:
        self.make = make

    def create_subscriber(self) -> Subscriber[int]:
        return self.make()

    def create_element(self, element: int) -> int:
        return element


class WhiteboxOf(SubscriberWhiteboxVerification[int]):
    def __init__(self, make: Callable[[WhiteboxSubscriberProbe[int]], Subscriber[int]]) -> None:
        self.make = make

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return self.make(probe)

    def create_element(self, element: int) -> int:
        return element


def _raises_from_on_error(error: BaseException) -> None:
    # Wrong in many ways: simulates user code that blows up while handling on_error.
    raise RuntimeError("Wrong, don't do this!") from error


# == blackbox: planted violations (3.2) ======================================================


def test_b1_spec201_fails_when_the_subscriber_never_requests() -> None:
    require_test_failure(BlackboxOf(Noop), BB_201, "§2.1: ")
    require_test_failure(BlackboxOf(Noop), BB_201, "did not call request(n) within")


@pytest.mark.parametrize(("check", "signal"), [(BB_203_COMPLETE, "on_complete"),
                                               (BB_203_ERROR, "on_error")])
@pytest.mark.parametrize("call", ["request(1)", "cancel()"])
def test_b2_to_b5_spec203_fails_on_subscription_calls_from_a_terminal_signal(
        check: str, signal: str, call: str) -> None:
    class Broken(KeepSubscription):
        def _touch(self) -> None:
            if call == "cancel()":
                self.subscription.cancel()
            else:
                self.subscription.request(1)

        def on_complete(self) -> None:
            if signal == "on_complete":
                self._touch()

        def on_error(self, error: BaseException) -> None:
            if signal == "on_error":
                self._touch()

    require_test_failure(BlackboxOf(Broken), check,
                         f"called Subscription.{call} from within {signal}")


def test_b6_spec205_fails_when_a_second_subscription_is_requested_from() -> None:
    class Broken(KeepSubscription):
        def on_subscribe(self, subscription: Subscription) -> None:
            super().on_subscribe(subscription)
            subscription.request(1)  # wrong: never checks whether it is already subscribed

    require_test_failure(BlackboxOf(Broken), BB_205,
                         "called request(1) on a second subscription instead of cancelling it")


def test_b7_spec209_with_request_fails_when_the_subscriber_never_requests() -> None:
    require_test_failure(BlackboxOf(Noop), BB_209_WITH, "did not call request(n) within")


def test_b8_spec210_with_request_fails_when_the_subscriber_never_requests() -> None:
    # The reference's B8 is named after §2.10 but runs the §2.9 check; we run §2.10.
    require_test_failure(BlackboxOf(Noop), BB_210_WITH, "did not call request(n) within")


def test_b9_spec210_with_request_fails_when_on_error_raises() -> None:
    class Broken(Noop):
        def on_subscribe(self, subscription: Subscription) -> None:
            subscription.request(1)

        def on_error(self, error: BaseException) -> None:
            _raises_from_on_error(error)

    require_test_failure(BlackboxOf(Broken), BB_210_WITH, RAISED_FROM_ON_ERROR)


@pytest.mark.parametrize(("check", "signal"), [(BB_213_SUBSCRIBE, "on_subscribe"),
                                               (BB_213_NEXT, "on_next"),
                                               (BB_213_ERROR, "on_error")])
def test_b10_to_b12_spec213_fails_when_none_is_accepted(check: str, signal: str) -> None:
    require_test_failure(BlackboxOf(Noop), check, f"{signal}(None) did not raise TypeError")


def test_spec213_fails_when_none_is_rejected_with_the_wrong_error() -> None:
    class Broken(Noop):
        def on_next(self, element: int) -> None:
            raise ValueError("no None here")

    require_test_failure(BlackboxOf(Broken), BB_213_NEXT,
                         "on_next(None) raised ValueError(no None here) instead of TypeError")


# == blackbox: correct subscribers pass (3.7) ===============================================


def test_spec201_passes_for_a_one_by_one_subscriber() -> None:
    require_test_pass(BlackboxOf(OneByOne), BB_201)


@pytest.mark.parametrize(("check", "signal"), [(BB_203_COMPLETE, "on_complete"),
                                               (BB_203_ERROR, "on_error")])
@pytest.mark.parametrize("call", ["request", "cancel"])
def test_spec203_passes_for_unrelated_calls_from_a_method_named_like_a_terminal_signal(
        check: str, signal: str, call: str) -> None:
    class Subscribing(Noop):
        def on_subscribe(self, subscription: Subscription) -> None:
            unrelated = Unrelated(subscription, call)
            if signal == "on_complete":
                unrelated.on_complete()
            else:
                unrelated.on_error(RuntimeError("unrelated"))

    require_test_pass(BlackboxOf(Subscribing), check)


def test_spec205_passes_and_the_first_subscription_gets_completion() -> None:
    subscribers: list[OneByOne] = []

    def make() -> OneByOne:
        subscribers.append(OneByOne())
        return subscribers[-1]

    require_test_pass(BlackboxOf(make), BB_205)
    (subscriber,) = subscribers
    assert subscriber.completed.wait(1), "the kept subscription was not completed"


def test_spec209_without_request_passes_for_a_noop_subscriber() -> None:
    require_test_pass(BlackboxOf(Noop), BB_209_WITHOUT)


@pytest.mark.parametrize("check", [BB_209_WITH, BB_210_WITH])
def test_spec209_and_spec210_with_request_pass_for_a_requesting_subscriber(check: str) -> None:
    class Requesting(Noop):
        def on_subscribe(self, subscription: Subscription) -> None:
            subscription.request(1)

    require_test_pass(BlackboxOf(Requesting), check)


# == blackbox: §2.1 sends elements within demand while not cancelled (our fix of Q1) ========


class Counting(Noop):
    def __init__(self, initial: int, per_element: int = 0, cancel_after: int | None = None
                 ) -> None:
        self.initial = initial
        self.per_element = per_element
        self.cancel_after = cancel_after
        self.received: list[int] = []
        self.completions = 0
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        subscription.request(self.initial)

    def on_next(self, element: int) -> None:
        self.received.append(element)
        assert self.subscription is not None
        if self.cancel_after is not None and len(self.received) == self.cancel_after:
            self.subscription.cancel()
        elif self.per_element:
            self.subscription.request(self.per_element)

    def on_complete(self) -> None:
        self.completions += 1


def _run_spec201(subscriber: Counting) -> Counting:
    require_test_pass(BlackboxOf(lambda: subscriber), BB_201)
    return subscriber


def test_spec201_sends_what_the_first_request_asks_for_then_completes() -> None:
    subscriber = _run_spec201(Counting(initial=5))
    assert subscriber.received == [0, 1, 2, 3, 4]
    assert subscriber.completions == 1


def test_spec201_stops_at_a_cancel_and_sends_nothing_after_it() -> None:
    subscriber = _run_spec201(Counting(initial=10, cancel_after=3))
    assert subscriber.received == [0, 1, 2]
    assert subscriber.completions == 0


def test_spec201_bounds_what_it_sends_and_keeps_every_request_call() -> None:
    # 100 + 1 per element: more request calls than a 32-slot log could hold.
    subscriber = _run_spec201(Counting(initial=2 * SPEC201_MAX_SIGNALS, per_element=1))
    assert len(subscriber.received) == SPEC201_MAX_SIGNALS
    assert subscriber.completions == 1


# == whitebox: planted violations (3.3) =====================================================


def test_w1_spec201_fails_when_trigger_request_does_nothing() -> None:
    class Lazy(SubscriberPuppet):
        def trigger_request(self, elements: int) -> None:
            pass  # forgot to make the subscriber request

        def signal_cancel(self) -> None:
            pass

    class Broken(Reporting):
        def on_subscribe(self, subscription: Subscription) -> None:
            self.probe.register_on_subscribe(Lazy())

    require_test_failure(WhiteboxOf(Broken), WB_201, "§2.1: ")
    require_test_failure(WhiteboxOf(Broken), WB_201, "did not call request(n) within")


@pytest.mark.parametrize(("check", "signal"), [(WB_203_COMPLETE, "on_complete"),
                                               (WB_203_ERROR, "on_error")])
@pytest.mark.parametrize("call", ["request(1)", "cancel()"])
def test_w2_to_w5_spec203_fails_on_subscription_calls_from_a_terminal_signal(
        check: str, signal: str, call: str) -> None:
    class Broken(Reporting):
        def _touch(self) -> None:
            assert self.subscription is not None
            if call == "cancel()":
                self.subscription.cancel()
            else:
                self.subscription.request(1)

        def on_complete(self) -> None:
            if signal == "on_complete":
                self._touch()
            super().on_complete()

        def on_error(self, error: BaseException) -> None:
            if signal == "on_error":
                self._touch()  # and forgets to report it

    require_test_failure(WhiteboxOf(Broken), check,
                         f"called Subscription.{call} from within {signal}")


def test_w6_spec205_fails_when_a_second_subscription_is_not_cancelled() -> None:
    class Broken(Reporting):
        def on_subscribe(self, subscription: Subscription) -> None:
            self.subscription = subscription
            self.probe.register_on_subscribe(Forwarding(subscription))
            subscription.request(1)  # wrong: accepts every subscription

    require_test_failure(WhiteboxOf(Broken), WB_205, "§2.5: ")
    require_test_failure(WhiteboxOf(Broken), WB_205, "did not cancel a second subscription")


def test_w7_spec208_fails_when_on_next_after_cancel_raises() -> None:
    class Broken(Reporting):
        cancelled = False

        def on_subscribe(self, subscription: Subscription) -> None:
            outer = self

            class Puppet(Forwarding):
                def signal_cancel(self) -> None:
                    outer.cancelled = True
                    super().signal_cancel()

            self.subscription = subscription
            self.probe.register_on_subscribe(Puppet(subscription))

        def on_next(self, element: int) -> None:
            if self.cancelled:
                raise RuntimeError("But I thought it's cancelled!")
            super().on_next(element)

    require_test_failure(WhiteboxOf(Broken), WB_208,
                         "raised RuntimeError(But I thought it's cancelled!) from on_next(0)")


def test_w8_spec209_with_request_fails_when_on_complete_is_not_reported() -> None:
    class Broken(Reporting):
        def on_complete(self) -> None:
            pass  # forgot to call the probe

    require_test_failure(WhiteboxOf(Broken), WB_209_WITH, "§2.9: ")
    require_test_failure(WhiteboxOf(Broken), WB_209_WITH,
                         "did not call register_on_complete() within")


def test_w9_spec209_without_request_fails_when_on_subscribe_is_not_reported() -> None:
    class Broken(Reporting):
        def on_subscribe(self, subscription: Subscription) -> None:
            pass  # omits registering with the probe

    require_test_failure(WhiteboxOf(Broken), WB_209_WITHOUT,
                         "did not call register_on_subscribe within")


@pytest.mark.parametrize("check", [WB_210_WITH, WB_210_WITHOUT])
def test_w10_w11_spec210_fails_when_on_error_raises(check: str) -> None:
    class Broken(Reporting):
        def on_error(self, error: BaseException) -> None:
            _raises_from_on_error(error)

    require_test_failure(WhiteboxOf(Broken), check, RAISED_FROM_ON_ERROR)


def test_spec210_fails_when_a_different_error_is_reported() -> None:
    class Broken(Reporting):
        def on_error(self, error: BaseException) -> None:
            self.probe.register_on_error(RuntimeError("something else"))

    require_test_failure(WhiteboxOf(Broken), WB_210_WITHOUT,
                         "called register_on_error(RuntimeError('something else')) but the "
                         "TCK signalled")


def test_happy_path_fails_when_signal_cancel_does_not_cancel() -> None:
    class Stubborn(Forwarding):
        def signal_cancel(self) -> None:
            pass  # forgot to cancel

    class Broken(Reporting):
        def on_subscribe(self, subscription: Subscription) -> None:
            self.subscription = subscription
            self.probe.register_on_subscribe(Stubborn(subscription))

    require_test_failure(WhiteboxOf(Broken), WB_HAPPY, "did not cancel its subscription within")


def test_spec201_fails_on_a_request_for_zero_elements() -> None:
    class Broken(Noop):
        def on_subscribe(self, subscription: Subscription) -> None:
            subscription.request(0)

    require_test_failure(BlackboxOf(Broken), BB_201, "§3.9: ")
    require_test_failure(BlackboxOf(Broken), BB_201, "called request(0)")


def test_spec308_fails_when_more_elements_are_reported_than_were_sent() -> None:
    class Broken(Reporting):
        def on_next(self, element: int) -> None:
            super().on_next(element)
            super().on_next(element)  # reports each element twice

    require_test_failure(WhiteboxOf(Broken), WB_308, "§3.8: ")


@pytest.mark.parametrize(("check", "signal"), [(WB_213_SUBSCRIBE, "on_subscribe"),
                                               (WB_213_NEXT, "on_next"),
                                               (WB_213_ERROR, "on_error")])
def test_spec213_fails_when_none_is_accepted(check: str, signal: str) -> None:
    class Broken(Reporting):
        def on_next(self, element: int) -> None:
            if element is not None:
                super().on_next(element)

        def on_error(self, error: BaseException) -> None:
            if error is not None:
                super().on_error(error)

        def on_subscribe(self, subscription: Subscription) -> None:
            if subscription is not None:
                super().on_subscribe(subscription)

    require_test_failure(WhiteboxOf(Broken), check, f"{signal}(None) did not raise TypeError")


# == whitebox: a subscriber that never registers its puppet (3.5) ===========================


class NoRegister(Reporting):
    def on_subscribe(self, subscription: Subscription) -> None:
        pass  # deliberately never calls probe.register_on_subscribe


STAGED_WHITEBOX_CHECKS = [WB_HAPPY, WB_201, WB_205, WB_208, WB_209_WITHOUT, WB_209_WITH,
                          WB_210_WITHOUT, WB_210_WITH, WB_213_ERROR, WB_213_NEXT,
                          WB_213_SUBSCRIBE, WB_308]


@pytest.mark.parametrize("check", STAGED_WHITEBOX_CHECKS)
def test_n1_to_n12_staged_checks_fail_when_the_puppet_is_never_registered(check: str) -> None:
    require_test_failure(WhiteboxOf(NoRegister), check,
                         "did not call register_on_subscribe within")


@pytest.mark.parametrize("check", [c for c in WHITEBOX_CHECKS if c not in STAGED_WHITEBOX_CHECKS])
def test_unstaged_checks_do_not_need_the_puppet(check: str) -> None:
    if "_untested_" in check:
        require_test_skip(WhiteboxOf(NoRegister), check, NOT_VERIFIED)
    else:
        require_test_pass(WhiteboxOf(NoRegister), check)


# == whitebox: correct subscribers pass (3.7) ===============================================


def test_spec201_passes_for_a_reporting_subscriber() -> None:
    require_test_pass(WhiteboxOf(Reporting), WB_201)


@pytest.mark.parametrize(("check", "signal"), [(WB_203_COMPLETE, "on_complete"),
                                               (WB_203_ERROR, "on_error")])
@pytest.mark.parametrize("call", ["request", "cancel"])
def test_whitebox_spec203_passes_for_unrelated_calls_from_a_method_named_like_a_terminal_signal(
        check: str, signal: str, call: str) -> None:
    class Subscribing(Reporting):
        def on_subscribe(self, subscription: Subscription) -> None:
            super().on_subscribe(subscription)
            unrelated = Unrelated(subscription, call)
            if signal == "on_complete":
                unrelated.on_complete()
            else:
                unrelated.on_error(RuntimeError("unrelated"))

    require_test_pass(WhiteboxOf(Subscribing), check)


def test_spec308_passes_for_a_reporting_subscriber() -> None:
    require_test_pass(WhiteboxOf(Reporting), WB_308)


class SlowDemand(Reporting):
    """Requests and cancels only half the default timeout after being told to; an
    element before the request arrives is a TCK bug (it must wait for real demand)."""

    def __init__(self, probe: WhiteboxSubscriberProbe[int], delays: Delays,
                 one_at_a_time: bool) -> None:
        super().__init__(probe)
        self.delays = delays
        self.one_at_a_time = one_at_a_time
        self.lock = threading.Lock()
        self.demand_requested = False
        self.outstanding = 0

    def _request_later(self, n: int) -> None:
        def request() -> None:
            with self.lock:
                self.demand_requested = True
            assert self.subscription is not None
            self.subscription.request(n)

        self.delays.after(HALF_TIMEOUT_MILLIS, request)

    def on_subscribe(self, subscription: Subscription) -> None:
        outer = self
        self.subscription = subscription

        class Puppet(SubscriberPuppet):
            def trigger_request(self, elements: int) -> None:
                with outer.lock:
                    outer.outstanding += elements
                outer._request_later(1 if outer.one_at_a_time else elements)

            def signal_cancel(self) -> None:
                # Delayed too, so that the cancel cannot overtake the request.
                outer.delays.after(HALF_TIMEOUT_MILLIS, subscription.cancel)

        self.probe.register_on_subscribe(Puppet())

    def on_next(self, element: int) -> None:
        with self.lock:
            demanded = self.demand_requested
            if self.one_at_a_time:
                self.demand_requested = False
            self.outstanding -= 1
            more = self.one_at_a_time and self.outstanding > 0
        if not demanded:
            raise RuntimeError("on_next signalled without demand!")
        if more:
            self._request_later(1)
        super().on_next(element)


@pytest.mark.parametrize("check", [WB_208, WB_308], ids=["spec208", "spec308"])
def test_checks_wait_for_demand_before_signalling(check: str, delays: Delays) -> None:
    require_test_pass(WhiteboxOf(lambda probe: SlowDemand(probe, delays, one_at_a_time=False)),
                      check)


def test_spec308_waits_for_demand_twice_for_one_at_a_time_subscribers(delays: Delays) -> None:
    require_test_pass(WhiteboxOf(lambda probe: SlowDemand(probe, delays, one_at_a_time=True)),
                      WB_308)


# == whole suites for the minimal correct subscribers ========================================


@pytest.mark.parametrize("check", BLACKBOX_CHECKS)
def test_every_blackbox_check_passes_or_skips_for_a_correct_subscriber(check: str) -> None:
    if "_untested_" in check:
        require_test_skip(BlackboxOf(OneByOne), check, NOT_VERIFIED)
    else:
        require_test_pass(BlackboxOf(OneByOne), check)


@pytest.mark.parametrize("check", WHITEBOX_CHECKS)
def test_every_whitebox_check_passes_or_skips_for_a_correct_subscriber(check: str) -> None:
    if "_untested_" in check:
        require_test_skip(WhiteboxOf(Reporting), check, NOT_VERIFIED)
    else:
        require_test_pass(WhiteboxOf(Reporting), check)
