"""Verification of an identity Processor: every Publisher check with the processor as
the publisher, every whitebox Subscriber check with it as the subscriber, and three
checks of its own about errors and demand with several subscribers (§4.1)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Generic, TypeVar

from ..api import Processor, Publisher, Subscriber, Subscription
from .environment import (
    LONG_MAX,
    TEST_BUFFER_SIZE,
    ManualPublisher,
    ManualSubscriber,
    ManualSubscriberWithSubscriptionSupport,
    Promise,
    TestEnvironment,
)
from .publisher import PublisherVerification
from .subscriber_whitebox import (
    SubscriberPuppet,
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

__all__ = ["IdentityProcessorVerification"]

T = TypeVar("T")

_COORDINATION_HINT = (
    "If the processor coordinates requests/emissions when having multiple subscribers at "
    "once, override does_coordinated_emission() to return True so that this check expects "
    "that.")


class IdentityProcessorVerification(PublisherVerification[T], SubscriberWhiteboxVerification[T],
                                    Generic[T]):
    """Verification of a ``Processor[T, T]`` that passes every element through unchanged.

    Subclass it as a pytest test class and implement :meth:`create_identity_processor`,
    ``create_failed_publisher`` (may return ``None``) and ``create_element``. As a
    publisher, a new processor is subscribed to ``create_helper_publisher(n)``; as a
    subscriber, a new processor gets a downstream subscriber that reports to the probe
    (the puppet's ``trigger_request``/``signal_cancel`` become that subscriber's
    ``request``/``cancel``). Element values are published on
    ``publisher_executor_service()``, by default a pool of 4 threads owned by the class.

    Hooks beyond those of the two parent classes: :meth:`processor_buffer_size`,
    :meth:`max_supported_subscribers` and :meth:`does_coordinated_emission`.

    Examples
    --------
    >>> from reactive_streams import MapProcessor
    >>> from reactive_streams.tck import IdentityProcessorVerification
    >>> class TestIdentity(IdentityProcessorVerification[int]):
    ...     def create_identity_processor(self, buffer_size):
    ...         return MapProcessor(lambda x: x, buffer_size=buffer_size)
    ...     def create_failed_publisher(self):
    ...         return None
    ...     def create_element(self, element):
    ...         return element
    """

    @abstractmethod
    def create_identity_processor(self, buffer_size: int) -> Processor[T, T]:
        """A new processor that passes elements through unchanged and can buffer at least
        ``buffer_size`` of them."""

    def processor_buffer_size(self) -> int:
        """The ``buffer_size`` given to every :meth:`create_identity_processor` call."""
        return TEST_BUFFER_SIZE

    def max_supported_subscribers(self) -> int:
        """How many subscribers the processor serves at once; below 2 skips the
        multi-subscriber checks."""
        return LONG_MAX

    def does_coordinated_emission(self) -> bool:
        """True if the processor emits an element only once all its subscribers have
        demand for it (it then changes the request pattern of the multi-subscriber
        checks)."""
        return False

    # -- the processor as the publisher and as the subscriber under test ----------------------

    def create_publisher(self, elements: int) -> Publisher[T]:
        processor = self.create_identity_processor(self.processor_buffer_size())
        self.create_helper_publisher(elements).subscribe(processor)
        return processor

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[T]) -> Subscriber[T]:
        processor = self.create_identity_processor(self.processor_buffer_size())
        processor.subscribe(_ProbeReporter(self.env, probe))
        return processor

    # -- checks of its own ---------------------------------------------------------------------

    def test_required_spec104_must_call_on_error_on_all_its_subscribers_if_it_encounters_a_non_recoverable_error(  # noqa: E501
            self) -> None:
        self._ip_needs_subscribers(2)
        setup = _ProcessorSetup(self)
        first = setup.error_collecting_subscriber()
        second = setup.error_collecting_subscriber()
        error = RuntimeError("Test exception")
        if self.does_coordinated_emission():
            first.request(1)
            second.request(1)
            setup.expect_request()
            x = setup.send_next_from_upstream()
            setup.expect_next_element(first, x)
            setup.expect_next_element(second, x)
            first.request(1)
            second.request(1)
        else:
            first.request(1)
            setup.expect_request(error_message_addendum=_COORDINATION_HINT)
            x = setup.send_next_from_upstream()
            setup.expect_next_element(first, x, _COORDINATION_HINT)
            first.request(1)
            # first has had one element and has one more requested; second asked nothing
        setup.send_error(error)
        first.expect_error_instance(error, "§1.4/§4.2: the first subscriber")
        second.expect_error_instance(error, "§1.4/§4.2: the second subscriber")
        self.env.verify_no_async_errors_no_delay()
        setup.close()

    def test_must_immediately_pass_on_on_error_events_received_from_its_upstream_to_its_downstream(
            self) -> None:
        setup = _ProcessorSetup(self)
        subscriber = setup.error_collecting_subscriber()
        error = RuntimeError("Test exception")
        setup.send_error(error)
        # "immediately": the subscriber never requested anything
        subscriber.expect_error_instance(error, "§4.2: a subscriber without demand")
        self.env.verify_no_async_errors_no_delay()
        setup.close()

    def test_required_must_request_from_upstream_for_elements_that_have_been_requested_long_ago(
            self) -> None:
        self._ip_needs_subscribers(2)
        setup = _ProcessorSetup(self)
        first = setup.new_subscriber()
        first.request(20)
        total_requests = setup.expect_request()
        x = setup.send_next_from_upstream()
        setup.expect_next_element(first, x)
        if total_requests == 1:
            total_requests += setup.expect_request()
        y = setup.send_next_from_upstream()
        setup.expect_next_element(first, y)
        if total_requests == 2:
            total_requests += setup.expect_request()
        second = setup.new_subscriber()
        # first has 18 requested and outstanding; second has nothing requested
        if self.does_coordinated_emission():
            second.expect_none()
            second.request(1)
            z = setup.send_next_from_upstream()
            setup.expect_next_element(first, z)
            setup.expect_next_element(second, z)
        else:
            z = setup.send_next_from_upstream()
            setup.expect_next_element(first, z, _COORDINATION_HINT)
            second.expect_none()  # §1.1: it has not requested anything yet
            second.request(1)
            setup.expect_next_element(second, z)
        if total_requests == 3:
            setup.expect_request()
        setup.send_completion()
        first.expect_completion()
        second.expect_completion()
        self.env.verify_no_async_errors_no_delay()
        setup.close()

    def _ip_needs_subscribers(self, required: int) -> None:
        supported = self.max_supported_subscribers()
        if required > supported:
            self.not_verified(f"The Publisher under test only supports {supported} "
                              f"subscribers, while this test requires at least {required} "
                              "to run.")


class _ProbeReporter(Subscriber[T], Generic[T]):
    """The processor's downstream in whitebox checks: reports every signal to the probe."""

    def __init__(self, env: TestEnvironment, probe: WhiteboxSubscriberProbe[T]) -> None:
        self.env = env
        self.probe = probe
        self.subscribed = False

    def on_subscribe(self, subscription: Subscription) -> None:
        if self.subscribed:
            subscription.cancel()  # the reporter must itself pass the subscriber rules
            return
        self.subscribed = True

        class _Puppet(SubscriberPuppet):
            def trigger_request(self, elements: int) -> None:
                subscription.request(elements)

            def signal_cancel(self) -> None:
                subscription.cancel()

        self.probe.register_on_subscribe(_Puppet())

    def on_next(self, element: T) -> None:
        self.probe.register_on_next(element)

    def on_error(self, error: BaseException) -> None:
        self.probe.register_on_error(error)

    def on_complete(self) -> None:
        self.probe.register_on_complete()


