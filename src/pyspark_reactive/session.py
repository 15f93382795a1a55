"""Local SparkSessions configured from the project's ``spark-conf/`` directory.

Tests, the demo and notebooks start Spark through :func:`local_session`, so all of them
get the same quiet logging, the same small-job settings, and Python workers that run
the driver's own interpreter.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import shlex
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from .errors import PySparkReactiveError

__all__ = [
    "LocalSessionUnavailable",
    "local_connect_session",
    "local_session",
    "notebook_parameter",
    "notebook_session",
    "read_spark_defaults",
]

SPARK_DEFAULTS_FILE = "spark-defaults.conf"
LOG4J_FILE = "log4j2.properties"
_LOG4J_OPTION = "-Dlog4j2.configurationFile"
# Where local_connect_session() may listen: this machine only, reached as "localhost".
_LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "localhost")
# pyspark's own variable for a Connect server's token (read by the server, see below).
_TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
_CONNECT_TOKEN = "spark.connect.authenticate.token"
# Spark's own RPC (driver, block manager, executors, a standalone master and workers) asks
# every peer for the application's secret when this is on.
_AUTHENTICATE = "spark.authenticate"
_AUTHENTICATE_SECRET = "spark.authenticate.secret"
# Settings whose values are secrets: the pattern of Spark's own spark.redaction.regex.
_SECRET_SETTING = re.compile(r"(?i)secret|password|token|access[.]?key")


class LocalSessionUnavailable(PySparkReactiveError, RuntimeError):
    """Raised by :func:`local_session` and :func:`local_connect_session` where the pyspark
    imported is Databricks Connect's (the ``databricks-connect`` package), which starts no
    Spark of its own: it connects to Databricks compute only. The message says what to use
    instead: a ``DatabricksSession``, or the ``spark`` a Databricks notebook defines."""


def _databricks_connect_client() -> bool:
    """Whether this is a Databricks Connect client: the pyspark is Databricks' build (its
    ``pyspark.dbconnect_version``) or ``databricks.connect`` is importable, outside a
    Databricks Runtime (whose notebooks and jobs carry the same modules, and a session)."""
    if "DATABRICKS_RUNTIME_VERSION" in os.environ:
        return False
    for module in ("pyspark.dbconnect_version", "databricks.connect"):
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except ImportError:  # a parent package that is not a package, say
            continue
    return False


def _refuse_under_databricks_connect(function: str) -> None:
    if _databricks_connect_client():
        raise LocalSessionUnavailable(
            f"{function}: this Python runs Databricks Connect (databricks-connect), whose "
            "pyspark starts no local Spark: it supports only remote sessions, on Databricks "
            "compute. Use a DatabricksSession instead: `from databricks.connect import "
            "DatabricksSession` then `spark = DatabricksSession.builder.getOrCreate()` (your "
            "Databricks configuration: ~/.databrickscfg or DATABRICKS_* variables), or "
            "`DatabricksSession.builder.remote(...).getOrCreate()`; in a Databricks notebook, "
            "the `spark` it defines; pyspark_reactive.session.notebook_session() does the "
            "same. For a local Spark, use an environment without databricks-connect: "
            "pip install 'pyspark-reactive[spark]'.")


def local_session(
    app_name: str = "pyspark-reactive",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    conf_dir: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """Return a SparkSession configured from ``spark-conf/``, starting Spark if needed.

    Settings are applied in this order, later ones winning: the configuration
    directory's ``spark-defaults.conf``; ``app_name``, ``master``,
    ``spark.pyspark.python``, ``spark.authenticate=true`` and, for a ``local`` master or
    one on 127.0.0.1, the driver bound to 127.0.0.1; then ``conf``. The JVM logs through
    the directory's ``log4j2.properties`` (added to ``spark.driver.extraJavaOptions``
    unless that option already names a log4j configuration), and the log level is set to
    ``WARN``.

    ``spark.authenticate`` makes Spark's own RPC (the driver's endpoints, the block
    manager, executors) refuse a peer without the application's secret: 127.0.0.1 is open
    to every user of the machine. For ``local`` masters Spark makes the secret itself; for
    ``local-cluster`` masters a random one is made here; a standalone cluster
    (``spark://``) shares one with its master and workers, which the driver reads from
    ``conf``, the directory's ``spark-defaults.conf`` or spark-submit's own
    (``$SPARK_CONF_DIR/spark-defaults.conf``). Settings that hold secrets (names matching
    Spark's ``spark.redaction.regex``: ``secret``, ``password``, ``token``, ``access.key``)
    reach the JVM through a private properties file, removed once it has started, never
    its command line: pyspark hands every other setting to ``spark-submit`` as
    ``--conf key=value``, which every user of the machine reads.

    Before the JVM starts, the environment variables ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` are set to ``sys.executable``, so Python workers run this
    interpreter, with the packages of its environment, rather than whatever ``python3``
    is first on ``PATH``.

    If a SparkSession is already active (or a default one exists), that session is
    returned unchanged, like ``SparkSession.builder.getOrCreate()`` does: ``app_name``,
    ``master``, ``conf`` and the directory's settings do not apply to it. Stop it first
    to get a session with these settings.

    Parameters
    ----------
    app_name : str, default "pyspark-reactive"
        Application name shown in Spark's logs.
    master : str, default "local[2]"
        Spark master URL, such as ``"local[*]"`` or ``"spark://127.0.0.1:7077"``.
    conf : Mapping[str, str], optional
        Spark settings applied on top of all others, values as strings like Spark's own.
    conf_dir : str or os.PathLike, optional
        Directory holding ``spark-defaults.conf`` and ``log4j2.properties``. By default
        the copy shipped inside the package (``pyspark_reactive/spark-conf``), or, in an
        editable install, the repository's top-level ``spark-conf/``.

    Returns
    -------
    SparkSession
        The new session, or the one that was already active.

    Raises
    ------
    LocalSessionUnavailable
        At once where the pyspark imported is Databricks Connect's, which runs no local
        Spark: use a ``DatabricksSession`` there (see :func:`notebook_session`).
    FileNotFoundError
        If no configuration directory is found (the message names every path tried),
        or it lacks ``spark-defaults.conf`` or ``log4j2.properties``.
    ValueError
        If a line of ``spark-defaults.conf`` has a key but no value; if a standalone
        master (``spark://``) is named with ``spark.authenticate`` on and no
        ``spark.authenticate.secret`` anywhere; if a ``spark-defaults.conf`` that holds a
        secret can be read by other users.

    Examples
    --------
    >>> from pyspark_reactive import local_session
    >>> spark = local_session()      # or the session this process already runs
    >>> spark.range(3).count()
    3
    >>> spark.conf.get("spark.sql.session.timeZone")   # from spark-defaults.conf
    'UTC'
    """
    _refuse_under_databricks_connect("local_session()")
    # Resolved even when a session already exists, so a wrong conf_dir is always reported.
    settings = _settings(app_name, master, conf, conf_dir)
    try:
        return SparkSession.active()
    except PySparkRuntimeError:
        pass  # none yet: start one below
    _cluster_secret(settings)
    _python_workers_run_this_interpreter(settings["spark.pyspark.python"])
    from pyspark import SparkContext

    # A JVM this process started before (for a session since stopped) takes the settings
    # through py4j; a new one through spark-submit's command line, except the secrets.
    private = {} if SparkContext._gateway is not None else {
        key: value for key, value in settings.items() if _SECRET_SETTING.search(key)}
    builder = SparkSession.builder
    for key, value in settings.items():
        if key not in private:
            builder = builder.config(key, value)
    with _submitted_privately(private):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def local_connect_session(
    app_name: str = "pyspark-reactive",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    conf_dir: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """Start a local Spark Connect server in this process and return a client of it.

    The server is a Spark application like :func:`local_session`'s, with the same
    settings (``spark-conf/``, this interpreter for Python workers, the driver on
    127.0.0.1, Spark's own authentication), plus the Connect endpoint on 127.0.0.1 and a
    free port. The session returned talks to it over gRPC, as a notebook on Databricks
    standard or serverless compute talks to its cluster. Needs the ``connect`` extra
    (``pip install 'pyspark-reactive[connect]'``). The server lives as long as this
    process.

    The endpoint asks every client for a token (``spark.connect.authenticate.token``), as
    pyspark's own ``remote("local")`` server does: 127.0.0.1 is open to every user of the
    machine, and a client of the server reads files and runs Python as you. The token is
    random, 256 bits, made here for each server, and held only by the server and the
    session returned (and the sessions made from it, such as ``newSession()``): it is not
    logged or shown in an error, and it reaches the server JVM as a secret setting does
    (see :func:`local_session`), never through a command line or this process's
    environment. A token you choose is used instead when ``conf`` holds
    ``spark.connect.authenticate.token`` or the environment variable
    ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` (pyspark's own) is set, in that order.

    Clients dial ``localhost``, not an address: pyspark sends a token over a plain
    channel only to that host name, and Spark's own ``foreachBatch`` worker dials it too.
    gRPC tries ``::1`` before 127.0.0.1 for ``localhost``, so whoever listened on
    ``[::1]:PORT`` would receive the token from the next new connection. While this
    process lives, it therefore holds the port on the other loopback address too (bound,
    not listening): nobody else can listen there, and a client's attempt there is refused
    at once and goes on to the server. The port is one free on both; where the machine
    has no IPv6 loopback, nobody can listen on ``::1`` and nothing needs holding.

    Parameters
    ----------
    app_name, master, conf, conf_dir
        As for :func:`local_session`; ``conf`` applies to the server. The server listens on
        loopback only: ``spark.connect.grpc.binding.address`` may be ``127.0.0.1`` (the
        default, also for ``localhost``) or ``::1``.

    Returns
    -------
    pyspark.sql.connect.session.SparkSession
        A Spark Connect session.

    Raises
    ------
    LocalSessionUnavailable
        At once where the pyspark imported is Databricks Connect's, which runs no local
        Spark: use a ``DatabricksSession`` there (see :func:`notebook_session`).
    ImportError
        When the ``connect`` extra is not installed.
    RuntimeError
        When this process already runs a classic session, which would not serve Connect;
        when the server did not get the port chosen for it (another process took it
        meanwhile: try again).
    ValueError
        When ``conf`` binds the endpoint to an address other machines reach (the server
        has no TLS, so the token would cross the network in clear text), or gives an
        empty token; as :func:`local_session`.

    Notes
    -----
    To serve other machines, run a Connect server behind TLS (``start-connect-server.sh``
    and a TLS-terminating proxy) and connect with ``SparkSession.builder.remote(...)``.
    PySpark's own ``foreachBatch`` and listener workers print the connection URL they dial
    back, token included, to the server's standard output (here, this process's): with a
    ``local`` master (the default) on a POSIX system they run with the token masked
    (``token=<redacted>``), through a launcher of the interpreter written in a private
    folder of yours (``~/.cache/pyspark-reactive``; where none can be had, they run as
    they are); with another master, keep that output private.
    """
    _refuse_under_databricks_connect("local_connect_session()")
    if importlib.util.find_spec("grpc") is None:  # pyspark[connect] brings it
        raise ImportError("a Spark Connect session needs the connect extra: "
                          "pip install 'pyspark-reactive[connect]'")
    from pyspark import SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    conf = dict(conf or {})
    address = conf.get("spark.connect.grpc.binding.address", "127.0.0.1")
    if address not in _LOOPBACK_ADDRESSES:
        raise ValueError(
            f"local_connect_session: spark.connect.grpc.binding.address={address!r} is not "
            "accepted: 127.0.0.1 (the default), ::1 or localhost. This server has "
            "no TLS, so its token would cross the network in clear text; to serve other "
            "machines, run a Connect server behind TLS and use SparkSession.builder.remote")
    token = _connect_token(conf)
    # Any Spark application in this process, started on whatever thread.
    if SparkContext._active_spark_context is not None:
        raise RuntimeError("local_connect_session: this process already runs a classic "
                           "SparkSession, and one process holds one Spark application; "
                           "stop it first, or use a new process")
    # The server of an earlier call is gone (its SparkContext stopped): so is its port.
    _LOOPBACK_HOLDS.clear()
    serving = "::1" if address == "::1" else "127.0.0.1"  # the JVM takes one address
    port, hold = _reserve_loopback_port(serving)
    if hold is not None:
        _LOOPBACK_HOLDS.append(hold)
    server = {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        # As pyspark's own local Connect server: each client session's artifacts apart.
        "spark.sql.artifact.isolation.enabled": "true",
        "spark.sql.artifact.isolation.alwaysApplyClassloader": "true",
        **conf,
        "spark.connect.grpc.binding.address": serving,
        "spark.connect.grpc.binding.port": str(port),
        # A port found taken fails the start, never a move to one not held on the other
        # address.
        "spark.connect.grpc.port.maxRetries": "0",
        # A secret setting: never on the JVM's command line (see local_session).
        _CONNECT_TOKEN: token,
    }
    try:
        local_session(app_name, master, server, conf_dir=conf_dir)
        jvm = SparkContext._jvm
        assert jvm is not None
        # The Scala object's own instance: py4j sees no static forwarder of localPort.
        service = getattr(jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
        bound = getattr(service, "MODULE$").localPort()
    except BaseException:
        _LOOPBACK_HOLDS.clear()
        raise
    if bound != port:
        _LOOPBACK_HOLDS.clear()
        raise RuntimeError(f"local_connect_session: the Connect server listens on port "
                           f"{bound}, not on {port}, which this process holds on the other "
                           "loopback address; stop the session and try again")
    # pyspark.sql.functions and friends build Connect columns only in Connect mode, which
    # the classic server in this process would otherwise hide (pyspark's own local
    # Connect server sets this too).
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # "localhost", not 127.0.0.1: pyspark sends a token over a plain (local) channel only to
    # that host name and tries TLS for any other, which this server does not speak.
    # create(), not getOrCreate(): that would hand back the classic session just started.
    session: Any = ConnectSession.builder.remote(f"sc://localhost:{port}/;token={token}").create()
    return cast(SparkSession, session)


class _Holds(list[socket.socket]):
    """Sockets that keep a port on a loopback address from everyone else; ``clear()``
    closes them."""

    def clear(self) -> None:
        for held in self:
            held.close()
        super().clear()


# The other loopback address of this process's Connect server, held while it may serve.
_LOOPBACK_HOLDS = _Holds()


def _reserve_loopback_port(serving: str = "127.0.0.1") -> tuple[int, socket.socket | None]:
    """A TCP port free on both 127.0.0.1 and ::1, for a server about to listen on
    ``serving`` (one of them), and a socket bound to the port on the other address, which
    the caller keeps for as long as the server lives.

    Clients that dial ``localhost`` try both addresses (gRPC ``::1`` first); the socket,
    bound without listening and without ``SO_REUSEADDR`` or ``SO_REUSEPORT``, keeps every
    other process (of any user) from listening there, while a client's connection attempt
    there is refused at once and goes on to the server. ``None`` where the machine has no
    such address (no IPv6 loopback, say): nobody can listen there either.

    Parameters
    ----------
    serving : str, default "127.0.0.1"
        The address the server will listen on: ``"127.0.0.1"`` or ``"::1"``.

    Returns
    -------
    tuple[int, socket.socket or None]
        The port, and the socket that holds it on the other address (close it when the
        server is gone), or ``None``.

    Raises
    ------
    ValueError
        If ``serving`` is neither loopback address.
    RuntimeError
        If no port free on both is found in 100 tries.
    """
    families = {"127.0.0.1": (socket.AF_INET, "::1", socket.AF_INET6),
                "::1": (socket.AF_INET6, "127.0.0.1", socket.AF_INET)}
    if serving not in families:
        raise ValueError(f"_reserve_loopback_port: serving={serving!r} is not accepted: "
                         "'127.0.0.1' or '::1'")
    family, other, other_family = families[serving]
    for _ in range(100):
        # The serving address's probe stays bound until the other address is held, so
        # the port is free on both at one moment; the server binds it right after.
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((serving, 0))
            port = int(probe.getsockname()[1])
            try:
                hold = socket.socket(other_family, socket.SOCK_STREAM)
            except OSError:  # this family is not supported at all
                return port, None
            try:
                if other_family == socket.AF_INET6:
                    hold.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                hold.bind((other, port))
            except OSError as error:
                hold.close()
                if error.errno == errno.EADDRINUSE:
                    continue  # taken there: another port
                if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    return port, None  # no such address here: nobody can listen on it
                raise
            return port, hold
    raise RuntimeError(f"_reserve_loopback_port: no port free on both {serving} and {other} "
                       "in 100 tries")


def notebook_session(remote: str | None = None) -> SparkSession:
    """Return the Spark session of a notebook that has no ``spark`` of its own.

    The project's notebooks call it where no ``spark`` is defined (a Databricks notebook
    defines one):

    - under Databricks Connect (the ``databricks-connect`` package, from an IDE or a local
      Jupyter): ``DatabricksSession.builder.remote(remote).getOrCreate()``, or with no
      ``remote`` ``DatabricksSession.builder.getOrCreate()``, which reads your Databricks
      configuration (``~/.databrickscfg``, ``DATABRICKS_*`` variables);
    - elsewhere, with ``remote``: a Spark Connect client of that server,
      ``SparkSession.builder.remote(remote).getOrCreate()`` (the ``connect`` extra);
    - elsewhere, with the environment variable ``PYSPARK_REACTIVE_CONNECT=1``:
      :func:`local_connect_session`, a Spark Connect client of a local server;
    - otherwise :func:`local_session` on the master that ``PYSPARK_REACTIVE_MASTER``
      names (default ``local[2]``; docker compose's Jupyter names its cluster).

    Parameters
    ----------
    remote : str, optional
        A Spark Connect address, ``"sc://host:port/;token=..."``.

    Returns
    -------
    SparkSession
        A classic or a Spark Connect session.

    Examples
    --------
    >>> spark = notebook_session()   # doctest: +SKIP
    """
    if _databricks_connect_client():
        from databricks.connect import DatabricksSession  # type: ignore[import-not-found]

        builder = DatabricksSession.builder
        if remote is not None:
            builder = builder.remote(remote)
        return cast(SparkSession, builder.getOrCreate())
    if remote is not None:
        return cast(SparkSession, SparkSession.builder.remote(remote).getOrCreate())
    if os.environ.get("PYSPARK_REACTIVE_CONNECT") == "1":
        return local_connect_session()
    return local_session(master=os.environ.get("PYSPARK_REACTIVE_MASTER", "local[2]"))


def notebook_parameter(name: str, default: str = "", *, dbutils: Any = None) -> str:
    """Return a notebook parameter's value: a widget's on Databricks, ``default`` elsewhere.

    On a Databricks Runtime or serverless compute (the environment variable
    ``DATABRICKS_RUNTIME_VERSION`` is set there), the notebook's text widget ``name`` holds
    the value: it is created with ``default`` when the notebook has none, so a job's
    parameter of that name, or what the widget bar shows, wins. Elsewhere (Jupyter,
    docker compose, Databricks Connect from an IDE or a local Jupyter) it returns
    ``default``: the project's notebooks set it in their ``parameters`` cell.

    Parameters
    ----------
    name : str
        The widget's name (a job's notebook parameter of the same name sets it).
    default : str, default ""
        The value where there is no widget, and the new widget's default.
    dbutils : object, optional
        The notebook's ``dbutils``. By default the one the notebook defines, found in the
        namespace of the running IPython shell; where there is none (a Python script run
        as a job, say), ``default`` is returned.

    Returns
    -------
    str
        The widget's value (text, as widgets hold it) or ``default``.

    Examples
    --------
    >>> notebook_parameter("BASE_PATH", "/tmp/scratch")   # outside Databricks
    '/tmp/scratch'
    >>> base = notebook_parameter("BASE_PATH", "")   # doctest: +SKIP
    """
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        return default
    if dbutils is None:
        dbutils = _notebook_dbutils()
        if dbutils is None:
            return default
    dbutils.widgets.text(name, default)  # keeps a widget that exists, and its value
    return str(dbutils.widgets.get(name))


def _notebook_dbutils() -> Any:
    """The ``dbutils`` of the notebook this runs in (its IPython shell's namespace), or
    ``None``."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.user_ns.get("dbutils")


def _connect_token(conf: Mapping[str, str]) -> str:
    """The Connect server's token: the caller's (``conf``, then pyspark's environment
    variable) or a new random one."""
    import secrets

    for where, given in (("conf['spark.connect.authenticate.token']",
                          conf.get("spark.connect.authenticate.token")),
                         (_TOKEN_VARIABLE, os.environ.get(_TOKEN_VARIABLE))):
        if given is None:
            continue
        # Never the value itself in the message: it is a secret, even when wrong.
        if not given.strip() or any(c in given for c in ";/ \t\r\n"):
            raise ValueError(f"local_connect_session: the token in {where} is not accepted: "
                             "a non-empty string without spaces, ';' or '/' (it travels in "
                             "the connection URL)")
        return given
    return secrets.token_urlsafe(32)


def _settings(app_name: str, master: str, conf: Mapping[str, str] | None,
              conf_dir: str | os.PathLike[str] | None) -> dict[str, str]:
    """Every setting of a new local session, in the order :func:`local_session` gives."""
    directory = _find_conf_dir(conf_dir)
    defaults = read_spark_defaults(directory / SPARK_DEFAULTS_FILE)
    log4j_config = directory / LOG4J_FILE
    if not log4j_config.is_file():
        raise FileNotFoundError(f"Spark configuration directory {directory} has no {LOG4J_FILE}")

    _private_if_secret(directory / SPARK_DEFAULTS_FILE, defaults)
    settings = dict(defaults)
    settings["spark.app.name"] = app_name
    settings["spark.master"] = master
    if _on_loopback(master):
        # Otherwise Spark listens on, and advertises, the first non-loopback interface it
        # finds, although every peer of a local master is on this machine.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    # Takes precedence over PYSPARK_PYTHON inside Spark, so set both.
    settings["spark.pyspark.python"] = sys.executable
    if master == "local" or master.startswith(("local[", "local-cluster[")):
        settings["spark.pyspark.python"] = _python_without_spark_zips() or sys.executable
    # Spark's RPC answers any local user otherwise (see local_session).
    settings[_AUTHENTICATE] = "true"
    settings.update(conf or {})
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if _LOG4J_OPTION not in java_options:
        # A file: URI has no spaces, which Spark would otherwise split the option at.
        log4j_option = f"{_LOG4J_OPTION}={log4j_config.as_uri()}"
        settings["spark.driver.extraJavaOptions"] = f"{log4j_option} {java_options}".strip()

    return settings


def _private_if_secret(path: Path, settings: Mapping[str, str]) -> None:
    """Refuse a ``spark-defaults.conf`` that holds a secret setting and that other users
    may read."""
    held = sorted(key for key in settings if _SECRET_SETTING.search(key))
    if not held:
        return
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ValueError(f"{path} holds {', '.join(held)} (secret) but its mode is "
                         f"{mode:04o}: other users may read it; chmod 600 {path}")


def _spark_submit_defaults() -> tuple[Path, dict[str, str]]:
    """The ``spark-defaults.conf`` that ``spark-submit`` reads by itself (in
    ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), and its settings (none where it does
    not exist)."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        from pyspark.find_spark_home import _find_spark_home

        folder = os.path.join(_find_spark_home(), "conf")
    path = Path(folder) / SPARK_DEFAULTS_FILE
    if not path.is_file():
        return path, {}
    settings = read_spark_defaults(path)
    _private_if_secret(path, settings)
    return path, settings


def _cluster_secret(settings: dict[str, str]) -> None:
    """With ``spark.authenticate`` on, make sure the application has its secret where
    Spark does not make one (``local`` and YARN masters have it made): make a random one
    for ``local-cluster``, whose master and workers run in the driver's JVM; refuse a
    standalone master for which neither ``settings`` nor spark-submit's own
    ``spark-defaults.conf`` has the secret it shares with its master and workers."""
    if settings.get(_AUTHENTICATE, "").strip().lower() != "true":
        return
    if _AUTHENTICATE_SECRET in settings:
        return
    master = settings.get("spark.master", "")
    if master.startswith("local-cluster["):
        import secrets

        settings[_AUTHENTICATE_SECRET] = secrets.token_hex(32)
        return
    if not master.startswith("spark://"):
        return
    path, submitted = _spark_submit_defaults()
    if _AUTHENTICATE_SECRET in submitted:
        return
    raise ValueError(
        f"local_session: master {master!r} is a standalone cluster and {_AUTHENTICATE} is on, "
        f"but no {_AUTHENTICATE_SECRET} is given: the cluster's master and workers and this "
        f"driver share one secret. Put '{_AUTHENTICATE_SECRET} <secret>' in {path} (mode "
        f"600; SPARK_CONF_DIR names its folder) or pass it in conf (it reaches the JVM "
        f"through a private file, never its command line); for a cluster that runs "
        f"without authentication, conf={{'{_AUTHENTICATE}': 'false'}}")


def _properties_escaped(text: str) -> str:
    """``text`` as a key or value of a Java properties file: characters other than ASCII
    letters, digits and ``_.-/`` as ``\\uXXXX`` escapes (UTF-16 units), which
    ``Properties.load`` reads back exactly."""
    safe = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/")
    escaped = []
    for character in text:
        if character in safe:
            escaped.append(character)
            continue
        units = character.encode("utf-16-be")
        escaped.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    return "".join(escaped)


@contextlib.contextmanager
def _submitted_privately(private: Mapping[str, str]) -> Iterator[None]:
    """While a new JVM starts: ``private`` in a properties file only this user reads,
    named to spark-submit by ``--properties-file`` (its own ``spark-defaults.conf`` still
    read, ``--load-spark-defaults``) through ``PYSPARK_SUBMIT_ARGS``; the file is removed,
    and the variable restored, once the JVM has started (or failed to)."""
    if not private:
        yield
        return
    variable = "PYSPARK_SUBMIT_ARGS"
    previous = os.environ.get(variable)
    given = shlex.split(previous or "")
    if any(word.startswith(("--properties-file", "--load-spark-defaults")) for word in given):
        raise ValueError(
            f"local_session: {variable} names --properties-file, and the secret settings "
            f"({', '.join(sorted(private))}) reach the JVM through a properties file of "
            "their own: put them in that file instead, or leave --properties-file out")
    folder = tempfile.mkdtemp(prefix="pyspark-reactive-conf-")  # 0700
    path = os.path.join(folder, "secrets.properties")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as properties:
            for key, value in private.items():
                properties.write(f"{_properties_escaped(key)}={_properties_escaped(value)}\n")
        os.environ[variable] = " ".join(
            ["--properties-file", shlex.quote(path), "--load-spark-defaults",
             previous or "pyspark-shell"])
        yield
    finally:
        if previous is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = previous
        shutil.rmtree(folder, ignore_errors=True)


_WRAPPER = """#!/bin/sh
# Written by pyspark_reactive.local_session(): runs this interpreter with Spark's zipped
# copy of pyspark and py4j taken off PYTHONPATH. The interpreter has the very same pyspark
# installed, byte-compiled; from the zips every Python process Spark starts (source
# runner, planning, workers) compiles pyspark from source again, about a second.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    case "$entry" in
        {zips}*) ;;
        *) kept="${{kept:+$kept:}}$entry" ;;
    esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
