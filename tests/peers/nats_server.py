"""A real NATS server with JetStream for the tests: nats-server on 127.0.0.1, ended by pid.

:class:`Server` writes a config to a temporary directory (JetStream's file store there, one
user with a password so a test can see wrong credentials refused), starts
``nats-server -c`` and waits until it is ready. With ``tls=True`` it listens with TLS only,
with a certificate for 127.0.0.1 signed by a certificate authority made for it
(``ca_file``).

The helpers speak nats-py on a loop of their own (:func:`run`): :func:`create_stream`,
:func:`create_consumer` (a durable pull consumer, explicit acks, a short ``ack_wait``),
:func:`publish_json` (N messages ``{"id": i}``, each with ``Nats-Msg-Id`` so the stream
drops a repeat within its duplicate window), :func:`consumer_info` (``num_ack_pending``:
delivered and not acknowledged; ``num_pending``: not delivered yet) and
:func:`unacknowledged` (``num_ack_pending`` alone, for the crash trials).

Run as a script to serve a server until interrupted (``python tests/peers/nats_server.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ports import free_port  # tests/peers

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
USER = "reader"
#: The test user's password (a test secret, never a real one).
PASSWORD = "nats-test-secret"

__all__ = ["PASSWORD", "USER", "FailingOnce", "Server", "consumer_info", "create_consumer",
           "create_stream", "free_port", "publish_json", "run", "stream_messages",
           "unacknowledged", "version"]

R = TypeVar("R")


def version() -> str:
    """The server's version as ``nats-server --version`` prints it."""
    shown = subprocess.run([NATS_SERVER, "--version"], capture_output=True, text=True,
                           timeout=10)
    return (shown.stdout or shown.stderr).strip()


