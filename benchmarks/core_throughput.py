"""Throughput of the Reactive Streams core, in elements/s, each case beside a baseline
timed in the same run with the very same per-element work.

Synchronous (``--elements``, default 1M): a minimal subscriber counts elements and
requests ``k`` more each time its last ``k`` have arrived (``k`` = 1, 64, 1024;
``request(1)`` means one request per element), beside a plain Python loop calling the same
``on_next`` (the reference every ratio of this part is taken against), and
``reactivex.range(...).subscribe(...)`` when reactivex is importable (timed on
``--rx-elements``: it is slow). So the ratios measure only what the publisher and its
subscription add.

Across threads and through the reference subscribers (``--thread-elements``, default 1M
ints): each case's handler is the same ``on_element`` (it counts).

- ``IterablePublisher -> AsyncSubscriber(1024)`` (also ``AsyncIterablePublisher`` and
  ``IterablePublisher -> MapProcessor``) beside two threads handing the same ints over
  through a ``collections.deque`` (a producer appending, a consumer popping and calling
  ``on_element``, yielding its turn with ``sleep(0)`` when the deque is empty: no demand,
  no bound on the queue) and through a ``queue.SimpleQueue`` (``put``/``get``). The deque
  handoff does less than a Reactive Streams path must: nothing bounds what is in flight,
  and its idle consumer spins instead of being woken. So a third baseline does what the
  path must do and no more: a deque with at most 1024 ints in flight (half given back
  each time half has been handled), either side blocking on a condition when it has
  nothing to do and woken by the other. The target stays against the deque handoff.
- ``RangePublisher -> SyncSubscriber(1024)`` beside a plain loop calling ``on_element``.

Each case is timed ``--repeat`` times (the cases across threads once more), the cases
interleaved, garbage collector off (as ``timeit`` does), and the best run counts. For
``RangePublisher -> SyncSubscriber`` the ratio is also printed by CPU time of the timing
thread (both it and its plain loop run wholly there), which the load hardly moves. The load
average is printed: other processes on the machine distort these figures (a ratio far
above 1 says so), so compare runs made on a quiet machine. Run from the repository root::

    PYTHONPATH=src python benchmarks/core_throughput.py [--elements N] [--thread-elements N]
        [--rx-elements N] [--repeat K] [--quick] [--json PATH]

``--json PATH`` writes every figure with ``benchmarks/report.py`` (scenario ``core``).
Exit status 1 means a run delivered the wrong number of elements or did not complete.
Targets (ratios to the same-run baseline) are printed, never enforced: timings depend on
the machine and its load.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import platform
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from reactive_streams import (
    AsyncIterablePublisher,
    AsyncSubscriber,
    IterablePublisher,
    MapProcessor,
    RangePublisher,
    Subscriber,
    Subscription,
    SyncSubscriber,
)
from report import Figure, write

REQUEST_SIZES = (1, 64, 1024)
TARGET_K = 1024
TARGET_RATIO = 0.90  # request(1024) against the plain loop
THREAD_BATCH = 1024  # batch_size of the reference subscribers
THREAD_TARGET = 0.50  # IterablePublisher -> AsyncSubscriber against the deque handoff
SYNC_TARGET = 0.50  # RangePublisher -> SyncSubscriber against the plain loop
JOIN_TIMEOUT_S = 300.0


class NullSubscription(Subscription):
    """Stands in for a publisher where the baselines drive ``on_next`` themselves."""

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class CountingSubscriber(Subscriber[int]):
    """Counts elements, requesting ``k`` more each time the last ``k`` have arrived."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.left = 0
        self.count = 0
        self.completions = 0
        self.error: BaseException | None = None
        self.subscription: Subscription = NullSubscription()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.left = self.k
        subscription.request(self.k)

    def on_next(self, element: int) -> None:
        # The work under test: the same in every case, baselines included.
        self.count += 1
        self.left -= 1
        if self.left == 0:
            self.left = self.k
            self.subscription.request(self.k)

    def on_error(self, error: BaseException) -> None:
        self.error = error

    def on_complete(self) -> None:
        self.completions += 1


