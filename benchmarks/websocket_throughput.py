"""Rows/s into Spark through the built-in ``websocket`` publisher, beside the ceiling: the
same local server's rate into a plain ``websockets`` client that keeps every message and
does no Spark work; and, to show where the difference goes, the adapter alone.

The server is a ``websockets`` server (``tests/peers/websocket_server.py``) in a process of
its own on 127.0.0.1, sending ``--rows`` numbered text messages of ``--size`` characters
on each connection as fast as the connection takes them, then closing normally.
(a) The ceiling: a plain ``websockets`` asyncio client in this process receives every
message into a list; rows/s from connecting to the close; the better of the library's
defaults and the adapter's settings (``max_queue=0``, no keepalive pings).
(c) ``WebSocketPublisher`` (the adapter the built-in uses) into a subscriber that counts,
requesting ``--batch`` at a time, in this process, no Spark. (b) A query reads the stream
with ``publisher=websocket`` (``format=text``, ``maxRecordsPerTrigger=--batch``) into
Spark's ``noop`` sink with ``trigger(availableNow=True)`` on ``local[2]``; the server's
normal close ends it; rows/s from ``start()`` to termination. Each runs ``--repeat`` times
after one warm-up ((a) and (c) in turns); the best run counts, and (b) and (c) are printed
as ratios of (a). The server shares the machine with the client: on 2 cores (a) and (c) are
both near what the server can send, and differ by less than the noise between runs.

Run from the repository root::

    .venv/bin/python benchmarks/websocket_throughput.py [--rows N] [--size S] [--batch B]
        [--repeat K]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import websockets
from websockets.asyncio.client import connect

from pyspark_reactive import local_session
from reactive_streams.adapters.websocket import READ_AHEAD_FRAMES, WebSocketPublisher
from throughput_timing import available_now_rate, subscriber_rate

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
# The plain client once more with the adapter's settings: the ceiling is the better of the
# two, so that the adapter is not measured against a client handicapped by its defaults.
LIKE_THE_ADAPTER = {"max_queue": READ_AHEAD_FRAMES, "ping_interval": None}


def ceiling(url: str, rows: int, **settings: object) -> float:
    """Rows/s of one connection's ``rows`` messages into a plain client."""
    async def receive() -> list[str | bytes]:
        kept: list[str | bytes] = []
        async with connect(url, **settings) as connection:  # type: ignore[arg-type]
            async for message in connection:  # ends at the server's normal close
                kept.append(message)
        return kept

    began = time.perf_counter()
    kept = asyncio.run(receive())
    took = time.perf_counter() - began
    assert len(kept) == rows, len(kept)
    return rows / took



def adapter(url: str, rows: int, batch: int) -> float:
    """Rows/s of one connection's ``rows`` messages through WebSocketPublisher, no Spark."""
    return subscriber_rate(WebSocketPublisher(url), rows, batch)


def into_spark(spark: object, url: str, rows: int, batch: int) -> float:
    """Rows/s of one availableNow query of ``rows`` messages into the noop sink."""
    df = (spark.readStream.format("reactive")  # type: ignore[attr-defined]
          .option("publisher", "websocket").option("url", url)
          .option("maxRecordsPerTrigger", batch).load())
    return available_now_rate(df, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="characters per message")
    parser.add_argument("--batch", type=int, default=50_000, help="maxRecordsPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, str(PEERS / "websocket_server.py"),
                               "--size", str(args.size)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"{server.stdout.readline().strip()}/count/{args.rows}"
        ceiling(url, args.rows)  # warm-ups
        adapter(url, args.rows, args.batch)
        # Taken in turns, so that a busy moment of the machine does not favour one.
        default = tuned = alone = 0.0
        for _ in range(args.repeat):
            default = max(default, ceiling(url, args.rows))
            tuned = max(tuned, ceiling(url, args.rows, **LIKE_THE_ADAPTER))
            alone = max(alone, adapter(url, args.rows, args.batch))
        plain = max(default, tuned)
        spark = local_session()
        try:
            into_spark(spark, url, args.rows, args.batch)  # warm-up
            spark_rate = max(into_spark(spark, url, args.rows, args.batch)
                             for _ in range(args.repeat))
        finally:
            spark.stop()
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, websockets "
          f"{websockets.__version__}, {args.rows} messages of {args.size} characters per "
          f"run, maxRecordsPerTrigger={args.batch}, best of {args.repeat}")
    print(f"(a) plain websockets client (ceiling): {plain:,.0f} rows/s (library defaults "
          f"{default:,.0f}; max_queue={READ_AHEAD_FRAMES}, no pings {tuned:,.0f})")
    print(f"(c) WebSocketPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.0%} of the ceiling")
    print(f"(b) publisher=websocket into Spark (noop): {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.0%} of the ceiling")


if __name__ == "__main__":
    main()
