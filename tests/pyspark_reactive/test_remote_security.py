"""serve_publisher() against remote clients that should not count as having taken a batch:
one that reads part of it and dies (the batch must not return, so Spark does not commit it),
and one without the service's token (refused, holding nothing back). The batch function is
ForeachBatchPublisher.deliver_arrow, what a query's foreachBatch runs, without a query."""

from __future__ import annotations

import threading

import pyarrow as pa
from rsocket_peer import UNBOUNDED_REQUEST_N, PlainClient
from rsocket_raw import PAYLOAD, RawPeer, request_stream, setup, wait_until

from pyspark_reactive.remote import serve_publisher
from pyspark_reactive.sink import ForeachBatchPublisher

ROWS, READ = 20_000, 10


class Batch:
    """``publisher.deliver_arrow(0, ...)`` on a thread, as foreachBatch calls it."""

    def __init__(self, publisher: ForeachBatchPublisher) -> None:
        self.returned = threading.Event()
        self.error: BaseException | None = None
        batch = pa.record_batch({"id": list(range(ROWS))})

        def run() -> None:
            try:
                publisher.deliver_arrow(0, [batch])
            except BaseException as error:
                self.error = error
            self.returned.set()

        self._thread = threading.Thread(target=run, name="batch-0", daemon=True)
        self._thread.start()


def test_a_batch_returns_only_once_a_remote_client_has_read_every_row() -> None:
    publisher = ForeachBatchPublisher(element="dict")
    with serve_publisher(publisher) as service:
        # A client that asks for every row, reads 10 and dies. The rows it left unread
        # were written to its socket (the kernel's buffers hold them all).
        peer = RawPeer.connect(service.port, receive_buffer=1 << 20)
        peer.send(setup(service.token) + request_stream(1, UNBOUNDED_REQUEST_N))
        wait_until(lambda: publisher.subscribers == 1, "the client's subscription")
        batch = Batch(publisher)
        for _ in range(READ):
            peer.next_of(PAYLOAD)
        peer.close()
        wait_until(lambda: publisher.subscribers == 0, "the dead client's subscription to end")
        assert not batch.returned.is_set(), (
            f"the batch returned ({batch.error or 'normally'}) though its only client read "
            f"{READ} of {ROWS} rows and died")
        # A client that takes every row lets it return, and gets every row.
        with PlainClient(service.port, token=service.token) as client:
            client.request_stream(UNBOUNDED_REQUEST_N)
            assert batch.returned.wait(60), "the batch did not return once a client read it"
            assert batch.error is None
            client.wait_payloads(ROWS)
            assert sorted(row["id"] for row in client.json_rows()) == list(range(ROWS))
        publisher.complete()