def run_publisher(k: int) -> Callable[[int], CountingSubscriber]:
    def run(n: int) -> CountingSubscriber:
        subscriber = CountingSubscriber(k)
        # RangePublisher is synchronous: subscribe returns after the last signal.
        RangePublisher(0, n).subscribe(subscriber)
        return subscriber

    return run


def baseline_subscriber() -> CountingSubscriber:
    # Batch of TARGET_K: the subscriber's own bookkeeping is then exactly that of the
    # request(1024) case, so the target ratio compares like with like.
    subscriber = CountingSubscriber(TARGET_K)
    subscriber.on_subscribe(NullSubscription())
    return subscriber


def run_plain_loop(n: int) -> CountingSubscriber:
    subscriber = baseline_subscriber()
    on_next = subscriber.on_next
    for element in range(n):
        on_next(element)
    subscriber.on_complete()
    return subscriber


def reactivex_runner() -> tuple[Callable[[int], CountingSubscriber] | None, str]:
    """The reactivex baseline, or ``None`` and the reason it cannot run."""
    try:
        import reactivex
    except ImportError as exc:
        return None, f"reactivex is not importable ({exc})"

    def run(n: int) -> CountingSubscriber:
        subscriber = baseline_subscriber()
        reactivex.range(0, n).subscribe(
            on_next=subscriber.on_next,
            on_error=subscriber.on_error,
            on_completed=subscriber.on_complete,
        )
        return subscriber

    version = getattr(reactivex, "__version__", "unknown version")
    return run, f"reactivex.range {version}"


class Delivery:
    """What a run delivered: the same three facts as :class:`CountingSubscriber`'s."""

    def __init__(self, count: int, completions: int, error: BaseException | None) -> None:
        self.count = count
        self.completions = completions
        self.error = error


Run = Callable[[int], Any]  # returns a CountingSubscriber or a Delivery


def timed(run: Run, n: int) -> tuple[float, Any]:
    """Wall-clock seconds and what the run delivered (adapters_core.py uses it too)."""
    elapsed, _, outcome = timed_cpu(run, n)
    return elapsed, outcome


def timed_cpu(run: Run, n: int) -> tuple[float, float, Any]:
    """Wall-clock seconds, this thread's CPU seconds, and what the run delivered."""
    gc.collect()
    gc.disable()
    try:
        start, cpu_start = time.perf_counter(), time.thread_time()
        outcome = run(n)
        cpu = time.thread_time() - cpu_start
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed, cpu, outcome


def check(name: str, outcome: Any, n: int) -> str | None:
    """Why a run's delivery was wrong, or ``None`` when it was right."""
    if outcome.error is not None:
        return f"{name}: the stream failed with {outcome.error!r}"
    if outcome.count != n:
        return f"{name}: received {outcome.count} elements, expected {n}"
    if outcome.completions != 1:
        return f"{name}: {outcome.completions} completion signals, expected exactly 1"
    return None


# -- across threads, and the reference subscribers -------------------------------------------


class Tally:
    """The per-element work of every case below: ``on_element`` counts."""

    count = 0

    def on_element(self, element: int) -> None:
        self.count += 1


class AsyncTally(AsyncSubscriber[int]):
    count = 0
    on_element = Tally.on_element  # type: ignore[assignment]


class SyncTally(SyncSubscriber[int]):
    count = 0
    on_element = Tally.on_element  # type: ignore[assignment]


def finished(subscriber: AsyncTally | SyncTally) -> Delivery:
    if not subscriber.wait(JOIN_TIMEOUT_S):
        return Delivery(subscriber.count, 0,
                        TimeoutError(f"did not end within {JOIN_TIMEOUT_S} s"))
    error = subscriber._error
    return Delivery(subscriber.count, 1 if error is None else 0, error)


def run_deque_handoff(n: int) -> Delivery:
    """Two threads, a deque between them: the bound on handing ints across threads."""
    tally = Tally()
    handoff: collections.deque[int] = collections.deque()
    produced = threading.Event()

    def produce() -> None:
        append = handoff.append
        for element in range(n):
            append(element)
        produced.set()

    def consume() -> None:
        popleft = handoff.popleft
        on_element = tally.on_element
        while True:
            try:
                element = popleft()
            except IndexError:
                if produced.is_set() and not handoff:
                    return
                time.sleep(0)  # empty: let the producer run
                continue
            on_element(element)

    return _two_threads(produce, consume, tally)


