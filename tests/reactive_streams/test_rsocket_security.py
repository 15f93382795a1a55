"""The RSocket adapter against hostile and careless peers on 127.0.0.1: raw RSocket frames
written here with the standard library, where no RSocket library would misbehave so.

serve() refuses a connection without its token (and serves others on), drops fragments of
streams never opened, cuts a peer that reads nothing and caps streams and connections;
RSocketPublisher refuses a payload over its cap and one begun beyond its demand; a served
stream confirms to a deferring subscription only what the client has read. Another user
(uid 65534, where the tests run as root) can neither listen on the loopback address of the
other family at a service's port nor, with connections that never send a SETUP, close one
of ours or keep a client out; a flood costs a bounded number of log lines.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from polling import wait_until
from rs_support import Recorder
from rsocket_peer import UNBOUNDED_REQUEST_N, PlainClient
from rsocket_raw import (
    ERROR,
    F_FOLLOWS,
    F_NEXT,
    INVALID_SETUP,
    KEEPALIVE,
    PAYLOAD,
    REJECTED_SETUP,
    REQUEST_STREAM,
    RawPeer,
    error_of,
    frame,
    ipv6_loopback,
    keepalive,
    payload,
    request_stream,
    setup,
)

from reactive_streams import Publisher, RangePublisher, Subscriber, Subscription, collect
from reactive_streams.adapters import rsocket as rsocket_adapter
from reactive_streams.adapters.rsocket import RemoteStreamError, RSocketPublisher, serve


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def encode(i: int) -> bytes:
    return str(i).encode()


@pytest.fixture
def numbers() -> Iterator[Any]:
    with serve(RangePublisher(0, 10**9), encode=encode) as service:
        yield service


# -- authentication ------------------------------------------------------------------------


def test_without_or_with_a_wrong_token_the_connection_is_refused_and_others_are_served(
        numbers: Any) -> None:
    assert numbers.token and numbers.token not in repr(numbers)
    # A raw client with no credentials, or a wrong token: an ERROR frame on stream 0 that
    # says why, no payload, then the end of the connection.
    for credentials, why in ((None, "none was presented"),
                             ("guess", "it is not this service's token")):
        peer = RawPeer.connect(numbers.port)
        peer.send(setup(credentials) + request_stream(1, 5))
        stream_id, kind, _, body = peer.next()
        assert (stream_id, kind) == (0, ERROR)
        assert error_of(body) == (REJECTED_SETUP, f"the token was refused: {why}" + (
            " (this service asks for a bearer token in the SETUP frame's composite "
            "metadata, message/x.rsocket.authentication.v0)" if credentials is None else ""))
        with pytest.raises(EOFError):
            peer.next()
        peer.close()
    # A first frame other than SETUP.
    peer = RawPeer.connect(numbers.port)
    peer.send(request_stream(1, 5))
    assert error_of(peer.next_of(ERROR)[2]) == (
        INVALID_SETUP, "the first frame must be SETUP, not RequestStreamFrame")
    peer.close()
    # Our client, with no token and with a wrong one: a clear error naming the server.
    with pytest.raises(RemoteStreamError, match=(
            rf"^RSocket request-stream from 127\.0\.0\.1:{numbers.port} \(no route\): the "
            r"server refused the connection: REJECTED_SETUP: the token was refused: none was "
            r"presented .*; no token was given: pass the service's token \(token=\.\.\.\)$")):
        collect(RSocketPublisher("127.0.0.1", numbers.port), timeout=10)
    with pytest.raises(RemoteStreamError, match=(
            r"the server refused the connection: REJECTED_SETUP: the token was refused: it is "
            r"not this service's token$")) as refused:
        collect(RSocketPublisher("127.0.0.1", numbers.port, token="guess" * 9), timeout=10)
    assert "guess" not in str(refused.value)
    # The service serves on, to a client with its token.
    ranged = serve(lambda request: RangePublisher(0, 3), encode=encode, token="our secret")
    with ranged:
        assert collect(RSocketPublisher("127.0.0.1", ranged.port, decode=int,
                                        token="our secret"), timeout=10) == [0, 1, 2]
    peer = RawPeer.connect(numbers.port)
    peer.send(setup(numbers.token) + request_stream(1, 3))
    assert [peer.next_of(PAYLOAD)[2] for _ in range(3)] == [b"0", b"1", b"2"]
    peer.close()
    assert numbers.connections_refused == 5


def test_the_opt_out_serves_anyone_and_arguments_are_checked() -> None:
    with serve(RangePublisher(0, 2), encode=encode, authenticate=False) as service:
        assert service.token is None
        assert collect(RSocketPublisher("127.0.0.1", service.port, decode=int),
                       timeout=10) == [0, 1]
    for arguments, error, message in [
            ({"authenticate": False, "token": "t"}, ValueError, "authenticate=False serves "
             "anyone, asking for no token: give token or authenticate=False, not both"),
            ({"authenticate": 0}, TypeError, "authenticate=0 is not accepted"),
            ({"token": ""}, TypeError, "token of type str is not accepted: a non-empty str"),
            ({"token": "x" * 4097}, ValueError, "a token of 4097 bytes is not accepted"),
            ({"max_payload_bytes": 0}, ValueError, "max_payload_bytes=0 is not accepted"),
            ({"max_connections": 0}, ValueError, "max_connections=0 is not accepted"),
            ({"max_streams": "2"}, ValueError, "max_streams='2' is not accepted")]:
        with pytest.raises(error, match=f"^serve: {message}"):
            serve(RangePublisher(0, 1), **arguments)
    with pytest.raises(TypeError, match="^RSocketPublisher: token of type bytes"):
        RSocketPublisher("127.0.0.1", 1, token=b"t")  # type: ignore[arg-type]
    assert "hidden" not in repr(RSocketPublisher("127.0.0.1", 1, token="hidden"))


# -- bounded memory ------------------------------------------------------------------------


@pytest.mark.parametrize("stream_id", [1, 0], ids=["never-opened", "stream-0"])
def test_fragments_of_a_stream_never_opened_are_dropped_with_flat_memory(
        numbers: Any, stream_id: int) -> None:
    peer = RawPeer.connect(numbers.port)
    peer.send(setup(numbers.token))
    # Stream 0 is the connection's own: no payload belongs there, and rsocket-py would
    # keep its fragments for ever.
    piece = payload(stream_id, b"A" * (1 << 20), follows=True)
    before = rss_mib()
    for _ in range(64):  # 64 MiB of one payload's fragments, on a stream never opened
        peer.send(piece)
    # The answer to this KEEPALIVE comes once every fragment before it was handled.
    peer.send(keepalive(b"after the fragments"))
    assert peer.next_of(KEEPALIVE)[2][8:] == b"after the fragments"
    grown = rss_mib() - before
    [connection] = numbers._connections
    assert connection.frames_dropped == 64 and connection.peak_buffered == 0
    assert grown < 24, f"the service grew by {grown:.0f} MiB for 64 MiB of fragments"
    # The connection still serves.
    peer.send(request_stream(3, 2))
    assert [peer.next_of(PAYLOAD)[2] for _ in range(2)] == [b"0", b"1"]
    peer.close()


def test_empty_fragments_beginning_payloads_on_many_streams_are_bounded_too() -> None:
    # Each REQUEST_STREAM fragment holds no byte that the cap counts, yet keeping it costs
    # the serving process hundreds of bytes: 12 bytes on the wire each, 100,000 of them
    # would hold some 60 MiB. The connection is cut once their bookkeeping passes the cap.
    with serve(RangePublisher(0, 10), encode=encode, max_payload_bytes=1 << 20) as service:
        peer = RawPeer.connect(service.port)
        peer.send(setup(service.token) + keepalive(b"admitted"))
        assert peer.next_of(KEEPALIVE)[2][8:] == b"admitted"
        [connection] = service._connections
        fragments = b"".join(frame(2 * i + 1, REQUEST_STREAM, F_FOLLOWS, struct.pack(">I", 1))
                             for i in range(100_000))
        try:
            peer.send(fragments)
        except OSError:
            pass  # cut off while sending
        wait_until(lambda: connection.disconnected is not None, 30, "the connection cut off")
        assert re.fullmatch(r"the peer keeps too many fragments in progress \(stream \d+\): "
                            r"\d+ payloads begun in fragments, whose \d+ bytes of "
                            r"bookkeeping would pass max_payload_bytes=1048576",
                            connection.disconnected), connection.disconnected
        assert len(connection._partials) == 0
        peer.close()
        # The service serves others on.
        assert collect(RSocketPublisher("127.0.0.1", service.port, decode=int,
                                        token=service.token), timeout=30) == list(range(10))


class HostileServer:
    """Accepts one connection, reads the client's SETUP and REQUEST_STREAM, then lets
    ``answer(peer, stream_id, n)`` write what it likes."""

    def __init__(self, answer: Callable[[RawPeer, int, int], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.sent = 0
        self.stopped: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(answer,), daemon=True)
        self._thread.start()

    def _run(self, answer: Callable[[RawPeer, int, int], None]) -> None:
        sock, _ = self._listener.accept()
        peer = RawPeer(sock)
        try:
            stream_id, _, body = peer.next_of(REQUEST_STREAM)
            answer(peer, stream_id, struct.unpack(">I", body[:4])[0])
            peer.next()  # until the client closes the connection
        except (OSError, EOFError) as error:
            self.stopped = error
        finally:
            peer.close()
            self._listener.close()

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()


def _send_in_pieces(peer: RawPeer, stream_id: int, size: int) -> None:
    """One PAYLOAD frame of ``size`` bytes of data, its header first, then 64 KiB at a
    time, so that the sender never holds the frame whole."""
    peer.send(struct.pack(">I", 6 + size)[1:]
              + struct.pack(">IH", stream_id, (PAYLOAD << 10) | F_NEXT))
    piece = bytes(1 << 16)
    for _ in range(size // len(piece)):
        peer.send(piece)


@pytest.mark.parametrize(("answer", "message"), [
    # One payload in endless 256 KiB fragments, against a cap of 1 MiB.
    (lambda peer, stream, n: [peer.send(payload(stream, bytes(1 << 18), follows=True))
                              for _ in range(64)],
     "connection cut: the peer sent more than max_payload_bytes=1048576 bytes of fragmented "
     r"payload \(stream 1\): a payload that large is not taken"),
    # One frame over the cap: refused from its header, before it is read. (Sent a piece at
    # a time: this hostile server shares the process whose memory is measured.)
    (lambda peer, stream, n: _send_in_pieces(peer, stream, 8 << 20),
     "connection cut: the peer sent a frame of 8388614 bytes, over the 1049600 taken "
     r"\(max_payload_bytes=1048576\)"),
    # The first fragment of a second payload, with a demand of 1.
    (lambda peer, stream, n: peer.send(payload(stream, b"one") + payload(stream, b"tw", True)),
     r"connection cut: the server sent payload #2 \(its first fragment\) beyond the demand "
     r"it was given \(§1\.1\)"),
])
def test_the_client_fails_a_payload_over_its_cap_or_beyond_its_demand_clearly(
        answer: Callable[[RawPeer, int, int], None], message: str) -> None:
    server = HostileServer(answer)
    recorder = Recorder(initial=1)
    before = rss_mib()
    RSocketPublisher("127.0.0.1", server.port, max_payload_bytes=1 << 20).subscribe(recorder)
    recorder.wait_done()
    grown = rss_mib() - before
    server.join()
    assert len(recorder.errors) == 1, recorder.errors
    assert isinstance(recorder.errors[0], RemoteStreamError)
    assert re.search(f"^RSocket request-stream from 127\\.0\\.0\\.1:{server.port} \\(no "
                     f"route\\): {message}$", str(recorder.errors[0])), recorder.errors[0]
    assert recorder.elements == ([b"one"] if "#2" in message else [])
    assert grown < 12, f"the client grew by {grown:.0f} MiB"


def test_a_peer_that_reads_nothing_is_cut_off(numbers: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rsocket_adapter, "MAX_QUEUED_FRAMES", 64)
    peer = RawPeer.connect(numbers.port, receive_buffer=4096)
    peer.send(setup(numbers.token))
    block = keepalive() * 10_000
    sent, cut = 0, None
    try:
        # Until the kernel's buffers are full of answers, then 64 more queued: the
        # connection goes (4 MiB of send buffer at most hold ~190,000 answers).
        while sent < 2_000_000:
            peer.send(block)
            sent += 10_000
    except OSError as error:
        cut = error
    assert cut is not None, f"still connected after {sent} KEEPALIVE frames left unanswered"
    peer.close()
    wait_until(lambda: not numbers._connections, 30, "the connection's end")


def test_streams_per_connection_and_connections_per_service_are_capped() -> None:
    with serve(RangePublisher(0, 10**9), encode=encode, max_connections=2,
               max_streams=2) as service:
        peer = RawPeer.connect(service.port)
        peer.send(setup(service.token) + request_stream(1, 1) + request_stream(3, 1)
                  + request_stream(5, 1))
        seen: dict[int, Any] = {}
        while len(seen) < 3:
            stream_id, kind, _, body = peer.next()
            seen[stream_id] = error_of(body) if kind == ERROR else body
        assert seen == {1: b"0", 3: b"0", 5: (0x201, "too many streams: this service serves "
                                                     "at most 2 at once on one connection "
                                                     "(max_streams)")}
        with PlainClient(service.port, token=service.token):
            with pytest.raises(RemoteStreamError, match=(
                    "the server refused the connection: REJECTED_SETUP: too many connections: "
                    r"this service takes at most 2 at once \(max_connections\)$")):
                collect(RSocketPublisher("127.0.0.1", service.port, token=service.token),
                        timeout=10)
        peer.close()


def test_connections_that_send_no_setup_do_not_keep_a_client_with_the_token_out() -> None:
    with serve(RangePublisher(0, 3), encode=encode, max_pending=4) as service:
        # Anyone can connect to 127.0.0.1: as many connections as may wait, saying nothing.
        idle = [RawPeer.connect(service.port) for _ in range(4)]
        wait_until(lambda: service._gate.pending == 4, 30, "the idle connections")
        # None of them is an rsocket-py connection yet: they cost a socket each.
        assert not service._connections
        # The client with the token is served at once, not after their SETUP_TIMEOUT.
        assert collect(RSocketPublisher("127.0.0.1", service.port, decode=int,
                                        token=service.token), timeout=10) == [0, 1, 2]
        # One more closes the oldest of them (all are this user's).
        late = RawPeer.connect(service.port)
        with pytest.raises((EOFError, ConnectionResetError)):
            idle[0].next()
        wait_until(lambda: service._gate.pending == 4, 30, "the late connection waiting")
        assert service._gate.evicted == 1
        for peer in [*idle, late]:
            peer.close()


# -- another user of this machine ----------------------------------------------------------

def _other_user() -> None:
    from other_user import other_user_reason

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)


class Rendezvous:
    """A line-by-line channel on 127.0.0.1 to a script run as another user: it connects to
    ``port``, says where it is, and waits for ``release()``: waits are on events, not
    sleeps, on both sides."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(60)
        self.port = self._listener.getsockname()[1]
        self._peer: socket.socket | None = None
        self._lines: Any = None

    def wait_for(self, line: str) -> str:
        if self._peer is None:
            self._peer, _ = self._listener.accept()
            self._peer.settimeout(60)
            self._lines = self._peer.makefile("r")
        got = self._lines.readline().strip()
        assert got.startswith(line), f"the other user said {got!r}, not {line!r}"
        return str(got)

    def release(self) -> None:
        assert self._peer is not None
        self._peer.sendall(b"go\n")

    def close(self) -> None:
        if self._peer is not None:
            self._peer.close()
        self._listener.close()


