"""Who gets which element when subscribers of a ForeachBatchPublisher come and go: a new
subscriber resumes at the first element no subscriber has taken (finding 13: a chunk was
delivered again after its only subscriber left part way), exactly once for plain
subscribers, and deferred confirmation for transports (INTERFACES.md, 1).

Batches go in through ``deliver_arrow`` (what the Spark Connect transport calls) on a
thread of the test's, so each case runs in milliseconds; every subscription signals on a
thread of its own, as with Spark.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from pyspark_reactive import ForeachBatchPublisher
from reactive_streams import Subscriber, Subscription, SyncSubscriber

WAIT = 30.0  # bounds every wait for a signal that must come


def batch(low: int, high: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(low, high), pa.int64())], names=["v"])


class Delivery:
    """``publisher.deliver_arrow(batch_id, batches)`` on a thread of its own."""

    def __init__(self, publisher: ForeachBatchPublisher, batch_id: int,
                 *batches: pa.RecordBatch) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(publisher, batch_id, batches),
                                       daemon=True)
        self.thread.start()

    def _run(self, publisher: ForeachBatchPublisher, batch_id: int,
             batches: tuple[pa.RecordBatch, ...]) -> None:
        try:
            publisher.deliver_arrow(batch_id, iter(batches))
        except BaseException as error:
            self.error = error

    def join(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the batch did not end"


class Takes(Subscriber[Any]):
    """Requests ``request`` at a time; records values. ``cancel_at``: cancels in the
    on_next of that many-th element; ``raise_at``: raises in that one's on_next;
    ``defer``: calls defer_confirmation() in on_subscribe."""

    def __init__(self, request: int = 1000, cancel_at: int | None = None,
                 raise_at: int | None = None, defer: bool = False) -> None:
        self.request, self.cancel_at, self.raise_at, self.defer = \
            request, cancel_at, raise_at, defer
        self.values: list[int] = []
        self.left = 0
        self.subscription: Any = None
        self.changed = threading.Condition()
        self.ended = threading.Event()
        self.error: BaseException | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        if self.defer:
            subscription.defer_confirmation()  # type: ignore[attr-defined]
        self.left = self.request
        subscription.request(self.request)

    def on_next(self, element: Any) -> None:
        with self.changed:
            self.values.append(element[0])
            self.changed.notify_all()
        if len(self.values) == self.raise_at:
            raise RuntimeError("this subscriber fails on purpose")
        if len(self.values) == self.cancel_at:
            self.subscription.cancel()
            self.ended.set()
            return
        self.left -= 1
        if self.left == 0:
            self.left = self.request
            self.subscription.request(self.request)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.ended.set()

    def on_complete(self) -> None:
        self.ended.set()

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.values) >= count, WAIT), \
                f"{len(self.values)} of {count} elements after {WAIT} s"


class Handles(SyncSubscriber[Any]):
    """A SyncSubscriber (the emitter hands it whole steps) that stops at ``stop_at``."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__(batch_size=64)
        self.stop_at = stop_at
        self.values: list[int] = []

    def on_element(self, element: Any) -> bool:
        self.values.append(element[0])
        return len(self.values) != self.stop_at


@pytest.fixture
def publisher() -> Iterator[ForeachBatchPublisher]:
    made = ForeachBatchPublisher(element="tuple", chunk_rows=1000)
    yield made
    made.complete()


# Cut points around the emitter's steps (64 elements a pull) and the chunk's end.
@pytest.mark.parametrize("cut", [1, 63, 64, 65, 200, 999])
def test_a_subscriber_cancelling_part_way_hands_over_the_rest_exactly_once(
        publisher: ForeachBatchPublisher, cut: int) -> None:
    first = Takes(request=100, cancel_at=cut)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1000), batch(1000, 1500))
    assert first.ended.wait(WAIT)
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert delivery.error is None
    assert first.values == list(range(cut))
    assert second.values == list(range(cut, 1500))


@pytest.mark.parametrize("cut", [1, 64, 130, 1000])
def test_a_sync_subscriber_stopping_part_way_hands_over_the_rest_exactly_once(
        publisher: ForeachBatchPublisher, cut: int) -> None:
    first = Handles(stop_at=cut)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1500))
    first.join(WAIT)
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert first.values == list(range(cut))
    assert second.values == list(range(cut, 1500))


def test_an_element_whose_on_next_raised_goes_to_the_next_subscriber(
        publisher: ForeachBatchPublisher) -> None:
    first = Takes(raise_at=300)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1000))
    first.wait_for(300)
    with publisher._changed:  # notified when a subscription ends
        assert publisher._changed.wait_for(lambda: publisher.subscribers == 0, WAIT)
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert first.values == list(range(300))
    # The 300th (value 299) did not have on_next return: not taken.
    assert second.values == list(range(299, 1000))


