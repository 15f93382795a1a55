"""The built-in publisher ``rsocket``: a request-stream of an RSocket server (TCP, or a Unix
domain socket) as rows, paced by the source's demand (each micro-batch's ``request(n)``
reaches the server as REQUEST_N). Made in the source runner, or with the source's option
``shards`` once per shard in the task that reads it; it connects only when subscribed to.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.rsocket import (
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_ROUTE_BYTES,
    MAX_TOKEN_BYTES,
    RSocketPublisher,
)

from ..source.options import OptionError, OptionSpec, OptionSpecs, read_option_file
from ..source.shards import sharded
from .columns import json_columns, keep_columns

__all__ = ["FORMATS", "OPTION_SPECS", "rsocket_publisher"]

#: ``format`` -> (the data MIME type announced in SETUP, the payload decoder).
FORMATS: dict[str, tuple[str, Callable[[bytes], Any] | None]] = {
    "bytes": ("application/octet-stream", None),
    "text": ("text/plain", lambda data: data.decode("utf-8")),
    "json": ("application/json", json.loads),
}
# RSocket over TCP gives a frame a 3-byte length.
_MAX_FRAME_BYTES = (1 << 24) - 1
# A token is never shown, in errors either.
_HIDDEN = "(hidden)"
_HOST = "the RSocket server's host name or address"
# A Unix socket's address holds 108 bytes on Linux, the terminating NUL included.
_MAX_SOCKET_PATH_BYTES = 107
_SOCKET_PATH = ("the absolute path of the RSocket server's Unix domain socket, on the "
                "machine of Spark's driver")
_ROUTE = "a route name (sent as routing metadata)"
_ROUTE_BYTES = (f"at most {MAX_ROUTE_BYTES} bytes in UTF-8 once {{shard}} and {{shards}} are "
                "replaced")
# What each request-stream's route and data have replaced: the shard's index and the count
# of shards (0 and 1 without the source's option shards), and, in data only, the offset.
_SHARD, _SHARDS, _OFFSET = "{shard}", "{shards}", "{offset}"
_TOKEN = f"a token of 1 to {MAX_TOKEN_BYTES} bytes in UTF-8 (the RSocket service's)"
_TOKEN_FILE_HOLDING = "the RSocket service's token"

#: Every option the built-in ``rsocket`` reads, in the order the reference shows them: the
#: factory reads each through these definitions, which also fill the documentation's table.
OPTION_SPECS = OptionSpecs([
    OptionSpec("host", "The RSocket server's host name or address (required, unless "
               "`socketPath` is given).", accepted=_HOST, shown_default="none"),
    OptionSpec("port", "The RSocket server's TCP port (required, unless `socketPath` is "
               "given).", "int", minimum=1, maximum=65535, shown_default="none"),
    OptionSpec(
        "socketPath", "Instead of `host` and `port`: the server's Unix domain socket, on the "
        "driver's machine (with `shards`, on every executor's too; what `expose()` gives "
        "where the platform has them: only users who can enter its folder can connect).",
        accepted=f"{_SOCKET_PATH}; not with host or port", shown_default="none"),
    OptionSpec(
        "route", "The route of the request-stream, sent as routing metadata. `{shard}` in it "
        "is replaced by the shard's index and `{shards}` by the count of shards (with the "
        "source's option `shards`; without it 0 and 1).",
        accepted=f"{_ROUTE}, {_ROUTE_BYTES}", shown_default="none"),
    OptionSpec(
        "data", "The request's data, as UTF-8 text. `{offset}` in it is replaced by the "
        "offset of the stream's next element (the count of elements the write-ahead log "
        "holds; with `shards`, of that shard's stream), so a server that can start from a "
        "position (`data=from={offset}`) makes the stream resumable; `{shard}` and "
        "`{shards}` as in `route`. With `shards`, `route` or `data` must hold `{shard}` "
        "(each shard a stream of its own; not needed with `shards=1`) and `data` `{offset}` "
        "(each micro-batch opens a new request-stream per shard).",
        accepted="any text; with shards, holding {offset}, and {shard} unless route does",
        shown_default="empty"),
    OptionSpec(
        "format", "`bytes`: each payload's data as a `value BINARY` row; `text`: UTF-8 "
        "text, `value STRING`; `json`: parsed into the schema given (`.schema(...)` or the "
        "`schema` option), an object by column name (fields without a column are left "
        "out), an array by position.", "choice", "bytes", choices=tuple(FORMATS)),
    OptionSpec(
        "keepaliveTimeout", "Seconds without a KEEPALIVE answer after which the query fails "
        "with the server's address: a server that stops answering is noticed between this "
        "and twice this long after its last answer.", "int", int(DEFAULT_KEEPALIVE_TIMEOUT),
        minimum=2, maximum=86400),
    OptionSpec(
        "token", "Presented in the SETUP frame as a bearer token (what `serve` and "
        "`serve_publisher` ask for). Errors never show it; Spark's plan shows it redacted "
        "as long as `spark.redaction.regex` matches `token` (its default does).",
        accepted=f"{_TOKEN}; not with tokenFile", shown_default="none"),
    OptionSpec(
        "tokenFile", "Instead of `token`: a file on the driver's machine holding the token, "
        "read where the publisher is made (with `shards`, also on every executor, in the "
        "task that reads a shard), so the token never travels in the options (what "
        "`expose()` gives).",
        accepted="the absolute path of a readable file (UTF-8) holding "
        f"{_TOKEN_FILE_HOLDING}, on the machine of Spark's driver", shown_default="none"),
    OptionSpec(
        "maxPayloadBytes", "The largest payload taken from the server, whole or in "
        "fragments: a larger one fails the query, saying so, before it is buffered.",
        "int", DEFAULT_MAX_PAYLOAD_BYTES, minimum=1024, maximum=_MAX_FRAME_BYTES),
])


def rsocket_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of the payloads of an RSocket request-stream: the built-in ``rsocket``.

    Each query run opens one connection and one request-stream; the source's demand (one
    micro-batch, ``maxRecordsPerTrigger``, at a time) reaches the server as REQUEST_N, so
    the server never has more outstanding than that. What the server sent is kept
    exactly once by the write-ahead log (``walLocation``), if any. A restarted query
    opens a new request-stream, with ``{offset}`` in ``data`` replaced by the offset of
    its next element (the count of elements the log holds): a server that can start
    from a position (``data=from={offset}``) makes the stream resumable; otherwise what
    the new stream holds is the server's to say.

    It is sharded (:func:`~pyspark_reactive.sharded`): with the source's option ``shards``
    (n), each micro-batch opens a request-stream per shard, in the Spark task that reads
    it, with ``{shard}`` in ``route`` and ``data`` replaced by the shard's index (0 to
    n - 1), ``{shards}`` by n, and ``{offset}`` by the offset of that shard's next element
    (the count of that shard's elements its log holds). So ``route`` or ``data`` must hold
    ``{shard}`` (for more than one shard), for each shard to be a stream of its own, and
    ``data`` ``{offset}``, for each batch's stream to go on where the last one's kept
    elements end (``data=shard={shard}&from={offset}``). Without ``shards``, ``{shard}``
    is 0 and ``{shards}`` 1.

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS`, each with its default, bounds and meaning
        there: ``host`` and ``port``, or ``socketPath`` (the absolute path of the server's
        Unix domain socket, what :func:`~pyspark_reactive.expose` gives); ``route`` (sent
        as routing metadata, with ``{shard}`` and ``{shards}`` replaced as above; omitted:
        none); ``data`` (the request's data, as UTF-8 text, with ``{offset}``, ``{shard}``
        and ``{shards}`` replaced as above; omitted: empty); ``format``: ``bytes``
        (default: ``value BINARY``), ``text`` (``value STRING``) or ``json`` (parsed into
        the schema given: an object by column name, an array by position);
        ``keepaliveTimeout`` (seconds without a KEEPALIVE answer after which the query
        fails; default 30); ``token`` (presented in the SETUP frame as a bearer token, what
        :func:`~reactive_streams.adapters.rsocket.serve` and ``serve_publisher`` ask for;
        errors never show it, and Spark's plan shows it redacted as long as
        ``spark.redaction.regex`` matches ``token``) or ``tokenFile`` (the absolute path
        of a file on the driver's machine holding it, so the token never travels in the
        options; what :func:`~pyspark_reactive.expose` gives); ``maxPayloadBytes`` (the
        largest payload taken from the server; default 4194304). With ``shards``, its
        attribute ``shard`` is the :class:`~pyspark_reactive.Shard` to make.

    Returns
    -------
    RSocketPublisher
        Connects when subscribed to, not before.

    Raises
    ------
    OptionError
        For a missing ``host`` or ``port`` (without ``socketPath``), ``socketPath`` with
        either, or a value of ``port``, ``socketPath``, ``route`` (at most 255 bytes in
        UTF-8 once ``{shard}`` and ``{shards}`` are replaced), ``format``,
        ``keepaliveTimeout``, ``token``, ``tokenFile`` or ``maxPayloadBytes`` not accepted;
        with ``shards``, for ``data`` without ``{offset}``, or (more than one shard)
        neither ``route`` nor ``data`` holding ``{shard}``.

    Examples
    --------
    >>> rsocket_publisher({"host": "127.0.0.1", "port": "7878", "route": "ticks"})
    RSocketPublisher(127.0.0.1:7878, route='ticks')
    >>> from pyspark_reactive.source.durability import FactoryOptions, ResumePoint
    >>> rsocket_publisher(FactoryOptions({"host": "h", "port": "1", "data": "from={offset}"},
    ...                                  ResumePoint(offset=1200))).data
    b'from=1200'
    >>> from pyspark_reactive import Shard
    >>> rsocket_publisher(FactoryOptions(
    ...     {"host": "h", "port": "1", "route": "ticks-{shard}", "data": "from={offset}"},
    ...     ResumePoint(offset=300), shard=Shard(2, 4)))
    RSocketPublisher(h:1, route='ticks-2')
    """
    lower = {k.lower(): v for k, v in options.items()}
    specs = OPTION_SPECS
    host = specs.given(lower, "host")
    socket_path = _socket_path(specs.given(lower, "socketPath"), host,
                               specs.given(lower, "port"))
    port: int | None = None
    if socket_path is None:
        if host is None or not host.strip():
            raise OptionError("host", host, f"{_HOST}; it is required with publisher=rsocket "
                              "(or socketPath instead of host and port)")
        if specs.given(lower, "port") is None:
            raise OptionError("port", None, "an integer from 1 to 65535, the RSocket server's "
                              "TCP port; it is required with publisher=rsocket (or socketPath "
                              "instead of host and port)")
        host = host.strip()
        port = specs.read(lower, "port")
    else:
        host = None
    shard = getattr(options, "shard", None)
    index, count = (shard.index, shard.count) if shard is not None else (0, 1)
    given_route, given_data = specs.given(lower, "route"), specs.given(lower, "data")
    if shard is not None:
        _check_shardable(given_route, given_data, count)
    route = None
    if given_route is not None:
        if not given_route.strip():
            raise OptionError("route", given_route, f"{_ROUTE}, or no route option for none")
        # The last shard's index is the longest: what load() checks (as shard 0) is then
        # true of every shard.
        if len(_fill(given_route, count - 1, count).encode("utf-8")) > MAX_ROUTE_BYTES:
            raise OptionError("route", given_route, f"{_ROUTE_BYTES} (RSocket's routing tag)")
        route = _fill(given_route, index, count)
    keepalive_timeout = specs.read(lower, "keepaliveTimeout")
    max_payload = specs.read(lower, "maxPayloadBytes")
    token = _token(specs.given(lower, "token"), specs.given(lower, "tokenFile"))
    format = specs.read(lower, "format")
    mime_type, decode = FORMATS[format]
    if format == "json":
        # Fields the rows have no column for are left out, as from_json does.
        decode = functools.partial(_json_row, columns=json_columns(options))
    resume = getattr(options, "resume", None)
    offset = resume.offset if resume is not None else 0
    data = _fill(given_data or "", index, count).replace(_OFFSET, str(offset))
    timeout = float(keepalive_timeout)
    return RSocketPublisher(host, port, route=route, data=data.encode(), decode=decode,
                            data_mime_type=mime_type, keepalive_timeout=timeout,
                            keepalive_interval=min(DEFAULT_KEEPALIVE_INTERVAL, timeout / 4),
                            token=token, max_payload_bytes=max_payload, path=socket_path)