class InBackground:
    """``run_as_other_user(code, *args)`` on a thread; ``result()`` waits for it."""

    def __init__(self, code: str, *args: str) -> None:
        from other_user import run_as_other_user

        self._done: list[Any] = []
        self._thread = threading.Thread(
            target=lambda: self._done.append(run_as_other_user(code, *args, timeout=90)),
            daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(120)
        assert self._done, "the other user's script did not end"
        done = self._done[0]
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])


# Run as another user: listen on the loopback address of the other family at the service's
# port, as anyone who wants the token of a client dialling localhost would; if that works,
# take a connection and report what it sent.
_SQUATTER = r"""
import json, socket, sys
family, address, port, control = sys.argv[1] == "6", sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
talk = socket.create_connection(("127.0.0.1", control), timeout=60)
squat = socket.socket(socket.AF_INET6 if family else socket.AF_INET)
try:
    squat.bind((address, port))
    squat.listen(8)
except OSError as error:
    talk.sendall(f"refused {error.errno}\n".encode())
    print(json.dumps({"listening": False, "errno": error.errno}))
    sys.exit(0)
talk.sendall(b"listening\n")
squat.settimeout(20)
received = b""
try:
    peer, _ = squat.accept()
    peer.settimeout(5)
    while len(received) < 4096:
        chunk = peer.recv(4096)
        if not chunk:
            break
        received += chunk
except OSError:
    pass
print(json.dumps({"listening": True, "received": received.decode("latin-1")}))
"""