class _Bounded:
    """The state two threads share in :func:`run_bounded_handoff`."""

    def __init__(self, credit: int) -> None:
        self.credit = credit  # elements the producer may still append
        self.consumer_idle = False  # the consumer waits on `ready`
        self.produced = False
        self.lock = threading.Lock()
        self.more_credit = threading.Condition(self.lock)
        self.ready = threading.Condition(threading.Lock())


def run_bounded_handoff(n: int) -> Delivery:
    """Two threads, a deque between them, with what a Reactive Streams path must do too:
    at most ``THREAD_BATCH`` ints in flight (the consumer gives back half of it each time
    it has handled half), and a side with nothing to do blocks until the other wakes it
    (no spinning). The fair bound for ``IterablePublisher -> AsyncSubscriber``."""
    tally = Tally()
    handoff: collections.deque[int] = collections.deque()
    state = _Bounded(THREAD_BATCH)
    half = THREAD_BATCH // 2

    def produce() -> None:
        append = handoff.append
        start = 0
        while start < n:
            with state.more_credit:
                while state.credit == 0:
                    state.more_credit.wait()
                credit, state.credit = state.credit, 0
            end = min(n, start + credit)
            for element in range(start, end):
                append(element)
                if state.consumer_idle:
                    with state.ready:
                        state.consumer_idle = False
                        state.ready.notify()
            start = end
        with state.ready:
            state.produced = True
            state.consumer_idle = False
            state.ready.notify()

    def consume() -> None:
        popleft = handoff.popleft
        on_element = tally.on_element
        handled = 0
        while True:
            try:
                element = popleft()
            except IndexError:
                with state.ready:
                    if not handoff:
                        if state.produced:
                            return
                        state.consumer_idle = True
                        state.ready.wait()
                continue
            on_element(element)
            handled += 1
            if handled == half:
                handled = 0
                with state.more_credit:
                    state.credit += half
                    state.more_credit.notify()

    return _two_threads(produce, consume, tally)


def run_simple_queue_handoff(n: int) -> Delivery:
    """Two threads, a ``queue.SimpleQueue`` between them (``get`` blocks when empty)."""
    tally = Tally()
    handoff: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def produce() -> None:
        put = handoff.put
        for element in range(n):
            put(element)
        put(None)

    def consume() -> None:
        get = handoff.get
        on_element = tally.on_element
        while (element := get()) is not None:
            on_element(element)

    return _two_threads(produce, consume, tally)


def _two_threads(produce: Callable[[], None], consume: Callable[[], None],
                 tally: Tally) -> Delivery:
    consumer = threading.Thread(target=consume, name="bench-consumer")
    producer = threading.Thread(target=produce, name="bench-producer")
    consumer.start()
    producer.start()
    producer.join(JOIN_TIMEOUT_S)
    consumer.join(JOIN_TIMEOUT_S)
    if consumer.is_alive():
        return Delivery(tally.count, 0, TimeoutError("the consumer thread did not end"))
    return Delivery(tally.count, 1, None)


def run_iterable_async(n: int) -> Delivery:
    subscriber = AsyncTally(batch_size=THREAD_BATCH)
    IterablePublisher(range(n)).subscribe(subscriber)
    return finished(subscriber)


def run_async_iterable_async(n: int) -> Delivery:
    async def ints() -> AsyncIterator[int]:
        for element in range(n):
            yield element

    subscriber = AsyncTally(batch_size=THREAD_BATCH)
    AsyncIterablePublisher(ints).subscribe(subscriber)
    return finished(subscriber)


def run_map_async(n: int) -> Delivery:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=THREAD_BATCH)
    subscriber = AsyncTally(batch_size=THREAD_BATCH)
    processor.subscribe(subscriber)
    IterablePublisher(range(n)).subscribe(processor)
    return finished(subscriber)


def run_plain_on_element(n: int) -> Delivery:
    tally = Tally()
    on_element = tally.on_element
    for element in range(n):
        on_element(element)
    return Delivery(tally.count, 1, None)