class Server:
    """A nats-server process with JetStream: ``start()`` it, ``stop()`` it (by pid); a
    context manager too.

    Parameters
    ----------
    directory : path, optional
        Where the config, log and JetStream store go; a fresh temporary directory if
        omitted (removed at ``stop()``). Give the same one to a new server to keep the
        streams of a stopped one.
    tls : bool
        Listen with TLS only (``url`` is then ``tls://...``; ``ca_file`` signs its
        certificate).
    config : str, optional
        Run this configuration instead of the tests' own (a page's settings): its
        ``listen`` line is given ``port`` on 127.0.0.1 and its ``store_dir`` this
        directory; nothing else changes (no TLS). ``$NAME`` in it is taken from the
        environment, as nats-server does.
    env : dict, optional
        Environment variables for the server (what ``$NAME`` in ``config`` names).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, tls: bool = False,
                 config: str | None = None, env: dict[str, str] | None = None) -> None:
        self._own_dir = directory is None
        self.dir = Path(directory if directory is not None
                        else tempfile.mkdtemp(prefix="nats-"))
        self.host = "127.0.0.1"
        self.port = free_port()
        self.tls = tls
        self.ca_file = self.dir / "ca.crt"
        self.config = config
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.host}:{self.port}"

    @property
    def options(self) -> dict[str, Any]:
        """What ``nats.connect`` needs for this server (the test user)."""
        given: dict[str, Any] = {"servers": [self.url], "user": USER, "password": PASSWORD,
                                 "allow_reconnect": False}
        if self.tls:
            import ssl
            given["tls"] = ssl.create_default_context(cafile=str(self.ca_file))
        return given

    @property
    def credentials(self) -> dict[str, str]:
        """The test user, as JetStreamPublisher's keywords."""
        return {"username": USER, "password": PASSWORD}

    @property
    def log(self) -> str:
        path = self.dir / "nats.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = 10.0) -> Server:
        log_line = f'log_file: "{self.dir / "nats.log"}"'
        if self.config is not None:
            lines = [log_line, *self._given_config()]
        else:
            lines = [f"listen: {self.host}:{self.port}", log_line,
                     f'jetstream {{ store_dir: "{self.dir / "js"}" }}',
                     f'authorization {{ users = [ {{user: "{USER}", password: '
                     f'"{PASSWORD}"}} ] }}']
        if self.tls:
            lines.append(self._tls_block())
        config = self.dir / "nats.conf"
        config.write_text("\n".join(lines) + "\n")
        logged = len(self.log)
        self.process = subprocess.Popen([NATS_SERVER, "-c", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env={**os.environ, **(self.env or {})})
        try:
            return self._wait_ready(logged, timeout)
        except BaseException:
            self.stop()  # never leave a server behind
            raise

    def _wait_ready(self, logged: int, timeout: float) -> Server:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        # The log may hold an earlier server's lines (a restart in the same directory).
        while "Server is ready" not in self.log[logged:]:
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode(errors="replace") if (
                    self.process.stderr) else ""
                raise RuntimeError(f"nats-server exited with {self.process.returncode}: "
                                   f"{error}\n{self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server was not ready within {timeout} s:\n"
                                   f"{self.log}")
            time.sleep(0.02)
        socket.create_connection((self.host, self.port), timeout=2).close()
        return self

    def _given_config(self) -> list[str]:
        assert self.config is not None
        lines = self.config.splitlines()
        listens = [i for i, line in enumerate(lines) if line.strip().startswith("listen")]
        stores = [i for i, line in enumerate(lines) if line.strip().startswith("store_dir")]
        if len(listens) != 1 or len(stores) != 1:
            raise ValueError(f"the config has {len(listens)} listen and {len(stores)} "
                             f"store_dir lines, not one each")
        lines[listens[0]] = f"listen: {self.host}:{self.port}"
        lines[stores[0]] = f'  store_dir: "{self.dir / "js"}"'
        return lines

    def _tls_block(self) -> str:
        d = self.dir
        (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
        for command in (
            f"req -x509 -newkey rsa:2048 -nodes -keyout {d}/ca.key -out {d}/ca.crt -days 1 "
            f"-subj /CN=test-ca",
            f"req -newkey rsa:2048 -nodes -keyout {d}/server.key -out {d}/server.csr "
            f"-subj /CN=127.0.0.1",
            f"x509 -req -in {d}/server.csr -CA {d}/ca.crt -CAkey {d}/ca.key -CAcreateserial "
            f"-out {d}/server.crt -days 1 -extfile {d}/san.cnf",
        ):
            subprocess.run(["openssl", *command.split()], check=True, capture_output=True)
        return f'tls {{ cert_file: "{d}/server.crt", key_file: "{d}/server.key" }}'

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server by its pid, then SIGKILL."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if process is not None and process.stderr is not None:
            process.stderr.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(server: Server, work: Callable[[Any], Awaitable[R]], timeout: float = 60.0) -> R:
    """Connect to ``server`` as the test user, await ``work(js)`` (a JetStream context),
    close; on a loop of its own."""
    import nats

    async def main() -> R:
        client = await nats.connect(**server.options, error_cb=_quiet)
        try:
            return await asyncio.wait_for(work(client.jetstream()), timeout)
        finally:
            await client.drain()

    return asyncio.run(main())


async def _quiet(error: Exception) -> None:
    pass


def create_stream(server: Server, name: str, subjects: Iterable[str] | None = None,
                  duplicate_window_s: float = 120.0, **config: Any) -> None:
    """A stream ``name`` on ``subjects`` (default ``<name>.>``), on file storage."""
    from nats.js.api import StorageType, StreamConfig

    async def work(js: Any) -> None:
        await js.add_stream(StreamConfig(
            name=name, subjects=list(subjects or [f"{name}.>"]), storage=StorageType.FILE,
            duplicate_window=duplicate_window_s, **config))

    run(server, work)


def create_consumer(server: Server, stream: str, durable: str, ack_wait_s: float = 3.0,
                    max_ack_pending: int = 10_000, filter_subject: str | None = None
                    ) -> None:
    """A durable pull consumer with explicit acknowledgement."""
    from nats.js.api import AckPolicy, ConsumerConfig

    async def work(js: Any) -> None:
        await js.add_consumer(stream, ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait_s,
            max_ack_pending=max_ack_pending, filter_subject=filter_subject))

    run(server, work)


def publish_json(server: Server, subject: str, count: int, start: int = 0,
                 id_prefix: str = "") -> int:
    """Publish ``{"id": i}`` for i in ``start .. start + count - 1`` to ``subject``, each
    with ``Nats-Msg-Id`` ``<id_prefix><i>``, waiting for every publish acknowledgement;
    return how many the stream took as new (not duplicates)."""

    async def work(js: Any) -> int:
        new = 0
        window = 256  # acknowledgements awaited together
        for first in range(start, start + count, window):
            futures = [js.publish(subject, json.dumps({"id": i}).encode(),
                                  headers={"Nats-Msg-Id": f"{id_prefix}{i}"})
                       for i in range(first, min(first + window, start + count))]
            acks = await asyncio.gather(*futures)
            new += sum(not ack.duplicate for ack in acks)
        return new

    return run(server, work, timeout=120.0)


def consumer_info(server: Server, stream: str, durable: str) -> Any:
    """The consumer's info: ``num_ack_pending`` (delivered, not acknowledged),
    ``num_pending`` (not delivered yet), ``num_redelivered``, ``ack_floor``."""

    async def work(js: Any) -> Any:
        return await js.consumer_info(stream, durable)

    return run(server, work)


def unacknowledged(server: Server, stream: str, durable: str) -> int:
    """The consumer's ``num_ack_pending``: messages delivered and not acknowledged, as the
    server counts them (what a reader holds, or held when it died)."""
    return int(consumer_info(server, stream, durable).num_ack_pending)


def settled_counts(read: Callable[[], Any], want: tuple[int, int] = (0, 0),
                   timeout: float = 10.0) -> tuple[int, int]:
    """``(num_ack_pending, num_pending)`` of the consumer info ``read()`` returns, read
    again until it is ``want`` or ``timeout`` seconds have passed: the server applies the
    acknowledgements a closed connection sent in its own time (a consumer's state is
    updated apart from the connection that acknowledged), and tells no one when it has:
    so this reads again every 0.1 s, the one wait here on a clock rather than an event."""
    pause, deadline = threading.Event(), time.monotonic() + timeout
    while True:
        info = read()
        counts = (int(info.num_ack_pending), int(info.num_pending))
        if counts == want or time.monotonic() >= deadline or pause.wait(0.1):
            return counts


def stream_messages(server: Server, stream: str) -> list[bytes]:
    """Every message the stream holds, in order (read by sequence, no consumer)."""

    async def work(js: Any) -> list[bytes]:
        info = await js.stream_info(stream)
        found = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                found.append((await js.get_msg(stream, seq)).data or b"")
            except Exception:  # deleted
                continue
        return found

    return run(server, work)


class FailingOnce:
    """A ``SubscriberForeachWriter`` factory (picklable: it lives here, on the executors'
    path) of JetStreamSubscribers into ``subject`` that publish each row's ``value`` as
    ``{"id": value}``; the first task of all whose rows reach a second ``_send`` publishes
    those rows and then fails, as a broker connection lost mid-batch would. ``marker`` (a
    file) records that it failed, and after how many rows."""

    def __init__(self, url: str, subject: str, marker: str, window: int = 16) -> None:
        self.url, self.subject, self.marker, self.window = url, subject, marker, window

    def __call__(self, partition_id: int, epoch_id: int) -> Any:
        from reactive_streams.adapters._confirming import BrokerRefused
        from reactive_streams.adapters.nats_jetstream import JetStreamSubscriber

        marker = Path(self.marker)

        class Failing(JetStreamSubscriber[Any]):
            sends = 0

            def _send(self, elements: Any) -> None:
                super()._send(elements)
                self.sends += 1
                if self.sends == 2:
                    try:
                        with open(marker, "x") as record:
                            record.write(str(self.confirmed + len(elements)))
                    except FileExistsError:
                        return
                    raise BrokerRefused("the test's injected failure, mid-batch")

        return Failing(self.url, self.subject, username=USER, password=PASSWORD,
                       window=self.window,
                       encode=lambda row: json.dumps({"id": row.value}).encode())


if __name__ == "__main__":
    with Server() as running:
        print(f"nats-server with JetStream at {running.url} (user {USER}); Ctrl-C ends it")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
