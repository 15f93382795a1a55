"""Self-tests of the publisher verification: every planted violation of the reference
TCK's own tests (TCK.md 3.1, P1-P28) must make its check fail (or skip, where the check
is optional) with our message, and the correct publishers of TCK.md 3.7 must pass.

Every publisher in this file is wrong on purpose, except the few planted in the
"passes" section, which are just enough to satisfy one rule.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from tck_selftest import (
    require_optional_test_pass,
    require_test_failure,
    require_test_pass,
    require_test_skip,
)

from reactive_streams import Publisher, Subscriber, Subscription
from reactive_streams.tck._base import NOT_VERIFIED
from reactive_streams.tck.environment import LONG_MAX, TCKTestError
from reactive_streams.tck.publisher import (
    SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE,
    PublisherVerification,
)

CHECKS = sorted(n for n in dir(PublisherVerification) if n.startswith("test_"))


def _check(fragment: str) -> str:
    (name,) = [n for n in CHECKS if fragment in n]
    return name


SPEC101 = _check("spec101")
SPEC102 = _check("spec102")
SPEC103 = _check("spec103")
SPEC104 = _check("spec104")
SPEC105 = _check("required_spec105")
SPEC105_EMPTY = _check("optional_spec105")
SPEC107 = _check("required_spec107")
SPEC109_NULL = _check("spec109_subscribe_throw_npe")
SPEC109_ON_SUBSCRIBE = _check("spec109_must_issue_on_subscribe")
SPEC109_REJECT = _check("spec109_may_reject")
SPEC110 = _check("spec110")
SPEC111_MULTI = _check("spec111_may_support_multi_subscribe")
SPEC111_REGISTERED = _check("spec111_registered_subscribers")
(SPEC111_UPFRONT,) = [n for n in CHECKS if n.endswith("when_requesting_many_upfront")]
SPEC302 = _check("spec302")
SPEC303 = _check("spec303")
SPEC306 = _check("spec306")
SPEC307 = _check("spec307")
SPEC309_ZERO = _check("spec309_request_zero")
SPEC309_NEGATIVE = _check("required_spec309_request_negative")
SPEC312 = _check("spec312")
SPEC313 = _check("spec313")
SPEC317_PENDING = _check("spec317_must_support_a_pending")
SPEC317_CUMULATIVE = _check("spec317_must_support_a_cumulative")
SPEC317_ABOVE = _check("spec317_must_not_signal_on_error")


# -- the verification the planted publishers run under ---------------------------------------


class Custom(PublisherVerification[int]):
    """Runs checks on given publishers; named without ``Test`` so pytest does not
    collect it as a suite."""

    def __init__(self, publisher: Publisher[int], failed: Publisher[int] | None = None,
                 max_elements: int = LONG_MAX - 1) -> None:
        self.publisher = publisher
        self.failed = failed
        self.max_elements = max_elements

    def create_publisher(self, elements: int) -> Publisher[int]:
        return self.publisher

    def create_failed_publisher(self) -> Publisher[int] | None:
        return self.failed

    def max_elements_from_publisher(self) -> int:
        return self.max_elements


class Planted(Publisher[int]):
    """A publisher whose ``subscribe`` is the given function."""

    def __init__(self, name: str, subscribe: Callable[[Subscriber[int]], None]) -> None:
        self.name = name
        self._subscribe = subscribe

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        self._subscribe(subscriber)

    def __repr__(self) -> str:
        return self.name


class PlantedSubscription(Subscription):
    """A subscription whose ``request`` and ``cancel`` are the given functions."""

    def __init__(self, request: Callable[[int], None] = lambda n: None,
                 cancel: Callable[[], None] = lambda: None) -> None:
        self._request = request
        self._cancel = cancel

    def request(self, n: int) -> None:
        self._request(n)

    def cancel(self) -> None:
        self._cancel()


def noop_publisher() -> Publisher[int]:
    """Hands out a subscription that ignores everything; never signals an element."""
    return Planted("NoopPublisher", lambda s: s.on_subscribe(PlantedSubscription()))


def demand_ignoring_sync_publisher() -> Publisher[int]:
    """Answers request(n) with n + 1 elements, on the caller's thread; never completes,
    and ignores cancel."""

    def subscribe(s: Subscriber[int]) -> None:
        def request(n: int) -> None:
            for i in range(n + 1):  # one too many
                s.on_next(i)

        s.on_subscribe(PlantedSubscription(request))

    return Planted("DemandIgnoringSyncPublisher", subscribe)


def on_erroring_publisher() -> Publisher[int]:
    """Answers every request with on_error."""

    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription(lambda n: s.on_error(TCKTestError())))

    return Planted("OnErroringPublisher", subscribe)


@pytest.fixture
def pool_of_10() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(10, thread_name_prefix="planted-10")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def pool_of_2() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="planted-2")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def _submit(pool: ThreadPoolExecutor, fn: Callable[..., None], *args: Any) -> bool:
    try:
        pool.submit(fn, *args)
    except RuntimeError:  # the pool is shutting down: the test is over
        return False
    return True


class DemandIgnoringAsyncPublisher(Publisher[int]):
    """Two submitter tasks each push ``n + 1`` on_next tasks into a pool, ignoring demand
    and cancel, so elements arrive concurrently from several threads.

    Each submitter stops after 16 elements so its threads end, and so the TCK's
    32-element buffer never overflows: the checks must catch the surplus by themselves.
    """

    SUBMITTERS = 2
    CAP = 16

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._started = 0

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        def request(n: int) -> None:
            # Guarded: the TCK may request again from inside on_next.
            with self._lock:
                start, self._started = self.SUBMITTERS - self._started, self.SUBMITTERS
            for _ in range(start):
                _submit(self.pool, self._push, subscriber, n)

        subscriber.on_subscribe(PlantedSubscription(request))

    def _push(self, subscriber: Subscriber[int], n: int) -> None:
        for i in range(min(n + 1, self.CAP)):
            if not _submit(self.pool, self._signal, subscriber, i):
                return

    @staticmethod
    def _signal(subscriber: Subscriber[int], element: int) -> None:
        try:
            subscriber.on_next(element)
        except Exception:
            pass  # only the TCK's verdict matters here

    def __repr__(self) -> str:
        return "DemandIgnoringAsyncPublisher"


class ConcurrentlySignallingPublisher(Publisher[int]):
    """The first request starts 10 pool threads that each call on_next. Every later
    request (the TCK's, from inside on_next) waits until a second thread is inside
    on_next too, so that two on_next calls overlap for certain, GIL or not."""

    THREADS = 10

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._started = False
        self._pair = threading.Barrier(2, timeout=0.5)

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        def request(n: int) -> None:
            with self._lock:
                first, self._started = not self._started, True
            if first:
                for _ in range(self.THREADS):
                    _submit(self.pool, self._signal, subscriber, n)
                return
            try:
                self._pair.wait()
            except threading.BrokenBarrierError:
                pass  # an odd one out, or the test is over

        subscriber.on_subscribe(PlantedSubscription(request))

    @staticmethod
    def _signal(subscriber: Subscriber[int], n: int) -> None:
        for i in range(n):
            try:
                subscriber.on_next(i)
            except Exception:
                return

    def __repr__(self) -> str:
        return "ConcurrentlySignallingPublisher"


class MultiSubscriberPublisher(Publisher[int]):
    """Serves several subscribers from one shared count of elements; with ``blow_up``, a
    second subscriber gets on_subscribe and then on_error."""

    def __init__(self, elements: int, blow_up: bool) -> None:
        self.left = elements
        self.blow_up = blow_up
        self.subscriptions: list[Subscription] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        state: dict[str, Any] = {"subscriber": subscriber, "cancelled": False}

        def request(n: int) -> None:
            for i in range(n):
                target = state["subscriber"]
                if state["cancelled"] or target is None:
                    return
                with self._lock:
                    left, self.left = self.left, self.left - 1
                if left < 0:
                    state["cancelled"] = True
                    target.on_complete()
                else:
                    target.on_next(i)

        def cancel() -> None:
            state["cancelled"], state["subscriber"] = True, None
            with self._lock:
                if subscription in self.subscriptions:
                    self.subscriptions.remove(subscription)

        subscription = PlantedSubscription(request, cancel)
        subscriber.on_subscribe(subscription)
        with self._lock:
            refuse = self.blow_up and bool(self.subscriptions)
            if not refuse:
                self.subscriptions.append(subscription)
        if refuse:
            subscriber.on_error(RuntimeError("Unexpected additional subscriber"))

    def __repr__(self) -> str:
        return "MultiSubscriberPublisher"


class MultiSubscriberVerification(PublisherVerification[int]):
    def __init__(self, blow_up: bool) -> None:
        self.blow_up = blow_up

    def create_publisher(self, elements: int) -> Publisher[int]:
        return MultiSubscriberPublisher(elements, self.blow_up)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return None


def require_real_failure(verification: PublisherVerification[int], check: str,
                         fragment: str) -> None:
    """As require_test_failure, and the check must not merely skip."""
    require_test_failure(verification, check, fragment)
    verification.setup_method()
    try:
        getattr(verification, check)()
    except pytest.skip.Exception as skip:
        pytest.fail(f"{check} skipped ({skip}), but it must really fail")
    except AssertionError:
        pass


# -- the checks themselves ---------------------------------------------------------------------

#: The reference TCK's 38 PublisherVerification test methods, as declared in Java.
JAVA_CHECKS = """
required_createPublisher1MustProduceAStreamOfExactly1Element
required_createPublisher3MustProduceAStreamOfExactly3Elements
required_validate_maxElementsFromPublisher
required_validate_boundedDepthOfOnNextAndRequestRecursion
required_spec101_subscriptionRequestMustResultInTheCorrectNumberOfProducedElements
required_spec102_maySignalLessThanRequestedAndTerminateSubscription
stochastic_spec103_mustSignalOnMethodsSequentially
optional_spec104_mustSignalOnErrorWhenFails
required_spec105_mustSignalOnCompleteWhenFiniteStreamTerminates
optional_spec105_emptyStreamMustTerminateBySignallingOnComplete
untested_spec106_mustConsiderSubscriptionCancelledAfterOnErrorOrOnCompleteHasBeenCalled
required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled
untested_spec107_mustNotEmitFurtherSignalsOnceOnErrorHasBeenSignalled
untested_spec108_possiblyCanceledSubscriptionShouldNotReceiveOnErrorOrOnCompleteSignals
untested_spec109_subscribeShouldNotThrowNonFatalThrowable
required_spec109_subscribeThrowNPEOnNullSubscriber
required_spec109_mustIssueOnSubscribeForNonNullSubscriber
required_spec109_mayRejectCallsToSubscribeIfPublisherIsUnableOrUnwillingToServeThemRejectionMustTriggerOnErrorAfterOnSubscribe
untested_spec110_rejectASubscriptionRequestIfTheSameSubscriberSubscribesTwice
optional_spec111_maySupportMultiSubscribe
optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals
optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingOneByOne
optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfront
optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfrontAndCompleteAsExpected
required_spec302_mustAllowSynchronousRequestCallsFromOnNextAndOnSubscribe
required_spec303_mustNotAllowUnboundedRecursion
untested_spec304_requestShouldNotPerformHeavyComputations
untested_spec305_cancelMustNotSynchronouslyPerformHeavyComputation
required_spec306_afterSubscriptionIsCancelledRequestMustBeNops
required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops
required_spec309_requestZeroMustSignalIllegalArgumentException
required_spec309_requestNegativeNumberMustSignalIllegalArgumentException
optional_spec309_requestNegativeNumberMaySignalIllegalArgumentExceptionWithSpecificMessage
required_spec312_cancelMustMakeThePublisherToEventuallyStopSignaling
required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber
required_spec317_mustSupportAPendingElementCountUpToLongMaxValue
required_spec317_mustSupportACumulativePendingElementCountUpToLongMaxValue
required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue
""".split()


def py_test_name(java_name: str) -> str:
    """The Java -> Python test-name rule of TCK.md section 0."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", java_name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return "test_" + s.lower()


def test_has_exactly_the_38_checks_of_the_reference_tck() -> None:
    assert len(JAVA_CHECKS) == 38
    assert CHECKS == sorted(py_test_name(j) for j in JAVA_CHECKS)


def test_private_helpers_are_prefixed_so_a_processor_verification_can_inherit_them() -> None:
    # IdentityProcessorVerification inherits this class and the whitebox one.
    private = [n for n in vars(PublisherVerification)
               if n.startswith("_") and not n.startswith("__") and n != "_abc_impl"]
    assert private, "expected some private helpers"
    assert [n for n in private if not n.startswith("_pv_")] == []


# -- planted violations (TCK.md 3.1) -------------------------------------------------------------


def test_p01_spec101_fails_when_request_produces_no_element() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC101,
                         "NoopPublisher signalled no element after the first request(1)")