def run_range_sync(n: int) -> Delivery:
    subscriber = SyncTally(batch_size=THREAD_BATCH)
    RangePublisher(0, n).subscribe(subscriber)  # synchronous: returns at the end
    return finished(subscriber)


DEQUE = "deque handoff, 2 threads"
SIMPLE_QUEUE = "SimpleQueue handoff, 2 threads"
BOUNDED = f"bounded deque handoff ({THREAD_BATCH} in flight, blocking waits), 2 threads"
ITERABLE_ASYNC = f"IterablePublisher -> AsyncSubscriber({THREAD_BATCH})"
ASYNC_ITERABLE_ASYNC = f"AsyncIterablePublisher -> AsyncSubscriber({THREAD_BATCH})"
MAP_ASYNC = f"IterablePublisher -> MapProcessor -> AsyncSubscriber({THREAD_BATCH})"
PLAIN_ON_ELEMENT = "plain loop calling on_element"
RANGE_SYNC = f"RangePublisher -> SyncSubscriber({THREAD_BATCH})"

THREAD_CASES: list[tuple[str, Run]] = [
    (DEQUE, run_deque_handoff),
    (SIMPLE_QUEUE, run_simple_queue_handoff),
    (BOUNDED, run_bounded_handoff),
    (ITERABLE_ASYNC, run_iterable_async),
    (ASYNC_ITERABLE_ASYNC, run_async_iterable_async),
    (MAP_ASYNC, run_map_async),
    (PLAIN_ON_ELEMENT, run_plain_on_element),
    (RANGE_SYNC, run_range_sync),
]
# Cases (and their baselines) that run wholly on the timing thread.
SYNCHRONOUS = {RANGE_SYNC}
# case -> (baseline, target ratio or None); the rows of the second table
THREAD_BASELINES: list[tuple[str, str, float | None]] = [
    (SIMPLE_QUEUE, DEQUE, None),
    (ITERABLE_ASYNC, DEQUE, THREAD_TARGET),
    (ITERABLE_ASYNC, SIMPLE_QUEUE, None),
    (BOUNDED, DEQUE, None),
    (ITERABLE_ASYNC, BOUNDED, None),
    (ASYNC_ITERABLE_ASYNC, DEQUE, None),
    (MAP_ASYNC, DEQUE, None),
    (RANGE_SYNC, PLAIN_ON_ELEMENT, SYNC_TARGET),
]


