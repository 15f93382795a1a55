"""A real Redis for the tests: Debian's redis-server on 127.0.0.1 on a free port, ended by pid.

:class:`RedisServer` writes a redis.conf into a folder of its own (the append-only file
there, ``appendonly yes`` with ``appendfsync everysec``: a killed server process loses
nothing, since every write reaches the operating system before the reply; only a machine
crash could lose the last second, which a test does not do, and ``always`` would slow the
tests' writes), sets ``requirepass`` to a password it writes to :attr:`password_file` (so a
test can give a wrong one and see it refused), adds the ACL user ``reader`` (password in
:attr:`reader_password_file`), starts ``redis-server`` and waits until it answers.
With ``tls=True`` it also listens with TLS on :attr:`tls_port`, with a certificate for
127.0.0.1 signed by a certificate authority made for it (:attr:`ca_file`).

:func:`add_json` appends N entries ``{"id": i}`` (in the field ``payload``) to a stream;
:func:`pending_count` is the group's own count of entries delivered and not acknowledged
(``XPENDING``); :func:`stream_length` is ``XLEN``.

Run as a script to serve one until interrupted (``python tests/peers/redis_server.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ports import free_port  # tests/peers

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"

__all__ = ["READER", "RedisServer", "add_json", "free_port", "pending_count", "stream_length",
           "version"]

#: The ACL user the server has besides ``default`` (read and write on every key).
READER = "reader"


def version() -> str:
    """The server's version as ``redis-server --version`` prints it."""
    shown = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True,
                           timeout=10)
    return shown.stdout.strip() or f"{REDIS_SERVER} (version unknown)"


class RedisServer:
    """A redis-server process: ``start()`` it, ``stop()`` it (by pid); a context manager too.

    Parameters
    ----------
    directory : path, optional
        Where the config, log and append-only files go; a fresh temporary folder if omitted
        (removed at ``stop()``). Give a stopped server's folder to a new one to keep its data.
    tls : bool
        Also listen on ``tls_port`` with TLS (see the module).
    config : str, optional
        Run this redis.conf instead of the tests' own (one a user is told to use, such as
        the how-to's): ``port``, ``bind``, ``dir`` and the password are set for the test
        after it (later lines win in redis.conf), nothing else changes.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, tls: bool = False,
                 config: str | None = None) -> None:
        self._own_dir = directory is None
        self.dir = Path(directory if directory is not None
                        else tempfile.mkdtemp(prefix="redis-"))
        self.host = "127.0.0.1"
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.ca_file = self.dir / "ca.crt"
        self.config = config
        self.password_file = self.dir / "password"
        self.reader_password_file = self.dir / "reader-password"
        if not self.password_file.exists():
            self.password_file.write_text(secrets.token_urlsafe(16) + "\n")
            self.reader_password_file.write_text(secrets.token_urlsafe(16) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>`` (no credentials in it: give ``password_file``)."""
        return f"redis://{self.host}:{self.port}"

    @property
    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def client(self, **kwargs: Any) -> Any:
        """A redis-py client logged in as ``default``."""
        import redis

        return redis.Redis(host=self.host, port=self.port, password=self.password,
                           protocol=2, **kwargs)

    def start(self, timeout: float = 10.0) -> RedisServer:
        lines = ([self.config] if self.config is not None else [
            "appendonly yes",
            "appendfsync everysec",
            "maxmemory-policy noeviction",
            'save ""',
        ])
        reader = self.reader_password_file.read_text().strip()
        lines += [
            f"port {self.port}",
            f"bind {self.host}",
            "protected-mode yes",
            f"dir {self.dir}",
            f"logfile {self.dir / 'redis.log'}",
            "daemonize no",
            f"requirepass {self.password}",
            f"user {READER} on >{reader} ~* &* +@all",
            *self._tls_lines(),
            "",
        ]
        conf = self.dir / "redis.conf"
        conf.write_text("\n".join(lines))
        conf.chmod(0o600)
        self.process = subprocess.Popen([REDIS_SERVER, str(conf)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        client = self.client(socket_connect_timeout=0.5, socket_timeout=2)
        try:
            while True:
                if self.process.poll() is not None:
                    error = self.process.stderr.read().decode(errors="replace") if (
                        self.process.stderr) else ""
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}: "
                                       f"{error}\n{self.log}")
                try:
                    client.ping()
                    return self
                except Exception:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError(f"redis-server did not answer within {timeout} s:"
                                           f"\n{self.log}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def _tls_lines(self) -> list[str]:
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
        return [f"tls-port {self.tls_port}", f"tls-cert-file {d}/server.crt",
                f"tls-key-file {d}/server.key", f"tls-ca-cert-file {d}/ca.crt",
                "tls-auth-clients no"]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server by its pid (it flushes its append-only file), then SIGKILL."""
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

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_json(server: RedisServer, stream: str, count: int, start: int = 0, *,
             field: str = "payload", chunk: int = 1000) -> list[str]:
    """XADD ``count`` entries ``{"id": i}`` (i from ``start``) to ``stream``, in the field
    ``field``, in pipelines of ``chunk``; return their entry IDs. The entry ID is each
    message's identity."""
    client = server.client()
    ids: list[str] = []
    try:
        for first in range(start, start + count, chunk):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(first + chunk, start + count)):
                pipe.xadd(stream, {field: json.dumps({"id": i})})
            ids += [i.decode() for i in pipe.execute()]
    finally:
        client.close()
    return ids


def pending_count(server: RedisServer, stream: str, group: str) -> int:
    """The group's entries delivered to a consumer and not acknowledged (``XPENDING``)."""
    client = server.client()
    try:
        return int(client.xpending(stream, group)["pending"])
    finally:
        client.close()


def stream_length(server: RedisServer, stream: str) -> int:
    """The entries in ``stream`` (``XLEN``)."""
    client = server.client()
    try:
        return int(client.xlen(stream))
    finally:
        client.close()


def create_group(server: RedisServer, stream: str, group: str, start: str = "0") -> None:
    """``XGROUP CREATE stream group start MKSTREAM``."""
    client = server.client()
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    finally:
        client.close()


def _main() -> None:
    with RedisServer() as server:
        assert server.process is not None
        print(f"redis-server on {server.url} (pid {server.process.pid}), password file "
              f"{server.password_file}; Ctrl-C ends it", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _main()
