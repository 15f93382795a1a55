"""The built-in publisher ``rsocket``: a request-stream of an RSocket server (TCP) as rows,
paced by the source's demand (each micro-batch's ``request(n)`` reaches the server as
REQUEST_N). Made in the source runner; it connects only when the source subscribes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from reactive_streams import Publisher

from ..source.options import OptionError, choice_option, optional_int_option, read_option_file
from .columns import json_columns, keep_columns

__all__ = ["FORMATS", "rsocket_publisher"]

#: ``format`` -> (the data MIME type announced in SETUP, the payload decoder).
FORMATS: dict[str, tuple[str, Callable[[bytes], Any] | None]] = {
    "bytes": ("application/octet-stream", None),
    "text": ("text/plain", lambda data: data.decode("utf-8")),
    "json": ("application/json", json.loads),
}


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

    Parameters
    ----------
    options : mapping of str to str
        ``host`` (required); ``port`` (required, 1 to 65535); ``route`` (sent as routing
        metadata; omitted: none); ``data`` (the request's data, as UTF-8 text, with
        ``{offset}`` replaced as above; omitted: empty); ``format``: ``bytes`` (default:
        each payload's data as a ``value BINARY`` row), ``text`` (UTF-8 text, ``value
        STRING``) or ``json`` (parsed, into the schema given with ``.schema(...)`` or the
        ``schema`` option: an object by column name, an array by position);
        ``keepaliveTimeout``: seconds without a KEEPALIVE answer after which the query
        fails with the server's address (2 to 86400; default 30; a server that stops
        answering is noticed between this and twice this long after its last answer);
        ``token``: presented in the SETUP frame as a bearer token (what
        :func:`~reactive_streams.adapters.rsocket.serve` and ``serve_publisher`` ask
        for); errors never show it, and Spark's plan shows it redacted as long as
        ``spark.redaction.regex`` matches ``token`` (its default does);
        ``tokenFile`` (instead of ``token``: the absolute path of a file on the driver's
        machine holding the token, read where the publisher is made, so the token never
        travels in the options; what :func:`~pyspark_reactive.expose` gives);
        ``maxPayloadBytes``: the largest payload taken from the server, whole or in
        fragments (1024 to 16777215; default 4194304): a larger one fails the query,
        saying so, before it is buffered.

    Returns
    -------
    RSocketPublisher
        Connects when subscribed to, not before.

    Raises
    ------
    OptionError
        For a missing ``host`` or ``port``, or a value of ``port``, ``route`` (at most 255
        bytes in UTF-8), ``format``, ``keepaliveTimeout``, ``token``, ``tokenFile`` or
        ``maxPayloadBytes`` not accepted.

    Examples
    --------
    >>> rsocket_publisher({"host": "127.0.0.1", "port": "7878", "route": "ticks"})
    RSocketPublisher(127.0.0.1:7878, route='ticks')
    >>> from pyspark_reactive.source.durability import FactoryOptions, ResumePoint
    >>> rsocket_publisher(FactoryOptions({"host": "h", "port": "1", "data": "from={offset}"},
    ...                                  ResumePoint(offset=1200))).data
    b'from=1200'
    """
    from reactive_streams.adapters.rsocket import (
        DEFAULT_KEEPALIVE_INTERVAL,
        DEFAULT_KEEPALIVE_TIMEOUT,
        DEFAULT_MAX_PAYLOAD_BYTES,
        MAX_ROUTE_BYTES,
        RSocketPublisher,
    )

    lower = {k.lower(): v for k, v in options.items()}
    host = lower.get("host")
    if host is None or not host.strip():
        raise OptionError("host", host, "the RSocket server's host name or address; it is "
                          "required with publisher=rsocket")
    port = optional_int_option(lower, "port", 1, 65535)
    if port is None:
        raise OptionError("port", None, "an integer from 1 to 65535, the RSocket server's TCP "
                          "port; it is required with publisher=rsocket")
    route = lower.get("route")
    if route is not None and not route.strip():
        raise OptionError("route", route, "a route name (sent as routing metadata), or no "
                          "route option for none")
    if route is not None and len(route.encode("utf-8")) > MAX_ROUTE_BYTES:
        raise OptionError("route", route, f"at most {MAX_ROUTE_BYTES} bytes in UTF-8 (RSocket's "
                          "routing tag)")
    keepalive_timeout = optional_int_option(lower, "keepaliveTimeout", 2, 86400)
    max_payload = optional_int_option(lower, "maxPayloadBytes", 1024, _MAX_FRAME_BYTES)
    token = _token(lower.get("token"), lower.get("tokenfile"))
    format = choice_option(lower, "format", FORMATS, "bytes")
    mime_type, decode = FORMATS[format]
    if format == "json":
        # Fields the rows have no column for are left out, as from_json does.
        decode = functools.partial(_json_row, columns=json_columns(options))
    resume = getattr(options, "resume", None)
    offset = resume.offset if resume is not None else 0
    data = lower.get("data", "").replace("{offset}", str(offset))
    timeout = (DEFAULT_KEEPALIVE_TIMEOUT if keepalive_timeout is None
               else float(keepalive_timeout))
    return RSocketPublisher(host.strip(), port, route=route, data=data.encode(), decode=decode,
                            data_mime_type=mime_type, keepalive_timeout=timeout,
                            keepalive_interval=min(DEFAULT_KEEPALIVE_INTERVAL, timeout / 4),
                            token=token,
                            max_payload_bytes=max_payload or DEFAULT_MAX_PAYLOAD_BYTES)


# RSocket over TCP gives a frame a 3-byte length.
_MAX_FRAME_BYTES = (1 << 24) - 1
# A token is never shown, in errors either.
_HIDDEN = "(hidden)"


def _token(token: str | None, path: str | None) -> str | None:
    from reactive_streams.adapters.rsocket import MAX_TOKEN_BYTES  # the adapter's limit

    if path is not None:
        if token is not None:
            raise OptionError("tokenFile", path, "either token or tokenFile, not both (token "
                                                 "is given too)")
        token = _read_token_file(path)
    elif token is not None and (not token.strip() or len(token.encode()) > MAX_TOKEN_BYTES):
        raise OptionError("token", _HIDDEN, f"a token of 1 to {MAX_TOKEN_BYTES} bytes in "
                                            "UTF-8 (the RSocket service's)")
    return token


def _read_token_file(path: str) -> str:
    from reactive_streams.adapters.rsocket import MAX_TOKEN_BYTES

    token = read_option_file("tokenFile", path, "the RSocket service's token",
                             MAX_TOKEN_BYTES).strip()
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
    name = choice_option(lower, "format", FORMATS, "bytes")
    if name == "json":
        raise OptionError("schema", None, "a schema with format=json, which parses each "
                          "payload into it: .schema('id BIGINT, name STRING') or the schema "
                          "option")
    return "value BINARY" if name == "bytes" else "value STRING"


rsocket_publisher.default_schema = _default_schema  # type: ignore[attr-defined]
