"""Throughput of the asyncio and ReactiveX adapters against plain baselines, as ratios.

Every case counts ``--elements`` integers with the same trivial work per element:

- aio: ``async for`` over ``iterate(RangePublisher(...), prefetch=p)`` against an
  ``async for`` over a plain async generator of the same range (the baseline);
- rx, Observable -> Publisher: ``from_observable(reactivex.from_iterable(range(...)))``
  to a subscriber that requests everything up front, against the same observable's
  ``subscribe(on_next)``;
- rx, Publisher -> Observable: ``to_observable(RangePublisher(...), batch=b)`` subscribed
  to with the same ``on_next``, against the same ReactiveX baseline.

So each ratio is what the adapter adds over the nearest thing without it. Each case is
timed ``--repeat`` times (garbage collector off) and the best run counts.

Run from the repository root (reactivex is the extra ``rx``)::

    PYTHONPATH=src python benchmarks/adapters_core.py [--elements N] [--repeat K]

Exit status 1 means a case counted the wrong number of elements.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
from collections.abc import AsyncIterator, Callable

import reactivex

from core_throughput import timed  # the core benchmark's timing: gc off, perf_counter
from reactive_streams import UNBOUNDED, RangePublisher, Subscriber, Subscription
from reactive_streams.adapters.aio import iterate
from reactive_streams.adapters.rx import from_observable, to_observable


class Count:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, element: int) -> None:
        self.n += 1


class CountAll(Subscriber[int]):
    def __init__(self) -> None:
        self.count = Count()

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(UNBOUNDED)

    def on_next(self, element: int) -> None:
        self.count(element)

    def on_error(self, error: BaseException) -> None:
        raise AssertionError(error)

    def on_complete(self) -> None:
        pass


def aio_baseline(n: int) -> int:
    async def numbers() -> AsyncIterator[int]:
        for i in range(n):
            yield i

    async def main() -> int:
        count = Count()
        async for x in numbers():
            count(x)
        return count.n

    return asyncio.run(main())


def aio_iterate(prefetch: int) -> Callable[[int], int]:
    def run(n: int) -> int:
        async def main() -> int:
            count = Count()
            async for x in iterate(RangePublisher(0, n), prefetch=prefetch):
                count(x)
            return count.n

        return asyncio.run(main())

    return run


def rx_baseline(n: int) -> int:
    count = Count()
    reactivex.from_iterable(range(n)).subscribe(count)
    return count.n


def rx_from_observable(n: int) -> int:
    subscriber = CountAll()
    from_observable(reactivex.from_iterable(range(n)), overflow="error",
                    buffer_size=1).subscribe(subscriber)
    return subscriber.count.n


def rx_to_observable(batch: int) -> Callable[[int], int]:
    def run(n: int) -> int:
        count = Count()
        to_observable(RangePublisher(0, n), batch=batch).subscribe(count)
        return count.n

    return run


def best_rate(case: Callable[[int], int], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        elapsed, counted = timed(case, n)  # type: ignore[arg-type] # any result passes through
        if counted != n:
            print(f"error: counted {counted} of {n} elements", file=sys.stderr)
            sys.exit(1)
        best = min(best, elapsed)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, repeat = args.elements, args.repeat
    print(f"python {platform.python_version()}, reactivex {reactivex.__version__}, "
          f"{n:,} elements, best of {repeat}")
    rx_base = ("from_iterable(range).subscribe (baseline)", rx_baseline)
    groups = [
        ("aio: async for", ("async generator (baseline)", aio_baseline), [
            (f"iterate(RangePublisher, prefetch={p})", aio_iterate(p)) for p in (16, 256, 4096)]),
        ("rx: Observable -> Publisher", rx_base, [
            ("from_observable(from_iterable(range)), unbounded demand", rx_from_observable)]),
        ("rx: Publisher -> Observable", rx_base, [
            (f"to_observable(RangePublisher, batch={b})", rx_to_observable(b))
            for b in (16, 1024)]),
    ]
    for title, (base_name, base_case), cases in groups:
        base = best_rate(base_case, n, repeat)
        print(f"\n{title}")
        print(f"  {base_name:<52} {base:>12,.0f} elements/s   1.00")
        for name, case in cases:
            rate = best_rate(case, n, repeat)
            print(f"  {name:<52} {rate:>12,.0f} elements/s   {rate / base:.2f}")


if __name__ == "__main__":
    main()
