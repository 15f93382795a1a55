"""The built-in publisher ``sse``: a Server-Sent Events endpoint as rows, read from the socket
only against the source's demand, and resumed after a restart from the id of the last
durable event (``Last-Event-ID``). The factory checks the options and connects nothing;
the connection is made when the source subscribes, in the source runner.
"""

from __future__ import annotations

import datetime
import functools
import json
import ssl
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    EVENT_OVERHEAD_BYTES,
    SseEvent,
    SsePublisher,
    url_problem,
)
from reactive_streams.adapters.urls import redact_url

from ..source.options import (
    MAX_MILLISECONDS,
    SOURCE_OPTION_SPECS,
    OptionError,
    OptionSpec,
    OptionSpecs,
)
from ..source.rows import Undecodable
from ._common import json_needs_schema
from .columns import json_columns, keep_columns
from .websocket import _headers as read_headers

__all__ = ["EVENT_SCHEMA", "OPTION_SPECS", "sse_publisher"]

#: The rows' schema with the default ``format=event``.
EVENT_SCHEMA = "id STRING, event STRING, data STRING, timestamp TIMESTAMP"
FORMATS = ("event", "json")
BAD_PAYLOADS = ("fail", "skip")
#: The most bytes held for events read beyond the source's demand (64 MiB), as ``mqtt``.
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
_URL = "an http:// or https:// URL of an event stream"