def best_of(cases: list[tuple[str, Run]], n: int, repeat: int,
            failures: list[str], cpu_best: dict[str, float] | None = None) -> dict[str, float]:
    """Best elapsed time per case, the cases interleaved so drift hits all alike.

    ``cpu_best`` receives each case's best CPU time of the timing thread: the measure
    of a synchronous case that the machine's load hardly moves.
    """
    best = {name: float("inf") for name, _ in cases}
    for _ in range(repeat):
        for name, run in cases:
            elapsed, cpu, outcome = timed_cpu(run, n)
            problem = check(name, outcome, n)
            if problem is not None:
                failures.append(problem)
            best[name] = min(best[name], elapsed)
            if cpu_best is not None:
                cpu_best[name] = min(cpu_best.get(name, cpu), cpu)
    return best


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Elements/s of the Reactive Streams core against same-run baselines.")
    parser.add_argument("--elements", type=positive_int, default=None,
                        help="elements per synchronous run (default: 1000000)")
    parser.add_argument("--thread-elements", type=positive_int, default=None,
                        help="elements per run across threads (default: 1000000)")
    parser.add_argument("--rx-elements", type=positive_int, default=None,
                        help="elements per reactivex run (default: 100000)")
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="runs per case; the best counts (default: %(default)s; the "
                             "cases across threads run once more)")
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the default sizes")
    parser.add_argument("--json", metavar="PATH",
                        help="also write every figure there (benchmarks/report.py)")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    n: int = args.elements or 1_000_000 // scale
    thread_n: int = args.thread_elements or 1_000_000 // scale
    rx_n: int = args.rx_elements or 100_000 // scale
    load = os.getloadavg()[0]

    cases: list[tuple[str, Callable[[int], CountingSubscriber]]] = [
        ("plain loop calling on_next", run_plain_loop),
    ]
    cases += [(f"RangePublisher request({k})", run_publisher(k)) for k in REQUEST_SIZES]
    failures: list[str] = []
    best = best_of(cases, n, args.repeat, failures)  # type: ignore[arg-type]
    rates = {name: n / best[name] for name, _ in cases}
    rx_run, rx_note = reactivex_runner()
    if rx_run is not None:
        rx_best = best_of([(rx_note, rx_run)], rx_n, args.repeat, failures)
        cases.append((rx_note, rx_run))
        rates[rx_note] = rx_n / rx_best[rx_note]

    print(f"{n:,} elements per run, best of {args.repeat}; "
          f"{platform.python_implementation()} {platform.python_version()}; "
          f"load average {load:.2f} on {os.cpu_count()} cpus")
    reference = rates[cases[0][0]]
    width = max(len(name) for name, _ in cases)
    print(f"{'name':<{width}}  {'elements/s':>13}  {'vs plain loop':>13}")
    for name, _ in cases:
        rate = rates[name]
        print(f"{name:<{width}}  {rate:>13,.0f}  {rate / reference:>13.2f}")
    if rx_run is None:
        print(f"reactivex baseline skipped: {rx_note}")
    else:
        print(f"({rx_note} timed on {rx_n:,} elements)")

    ratio = rates[f"RangePublisher request({TARGET_K})"] / reference
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"request({TARGET_K}) / plain loop = {ratio:.2f} "
          f"(target >= {TARGET_RATIO:.2f}): {verdict}")

    figures = [
        Figure("core", name, rates[name], "elements/s", baseline=cases[0][0],
               baseline_value=reference,
               target=(">=", TARGET_RATIO) if name.endswith(f"({TARGET_K})") else None,
               note=f"{rx_n if name == rx_note else n:,} elements, synchronous, "
                    "a counting subscriber")
        for name, _ in cases[1:]
    ]

    thread_repeat = args.repeat + 1
    thread_cpu: dict[str, float] = {}
    thread_best = best_of(THREAD_CASES, thread_n, thread_repeat, failures, thread_cpu)
    thread_rates = {name: thread_n / elapsed for name, elapsed in thread_best.items()}
    print()
    print(f"{thread_n:,} ints per run, best of {thread_repeat}; every case's handler is the "
          "same on_element (it counts)")
    width = max(len(name) for name, _ in THREAD_CASES)
    print(f"{'name':<{width}}  {'elements/s':>13}")
    for name, _ in THREAD_CASES:
        print(f"{name:<{width}}  {thread_rates[name]:>13,.0f}")
    width = max(len(case) + len(baseline) for case, baseline, _ in THREAD_BASELINES) + 4
    print(f"{'ratio':<{width}}  {'value':>6}  target")
    for case, baseline, target in THREAD_BASELINES:
        ratio = thread_rates[case] / thread_rates[baseline]
        verdict = "" if target is None else \
            f">= {target:.2f}: {'met' if ratio >= target else 'NOT met'}"
        print(f"{case + ' / ' + baseline:<{width}}  {ratio:>6.2f}  {verdict}")
        extra: dict[str, Any] = {"load_average": round(load, 2)}
        if case in SYNCHRONOUS:
            # Both run wholly on this thread: CPU time leaves out the time other
            # processes had the CPU, which wall-clock time counts.
            extra["cpu_time_ratio"] = round(thread_cpu[baseline] / thread_cpu[case], 3)
            cpu_verdict = "" if target is None else \
                f">= {target:.2f}: {'met' if extra['cpu_time_ratio'] >= target else 'NOT met'}"
            print(f"{'  the same by thread CPU time':<{width}}  "
                  f"{extra['cpu_time_ratio']:>6.2f}  {cpu_verdict}")
        figures.append(Figure(
            "core", case, thread_rates[case], "elements/s", baseline=baseline,
            baseline_value=thread_rates[baseline],
            target=None if target is None else (">=", target),
            note=f"{thread_n:,} ints; handler counts",
            extra=extra))

    write(args.json, "core", figures)
    if failures:
        print("FAILED: wrong delivery, so the timings above mean nothing:", file=sys.stderr)
        for problem in dict.fromkeys(failures):  # each distinct problem once
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
