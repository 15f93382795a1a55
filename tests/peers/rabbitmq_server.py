"""A real RabbitMQ node for the tests: Debian's rabbitmq-server on 127.0.0.1, ended by pid.

:class:`Node` gives the node a folder of its own (data, logs, config, enabled plugins, the
Erlang cookie through ``$HOME``), free ports for AMQP, AMQPS (``tls=True``), MQTT and
Erlang distribution, a node name of its own, and an Erlang port mapper (epmd) of its own,
started here on 127.0.0.1 on a free port and ended by its pid at ``stop()`` (epmd outlives
the node). The server script is run directly from ``/usr/lib/rabbitmq/bin`` (the
``/usr/sbin`` wrapper becomes the ``rabbitmq`` user when run as root).

Start-up, measured on the project's 2-core machine: about 6 s to an AMQP listener. The
MQTT plugin is enabled after the node is up (:meth:`Node.enable_mqtt`, started by
``start()`` unless ``mqtt=False``), because a fresh node's MQTT plugin waits 3 to 6 s for
cluster peers before it takes leadership of its Raft cluster, and listeners open only
after every enabled plugin started: enabled after boot, that wait runs beside the AMQP
tests. :meth:`Node.wait_mqtt` waits for its listener.

The config is Erlang terms (``rabbitmq.config``), not ``rabbitmq.conf``: the node then
skips the cuttlefish translation, about 2 s of start-up. One user, ``username`` /
``password``, may do everything; a wrong password is refused. ``Node(conf=TEXT)`` runs a
``rabbitmq.conf`` as written instead (a user's, such as the how-to's): the node then reads
that file, translated by cuttlefish as any node's, and the peer's own settings (listeners,
user, statistics interval, the ``config`` terms) from ``advanced.config``, which RabbitMQ
applies over it; :meth:`Node.settings` reads settings the running node holds, and
:meth:`Node.restart` brings a killed or stopped node back with its data.

Helpers: :meth:`Node.declare_queue`, :func:`publish_json` (N persistent JSON messages
``{"id": i}`` with ``message_id`` ``"<prefix><i>"``, publisher-confirmed) and
:meth:`Node.queue_counts` (``rabbitmqctl list_queues name messages_ready
messages_unacknowledged``, the broker's own count).

Run as a script to serve a node until interrupted (``python tests/peers/rabbitmq_server.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ports import free_port  # tests/peers

__all__ = ["Node", "fails_once_writer", "publish_json", "release_shared_node", "shared_node"]

BIN = Path("/usr/lib/rabbitmq/bin")
SERVER = BIN / "rabbitmq-server"
CTL = BIN / "rabbitmqctl"
PLUGINS = BIN / "rabbitmq-plugins"


def _epmd() -> str:
    found = shutil.which("epmd")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd")):
        return str(candidate)
    return "epmd"


class Node:
    """A RabbitMQ node: ``start()`` it, ``stop()`` it (by pid); a context manager too.

    Parameters
    ----------
    directory : path, optional
        Where data, logs and config go; a fresh temporary directory if omitted (removed at
        ``stop()``). Give the same one (with the same ``name``) to a new node to keep the
        queues of a stopped one.
    tls : bool
        Also listen for AMQPS on ``tls_port``, with a certificate for 127.0.0.1 signed by a
        certificate authority made here (``ca_file``).
    mqtt : bool
        Enable the MQTT plugin on ``mqtt_port`` once the node is up (see the module).
    config : list of str, optional
        More ``{rabbit, [...]}`` settings as Erlang terms (``"{max_message_size, 4096}"``).
    conf : str, optional
        A ``rabbitmq.conf`` (the new-style ``key = value`` format) the node runs as written;
        the peer's own settings then go to ``advanced.config`` (see the module).
    name : str, optional
        The Erlang node name (default ``rabbit-<random>@localhost``).
    """

    username = "spark"
    password = "s3cret-for-tests"
    vhost = "/"
    host = "127.0.0.1"

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, tls: bool = False,
                 mqtt: bool = True, config: Iterable[str] = (),
                 name: str | None = None, conf: str | None = None) -> None:
        self._own_dir = directory is None
        self.dir = Path(directory if directory is not None
                        else tempfile.mkdtemp(prefix="rabbitmq-"))
        self.port = free_port()
        self.mqtt_port = free_port()
        self.tls_port = free_port() if tls else None
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.name = name or f"rabbit-{uuid.uuid4().hex[:8]}@localhost"
        self.ca_file = self.dir / "ca.crt"
        self.mqtt = mqtt
        self.extra = list(config)
        self.conf = conf
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self._plugins: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None  # seconds from start() to an AMQP listener

    @property
    def url(self) -> str:
        return (f"amqp://{self.username}:{self.password}@{self.host}:{self.port}/%2F")

    @property
    def log(self) -> str:
        path = self.dir / "log" / f"{self.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def env(self) -> dict[str, str]:
        """The environment of the node and of its command line tools."""
        d = self.dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update({
            "HOME": str(d),  # the Erlang cookie lives there
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(d / "plugins-expand"),
            "RABBITMQ_CONFIG_FILE": str(
                d / ("rabbitmq.conf" if self.conf is not None else "rabbitmq.config")),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(d / "node.pid"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": self.host,
            "ERL_EPMD_PORT": str(self.epmd_port),
        })
        return env

    def _config(self) -> str:
        rabbit = [f'{{tcp_listeners, [{{"{self.host}", {self.port}}}]}}',
                  "{loopback_users, []}",
                  f'{{default_user, <<"{self.username}">>}}',
                  f'{{default_pass, <<"{self.password}">>}}',
                  "{collect_statistics_interval, 500}",
                  *self.extra]
        if self.tls_port is not None:
            d = self.dir
            rabbit += [f'{{ssl_listeners, [{{"{self.host}", {self.tls_port}}}]}}',
                       f'{{ssl_options, [{{cacertfile, "{d}/ca.crt"}}, '
                       f'{{certfile, "{d}/server.crt"}}, {{keyfile, "{d}/server.key"}}, '
                       "{verify, verify_none}, {fail_if_no_peer_cert, false}]}"]
        mqtt = [f'{{tcp_listeners, [{{"{self.host}", {self.mqtt_port}}}]}}',
                "{ssl_listeners, []}", "{allow_anonymous, true}",
                f'{{default_user, <<"{self.username}">>}}',
                f'{{default_pass, <<"{self.password}">>}}']
        return (f"[{{rabbit, [{', '.join(rabbit)}]}},\n"
                f" {{rabbitmq_mqtt, [{', '.join(mqtt)}]}}].\n")

    def start(self, timeout: float = 60.0) -> Node:
        began = time.monotonic()
        d = self.dir
        (d / "log").mkdir(parents=True, exist_ok=True)
        if self.conf is None:
            (d / "rabbitmq.config").write_text(self._config())
            (d / "advanced.config").write_text("[].\n")
        else:  # the given rabbitmq.conf as written; the peer's settings applied over it
            (d / "rabbitmq.conf").write_text(self.conf)
            (d / "advanced.config").write_text(self._config())
        (d / "rabbitmq-env.conf").write_text("")
        if not (d / "enabled_plugins").exists():
            (d / "enabled_plugins").write_text("[].\n")
        if self.tls_port is not None:
            self._certificates()
        env = self.env()
        self.epmd = subprocess.Popen([_epmd(), "-address", self.host,
                                      "-port", str(self.epmd_port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.process = subprocess.Popen([str(SERVER)], env=env, cwd=d,
                                        stdout=open(d / "server.out", "wb"),
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = began + timeout
        ports = [self.port] + ([self.tls_port] if self.tls_port is not None else [])
        while True:
            if self.process.poll() is not None:
                out = (d / "server.out").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"rabbitmq-server exited with {self.process and 0}: "
                                   f"{out[-3000:]}")
            try:
                for port in ports:
                    socket.create_connection((self.host, port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    log = self.log
                    self.stop()
                    raise RuntimeError(f"rabbitmq-server did not listen within {timeout} s:"
                                       f"\n{log[-3000:]}") from None
                time.sleep(0.05)
        self.started_in = time.monotonic() - began
        if self.mqtt:
            self.enable_mqtt()
        return self

    def enable_mqtt(self) -> None:
        """Enable the MQTT plugin on the running node, in the background (see the module)."""
        if self._plugins is None:
            self._plugins = subprocess.Popen(
                [str(PLUGINS), "-n", self.name, "enable", "--online", "rabbitmq_mqtt"],
                env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_mqtt(self, timeout: float = 30.0) -> int:
        """Wait until the MQTT listener accepts connections; return ``mqtt_port``."""
        self.enable_mqtt()
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((self.host, self.mqtt_port), timeout=0.5).close()
                return self.mqtt_port
            except OSError:
                plugins = self._plugins
                if plugins is not None and plugins.poll() not in (None, 0):
                    error = plugins.stderr.read().decode(errors="replace") if (
                        plugins.stderr) else ""
                    raise RuntimeError(f"rabbitmq-plugins enable failed: {error}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no MQTT listener on {self.mqtt_port} within "
                                       f"{timeout} s:\n{self.log[-2000:]}") from None
                time.sleep(0.05)

    def _certificates(self) -> None:
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

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n <node> ARGS`` against this node; return its output."""
        done = subprocess.run([str(CTL), "-n", self.name, "--quiet", *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr or done.stdout}")
        return done.stdout

    def settings(self, *keys: str, application: str = "rabbit") -> dict[str, Any]:
        """The values the running node holds for ``application``'s ``keys`` (integers, or
        the Erlang terms' text; None for a key it has none for), in one ``rabbitmqctl``."""
        out = self.ctl("eval", f"[application:get_env({application}, K) || "
                       f"K <- [{', '.join(keys)}]].").strip()
        values = re.findall(r"\{ok,(.*?)\}(?=,\{ok|,undefined|\]$)|(undefined)",
                            out.replace("\n", "").replace(" ", ""))
        found: dict[str, Any] = {}
        for key, (value, undefined) in zip(keys, values, strict=True):
            found[key] = None if undefined else (
                int(value) if value.lstrip("-").isdigit() else value)
        return found

    def restart(self, *, kill: bool = True, timeout: float = 60.0) -> Node:
        """SIGKILL the node (or, with ``kill=False``, stop it gracefully) and start it again
        with its folder and name, so with its queues and messages, on the same AMQP port;
        the Erlang distribution and epmd get new ports (the old may linger in TIME_WAIT)."""
        own, self._own_dir = self._own_dir, False  # keep the folder across the stop
        try:
            if kill:
                self.kill()
            self.stop()
        finally:
            self._own_dir = own
        self.dist_port, self.epmd_port = free_port(), free_port()
        return self.start(timeout)

    def queue_counts(self, queue: str) -> tuple[int, int]:
        """``(messages_ready, messages_unacknowledged)`` of ``queue`` from ``rabbitmqctl
        list_queues``: the broker's own count. (RabbitMQ refreshes these figures every
        ``collect_statistics_interval``, 500 ms here.)"""
        rows = json.loads(self.ctl("list_queues", "name", "messages_ready",
                                   "messages_unacknowledged", "--formatter", "json") or "[]")
        for row in rows:
            if row["name"] == queue:
                return int(row["messages_ready"]), int(row["messages_unacknowledged"])
        raise KeyError(f"no queue {queue!r} on {self.name}")

    def connection(self) -> Any:
        """A pika ``BlockingConnection`` to this node as ``username``."""
        import pika

        return pika.BlockingConnection(pika.URLParameters(self.url))

    def declare_queue(self, name: str | None = None, *, durable: bool = True,
                      arguments: dict[str, Any] | None = None, purge: bool = True) -> str:
        """Declare a queue (durable by default; a fresh name if none), emptied; return its
        name."""
        name = name or f"q-{uuid.uuid4().hex[:10]}"
        with _closing(self.connection()) as connection:
            channel = connection.channel()
            channel.queue_declare(name, durable=durable, arguments=arguments)
            if purge:
                channel.queue_purge(name)
        return name

    def delete_queue(self, name: str) -> None:
        with _closing(self.connection()) as connection:
            connection.channel().queue_delete(name)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the node by its pid (it stops gracefully), then SIGKILL; then epmd."""
        plugins, self._plugins = self._plugins, None
        if plugins is not None:
            if plugins.poll() is None:
                plugins.kill()
            plugins.wait(timeout)
            if plugins.stderr is not None:
                plugins.stderr.close()
        process, self.process = self.process, None
        if process is not None:
            # The script waits for the node (its child) and exits with it.
            beam = _read_pid(self.dir / "node.pid")
            _signal(beam if beam is not None else process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                if beam is not None:
                    _signal(beam, signal.SIGKILL)
                process.kill()
                process.wait(timeout)
        epmd, self.epmd = self.epmd, None
        if epmd is not None and epmd.poll() is None:
            epmd.kill()  # epmd outlives the node: ended by its own pid
            epmd.wait(timeout)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the node (not epmd): what it held unconfirmed or unsynced is lost."""
        beam = _read_pid(self.dir / "node.pid")
        if beam is not None:
            _signal(beam, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(15.0)
            self.process = None

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _closing:
    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def __enter__(self) -> Any:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        if self.connection.is_open:
            self.connection.close()


def publish_json(node: Node, queue: str, count: int, *, start: int = 0,
                 prefix: str = "m-", message_id: bool = True, persistent: bool = True,
                 body_pad: int = 0) -> int:
    """Publish ``count`` JSON messages ``{"id": i}`` (i from ``start``) to ``queue`` through
    the default exchange, persistent, each with ``message_id`` ``f"{prefix}{i}"``, and
    wait for the broker's publisher confirms; return ``count``."""
    import pika

    with _closing(node.connection()) as connection:
        channel = connection.channel()
        confirms = _Confirms(connection, channel._impl)
        pad = " " * body_pad
        for i in range(start, start + count):
            properties = pika.BasicProperties(
                delivery_mode=2 if persistent else 1, content_type="application/json",
                message_id=f"{prefix}{i}" if message_id else None)
            # Through the underlying channel: a BlockingChannel in confirm mode would wait
            # for each confirm in turn.
            channel._impl.basic_publish("", queue, (json.dumps({"id": i}) + pad).encode(),
                                        properties)
            confirms.published += 1
        confirms.wait()
    return count


class _Confirms:
    """Publisher confirms of a pika channel, counted as they come."""

    def __init__(self, connection: Any, impl: Any) -> None:
        self.connection, self.published = connection, 0
        self.low = 0  # every tag up to this one is confirmed
        self.singles: set[int] = set()
        self.nacked = 0
        selected = []
        def on_selected(frame: Any) -> None:
            selected.append(1)
            connection.add_callback_threadsafe(lambda: None)  # ends the wait below

        impl.confirm_delivery(self._on_confirm, callback=on_selected)
        while not selected:
            connection.process_data_events(1.0)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        if type(method).__name__ == "Nack":
            self.nacked += 1
        if method.multiple:
            self.low = max(self.low, method.delivery_tag)
        else:
            self.singles.add(method.delivery_tag)
        while self.low + 1 in self.singles:
            self.low += 1
            self.singles.discard(self.low)
        if self.low >= self.published:
            # A confirm does not end process_data_events' wait; a callback does.
            self.connection.add_callback_threadsafe(lambda: None)

    def wait(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.low < self.published:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.low} of {self.published} publishes confirmed in "
                                   f"{timeout} s")
            self.connection.process_data_events(1.0)
        if self.nacked:
            raise RuntimeError(f"the broker refused {self.nacked} publishes (basic.nack)")


_shared: list[Any] = [None, 0]
_shared_lock = threading.Lock()


def shared_node() -> Node:
    """The test process's one node (with MQTT and AMQPS), started on first use; pair each call with
    :func:`release_shared_node`, which stops it after the last user."""
    with _shared_lock:
        if _shared[0] is None:
            _shared[0] = Node(tls=True).start()
        _shared[1] += 1
        node: Node = _shared[0]
        return node


def release_shared_node() -> None:
    with _shared_lock:
        _shared[1] -= 1
        if _shared[1] <= 0 and _shared[0] is not None:
            node, _shared[0] = _shared[0], None
            node.stop()


def _fails_once_class() -> Any:
    from reactive_streams.adapters._confirming import BrokerRefused
    from reactive_streams.adapters.rabbitmq import RabbitMQSubscriber

    class FailsOnceMidBatch(RabbitMQSubscriber[Any]):
        """Its second send publishes half of its rows and then fails, in the first task to get
        there (``marker`` is made once): a writer that breaks in the middle of a batch."""

        def __init__(self, marker: str, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.marker = marker
            self.sends = 0

        def _send(self, elements: Any) -> None:
            self.sends += 1
            if self.sends == 2:
                try:
                    open(self.marker, "x").close()
                except FileExistsError:
                    pass
                else:
                    super()._send(elements[:len(elements) // 2])
                    raise BrokerRefused("injected: the writer fails in the middle of a batch")
            super()._send(elements)


    return FailsOnceMidBatch


def fails_once_writer(marker: str, url: str, queue: str, partition: int,
                      epoch: int) -> Any:
    """A ``SubscriberForeachWriter`` factory: a FailsOnceMidBatch publishing to ``queue``."""
    return _fails_once_class()(marker, queue, url=url, window=16)


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _main() -> None:
    with Node() as node:
        assert node.process is not None
        print(f"RabbitMQ {node.name} on {node.host}:{node.port} (MQTT {node.mqtt_port}), "
              f"user {node.username}, started in {node.started_in:.1f} s; Ctrl-C ends it",
              flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _main()
