"""A local OSS Spark Connect server for Databricks Connect to talk to, as a process of its own.

The JVM's ``SparkConnectServer``, started with ``bin/spark-submit`` of the server venv's
pyspark (``.venv-dbserver`` or ``.venv-dbserver41``, made by ``environments.py``),
listening on 127.0.0.1 on a free port, and asking every client for a random token that
reaches it through its environment
(``SPARK_CONNECT_AUTHENTICATE_TOKEN``), never its command line. Its Python processes
(source runners, the ``foreachBatch`` worker, executors' workers) run the server venv's
interpreter, which must be the client's Python version: they unpickle the client's
functions. Its output goes to files in a folder of its own.

Importable by other test folders (the serverless tests reuse it)::

    databricks_client_environment(config_dir)
    with LocalConnectServer(server_python(), log_dir, python_path=HELPERS) as server:
        spark = DatabricksSession.builder.remote(server.remote).getOrCreate()
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py
from polling import wait_until

from pyspark_reactive.session import _SECRET_SETTING, _reserve_loopback_port

TESTS = Path(__file__).resolve().parents[1]
# Helpers of the test folders that the Databricks Connect tests import, and the server's
# Python processes too when a pickled function names them: these tests' own modules, the
# connector tests' helpers and test modules (the source tests' publishers, the sink tests'
# subscribers), the Connect and cluster tests' helpers, the notebooks' runner, the peers.
HELPERS = [str(TESTS / "databricks"), *FOLDERS,
           *(str(TESTS / name) for name in ("connect", "cluster", "notebooks", "peers"))]

# The variable that names the server venv's interpreter: ./dev sets it from what
# environments.py prints.
SERVER_PYTHON_VARIABLE = "PYSPARK_REACTIVE_DBSERVER_PYTHON"
# pyspark's own variable for the Connect server's token, read by the server at start-up.
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# A loaded 2-core machine starts the JVM in 10 to 30 s.
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0

# Settings needed only because this server is OSS Spark rather than Databricks, each with
# the reason; the project's own code needs none of them. None so far: Databricks Connect
# 17.3 runs the source, read_stream, publish() and the foreach writer against a plain
# 4.0.5 server (it asks the server for some configs a 4.0 server lacks, such as
# spark.connect.session.planCompression.threshold, which the server logs as
# SQL_CONF_NOT_FOUND and the client does without). What the server does get besides: the
# project's local settings (spark-conf/, as local_session() has them), the server venv's
# interpreter for its Python processes, and the tests' folders on their PYTHONPATH.
OSS_ONLY_SETTINGS: dict[str, str] = {}

# The settings of a local session of the project (spark-conf/, the launcher that runs the
# server venv's interpreter for Python workers, the driver on 127.0.0.1), computed by the
# server venv's own pyspark_reactive: the same code local_session() starts Spark with.
_SETTINGS_PROBE = """
import json, sys
from pyspark_reactive.session import _settings
print(json.dumps(_settings(sys.argv[1], sys.argv[2], {}, None)))
"""


def server_python() -> Path:
    """The server venv's interpreter, from ``$PYSPARK_REACTIVE_DBSERVER_PYTHON``."""
    named = os.environ.get(SERVER_PYTHON_VARIABLE)
    if not named:
        raise RuntimeError(
            f"{SERVER_PYTHON_VARIABLE} is not set: it names the Python of the local Spark "
            "Connect server's venv. Make the venvs with 'python tests/databricks/"
            "environments.py --python312 PATH' and set it to the DBSERVER_PYTHON it prints "
            "(./dev test does both)")
    # Absolute, not resolved: the server runs in a folder of its own, and a venv's python
    # is a link that must stay the venv's.
    path = Path(named).absolute()
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{SERVER_PYTHON_VARIABLE}={named} is not an executable")
    return path


