"""The built-in publisher ``websocket``: a WebSocket feed as rows, read only against the
source's demand (extra ``websocket``). The factory checks the options and connects nothing;
the connection is made when the source subscribes, in the source runner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.websocket import (
    FORMATS,
    WebSocketPublisher,
    header_problem,
    url_problem,
)

from ..source.options import (
    MAX_MILLISECONDS,
    OptionError,
    choice_option,
    optional_int_option,
    read_option_file,
)
from .columns import json_columns

__all__ = ["DEFAULT_OPEN_TIMEOUT_MS", "websocket_publisher"]

DEFAULT_OPEN_TIMEOUT_MS = 10_000
DEFAULT_MAX_MESSAGE_BYTES = 2**20
_SCHEMAS = {"text": "value STRING", "bytes": "value BINARY"}
_HEADERS_ACCEPTED = ("a JSON object of header names to string values, such as "
                     "'{\"Authorization\": \"Bearer x\"}'")


def websocket_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of a WebSocket server's messages: the built-in ``websocket``.

    At-most-once: a WebSocket feed cannot be replayed or resumed, so the messages the
    source had taken but not yet written to its log (or, without ``walLocation``, not yet
    in a committed batch) when the query is killed are lost, and so are the messages the
    buffers held beyond demand (see :class:`~reactive_streams.adapters.websocket.
    WebSocketPublisher`). A restarted query opens a new connection and gets what the
    server sends from then on.

    Parameters
    ----------
    options : mapping of str to str
        ``url`` (required: ``ws://`` or ``wss://``; shown everywhere without its
        ``user:password@``, query string and fragment); ``format`` (``text``, default:
        one ``value STRING`` per message; ``bytes``: ``value BINARY``; ``json``: each
        message parsed into the schema given, objects by field name: a field the schema
        does not name fails the query, so for feeds with more fields read ``format=text``
        and parse with ``from_json``, which ignores them);
        ``headers`` (a JSON object of extra handshake headers: names HTTP tokens, values
        without line breaks; ``Host``, ``Upgrade``, ``Connection`` and
        ``Sec-WebSocket-*`` are refused; an option's value shows in ``explain()`` unless
        ``spark.sql.redaction.options.regex`` names it, see ``headersFile``);
        ``headersFile`` (instead of ``headers``: the absolute path of a file on the
        driver's machine holding that JSON object, read where the publisher is made, so
        the header values never travel in the options or show in the plan);
        ``openTimeoutMs`` (default 10000);
        ``receiveBufferBytes`` (``SO_RCVBUF``: bounds what the kernel holds beyond
        demand, and over ``wss://`` what the TLS layer reads ahead; default: the
        system's, and 64 KiB for the TLS layer; with it, HTTP redirects are not
        followed); ``maxMessageBytes`` (default 1048576; a larger message fails the
        query).

    Returns
    -------
    Publisher
        A :class:`~reactive_streams.adapters.websocket.WebSocketPublisher`; it connects
        when subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing or bad ``url``, an unknown ``format``, ``headers`` that are not a
        JSON object of strings (the value is never shown), a ``headersFile`` that cannot
        be read or does not hold one, both ``headers`` and ``headersFile``, or a bad
        number.
    MissingExtraError
        When the ``websockets`` library is not installed.

    Examples
    --------
    >>> publisher = websocket_publisher({"url": "ws://127.0.0.1:8765/feed",
    ...                                  "format": "json"})
    >>> publisher
    WebSocketPublisher('ws://127.0.0.1:8765/feed', format='json')
    >>> websocket_publisher({"url": "http://example.com"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option url='http://example.com' \
is not accepted: a ws:// or wss:// URL such as ws://127.0.0.1:8765/feed (http://example.com \
isn't a valid URI: scheme isn't ws or wss)

    Credentials in the URL are never shown:

    >>> websocket_publisher({"url": "wss://alice:pw@127.0.0.1:8765/feed?access_token=x"})
    WebSocketPublisher('wss://***@127.0.0.1:8765/feed?***', format='text')
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    url = _url(lower.get("url"))
    format = choice_option(lower, "format", FORMATS, "text")
    headers = _headers(lower.get("headers"), lower.get("headersfile"))
    open_timeout = optional_int_option(lower, "openTimeoutMs", 1, MAX_MILLISECONDS)
    receive_buffer = optional_int_option(lower, "receiveBufferBytes", 1, 2**31 - 1)
    max_message = optional_int_option(lower, "maxMessageBytes", 1, 2**63 - 1)
    return WebSocketPublisher(
        url, format=format, headers=headers,
        open_timeout=(open_timeout or DEFAULT_OPEN_TIMEOUT_MS) / 1000,
        receive_buffer=receive_buffer,
        max_message_bytes=max_message or DEFAULT_MAX_MESSAGE_BYTES,
        # format=json: fields the rows have no column for are left out, as from_json does.
        fields=json_columns(options) if format == "json" else None)


def default_schema(options: Mapping[str, str]) -> str:
    """The rows' schema when none is given: ``value STRING`` for ``format=text``,
    ``value BINARY`` for ``bytes``; ``json`` has none (an :class:`OptionError` asks for
    one)."""
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    format = choice_option(lower, "format", FORMATS, "text")
    if format == "json":
        raise OptionError("schema", None,
                          "format=json parses each message into the schema given, so give "
                          "one: .schema('id BIGINT, name STRING') or .option('schema', "
                          "'id BIGINT, name STRING'); for the unparsed text use format=text "
                          "(value STRING); it is required with format=json")
    return _SCHEMAS[format]


websocket_publisher.default_schema = default_schema  # type: ignore[attr-defined]


def _url(url: str | None) -> str:
    accepted = "a ws:// or wss:// URL such as ws://127.0.0.1:8765/feed"
    if url is None or not url.strip():
        raise OptionError("url", url, f"{accepted}; it is required")
    problem = url_problem(url.strip())
    if problem is not None:
        # OptionError shows the URL without userinfo and query string (credentials).
        raise OptionError("url", url, f"{accepted} ({problem})")
    return url.strip()


# Headers carry credentials (Authorization), so errors never show the option's value.
_HIDDEN = "(hidden)"


def _headers(text: str | None, path: str | None) -> dict[str, str] | None:
    if path is not None:
        if text is not None:
            raise OptionError("headersFile", path, "either headers or headersFile, not both "
                                                   "(headers is given too)")
        text = read_option_file("headersFile", path, _HEADERS_ACCEPTED, _HEADERS_FILE_BYTES)
        # The option shows the path (no secret); errors about what it holds do not.
        option, shown, accepted = "headersFile", path, (
            f"a file holding {_HEADERS_ACCEPTED}; what it holds")
    else:
        option, shown, accepted = "headers", _HIDDEN, _HEADERS_ACCEPTED
    if text is None or not text.strip():
        return None
    try:
        headers = json.loads(text)
    except ValueError as error:
        raise OptionError(option, shown, f"{accepted}; it is not JSON: "
                                         f"{error.args[0].split(':')[0]}") from None
    if not isinstance(headers, dict):
        raise OptionError(option, shown, f"{accepted}; it is a JSON "
                                         f"{type(headers).__name__}, not an object")
    problem = header_problem(headers)
    if problem is not None:
        raise OptionError(option, shown, f"{accepted}; {problem}")
    return headers


# A file of headers is a few hundred bytes: a larger one is a wrong path, not headers.
_HEADERS_FILE_BYTES = 1 << 16
