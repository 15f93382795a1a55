"""RSocket frames written with the standard library, for the peers no RSocket library
would be: a client that presents no token or floods, a server that ignores its bounds.
Framing on TCP: a 3-byte length, the stream id (4 bytes), type << 10 | flags (2 bytes),
then the body."""

from __future__ import annotations

import socket
import struct

SETUP, KEEPALIVE, REQUEST_STREAM, PAYLOAD, ERROR = 0x01, 0x03, 0x06, 0x0A, 0x0B
F_METADATA, F_FOLLOWS, F_COMPLETE, F_NEXT, F_RESPOND = 0x100, 0x80, 0x40, 0x20, 0x80
COMPOSITE = b"message/x.rsocket.composite-metadata.v0"
REJECTED_SETUP, INVALID_SETUP = 0x3, 0x1


def frame(stream_id: int, kind: int, flags: int, body: bytes) -> bytes:
    inner = struct.pack(">IH", stream_id, (kind << 10) | flags) + body
    return struct.pack(">I", len(inner))[1:] + inner


def bearer(token: str) -> bytes:
    """Composite metadata with one authentication entry (well-known 0x7C) of type bearer
    (well-known 0x01): what any RSocket library sends for a bearer token."""
    content = bytes([0x80 | 0x01]) + token.encode()
    return bytes([0x80 | 0x7C]) + len(content).to_bytes(3, "big") + content


def setup(token: str | None = None) -> bytes:
    body = struct.pack(">HHII", 1, 0, 20000, 90000)
    body += bytes([len(COMPOSITE)]) + COMPOSITE + bytes([8]) + b"text/raw"
    if token is None:
        return frame(0, SETUP, 0, body)
    metadata = bearer(token)
    return frame(0, SETUP, F_METADATA, body + len(metadata).to_bytes(3, "big") + metadata)


def request_stream(stream_id: int, n: int) -> bytes:
    return frame(stream_id, REQUEST_STREAM, 0, struct.pack(">I", n))


def payload(stream_id: int, data: bytes, follows: bool = False) -> bytes:
    return frame(stream_id, PAYLOAD, F_NEXT | (F_FOLLOWS if follows else 0), data)


def keepalive(data: bytes = b"", respond: bool = True) -> bytes:
    return frame(0, KEEPALIVE, F_RESPOND if respond else 0, struct.pack(">Q", 0) + data)


class RawPeer:
    """One TCP connection speaking raw frames: ``send`` bytes, ``next()`` a whole frame as
    (stream id, type, flags, body)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(30)
        self._buffer = b""

    @classmethod
    def connect(cls, port: int, receive_buffer: int | None = None,
                host: str = "127.0.0.1") -> RawPeer:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.connect((host, port))
        return cls(sock)

    @classmethod
    def connect_unix(cls, path: str) -> RawPeer:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        return cls(sock)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _need(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("the peer closed the connection")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def next(self) -> tuple[int, int, int, bytes]:
        length = struct.unpack(">I", b"\0" + self._need(3))[0]
        inner = self._need(length)
        stream_id, kind = struct.unpack(">IH", inner[:6])
        return stream_id, kind >> 10, kind & 0x3FF, inner[6:]

    def next_of(self, kind: int) -> tuple[int, int, bytes]:
        while True:
            stream_id, got, flags, body = self.next()
            if got == kind:
                return stream_id, flags, body

    def close(self) -> None:
        self.sock.close()


def error_of(body: bytes) -> tuple[int, str]:
    return struct.unpack(">I", body[:4])[0], body[4:].decode()


def ipv6_loopback() -> bool:
    """Whether this machine has an IPv6 loopback (::1) to listen on."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True