def test_p02_spec102_fails_when_no_element_arrives() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC102,
                         "NoopPublisher signalled fewer than its 3 elements after request(10)")


def test_p03_spec102_fails_when_too_many_elements_arrive() -> None:
    verification = Custom(demand_ignoring_sync_publisher())
    require_test_failure(verification, SPEC102,
                         "§1.1: received 11 on_next for a total demand of 10")
    require_test_failure(verification, SPEC102,
                         "must signal on_complete, but signalled element [3] instead")


def test_p04_spec103_fails_on_concurrent_on_next(pool_of_10: ThreadPoolExecutor) -> None:
    require_test_failure(Custom(ConcurrentlySignallingPublisher(pool_of_10)), SPEC103,
                         "§1.3: illegal concurrent access detected: on_next(")


def test_p05_spec104_really_fails_when_subscribe_raises() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        raise RuntimeError("It is not valid to throw here!")

    require_real_failure(
        Custom(noop_publisher(), failed=Planted("ThrowingPublisher", subscribe)), SPEC104,
        "§1.4: the failed publisher ThrowingPublisher raised RuntimeError(It is not valid to "
        "throw here!) from subscribe() instead of signalling on_error")


def test_p06_spec105_fails_when_on_complete_is_forgotten() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        sent = iter(range(LONG_MAX))

        def request(n: int) -> None:
            for _ in range(n):
                s.on_next(next(sent))  # and never on_complete

        s.on_subscribe(PlantedSubscription(request))

    require_test_failure(
        Custom(Planted("NeverCompletes", subscribe)), SPEC105,
        "§1.5: after its 3 elements, NeverCompletes must signal on_complete, but signalled "
        "element [3] instead")


