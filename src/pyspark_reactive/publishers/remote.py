"""Publishers of this process, served over RSocket (extra ``rsocket``): :func:`expose` a live
publisher to a streaming query's source, which runs in another process and connects back
over a Unix domain socket in a private folder (127.0.0.1 where there are none), and
:func:`serve_publisher` a query's output (a ``ForeachBatchPublisher``)
to remote clients, whose REQUEST_N then paces the query. Both ask each connection for a
token: ``expose`` hands its own to the source through a private file, never through the
reader's options (which the plan shows).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from pyspark.sql import Row
from pyspark.sql.types import VariantVal

from reactive_streams import Publisher

__all__ = ["Exposed", "expose", "serve_publisher", "to_json"]

_FORMATS = ("json", "text", "bytes")
# What a Unix socket's address holds on Linux (108 bytes, the terminating NUL included);
# 103 elsewhere, where the temporary directory is short enough anyway.
_MAX_SOCKET_PATH_BYTES = 107 if sys.platform.startswith("linux") else 103


_SCALARS = (str, int, type(None))  # bool is an int


def _duration(value: datetime.timedelta) -> str:
    """ISO 8601 duration: ``P1DT2H3M4.5S``, ``-PT0.25S``, ``PT0S``."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), 86_400_000_000)
    hours, rest = divmod(rest, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    time = "".join(f"{amount}{unit}" for amount, unit in ((hours, "H"), (minutes, "M")) if amount)
    if seconds or fraction:
        time += f"{seconds}.{fraction:06d}".rstrip("0").rstrip(".") + "S"
    if not days and not time:
        return "PT0S"
    return f"{sign}P{f'{days}D' if days else ''}{f'T{time}' if time else ''}"


def _fields(row: Row) -> dict[str, Any]:
    names = row.__fields__
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"to_json: the row has more than one column named {twice!r}, and a "
                         "JSON object holds each name once: rename them (alias) before "
                         "serving the rows")
    return dict(zip(names, row, strict=True))


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    plain = _plain(key)
    return plain if isinstance(plain, str) else json.dumps(plain, separators=(",", ":"),
                                                            ensure_ascii=False)


