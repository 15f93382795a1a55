"""The built-in publisher ``redis``: a Redis stream read as one consumer of a consumer group,
taken only against the source's demand and acknowledged (``XACK``) only once durable
(extra ``redis``). The factory checks the options and connects nothing; the connection is
made when the source subscribes (in the source runner, or a shard's task).
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.redis_streams import (
    RedisEntry,
    RedisStreamPublisher,
    parse_url,
)

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
from ._common import BOOLEAN, CA_CERTS, json_needs_schema, read_bool
from .columns import json_columns, keep_columns

__all__ = ["DEFAULT_MAX_BUFFERED_BYTES", "DEFAULT_MAX_MESSAGE_BYTES", "MESSAGE_SCHEMA",
           "OPTION_SPECS", "default_schema", "redis_publisher"]

#: The rows' schema with the default ``format=message``.
MESSAGE_SCHEMA = ("stream STRING, id STRING, fields MAP<STRING, BINARY>, timestamp TIMESTAMP, "
                  "redelivered BOOLEAN")
#: The largest entry accepted by default (its field names and values, and 128 bytes for
#: each pair): stream entries are small as a rule; raise it for larger ones.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024
#: The most bytes one read's reply may hold (64 MiB): a read asks for at most
#: maxBufferedBytes / (maxMessageBytes + 256) entries (1,023 with the defaults).
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
#: The most characters of a password file.
MAX_PASSWORD_BYTES = 4096
FORMATS = ("message", "json")
BAD_PAYLOADS = ("fail", "skip")
_BOOLEAN = BOOLEAN
_URL = "redis://host[:port][/db] or rediss://host[:port][/db] (TLS), without a password"
_CA_CERTS = CA_CERTS
_NAME = "a non-empty name"

OPTION_SPECS = OptionSpecs([
    OptionSpec("url", "The server, as `redis://host:port/db` (`rediss://` for TLS); instead "
               "of `host`, `port` and `db`. Give the password in `passwordFile`, not here.",
               accepted=_URL, shown_default="none"),
    OptionSpec("host", "The server's host name or address (without `url`).",
               accepted="a host name or address", shown_default="127.0.0.1"),
    OptionSpec("port", "The server's TCP port (without `url`).", "int", 6379, minimum=1,
               maximum=65535),
    OptionSpec("db", "The database number (without `url`).", "int", 0, minimum=0,
               maximum=2**31 - 1),
    OptionSpec("stream", "The stream's key.", accepted=_NAME, required=True),
    OptionSpec("group", "The consumer group the query reads as: the group remembers what "
               "was delivered to it (`last-delivered-id`) and what was not acknowledged "
               "(its pending entries), so a restarted query goes on where it stopped.",
               accepted=_NAME, required=True),
    OptionSpec(
        "consumer", "The consumer name in the group. A restarted query reads this "
        "consumer's pending entries first (what it held, unacknowledged, when it stopped or "
        "was killed), so keep it from run to run. With `shards`, shard i reads as "
        "`<consumer>-<i>`.", accepted=_NAME, shown_default="reader"),
    OptionSpec("username", "The ACL user (Redis 6 and later) the client logs in as.",
               accepted="a user name", shown_default="none: the default user"),
    OptionSpec(
        "passwordFile", "A file holding the password (of `username`, or of the default "
        "user: `requirepass`), read where the publisher is made (with `shards`, also on "
        "every executor), so the password never travels in the options. Errors never show "
        "it.", accepted="the absolute path of a readable file (UTF-8) holding the password, "
        "on the machine of Spark's driver", shown_default="none"),
    OptionSpec("tls", "Whether the connection uses TLS (with the system's certificate "
               "authorities, unless `caCerts` names others), checking the host name.",
               accepted=_BOOLEAN, shown_default="false (true with rediss://)"),
    OptionSpec("caCerts", "A PEM file of the certificate authorities the server's "
               "certificate is checked against (with `shards`, at the same path on every "
               "executor too); implies `tls`.", accepted=f"{_CA_CERTS}; no value with "
               "tls=false", shown_default="none"),
    OptionSpec(
        "createGroup", "Whether a missing group is created (`XGROUP CREATE <stream> <group> "
        "<startId> MKSTREAM`, which creates the stream too); with `false` a missing stream "
        "or group fails the query, naming both.", accepted=_BOOLEAN, shown_default="false"),
    OptionSpec(
        "startId", "Where a group made by `createGroup` starts: `$` (entries added from now "
        "on), `0` (the whole stream) or an entry ID. An existing group keeps its own place.",
        accepted="$, 0 or an entry ID such as 1700000000000-0", shown_default="$"),
    OptionSpec(
        "claimIdleMs", "Also read the group's entries that another consumer has held, "
        "unacknowledged, for longer than this (`XAUTOCLAIM`): a consumer that is gone for "
        "good (a query with another `consumer`, a shard no longer read). Make it longer "
        "than a batch can take, or live consumers' entries are taken from them.", "int",
        minimum=1, maximum=MAX_MILLISECONDS, shown_default="none: no claims"),
    OptionSpec(
        "format", "`message`: the columns `stream STRING, id STRING, fields MAP<STRING, "
        "BINARY>, timestamp TIMESTAMP, redelivered BOOLEAN`; `json`: the field `field` of "
        "each entry parsed as JSON into the schema given.", "choice", "message",
        choices=FORMATS),
    OptionSpec("field", "With `format=json`: the field whose value is the JSON document.",
               accepted="a field name", shown_default="payload"),
    OptionSpec(
        "badPayloads", "With `format=json`, what an entry that cannot become a row does "
        "(no such field, not JSON, JSON null, or a value that does not fit the schema): "
        "`fail` fails the query naming the entry; `skip` leaves it out, acknowledged in its "
        "turn, and the source logs per batch how many it left out.", "choice", "fail",
        choices=BAD_PAYLOADS),
    OptionSpec(
        "maxMessageBytes", "The largest entry accepted: its field names and values, and 128 "
        "bytes for each pair. A larger one fails the query (it stays pending: raise this, or "
        "`XACK` or `XDEL` it); the client refuses a larger field before reading it.", "int",
        DEFAULT_MAX_MESSAGE_BYTES, minimum=1024, maximum=2**31 - 1),
    OptionSpec(
        "maxBufferedBytes", "The most one read's reply may hold: a read asks for at most "
        "`maxBufferedBytes / (maxMessageBytes + 256)` entries (and never more than the "
        "source's demand not yet met), and the client stops reading a reply past it.",
        "int", DEFAULT_MAX_BUFFERED_BYTES, minimum=1024),
    OptionSpec("blockMs", "The longest one read waits for new entries (`BLOCK`): how long "
               "stopping the query may wait for the reader.", "int", 500, minimum=1,
               maximum=600_000),
    OptionSpec("connectTimeoutMs", "How long connecting to the server may take before the "
               "query fails.", "int", 10_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec("maxMessages", "The publisher completes after this many entries.", "int",
               minimum=0, shown_default="none: endless"),
])


class _Row(dict):  # type: ignore[type-arg]
    """A row (a dict, as the source converts it) that remembers its entry's ID."""

    __slots__ = ("entry_id",)

    entry_id: str


