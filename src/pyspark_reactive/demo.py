"""Backpressure you can watch: a fast publisher, a map, and a deliberately slow subscriber.

``RangePublisher -> MapProcessor -> AsyncSubscriber``, where the subscriber sleeps on every
element. A live line shows how demand, not buffering, sets the pace; the summary checks the
bounds that backpressure promises. Run it with ``python -m pyspark_reactive.demo --help``.

This first version uses only :mod:`reactive_streams` and imports nothing from pyspark; later
issues turn it into the Spark pipeline (publisher -> streaming source -> query -> sink).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from reactive_streams import AsyncSubscriber, MapProcessor, RangePublisher

__all__ = ["main"]

#: Live-line refreshes per second on a terminal; elsewhere one line a second.
TTY_INTERVAL = 0.2
LOG_INTERVAL = 1.0
#: Seconds without a new element (beyond the configured delay) after which the demo gives up.
STALL_SECONDS = 10.0


def square(element: int) -> int:
    """The processor's transformation: cheap, and easy to check at the other end."""
    return element * element


class Maxima:
    """Largest values seen of the three quantities backpressure bounds, and the lowest
    outstanding demand (below 0 would mean more elements than requested, §1.1)."""

    def __init__(self) -> None:
        # Sampled from the subscriber's thread and the reporter's: keep updates whole.
        self._lock = threading.Lock()
        self.samples = 0
        self.outstanding = 0
        self.lowest_outstanding = 0
        self.buffered = 0
        self.upstream_demand = 0
        self.committed = 0  # buffered + upstream demand, read together

    def observe(self, outstanding: int, buffered: int, upstream_demand: int) -> None:
        with self._lock:
            self.samples += 1
            self.outstanding = max(self.outstanding, outstanding)
            self.lowest_outstanding = min(self.lowest_outstanding, outstanding)
            self.buffered = max(self.buffered, buffered)
            self.upstream_demand = max(self.upstream_demand, upstream_demand)
            self.committed = max(self.committed, buffered + upstream_demand)


class SlowSubscriber(AsyncSubscriber[int]):
    """Sleeps ``delay`` seconds per element; checks each is the next square; samples bounds."""

    def __init__(self, processor: MapProcessor[int, int], maxima: Maxima, delay: float,
                 batch_size: int) -> None:
        super().__init__(batch_size=batch_size)
        self.processor = processor
        self.maxima = maxima
        self.delay = delay
        self.received = 0
        self.mismatch: str | None = None
        # Set by on_finished; the reporter waits on it between refreshes.
        self.ended = threading.Event()

    def on_element(self, element: int) -> None:
        if self.mismatch is None and element != square(self.received):
            self.mismatch = (f"element #{self.received} is {element}, expected "
                             f"{square(self.received)}")
        self.received += 1
        # `outstanding` already counts this element as answered; + 1 is the demand it
        # arrived against, so the refill peak (the whole batch) is observed too.
        self.maxima.observe(self.outstanding + 1, *self.processor.snapshot())
        if self.delay:
            time.sleep(self.delay)  # the simulated slow consumer

    def on_finished(self, error: BaseException | None) -> None:
        self.ended.set()


def _non_negative(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_reactive.demo",
        description="Stream a range through a map into a slow subscriber and watch "
                    "backpressure bound demand and buffers.")
    parser.add_argument("--elements", type=_non_negative(int), default=20_000,
                        help="elements to publish (default: %(default)s)")
    parser.add_argument("--delay-ms", type=_non_negative(float), default=0.25,
                        help="the subscriber's sleep per element, in ms (default: %(default)s)")
    parser.add_argument("--batch-size", type=_positive_int, default=64,
                        help="the subscriber's demand per request (default: %(default)s)")
    parser.add_argument("--buffer-size", type=_positive_int, default=256,
                        help="the processor's buffer (default: %(default)s)")
    return parser


def _report(subscriber: SlowSubscriber, processor: MapProcessor[int, int], maxima: Maxima,
            total: int, batch_size: int, out: TextIO) -> bool:
    """Show progress until the subscriber ends; return False if it stalled instead."""
    tty = out.isatty()
    interval = TTY_INTERVAL if tty else LOG_INTERVAL
    stall_limit = STALL_SECONDS + subscriber.delay
    last_time, last_count = time.monotonic(), 0
    last_progress = last_time
    width = 0
    while not subscriber.ended.wait(interval):
        now, count = time.monotonic(), subscriber.received
        outstanding = subscriber.outstanding
        buffered, upstream_demand = processor.snapshot()
        maxima.observe(outstanding, buffered, upstream_demand)
        line = (f"received {count:>{len(f'{total:,}')},}/{total:,} | "
                f"{(count - last_count) / (now - last_time):>8,.0f} elements/s | "
                f"subscriber demand {outstanding:>{len(str(batch_size))}}/{batch_size} | "
                f"processor buffered {buffered:>{len(str(processor.buffer_size))}}"
                f"/{processor.buffer_size}, upstream demand {upstream_demand}")
        if tty:
            out.write("\r" + line.ljust(width))
            out.flush()
            width = len(line)
        else:
            print(line, file=out, flush=True)
        if count != last_count:
            last_progress = now
        elif now - last_progress > stall_limit:
            if tty:
                out.write("\n")
            return False
        last_time, last_count = now, count
    if tty:
        out.write("\r" + " " * width + "\r")
        out.flush()
    return True


