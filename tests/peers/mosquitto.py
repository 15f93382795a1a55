"""A real MQTT 5 broker for the tests: mosquitto on 127.0.0.1 on free ports, ended by pid.

:class:`Broker` writes a config to a temporary directory (persistence there, no limit on
queued messages so 10,000 can wait for a slow session), starts ``mosquitto -c`` and waits
until its ports accept connections. Two listeners: ``port`` takes anonymous clients;
``closed_port`` takes no one (no anonymous clients, no password file), so a connection
there is refused with reason code 135 (Not authorized). An ACL lets anonymous clients
read and write every topic but ``forbidden/#``, which the broker refuses to subscribe.

:func:`publish` sends messages as fast as one paho client can, waiting for every QoS 1
PUBACK before it returns.

Run as a script to serve a broker until interrupted (``python tests/peers/mosquitto.py``).
"""

from __future__ import annotations

import collections
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ports import free_port  # tests/peers

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"

__all__ = ["Broker", "free_port", "persistent_session", "publish", "version"]


def version() -> str:
    """The broker's version as ``mosquitto -h`` prints it first ("mosquitto version 2.0.11")."""
    shown = subprocess.run([MOSQUITTO, "-h"], capture_output=True, text=True, timeout=10)
    lines = (shown.stdout or shown.stderr).splitlines()
    return lines[0].strip() if lines else f"{MOSQUITTO} (version unknown)"


class Broker:
    """A mosquitto process: ``start()`` it, ``stop()`` it (by pid); a context manager too.

    Parameters
    ----------
    directory : path, optional
        Where the config, log and persistence file go; a fresh temporary directory if
        omitted (removed at ``stop()``). Give the same one to a new broker to keep the
        sessions of a stopped one.
    tls : bool
        Also listen on ``tls_port`` with TLS: a certificate for 127.0.0.1 signed by a
        certificate authority made for the broker, whose certificate is ``ca_file``.
    config : str, optional
        Run this mosquitto.conf instead of the tests' own (for a configuration a user is
        told to use, such as the README's): its ``listener`` line is given ``port`` on
        127.0.0.1, and nothing else changes (no ``closed_port``, no TLS listener). As root
        mosquitto then runs as the user "mosquitto", so the config must not name files.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 tls: bool = False, config: str | None = None) -> None:
        self._own_dir = directory is None
        self.dir = Path(directory if directory is not None
                        else tempfile.mkdtemp(prefix="mosquitto-"))
        self.port = free_port()
        self.closed_port = free_port()
        self.tls_port = free_port() if tls else None
        self.ca_file = self.dir / "ca.crt"
        self.host = "127.0.0.1"
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        path = self.dir / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = 10.0) -> Broker:
        config = self.dir / "mosquitto.conf"
        if self.config is not None:
            return self._start(config, self._given_config(), timeout, (self.port,))
        acl = self.dir / "acl"
        acl.write_text("topic deny forbidden/#\ntopic readwrite #\n")
        return self._start(config, "\n".join([
            # Run as whoever started it (as root, mosquitto would become "mosquitto",
            # which cannot read this directory).
            f"user {getpass.getuser()}",
            "per_listener_settings true",
            f"listener {self.port} 127.0.0.1",
            "allow_anonymous true",
            f"acl_file {acl}",
            f"listener {self.closed_port} 127.0.0.1",
            "allow_anonymous false",
            *self._tls_listener(),
            "persistence true",
            f"persistence_location {self.dir}/",
            "autosave_interval 1",
            "max_queued_messages 1000000",
            "max_queued_bytes 0",
            f"log_dest file {self.dir / 'mosquitto.log'}",
            "log_type error", "log_type warning", "log_type notice", "log_type information",
            "",
        ]), timeout, (self.port, self.closed_port, self.tls_port))

    def _given_config(self) -> str:
        assert self.config is not None
        lines = self.config.splitlines()
        listeners = [i for i, line in enumerate(lines) if line.split()[:1] == ["listener"]]
        if len(listeners) != 1:
            raise ValueError(f"the config has {len(listeners)} listener lines, not one")
        lines[listeners[0]] = f"listener {self.port} {self.host}"
        return "\n".join(lines) + "\n"

    def _start(self, config: Path, text: str, timeout: float,
               ports: tuple[int | None, ...]) -> Broker:
        config.write_text(text)
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode(errors="replace") if (
                    self.process.stderr) else ""
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}: "
                                   f"{error}\n{self.log}")
            try:
                for port in ports:
                    if port is None:
                        continue
                    socket.create_connection((self.host, port), timeout=0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mosquitto did not listen within {timeout} s:\n"
                                       f"{self.log}") from None
                time.sleep(0.05)

    def _tls_listener(self) -> list[str]:
        if self.tls_port is None:
            return []
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
        return [f"listener {self.tls_port} 127.0.0.1", "allow_anonymous true",
                f"cafile {d}/ca.crt", f"certfile {d}/server.crt", f"keyfile {d}/server.key"]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the broker by its pid (it saves its persistence file), then SIGKILL."""
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

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def persistent_session(broker: Broker, topic: str, client_id: str | None = None) -> str:
    """Make a session subscribed to ``topic`` that the broker keeps queueing for (as the
    project's ``MqttPublisher`` makes it, then left with nobody connected); return its
    client id."""
    import uuid

    from reactive_streams import Subscriber, Subscription
    from reactive_streams.adapters.mqtt import MqttPublisher

    class Idle(Subscriber[object]):
        """Subscribes and asks for nothing."""

        subscription: Subscription | None = None
        error: BaseException | None = None

        def on_subscribe(self, subscription: Subscription) -> None:
            self.subscription = subscription

        def on_next(self, element: object) -> None:
            raise AssertionError(f"nothing was requested, yet {element} arrived")

        def on_error(self, error: BaseException) -> None:
            self.error = error

        def on_complete(self) -> None:
            pass

    client_id = client_id or f"spark-{uuid.uuid4().hex[:8]}"
    probe: MqttPublisher[object] = MqttPublisher(broker.host, topic, port=broker.port,
                                                 client_id=client_id)
    subscriber = Idle()
    probe.subscribe(subscriber)
    assert probe.wait_subscribed(20), subscriber.error or "no SUBACK"
    assert subscriber.subscription is not None
    subscriber.subscription.cancel()
    return client_id