# A Connect server's streaming workers print the URL they dial back, token included, to
# the server's output: they run with their output's tokens masked.
case "$1 ${{2:-}}" in
    "-m pyspark.sql.connect.streaming.worker."*)
        module=$2
        shift 2
        exec {python} -c {mask} "$module" "$@" ;;
esac
exec {python} "$@"
"""

# Runs the module named first, as ``python -m`` would, with ``token=...`` masked in what it
# writes to standard output and standard error (it talks to the JVM over a socket).
_MASK_TOKENS = """import re, runpy, sys
class Masked:
    def __init__(self, stream):
        self.stream = stream
    def write(self, text):
        return self.stream.write(re.sub(r"(token=)[^;\\s]+", r"\\1<redacted>", text))
    def __getattr__(self, name):
        return getattr(self.stream, name)
sys.stdout, sys.stderr = Masked(sys.stdout), Masked(sys.stderr)
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


def _python_without_spark_zips() -> str | None:
    """A launcher of this interpreter for Spark's Python processes that imports pyspark as
    installed (byte-compiled) rather than from the ``pyspark.zip`` Spark puts first on their
    ``PYTHONPATH``, which Python compiles from source in every process (measured: 1.9 to
    2.4 s against 0.6 s to import pyspark's worker and data source modules, on 2 busy
    cores). ``None`` where it does not apply (not POSIX, no such zip, or no private,
    executable place to keep it): Spark then runs ``sys.executable`` as usual. Only for
    ``local`` masters, whose workers are this user's processes on this machine.

    The launcher lives in the user's cache directory (``$XDG_CACHE_HOME`` or
    ``~/.cache``, else the temporary directory), in a folder of this user's, not writable
    by others and not on a ``noexec`` mount; it is checked (and written again if gone)
    each time a session starts.
    """
    import hashlib
    import shlex
    import tempfile

    import pyspark

    zips = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    if os.name != "posix" or not (zips / "pyspark.zip").is_file():
        return None
    text = _WRAPPER.format(python=shlex.quote(sys.executable),
                           zips=shlex.quote(str(zips) + os.sep),
                           mask=shlex.quote(_MASK_TOKENS))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (Path(cache) / "pyspark-reactive",
                   Path(tempfile.gettempdir()) / f"pyspark-reactive-{os.getuid()}"):
        launcher = folder / f"python-{digest}"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            status = folder.lstat()
            if (not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid()
                    or status.st_mode & 0o022
                    or os.statvfs(folder).f_flag & os.ST_NOEXEC):
                continue  # not a private folder whose files may run: try the next
            if not launcher.is_file() or launcher.read_text() != text:
                partial = folder / f".{launcher.name}.{os.getpid()}"
                partial.write_text(text)
                partial.chmod(0o700)
                partial.replace(launcher)
        except OSError:
            continue
        return str(launcher)
    return None


