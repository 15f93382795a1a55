"""The built-in publisher ``nats``: a durable JetStream pull consumer as rows, fetched only
against the source's demand and acknowledged only once durable (extra ``nats``).
The factory checks the options and connects nowhere; the connection is made when the
source subscribes, in the source runner (or, with ``shards``, in each shard's task).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.nats_jetstream import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_MESSAGE_BYTES,
    JetStreamMessage,
    JetStreamPublisher,
    SkipMessage,
    check_urls,
)
from reactive_streams.adapters.urls import redact_url

from ..source.options import (
    MAX_MILLISECONDS,
    SOURCE_OPTION_SPECS,
    OptionError,
    OptionSpec,
    OptionSpecs,
    read_option_file,
)
from ..source.rows import Undecodable
from ..source.shards import sharded
from ._common import BOOLEAN, CA_CERTS, json_needs_schema, read_bool, read_tls
from .columns import json_columns, keep_columns

__all__ = ["MESSAGE_SCHEMA", "OPTION_SPECS", "nats_publisher"]

#: The rows' schema with the default ``format=message``.
MESSAGE_SCHEMA = ("subject STRING, data BINARY, headers MAP<STRING, STRING>, "
                  "stream_sequence BIGINT, consumer_sequence BIGINT, num_delivered INT, "
                  "timestamp TIMESTAMP")
#: The most bytes a pull request may bring (its ``max_bytes``) by default: 64 MiB, as
#: ``mqtt``'s maxBufferedBytes.
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
FORMATS = ("message", "json")
BAD_PAYLOADS = ("fail", "skip")
DELIVER_POLICIES = ("all", "new", "last", "last_per_subject")
_BOOLEAN = BOOLEAN
_MAX_SECRET_BYTES = 64 * 1024
_NAME = "a name without spaces, '.', '*' or '>'"
_CA_CERTS = CA_CERTS

#: Every option the built-in ``nats`` reads (besides the source's ``maxRecordsPerTrigger``
#: and ``walLocation``), in the order the reference shows them.
OPTION_SPECS = OptionSpecs([
    OptionSpec("url", "The NATS server: `nats://host:port`, or `tls://host:port` for TLS; "
               "several, comma-separated, are tried in turn. Credentials in the URL are "
               "refused (they would show in the plan and in logs).",
               accepted="nats://host:port or tls://host:port, comma-separated",
               required=True),
    OptionSpec("stream", "The JetStream stream read.", accepted=_NAME, required=True),
    OptionSpec(
        "consumer", "The durable pull consumer read (its name): it keeps what was "
        "acknowledged, so a restarted query goes on where it stopped, and delivers again "
        "what was not, after its AckWait. With `shards`, every shard pulls from this one "
        "consumer.", accepted=_NAME, required=True),
    OptionSpec(
        "createConsumer", "Create the consumer when the stream has none of that name: a "
        "durable pull consumer with explicit acknowledgement, `subject`, `deliverPolicy`, "
        "`ackWaitMs` and `maxAckPending`. An existing consumer is used as it is.",
        accepted=_BOOLEAN, shown_default="false: a missing consumer fails the query"),
    OptionSpec("subject", "With `createConsumer`: the consumer's filter subject "
               "(wildcards `*` and `>`).", accepted="a subject",
               shown_default="none: every subject of the stream"),
    OptionSpec("deliverPolicy", "With `createConsumer`: where a new consumer starts.",
               "choice", "all", choices=DELIVER_POLICIES),
    OptionSpec(
        "ackWaitMs", "With `createConsumer`: the consumer's AckWait, after which a message "
        "delivered and not acknowledged is delivered again. The reader keeps what it holds "
        "in progress meanwhile.", "int", 30_000, minimum=100, maximum=MAX_MILLISECONDS),
    OptionSpec(
        "maxAckPending", "With `createConsumer`: the most messages delivered and not "
        "acknowledged. The reader holds up to `maxRecordsPerTrigger` unacknowledged with "
        "`walLocation` and 2 × `maxRecordsPerTrigger` without, so it must be more.", "int",
        minimum=1, maximum=2**31, shown_default="2 × maxRecordsPerTrigger + maxBatch"),
    OptionSpec("username", "The user name the client connects with (with "
               "`passwordFile`).", accepted="a user name", shown_default="none"),
    OptionSpec(
        "passwordFile", "A file on the driver's machine holding the password of "
        "`username` (with `shards`, also on every executor); errors never show it.",
        accepted="the absolute path of a readable file (UTF-8), with username",
        shown_default="none"),
    OptionSpec("tokenFile", "A file holding the token the client authenticates with "
               "instead of a user name.", accepted="the absolute path of a readable file "
               "(UTF-8); not with username", shown_default="none"),
    OptionSpec("credentialsFile", "A NATS `.creds` file (a user JWT and NKey seed), as "
               "`nats context` and `nsc` write them.",
               accepted="the absolute path of a readable .creds file", shown_default="none"),
    OptionSpec("tls", "Whether the connection uses TLS (with the system's certificate "
               "authorities, unless `caCerts` names others); a `tls://` URL implies it.",
               accepted=_BOOLEAN, shown_default="false"),
    OptionSpec("caCerts", "A PEM file of the certificate authorities the server's "
               "certificate is checked against (with `shards`, at the same path on every "
               "executor too); implies `tls`.", accepted=f"{_CA_CERTS}; no value with "
               "tls=false", shown_default="none"),
    OptionSpec("maxBatch", "The most messages one pull request asks for; a request never "
               "asks for more than the source's demand not yet covered.", "int",
               DEFAULT_MAX_BATCH, minimum=1, maximum=1_000_000),
    OptionSpec("fetchTimeoutMs", "How long a pull request waits on the server for "
               "messages before it expires (and another is sent).", "int", 5_000,
               minimum=10, maximum=MAX_MILLISECONDS),
    OptionSpec("connectTimeoutMs", "How long connecting may take before the query fails.",
               "int", 10_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec(
        "maxMessageBytes", "The largest message (data and headers) taken: a larger one "
        "fails the query, naming its stream sequence (the server's `max_payload`, 1 MiB by "
        "default, bounds them too).", "int", DEFAULT_MAX_MESSAGE_BYTES, minimum=1,
        maximum=2**31),
    OptionSpec("maxBufferedBytes", "The `max_bytes` of each pull request: the server ends "
               "a request's batch there, so the messages waiting for the source hold at "
               "most this many bytes.", "int", DEFAULT_MAX_BUFFERED_BYTES, minimum=1024),
    OptionSpec(
        "format", "`message`: the columns `subject STRING, data BINARY, headers "
        "MAP<STRING, STRING>, stream_sequence BIGINT, consumer_sequence BIGINT, "
        "num_delivered INT, timestamp TIMESTAMP`; `json`: each message's data parsed as "
        "JSON into the schema given.", "choice", "message", choices=FORMATS),
    OptionSpec(
        "badPayloads", "With `format=json`, what a message that cannot become a row does: "
        "`fail` fails the query, naming its offset and why; `skip` leaves it out, "
        "acknowledged in its turn, logged per batch.", "choice", "fail",
        choices=BAD_PAYLOADS),
    OptionSpec("maxMessages", "The publisher completes after this many messages.", "int",
               minimum=0, shown_default="none: endless"),
])


def nats_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of a durable JetStream pull consumer's messages: the built-in ``nats``.

    Messages are fetched only against the source's demand (one pull request at a time,
    for at most the demand not yet covered) and acknowledged only once the source says
    they are durable (``on_durable``: written to the write-ahead log with
    ``walLocation``, committed by Spark without it). A message not acknowledged when the
    query stopped or was killed is delivered again by the consumer after its AckWait, so
    nothing is lost; each row's identity is its stream sequence.

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS`: ``url``, ``stream`` and ``consumer`` are
        required; the rest have the defaults there. It reads the source's
        ``maxRecordsPerTrigger`` and ``walLocation`` too.

    Returns
    -------
    Publisher
        A :class:`~reactive_streams.adapters.nats_jetstream.JetStreamPublisher`
        acknowledging on durability; it connects when subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing or bad option (the error names it, and never shows a secret).
    MissingExtraError
        When nats-py is not installed.

    Examples
    --------
    >>> nats_publisher({"url": "nats://127.0.0.1:4222", "stream": "ORDERS",
    ...                 "consumer": "spark"})
    JetStreamPublisher(['nats://127.0.0.1:4222'], stream='ORDERS', consumer='spark')
    >>> nats_publisher({"url": "http://127.0.0.1", "stream": "ORDERS", "consumer": "spark"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option \
url='http://127.0.0.1' is not accepted: nats://host:port or tls://host:port, \
comma-separated (url 'http://127.0.0.1': nats://host:port or tls://host:port is accepted)
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    specs = OPTION_SPECS
    urls = _urls(specs.given(lower, "url"))
    stream = _name(lower, "stream")
    consumer = _name(lower, "consumer")
    create = read_bool(OPTION_SPECS, lower, "createConsumer") or False
    subject = specs.given(lower, "subject")
    if subject is not None and (not subject.strip() or " " in subject.strip()):
        raise OptionError("subject", subject, "a subject (wildcards * and >)")
    for name in ("subject", "deliverPolicy", "ackWaitMs", "maxAckPending"):
        if not create and specs.given(lower, name) is not None:
            raise OptionError(name, specs.given(lower, name), "a value only with "
                              "createConsumer=true (an existing consumer keeps its own "
                              "settings)")
    per_trigger = SOURCE_OPTION_SPECS.read(lower, "maxRecordsPerTrigger")
    max_batch = specs.read(lower, "maxBatch")
    max_ack_pending = specs.read(lower, "maxAckPending")
    if max_ack_pending is None:
        max_ack_pending = min(2**31, 2 * per_trigger + max_batch)
    username, password, token, credentials = _credentials(lower)
    format = specs.read(lower, "format")
    bad_payloads = specs.read(lower, "badPayloads")
    if bad_payloads == "skip" and format != "json":
        raise OptionError("badPayloads", specs.given(lower, "badPayloads"),
                          "fail, or skip only with format=json (format=message takes every "
                          "message as it is)")
    decode: Any = (functools.partial(_parse_json, columns=json_columns(options))
                   if format == "json" else _columns)
    shard = getattr(options, "shard", None)
    if shard is not None:
        wal = SOURCE_OPTION_SPECS.given(lower, "walLocation")
        if wal is not None:
            decode = _CrossShard(decode, wal, shard.count)
    kind = _Skipping if bad_payloads == "skip" else _Publisher
    return kind(
        urls, stream, consumer, create_consumer=create,
        filter_subject=subject.strip() if subject else None,
        deliver_policy=specs.read(lower, "deliverPolicy"),
        ack_wait=specs.read(lower, "ackWaitMs") / 1000, max_ack_pending=max_ack_pending,
        username=username, password=password, token=token, credentials_file=credentials,
        tls=read_tls(OPTION_SPECS, lower), max_batch=max_batch,
        fetch_timeout=specs.read(lower, "fetchTimeoutMs") / 1000,
        max_message_bytes=specs.read(lower, "maxMessageBytes"),
        max_buffered_bytes=specs.read(lower, "maxBufferedBytes"),
        connect_timeout=specs.read(lower, "connectTimeoutMs") / 1000,
        max_messages=specs.read(lower, "maxMessages"), acknowledge="on_durable",
        decode=decode,
        # A shard's task acknowledges before its cancel and gives the rest back at once.
        **({"linger": 0.0} if shard is not None else {}))


nats_publisher = sharded(nats_publisher)
default_schema = json_needs_schema(OPTION_SPECS, MESSAGE_SCHEMA, "each message", "messages")

nats_publisher.default_schema = default_schema  # type: ignore[attr-defined]
nats_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


class _Row(dict):  # type: ignore[type-arg]
    """A row (a dict of columns) that knows the stream sequence of its message."""

    __slots__ = ("sequence",)

    def __init__(self, values: Mapping[str, Any], sequence: int) -> None:
        super().__init__(values)
        self.sequence = sequence


class _List(list):  # type: ignore[type-arg]
    """A row given by position that knows the stream sequence of its message."""

    __slots__ = ("sequence",)

    def __init__(self, values: list[Any], sequence: int) -> None:
        super().__init__(values)
        self.sequence = sequence


class _Publisher(JetStreamPublisher[Any]):
    """The built-in's publisher: each row's identity is its message's stream sequence,
    which a shard's log remembers to drop redeliveries
    (:mod:`~pyspark_reactive.source.durability`)."""

    def identity(self, element: Any) -> str | None:
        sequence = getattr(element, "sequence", None)
        if sequence is None and type(element) is dict:
            sequence = element.get("stream_sequence")  # format=message
        return None if sequence is None else str(sequence)


class _Skipping(_Publisher):
    """``badPayloads=skip``: the source leaves out, counts and acknowledges every element
    that cannot become a row instead of failing the query."""

    skip_unfit_elements = True


class _Bad(Undecodable):
    """An element that cannot become a row, and the sequence of its message."""

    __slots__ = ("sequence",)

    def __init__(self, reason: str, sequence: int) -> None:
        super().__init__(reason)
        self.sequence = sequence


def _columns(message: JetStreamMessage) -> dict[str, Any]:
    # A plain dict (the converter's fast path); its identity is its stream_sequence.
    return {"subject": message.subject, "data": message.data, "headers": message.headers,
            "stream_sequence": message.stream_sequence,
            "consumer_sequence": message.consumer_sequence,
            "num_delivered": message.num_delivered,
            "timestamp": datetime.datetime.fromtimestamp(message.timestamp, _UTC)}


_UTC = datetime.timezone.utc


def _parse_json(message: JetStreamMessage, columns: frozenset[str] | None = None) -> Any:
    # Never raises: data that is no row becomes an Undecodable element, which keeps its
    # place in the stream and fails the query at its offset (or is left out with skip).
    try:
        value = json.loads(message.data)
    except RecursionError:
        problem = "is JSON nested too deeply to parse"
    except ValueError as error:
        problem = f"is not JSON ({error})"
    else:
        if isinstance(value, dict):
            return _Row(keep_columns(value, columns), message.stream_sequence)
        if isinstance(value, list):
            return _List(value, message.stream_sequence)
        if value is not None:
            return value  # a single column's value: no identity
        problem = "is JSON null, not a row"
    shown = message.data[:80]
    return _Bad(f"format=json: the data {shown!r}{'...' if len(message.data) > 80 else ''} "
                f"of message {message.stream_sequence} (subject {message.subject!r}) "
                f"{problem}", message.stream_sequence)


class _CrossShard:
    """A shard's decode: a redelivered message (``num_delivered`` > 1) that any shard's log
    remembers keeping is left out (SkipMessage: acknowledged, not signalled).

    Every shard pulls from the one consumer, so a message a shard kept and could not
    acknowledge (its task died) comes back after AckWait to whichever shard pulls next;
    the shard task drops a redelivery its own log remembers, and this drops one another
    shard's does. The logs are read once per task, at its first redelivery.
    """

    def __init__(self, decode: Any, location: str, count: int) -> None:
        self.decode = decode
        self.location = location
        self.count = count
        self._kept: set[str] | None = None

    def __call__(self, message: JetStreamMessage) -> Any:
        if message.num_delivered > 1:
            if self._kept is None:
                self._kept = _kept_by_shards(self.location, self.count)
            if str(message.stream_sequence) in self._kept:
                raise SkipMessage(f"redelivered (delivery {message.num_delivered}), and a "
                                  f"shard's log holds it already")
        return self.decode(message)


def _kept_by_shards(location: str, count: int) -> set[str]:
    """The identities the latest epoch of each shard's log remembers."""
    from ..source.shard_log import ShardLog, shard_folder

    kept: set[str] = set()
    for index in range(count):
        try:
            if not os.path.isdir(shard_folder(location, index)):
                continue
            shard_log = ShardLog(location, index, owner_check=False)
            epoch = shard_log.last_epoch()
            record = shard_log.record(epoch) if epoch else None
            if record is not None:
                kept.update(shard_log.identities(record))
        except Exception as error:  # an unreadable log: its own task reports it
            logging.getLogger("pyspark_reactive.source").warning(
                "reactive source: nats could not read shard %d's identities: %s", index,
                error)
    return kept