def test_p07_spec105_empty_stream_skips_on_eager_on_complete() -> None:
    eager = Planted("EagerlyCompleting", lambda s: s.on_complete())  # no on_subscribe
    require_test_skip(Custom(eager, max_elements=0), SPEC105_EMPTY,
                      "on_subscribe should be called prior to on_complete always")


def test_p08_spec107_fails_for_a_publisher_that_never_completes() -> None:
    require_test_failure(
        Custom(demand_ignoring_sync_publisher()), SPEC107,
        "§1.5: after its 1 element, DemandIgnoringSyncPublisher must signal on_complete, but "
        "signalled element [")


def test_p09_spec107_fails_for_a_publisher_that_serves_after_completing() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        completed = False

        def request(n: int) -> None:
            nonlocal completed
            s.on_next(0)
            if not completed:  # completes, but keeps serving data
                s.on_complete()
                completed = True

        s.on_subscribe(PlantedSubscription(request))

    require_test_failure(Custom(Planted("ServesAfterCompleting", subscribe)), SPEC107,
                         "§1.7: unexpected element 0 received after stream completed")


def test_p10_spec109_fails_when_subscribe_accepts_none() -> None:
    ignoring = Planted("AcceptsNone", lambda s: None)
    require_test_failure(Custom(ignoring), SPEC109_NULL,
                         "§1.9: AcceptsNone did not raise TypeError when subscribe was called "
                         "with None")