@pytest.mark.parametrize(("host", "other"), [("127.0.0.1", "::1"), ("::1", "127.0.0.1")])
def test_another_user_cannot_listen_on_the_other_loopback_of_a_service(host: str,
                                                                       other: str) -> None:
    # A client dialling localhost may try ::1 first (or 127.0.0.1): whoever listened there
    # at the service's port would be sent its token. The service holds both.
    _other_user()
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback here: nobody can listen on [::1], and a service on "
                    "127.0.0.1 is all a client dialling localhost can reach")
    rendezvous = Rendezvous()
    try:
        with serve(RangePublisher(0, 3), host=host, encode=encode) as service:
            squatter = InBackground(_SQUATTER, "6" if ":" in other else "4", other,
                                    str(service.port), str(rendezvous.port))
            rendezvous.wait_for("")  # it tried
            # The user's own clients, on either address and by name: served by the service.
            got: dict[str, Any] = {}
            for address in (other, host, "localhost"):
                try:
                    got[address] = collect(RSocketPublisher(address, service.port, decode=int,
                                                            token=service.token), timeout=10)
                except Exception as error:
                    got[address] = error
            seen = squatter.result()
            addresses = service.addresses
            token = service.token
    finally:
        rendezvous.close()
    stolen = token is not None and token in seen.get("received", "")
    assert not stolen, "the other user was sent the token"
    assert seen == {"listening": False, "errno": errno.EADDRINUSE}, seen
    assert got == {other: [0, 1, 2], host: [0, 1, 2], "localhost": [0, 1, 2]}, got
    assert sorted(addresses) == sorted([f"127.0.0.1:{service.port}", f"[::1]:{service.port}"])


