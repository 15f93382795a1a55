"""How an RSocket service listens, and what it does with a connection until the connection's
first frame has been read and checked: before that no rsocket-py object exists for it, so
connections that say nothing cost a socket and a small buffer each, and no log line.

A loopback address is held in both families: a service on 127.0.0.1 also serves [::1] at the
same port (one on ::1 also 127.0.0.1, one on 0.0.0.0 also ::1), because a client that dials
``localhost`` may try either first, and whoever listened there would be sent its token.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Final

log = logging.getLogger("reactive_streams.adapters.rsocket")

#: Connections not yet admitted (no SETUP read yet) that a service keeps at once by
#: default; one more closes the oldest of them, another user's first (see
#: :class:`Gate`). Never more than a quarter of the process's file descriptors.
DEFAULT_MAX_PENDING: Final[int] = 512
# listen()'s backlog (the kernel caps it at net.core.somaxconn): a burst of connections
# waits in the kernel rather than being dropped while the loop is busy.
_BACKLOG = 1024
# Connections accepted per readiness of a listening socket: reads of those already
# accepted interleave with accepting more.
_ACCEPT_BATCH = 128
# How long accepting pauses when the process is out of file descriptors and no connection
# waiting for its SETUP can make room.
_ACCEPT_PAUSE_S = 0.1
_SWEEP_S = 0.5
_READ_BYTES = 1 << 14
# Warnings about connections that never got in: this many per window, individually; the
# rest are counted and summed up in one line when the window ends.
_LOG_WINDOW_S = 60.0
_LOG_LINES = 5
_NO_ADDRESS = {errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT}
_PORT_TRIES = 64
_ERROR_FRAME = 0x0B
_OWN_UID = os.geteuid() if hasattr(os, "geteuid") else None
_NOT_ASKED = -1  # no uid is -1: whose a connection is was not asked yet


# -- binding ------------------------------------------------------------------------------------


def _partner(family: int, address: str) -> tuple[int, str] | None:
    """The loopback address of the other family that a client dialling ``localhost`` might
    reach instead of ``address``, when ``address`` covers this machine's loopback."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if not (ip.is_loopback or ip.is_unspecified):
        return None
    return (socket.AF_INET6, "::1") if family == socket.AF_INET else (socket.AF_INET,
                                                                        "127.0.0.1")


def _addresses(host: str) -> list[tuple[int, tuple[object, ...], bool]]:
    """(family, socket address with port 0, required) for each address to listen on: those
    ``host`` resolves to, then the loopback partners they lack, which are held where the
    machine has them."""
    found: list[tuple[int, tuple[object, ...], bool]] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, 0, socket.AF_UNSPEC,
                                                        socket.SOCK_STREAM, 0,
                                                        socket.AI_PASSIVE):
        if family in (socket.AF_INET, socket.AF_INET6) and all(
                (family, sockaddr) != (f, s) for f, s, _ in found):
            found.append((family, tuple(sockaddr), True))
    for known, resolved, _ in list(found):
        partner = _partner(known, str(resolved[0]))
        if partner is not None and all(f != partner[0] for f, _, _ in found):
            address: tuple[object, ...] = ((partner[1], 0) if partner[0] == socket.AF_INET
                                           else (partner[1], 0, 0, 0))
            found.append((partner[0], address, False))
    return found