def databricks_client_environment(config_dir: Path) -> None:
    """Make this process's Databricks Connect read no user configuration: no
    ``~/.databrickscfg`` (the SDK's config file is pointed at a missing one), no
    ``DATABRICKS_*`` or ``SPARK_REMOTE`` from the caller's environment."""
    for key in [k for k in os.environ if k.startswith("DATABRICKS_")] + ["SPARK_REMOTE"]:
        os.environ.pop(key, None)
    os.environ["DATABRICKS_CONFIG_FILE"] = str(config_dir / "no-databrickscfg")


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on ``port``: not merely whether something
    accepts there, which another user could have taken meanwhile."""
    try:
        process = psutil.Process(pid)
        # net_connections() from psutil 6, connections() before.
        connections = getattr(process, "net_connections", process.connections)("tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)


class LocalConnectServer:
    """A Spark Connect server of the OSS pyspark in ``python``'s venv, on 127.0.0.1.

    ``python_path`` is put on the ``PYTHONPATH`` of the server's Python processes (so they
    import the tests' publishers and subscribers); ``conf`` is added to (and wins over)
    the project's local settings; ``environment`` adds variables to the server's
    environment, which its Python processes inherit (the serverless guard's), but may not
    set those the server gets from this class (``SPARK_HOME``, the token, the Pythons,
    ``PYTHONPATH``). ``remote`` is the ``sc://`` address, token included, of
    a client; ``log`` the server's output file.
    """

    def __init__(self, python: Path, log_dir: Path, *, python_path: Sequence[str] = (),
                 conf: dict[str, str] | None = None, master: str = "local[2]",
                 environment: dict[str, str] | None = None) -> None:
        self.python = python
        self.log_dir = log_dir
        self.log = log_dir / "server.log"
        self.python_path = list(python_path)
        self.conf = dict(conf or {})
        self.master = master
        self.environment = dict(environment or {})
        self.port = 0
        self.token = secrets.token_urlsafe(32)
        self.process: subprocess.Popen[bytes] | None = None
        self.spark_home = Path()
        # The port on ::1 while the server listens on 127.0.0.1 (see start()).
        self.hold: socket.socket | None = None

    @property
    def remote(self) -> str:
        # "localhost", not 127.0.0.1: pyspark sends a token over a plain channel only to that
        # host name (see pyspark_reactive.session.local_connect_session); the server listens
        # on loopback only, and this process holds its port on ::1.
        return f"sc://localhost:{self.port}/;token={self.token}"

    def _settings(self) -> dict[str, str]:
        result = subprocess.run(
            [str(self.python), "-c", _SETTINGS_PROBE, "pyspark-reactive Connect server",
             self.master], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"the server venv ({self.python}) could not compute the "
                               f"project's Spark settings:\n{result.stderr}")
        settings: dict[str, str] = json.loads(result.stdout)
        return settings

    def _spark_home(self) -> Path:
        result = subprocess.run(
            [str(self.python), "-c", "import os, pyspark; print(os.path.dirname("
             "pyspark.__file__)); print(pyspark.__version__)"],
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"no pyspark in the server venv ({self.python}):\n"
                               f"{result.stderr}")
        home, version = result.stdout.split()
        self.version = version
        return Path(home)

    def start(self) -> LocalConnectServer:
        self.spark_home = self._spark_home()
        # Clients dial localhost, which gRPC tries on ::1 first: as local_connect_session()
        # does, this process holds the port there while the server listens on 127.0.0.1,
        # so nobody else can listen there to catch the token.
        self.port, self.hold = _reserve_loopback_port("127.0.0.1")
        settings = {**self._settings(), **OSS_ONLY_SETTINGS, **self.conf,
                    "spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(self.port),
                    # A port found taken fails the start, never a move off the port held.
                    "spark.connect.grpc.port.maxRetries": "0"}
        secret = sorted(key for key in settings if _SECRET_SETTING.search(key))
        if secret:
            raise ValueError(f"{', '.join(secret)}: secrets go through the environment, never "
                             "the command line")
        command = [str(self.spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        environment = {key: value for key, value in os.environ.items()
                       if not key.startswith(("SPARK_", "PYSPARK_", "DATABRICKS_"))}
        own = {
            # This venv's Spark, not one SPARK_HOME may name.
            "SPARK_HOME": str(self.spark_home),
            TOKEN_VARIABLE: self.token,
            # Spark reads both; spark.pyspark.python (from the settings) wins inside Spark.
            "PYSPARK_PYTHON": settings["spark.pyspark.python"],
            "PYSPARK_DRIVER_PYTHON": str(self.python),
            "PYTHONPATH": os.pathsep.join(self.python_path),
        }
        clashes = sorted(set(own) & set(self.environment))
        if clashes:
            raise ValueError(f"environment may not set {', '.join(clashes)}: the server "
                             "gets them from LocalConnectServer (python_path for PYTHONPATH)")
        environment.update({**self.environment, **own})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            # A session of its own: Ctrl-C in the test's terminal does not reach it first.
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=environment,
                                            cwd=self.log_dir, start_new_session=True)
        process = self.process
        try:
            wait_until(lambda: process.poll() is not None or listens(process.pid, self.port),
                       START_TIMEOUT_S, f"the Connect server listening on port {self.port}")
            if process.poll() is not None:
                raise RuntimeError(f"the Connect server exited with {process.returncode}:\n"
                                   f"{self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {self.log})"
        # PySpark's foreachBatch worker prints its URL, token included: not into reports.
        tail = "\n".join(text[-lines:]).replace(self.token, "<token>")
        return f"--- last {lines} lines of {self.log} ---\n{tail}"

    def stop(self) -> None:
        """End the server by its process id: SIGTERM (Spark's shutdown hooks stop its Python
        workers), then SIGKILL for it and whatever it started that outlived it; then the
        port's hold on ::1."""
        try:
            self._stop()
        finally:
            if self.hold is not None:
                self.hold.close()
                self.hold = None

    def _stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            children = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"the Connect server ({process.pid}) did not end within {STOP_TIMEOUT_S} s "
                  "of SIGTERM: killed", file=sys.stderr)
            process.kill()
            process.wait(STOP_TIMEOUT_S)
        _, alive = psutil.wait_procs(children, timeout=STOP_TIMEOUT_S)
        for child in alive:  # each by its own id, all of them this server's
            child.kill()

    def __enter__(self) -> LocalConnectServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


# The servers of this pytest session while they run, for the reports of failed tests.
RUNNING: list[LocalConnectServer] = []


@contextmanager
def serving(server: LocalConnectServer) -> Iterator[LocalConnectServer]:
    """Start ``server``, keep it in :data:`RUNNING` while it serves, and stop it."""
    print(f"Spark Connect server's log: {server.log}")
    with server:
        RUNNING.append(server)
        try:
            yield server
        finally:
            RUNNING.remove(server)


def add_server_log(report: Any) -> None:
    """End a failed test's report with the running server's latest log lines."""
    if report.failed and RUNNING:
        report.sections.append(("Spark Connect server", RUNNING[0].log_tail()))
