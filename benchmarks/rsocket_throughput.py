"""Rows/s into Spark through the built-in ``rsocket`` publisher, beside the ceiling: the
same local RSocket server's rate into a plain rsocket-py client that keeps every payload and
does no Spark work; and, to show where the difference goes, the adapter alone.

The server is a plain rsocket-py server (``tests/peers/rsocket_peer.py``) in a process of
its own on 127.0.0.1, sending numbered payloads as fast as the demand it is given allows,
as many as each request's data says. (a) The ceiling: a plain rsocket-py client in this
process requests the whole stream at once (RSocket's unbounded demand) and keeps every
payload; rows/s from the request to the last payload. (c) ``RSocketPublisher`` (the
adapter the built-in uses) into a subscriber that counts, requesting ``--batch`` at a time,
in this process, no Spark. (b) A query reads ``--rows`` payloads with ``publisher=rsocket``
(``format=bytes``, ``maxRecordsPerTrigger=--batch``) into Spark's ``noop`` sink with
``trigger(availableNow=True)`` on ``local[2]``; rows/s from ``start()`` to termination.
After one warm-up each, the three run in turn, ``--repeat`` rounds, so that a round's
figures share the machine's load (each round is printed); the best of each counts, and (b)
and (c) are printed as ratios of (a).

Run from the repository root::

    .venv/bin/python benchmarks/rsocket_throughput.py [--rows N] [--batch B] [--repeat K]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

import pyspark

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))

from rsocket_peer import UNBOUNDED_REQUEST_N, PlainClient  # noqa: E402

from pyspark_reactive import local_session  # noqa: E402
from reactive_streams.adapters.rsocket import RSocketPublisher  # noqa: E402
from throughput_timing import available_now_rate, subscriber_rate  # noqa: E402


def ceiling(port: int, rows: int) -> float:
    """Rows/s of one stream of ``rows`` payloads into a plain client."""
    with PlainClient(port) as client:
        began = time.perf_counter()
        client.request_stream(UNBOUNDED_REQUEST_N, data=str(rows).encode())
        client.wait_end(timeout=600)
        took = time.perf_counter() - began
        assert len(client.payloads) == rows, len(client.payloads)
    return rows / took



def adapter(port: int, rows: int, batch: int) -> float:
    """Rows/s of one stream of ``rows`` payloads through RSocketPublisher, no Spark."""
    publisher = RSocketPublisher("127.0.0.1", port, data=str(rows).encode())
    return subscriber_rate(publisher, rows, batch)


def into_spark(spark: object, port: int, rows: int, batch: int) -> float:
    """Rows/s of one availableNow query of ``rows`` payloads into the noop sink."""
    df = (spark.readStream.format("reactive")  # type: ignore[attr-defined]
          .option("publisher", "rsocket").option("host", "127.0.0.1")
          .option("port", port).option("data", rows).option("format", "bytes")
          .option("maxRecordsPerTrigger", batch).load())
    return available_now_rate(df, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=50_000, help="maxRecordsPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, str(PEERS / "rsocket_peer.py")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        spark = local_session()
        # Warm-ups, then rounds of all three in turn, so each round's figures are taken
        # under the same load (a shared machine's load drifts between minutes).
        ceiling(port, args.rows)
        adapter(port, args.rows, args.batch)
        into_spark(spark, port, args.rows, args.batch)
        rounds = []
        for _ in range(args.repeat):
            rounds.append((ceiling(port, args.rows), adapter(port, args.rows, args.batch),
                           into_spark(spark, port, args.rows, args.batch)))
            plain_i, alone_i, spark_i = rounds[-1]
            print(f"round {len(rounds)}: ceiling {plain_i:,.0f}, adapter {alone_i:,.0f} "
                  f"({alone_i / plain_i:.0%}), into Spark {spark_i:,.0f} "
                  f"({spark_i / plain_i:.0%}) rows/s", flush=True)
        spark.stop()
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    plain, alone, spark_rate = (max(r[i] for r in rounds) for i in range(3))
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, "
          f"{args.rows} rows per run, maxRecordsPerTrigger={args.batch}, best of {args.repeat}")
    print(f"(a) plain rsocket-py client (ceiling): {plain:,.0f} rows/s")
    print(f"(c) RSocketPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.0%} of the ceiling")
    print(f"(b) publisher=rsocket into Spark (noop): {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.0%} of the ceiling")


if __name__ == "__main__":
    main()
