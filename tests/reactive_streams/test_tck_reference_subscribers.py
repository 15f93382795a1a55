"""The TCK as oracle for the subscribers the project ships: SyncSubscriber and
AsyncSubscriber under the blackbox and the whitebox verification, with the default batch
and with a batch of one (which requests again after every element)."""

from __future__ import annotations

from typing import Any

from reactive_streams import AsyncSubscriber, Subscriber, Subscription, SyncSubscriber
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification
from reactive_streams.tck.subscriber_whitebox import (
    SubscriberPuppet,
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

# -- blackbox: the subscribers as users write them ----------------------------------------


class Drop(SyncSubscriber[int]):
    def on_element(self, element: int) -> None:
        pass


class AsyncDrop(AsyncSubscriber[int]):
    def on_element(self, element: int) -> None:
        pass


class TestSyncSubscriberBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return Drop()

    def create_element(self, element: int) -> int:
        return element


class TestSyncSubscriberBatchOfOneBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return Drop(batch_size=1)

    def create_element(self, element: int) -> int:
        return element


class TestAsyncSubscriberBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return AsyncDrop()

    def create_element(self, element: int) -> int:
        return element


class TestAsyncSubscriberBatchOfOneBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return AsyncDrop(batch_size=1)

    def create_element(self, element: int) -> int:
        return element


# -- whitebox: thin subclasses that report to the probe -----------------------------------


class BatchPuppet(SubscriberPuppet):
    """Drives a batching subscriber through its public API.

    ``trigger_request`` does nothing, honestly: the subscriber requests ``batch_size``
    in ``on_subscribe`` and refills whenever half of it is used up, so it has demand
    outstanding until its subscription ends, and any number of elements triggered is
    eventually requested as long as elements keep arriving. The TCK sends an element
    only once a recorded request covers it, so it never waits on a request that the
    subscriber would make only after more elements.
    """

    def __init__(self, subscriber: ReportsToProbe) -> None:
        self.subscriber = subscriber

    def trigger_request(self, elements: int) -> None:
        pass

    def signal_cancel(self) -> None:
        self.subscriber.cancelled_by_puppet = True
        self.subscriber.cancel()


class ReportsToProbe:
    """Mixed into a SyncSubscriber or AsyncSubscriber: reports each signal to the probe
    when the subscriber handles it (for AsyncSubscriber, on its own thread)."""

    probe: WhiteboxSubscriberProbe[int]
    cancelled_by_puppet = False

    def on_subscribe(self, subscription: Subscription) -> None:
        super().on_subscribe(subscription)  # type: ignore[misc]
        self.probe.register_on_subscribe(BatchPuppet(self))

    def on_element(self, element: int) -> None:
        self.probe.register_on_next(element)

    def on_finished(self, error: BaseException | None) -> None:
        # Called after on_complete, on_error, and after a cancel; only the first two
        # are signals received.
        if error is not None:
            self.probe.register_on_error(error)
        elif not self.cancelled_by_puppet:
            self.probe.register_on_complete()

    def cancel(self) -> None:
        super().cancel()  # type: ignore[misc]


class ReportingSync(ReportsToProbe, SyncSubscriber[int]):
    def __init__(self, probe: WhiteboxSubscriberProbe[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe = probe


class ReportingAsync(ReportsToProbe, AsyncSubscriber[int]):
    def __init__(self, probe: WhiteboxSubscriberProbe[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe = probe


class TestSyncSubscriberWhitebox(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ReportingSync(probe)

    def create_element(self, element: int) -> int:
        return element


class TestSyncSubscriberBatchOfOneWhitebox(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ReportingSync(probe, batch_size=1)

    def create_element(self, element: int) -> int:
        return element


class TestAsyncSubscriberWhitebox(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ReportingAsync(probe)

    def create_element(self, element: int) -> int:
        return element


class TestAsyncSubscriberBatchOfOneWhitebox(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ReportingAsync(probe, batch_size=1)

    def create_element(self, element: int) -> int:
        return element