def test_a_port_whose_other_loopback_is_taken_is_refused_saying_so() -> None:
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback here: nothing can take [::1]")
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=re.escape(
                f"[::1]:{port} is in use by another socket: a client dialling localhost:"
                f"{port} could reach it instead of this service")):
            serve(RangePublisher(0, 1), port=port)
        # Nothing of the attempt stays bound: 127.0.0.1 at that port is free again.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


# Run as another user: silent connections to the service (kept open, nothing sent), then
# what became of them once the test releases it: none may have received a byte.
_FLOOD = r"""
import json, socket, sys
port, control, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held, closed, received = [], 0, b""
for _ in range(count):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=20))
    except ConnectionError:  # reset as soon as it was accepted
        closed += 1
talk = socket.create_connection(("127.0.0.1", control), timeout=60)
talk.sendall(b"flooded\n")
talk.settimeout(60)
talk.recv(16)
for sock in held:
    sock.setblocking(False)
    try:
        chunk = sock.recv(4096)
        received += chunk
        closed += not chunk
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(json.dumps({"opened": count, "closed": closed, "received": len(received)}))
"""


@pytest.mark.parametrize("waiting", [1, 8], ids=["one-of-ours", "room-full-of-ours"])
def test_another_users_silent_connections_never_close_ours_nor_keep_a_client_out(
        caplog: pytest.LogCaptureFixture, waiting: int) -> None:
    _other_user()
    flood, room = 120, 8
    rendezvous = Rendezvous()
    try:
        with caplog.at_level(logging.WARNING), serve(RangePublisher(0, 3), encode=encode,
                                                   max_pending=room) as service:
            # Clients of this user that are slow to send their SETUP: the oldest waiting
            # (with all the room theirs, each connection of the other user is closed as
            # it comes).
            ours = [RawPeer.connect(service.port) for _ in range(waiting)]
            wait_until(lambda: service._gate.pending == waiting, 30, "ours waiting")
            attacker = InBackground(_FLOOD, str(service.port), str(rendezvous.port),
                                    str(flood))
            rendezvous.wait_for("flooded")
            # Every connection of theirs past the room left closed one of theirs.
            wait_until(lambda: service._gate.evicted >= flood - (room - waiting), 30,
                       "the other user's connections closed to make room")
            if waiting < room:
                # A client with the token is served meanwhile (with the room all ours, a
                # client of ours that had to wait would close our oldest: not theirs to
                # decide) ...
                assert collect(RSocketPublisher("127.0.0.1", service.port, decode=int,
                                                token=service.token), timeout=10) == [0, 1, 2]
            # ... and ours, older than all of theirs, were never closed for them.
            for peer in ours:
                peer.send(setup(service.token) + request_stream(1, 3))
                assert [peer.next_of(PAYLOAD)[2] for _ in range(3)] == [b"0", b"1", b"2"]
                peer.close()
            rendezvous.release()
            seen = attacker.result()
    finally:
        rendezvous.close()
    assert seen["opened"] == flood and seen["received"] == 0, seen
    assert seen["closed"] >= flood - (room - waiting), seen
    # A bounded number of lines for the whole flood: its count, in one summary; no
    # rsocket-py traceback, nothing per connection.
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and not lines[0].exc_info, [r.getMessage() for r in lines]
    assert re.search(r"closed before their first frame to make room for newer ones "
                     rf"\(max_pending={room}\): \d+", lines[0].getMessage()), lines[0]
    assert not [r for r in caplog.records if r.name == "pyrsocket"
                and r.levelno >= logging.WARNING]