def _fill(text: str, index: int, count: int) -> str:
    """``text`` with ``{shard}`` and ``{shards}`` replaced (plain replacement, not
    ``str.format``: the rest may hold braces of its own, JSON for one)."""
    return text.replace(_SHARDS, str(count)).replace(_SHARD, str(index))


def _check_shardable(route: str | None, data: str | None, count: int) -> None:
    """With the source's option ``shards``: each shard must ask for a stream of its own
    (one shard alone is the whole feed), and each of its request-streams (one a
    micro-batch) must go on where the last one's kept elements end."""
    example = "data=shard={shard}&from={offset}"
    if count > 1 and _SHARD not in (route or "") and _SHARD not in (data or ""):
        raise OptionError(
            "data" if data is not None or route is None else "route",
            data if data is not None or route is None else route,
            f"with shards={count}, {_SHARD} in route or data, replaced by each shard's index "
            f"(0 to {count - 1}; {_SHARDS} by {count}) so that each shard requests a stream "
            f"of its own, as {example}: neither route nor data holds {_SHARD}, so every "
            f"shard would read the same stream and each row would arrive {count} times")
    if _OFFSET not in (data or ""):
        raise OptionError(
            "data", data,
            f"with shards={count}, data holding {_OFFSET}, replaced by the offset of the "
            f"shard's next element, as {example}: each micro-batch opens a new "
            "request-stream per shard, and without the offset the server cannot go on where "
            "the last one's kept elements end (it would send them again, or lose the rest)")


