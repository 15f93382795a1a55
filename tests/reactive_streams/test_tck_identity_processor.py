"""IdentityProcessorVerification: the shipped MapProcessor passes it, it carries every
publisher and whitebox check, and its own checks catch a processor that swallows errors."""

from __future__ import annotations

from tck_selftest import require_test_failure, require_test_pass, require_test_skip

from reactive_streams import MapProcessor, Processor, Publisher, Subscriber, Subscription
from reactive_streams.tck import (
    IdentityProcessorVerification,
    PublisherVerification,
    SubscriberWhiteboxVerification,
)


def _identity(buffer_size: int) -> MapProcessor[int, int]:
    return MapProcessor(lambda x: x, buffer_size=buffer_size)


class TestMapProcessorIdentity(IdentityProcessorVerification[int]):
    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return _identity(buffer_size)

    def create_failed_publisher(self) -> Publisher[int] | None:
        processor = _identity(16)
        processor.on_error(RuntimeError("this processor's upstream failed"))
        return processor

    def create_element(self, element: int) -> int:
        return element


def _checks(cls: type) -> set[str]:
    return {name for name in dir(cls) if name.startswith("test_")}


def test_the_processor_class_carries_every_publisher_and_whitebox_check() -> None:
    publisher, whitebox = _checks(PublisherVerification), _checks(SubscriberWhiteboxVerification)
    processor = _checks(IdentityProcessorVerification)
    assert (len(publisher), len(whitebox)) == (38, 27)
    assert publisher | whitebox <= processor
    assert processor - publisher - whitebox == {
        "test_required_spec104_must_call_on_error_on_all_its_subscribers_if_it_encounters_a_"
        "non_recoverable_error",
        "test_must_immediately_pass_on_on_error_events_received_from_its_upstream_to_its_"
        "downstream",
        "test_required_must_request_from_upstream_for_elements_that_have_been_requested_long_"
        "ago",
    }
    assert len(processor) == 68


class _ErrorSwallowingProcessor(Processor[int, int]):
    """I1: drops upstream on_error; answers each downstream request with on_next(0)."""

    def __init__(self) -> None:
        self.downstream: list[Subscriber[int]] = []

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(1)

    def on_next(self, element: int) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass  # the planted defect

    def on_complete(self) -> None:
        pass

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        class _Zeros(Subscription):
            def request(self, n: int) -> None:
                subscriber.on_next(0)

            def cancel(self) -> None:
                pass

        subscriber.on_subscribe(_Zeros())


class _SwallowingVerification(IdentityProcessorVerification[int]):
    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return _ErrorSwallowingProcessor()

    def create_failed_publisher(self) -> Publisher[int] | None:
        return None

    def create_element(self, element: int) -> int:
        return element


def test_i1_a_processor_swallowing_upstream_errors_fails_spec104() -> None:
    require_test_failure(
        _SwallowingVerification(),
        "test_required_spec104_must_call_on_error_on_all_its_subscribers_if_it_encounters_a_"
        "non_recoverable_error",
        "did not receive expected error on downstream within")


def test_a_processor_swallowing_upstream_errors_fails_the_immediate_error_check() -> None:
    require_test_failure(
        _SwallowingVerification(),
        "test_must_immediately_pass_on_on_error_events_received_from_its_upstream_to_its_"
        "downstream",
        "§4.2: a subscriber without demand: did not receive expected error")


class _SingleSubscriberVerification(TestMapProcessorIdentity):
    def max_supported_subscribers(self) -> int:
        return 1


def test_multi_subscriber_checks_skip_for_a_single_subscriber_processor() -> None:
    for check in (
            "test_required_spec104_must_call_on_error_on_all_its_subscribers_if_it_"
            "encounters_a_non_recoverable_error",
            "test_required_must_request_from_upstream_for_elements_that_have_been_requested_"
            "long_ago"):
        require_test_skip(_SingleSubscriberVerification(), check,
                          "only supports 1 subscribers, while this test requires at least 2")


class _LateProcessor(Processor[int, int]):
    """Forwards upstream demand only for the first subscriber: a second one never gets
    the element it asks for."""

    def __init__(self) -> None:
        self.inner: MapProcessor[int, int] = _identity(16)
        self.count = 0

    def on_subscribe(self, subscription: Subscription) -> None:
        self.inner.on_subscribe(subscription)

    def on_next(self, element: int) -> None:
        self.inner.on_next(element)

    def on_error(self, error: BaseException) -> None:
        self.inner.on_error(error)

    def on_complete(self) -> None:
        self.inner.on_complete()

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        self.count += 1
        if self.count == 1:
            self.inner.subscribe(subscriber)
            return

        class _Deaf(Subscription):
            def request(self, n: int) -> None:
                pass

            def cancel(self) -> None:
                pass

        subscriber.on_subscribe(_Deaf())


class _LateVerification(TestMapProcessorIdentity):
    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return _LateProcessor()


def test_a_processor_that_starves_a_late_subscriber_fails_the_long_ago_check() -> None:
    require_test_failure(
        _LateVerification(),
        "test_required_must_request_from_upstream_for_elements_that_have_been_requested_long_"
        "ago",
        "timeout while awaiting")


def test_the_own_checks_pass_for_the_map_processor() -> None:
    for check in sorted(_checks(IdentityProcessorVerification) - _checks(PublisherVerification)
                        - _checks(SubscriberWhiteboxVerification)):
        require_test_pass(TestMapProcessorIdentity(), check)


