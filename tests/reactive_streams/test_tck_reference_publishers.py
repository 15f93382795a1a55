"""The TCK as oracle for the publishers the project ships: RangePublisher,
IterablePublisher, AsyncIterablePublisher, and MapProcessor as a publisher (fed by a
RangePublisher), each under the full PublisherVerification.

A range cannot fail, so its failed publisher is an IterablePublisher whose factory
raises: the only way our reference publishers fail at subscription time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable

from reactive_streams import (
    AsyncIterablePublisher,
    IterablePublisher,
    MapProcessor,
    Publisher,
    RangePublisher,
)
from reactive_streams.tck.publisher import PublisherVerification


class SourceUnavailableError(Exception):
    """What the failed publishers below fail with."""


def _unavailable_iterable() -> Iterable[int]:
    raise SourceUnavailableError("the source of this publisher is unavailable")


def failed_iterable_publisher() -> Publisher[int]:
    return IterablePublisher(_unavailable_iterable)


class TestRangePublisher(PublisherVerification[int]):
    def create_publisher(self, elements: int) -> Publisher[int]:
        return RangePublisher(0, elements)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return None  # a range cannot fail: the two failed-publisher checks skip


class TestIterablePublisher(PublisherVerification[int]):
    def create_publisher(self, elements: int) -> Publisher[int]:
        return IterablePublisher(lambda: range(elements))

    def create_failed_publisher(self) -> Publisher[int] | None:
        return failed_iterable_publisher()


class TestAsyncIterablePublisher(PublisherVerification[int]):
    def create_publisher(self, elements: int) -> Publisher[int]:
        async def count() -> AsyncIterator[int]:
            for i in range(elements):
                await asyncio.sleep(0)
                yield i

        return AsyncIterablePublisher(count)

    def create_failed_publisher(self) -> Publisher[int] | None:
        # The factory fails, so the publisher fails at subscription, without demand. (An
        # async generator that raises fails only when asked for its first element.)
        def unavailable() -> AsyncIterable[int]:
            raise SourceUnavailableError("the source of this publisher is unavailable")

        return AsyncIterablePublisher(unavailable)


class TestMapProcessorAsPublisher(PublisherVerification[int]):
    """The processor's publisher side; its upstream is a synchronous range."""

    def create_publisher(self, elements: int) -> Publisher[int]:
        processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=16)
        RangePublisher(0, elements).subscribe(processor)
        return processor

    def create_failed_publisher(self) -> Publisher[int] | None:
        processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=16)
        failed_iterable_publisher().subscribe(processor)
        return processor