def _plain(value: Any) -> Any:
    """``value`` made of what strict JSON holds (dict, list, str, finite number, bool,
    None)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        # As Spark's to_json writes them: strict JSON has no NaN or Infinity.
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Row):
        if hasattr(value, "__fields__"):
            return {name: _plain(item) for name, item in _fields(value).items()}
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, VariantVal):
        return json.loads(value.toJson())
    raise TypeError(f"to_json: a value of type {type(value).__name__} has no JSON form")


def to_json(element: Any) -> bytes:
    """One element as a JSON document (UTF-8): what :func:`serve_publisher` sends per row,
    and what :func:`expose` sends by default.

    A ``Row`` becomes an object by field name; a dict an object (keys that are not
    strings become their JSON text: ``1`` -> ``"1"``, a date its ISO 8601 string); a
    tuple or list an array (a row by position); a number, string, bool or ``None``
    itself. Inside them, timestamps, dates and times become ISO 8601 strings, durations
    (``timedelta``, Spark's ``DayTimeIntervalType``) ISO 8601 durations (``P1DT2H``),
    decimals strings, binary values base64 strings, a ``VariantVal`` its JSON, and NaN
    and infinities the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (as Spark's
    ``to_json`` writes them), so the document is always strict JSON.

    Parameters
    ----------
    element : object

    Returns
    -------
    bytes

    Raises
    ------
    TypeError
        For a value with no JSON form.
    ValueError
        For a ``Row`` with two columns of the same name (an object would keep one).

    Examples
    --------
    >>> import datetime
    >>> to_json(Row(id=7, at=datetime.date(2026, 1, 2), tags=["a"]))
    b'{"id":7,"at":"2026-01-02","tags":["a"]}'
    >>> to_json((1, "x", float("nan"), datetime.timedelta(hours=36)))
    b'[1,"x","NaN","P1DT12H"]'
    """
    return json.dumps(_plain(element), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _serve(owner: str, publisher: Publisher[Any], host: str, port: int, route: str | None,
           encode: Callable[[Any], Any] | None, **more: Any) -> Any:
    """serve(), with argument errors named after ``owner``, the function the user called."""
    from reactive_streams.adapters.rsocket import serve

    try:
        return serve(publisher, host, port, route, encode=encode, **more)
    except (ValueError, TypeError) as error:
        message = str(error)
        if message.startswith("serve: "):
            raise type(error)(f"{owner}: {message[len('serve: '):]}") from None
        raise


def serve_publisher(publisher: Publisher[Any], host: str = "127.0.0.1", port: int = 0,
                    route: str | None = None, *, prefetch: int = 1024,
                    token: str | None = None, authenticate: bool = True) -> Any:
    """Serve a Publisher of rows, such as a query's ``ForeachBatchPublisher``, as an RSocket
    request-stream whose payloads are the rows as JSON objects (:func:`to_json`).

    Each remote client's REQUEST_STREAM subscribes to the publisher, and its REQUEST_N
    becomes ``request(n)``: a ``ForeachBatchPublisher`` returns from a micro-batch only
    once every subscriber has taken it, so a client that requests or reads slowly holds
    the query back, and the query's source then requests nothing more upstream. (A client
    that reads slowly is held to at most ``prefetch`` rows beyond what the socket buffers
    take.) CANCEL, or a closed
    connection, cancels that subscription; the end of the query ends every stream
    (COMPLETE, or ERROR with the query's exception).

    A row counts as taken by a client only once the client is known to have received it,
    not when it is written to the socket: after a client's rows are written, the service
    sends a KEEPALIVE asking for an answer, which an RSocket client sends only once it has
    read every frame before it. A client that dies with rows unread has not taken them
    (with ``publish()``'s publisher the batch then waits, or fails, per
    ``when_unsubscribed``; it is never committed as delivered).

    Every connection must present the service's token (``service.token``) in its SETUP
    frame, as :func:`reactive_streams.adapters.rsocket.serve` describes:
    ``RSocketPublisher(host, port, token=service.token)``, or from another RSocket library
    a bearer token in the SETUP's composite metadata. Others are refused and the service
    serves on.

    Parameters
    ----------
    publisher : Publisher
        Of rows (``Row``, dict or tuple elements). With :func:`~pyspark_reactive.publish`,
        pass ``when_unsubscribed="wait"`` (its default) so that no batch goes by before a
        client has subscribed.
    host : str
        The address to listen on; ``0.0.0.0`` serves other machines too (the token travels
        in clear text over TCP: serve only networks you trust).
    port : int
        The port; 0 (default) picks a free one (the handle's ``.port``).
    route : str, optional
        Answer only this route (routing metadata); ``None``: any.
    prefetch : int
        Rows asked of the publisher ahead of those written to a client's socket, whatever
        its demand (unbounded demand is served in such steps). A client that stops
        reading holds the query back once ``prefetch`` rows and the socket buffers
        (kernel send and receive buffers, a few MiB on Linux) are full.
    token : str, optional
        The token clients must present; default: a random one (``service.token``).
    authenticate : bool
        ``False`` serves anyone who can connect, asking for no token: on 127.0.0.1 that is
        every user of this machine, who could then read the rows and hold the query back.
        Default ``True``.

    Returns
    -------
    reactive_streams.adapters.rsocket.RSocketService
        Listening, with its ``.token``; ``close()`` it, or use it in a ``with`` block.

    Raises
    ------
    ValueError, TypeError
        For a ``host``, ``port``, ``route``, ``prefetch``, ``token`` or ``authenticate``
        not accepted.
    OSError
        When the address cannot be bound.

    Examples
    --------
    >>> from pyspark_reactive import publish
    >>> rows = publish(spark.readStream.format("rate").load())            # doctest: +SKIP
    >>> service = serve_publisher(rows, port=7878, route="rates")        # doctest: +SKIP
    >>> remote = RSocketPublisher("127.0.0.1", 7878, route="rates",     # doctest: +SKIP
    ...                           token=service.token)
    """
    return _serve("serve_publisher", publisher, host, port, route, to_json, prefetch=prefetch,
                  token=token, authenticate=authenticate)


class Exposed:
    """A live publisher served for a query's source; made by :func:`expose`.

    Attributes
    ----------
    options : dict of str to str
        The reader options that read it: ``publisher=rsocket``, ``socketPath`` (the Unix
        domain socket, in a folder only this user can enter) or ``host`` and ``port``
        (TCP), ``format``, ``tokenFile`` (the path of a file, readable by this user only,
        that holds the service's token: the token itself is in no option, since options
        show in the query's plan) and ``route`` (when one was given).
    service : reactive_streams.adapters.rsocket.RSocketService
        The server: its ``path`` on a Unix domain socket (``port`` is then ``None``), its
        ``host`` and ``port`` over TCP.
    """

    def __init__(self, service: Any, fmt: str, route: str | None, folder: str,
                 token_file: str) -> None:
        self.service = service
        self._folder: str | None = folder
        self.options: dict[str, str] = {"publisher": "rsocket"}
        if service.path is not None:
            self.options["socketPath"] = service.path
        else:
            self.options.update(host=service.host, port=str(service.port))
        self.options.update(format=fmt, tokenFile=token_file)
        if route is not None:
            self.options["route"] = route

    def read_stream(self, spark: Any, schema: Any = None, **options: Any) -> Any:
        """The streaming DataFrame of the exposed publisher.

        Parameters
        ----------
        spark : SparkSession
            Classic, or a Spark Connect session whose server runs on this machine.
        schema : StructType or str, optional
            The rows' schema (a DDL string works). Needed with ``format="json"``
            (default), where each element is a JSON document: an object maps to columns by
            name, an array by position, a scalar is the one column's value.
        **options
            Other options of the ``reactive`` source (``maxRecordsPerTrigger``,
            ``walLocation``, ...).

        Returns
        -------
        DataFrame
        """
        reader = spark.readStream.format("reactive").options(**self.options)
        reader = reader.options(**{str(k): str(v) for k, v in options.items()})
        if schema is not None:
            reader = reader.schema(schema)
        return reader.load()

    def close(self) -> None:
        """Stop serving: connected queries' streams fail, as with any lost server. The
        token file and the socket's folder go too."""
        self.service.close()
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> Exposed:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Exposed({self.options})"


def _unix_sockets() -> bool:
    return hasattr(socket, "AF_UNIX") and sys.platform != "win32"


def expose(publisher: Publisher[Any], host: str | None = None, port: int | None = None,
           route: str | None = None, *, format: str = "json",
           encode: Callable[[Any], bytes] | None = None, token: str | None = None) -> Exposed:
    """Serve a publisher that lives in this process to the ``reactive`` source.

    A query's source runs in a process of its own, which Spark starts and which cannot
    see this process's objects. ``expose`` serves the publisher as an RSocket
    request-stream (:func:`reactive_streams.adapters.rsocket.serve`); the source reads it
    with the built-in ``rsocket`` publisher, so each micro-batch's demand reaches the
    live publisher as ``request(n)``. Each query run subscribes once: the publisher must
    accept a subscriber per run (a query restarted from its checkpoint subscribes again).

    Only the query's source connects. By default the service listens on a Unix domain
    socket in a folder of the temporary directory that only this user can enter (0700,
    removed by :meth:`Exposed.close`): no other user of this machine can even connect,
    so none can crowd the source out with connections of their own. Where the platform
    has no Unix domain sockets, or when ``host`` or ``port`` is given, it listens on TCP
    (127.0.0.1 by default, with ``[::1]`` at the same port), which every local user can
    connect to. Either way it asks each connection for a token (random unless ``token``
    is given), which the source reads from a 0600 file in that folder; its path, not the
    token, is the ``tokenFile`` option.

    Works wherever the source runner runs on this machine as this user (it connects to
    the socket and reads the token file): classic PySpark, and a Spark Connect server on
    this machine run by this user. A Connect server on another machine (Databricks, a
    remote cluster) cannot reach this one.

    Parameters
    ----------
    publisher : Publisher
        The live publisher.
    host : str, optional
        Listen on TCP at this address (and for the source to connect to) instead of a
        Unix domain socket.
    port : int, optional
        Listen on TCP at this port (0 picks a free one) instead of a Unix domain socket;
        with ``host`` alone, a free port.
    route : str, optional
        The route served and requested; ``None``: none.
    format : {"json", "text", "bytes"}
        How elements travel, and the ``format`` option of the source: ``json`` (default,
        :func:`to_json`; give the query a schema), ``text`` (``str`` elements, ``value
        STRING``), ``bytes`` (``bytes`` elements, ``value BINARY``).
    encode : callable, optional
        ``encode(element) -> bytes`` instead of the format's own encoding.
    token : str, optional
        The service's token; default: a random one.

    Returns
    -------
    Exposed
        ``.options`` for ``spark.readStream.format("reactive").options(...)``,
        ``.read_stream(spark, schema, **options)``; close it (or use ``with``) to stop.

    Raises
    ------
    ValueError, TypeError
        For a ``format``, ``host``, ``port`` or ``route`` not accepted.
    OSError
        When the address cannot be bound.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> with expose(RangePublisher(0, 100)) as exposed:                 # doctest: +SKIP
    ...     df = exposed.read_stream(spark, "value BIGINT", maxRecordsPerTrigger=10)
    ...     query = df.writeStream.format("console").trigger(availableNow=True).start()
    ...     query.awaitTermination()
    """
    if format not in _FORMATS:
        raise ValueError(f"expose: format={format!r} is not accepted: one of "
                         f"{', '.join(_FORMATS)}")
    if encode is None and format == "json":
        encode = to_json
    folder = tempfile.mkdtemp(prefix="pyspark-reactive-expose-")  # 0700
    try:
        token_file = os.path.join(folder, "token")
        path: str | None = None
        if host is None and port is None and _unix_sockets():
            path = os.path.join(folder, "socket")
            if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
                path = None  # a temporary directory too deep for a socket's name: TCP
        service = _serve("expose", publisher, "127.0.0.1" if host is None else host,
                         0 if port is None else port, route, encode, token=token, path=path)
        try:
            handle = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(service.token)
        except BaseException:
            service.close()
            raise
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Exposed(service, format, route, folder, token_file)