def test_a_flood_of_refused_connections_logs_a_bounded_number_of_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), serve(RangePublisher(0, 3), encode=encode) as service:
        for _ in range(40):
            peer = RawPeer.connect(service.port)
            peer.send(setup("a guess"))
            assert error_of(peer.next_of(ERROR)[2])[0] == REJECTED_SETUP
            peer.close()
        assert service.connections_refused == 40
    lines = [r.getMessage() for r in caplog.records]
    # Five one by one, the other 35 counted in one line (at the latest when it closes).
    assert len(lines) == 6, lines
    assert all("refused a connection from 127.0.0.1:" in line for line in lines[:5])
    assert lines[5].endswith("refused: no token, another token or no SETUP: 35"), lines[5]
    assert "a guess" not in caplog.text


# -- honest delivery -----------------------------------------------------------------------


class Deferring(Publisher[bytes]):
    """Numbered payloads whose subscription counts an element as taken only once confirmed
    (the interface of ForeachBatchPublisher): it records every confirm(count)."""

    def __init__(self, count: int) -> None:
        self._inner = RangePublisher(0, count)
        self.deferred = threading.Event()
        self.confirmed = 0
        self.cancelled = threading.Event()
        self.changed = threading.Condition()

    def subscribe(self, subscriber: Subscriber[bytes]) -> None:
        self._inner.subscribe(_Confirming(self, subscriber))