def _python_workers_run_this_interpreter(python: str) -> None:
    # Read by the JVM when it launches Python workers (and by pyspark for the functions it
    # ships); the JVM inherits this process's environment, so this has to happen before
    # the first session starts it. ``python`` runs sys.executable (see
    # _python_without_spark_zips).
    os.environ["PYSPARK_PYTHON"] = python
    # Spark starts the processes of a Python data source it finds by name (the reactive
    # source: its planning calls and its runner) with PYSPARK_DRIVER_PYTHON before
    # PYSPARK_PYTHON (PythonUtils.createPythonFunction), so the launcher goes here too:
    # otherwise each compiles pyspark from the zip again, and a runner not connected back
    # within Spark's fixed 10 s fails the query on a busy machine.
    os.environ["PYSPARK_DRIVER_PYTHON"] = python


def read_spark_defaults(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``spark-defaults.conf`` file into a dictionary.

    Each line is blank, a comment starting with ``#``, or a key and a value separated by
    whitespace; the value is the rest of the line, so it may contain spaces. As in
    Spark's own reading of this file, ``#`` after a value is part of the value.

    Parameters
    ----------
    path : str or os.PathLike
        The file to read.

    Returns
    -------
    dict[str, str]
        Settings in file order; a repeated key keeps its last value.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If a line has a key but no value; the message names the file and line.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "spark-defaults.conf"
    >>> _ = path.write_text("# comment\\nspark.ui.enabled   false\\n")
    >>> read_spark_defaults(path)
    {'spark.ui.enabled': 'false'}
    """
    settings: dict[str, str] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split(None, 1)
            if len(parts) != 2:
                raise ValueError(f"{path}:{number}: expected 'key value', got {text!r}")
            settings[parts[0]] = parts[1]
    return settings


def _on_loopback(master: str) -> bool:
    """Whether every process of ``master`` runs on this machine and reaches the driver there."""
    if master == "local" or master.startswith(("local[", "local-cluster[")):
        return True
    host = urlsplit(master).hostname
    return host in ("localhost", "::1") or (host or "").startswith("127.")


def _find_conf_dir(conf_dir: str | os.PathLike[str] | None) -> Path:
    if conf_dir is not None:
        tried = [Path(conf_dir).resolve()]
    else:
        tried = []
        # Installed from a wheel: pyproject force-includes spark-conf/ into the package.
        packaged = resources.files(__package__ or "pyspark_reactive") / "spark-conf"
        if isinstance(packaged, Path):
            tried.append(packaged)
        # Editable install or source checkout: src/pyspark_reactive/ -> repo/spark-conf/.
        source = Path(__file__).resolve()
        if source.parents[1].name == "src":
            tried.append(source.parents[2] / "spark-conf")
    for candidate in tried:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "no Spark configuration directory found; tried: " + ", ".join(str(p) for p in tried)
    )