def _bound(label: str, value: int, relation: str, limit: str, held: bool) -> str:
    return f"  {label:<36} {value:>7,} {relation} {limit}: " + ("held" if held else "BROKEN")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo: publish a range, square it, consume it slowly, and check backpressure.

    Prints a live progress line (refreshed 5 times a second on a terminal, once a second
    otherwise), then a summary with the elements received, the elapsed time, the rate,
    and the largest outstanding demand, buffer and upstream demand observed, each beside
    the bound backpressure promises for it.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments without the program name; ``None`` reads ``sys.argv``.
        ``--elements`` (default 20000), ``--delay-ms`` per element (default 0.25),
        ``--batch-size`` of the subscriber's requests (default 64) and ``--buffer-size``
        of the processor (default 256). The defaults take roughly 5 to 10 seconds.

    Returns
    -------
    int
        0 when every element arrived, mapped and in order, and every bound held; 1 when a
        bound was broken, the count or an element was wrong, the stream failed or stalled;
        130 when interrupted.

    Examples
    --------
    >>> main(["--elements", "100", "--delay-ms", "0"])  # doctest: +ELLIPSIS
    streaming 100 elements: RangePublisher -> MapProcessor(square) -> ...
    elements: 100 of 100, each the square of its position: ok
    0
    """
    args = _parser().parse_args(argv)
    total: int = args.elements
    delay: float = args.delay_ms / 1000
    batch_size: int = args.batch_size
    out = sys.stdout

    print(f"streaming {total:,} elements: RangePublisher -> MapProcessor(square) -> "
          f"AsyncSubscriber sleeping {args.delay_ms:g} ms per element "
          f"(batch size {batch_size}, buffer size {args.buffer_size})", file=out, flush=True)
    maxima = Maxima()
    processor = MapProcessor(square, buffer_size=args.buffer_size)
    subscriber = SlowSubscriber(processor, maxima, delay, batch_size)
    RangePublisher(0, total).subscribe(processor)  # the processor asks for nothing yet
    start = time.monotonic()
    processor.subscribe(subscriber)  # now demand flows upstream, and elements down
    try:
        ended = _report(subscriber, processor, maxima, total, batch_size, out)
    except KeyboardInterrupt:
        subscriber.cancel()
        print(f"\ninterrupted after {subscriber.received:,} elements; subscription cancelled",
              file=out)
        return 130
    elapsed = time.monotonic() - start

    failed = False
    if not ended:
        subscriber.cancel()
        print(f"stalled: no element for {STALL_SECONDS + delay:g} s after "
              f"{subscriber.received:,}; subscription cancelled", file=out)
        failed = True
    else:
        try:
            subscriber.join(timeout=STALL_SECONDS)
        except Exception as exc:  # the stream's own error, or the subscriber's
            print(f"the stream failed: {exc!r}", file=out)
            failed = True

    count = subscriber.received
    rate = count / elapsed if elapsed > 0 else 0.0
    print(f"{count:,} elements in {elapsed:.2f} s: {rate:,.0f} elements/s", file=out)
    print(f"backpressure bounds, maxima over {maxima.samples:,} samples:", file=out)
    buffer_size = processor.buffer_size
    bounds = [
        ("subscriber outstanding demand", maxima.outstanding, "batch size", batch_size),
        ("processor buffered elements", maxima.buffered, "buffer size", buffer_size),
        ("processor upstream demand", maxima.upstream_demand, "buffer size", buffer_size),
        ("processor buffered + upstream demand", maxima.committed, "buffer size", buffer_size),
    ]
    for label, value, limit_label, limit in bounds:
        held = value <= limit
        failed |= not held
        print(_bound(label, value, "<=", f"{limit_label} {limit:,}", held), file=out)
    # Below zero would mean more elements arrived than were requested.
    held = maxima.lowest_outstanding >= 0
    failed |= not held
    print(_bound("lowest outstanding demand (§1.1)", maxima.lowest_outstanding, ">=", "0",
                 held), file=out)

    if count != total:
        verdict = "WRONG count"
    elif subscriber.mismatch is not None:
        verdict = f"WRONG ({subscriber.mismatch})"
    else:
        verdict = "ok"
    failed |= verdict != "ok"
    print(f"elements: {count:,} of {total:,}, each the square of its position: {verdict}",
          file=out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