def _listening(family: int, sockaddr: tuple[object, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "posix" and sys.platform != "cygwin":
            # As asyncio does: a restarted service rebinds over connections in TIME_WAIT.
            # Another user cannot share the port by it: Linux refuses a second bind while
            # this socket listens (SO_REUSEPORT, which would allow it for the same user, is
            # not set).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(_BACKLOG)  # at once: from now on nobody else can bind the address
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _shown(family: int, address: object, port: int) -> str:
    return f"[{address}]:{port}" if family == socket.AF_INET6 else f"{address}:{port}"


def address_of(sock: socket.socket) -> str:
    """``host:port`` (``[host]:port`` in IPv6) of a listening socket."""
    name = sock.getsockname()
    return _shown(sock.family, name[0], name[1])


def bind_tcp(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host:port``: every address ``host`` resolves to, and, where
    one covers this machine's loopback, the loopback of the other family at the same port
    (``port=0``: a port free on all of them). The first socket is the one asked for."""
    addresses = _addresses(host)
    if not addresses:
        raise OSError(errno.EADDRNOTAVAIL, f"host={host!r} resolves to no IPv4 or "
                                           "IPv6 address to listen on")
    for _ in range(_PORT_TRIES if port == 0 else 1):
        sockets: list[socket.socket] = []
        chosen = port
        try:
            for family, sockaddr, required in addresses:
                try:
                    sockets.append(_listening(family, (sockaddr[0], chosen, *sockaddr[2:])))
                except OSError as error:
                    if not required and error.errno in _NO_ADDRESS:
                        # No loopback of that family here: nobody can listen on it either.
                        log.debug("%s is not held: %s", _shown(family, sockaddr[0], chosen),
                                  error)
                        continue
                    if error.errno == errno.EADDRINUSE and port == 0 and sockets:
                        break  # the port the first address got is taken here: another one
                    if not required and error.errno == errno.EADDRINUSE:
                        raise OSError(errno.EADDRINUSE, (
                            f"{_shown(family, sockaddr[0], port)} is in use by "
                            f"another socket: a client dialling localhost:{port} could reach "
                            "it instead of this service, which holds the loopback address of "
                            "both families; give another port, or port=0")) from None
                    raise
                if chosen == 0:
                    chosen = int(sockets[0].getsockname()[1])
            else:
                return sockets
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        for sock in sockets:
            sock.close()
    raise OSError(errno.EADDRINUSE, f"found no port free on every address of {host!r} and "
                                    f"its loopback partner in {_PORT_TRIES} tries")


def bind_unix(path: str) -> socket.socket:
    """A listening Unix domain socket at ``path`` (which must not exist), readable and
    writable by this user only: the folder holding it is what keeps others out."""
    if not hasattr(socket, "AF_UNIX"):
        raise OSError(errno.EAFNOSUPPORT, "this platform has no Unix domain sockets")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def within_descriptors(max_pending: int) -> int:
    """``max_pending``, at most a quarter of this process's file descriptor limit (at least
    16): connections waiting for their SETUP must not take the descriptors the service
    needs to accept the next one."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return max_pending
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return max_pending
    return max(1, min(max_pending, max(16, soft // 4)))


def file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path`` itself (a link is not followed), or ``None``."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def unix_path_fits(path: str) -> bool:
    """Whether ``path`` fits a Unix socket address (``sun_path``: 108 bytes on Linux, 104
    on macOS and the BSDs, the terminating NUL included)."""
    return len(os.fsencode(path)) < (108 if sys.platform.startswith("linux") else 104)


# -- whose connection is it ---------------------------------------------------------------------


class PeerOwners:
    """The uid owning the other end of a loopback TCP connection, asked of Linux's
    sock_diag netlink interface: an exact lookup by the connection's addresses, which the
    peer cannot forge (a socket belongs to the user who made it). ``None`` wherever that
    cannot be known: another platform, a kernel without sock_diag, a peer already gone, a
    peer not on the loopback."""

    _SOCK_DIAG_BY_FAMILY = 20
    _NLMSG_ERROR = 2
    _ALL_STATES = 0xFFFFFFFF
    _NO_COOKIE = 0xFFFFFFFF

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._usable = sys.platform.startswith("linux") and hasattr(socket, "AF_NETLINK")
        self._sequence = 0

    def uid(self, sock: socket.socket) -> int | None:
        if not self._usable or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            peer, local = sock.getpeername(), sock.getsockname()
            if not ipaddress.ip_address(peer[0]).is_loopback:
                return None
            return self._ask(sock.family, peer[0], peer[1], local[0], local[1])
        except (OSError, ValueError, struct.error):
            return None

    def _ask(self, family: int, peer: str, peer_port: int, local: str,
             local_port: int) -> int | None:
        if self._socket is None:
            try:
                self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                             4)  # NETLINK_SOCK_DIAG
            except OSError:
                self._usable = False
                return None
        source = socket.inet_pton(family, peer).ljust(16, b"\0")
        target = socket.inet_pton(family, local).ljust(16, b"\0")
        # struct inet_diag_req_v2: the peer's socket is the one whose own address is the
        # peer's and whose remote address is ours.
        request = (struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, self._ALL_STATES)
                   + struct.pack("!HH", peer_port, local_port) + source + target
                   + struct.pack("=III", 0, self._NO_COOKIE, self._NO_COOKIE))
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        header = struct.pack("=IHHII", 16 + len(request), self._SOCK_DIAG_BY_FAMILY,
                             1, self._sequence, 0)  # NLM_F_REQUEST
        self._socket.send(header + request)
        # The kernel answers within send(); anything else queued is an older answer.
        while True:
            try:
                answer = self._socket.recv(8192, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            _, kind, _, sequence, _ = struct.unpack_from("=IHHII", answer)
            if sequence != self._sequence:
                continue
            if kind == self._NLMSG_ERROR or len(answer) < 16 + 4 + 48 + 20:
                return None
            # struct inet_diag_msg: 4 bytes, the socket id (48), expires, rqueue, wqueue, uid.
            return int(struct.unpack_from("=I", answer, 16 + 4 + 48 + 12)[0])

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


# -- warnings a flood cannot multiply -------------------------------------------------------------


class QuietLog:
    """Warnings about connections that never got in, at most :data:`_LOG_LINES` per minute
    one by one; the rest, and the connections closed silently (no SETUP in time, or closed
    to make room), are counted and summed up in one line when the minute ends."""

    def __init__(self, where: Callable[[], str]) -> None:
        self._where = where
        self._started = time.monotonic()
        self._lines = 0
        self._held: collections.Counter[str] = collections.Counter()

    def warn(self, counted_as: str, message: str, *args: object) -> None:
        self.tick()
        if self._lines < _LOG_LINES:
            self._lines += 1
            log.warning("RSocket service on %s: " + message, self._where(), *args)
        else:
            self._held[counted_as] += 1

    def count(self, counted_as: str) -> None:
        self.tick()
        self._held[counted_as] += 1

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._started < _LOG_WINDOW_S:
            return
        self.flush(now - self._started)
        self._started, self._lines = now, 0

    def flush(self, seconds: float) -> None:
        if self._held:
            log.warning("RSocket service on %s, in the last %.0f s: %s", self._where(),
                        seconds, "; ".join(f"{what}: {n}" for what, n in
                                           sorted(self._held.items())))
            self._held.clear()

    def close(self) -> None:
        self.flush(time.monotonic() - self._started)


# -- before the first frame -----------------------------------------------------------------------


class _Waiting:
    """An accepted connection whose first frame is not read yet, or that was refused and is
    read until its peer closes (so that the ERROR frame is not lost to a reset)."""

    __slots__ = ("buffer", "fd", "since", "sock", "uid")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.buffer = bytearray()
        self.since = time.monotonic()
        self.uid: int | None = _NOT_ASKED

    @property
    def peer(self) -> str:
        try:
            address = self.sock.getpeername()
        except OSError:
            address = None
        return (_shown(self.sock.family, address[0], address[1])
                if isinstance(address, tuple) else "a local peer")


#: What the service answers about a connection's first frame: ``None`` admits it, or the
#: RSocket error code and why it is refused.
FirstFrameCheck = Callable[[bytes], "tuple[int, str] | None"]


class Gate:
    """Accepts the connections of a service's listening sockets and holds each until its
    first frame is whole (at most ``frame_limit`` bytes), then asks ``check`` about it:
    admitted, the socket and what was read go to ``admit``; refused, the peer gets an ERROR
    frame saying why, then the end of the connection.

    Nobody can keep a client out by connecting and sending nothing: accepting never waits
    for a connection's frame; at most ``max_pending`` connections wait for theirs, and one
    more closes the oldest of them, another user's first (on Linux, where the kernel says
    whose a loopback connection is), so connections of another user never close one of
    this user's; a connection that sends no first frame within ``setup_timeout`` is closed.
    Connections closed so, or refused, are counted in ``refused`` and logged in bounded
    lines (:class:`QuietLog`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, listeners: list[socket.socket],
                 check: FirstFrameCheck, admit: Callable[[socket.socket, bytes], None], *,
                 max_pending: int, setup_timeout: float, frame_limit: int, linger: float,
                 quiet: QuietLog, on_refused: Callable[[], None]) -> None:
        self._loop = loop
        self._listeners = listeners
        self._check = check
        self._admit = admit
        self.max_pending = max_pending
        self._setup_timeout = setup_timeout
        self._frame_limit = frame_limit
        self._linger = linger
        self._quiet = quiet
        self._on_refused = on_refused
        self._owners = PeerOwners()
        # By age, oldest first (insertion order): fd -> connection.
        self._pending: collections.OrderedDict[int, _Waiting] = collections.OrderedDict()
        self._refused: collections.OrderedDict[int, _Waiting] = collections.OrderedDict()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self.evicted = 0  # closed to make room (max_pending)
        self.timed_out = 0  # no first frame within setup_timeout

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        for listener in self._listeners:
            self._loop.add_reader(listener.fileno(), self._acceptable, listener)
        self._sweeper = self._loop.call_later(_SWEEP_S, self._sweep)

    def close(self) -> None:
        """Stop accepting and close every connection not admitted (loop thread)."""
        if self._closed:
            return
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for listener in self._listeners:
            self._loop.remove_reader(listener.fileno())
            listener.close()
        for waiting in (*self._pending.values(), *self._refused.values()):
            self._loop.remove_reader(waiting.fd)
            waiting.sock.close()
        self._pending.clear()
        self._refused.clear()
        self._owners.close()
        self._quiet.close()

    # -- accepting ------------------------------------------------------------------------

    def _acceptable(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: the connections that said nothing make room; if
                    # there are none, accepting pauses instead of spinning.
                    self._quiet.warn("accept() failed", "accept() failed: %s", error)
                    if not self._evict():
                        self._pause(listener)
                    return
                raise
            if self._closed:
                sock.close()
                return
            self._take(sock)

    def _pause(self, listener: socket.socket) -> None:
        self._loop.remove_reader(listener.fileno())

        def resume() -> None:
            if not self._closed:
                self._loop.add_reader(listener.fileno(), self._acceptable, listener)

        self._loop.call_later(_ACCEPT_PAUSE_S, resume)

    def _take(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # Nagle's algorithm off, here for every accepted connection (asyncio does it
            # only for sockets whose proto says TCP, and an accepted one has proto 0):
            # else each small frame written after another waited for the peer's delayed
            # ACK, 44 ms for every request(1) round trip.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        waiting = _Waiting(sock)
        # A client usually sends its SETUP as soon as it is connected, before it is
        # accepted: then it is admitted at once and never waits here.
        if self._read(waiting):
            return
        if len(self._pending) >= self.max_pending and not self._evict(waiting):
            return  # the newcomer itself made the room
        self._pending[waiting.fd] = waiting
        self._loop.add_reader(waiting.fd, self._readable, waiting)

    def _evict(self, newcomer: _Waiting | None = None) -> bool:
        """Close the oldest connection waiting for its first frame that is not known to be
        this user's; when all are, ``newcomer`` if it is not, else the oldest of all. True
        when one that waited was closed."""
        victim = None
        for waiting in self._pending.values():
            if self._foreign(waiting):
                victim = waiting
                break
        if victim is None and newcomer is not None and self._foreign(newcomer):
            self._reset(newcomer.sock)
            self._evicted()
            return False
        if victim is None:
            victim = next(iter(self._pending.values()), None)
            if victim is None:
                return False
        self._forget(victim)
        self._reset(victim.sock)
        self._evicted()
        return True

    def _foreign(self, waiting: _Waiting) -> bool:
        """Whether a connection is not known to be this user's."""
        if waiting.uid == _NOT_ASKED:
            waiting.uid = self._owners.uid(waiting.sock)
        return waiting.uid is None or waiting.uid != _OWN_UID

    def _evicted(self) -> None:
        self.evicted += 1
        self._on_refused()
        self._quiet.count(f"closed before their first frame to make room for newer ones "
                          f"(max_pending={self.max_pending})")

    # -- reading the first frame ----------------------------------------------------------

    def _readable(self, waiting: _Waiting) -> None:
        if self._pending.get(waiting.fd) is waiting:
            self._read(waiting)

    def _read(self, waiting: _Waiting) -> bool:
        """Read what the peer sent; True once the connection no longer waits here."""
        try:
            # A SETUP with a token is a few hundred bytes: small reads, whatever comes.
            data = waiting.sock.recv(min(_READ_BYTES,
                                         self._frame_limit + 3 - len(waiting.buffer)))
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self._forget(waiting)
            waiting.sock.close()
            return True
        if not data:  # closed by the peer before its first frame
            self._forget(waiting)
            waiting.sock.close()
            return True
        waiting.buffer += data
        if len(waiting.buffer) < 3:
            return False
        length = int.from_bytes(waiting.buffer[:3], "big")
        if length > self._frame_limit:
            self._forget(waiting)
            self._reset(waiting.sock)
            self._on_refused()
            self._quiet.warn("refused: a first frame too long",
                             "refused a connection from %s: its first frame announces %d "
                             "bytes, over the %d taken before a SETUP is accepted",
                             waiting.peer, length, self._frame_limit)
            return True
        if len(waiting.buffer) < 3 + length:
            return False
        self._forget(waiting)
        try:
            refusal = self._check(bytes(waiting.buffer[3:3 + length]))
        except Exception as error:  # whatever a parser makes of garbage: refused, said so
            refusal = (0x0001, f"the first frame could not be read: {type(error).__name__}")
        if refusal is None:
            self._admit(waiting.sock, bytes(waiting.buffer))
        else:
            self._refuse(waiting, *refusal)
        return True

    def _forget(self, waiting: _Waiting) -> None:
        # Before the socket is closed or handed over: its descriptor may be reused at once.
        if self._pending.pop(waiting.fd, None) is not None or self._refused.pop(
                waiting.fd, None) is not None:
            self._loop.remove_reader(waiting.fd)

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        # Closed with a reset: nothing of it lingers in the kernel (no FIN_WAIT, TIME_WAIT).
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        sock.close()

    def _refuse(self, waiting: _Waiting, code: int, why: str) -> None:
        self._on_refused()
        self._quiet.warn("refused: no token, another token or no SETUP",
                         "refused a connection from %s: %s", waiting.peer, why)
        data = why.encode("utf-8")
        inner = struct.pack(">IHI", 0, _ERROR_FRAME << 10, code) + data
        try:
            waiting.sock.send(len(inner).to_bytes(3, "big") + inner)  # small: it fits
            waiting.sock.shutdown(socket.SHUT_WR)
        except OSError:
            waiting.sock.close()
            return
        # Read and dropped until the peer closes: closing with its data unread would reset
        # the connection, and the peer could lose the ERROR frame.
        if len(self._refused) >= self.max_pending:
            oldest = next(iter(self._refused.values()))
            self._forget(oldest)
            self._reset(oldest.sock)
        waiting.since = time.monotonic()
        waiting.buffer = bytearray()
        self._refused[waiting.fd] = waiting
        self._loop.add_reader(waiting.fd, self._drain, waiting)

    def _drain(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._forget(waiting)
            waiting.sock.close()

    # -- deadlines --------------------------------------------------------------------------

    def _sweep(self) -> None:
        now = time.monotonic()
        for queue, allowed, timed_out in ((self._pending, self._setup_timeout, True),
                                          (self._refused, self._linger, False)):
            while queue:
                oldest = next(iter(queue.values()))
                if now - oldest.since < allowed:
                    break
                self._forget(oldest)
                self._reset(oldest.sock)
                if timed_out:
                    self.timed_out += 1
                    self._on_refused()
                    self._quiet.count(f"closed: no SETUP frame within {allowed:g} s")
        self._quiet.tick()
        if not self._closed:
            self._sweeper = self._loop.call_later(_SWEEP_S, self._sweep)