def _urls(text: str | None) -> list[str]:
    accepted = OPTION_SPECS.spec("url").accepted_text
    if text is None or not text.strip():
        raise OptionError("url", text, f"{accepted}; it is required")
    try:
        return check_urls(text)
    except ValueError as error:
        raise OptionError("url", redact_url(text), f"{accepted} ({error})") from None


def _name(options: Mapping[str, str], name: str) -> str:
    text = OPTION_SPECS.given(options, name)
    value = (text or "").strip()
    if not value:
        raise OptionError(name, text, f"{_NAME}; it is required")
    if any(c in value for c in " \t\r\n.*>"):
        raise OptionError(name, text, _NAME)
    return value


def _credentials(options: Mapping[str, str]
                 ) -> tuple[str | None, str | None, str | None, str | None]:
    specs = OPTION_SPECS
    username = specs.given(options, "username")
    password_file = specs.given(options, "passwordFile")
    token_file = specs.given(options, "tokenFile")
    credentials = specs.given(options, "credentialsFile")
    if password_file is not None and username is None:
        raise OptionError("passwordFile", password_file, "a value only with username")
    if token_file is not None and username is not None:
        raise OptionError("tokenFile", token_file, "a value only without username (a token "
                          "or a user and password, not both)")
    password = token = None
    if password_file is not None:
        password = read_option_file("passwordFile", password_file, "the user's password",
                                    _MAX_SECRET_BYTES).strip("\r\n")
        if not password:
            raise OptionError("passwordFile", password_file, "a file holding the password; "
                              "it holds nothing")
    if token_file is not None:
        token = read_option_file("tokenFile", token_file, "the token",
                                 _MAX_SECRET_BYTES).strip()
        if not token:
            raise OptionError("tokenFile", token_file, "a file holding the token; it holds "
                              "nothing")
    if credentials is not None:
        read_option_file("credentialsFile", credentials, "a user JWT and NKey seed",
                         _MAX_SECRET_BYTES)  # checked now: readable, absolute, small
    return username, password, token, credentials