#: Every option the built-in ``sse`` reads (besides the source's ``maxRecordsPerTrigger``
#: and ``walLocation``), in the order the reference shows them.
OPTION_SPECS = OptionSpecs([
    OptionSpec("url", "The event stream's URL. Its query string is never shown in logs or "
               "errors.", accepted=_URL, required=True),
    OptionSpec(
        "headersFile", "A file on the driver's machine holding a JSON object of HTTP "
        "headers sent with every request (an `Authorization` header, say), read where the "
        "publisher is made, so their values never travel in the options or show in the "
        "plan.", accepted="the absolute path of a readable file (UTF-8) holding a JSON "
        "object of strings", shown_default="none"),
    OptionSpec("caCerts", "A PEM file of the certificate authorities an `https://` "
               "server's certificate is checked against, on the driver's machine.",
               accepted="a readable PEM file of certificate authorities",
               shown_default="the system's"),
    OptionSpec(
        "lastEventId", "Sent as `Last-Event-ID` when the query starts for the first time; "
        "a restarted query sends the id of the last event that was durable instead (in "
        "the write-ahead log with `walLocation`, committed by Spark without it).",
        accepted="an event id (text without line breaks)", shown_default="none"),
    OptionSpec(
        "format", "`event`: the columns `id STRING, event STRING, data STRING, timestamp "
        "TIMESTAMP`; `json`: each event's data parsed as JSON into the schema given.",
        "choice", "event", choices=FORMATS),
    OptionSpec(
        "badPayloads", "With `format=json`, what an event whose data cannot become a row "
        "does: `fail` fails the query, naming its offset and why; `skip` leaves it out.",
        "choice", "fail", choices=BAD_PAYLOADS),
    OptionSpec("maxEventBytes", "The longest line and the largest event; a larger one "
               "fails the query.", "int", DEFAULT_MAX_EVENT_BYTES, minimum=64,
               maximum=2**31 - 1),
    OptionSpec("maxBufferedBytes", "Bytes held for events read beyond the source's demand "
               "before reading pauses: each event's strings and "
               f"{EVENT_OVERHEAD_BYTES} bytes for its record.", "int",
               DEFAULT_MAX_BUFFERED_BYTES, minimum=1),
    OptionSpec("receiveBufferBytes", "The socket's `SO_RCVBUF`: bounds what the kernel "
               "holds beyond demand on this side.", "int", minimum=1, maximum=2**31 - 1,
               shown_default="the system's"),
    OptionSpec("connectTimeoutMs", "How long connecting and getting the response's headers "
               "may take.", "int", 10_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec("readTimeoutMs", "How long a connection may send nothing (comments and "
               "pings count) while events are wanted before it is opened again.", "int",
               60_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec("giveUpAfterMs", "How long reconnections may keep failing before the query "
               "fails.", "int", 60_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec("maxEvents", "The publisher completes after this many events.", "int",
               minimum=0, shown_default="none: endless"),
])


def sse_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of a Server-Sent Events stream's events: the built-in ``sse``.

    An event stream has no acknowledgement: it is resumed. Each row's position key is its
    event's id; a restarted query reconnects with ``Last-Event-ID`` set to the id of the
    last durable row (the factory options' ``resume.key``), so a server that honours it
    goes on with the next event: nothing lost or repeated. Within a run, a dropped
    connection is opened again the same way.

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS` (``url`` is required), each with its default,
        bounds and meaning there; the source's ``maxRecordsPerTrigger`` bounds the events
        read beyond demand.

    Returns
    -------
    Publisher
        An :class:`~reactive_streams.adapters.sse.SsePublisher`; it connects when
        subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing or bad ``url``, a ``headersFile`` that cannot be read or holds no
        JSON object of strings, a ``caCerts`` that is not a PEM file, a bad number,
        ``format`` or ``badPayloads``.

    Examples
    --------
    >>> sse_publisher({"url": "https://example.com/feed?key=secret"})
    SsePublisher('https://example.com/feed?...')
    >>> sse_publisher({"url": "ws://example.com/feed"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option \
url='ws://example.com/feed' is not accepted: an http:// or https:// URL of an event stream \
(an http:// or https:// URL is needed)
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    specs = OPTION_SPECS
    url = (specs.given(lower, "url") or "").strip()
    problem = url_problem(url) if url else "it is required"
    if problem is not None:
        raise OptionError("url", redact_url(url) if url else None, f"{_URL} ({problem})")
    headers = read_headers(None, specs.given(lower, "headersFile"))
    last_event_id = specs.given(lower, "lastEventId")
    if last_event_id is not None and any(c in last_event_id for c in "\r\n\0"):
        raise OptionError("lastEventId", last_event_id, "an event id without line breaks")
    format = specs.read(lower, "format")
    bad_payloads = specs.read(lower, "badPayloads")
    if bad_payloads == "skip" and format != "json":
        raise OptionError("badPayloads", specs.given(lower, "badPayloads"),
                          "fail, or skip only with format=json")
    per_trigger = SOURCE_OPTION_SPECS.read(lower, "maxRecordsPerTrigger")
    decode = (functools.partial(_parse_json, columns=json_columns(options))
              if format == "json" else _columns)
    kind = _Skipping if bad_payloads == "skip" else _Publisher
    publisher = kind(
        url, headers=headers, last_event_id=last_event_id, tls=_tls(lower),
        max_event_bytes=specs.read(lower, "maxEventBytes"),
        # Beyond the source's demand (maxRecordsPerTrigger), hold at most one batch more.
        max_buffered=per_trigger,
        max_buffered_bytes=specs.read(lower, "maxBufferedBytes"),
        receive_buffer=specs.read(lower, "receiveBufferBytes"),
        connect_timeout=specs.read(lower, "connectTimeoutMs") / 1000,
        read_timeout=specs.read(lower, "readTimeoutMs") / 1000,
        give_up_after=specs.read(lower, "giveUpAfterMs") / 1000,
        max_events=specs.read(lower, "maxEvents"), decode=decode)
    resume = getattr(options, "resume", None)
    if resume is not None and resume.key is not None:
        publisher.resume_from = resume.key  # the last durable event's id
    return publisher


default_schema = json_needs_schema(OPTION_SPECS, EVENT_SCHEMA, "each event's data", "events",
                                   raw_format="event")

sse_publisher.default_schema = default_schema  # type: ignore[attr-defined]
sse_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


class _Row(dict):  # type: ignore[type-arg]
    """A row as a dict that also carries its event's id (its position key)."""

    __slots__ = ("event_id",)
    event_id: str | None


class _Publisher(SsePublisher[Any]):
    """The built-in's publisher: each row's position key is its event's id."""

    def position_key(self, element: Any) -> str | None:
        return getattr(element, "event_id", None)


class _Skipping(_Publisher):
    """``badPayloads=skip``: the source leaves out elements that cannot become rows."""

    skip_unfit_elements = True


def _columns(event: SseEvent) -> _Row:
    row = _Row(id=event.id, event=event.event, data=event.data,
               timestamp=datetime.datetime.fromtimestamp(event.timestamp,
                                                         datetime.timezone.utc))
    row.event_id = event.id
    return row


def _parse_json(event: SseEvent, columns: frozenset[str] | None = None) -> Any:
    # Never raises: data that is no row becomes an Undecodable element, which keeps its
    # place in the stream and fails the query at its offset (or is skipped).
    try:
        value = json.loads(event.data)
    except RecursionError:
        problem = "is JSON nested too deeply to parse"
    except ValueError as error:
        problem = f"is not JSON ({error})"
    else:
        if isinstance(value, dict):
            row = _Row(keep_columns(value, columns))
            row.event_id = event.id
            return row
        problem = f"is a JSON {type(value).__name__}, not an object"
    shown = event.data[:80]
    return Undecodable(f"format=json: the data {shown!r}{'...' if len(event.data) > 80 else ''}"
                       f" of the event with id {event.id!r} {problem}")


def _tls(options: Mapping[str, str]) -> ssl.SSLContext | None:
    ca_certs = OPTION_SPECS.given(options, "caCerts")
    if ca_certs is None:
        return None
    try:
        return ssl.create_default_context(cafile=ca_certs)
    except (OSError, ssl.SSLError) as error:
        raise OptionError("caCerts", ca_certs,
                          f"a readable PEM file of certificate authorities ({error})") from None
