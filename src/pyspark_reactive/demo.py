"""Backpressure you can watch, end to end through Spark.

A built-in ``range`` publisher feeds ``spark.readStream.format("reactive")``; the query
squares each value and its output is a :class:`~pyspark_reactive.ForeachBatchPublisher`;
an ``AsyncSubscriber`` takes the rows, fast at first, then deliberately slowly, then fast
again. A live line shows the batch id, rows/s and the demand outstanding at both ends; the
summary shows the source's pace following the subscriber's and checks the bounds that
backpressure promises. Run it with ``python -m pyspark_reactive.demo --help``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from reactive_streams import AsyncSubscriber

from .progress import source_offset

__all__ = ["main"]

TTY_INTERVAL = 0.25
LOG_INTERVAL = 2.0
#: Seconds without a new row after which the demo gives up.
STALL_SECONDS = 60.0
PHASES = ("fast", "slow", "fast again")


class PacedSubscriber(AsyncSubscriber[tuple[int, int]]):
    """Checks every row (in order, square right) and sleeps per row in the slow phase."""

    def __init__(self, rows: int, batch_size: int, delay: float) -> None:
        super().__init__(batch_size=batch_size)
        self.rows = rows
        self.delay = delay
        self.received = 0
        self.wrong: list[tuple[int, int]] = []
        self.most_outstanding = 0
        self.phase_started = [0.0, 0.0, 0.0]
        self.last_row_at = time.monotonic()
        self.last_row_time = time.time()

    def phase(self) -> int:
        return min(2, self.received * 3 // self.rows)

    def on_element(self, element: tuple[int, int]) -> None:
        value, square = element
        if value != self.received or square != value * value:
            self.wrong.append(element)
        if self.received == 0 or self.received * 3 // self.rows != (
                self.received - 1) * 3 // self.rows:
            self.phase_started[self.phase()] = time.time()
        self.received += 1
        self.last_row_at = time.monotonic()
        self.last_row_time = time.time()
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        if self.phase() == 1:
            time.sleep(self.delay)  # the deliberately slow consumer


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_reactive.demo",
        description="A publisher -> Spark -> subscriber pipeline whose slow subscriber "
                    "slows the source.")
    parser.add_argument("--rows", type=int, default=60_000, help="rows in all (default 60000)")
    parser.add_argument("--max-records", type=int, default=2000,
                        help="maxRecordsPerTrigger of the source (default 2000)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="the subscriber's demand per request (default 64)")
    parser.add_argument("--slow-ms", type=float, default=0.5,
                        help="the subscriber's delay per row in the slow phase (default 0.5)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    for name in ("rows", "max_records", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.rows < 3:
        parser.error(f"--rows: must be >= 3 (one per phase), got {args.rows}")
    if args.slow_ms < 0:
        parser.error(f"--slow-ms: must be >= 0, got {args.slow_ms}")
    return args


def _source_state(progress: dict[str, Any] | None) -> tuple[int, int]:
    """(batch id, rows the source holds) from a query progress, as far as Spark shows."""
    if not progress or not progress.get("sources"):
        return -1, 0
    source = progress["sources"][0]
    end = source_offset(source.get("endOffset"))
    latest = source_offset(source.get("latestOffset"))
    held = latest - end if latest is not None and end is not None else 0
    return int(progress.get("batchId", -1)), max(0, held)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = _parse(argv)
    out = out or sys.stdout
    from pyspark_reactive import local_session, publish

    spark = local_session("pyspark-reactive demo", master=args.master)
    numbers = (spark.readStream.format("reactive").option("publisher", "range")
               .option("count", args.rows).option("maxRecordsPerTrigger", args.max_records)
               .option("fillWaitMs", 20).load())
    squares = numbers.selectExpr("value", "value * value AS square")
    subscriber = PacedSubscriber(args.rows, args.batch_size, args.slow_ms / 1000)
    with tempfile.TemporaryDirectory(prefix="reactive-demo-") as checkpoint:
        publisher = publish(squares, element="tuple", checkpointLocation=checkpoint,
                            queryName="reactive_demo")
        publisher.subscribe(subscriber)
        most_held = _watch(publisher, subscriber, args, out)
        publisher.query.stop()
        subscriber.wait(30)
        progress = list(publisher.query.recentProgress)
    return _summary(subscriber, progress, most_held, args, out)


def _watch(publisher: Any, subscriber: PacedSubscriber, args: argparse.Namespace,
           out: TextIO) -> int:
    tty = out.isatty()
    interval = TTY_INTERVAL if tty else LOG_INTERVAL
    most_held = 0
    last_count, last_time = 0, time.monotonic()
    finished = threading.Event()
    while subscriber.received < args.rows and not subscriber.finished:
        finished.wait(interval)
        batch_id, held = _source_state(publisher.query.lastProgress)
        most_held = max(most_held, held)
        now = time.monotonic()
        rate = (subscriber.received - last_count) / max(now - last_time, 1e-9)
        last_count, last_time = subscriber.received, now
        line = (f"batch {batch_id:>3}  {subscriber.received:>7,}/{args.rows:,} rows  "
                f"{rate:>8,.0f} rows/s  [{PHASES[subscriber.phase()]:>10}]  demand "
                f"outstanding: subscriber {subscriber.outstanding:>3}/{args.batch_size}, "
                f"source {args.max_records - held:>5}/{args.max_records}")
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=out, flush=True)
        if now - subscriber.last_row_at > STALL_SECONDS:
            print(f"\nno row for {STALL_SECONDS:.0f} s: giving up", file=out)
            break
    if tty:
        print(file=out)
    return most_held


def _summary(subscriber: PacedSubscriber, progress: list[dict[str, Any]], most_held: int,
             args: argparse.Namespace, out: TextIO) -> int:
    starts = [*subscriber.phase_started, subscriber.last_row_time]
    batches: list[list[dict[str, Any]]] = [[], [], []]
    for p in progress:
        if p.get("numInputRows", 0) > 0:
            at = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            phase = sum(1 for s in starts[1:3] if at.timestamp() >= s)
            batches[phase].append(p)
    print(f"\n{'phase':>11}  {'delay/row':>9}  {'batches':>7}  {'source rows/s':>13}  "
          f"{'mean batch duration':>19}", file=out)
    for index, name in enumerate(PHASES):
        span = max(starts[index + 1] - starts[index], 1e-9)
        rows = sum(p["numInputRows"] for p in batches[index])
        gaps = [b["durationMs"].get("triggerExecution", 0) for b in batches[index]]
        delay = args.slow_ms if index == 1 else 0.0
        mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
        print(f"{name:>11}  {delay:>7.2f}ms  {len(batches[index]):>7}  {rows / span:>13,.0f}  "
              f"{mean_gap:>16.0f} ms", file=out)
    checks = [
        (f"every row arrived, in order, squared ({subscriber.received:,} of {args.rows:,})",
         subscriber.received == args.rows and not subscriber.wrong),
        (f"subscriber demand outstanding <= {args.batch_size} (most seen "
         f"{subscriber.most_outstanding})", subscriber.most_outstanding <= args.batch_size),
        (f"source rows held + demand outstanding <= maxRecordsPerTrigger {args.max_records} "
         f"(most held {most_held})", most_held <= args.max_records),
    ]
    print("\nThe slow phase's batches take longer: the query waits for the subscriber, so "
          "the source requests no more from its publisher.", file=out)
    for text, held in checks:
        print(f"  {text}: {'held' if held else 'BROKEN'}", file=out)
    ok = all(held for _, held in checks)
    print("ok" if ok else "FAILED", file=out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
