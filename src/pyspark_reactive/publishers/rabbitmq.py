"""The built-in publisher ``rabbitmq``: a RabbitMQ queue as rows, consumed with a window that
is the source's demand and acknowledged only once durable (extra ``rabbitmq``).
The factory checks the options and connects nothing; the connection is made when the
source subscribes (in the source runner, or in each shard's task with ``shards``).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.rabbitmq import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_PREFETCH,
    MESSAGE_OVERHEAD_BYTES,
    RabbitMQMessage,
    RabbitMQPublisher,
    SkipMessage,
    parse_url,
)

from ..source.options import (
    MAX_MILLISECONDS,
    SOURCE_OPTION_SPECS,
    OptionError,
    OptionSpec,
    OptionSpecs,
)
from ..source.rows import Undecodable
from ..source.shards import sharded
from ._common import BOOLEAN, CA_CERTS, json_needs_schema, read_bool, read_tls
from .columns import json_columns, keep_columns

__all__ = ["DEFAULT_MAX_BUFFERED_BYTES", "MESSAGE_SCHEMA", "OPTION_SPECS",
           "rabbitmq_publisher"]

#: The most bytes held for messages delivered beyond the source's demand (64 MiB), as
#: the ``mqtt`` built-in's.
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
#: The rows' schema with the default ``format=message``.
MESSAGE_SCHEMA = ("body BINARY, routing_key STRING, exchange STRING, message_id STRING, "
                  "headers MAP<STRING, STRING>, redelivered BOOLEAN, delivery_tag BIGINT, "
                  "timestamp TIMESTAMP, received TIMESTAMP")
FORMATS = ("message", "json")
BAD_PAYLOADS = ("fail", "skip")
#: How often, at most, a shard reads the other shards' logs for a redelivered message it
#: does not find there (another shard may have kept it since).
PEER_REFRESH_S = 0.5
_BOOLEAN = BOOLEAN
_CA_CERTS = CA_CERTS
_URL = "amqp://[user[:password]@]host[:port][/vhost] or amqps://..."

#: Every option the built-in ``rabbitmq`` reads (besides the source's
#: ``maxRecordsPerTrigger`` and ``walLocation``), in the order the reference shows them.
OPTION_SPECS = OptionSpecs([
    OptionSpec("queue", "The queue consumed. It must exist (the source declares nothing): "
               "a missing queue fails the query, naming it and the virtual host.",
               accepted="a queue name", required=True),
    OptionSpec("url", "The broker: `amqp://host:port/vhost`, or `amqps://...` for TLS (the "
               "virtual host percent-encoded: `%2F` is `/`). A user name may be given in it; "
               "give the password in `passwordFile` rather than here. `host`, `port`, "
               "`vhost` and `username` override its parts.", accepted=_URL,
               shown_default="amqp://127.0.0.1:5672/%2F"),
    OptionSpec("host", "The broker's host name or address.", accepted="a host",
               shown_default="the url's, else 127.0.0.1"),
    OptionSpec("port", "The broker's AMQP port.", "int", minimum=1, maximum=65535,
               shown_default="the url's, else 5672 (5671 with TLS)"),
    OptionSpec("vhost", "The virtual host.", accepted="a virtual host name",
               shown_default="the url's, else /"),
    OptionSpec("username", "The user the client connects as.", accepted="a user name",
               shown_default="the url's, else guest"),
    OptionSpec("passwordFile", "A file holding the user's password (one trailing newline is "
               "dropped), read where the connection is made: the driver, and every executor "
               "with `shards`. Errors never show the password.",
               accepted="a readable file", shown_default="the url's, else guest"),
    OptionSpec("tls", "Whether the connection uses TLS (with the system's certificate "
               "authorities, unless `caCerts` names others); an `amqps://` url implies it.",
               accepted=_BOOLEAN, shown_default="false"),
    OptionSpec("caCerts", "A PEM file of the certificate authorities the broker's "
               "certificate is checked against (on the driver, and on every executor with "
               "`shards`); implies `tls`.", accepted=f"{_CA_CERTS}; no value with tls=false",
               shown_default="none"),
    OptionSpec(
        "prefetch", "The most messages delivered and not yet acknowledged (the `basic.qos` "
        "prefetch's ceiling). Within it the window follows the source's demand: at most "
        "the messages signalled and not yet durable plus the demand not yet met (at least "
        "1). Without `walLocation` it must exceed 2 × `maxRecordsPerTrigger`, since "
        "messages are then acknowledged only once Spark commits their batch, which it does "
        "when it plans the next.", "int", minimum=1, maximum=MAX_PREFETCH,
        shown_default="2 × maxRecordsPerTrigger + 1, at most 65535"),
    OptionSpec("heartbeat", "Seconds between AMQP heartbeats; 0 for none.", "int", 60,
               minimum=0, maximum=65535),
    OptionSpec("connectTimeoutMs", "How long connecting to the broker may take before the "
               "query fails.", "int", 10_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec(
        "maxMessageBytes", "The largest message body accepted: a larger one fails the query "
        "as soon as its header announces it, before its body is held, and goes back to the "
        "queue (set the broker's `max_message_size` to refuse it at the producer).", "int",
        DEFAULT_MAX_MESSAGE_BYTES, minimum=1, maximum=2**31 - 1),
    OptionSpec("maxBufferedBytes", "Bytes held for messages delivered beyond the source's "
               "demand before the window stops opening: each message's body, routing key and "
               f"headers, and {MESSAGE_OVERHEAD_BYTES} bytes for its record.", "int",
               DEFAULT_MAX_BUFFERED_BYTES, minimum=1),
    OptionSpec(
        "format", "`message`: the columns `body BINARY, routing_key STRING, exchange STRING, "
        "message_id STRING, headers MAP<STRING, STRING>, redelivered BOOLEAN, delivery_tag "
        "BIGINT, timestamp TIMESTAMP, received TIMESTAMP`; `json`: each body parsed as JSON "
        "into the schema given (fields without a column are left out, as `from_json` does).",
        "choice", "message", choices=FORMATS),
    OptionSpec(
        "badPayloads", "With `format=json`, what a message that cannot become a row does: "
        "`fail` fails the query, naming its offset and why (the message stays in the queue, "
        "so a restart fails on it again); `skip` leaves it out, acknowledged in its turn, "
        "and the source logs per batch how many it left out.", "choice", "fail",
        choices=BAD_PAYLOADS),
    OptionSpec("maxMessages", "The publisher completes after this many messages.", "int",
               minimum=0, shown_default="none: endless"),
])


def rabbitmq_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of a RabbitMQ queue's messages: the built-in ``rabbitmq``.

    Messages are acknowledged to the broker only once the source says they are durable
    (``on_durable``: written to the write-ahead log with ``walLocation``, committed by
    Spark without it); what was not acknowledged when the query stopped or was killed goes
    back to the queue, so nothing is lost. A message that was durable but not yet
    acknowledged at a kill comes again, marked redelivered; each row carries its
    ``message_id`` and the publisher gives it as the element's ``identity``. With
    ``shards``, a shard's log drops such a redelivery by it (and one another shard kept,
    see ``_OtherShardsKept``); a message without ``message_id`` is then read again (at
    least once).

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS`: ``queue`` is required; ``url`` or
        ``host``/``port``/``vhost``; ``username``, ``passwordFile``; ``tls``, ``caCerts``;
        ``prefetch``; ``heartbeat``; ``connectTimeoutMs``; ``maxMessageBytes``,
        ``maxBufferedBytes``; ``format`` (``message`` or ``json``), ``badPayloads``;
        ``maxMessages``. It reads the source's ``maxRecordsPerTrigger`` and
        ``walLocation`` too.

    Returns
    -------
    Publisher
        A :class:`~reactive_streams.adapters.rabbitmq.RabbitMQPublisher` acknowledging on
        durability; it connects when subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing ``queue``, a bad ``url`` (shown without its password), number,
        boolean, ``format`` or ``badPayloads``, an unreadable ``passwordFile`` or
        ``caCerts``, or a ``prefetch`` (or ``maxRecordsPerTrigger``) that would stall the
        stream without ``walLocation``.
    MissingExtraError
        When pika is not installed.

    Examples
    --------
    >>> rabbitmq_publisher({"url": "amqp://spark@127.0.0.1/%2F", "queue": "orders",
    ...                     "walLocation": "/tmp/wal"})
    RabbitMQPublisher('127.0.0.1:5672', vhost='/', queue='orders', prefetch=20001)
    >>> rabbitmq_publisher({"queue": "orders", "url": "http://spark:secret@x/"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option \
url='http://***@x/' is not accepted: amqp://[user[:password]@]host[:port][/vhost] \
or amqps://... (url 'http://spark:***@x/': amqp://... or amqps://... is accepted)
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    specs = OPTION_SPECS
    queue = (specs.given(lower, "queue") or "").strip()
    if not queue:
        raise OptionError("queue", specs.given(lower, "queue"), "a queue name; it is required")
    url = specs.given(lower, "url")
    parsed: tuple[Any, ...] = ("127.0.0.1", None, "/", None, None, False)
    if url is not None:
        try:
            parsed = parse_url(url.strip())
        except ValueError as error:
            raise OptionError("url", _hidden(url), f"{_URL} ({error})") from None
    host, port, vhost, username, password, url_tls = parsed
    host = (specs.given(lower, "host") or host).strip()
    given_port = specs.read(lower, "port")
    vhost = specs.given(lower, "vhost") or vhost
    username = specs.given(lower, "username") or username
    password_file = specs.given(lower, "passwordFile")
    if password_file is not None:
        password = _read_password(password_file)
    tls = _tls(lower, url_tls)
    if given_port is not None:
        port = given_port
    per_trigger = SOURCE_OPTION_SPECS.read(lower, "maxRecordsPerTrigger")
    given_prefetch = specs.read(lower, "prefetch")
    prefetch = given_prefetch or min(MAX_PREFETCH, 2 * per_trigger + 1)
    _check_window(lower, given_prefetch, prefetch, per_trigger)
    format = specs.read(lower, "format")
    bad_payloads = specs.read(lower, "badPayloads")
    if bad_payloads == "skip" and format != "json":
        raise OptionError("badPayloads", specs.given(lower, "badPayloads"),
                          "fail, or skip only with format=json (format=message takes every "
                          "body as it is)")
    shard = getattr(options, "shard", None)
    decode: Any = (functools.partial(_parse_json, columns=json_columns(options))
                   if format == "json" else _columns)
    if shard is not None and shard.count > 1:
        location = SOURCE_OPTION_SPECS.given(lower, "walLocation")
        if location is not None:
            owner_check = (SOURCE_OPTION_SPECS.read(lower, "walOwnerCheck") == "true")
            decode = _OtherShardsKept(decode, location, shard.index, shard.count, owner_check)
    kind = _Skipping if bad_payloads == "skip" else _Publisher
    try:
        publisher = kind(
            queue, host=host, port=port, vhost=vhost, username=username, password=password,
            tls=tls, prefetch=prefetch, max_message_bytes=specs.read(lower, "maxMessageBytes"),
            max_buffered_bytes=specs.read(lower, "maxBufferedBytes"),
            connect_timeout=specs.read(lower, "connectTimeoutMs") / 1000,
            heartbeat=specs.read(lower, "heartbeat"),
            max_messages=specs.read(lower, "maxMessages"), acknowledge="on_durable",
            decode=decode,
            # A shard's task acknowledges before its cancel, then waits for the close.
            linger=0.0 if shard is not None else 10.0)
    except ValueError as error:  # what the adapter checks beyond the specs (host, vhost)
        name = str(error).split(" ", 1)[0]
        raise OptionError(name if name in ("host", "vhost", "queue") else "url",
                          None, str(error)) from None
    return publisher


rabbitmq_publisher = sharded(rabbitmq_publisher)
default_schema = json_needs_schema(OPTION_SPECS, MESSAGE_SCHEMA, "each body", "messages")

rabbitmq_publisher.default_schema = default_schema  # type: ignore[attr-defined]
rabbitmq_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


def _check_window(options: Mapping[str, str], given: int | None, prefetch: int,
                  per_trigger: int) -> None:
    """Without a log, messages are acknowledged only once Spark commits their batch,
    which it does when it plans the next: the window must hold the batch Spark works on
    and a whole next one."""
    if SOURCE_OPTION_SPECS.given(options, "walLocation") is not None or (
            prefetch > 2 * per_trigger):
        return
    why = ("without a log, messages are acknowledged only once Spark commits their batch, "
           "which it does when it plans the next")
    if given is not None and 2 * per_trigger < MAX_PREFETCH:
        raise OptionError("prefetch", given,
                          f"more than 2 x maxRecordsPerTrigger ({2 * per_trigger}) without "
                          f"walLocation ({why}); set walLocation, raise prefetch or lower "
                          f"maxRecordsPerTrigger")
    given_per_trigger = SOURCE_OPTION_SPECS.given(options, "maxRecordsPerTrigger")
    raise OptionError("maxRecordsPerTrigger",
                      per_trigger if given_per_trigger is None else given_per_trigger,
                      f"at most {(prefetch - 1) // 2} without walLocation: prefetch "
                      f"({prefetch}; at most {MAX_PREFETCH}) must exceed 2 x "
                      f"maxRecordsPerTrigger ({why}); set walLocation or lower "
                      f"maxRecordsPerTrigger")


def _hidden(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{tail}"


def _read_password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise OptionError("passwordFile", path, f"a readable file holding the password "
                          f"({type(error).__name__}: {getattr(error, 'strerror', '')})"
                          ) from None
    return text[:-1] if text.endswith("\n") else text


def _tls(options: Mapping[str, str], url_tls: bool) -> bool | ssl.SSLContext:
    if url_tls and read_bool(OPTION_SPECS, options, "tls") is False:
        raise OptionError("tls", OPTION_SPECS.given(options, "tls"),
                          "true with an amqps:// url (or give an amqp:// url)")
    return read_tls(OPTION_SPECS, options, implied=url_tls)


class _Row(dict[str, Any]):
    """A row as a dict, carrying its message's identity (``message_id``) beside it."""

    __slots__ = ("message_id", "redelivered")

    def __init__(self, values: dict[str, Any], message_id: str | None,
                 redelivered: bool = False) -> None:
        super().__init__(values)
        self.message_id = message_id
        self.redelivered = redelivered