def _socket_path(path: str | None, host: str | None, port: str | None) -> str | None:
    if path is None:
        return None
    if host is not None or port is not None:
        raise OptionError("socketPath", path, "either socketPath or host and port, not both "
                          f"({'host' if host is not None else 'port'} is given too)")
    expanded = os.path.expanduser(path.strip())
    if not os.path.isabs(expanded) or len(os.fsencode(expanded)) > _MAX_SOCKET_PATH_BYTES:
        raise OptionError("socketPath", path, f"{_SOCKET_PATH} (at most "
                                              f"{_MAX_SOCKET_PATH_BYTES} bytes)")
    return expanded


def _token(token: str | None, path: str | None) -> str | None:
    if path is not None:
        if token is not None:
            raise OptionError("tokenFile", path, "either token or tokenFile, not both (token "
                                                 "is given too)")
        token = _read_token_file(path)
    elif token is not None and (not token.strip() or len(token.encode()) > MAX_TOKEN_BYTES):
        raise OptionError("token", _HIDDEN, _TOKEN)
    return token


def _read_token_file(path: str) -> str:
    token = read_option_file("tokenFile", path, _TOKEN_FILE_HOLDING, MAX_TOKEN_BYTES).strip()
    if not token:
        # What it holds is never shown: only that it cannot be a token.
        raise OptionError("tokenFile", path, "the absolute path of a file holding the RSocket "
                                             "service's token (1 to "
                                             f"{MAX_TOKEN_BYTES} bytes); it holds nothing")
    return token


def _json_row(data: bytes, columns: frozenset[str] | None) -> Any:
    return keep_columns(json.loads(data), columns)


def _default_schema(options: Mapping[str, str]) -> str:
    lower = {k.lower(): v for k, v in options.items()}
    name = OPTION_SPECS.read(lower, "format")
    if name == "json":
        raise OptionError("schema", None, "a schema with format=json, which parses each "
                          "payload into it: .schema('id BIGINT, name STRING') or the schema "
                          "option")
    return "value BINARY" if name == "bytes" else "value STRING"


rsocket_publisher = sharded(rsocket_publisher)
rsocket_publisher.default_schema = _default_schema  # type: ignore[attr-defined]
rsocket_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]