def publish(host: str, port: int, topic: str, payloads: Iterable[bytes | str], *,
            qos: int = 1, retain: bool = False, timeout: float = 60.0,
            per_second: float | None = None,
            published: Callable[[int], None] | None = None) -> int:
    """Publish ``payloads`` to ``topic`` as fast as one client can (or at ``per_second``);
    return how many.

    Waits until the broker has acknowledged every QoS 1/2 message (and, for QoS 0, until
    the client has written them all out). ``published(n)`` is told the count handed to
    the client so far, after each message.
    """
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    connected = threading.Event()
    client.on_connect = lambda c, u, f, rc, p: connected.set()
    client.connect(host, port)
    client.loop_start()
    try:
        if not connected.wait(timeout):
            raise TimeoutError(f"no CONNACK from {host}:{port} within {timeout} s")
        # Packet ids are 16 bits: wait for the oldest when many are unacknowledged, or a
        # new message would take the id of one still under way.
        pending: collections.deque[mqtt.MQTTMessageInfo] = collections.deque()
        sent = 0
        began = time.monotonic()
        deadline = began + timeout

        def settle(info: mqtt.MQTTMessageInfo) -> None:
            info.wait_for_publish(max(0.0, deadline - time.monotonic()))
            if not info.is_published():
                raise TimeoutError(f"message {info.mid} to {topic} not acknowledged within "
                                   f"{timeout} s")

        for payload in payloads:
            if per_second is not None:
                delay = began + sent / per_second - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if len(pending) >= 30_000:
                settle(pending.popleft())
            pending.append(client.publish(topic, payload, qos=qos, retain=retain))
            sent += 1
            if published is not None:
                published(sent)
        while pending:
            settle(pending.popleft())
        return sent
    finally:
        client.disconnect()
        client.loop_stop()


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Serve a broker, or publish to one.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve a broker until interrupted (the default)")
    send = sub.add_parser("publish", help="publish COUNT messages of SIZE bytes, as fast as "
                                          "one client can, then print the seconds it took")
    send.add_argument("host")
    send.add_argument("port", type=int)
    send.add_argument("topic")
    send.add_argument("count", type=int)
    send.add_argument("--size", type=int, default=100)
    send.add_argument("--qos", type=int, default=1)
    args = parser.parse_args()
    if args.command == "publish":
        pad = b"x" * max(0, args.size - 12)
        began = time.perf_counter()
        publish(args.host, args.port, args.topic,
                (b"%010d:" % i + pad for i in range(args.count)), qos=args.qos, timeout=600)
        print(f"{time.perf_counter() - began:.3f}", flush=True)
        return
    with Broker() as broker:
        assert broker.process is not None
        print(f"mosquitto on {broker.host}:{broker.port} (pid {broker.process.pid}); "
              f"Ctrl-C ends it", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _main()
