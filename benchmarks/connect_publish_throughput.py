"""Rows/s and peak memory of ``publish()`` under Spark Connect beside classic ``publish()``,
for the same stream, in the same run.

The stream is the built-in ``range`` publisher read by ``format("reactive")`` (``--rows``
rows in batches of ``--batch``), run with ``availableNow`` into ``publish(element="tuple")``
and a subscriber that requests 1024 at a time and counts. Each mode runs in a process of
its own (a process holds one Spark application): classic with ``local_session()``, Connect
with ``local_connect_session()``, a client of a Connect server on 127.0.0.1. Printed per
mode: rows/s from the first row to the last, the whole query's time, and peak resident
memory (VmHWM) of the client's Python process, of the driver/server JVM and, under
Connect, of the server-side ``foreachBatch`` worker; then Connect's rate as a ratio of
classic's (the baseline).

Run from the repository root::

    .venv/bin/python benchmarks/connect_publish_throughput.py [--rows N] [--batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from sink_throughput import Count  # this folder is on sys.path when run as a script

MODES = ("classic", "connect")


class Timed(Count):
    """``sink_throughput.Count`` (request 1024 at a time), noting the first and last row."""

    def __init__(self) -> None:
        super().__init__(1024)
        self.first = 0.0
        self.last = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()

    def on_next(self, element: Any) -> None:
        if self.count == 0:
            self.first = time.perf_counter()
        super().on_next(element)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.last = time.perf_counter()
        self.done.set()


def peak_rss(pid: int) -> int:
    """Peak resident memory of process ``pid`` in bytes (VmHWM), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def foreach_batch_workers() -> list[int]:
    """Process ids of Spark Connect's server-side foreachBatch workers."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                    if b"foreach_batch_worker" in cmdline.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def run_mode(mode: str, rows: int, batch: int) -> dict[str, Any]:
    from pyspark import SparkContext

    from pyspark_reactive import publish
    from pyspark_reactive.session import local_connect_session, local_session

    spark = local_connect_session("connect-publish") if mode == "connect" \
        else local_session("classic-publish")
    gateway = SparkContext._gateway
    assert gateway is not None
    jvm_pid = gateway.proc.pid
    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", rows).option("maxRecordsPerTrigger", batch).load())
    with tempfile.TemporaryDirectory() as checkpoint:
        began = time.perf_counter()
        publisher = publish(df, element="tuple", trigger={"availableNow": True},
                            checkpointLocation=checkpoint)
        subscriber = Timed()
        publisher.subscribe(subscriber)
        if not subscriber.done.wait(1800):
            sys.exit(f"{mode}: no terminal signal after 30 minutes")
        ended = time.perf_counter()
    if subscriber.error is not None:
        sys.exit(f"{mode}: the stream failed: {subscriber.error!r}")
    if subscriber.count != rows:
        sys.exit(f"{mode}: {subscriber.count} rows, expected {rows}")
    workers = foreach_batch_workers()
    return {
        "rate": rows / (subscriber.last - subscriber.first),
        "query_s": ended - began,
        "client": peak_rss(os.getpid()),
        "jvm": peak_rss(jvm_pid),
        "worker": max((peak_rss(pid) for pid in workers), default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000,
                        help="maxRecordsPerTrigger (default 250000)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # a child: one mode, figures as JSON on the last line
        print(json.dumps(run_mode(args.mode, args.rows, args.batch)), flush=True)
        return
    import pyspark

    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{args.rows:,} rows of range in batches of {args.batch:,}, availableNow, "
          "tuple elements, request(1024)")
    figures: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        child = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows),
             "--batch", str(args.batch)], capture_output=True, text=True)
        if child.returncode != 0:
            sys.exit(f"{mode} failed:\n{child.stdout[-2000:]}\n{child.stderr[-4000:]}")
        figures[mode] = json.loads(child.stdout.strip().splitlines()[-1])
        f = figures[mode]
        worker = f" foreachBatch worker {f['worker'] / 2**20:4.0f} MiB" if f["worker"] else ""
        print(f"  {mode:8s} {f['rate']:>10,.0f} rows/s  query {f['query_s']:5.1f} s   peak: "
              f"client {f['client'] / 2**20:4.0f} MiB  JVM {f['jvm'] / 2**20:5.0f} MiB{worker}",
              flush=True)
    ratio = figures["connect"]["rate"] / figures["classic"]["rate"]
    print(f"connect / classic = {ratio:.2f} (rows/s)")


if __name__ == "__main__":
    main()