class _ErrorCollectingSubscriber(ManualSubscriberWithSubscriptionSupport[T], Generic[T]):
    """Keeps the error it receives, to compare it by identity with the one sent upstream."""

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self.error: Promise[BaseException] = Promise(env)

    def on_error(self, error: BaseException) -> None:
        self.error.complete(error)

    def expect_error_instance(self, expected: BaseException, who: str) -> None:
        self.error.expect_completion(self.env.default_timeout_millis,
                                     f"{who}: did not receive expected error on downstream")
        received = self.error.value()
        if received is not expected:
            self.env.flop(f"{who}: expected error {expected!r} but got {received!r}")


class _ProcessorSetup(ManualPublisher[T], Generic[T]):
    """A processor under test behind a TCK-driven upstream, with a supply of distinct
    element values from the helper publisher."""

    def __init__(self, verification: IdentityProcessorVerification[T]) -> None:
        super().__init__(verification.env)
        self._values = self.env.new_manual_subscriber(
            verification.create_helper_publisher(LONG_MAX))
        self._seen: set[Any] = set()
        self.processor = verification.create_identity_processor(
            verification.processor_buffer_size())
        self.subscribe(self.processor)

    def new_subscriber(self) -> ManualSubscriber[T]:
        return self.env.new_manual_subscriber(self.processor)

    def error_collecting_subscriber(self) -> _ErrorCollectingSubscriber[T]:
        subscriber: _ErrorCollectingSubscriber[T] = _ErrorCollectingSubscriber(self.env)
        self.env.subscribe(self.processor, subscriber)
        return subscriber

    def next_value(self) -> T:
        value = self._values.request_next_element()
        if value in self._seen:
            self.env.flop(f"The helper publisher illegally produced the same element "
                          f"{value!r} twice")
        self._seen.add(value)
        return value

    def send_next_from_upstream(self) -> T:
        value = self.next_value()
        self.send_next(value)
        return value

    def expect_next_element(self, subscriber: ManualSubscriber[T], expected: T,
                            addendum: str = "") -> None:
        message = f"timeout while awaiting {expected!r}"
        if addendum:
            message = f"{message}. {addendum}"
        element = subscriber.next_element(error_message=message)
        if element != expected:
            self.env.flop(f"Received `on_next({element!r})` on downstream but expected "
                          f"`on_next({expected!r})`")

    def close(self) -> None:
        """End the value supply so that the helper publisher's thread is released."""
        self._values.cancel()