def test_p11_spec109_fails_when_on_complete_comes_first() -> None:
    require_test_failure(Custom(Planted("CompletesFirst", lambda s: s.on_complete())),
                         SPEC109_ON_SUBSCRIBE,
                         "§1.9: CompletesFirst called on_complete() before on_subscribe")


def test_p12_spec109_fails_when_on_next_comes_first() -> None:
    require_test_failure(Custom(Planted("NextFirst", lambda s: s.on_next(1337))),
                         SPEC109_ON_SUBSCRIBE,
                         "§1.9: NextFirst called on_next(1337) before on_subscribe")


def test_p13_spec109_fails_when_on_error_comes_first() -> None:
    require_test_failure(Custom(Planted("ErrorFirst", lambda s: s.on_error(TCKTestError()))),
                         SPEC109_ON_SUBSCRIBE,
                         "§1.9: ErrorFirst called on_error(TCKTestError('Test Exception: Boom!'))"
                         " before on_subscribe")


def test_p14_spec109_reject_fails_without_on_error() -> None:
    silent = Planted("NeverErrs", lambda s: s.on_subscribe(PlantedSubscription()))
    require_test_failure(Custom(noop_publisher(), failed=silent), SPEC109_REJECT,
                         "§1.9: the failed publisher NeverErrs did not signal on_error after "
                         "on_subscribe within 100 ms")