def test_a_cancel_from_another_thread_loses_and_repeats_nothing(
        publisher: ForeachBatchPublisher) -> None:
    # The subscriber is blocked in on_next (a transport writing to a full socket) when
    # its subscription is cancelled from elsewhere (the connection closed).
    entered, release = threading.Event(), threading.Event()

    class Blocks(Takes):
        def on_next(self, element: Any) -> None:
            if element[0] == 420:
                entered.set()
                assert release.wait(WAIT)
            super().on_next(element)

    first = Blocks(request=500)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1000))
    assert entered.wait(WAIT)
    first.subscription.cancel()
    release.set()
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert first.values + second.values == list(range(1000))


def test_the_batch_ends_only_once_on_next_returned_for_its_last_element(
        publisher: ForeachBatchPublisher) -> None:
    # Were the batch to end once the last step was pulled, the rows the cancel left
    # unsignalled would be committed and never delivered.
    first = Takes(request=1000, cancel_at=990)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1000))
    assert first.ended.wait(WAIT)
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert second.values == list(range(990, 1000))
    assert publisher.rows_delivered == 1000


# -- deferred confirmation --------------------------------------------------------------


def test_unconfirmed_elements_go_to_the_next_subscriber(
        publisher: ForeachBatchPublisher) -> None:
    first = Takes(request=2000, defer=True)
    publisher.subscribe(first)
    delivery = Delivery(publisher, 0, batch(0, 1000), batch(1000, 1500))
    first.wait_for(1500)
    first.subscription.confirm(700)
    first.subscription.confirm(650)  # not above the last: ignored
    first.subscription.cancel()
    assert delivery.thread.is_alive()  # 800 elements are not confirmed: nobody took them
    second = Takes()
    publisher.subscribe(second)
    delivery.join()
    assert delivery.error is None
    assert second.values == list(range(700, 1500))


def test_a_deferred_batch_ends_once_its_last_element_is_confirmed(
        publisher: ForeachBatchPublisher) -> None:
    first = Takes(request=5000, defer=True)
    plain = Takes()
    publisher.subscribe(first)
    publisher.subscribe(plain)
    delivery = Delivery(publisher, 0, batch(0, 1000), batch(1000, 1500))
    first.wait_for(1500)
    plain.wait_for(1500)
    first.subscription.confirm(1499)
    assert delivery.thread.is_alive()
    confirmer = threading.Thread(target=first.subscription.confirm, args=(1500,))
    confirmer.start()  # from any thread
    confirmer.join(WAIT)
    delivery.join()
    assert delivery.error is None and publisher.rows_delivered == 1500
    # The next batch goes on from there.
    delivery = Delivery(publisher, 1, batch(1500, 1600))
    first.wait_for(1600)
    first.subscription.confirm(1600)
    delivery.join()
    assert first.values == plain.values == list(range(1600))


def test_confirm_refuses_more_than_was_signalled_and_needs_deferral(
        publisher: ForeachBatchPublisher) -> None:
    deferring, plain = Takes(request=10, defer=True), Takes(request=10)
    publisher.subscribe(deferring)
    publisher.subscribe(plain)
    delivery = Delivery(publisher, 0, batch(0, 10))
    deferring.wait_for(10)
    plain.wait_for(10)
    with pytest.raises(ValueError, match=r"confirm\(count=11\) is more than the 10 elements"):
        deferring.subscription.confirm(11)
    with pytest.raises(ValueError, match="non-negative int"):
        deferring.subscription.confirm(-1)
    with pytest.raises(RuntimeError, match="defer_confirmation"):
        plain.subscription.confirm(1)
    with pytest.raises(RuntimeError, match="before any element is signalled"):
        plain.subscription.defer_confirmation()
    deferring.subscription.confirm(10)
    delivery.join()
    assert delivery.error is None


def test_demand_timeout_applies_to_a_subscriber_that_never_confirms() -> None:
    publisher = ForeachBatchPublisher(element="tuple", demand_timeout=0.3)
    silent = Takes(request=5000, defer=True)
    publisher.subscribe(silent)
    delivery = Delivery(publisher, 0, batch(0, 100))
    delivery.join()
    assert isinstance(delivery.error, RuntimeError)
    assert "requested or confirmed no row for demand_timeout=0.3 s" in str(delivery.error)
    assert silent.values == list(range(100))