def _time(seconds: float | None) -> datetime.datetime | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


def _header(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _columns(message: RabbitMQMessage) -> _Row:
    return _Row({"body": message.body, "routing_key": message.routing_key,
                 "exchange": message.exchange, "message_id": message.message_id,
                 "headers": {str(k): _header(v) for k, v in message.headers.items()},
                 "redelivered": message.redelivered, "delivery_tag": message.delivery_tag,
                 "timestamp": _time(message.timestamp), "received": _time(message.received)},
                message.message_id, message.redelivered)


def _parse_json(message: RabbitMQMessage, columns: frozenset[str] | None = None) -> Any:
    # Never raises: a body that is no row becomes an Undecodable element, which keeps its
    # place in the stream (acknowledged in its turn with badPayloads=skip).
    try:
        value = json.loads(message.body)
    except RecursionError:
        problem = "is JSON nested too deeply to parse"
    except ValueError as error:
        problem = f"is not JSON ({error})"
    else:
        if isinstance(value, dict):
            return _Row(keep_columns(value, columns), message.message_id,
                        message.redelivered)
        if value is not None:
            return keep_columns(value, columns)
        problem = "is JSON null, not a row"
    shown = message.body[:80]
    return Undecodable(
        f"format=json: the body {shown!r}{'...' if len(message.body) > 80 else ''} of a "
        f"message of queue {message.routing_key!r} (message_id {message.message_id!r}) "
        f"{problem}")


class _Publisher(RabbitMQPublisher[Any]):
    """The built-in's publisher: each row's identity is its message's ``message_id``,
    which the write-ahead log and a shard's log remember to drop redeliveries."""

    def identity(self, element: Any) -> str | None:
        return getattr(element, "message_id", None)

    def redelivered(self, element: Any) -> bool:
        """Whether the broker delivered the message before (its ``redelivered`` flag):
        only such a message is dropped for its ``message_id``, which a producer may
        reuse."""
        return getattr(element, "redelivered", False) is True


class _Skipping(_Publisher):
    """``badPayloads=skip``: the source leaves out, counts and acknowledges every element
    that cannot become a row."""

    skip_unfit_elements = True


class _OtherShardsKept:
    """A shard's decode that leaves out (and so acknowledges) a redelivered message that
    another shard of the query already kept.

    Shards are consumers of one queue: a message one shard's task kept in its log but
    could not acknowledge (its task was killed in between) goes back to the queue and may
    be delivered to any shard. The shard that kept it drops it by its identity
    (``pyspark_reactive.source.shard_task``); this lets the others do so too: a message
    marked redelivered, with a ``message_id``, is looked up among the identities the
    other shards' latest epochs remember (each shard's log under ``walLocation``), read
    again at most every :data:`PEER_REFRESH_S` while a redelivered message is not found.
    What holds: a redelivery of a message another shard kept within its identity window
    (two of its epochs' shares) is dropped; one that shard kept earlier is not found and
    is read again (at least once for it), as is any message without a ``message_id``.
    """

    def __init__(self, decode: Any, location: str, index: int, count: int,
                 owner_check: bool) -> None:
        self.decode = decode
        self.location, self.index, self.count = location, index, count
        self.owner_check = owner_check
        self._known: set[str] = set()
        self._read_at = 0.0
        self._lock = threading.Lock()

    def __call__(self, message: RabbitMQMessage) -> Any:
        if message.redelivered and message.message_id is not None:
            if self._kept_elsewhere(message.message_id):
                raise SkipMessage(f"message_id {message.message_id!r} was redelivered, "
                                  "and another shard of this query kept it already")
        return self.decode(message)

    def _kept_elsewhere(self, identity: str) -> bool:
        with self._lock:
            if identity in self._known:
                return True
            if time.monotonic() - self._read_at < PEER_REFRESH_S:
                return False
            self._known = self._read()
            self._read_at = time.monotonic()
            return identity in self._known

    def _read(self) -> set[str]:
        from ..source.shard_log import ShardLog

        known: set[str] = set()
        for other in range(self.count):
            if other == self.index:
                continue
            try:
                shard_log = ShardLog(self.location, other, owner_check=self.owner_check)
                last = shard_log.last_epoch()
                record = shard_log.record(last) if last else None
                if record is not None:
                    known.update(shard_log.identities(record))
            except Exception as error:  # a hint only: the message is kept (at least once)
                logging.getLogger("pyspark_reactive.source").warning(
                    "reactive source: shard %d could not read shard %d's identities (%s: "
                    "%s); its redeliveries are kept", self.index, other,
                    type(error).__name__, error)
        return known