def test_p15_spec110_is_not_verified() -> None:
    require_test_skip(Custom(noop_publisher()), SPEC110, NOT_VERIFIED)


def test_p16_spec111_multicast_skips_when_sequences_differ() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        rnd = random.Random()

        def request(n: int) -> None:
            for _ in range(n):
                s.on_next(rnd.getrandbits(31))

        s.on_subscribe(PlantedSubscription(request))

    require_test_skip(Custom(Planted("RandomPublisher", subscribe)), SPEC111_UPFRONT,
                      "§1.11: expected the same elements in the same order for the 1st and 2nd "
                      "subscribers of RandomPublisher, but they differ at index 0")


def test_p17_spec302_fails_on_async_error() -> None:
    require_test_failure(Custom(on_erroring_publisher()), SPEC302,
                         "Async error during test execution: Test Exception: Boom!")


def test_p18_spec303_fails_on_unbounded_recursion() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription(lambda n: s.on_next(0)))  # naive recursion

    require_test_failure(Custom(Planted("Recursing", subscribe)), SPEC303,
                         "on_next -> request -> on_next ...), but the recursion bound is 1")


def test_p19_spec306_fails_when_requests_after_cancel_signal() -> None:
    require_test_failure(Custom(demand_ignoring_sync_publisher()), SPEC306,
                         "§3.6: received 1 on_next for a total demand of 0 from "
                         "DemandIgnoringSyncPublisher, after 1 request() call made after "
                         "cancel(), which must be a no-op")


def test_p20_spec307_fails_when_cancel_signals_on_error() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription(cancel=lambda: s.on_error(TCKTestError())))

    require_test_failure(Custom(Planted("ErrsOnCancel", subscribe)), SPEC307,
                         "§3.7: cancel() after cancel() must be a no-op: Async error during "
                         "test execution: Test Exception: Boom!")