class _Confirming(Subscriber[int], Subscription):
    def __init__(self, outer: Deferring, downstream: Subscriber[bytes]) -> None:
        self._outer, self._downstream = outer, downstream
        self._upstream: Subscription | None = None
        self._signalled = 0

    def defer_confirmation(self) -> None:
        assert self._upstream is not None and self._signalled == 0
        self._outer.deferred.set()

    def confirm(self, count: int) -> None:
        assert count <= self._signalled, f"confirmed {count} of {self._signalled} signalled"
        with self._outer.changed:
            self._outer.confirmed = max(self._outer.confirmed, count)
            self._outer.changed.notify_all()

    def on_subscribe(self, subscription: Subscription) -> None:
        self._upstream = subscription
        self._downstream.on_subscribe(self)

    def on_next(self, element: int) -> None:
        self._signalled += 1
        self._downstream.on_next(encode(element))

    def on_error(self, error: BaseException) -> None:
        self._downstream.on_error(error)

    def on_complete(self) -> None:
        self._downstream.on_complete()

    def request(self, n: int) -> None:
        assert self._upstream is not None
        self._upstream.request(n)

    def cancel(self) -> None:
        self._outer.cancelled.set()
        assert self._upstream is not None
        self._upstream.cancel()


def test_a_served_stream_confirms_only_what_the_client_has_read() -> None:
    # A client that takes everything: every row is confirmed, by the answer to a KEEPALIVE
    # sent after the rows (an RSocket client answers only once it read what came before).
    rows = Deferring(3000)
    with serve(rows) as service, PlainClient(service.port, token=service.token) as client:
        client.request_stream(UNBOUNDED_REQUEST_N)
        client.wait_end()
        with rows.changed:
            assert rows.changed.wait_for(lambda: rows.confirmed == 3000, 30), rows.confirmed
    assert rows.deferred.is_set()
    # A client that asks for everything, reads 10 rows and dies: nothing is confirmed,
    # although the server wrote far more than 10 to its socket.
    rows = Deferring(20_000)
    with serve(rows) as service:
        peer = RawPeer.connect(service.port, receive_buffer=1 << 16)
        peer.send(setup(service.token) + request_stream(1, UNBOUNDED_REQUEST_N))
        for _ in range(10):
            peer.next_of(PAYLOAD)
        peer.close()
        assert rows.cancelled.wait(30)
    assert rows.confirmed == 0