class _Publisher(RedisStreamPublisher[Any]):
    """The built-in's publisher: each row's identity is its entry's ID, which a shard's log
    remembers to drop redeliveries (:mod:`~pyspark_reactive.source.durability`)."""

    def identity(self, element: Any) -> str | None:
        if isinstance(element, RedisEntry):
            return element.id
        return getattr(element, "entry_id", None)


class _Skipping(_Publisher):
    """``badPayloads=skip``: the source leaves out, counts and acknowledges every element
    that cannot become a row instead of failing the query."""

    skip_unfit_elements = True


def redis_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of a Redis stream read as a consumer of a group: the built-in ``redis``.

    Entries are acknowledged (``XACK``) only once the source says they are durable
    (``on_durable``: written to the write-ahead log with ``walLocation``, committed by
    Spark without it). The group keeps every entry delivered and not acknowledged in its
    pending entries list, and a restarted query reads its consumer's pending entries
    first, so nothing is lost; entries that were durable but not yet acknowledged at a kill
    come again, and the source drops them by their entry ID (``identity``), so nothing is
    repeated.

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS`: ``stream`` and ``group`` are required; the
        server by ``url`` or ``host``/``port``/``db``; ``consumer`` (default ``reader``);
        ``username``, ``passwordFile``, ``tls``, ``caCerts``; ``createGroup``,
        ``startId``, ``claimIdleMs``; ``format`` (``message`` or ``json``), ``field``,
        ``badPayloads``; ``maxMessageBytes``, ``maxBufferedBytes``, ``blockMs``,
        ``connectTimeoutMs``, ``maxMessages``. It reads the source's
        ``maxRecordsPerTrigger`` too.

    Returns
    -------
    Publisher
        A :class:`~reactive_streams.adapters.redis_streams.RedisStreamPublisher`
        acknowledging on durability; it connects when subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing ``stream`` or ``group``, a bad ``url``, number, boolean, ``format``,
        ``badPayloads`` or ``startId``, a password in ``url``, or a ``passwordFile`` that
        cannot be read.
    MissingExtraError
        When redis-py is not installed.

    Examples
    --------
    >>> redis_publisher({"url": "redis://127.0.0.1:6380", "stream": "orders",
    ...                  "group": "billing"})
    _Publisher('127.0.0.1:6380', stream='orders', group='billing', consumer='reader')
    >>> redis_publisher({"url": "http://127.0.0.1", "stream": "s", "group": "g"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option url='http://127.0.0.1' \
is not accepted: redis://host[:port][/db] or rediss://host[:port][/db] (TLS), without a \
password (url 'http://127.0.0.1': redis://host[:port][/db] or rediss://host[:port][/db] (TLS) \
is accepted, not the scheme 'http')
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    specs = OPTION_SPECS
    stream = _name(lower, "stream")
    group = _name(lower, "group")
    consumer = _name(lower, "consumer", "reader")
    shard = getattr(options, "shard", None)
    if shard is not None:
        consumer = f"{consumer}-{shard.index}"
    url = specs.given(lower, "url")
    host = (specs.given(lower, "host") or "127.0.0.1").strip()
    port, db = specs.read(lower, "port"), specs.read(lower, "db")
    tls = bool(read_bool(OPTION_SPECS, lower, "tls"))
    if url is not None:
        for other in ("host", "port", "db"):
            if specs.given(lower, other) is not None:
                raise OptionError(other, specs.given(lower, other),
                                  f"no value with url (url names the server): give {other} "
                                  f"or url")
        try:
            host, port, db, url_user, url_password, url_tls = parse_url(url)
        except ValueError as error:
            raise OptionError("url", url, f"{_URL} ({error})") from None
        if url_password is not None:
            raise OptionError("url", url, f"{_URL}: give the password in passwordFile "
                                          "(the options are shown in Spark's plan)")
        if url_tls and read_bool(OPTION_SPECS, lower, "tls") is False:
            raise OptionError("tls", "false", "true or nothing with a rediss:// url")
        tls = tls or url_tls
    else:
        url_user = None
    username = specs.given(lower, "username") or url_user
    password_path = specs.given(lower, "passwordFile")
    password = None
    if password_path is not None:
        password = read_option_file("passwordFile", password_path, "the password",
                                    MAX_PASSWORD_BYTES).strip("\r\n")
        if not password:
            raise OptionError("passwordFile", password_path,
                              "the absolute path of a file holding the password; it holds "
                              "nothing")
    ca_certs = specs.given(lower, "caCerts")
    if ca_certs is not None:
        if read_bool(OPTION_SPECS, lower, "tls") is False:
            raise OptionError("caCerts", ca_certs, "no value with tls=false (caCerts "
                                                   "implies TLS)")
        try:
            with open(ca_certs, "rb"):
                pass
        except OSError as error:
            raise OptionError("caCerts", ca_certs, f"{_CA_CERTS} ({error.strerror})") from None
    create_group = bool(read_bool(OPTION_SPECS, lower, "createGroup"))
    start_id = (specs.given(lower, "startId") or "$").strip()
    claim_idle_ms = specs.read(lower, "claimIdleMs")
    format = specs.read(lower, "format")
    bad_payloads = specs.read(lower, "badPayloads")
    field = specs.given(lower, "field")
    if format != "json":
        if bad_payloads == "skip":
            raise OptionError("badPayloads", specs.given(lower, "badPayloads"),
                              "fail, or skip only with format=json (format=message takes "
                              "every entry as it is)")
        if field is not None:
            raise OptionError("field", field, "a field name, with format=json only "
                                              "(format=message gives every field)")
    if field is not None and not field:
        raise OptionError("field", field, "a field name")
    max_message_bytes = specs.read(lower, "maxMessageBytes")
    max_buffered_bytes = specs.read(lower, "maxBufferedBytes")
    per_trigger = SOURCE_OPTION_SPECS.read(lower, "maxRecordsPerTrigger")
    # One read asks for no more than the demand not yet met, and at most this many.
    max_buffered = max(1, min(per_trigger, max_buffered_bytes // (max_message_bytes + 256),
                              1_000_000))
    decode = (functools.partial(_parse_json, field=(field or "payload").encode(),
                                columns=json_columns(options))
              if format == "json" else _columns)
    kind = _Skipping if bad_payloads == "skip" else _Publisher
    try:
        return kind(stream, group, consumer, host=host, port=port, db=db,
                    username=username, password=password, tls=tls, ca_certs=ca_certs,
                    create_group=create_group, start_id=start_id,
                    claim_idle_ms=claim_idle_ms, max_buffered=max_buffered,
                    max_message_bytes=max_message_bytes,
                    block_ms=specs.read(lower, "blockMs"),
                    connect_timeout=specs.read(lower, "connectTimeoutMs") / 1000,
                    max_messages=specs.read(lower, "maxMessages"), acknowledge="on_durable",
                    decode=decode)
    except ValueError as error:
        if "start_id" in str(error):
            raise OptionError("startId", start_id, specs.spec("startId").accepted) from None
        if "host" in str(error):
            raise OptionError("host", host, "a host name or address") from None
        raise


def _name(options: Mapping[str, str], name: str, default: str | None = None) -> str:
    given = OPTION_SPECS.given(options, name)
    value = given if given is not None else default
    if value is None or not value.strip():
        raise OptionError(name, given, f"{_NAME}; it is required" if default is None
                          else _NAME)
    return value


redis_publisher = sharded(redis_publisher)
default_schema = json_needs_schema(OPTION_SPECS, MESSAGE_SCHEMA, "each entry's field", "entries")

redis_publisher.default_schema = default_schema  # type: ignore[attr-defined]
redis_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


def _columns(entry: RedisEntry) -> _Row:
    row = _Row(stream=entry.stream, id=entry.id,
               fields={k.decode("utf-8", "replace"): v for k, v in entry.fields.items()},
               timestamp=datetime.datetime.fromtimestamp(entry.timestamp_ms / 1000,
                                                         datetime.timezone.utc),
               redelivered=entry.redelivered)
    row.entry_id = entry.id
    return row


def _parse_json(entry: RedisEntry, field: bytes, columns: frozenset[str] | None) -> Any:
    # Never raises: an entry that is no row becomes an Undecodable element, which keeps its
    # place in the stream (acknowledged in its turn with badPayloads=skip) and fails the
    # query at its offset otherwise.
    payload = entry.fields.get(field)
    if payload is None:
        problem = f"has no field {field.decode('utf-8', 'replace')!r}"
    else:
        try:
            value = json.loads(payload)
        except RecursionError:
            problem = "holds JSON nested too deeply to parse"
        except ValueError as error:
            problem = f"is not JSON ({error})"
        else:
            if isinstance(value, dict):
                row = _Row(keep_columns(value, columns))
                row.entry_id = entry.id
                return row
            if value is not None:
                return keep_columns(value, columns)
            problem = "is JSON null, not a row"
    return Undecodable(f"format=json: the entry {entry.id} of stream {entry.stream!r} "
                       f"{problem}")
