"""A Spark standalone cluster on 127.0.0.1, started with the pip package's own
``bin/spark-class``: one master and one worker on free ports, logs in a directory of the
caller's, each daemon ended by its process id (never by name), its leftover descendants too.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ports import free_port  # tests/peers

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
WORKER_CORES = 2
# JVMs of small jobs on a small machine: the quick (C1) compiler only and a one-thread
# collector start noticeably faster and cost the other cores less.
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# How long a wait between two looks at the master's state lasts (unless a daemon exits).
_POLL_S = 0.25

# Read by both daemons instead of any spark-defaults.conf: no REST submission server (it
# takes the fixed port 6066), and a port found taken is an error, not a silent move to
# the next one, which would leave the fixture watching another process's web UI. Spark's
# RPC asks every peer (worker, driver, executors) for the cluster's secret, which stands
# in this file (0600), never on a command line.
DAEMON_PROPERTIES = """\
spark.master.rest.enabled false
spark.port.maxRetries 0
spark.authenticate true
spark.authenticate.secret {secret}
"""


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _die_with_this_process() -> Callable[[], None] | None:
    """On Linux, a ``preexec_fn`` that has the kernel SIGTERM the child when pytest dies,
    even by SIGKILL, where no finalizer runs. It survives spark-class's ``exec`` of java."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux), so a reused pid is never signalled."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(pid: int) -> list[tuple[int, str | None]]:
    """Every living descendant of ``pid`` with its start time (Linux; elsewhere none)."""
    found: list[tuple[int, str | None]] = []
    parents = [pid]
    while parents:
        parent = parents.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    for child in map(int, children.read().split()):
                        found.append((child, _started(child)))
                        parents.append(child)
            except OSError:
                continue
    return found


class Daemon:
    """One Spark daemon JVM. spark-class ``exec``s java, so the pid is the JVM's own."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [str(_spark_home() / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                preexec_fn=_die_with_this_process())

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"(no log: {error})"

    def check(self, wait: float = 0.0) -> None:
        """Raise if the daemon has exited; ``wait`` up to that long for it to exit."""
        try:
            code = self.process.wait(wait)
        except subprocess.TimeoutExpired:
            return
        raise RuntimeError(f"the Spark {self.name} exited with code {code}; "
                           f"{self.log} ends:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM (the worker then ends its executors), SIGKILL if it lingers, then any
        descendant still alive (an executor, its Python workers), each by pid."""
        if self.process.poll() is not None:
            return
        descendants = _descendants(self.pid)
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
        for pid, started in descendants:
            if started is not None and _started(pid) == started:
                with contextlib.suppress(ProcessLookupError):  # it has just exited
                    os.kill(pid, signal.SIGKILL)


def master_state(web_ui: str) -> dict[str, Any] | None:
    """The master's JSON status, or None while its web UI does not answer."""
    # No proxy from the environment may stand between us and 127.0.0.1.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{web_ui}/json/", timeout=2) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except (OSError, ValueError):
        return None


@dataclass
class StandaloneCluster:
    """A running cluster; ``logs`` holds the daemons' logs, and the executors' under
    ``work/``."""

    url: str  # spark://127.0.0.1:<port>
    web_ui: str  # the master's
    master: Daemon
    worker: Daemon  # the first worker
    logs: Path
    secret: str  # spark.authenticate.secret, shared by the daemons and the driver
    workers: tuple[Daemon, ...] = ()  # every worker, the first included


def _wait_until(what: str, ready: Callable[[], bool], daemons: list[Daemon]) -> None:
    """Poll ``ready`` until it holds; fail at once if a daemon exits, or at the timeout.
    Between looks, wait on the newest daemon's exit rather than sleeping."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {STARTUP_TIMEOUT_S} s; "
                               f"{daemons[-1].log} ends:\n{daemons[-1].log_tail()}")
        for daemon in daemons[:-1]:
            daemon.check()
        daemons[-1].check(wait=_POLL_S)


def start(directory: Path, daemons: list[Daemon], workers: int = 1,
          cores: int = WORKER_CORES) -> StandaloneCluster:
    """Start a master, then ``workers`` workers of ``cores`` cores each, registered with
    it; each daemon is appended to ``daemons`` as soon as it is started, so the caller can
    stop them whatever happens."""
    conf_dir = directory / "conf"  # empty: Spark's default log4j profile, nothing of ours
    conf_dir.mkdir()
    secret = secrets.token_hex(32)
    properties = directory / "daemon.properties"
    descriptor = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(DAEMON_PROPERTIES.format(secret=secret))
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),  # not another Spark the environment may name
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",  # else the web UIs listen on every interface
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=QUICK_START_JVM,
    )
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    url, web_ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}"
    master = Daemon("master", [
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
        "--webui-port", str(master_ui), "--properties-file", str(properties)], env, directory)
    daemons.append(master)
    _wait_until("the master's web UI", lambda: (master_state(web_ui) or {}).get("url") == url,
                daemons)
    started = []
    for number in range(workers):
        name = "worker" if number == 0 else f"worker{number + 1}"
        work = directory / ("work" if number == 0 else f"work-{name}")
        worker = Daemon(name, [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--webui-port", str(worker_ui if number == 0 else free_port()), "--cores",
            str(cores), "--memory", "1g", "--work-dir", str(work),
            "--properties-file", str(properties), url], env, directory)
        daemons.append(worker)
        started.append(worker)

    def registered() -> bool:
        state = master_state(web_ui) or {}
        return (state.get("aliveworkers", 0) >= workers
                and state.get("cores", 0) >= workers * cores)

    _wait_until("the workers' registration with the master", registered, daemons)
    return StandaloneCluster(url, web_ui, master, started[0], directory, secret,
                             tuple(started))
