"""The RSocket adapter against real peers on 127.0.0.1: RSocketPublisher against a plain
rsocket-py server (and under the TCK), serve() against a plain rsocket-py client, and the
two of ours against each other, over TCP (both loopback families) and a Unix socket."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rs_support import Recorder
from rsocket_peer import (
    CountingServer,
    PlainClient,
    RecordingRange,
    numbered,
    settled,
    socket_allowance,
)
from rsocket_raw import ipv6_loopback

from reactive_streams import (
    UNBOUNDED,
    IterablePublisher,
    Publisher,
    RangePublisher,
    collect,
)
from reactive_streams.adapters import rsocket as rsocket_adapter
from reactive_streams.adapters.rsocket import (
    MAX_REQUEST_N,
    UNBOUNDED_REQUEST_N,
    RemoteStreamError,
    RSocketPublisher,
    RSocketService,
    StreamRequest,
    serve,
)
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification


@pytest.fixture(scope="module")
def server() -> Iterator[CountingServer]:
    with CountingServer(count=10) as peer:
        yield peer


def _last_stream(server: CountingServer, data: bytes) -> Any:
    server.wait_for(lambda: any(s.data == data for s in server.streams), what="the stream")
    return [s for s in server.streams if s.data == data][-1]


# -- RSocketPublisher against a plain rsocket-py server --------------------------------------


def test_each_request_reaches_the_server_as_request_n(server: CountingServer) -> None:
    recorder = Recorder()
    RSocketPublisher("127.0.0.1", server.port, route="numbers", data=b"100",
                     decode=int).subscribe(recorder)
    assert recorder.subscribed.wait(10)
    stream = None
    for n in (7, 1, 30):
        recorder.request(n)
        recorder.wait_for_elements(recorder.requested)
        stream = _last_stream(server, b"100")
    assert stream is not None
    # The first request travels in REQUEST_STREAM, each later one as its own REQUEST_N.
    assert stream.requests == [7, 1, 30]
    assert stream.route == "numbers"
    assert stream.max_outstanding <= 30
    recorder.request(100)
    recorder.wait_done()
    assert recorder.elements == list(range(100))
    assert recorder.completions == 1 and not recorder.errors
    recorder.assert_clean()


def test_demand_beyond_a_frame_is_sent_in_pieces_and_unbounded_as_unbounded(
        server: CountingServer) -> None:
    big = Recorder()
    RSocketPublisher("127.0.0.1", server.port, data=b"5").subscribe(big)
    assert big.subscribed.wait(10)
    big.request(2**31 + 5)  # more than one frame may carry
    big.wait_done()
    assert _last_stream(server, b"5").requests == [MAX_REQUEST_N]

    unbounded = Recorder()
    RSocketPublisher("127.0.0.1", server.port, data=b"6").subscribe(unbounded)
    assert unbounded.subscribed.wait(10)
    unbounded.request(UNBOUNDED)
    unbounded.wait_done()
    assert _last_stream(server, b"6").requests == [UNBOUNDED_REQUEST_N]
    assert unbounded.elements == [str(i).encode() for i in range(6)]


def test_cancel_sends_cancel(server: CountingServer) -> None:
    recorder = Recorder(initial=3)
    RSocketPublisher("127.0.0.1", server.port, data=b"1000").subscribe(recorder)
    recorder.wait_for_elements(3)
    stream = _last_stream(server, b"1000")
    recorder.cancel()
    # A CANCEL frame, not the connection's end (which cancels the stream too).
    server.wait_for(lambda: stream.cancel_frame, what="a CANCEL frame")
    assert stream.sent == 3 and not stream.completed


def test_error_frame_and_unreachable_port_name_the_server_and_route(
        server: CountingServer) -> None:
    with pytest.raises(RemoteStreamError, match=(
            rf"127\.0\.0\.1:{server.port} \(route 'fail'\): the server answered with an "
            r"error: the counting server refuses route 'fail'")):
        collect(RSocketPublisher("127.0.0.1", server.port, route="fail"), timeout=10)
    with CountingServer() as gone:
        port = gone.port
    with pytest.raises(RemoteStreamError, match=rf"127\.0\.0\.1:{port} \(no route\): cannot "
                                                 "connect"):
        collect(RSocketPublisher("127.0.0.1", port), timeout=10)


def test_a_lost_connection_fails_the_stream() -> None:
    peer = CountingServer(count=10**6)
    recorder = Recorder(initial=5)
    RSocketPublisher("127.0.0.1", peer.port, route="r").subscribe(recorder)
    recorder.wait_for_elements(5)
    peer.close()
    recorder.wait_done()
    assert len(recorder.errors) == 1
    assert f"127.0.0.1:{peer.port} (route 'r'): connection lost" in str(recorder.errors[0])


def test_a_server_that_stops_answering_fails_the_stream() -> None:
    # rsocket-py's client only calls a handler when no KEEPALIVE answer came for
    # max_lifetime; its default handler does nothing, and the stream would hang.
    with CountingServer(count=10**6) as peer:
        recorder = Recorder(initial=5)
        RSocketPublisher("127.0.0.1", peer.port, route="r", keepalive_interval=0.2,
                         keepalive_timeout=1.0).subscribe(recorder)
        recorder.wait_for_elements(5)
        peer.stall()
        recorder.request(5)  # unanswered
        assert recorder.done.wait(10), "no terminal signal 10 s after the server stopped"
        peer.resume()
    assert len(recorder.errors) == 1 and len(recorder.elements) == 5
    assert isinstance(recorder.errors[0], RemoteStreamError)
    assert re.search(rf"127\.0\.0\.1:{peer.port} \(route 'r'\): connection lost: no KEEPALIVE "
                     r"answer for \d+\.\d s \(keepalive_timeout 1 s\)",
                     str(recorder.errors[0])), recorder.errors[0]


def test_a_connection_closed_before_any_request_fails_the_stream() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        recorder = Recorder()  # requests nothing: no REQUEST_STREAM is sent
        RSocketPublisher("127.0.0.1", listener.getsockname()[1]).subscribe(recorder)
        connection, _ = listener.accept()
        connection.close()
        recorder.wait_done()
    assert len(recorder.errors) == 1
    assert "connection lost: the server closed the connection" in str(recorder.errors[0])


def test_decode_failure_names_the_payload_and_cancels(server: CountingServer) -> None:
    def decode(data: bytes) -> int:
        if data == b"4":
            raise ValueError("four is not allowed")
        return int(data)

    # Demand for exactly 5, so that nothing is in flight when the client closes: a socket
    # closed with unread data sends RST, and the server may then drop the CANCEL frame
    # before reading it (the connection's end cancels the stream all the same).
    recorder = Recorder(initial=5)
    RSocketPublisher("127.0.0.1", server.port, data=b"100000", decode=decode).subscribe(
        recorder)
    recorder.wait_done()
    assert recorder.elements == [0, 1, 2, 3] and len(recorder.errors) == 1
    assert isinstance(recorder.errors[0], RemoteStreamError)
    assert ("decode failed on payload #5 (b'4', 1 bytes): ValueError: four is not allowed"
            in str(recorder.errors[0]))
    stream = _last_stream(server, b"100000")
    server.wait_for(lambda: stream.cancel_frame, what="CANCEL after the decode failure")


def test_a_server_that_sends_beyond_the_demand_fails_the_stream_and_is_cancelled() -> None:
    with CountingServer(count=100, beyond_demand=1) as peer:
        recorder = Recorder(initial=3)
        RSocketPublisher("127.0.0.1", peer.port, decode=int).subscribe(recorder)
        recorder.wait_done()
        [stream] = peer.streams
        peer.wait_for(lambda: stream.cancel_frame, what="CANCEL after the excess payload")
    assert recorder.elements == [0, 1, 2]
    assert len(recorder.errors) == 1
    assert "the server sent payload #4 beyond the demand it was given (§1.1)" in str(
        recorder.errors[0])


def test_demand_above_the_largest_request_n_is_topped_up_as_payloads_arrive(
        server: CountingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rsocket_adapter, "MAX_REQUEST_N", 4)
    recorder = Recorder(initial=10)
    RSocketPublisher("127.0.0.1", server.port, data=b"30", decode=int).subscribe(recorder)
    recorder.wait_for_elements(10)
    stream = _last_stream(server, b"30")
    # 4 at first; then, each time the server holds only half of that, up to 4 again.
    server.wait_for(lambda: stream.requested == 10, what="all 10 requested")
    assert stream.requests == [4, 2, 2, 2]
    assert stream.max_outstanding <= 4
    recorder.request(20)
    recorder.wait_done()
    assert recorder.elements == list(range(30)) and recorder.completions == 1


def test_arguments_are_checked_and_nothing_connects_until_subscribe() -> None:
    with pytest.raises(ValueError, match="port=70000 is not accepted"):
        RSocketPublisher("127.0.0.1", 70000)
    with pytest.raises(ValueError, match="route or metadata, not both"):
        RSocketPublisher("127.0.0.1", 1, route="a", metadata=b"x")
    # Each of these once made a subscription that never heard anything (or sent NULs).
    for arguments, error, message in [
            ({"route": 123}, TypeError, "route=123 is not accepted: a non-empty str"),
            ({"route": "é" * 128}, ValueError,
             r"route='é+'\.\.\. \(256 bytes\) is not accepted: at most 255 bytes in UTF-8"),
            ({"data": 5}, TypeError, "data=5 is not accepted: bytes"),
            ({"metadata": "text"}, TypeError, "metadata='text' is not accepted: bytes"),
            ({"data_mime_type": None}, TypeError, "data_mime_type=None is not accepted"),
            ({"decode": "int"}, TypeError, "decode='int' is not accepted: a callable"),
            ({"keepalive_timeout": 0}, ValueError, "keepalive_timeout=0 is not accepted"),
            ({"keepalive_interval": 5, "keepalive_timeout": 5}, ValueError,
             "keepalive_timeout=5 is not accepted: more seconds than keepalive_interval=5")]:
        with pytest.raises(error, match=f"RSocketPublisher: {message}"):
            RSocketPublisher("127.0.0.1", 1, **arguments)
    RSocketPublisher("127.0.0.1", 1, route="é" * 127)  # 254 bytes: fine


def test_a_request_that_cannot_be_sent_fails_the_subscription(server: CountingServer) -> None:
    publisher = RSocketPublisher("127.0.0.1", server.port, route="r")
    publisher.route = "r" * 300  # past the constructor's check: rsocket-py refuses the tag
    with pytest.raises(RemoteStreamError, match=r"\(route 'r+'\): cannot send REQUEST_STREAM: "):
        collect(publisher, timeout=10)
    RSocketPublisher("127.0.0.1", 1)  # a closed port: fine until subscribed


class TestRSocketPublisherTCK(PublisherVerification[int]):
    """The client publisher under the TCK, against the plain rsocket-py server."""

    peer: CountingServer

    closed_port: int

    @classmethod
    def setup_class(cls) -> None:
        cls.peer = CountingServer()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            cls.closed_port = listener.getsockname()[1]

    @classmethod
    def teardown_class(cls) -> None:
        cls.peer.close()

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=2000,
                               default_no_signals_timeout_millis=50,
                               default_poll_timeout_millis=20)

    def create_publisher(self, elements: int) -> Publisher[int]:
        return RSocketPublisher("127.0.0.1", self.peer.port, data=str(elements).encode(),
                                decode=int)

    def create_failed_publisher(self) -> Publisher[int] | None:
        # Fails without demand (§1.4 asks for on_error before any request): nobody listens
        # on the port. An ERROR frame would come only after REQUEST_STREAM, which waits for
        # the first request(n); test_error_frame_... covers that one.
        return RSocketPublisher("127.0.0.1", self.closed_port, decode=int)


class TestRSocketPublisherAgainstServeTCK(TestRSocketPublisherTCK):
    """The same, against serve(): the round trip through both sides of the adapter, where
    the TCK's demand (its §1.1 check included) must pass through serve's pacing."""

    service: RSocketService

    @classmethod
    def setup_class(cls) -> None:
        super().setup_class()
        cls.service = serve(lambda request: RangePublisher(0, int(request.data)),
                            encode=lambda i: str(i).encode())

    @classmethod
    def teardown_class(cls) -> None:
        cls.service.close()
        super().teardown_class()

    def create_publisher(self, elements: int) -> Publisher[int]:
        count = min(elements, 2**62)  # LONG_MAX (an endless stream) fits no RangePublisher
        return RSocketPublisher("127.0.0.1", self.service.port, data=str(count).encode(),
                                decode=int, token=self.service.token)


class TestRSocketPublisherOverAUnixSocketTCK(TestRSocketPublisherAgainstServeTCK):
    """The same round trip over a Unix domain socket (what expose() serves by default)."""

    folder: str

    @classmethod
    def setup_class(cls) -> None:
        cls.peer = CountingServer()  # unused here; closed by the inherited teardown
        cls.folder = tempfile.mkdtemp()
        cls.service = serve(lambda request: RangePublisher(0, int(request.data)),
                            encode=lambda i: str(i).encode(),
                            path=os.path.join(cls.folder, "socket"))

    @classmethod
    def teardown_class(cls) -> None:
        super().teardown_class()
        shutil.rmtree(cls.folder, ignore_errors=True)

    def create_publisher(self, elements: int) -> Publisher[int]:
        count = min(elements, 2**62)
        return RSocketPublisher(path=self.service.path, data=str(count).encode(), decode=int,
                                token=self.service.token)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return RSocketPublisher(path=os.path.join(self.folder, "nobody-listens"), decode=int)


def test_serve_and_the_client_speak_over_a_unix_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "socket")
    with serve(RangePublisher(0, 3), encode=lambda i: str(i).encode(), path=path) as service:
        assert (service.path, service.port, service.host) == (path, None, "")
        assert service.addresses == [f"unix:{path}"] and repr(service).startswith(
            f"RSocketService(unix:{path},")
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert collect(RSocketPublisher(path=path, decode=int, token=service.token),
                       timeout=10) == [0, 1, 2]
        with pytest.raises(RemoteStreamError, match=(
                rf"^RSocket request-stream from unix:{re.escape(path)} \(no route\): the "
                "server refused the connection: REJECTED_SETUP")):
            collect(RSocketPublisher(path=path), timeout=10)
    assert not os.path.exists(path)  # removed with the service
    with pytest.raises(RemoteStreamError, match=r"unix:.*: cannot connect: "):
        collect(RSocketPublisher(path=path), timeout=10)
    for arguments, message in [
            ({"path": "relative/socket"}, "path='relative/socket' is not accepted: the "
                                          "absolute path of a Unix domain socket"),
            ({"path": "/" + "x" * 120}, r"path=./x+.\.\.\. \(121 bytes\) is not accepted: a "
                                        "Unix socket's path holds at most 107 bytes"),
            ({"path": path, "port": 7}, r"give path \(a Unix domain socket\) or host and "
                                        "port, not both")]:
        with pytest.raises(ValueError, match=f"^serve: {message}"):
            serve(RangePublisher(0, 1), **arguments)
    with pytest.raises(ValueError, match="^RSocketPublisher: give path"):
        RSocketPublisher("127.0.0.1", 1, path=path)
    with pytest.raises(ValueError, match="^RSocketPublisher: path='x' is not accepted"):
        RSocketPublisher(path="x")


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_a_loopback_service_is_served_on_the_loopback_of_both_families(host: str) -> None:
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback here: a service on 127.0.0.1 is all there is")
    with serve(RangePublisher(0, 3), host=host, encode=lambda i: str(i).encode()) as service:
        port = service.port
        assert sorted(service.addresses) == [f"127.0.0.1:{port}", f"[::1]:{port}"]
        # A client dialling localhost may resolve either first: both are this service.
        for address in ("127.0.0.1", "::1", "localhost"):
            assert collect(RSocketPublisher(address, port, decode=int, token=service.token),
                           timeout=10) == [0, 1, 2]
        assert RSocketPublisher("::1", port).address == f"[::1]:{port}"


# -- serve() against a plain rsocket-py client -----------------------------------------------


def test_served_publisher_is_paced_by_the_remote_request_n() -> None:
    local = RecordingRange(10_000, numbered)
    with serve(local, route="numbers") as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(10, route_name="numbers")
        client.wait_payloads(10)
        assert local.requests == [10]
        client.request(25)
        client.wait_payloads(35)
        assert local.requests == [10, 25]
        client.cancel()
        assert local.cancelled.wait(10)
    assert client.payloads == [str(i).encode() for i in range(35)]


def _accepted_sockets(port: int) -> list[socket.socket]:
    """This process's TCP sockets whose local port is ``port`` and that have a peer: the
    connections a service on that port accepted (duplicates; the caller closes them)."""
    found = []
    for fd in map(int, os.listdir("/proc/self/fd")):
        duplicate = os.dup(fd)
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue  # not a socket
        try:
            if (sock.family in (socket.AF_INET, socket.AF_INET6)
                    and sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port):
                sock.getpeername()  # a listening socket has none
                found.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    return found


def test_served_frames_go_out_at_once_not_after_the_peer_s_delayed_ack() -> None:
    # With Nagle's algorithm on, each small frame written after another waits for the
    # client's delayed ACK (40 ms on Linux): a request(1) at a time made 25 round trips a
    # second. The server's accepted connections must have TCP_NODELAY, as the client's have.
    with serve(RecordingRange(100, numbered)) as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(1)
        client.wait_payloads(1)
        accepted = _accepted_sockets(service.port)
        try:
            assert accepted, "found no connection the service accepted"
            assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted)
        finally:
            for sock in accepted:
                sock.close()
        client.cancel()


def test_served_unbounded_demand_is_taken_in_prefetch_steps() -> None:
    local = RecordingRange(3000, numbered)
    with serve(local, prefetch=1000) as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(UNBOUNDED_REQUEST_N)
        client.wait_end()
    assert client.payloads == [str(i).encode() for i in range(3000)]
    assert max(local.requests) <= 1000 and sum(local.requests) >= 3000


def test_served_prefetch_bounds_what_a_stalled_client_leaves_unread() -> None:
    # The client asks for unbounded demand, then stops reading. What the local publisher
    # delivered beyond what the client read is the prefetch, plus what the kernel's socket
    # buffers hold; rsocket-py's (unbounded) send queue must not take the rest.
    size, prefetch = 65536, 8
    local = RecordingRange(1000, lambda i: bytes(size))
    with serve(local, prefetch=prefetch) as service, \
            PlainClient(service.port, receive_buffer=4 * size,
                        token=service.token) as client:
        client.request_stream(UNBOUNDED_REQUEST_N)
        client.wait_payloads(20)
        client.stall()
        read = len(client.payloads)
        delivered = settled(lambda: local.delivered)
        allowance = socket_allowance(client.socket, size)
        assert delivered <= read + prefetch + allowance, (
            f"the publisher delivered {delivered} payloads of {size} bytes to a client that "
            f"read {read}: more than prefetch {prefetch} + {allowance} the sockets hold")
        client.resume()
        client.wait_end()
    assert client.payloads == [bytes(size)] * 1000


def test_serve_closes_the_connection_of_a_client_gone_silent() -> None:
    # The client's loop stops: no more KEEPALIVE frames, though its TCP connection stays
    # up, as when its machine is lost. Its subscription must not be held forever.
    local = RecordingRange(10**6, numbered)
    with serve(local, keepalive_timeout=1.5) as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(5)
        client.wait_payloads(5)
        assert not local.cancelled.wait(2.0), "cancelled while the client answered"
        client.stall()
        assert local.cancelled.wait(10), "not cancelled 10 s after the client went silent"
        assert not service._connections
        client.resume()


def test_serve_refuses_another_route_and_reports_errors() -> None:
    def failing() -> Iterator[bytes]:
        yield b"one"
        raise OSError("the feed broke")

    with serve(IterablePublisher(failing), route="feed") as service:
        with PlainClient(service.port, token=service.token) as client:
            client.request_stream(5, route_name="other")
            client.wait_for(lambda: client.error is not None, what="the error")
            assert "no stream on route 'other' here: this server serves route 'feed'" in str(
                client.error)
        with PlainClient(service.port, token=service.token) as client:
            client.request_stream(5, route_name="feed")
            client.wait_for(lambda: client.error is not None, what="the error")
            assert client.payloads == [b"one"]
            assert "OSError: the feed broke" in str(client.error)


def test_serve_names_an_element_it_cannot_encode() -> None:
    with serve(RangePublisher(0, 3)) as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(3)
        client.wait_for(lambda: client.error is not None, what="the error")
        assert "element #1 could not be encoded: TypeError: an element of type int" in str(
            client.error)


# -- ours against ours ----------------------------------------------------------------------


def test_our_client_against_our_server_with_a_factory() -> None:
    seen: list[StreamRequest] = []

    def factory(request: StreamRequest) -> Publisher[int]:
        seen.append(request)
        return RangePublisher(0, int(request.data))

    with serve(factory, route="r", encode=lambda i: str(i).encode()) as service:
        publisher = RSocketPublisher("127.0.0.1", service.port, route="r", data=b"2500",
                                     decode=int, token=service.token)
        assert collect(publisher, timeout=20) == list(range(2500))
        assert collect(publisher, timeout=20) == list(range(2500))  # a second subscription
    assert [(r.route, r.data) for r in seen] == [("r", b"2500")] * 2


def test_closing_the_service_cancels_its_subscriptions_and_fails_its_clients() -> None:
    local = RecordingRange(10**9, numbered)
    service = serve(local)
    recorder = Recorder(initial=5)
    RSocketPublisher("127.0.0.1", service.port, route="a", token=service.token).subscribe(
        recorder)
    recorder.wait_for_elements(5)
    service.close()
    assert local.cancelled.wait(10)
    recorder.wait_done()
    assert len(recorder.errors) == 1
    assert f"127.0.0.1:{service.port} (route 'a'): connection lost" in str(recorder.errors[0])
    service.close()  # idempotent


def test_imports_without_pyspark_and_names_the_extra_without_rsocket() -> None:
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None\n"  # importing it would fail
        "import reactive_streams.adapters.rsocket\n"
        "for name in [m for m in sys.modules if m == 'rsocket' or m.startswith('rsocket.')\n"
        "             or m == 'reactive_streams.adapters.rsocket']:\n"
        "    del sys.modules[name]\n"
        "sys.modules['rsocket'] = None\n"
        "try:\n"
        "    import reactive_streams.adapters.rsocket\n"
        "except ImportError as error:\n"
        "    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "the RSocket adapter needs 'rsocket', which is not installed: pip install " \
           "'pyspark-reactive[rsocket]'" in result.stdout
