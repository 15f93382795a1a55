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
    OptionSpec,
    OptionSpecs,
    read_option_file,
)
from .columns import json_columns

__all__ = ["DEFAULT_OPEN_TIMEOUT_MS", "OPTION_SPECS", "websocket_publisher"]

DEFAULT_OPEN_TIMEOUT_MS = 10_000
DEFAULT_MAX_MESSAGE_BYTES = 2**20
_SCHEMAS = {"text": "value STRING", "bytes": "value BINARY"}
_HEADERS_ACCEPTED = ("a JSON object of header names to string values, such as "
                     "'{\"Authorization\": \"Bearer x\"}'")
_URL_ACCEPTED = "a ws:// or wss:// URL such as ws://127.0.0.1:8765/feed"

#: Every option the built-in ``websocket`` reads, in the order the reference shows them:
#: the factory reads each through these definitions, which also fill the documentation's
#: table.
OPTION_SPECS = OptionSpecs([
    OptionSpec(
        "url", "The WebSocket server's URL; shown everywhere without its `user:password@`, "
        "query string and fragment.", accepted=_URL_ACCEPTED, required=True),
    OptionSpec(
        "format", "`text`: one `value STRING` row per message; `bytes`: `value BINARY`; "
        "`json`: each message parsed into the schema given, objects by field name (fields "
        "without a column are left out, as `from_json` does).", "choice", "text",
        choices=FORMATS),
    OptionSpec(
        "headers", "Extra handshake headers, names HTTP tokens, values without line breaks; "
        "`Host`, `Upgrade`, `Connection` and `Sec-WebSocket-*` are refused. Errors never "
        "show the value, but the plan (`explain()`) does unless "
        "`spark.sql.redaction.options.regex` names it: see `headersFile`.",
        accepted=f"{_HEADERS_ACCEPTED}; not with headersFile", shown_default="none"),
    OptionSpec(
        "headersFile", "Instead of `headers`: a file on the driver's machine holding that "
        "JSON object, read where the publisher is made, so the header values never travel "
        "in the options or show in the plan.",
        accepted="the absolute path of a readable file (UTF-8) holding "
        f"{_HEADERS_ACCEPTED}, on the machine of Spark's driver", shown_default="none"),
    OptionSpec("openTimeoutMs", "How long opening the connection (with its handshake) may "
               "take before the query fails.", "int", DEFAULT_OPEN_TIMEOUT_MS, minimum=1,
               maximum=MAX_MILLISECONDS),
    OptionSpec(
        "receiveBufferBytes", "The socket's `SO_RCVBUF`: bounds what the kernel holds beyond "
        "demand, and over `wss://` what the TLS layer reads ahead. With it, HTTP redirects "
        "are not followed.", "int", minimum=1, maximum=2**31 - 1,
        shown_default="the system's (64 KiB for the TLS layer)"),
    OptionSpec("maxMessageBytes", "The largest message taken from the server: a larger one "
               "fails the query.", "int", DEFAULT_MAX_MESSAGE_BYTES, minimum=1),
])


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
        The options of :data:`OPTION_SPECS`, each with its default, bounds and meaning
        there: ``url`` (required: ``ws://`` or ``wss://``; shown everywhere without its
        ``user:password@``, query string and fragment); ``format`` (``text``, default:
        one ``value STRING`` per message; ``bytes``: ``value BINARY``; ``json``: each
        message parsed into the schema given, objects by field name, fields without a
        column left out); ``headers`` (a JSON object of extra handshake headers; its value
        shows in ``explain()`` unless ``spark.sql.redaction.options.regex`` names it) or
        ``headersFile`` (the absolute path of a file on the driver's machine holding that
        object, so the header values never travel in the options or show in the plan);
        ``openTimeoutMs`` (default 10000); ``receiveBufferBytes`` (``SO_RCVBUF``; with
        it, HTTP redirects are not followed); ``maxMessageBytes`` (default 1048576; a
        larger message fails the query).

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
    specs = OPTION_SPECS
    url = _url(specs.given(lower, "url"))
    format = specs.read(lower, "format")
    headers = _headers(specs.given(lower, "headers"), specs.given(lower, "headersFile"))
    open_timeout = specs.read(lower, "openTimeoutMs")
    receive_buffer = specs.read(lower, "receiveBufferBytes")
    max_message = specs.read(lower, "maxMessageBytes")
    return WebSocketPublisher(
        url, format=format, headers=headers, open_timeout=open_timeout / 1000,
        receive_buffer=receive_buffer, max_message_bytes=max_message,
        # format=json: fields the rows have no column for are left out, as from_json does.
        fields=json_columns(options) if format == "json" else None)


def default_schema(options: Mapping[str, str]) -> str:
    """The rows' schema when none is given: ``value STRING`` for ``format=text``,
    ``value BINARY`` for ``bytes``; ``json`` has none (an :class:`OptionError` asks for
    one)."""
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    format = OPTION_SPECS.read(lower, "format")
    if format == "json":
        raise OptionError("schema", None,
                          "format=json parses each message into the schema given, so give "
                          "one: .schema('id BIGINT, name STRING') or .option('schema', "
                          "'id BIGINT, name STRING'); for the unparsed text use format=text "
                          "(value STRING); it is required with format=json")
    return _SCHEMAS[format]


websocket_publisher.default_schema = default_schema  # type: ignore[attr-defined]
websocket_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


def _url(url: str | None) -> str:
    accepted = _URL_ACCEPTED
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
