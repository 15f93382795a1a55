"""serve_publisher() against remote clients that should not count as having taken a batch:
one that reads part of it and dies (the batch must not return, so Spark does not commit it),
and one without the service's token (refused, holding nothing back); expose() against
another local user, who cannot even connect. The batch function is
ForeachBatchPublisher.deliver_arrow, what a query's foreachBatch runs, without a query."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from polling import wait_until
from rsocket_peer import UNBOUNDED_REQUEST_N, PlainClient
from rsocket_raw import PAYLOAD, RawPeer, request_stream, setup

from pyspark_reactive import ForeachBatchPublisher
from pyspark_reactive.publishers.remote import serve_publisher

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
        wait_until(lambda: publisher.subscribers == 1, 30, "the client's subscription")
        batch = Batch(publisher)
        for _ in range(READ):
            peer.next_of(PAYLOAD)
        peer.close()
        wait_until(lambda: publisher.subscribers == 0, 30,
                   "the dead client's subscription to end")
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




# Run as another local user (uid 65534), standard library only: a raw RSocket client with
# no credentials, which prints what it received.
_OTHER_USER_CLIENT = r"""
import json, socket, struct, sys
port = int(sys.argv[1])
composite = b"message/x.rsocket.composite-metadata.v0"
body = struct.pack(">HHII", 1, 0, 20000, 90000) + bytes([len(composite)]) + composite
body += bytes([24]) + b"application/octet-stream"
def frame(stream_id, kind, flags, body):
    inner = struct.pack(">IH", stream_id, (kind << 10) | flags) + body
    return struct.pack(">I", len(inner))[1:] + inner
sock = socket.create_connection(("127.0.0.1", port), timeout=20)
sock.sendall(frame(0, 0x01, 0, body) + frame(1, 0x06, 0, struct.pack(">I", 5)))
data = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    data += chunk
frames = []
while len(data) >= 3:
    length = int.from_bytes(data[:3], "big")
    inner, data = data[3:3 + length], data[3 + length:]
    stream_id, kind = struct.unpack(">IH", inner[:6])
    frames.append([stream_id, kind >> 10, inner[6:10].hex() if kind >> 10 == 0x0B else ""])
print(json.dumps(frames))
"""


def test_another_local_user_without_the_token_is_refused() -> None:
    import json

    from other_user import other_user_reason, run_as_other_user

    from reactive_streams import RangePublisher
    from reactive_streams.adapters.rsocket import serve

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    rows = ForeachBatchPublisher(element="dict")
    with serve(RangePublisher(0, 10), encode=lambda i: str(i).encode()) as served, \
            serve_publisher(rows) as query_rows:
        for service in (served, query_rows):
            done = run_as_other_user(_OTHER_USER_CLIENT, str(service.port))
            assert done.returncode == 0, done.stderr
            # One ERROR frame on stream 0 (REJECTED_SETUP), then the end: no payload.
            assert json.loads(done.stdout) == [[0, 0x0B, "00000003"]], done.stdout
        assert rows.subscribers == 0
        rows.complete()


# Run as another local user, standard library only: connect to a Unix socket and say what
# came of it.
_OTHER_USER_UNIX_CLIENT = r"""
import json, socket, sys
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect(sys.argv[1])
except OSError as error:
    print(json.dumps({"connected": False, "errno": error.errno}))
else:
    print(json.dumps({"connected": True}))
"""


def test_another_local_user_cannot_even_connect_to_what_expose_serves() -> None:
    import errno
    import json

    from other_user import other_user_reason, run_as_other_user

    from pyspark_reactive.publishers.remote import expose
    from reactive_streams import RangePublisher

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    with expose(RangePublisher(0, 10), format="text",
                encode=lambda i: str(i).encode()) as exposed:
        path = exposed.options["socketPath"]
        done = run_as_other_user(_OTHER_USER_UNIX_CLIENT, path)
        assert done.returncode == 0, done.stderr
        # The socket's folder is 0700: no connection, so nothing to flood or starve.
        assert json.loads(done.stdout) == {"connected": False, "errno": errno.EACCES}
        assert exposed.service._gate.pending == 0 and exposed.service.connections_refused == 0
