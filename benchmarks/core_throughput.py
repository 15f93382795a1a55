"""Throughput of the Reactive Streams core: ``RangePublisher -> Subscriber``, in elements/s.

A minimal subscriber counts elements and requests ``k`` more each time its last ``k`` have
arrived (``k`` = 1, 64, 1024; ``request(1)`` means one request per element). Two baselines
are timed in the same run with the very same ``on_next``: a plain Python loop calling it
once per element (the reference every ratio is taken against), and
``reactivex.range(...).subscribe(...)`` when reactivex is importable. So the ratios measure
only what the publisher and its subscription add. Each case is timed ``--repeat`` times
(garbage collector off, as ``timeit`` does) and the best run counts.

Run from the repository root::

    PYTHONPATH=src python benchmarks/core_throughput.py [--elements N] [--repeat K]

Exit status 1 means a run delivered the wrong number of elements or did not complete.
The acceptance target (``request(1024)`` at >= 30% of the plain loop) is printed, never
enforced: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from collections.abc import Callable, Sequence

from reactive_streams import RangePublisher, Subscriber, Subscription

REQUEST_SIZES = (1, 64, 1024)
TARGET_K = 1024
TARGET_RATIO = 0.30


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


def timed(run: Callable[[int], CountingSubscriber], n: int) -> tuple[float, CountingSubscriber]:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        subscriber = run(n)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed, subscriber


def check(name: str, subscriber: CountingSubscriber, n: int) -> str | None:
    """Why a run's delivery was wrong, or ``None`` when it was right."""
    if subscriber.error is not None:
        return f"{name}: the stream failed with {subscriber.error!r}"
    if subscriber.count != n:
        return f"{name}: received {subscriber.count} elements, expected {n}"
    if subscriber.completions != 1:
        return f"{name}: {subscriber.completions} completion signals, expected exactly 1"
    return None


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Elements/s of RangePublisher -> Subscriber against a plain Python loop.")
    parser.add_argument("--elements", type=positive_int, default=2_000_000,
                        help="elements per run (default: %(default)s)")
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="runs per case; the best counts (default: %(default)s)")
    args = parser.parse_args(argv)
    n: int = args.elements

    cases: list[tuple[str, Callable[[int], CountingSubscriber]]] = [
        ("plain loop calling on_next", run_plain_loop),
    ]
    cases += [(f"RangePublisher request({k})", run_publisher(k)) for k in REQUEST_SIZES]
    rx_run, rx_note = reactivex_runner()
    if rx_run is not None:
        cases.append((rx_note, rx_run))

    best = {name: float("inf") for name, _ in cases}
    failures: list[str] = []
    for _ in range(args.repeat):
        for name, run in cases:  # interleaved, so drift in machine speed hits all alike
            elapsed, subscriber = timed(run, n)
            problem = check(name, subscriber, n)
            if problem is not None:
                failures.append(problem)
            best[name] = min(best[name], elapsed)

    print(f"{n:,} elements per run, best of {args.repeat}; "
          f"{platform.python_implementation()} {platform.python_version()}")
    reference = n / best[cases[0][0]]
    width = max(len(name) for name, _ in cases)
    print(f"{'name':<{width}}  {'elements/s':>13}  {'vs plain loop':>13}")
    for name, _ in cases:
        rate = n / best[name]
        print(f"{name:<{width}}  {rate:>13,.0f}  {rate / reference:>13.2f}")
    if rx_run is None:
        print(f"reactivex baseline skipped: {rx_note}")

    ratio = n / best[f"RangePublisher request({TARGET_K})"] / reference
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"request({TARGET_K}) / plain loop = {ratio:.2f} "
          f"(target >= {TARGET_RATIO:.2f}): {verdict}")

    if failures:
        print("FAILED: wrong delivery, so the timings above mean nothing:", file=sys.stderr)
        for problem in dict.fromkeys(failures):  # each distinct problem once
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