def test_p21_spec309_fails_when_request_zero_is_ignored() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC309_ZERO,
                         "§3.9: NoopPublisher did not signal on_error(ValueError) after "
                         "request(0)")


def test_p22_spec309_fails_when_a_negative_request_is_ignored() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC309_NEGATIVE,
                         "§3.9: NoopPublisher did not signal on_error(ValueError) after "
                         "request(-")


def test_p23_spec312_fails_when_more_than_demanded_is_signalled(
        pool_of_2: ThreadPoolExecutor) -> None:
    require_test_failure(Custom(DemandIgnoringAsyncPublisher(pool_of_2)), SPEC312,
                         ", which is more than the signalled demand: 15")


def test_p24_spec313_fails_when_the_subscriber_is_kept() -> None:
    kept: list[Subscriber[int]] = []

    def subscribe(s: Subscriber[int]) -> None:
        kept.append(s)  # and cancel does not let go of it

        def request(n: int) -> None:
            for _ in range(n):
                s.on_next(n)

        s.on_subscribe(PlantedSubscription(request))

    require_test_failure(Custom(Planted("KeepsSubscriber", subscribe)), SPEC313,
                         "§3.13: KeepsSubscriber did not drop its reference to the TCK's "
                         "subscriber within")


def test_p25_spec317_fails_on_async_demand_ignoring_publisher(
        pool_of_10: ThreadPoolExecutor) -> None:
    require_test_failure(Custom(DemandIgnoringAsyncPublisher(pool_of_10)), SPEC317_PENDING,
                         "after its 3 elements DemandIgnoringAsyncPublisher must signal "
                         "on_complete, but signalled element [")


def test_p26_spec317_fails_on_sync_demand_ignoring_publisher() -> None:
    require_test_failure(Custom(demand_ignoring_sync_publisher()), SPEC317_PENDING,
                         "received more than bufferSize (32) on_next signals")


def test_p27_spec317_fails_when_demand_overflow_is_signalled_as_error() -> None:
    demand = 0

    def subscribe(s: Subscriber[int]) -> None:
        def request(n: int) -> None:
            nonlocal demand
            demand += n  # no cap at LONG_MAX
            if demand > LONG_MAX:  # where Java's long would wrap negative
                s.on_error(RuntimeError("Illegally signalling on_error (violates rule 3.17)"))
            else:
                s.on_next(0)

        s.on_subscribe(PlantedSubscription(request))

    require_test_failure(Custom(Planted("Overflowing", subscribe)), SPEC317_ABOVE,
                         "Async error during test execution: Illegally signalling on_error "
                         "(violates rule 3.17)")


def test_p28_spec317_fails_when_demand_of_exactly_long_max_is_refused() -> None:
    demand = 0

    def subscribe(s: Subscriber[int]) -> None:
        def request(n: int) -> None:
            nonlocal demand
            demand += n
            if demand == LONG_MAX:  # wrong: this much demand is legal
                s.on_error(RuntimeError("Illegally signalling on_error too soon! Cumulative "
                                        "demand equal to LONG_MAX is legal."))
            s.on_next(0)

        s.on_subscribe(PlantedSubscription(request))

    require_test_failure(Custom(Planted("RefusesLongMax", subscribe)), SPEC317_CUMULATIVE,
                         "Async error during test execution: Illegally signalling on_error too "
                         "soon!")


# -- where our checks are stricter than the reference (no passing on silence) --------------------


def test_spec101_names_the_surplus_element_as_it_arrives() -> None:
    require_test_failure(Custom(demand_ignoring_sync_publisher()), SPEC101,
                         "§1.1: received 2 on_next for a total demand of 1 from "
                         "DemandIgnoringSyncPublisher")


def test_spec302_fails_when_nothing_arrives() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC302,
                         "§3.2: NoopPublisher signalled only 0 of its 6 elements")


def test_spec303_fails_when_the_stream_ends_before_the_recursion() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription(lambda n: s.on_complete()))

    require_test_failure(Custom(Planted("EndsAtOnce", subscribe)), SPEC303,
                         "§3.3: could not measure the recursion depth: EndsAtOnce signalled "
                         "on_complete after 0 of its 2 elements")


def test_spec317_above_long_max_fails_when_nothing_arrives() -> None:
    require_test_failure(Custom(noop_publisher()), SPEC317_ABOVE,
                         "§3.17: NoopPublisher signalled only 0 elements")


# -- passes and skips (TCK.md 3.7) -------------------------------------------------------------


def test_spec103_passes_for_a_synchronous_publisher() -> None:
    # Signals nest on one thread (request from on_next signals again): not an overlap.
    def subscribe(s: Subscriber[int]) -> None:
        element = 0

        def request(n: int) -> None:
            nonlocal element
            for _ in range(n):
                s.on_next(element)
                element += 1
            s.on_complete()

        s.on_subscribe(PlantedSubscription(request))

    require_test_pass(Custom(Planted("Synchronous", subscribe)), SPEC103)


def test_spec109_reject_passes_for_on_subscribe_then_on_error() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription())
        s.on_error(RuntimeError("Sorry, I'm busy now. Call me later."))

    require_test_pass(Custom(noop_publisher(), failed=Planted("Busy", subscribe)),
                      SPEC109_REJECT)


def test_spec111_multi_subscribe_passes_for_a_noop_publisher() -> None:
    require_test_pass(Custom(noop_publisher()), SPEC111_MULTI)


def test_spec111_registered_subscribers_pass_for_a_multi_subscriber_publisher() -> None:
    require_test_pass(MultiSubscriberVerification(blow_up=False), SPEC111_REGISTERED)


def test_spec307_passes_for_the_demand_ignoring_publisher() -> None:
    require_test_pass(Custom(demand_ignoring_sync_publisher()), SPEC307)


def test_spec309_request_zero_passes_with_any_value_error_message() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        def request(n: int) -> None:
            if n <= 0:
                s.on_error(ValueError("Illegal request value detected!"))

        s.on_subscribe(PlantedSubscription(request))

    require_test_pass(Custom(Planted("AnyMessage", subscribe)), SPEC309_ZERO)


def test_spec317_above_long_max_passes_for_a_synchronous_publisher() -> None:
    sent = 0

    def subscribe(s: Subscriber[int]) -> None:
        started = cancelled = False

        def request(n: int) -> None:
            nonlocal started, sent
            if not started:
                started = True
                while not cancelled:
                    s.on_next(sent)
                    sent += 1

        def cancel() -> None:
            nonlocal cancelled
            cancelled = True

        s.on_subscribe(PlantedSubscription(request, cancel))

    require_test_pass(Custom(Planted("UntilCancelled", subscribe)), SPEC317_ABOVE)
    # One on_next, ten requests of LONG_MAX - 1 from on_next, the eleventh cancels.
    assert sent == 11


def test_spec105_empty_stream_passes_when_on_complete_is_synchronous() -> None:
    def subscribe(s: Subscriber[int]) -> None:
        s.on_subscribe(PlantedSubscription())
        s.on_complete()

    require_optional_test_pass(Custom(Planted("SyncEmpty", subscribe), max_elements=0),
                               SPEC105_EMPTY)


def test_spec104_skips_without_a_failed_publisher() -> None:
    require_test_skip(Custom(noop_publisher()), SPEC104, SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE)


def test_spec109_reject_skips_without_a_failed_publisher() -> None:
    require_test_skip(Custom(noop_publisher()), SPEC109_REJECT,
                      SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE)


def test_spec111_registered_subscribers_skips_when_a_second_subscriber_is_refused() -> None:
    require_test_skip(MultiSubscriberVerification(blow_up=True), SPEC111_REGISTERED,
                      "Unexpected additional subscriber")
