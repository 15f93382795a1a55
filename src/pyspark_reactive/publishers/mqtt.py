"""The built-in publisher ``mqtt``: an MQTT 5 subscription as rows, taken from the broker
only against the source's demand and acknowledged only once durable (extra ``mqtt``).
The factory checks the options and connects nothing; the connection is made when the
source subscribes, in the source runner.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from reactive_streams import Publisher
from reactive_streams.adapters.mqtt import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MESSAGE_OVERHEAD_BYTES,
    PROTOCOLS,
    MqttMessage,
    MqttPublisher,
    check_topic_filter,
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
from ._common import BOOLEAN, CA_CERTS, json_needs_schema, read_bool, read_tls
from .columns import json_columns, keep_columns

__all__ = ["DEFAULT_MAX_BUFFERED_BYTES", "DEFAULT_RECEIVE_MAXIMUM", "MESSAGE_SCHEMA",
           "OPTION_SPECS", "mqtt_publisher"]

#: The broker's window of unacknowledged QoS 1 messages: the most MQTT 5 allows, so that
#: messages waiting to be durable never hold the stream up.
DEFAULT_RECEIVE_MAXIMUM = 65535
#: The most bytes held for messages read beyond the source's demand (64 MiB; each
#: message's topic, payload and MESSAGE_OVERHEAD_BYTES): with large payloads or long topics
#: the count alone (up to maxRecordsPerTrigger more) would let a publisher fill memory.
DEFAULT_MAX_BUFFERED_BYTES = 64 * 2**20
#: The most messages a shard's task reads beyond its share (which it requests at once):
#: what it reads beyond the share goes unacknowledged, so the next task reads it again.
SHARD_READ_AHEAD = 256
# A shard's session outlives its task: between tasks the broker keeps its messages.
DEFAULT_SHARD_SESSION_EXPIRY_S = 86400
#: The rows' schema with the default ``format=message``.
MESSAGE_SCHEMA = "topic STRING, payload BINARY, qos INT, retain BOOLEAN, timestamp TIMESTAMP"
FORMATS = ("message", "json")
BAD_PAYLOADS = ("fail", "skip")
_BOOLEAN = BOOLEAN
_HOST = "the broker's host name or address"
_TOPIC = "a topic filter such as sensors/+/temperature or sensors/#"
_PASSWORD = "a value only with username"
_CA_CERTS = CA_CERTS
# A password file holds a line: a larger one is a wrong path.
_PASSWORD_FILE_BYTES = 1 << 12

#: Every option the built-in ``mqtt`` reads (besides the source's ``maxRecordsPerTrigger``
#: and ``walLocation``), in the order the reference shows them: the factory reads each
#: through these definitions, which also fill the documentation's table.
OPTION_SPECS = OptionSpecs([
    OptionSpec("host", "The MQTT broker's host name or address.", accepted=_HOST,
               required=True),
    OptionSpec("port", "The broker's TCP port.", "int", 1883, minimum=1, maximum=65535),
    OptionSpec(
        "topic", "The topic filter subscribed to: `+` stands for one level, `#` (the whole "
        "last level) for any number.", accepted=_TOPIC, required=True),
    OptionSpec(
        "qos", "The subscription's QoS: with 1, a message is acknowledged to the broker only "
        "once the source says it is durable (written to the write-ahead log, or committed "
        "by Spark without one); 0 is at-most-once. A broker that sends a message above the "
        "QoS granted (QoS 2 always) is cut off and the query fails.", "int", 1, minimum=0,
        maximum=1),
    OptionSpec(
        "clientId", "The client id, which names the broker's session: with one (and "
        "`cleanStart` false) a restarted query resumes the session and gets every message "
        "not acknowledged, so nothing is lost. Without one the broker assigns an id and "
        "nothing survives a restart; a resumed session keeps the topics of earlier runs, "
        "so give a new id when `topic` changes.", accepted="a client id (any text)",
        shown_default="none: the broker assigns one"),
    OptionSpec(
        "shareGroup", "With the source's option `shards`: the group of the shared "
        "subscription `$share/<shareGroup>/<topic>` the shards read, shard i with the client "
        "id `<clientId>-<i>` and a persistent session of its own, so the broker spreads the "
        "topic's messages over the shards and keeps what a shard's task did not "
        "acknowledge for its next task.", accepted="a share name (no /, + or #)",
        shown_default="the clientId"),
    OptionSpec(
        "cleanStart", "Whether the connection drops the session the broker kept for "
        "`clientId` (and every message queued in it) rather than resuming it.",
        accepted=f"{_BOOLEAN}; false only with clientId",
        shown_default="false with a clientId, else true"),
    OptionSpec(
        "sessionExpiry", "Seconds the broker keeps the session (and queues its messages) "
        "while the query is down; more than 0 only with `clientId`.", "int",
        minimum=0, maximum=0xFFFFFFFF, shown_default="86400 with a clientId, else 0"),
    OptionSpec("username", "The user name the client connects with.",
               accepted="a user name", shown_default="none"),
    OptionSpec("password", "The password the client connects with; errors never show it.",
               accepted=f"{_PASSWORD}: MQTT sends no password without a user name",
               shown_default="none"),
    OptionSpec("passwordFile", "Instead of `password`: a file on the driver's machine (with "
               "`shards`, also at the same path on every executor's) holding the password, "
               "read where the publisher is made, so it never travels in the options or "
               "shows in the plan.", accepted="the absolute path of a readable file (UTF-8) "
               "holding the password; only with username, not with password",
               shown_default="none"),
    OptionSpec("tls", "Whether the connection uses TLS (with the system's certificate "
               "authorities, unless `caCerts` names others).", accepted=_BOOLEAN,
               shown_default="false"),
    OptionSpec("caCerts", "A PEM file of the certificate authorities the broker's "
               "certificate is checked against, on the machine of Spark's driver (with "
               "`shards`, also at the same path on every executor's, where the shards are "
               "read); implies `tls`.", accepted=f"{_CA_CERTS}; no value with tls=false",
               shown_default="none"),
    OptionSpec(
        "receiveMaximum", "The broker's window of QoS 1 messages not yet acknowledged. "
        "Without `walLocation` it must exceed 2 × `maxRecordsPerTrigger`, since messages "
        "are acknowledged only once Spark commits their batch, which it does when it plans "
        "the next.", "int", minimum=1, maximum=65535,
        shown_default=str(DEFAULT_RECEIVE_MAXIMUM)),
    OptionSpec("keepalive", "Seconds between the client's keepalive pings; 0 for none.",
               "int", 60, minimum=0, maximum=65535),
    OptionSpec("connectTimeoutMs", "How long connecting to the broker may take before the "
               "query fails.", "int", 10_000, minimum=1, maximum=MAX_MILLISECONDS),
    OptionSpec(
        "maxMessageBytes", "The largest message, counting its topic and a few bytes of "
        "header, sent to the broker as the MQTT 5 Maximum Packet Size: the broker "
        "*discards* larger messages for this client, without telling it, so raise it above "
        "the largest message the topic carries.", "int", DEFAULT_MAX_MESSAGE_BYTES,
        minimum=512, maximum=268_435_460),
    OptionSpec("maxBufferedBytes", "Bytes held for messages read beyond the source's "
               "demand before reading pauses: each message's topic and payload, and "
               f"{MESSAGE_OVERHEAD_BYTES} bytes for its record, so that long topics and "
               "empty messages count too.", "int", DEFAULT_MAX_BUFFERED_BYTES, minimum=1),
    OptionSpec(
        "format", "`message`: the columns `topic STRING, payload BINARY, qos INT, retain "
        "BOOLEAN, timestamp TIMESTAMP`; `json`: each payload parsed as JSON into the schema "
        "given (fields without a column are left out, as `from_json` does).", "choice",
        "message", choices=FORMATS),
    OptionSpec(
        "badPayloads", "With `format=json`, what a message that cannot become a row does "
        "(not JSON, JSON null, nested too deeply, or a value that does not fit the schema): "
        "`fail` fails the query, naming its offset and why; `skip` leaves it out, "
        "acknowledged in its turn, and the source logs per batch how many it left out and "
        "the first of them.", "choice", "fail", choices=BAD_PAYLOADS),
    OptionSpec(
        "identityColumn", "With `format=json`, and `walLocation` or the source's option "
        "`shards`: the column whose value identifies a message (a message id its producer "
        "gives it, unique to the message). The write-ahead log (or a shard's) remembers the "
        "identities of the messages it kept, and a redelivery of one of them (the broker "
        "sends again what was kept but not yet acknowledged when the query died) is "
        "dropped, so no row is repeated.", accepted="a column of the schema",
        shown_default="none: a redelivered message is kept again"),
    OptionSpec("maxMessages", "The publisher completes after this many messages.", "int",
               minimum=0, shown_default="none: endless"),
    OptionSpec(
        "protocol", "The MQTT version: `5`, or `3.1.1` for brokers without MQTT 5 "
        "(RabbitMQ's MQTT plugin before 3.13, ActiveMQ Classic). MQTT 3.1.1 has no Receive "
        "Maximum (the broker's own window of unacknowledged messages applies, so QoS 1 "
        "needs `walLocation`: messages are then acknowledged within `walSyncMs` of "
        "arriving), no Maximum Packet Size (a message over `maxMessageBytes` fails the "
        "query rather than being discarded by the broker), no session expiry and no "
        "shared subscriptions (so no `shards`).", "choice", "5", choices=PROTOCOLS),
])


def mqtt_publisher(options: Mapping[str, str]) -> Publisher[Any]:
    """Publisher of an MQTT 5 subscription's messages: the built-in ``mqtt``.

    QoS 1 messages are acknowledged to the broker only once the source says they are
    durable (``on_durable``: written to the write-ahead log with ``walLocation``, committed
    by Spark without it). With a persistent session (``clientId``, ``cleanStart`` false)
    the broker redelivers every message not acknowledged when the query stopped or was
    killed, so nothing is lost; messages that were durable but not yet acknowledged at a
    kill come twice. QoS 0 is at-most-once.

    Parameters
    ----------
    options : mapping of str to str
        The options of :data:`OPTION_SPECS`, each with its default, bounds and meaning
        there: ``host`` and ``topic`` (a filter with ``+``/``#`` wildcards) are required;
        ``port`` (default 1883); ``qos`` (0 or 1, default 1); ``clientId`` (default none:
        the broker assigns one and nothing survives a restart; a resumed session keeps
        the topics of earlier runs, so give a new one when ``topic`` changes);
        ``cleanStart`` (default false with a ``clientId``, true without);
        ``sessionExpiry`` (seconds; default 86400 with a ``clientId``; refused without
        one); ``username``, ``password`` (only with ``username``); ``tls``; ``caCerts``
        (implies ``tls``); ``receiveMaximum`` (default 65535); ``keepalive``;
        ``connectTimeoutMs``; ``maxMessageBytes`` (the MQTT 5 Maximum Packet Size: the
        broker *discards* larger messages for this client, without telling it);
        ``maxBufferedBytes``; ``format`` (``message``, default: the columns of
        :data:`MESSAGE_SCHEMA`; ``json``: each payload parsed as JSON into the schema
        given); ``badPayloads`` (with ``format=json``: ``fail``, default, or ``skip``);
        ``maxMessages`` (complete after this many). It reads the source's
        ``maxRecordsPerTrigger`` and ``walLocation`` too.

    Returns
    -------
    Publisher
        An :class:`~reactive_streams.adapters.mqtt.MqttPublisher` acknowledging on
        durability; it connects when subscribed to, not now.

    Raises
    ------
    OptionError
        For a missing ``host`` or ``topic``, a bad topic filter, ``qos``, boolean, number,
        ``format`` or ``badPayloads``, a ``password`` without ``username``, a
        ``sessionExpiry`` or ``cleanStart=false`` without ``clientId``, or a
        ``receiveMaximum`` (or ``maxRecordsPerTrigger``) that would stall the stream
        without ``walLocation``.
    MissingExtraError
        When paho-mqtt is not installed.

    Examples
    --------
    >>> mqtt_publisher({"host": "127.0.0.1", "topic": "sensors/#", "clientId": "q1"})
    MqttPublisher('127.0.0.1:1883', 'sensors/#', qos=1, client_id='q1')
    >>> mqtt_publisher({"host": "127.0.0.1", "topic": "a/#/b"})
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option topic='a/#/b' is not \
accepted: a topic filter such as sensors/+/temperature or sensors/# (topic filter 'a/#/b': \
'#' must be the whole last level (as in 'a/#'))
    """
    lower = {str(k).lower(): str(v) for k, v in options.items()}
    specs = OPTION_SPECS
    given_host = specs.given(lower, "host")
    host = (given_host or "").strip()
    if not host:
        raise OptionError("host", given_host, f"{_HOST}; it is required")
    topic = _topic(specs.given(lower, "topic"))
    port = specs.read(lower, "port")
    qos = specs.read(lower, "qos")
    client_id = specs.given(lower, "clientId") or ""
    clean_start = read_bool(OPTION_SPECS, lower, "cleanStart")
    if clean_start is False and not client_id:
        raise OptionError("cleanStart", specs.given(lower, "cleanStart"),
                          "true, or set clientId: a session can only be resumed by its "
                          "client id")
    session_expiry = specs.read(lower, "sessionExpiry")
    if session_expiry and not client_id:
        # The broker would keep (and queue for) a session nobody can ever resume.
        raise OptionError("sessionExpiry", specs.given(lower, "sessionExpiry"),
                          "0, or set clientId: a session can only be resumed by its client "
                          "id, and without one the broker would keep it for nothing")
    shard = getattr(options, "shard", None)
    protocol = specs.read(lower, "protocol")
    if protocol == "3.1.1":
        _check_311(lower, qos, session_expiry, shard)
    if shard is None and specs.given(lower, "shareGroup") is not None:
        logging.getLogger("pyspark_reactive.source").warning(
            "reactive source: the mqtt option shareGroup has no effect without the source's "
            "option shards (it names the shared subscription the shards read)")
    if shard is not None:
        topic, client_id = _shard_subscription(lower, topic, client_id, clean_start, shard)
        clean_start = False
        if session_expiry is None and protocol == "5":
            session_expiry = DEFAULT_SHARD_SESSION_EXPIRY_S
    username, password = specs.given(lower, "username"), specs.given(lower, "password")
    password_file = specs.given(lower, "passwordFile")
    if password_file is not None:
        if password is not None:
            raise OptionError("passwordFile", password_file,
                              "either password or passwordFile, not both (password is given "
                              "too)")
        if username is None:
            raise OptionError("passwordFile", password_file, f"{_PASSWORD}: MQTT sends no "
                                                             "password without a user name")
        password = read_option_file("passwordFile", password_file, "the password",
                                    _PASSWORD_FILE_BYTES).rstrip("\r\n")
    if password is not None and username is None:
        raise OptionError("password", "(hidden)", f"{_PASSWORD}: MQTT sends no password "
                                                  "without a user name")
    given_maximum = specs.read(lower, "receiveMaximum")
    receive_maximum = given_maximum or DEFAULT_RECEIVE_MAXIMUM
    # The source's own option (it checks it too): the broker's window must fit two batches.
    per_trigger = SOURCE_OPTION_SPECS.read(lower, "maxRecordsPerTrigger")
    if protocol == "5":
        _check_window(lower, qos, given_maximum, receive_maximum, per_trigger)
    keepalive = specs.read(lower, "keepalive")
    connect_timeout = specs.read(lower, "connectTimeoutMs")
    max_messages = specs.read(lower, "maxMessages")
    max_message_bytes = specs.read(lower, "maxMessageBytes")
    max_buffered_bytes = specs.read(lower, "maxBufferedBytes")
    format = specs.read(lower, "format")
    bad_payloads = specs.read(lower, "badPayloads")
    if bad_payloads == "skip" and format != "json":
        raise OptionError("badPayloads", specs.given(lower, "badPayloads"),
                          "fail, or skip only with format=json (format=message takes every "
                          "payload as it is)")
    identity_column = _identity_column(lower, format, options, shard)
    decode = (functools.partial(_parse_json, columns=json_columns(options),
                                hint="" if bad_payloads == "skip" else _FAIL_HINT)
              if format == "json" else _columns)
    # skip: the source leaves out every element that cannot become a row (see _Skipping).
    kind = _Skipping if bad_payloads == "skip" else _Publisher
    publisher = kind(
        host, topic, port=port, qos=qos, client_id=client_id,
        clean_start=clean_start, session_expiry=session_expiry,
        username=username, password=password, tls=read_tls(OPTION_SPECS, lower),
        receive_maximum=receive_maximum,
        # Beyond the source's demand (maxRecordsPerTrigger), hold at most one batch more;
        # a shard's task requests its share at once and leaves once it has it, so what it
        # read beyond that would be read again by the next task: hold little.
        max_buffered=min(receive_maximum, per_trigger if shard is None else SHARD_READ_AHEAD),
        max_message_bytes=max_message_bytes, max_buffered_bytes=max_buffered_bytes,
        keepalive=keepalive, connect_timeout=connect_timeout / 1000,
        max_messages=max_messages, acknowledge="on_durable", decode=decode,
        # A shard's task acknowledges before its cancel, then waits for the close: no
        # message waits for a later on_durable (what it did not keep comes again).
        **({"linger": 0.0} if shard is not None else {}), protocol=protocol)
    publisher.identity_column = identity_column
    return publisher


def _check_311(options: Mapping[str, str], qos: int, session_expiry: int | None,
               shard: Any) -> None:
    """What ``protocol=3.1.1`` cannot do, refused naming the option."""
    given = OPTION_SPECS.given
    if given(options, "receiveMaximum") is not None:
        raise OptionError("receiveMaximum", given(options, "receiveMaximum"),
                          "no value with protocol=3.1.1: MQTT 3.1.1 has no Receive Maximum "
                          "(the broker's own window of unacknowledged messages applies)")
    if session_expiry is not None:
        raise OptionError("sessionExpiry", given(options, "sessionExpiry"),
                          "no value with protocol=3.1.1: MQTT 3.1.1 has no session expiry "
                          "(the broker keeps a session by its own settings)")
    if shard is not None:
        raise OptionError("protocol", "3.1.1", "5 with shards: the shards read an MQTT 5 "
                          "shared subscription, which MQTT 3.1.1 does not have")
    if qos == 1 and SOURCE_OPTION_SPECS.given(options, "walLocation") is None:
        raise OptionError("protocol", "3.1.1",
                          "5, or 3.1.1 with walLocation (or qos=0): MQTT 3.1.1 has no "
                          "Receive Maximum, so the broker's own window of unacknowledged "
                          "messages applies (RabbitMQ's mqtt.prefetch is 10), and without a "
                          "log messages are acknowledged only once Spark commits their "
                          "batch: the stream would stall at that window")


def _identity_column(options: Mapping[str, str], format: str, factory_options: Any,
                     shard: Any) -> str | None:
    """The option ``identityColumn``, checked: a column of the schema, with format=json."""
    column = OPTION_SPECS.given(options, "identityColumn")
    if column is None:
        return None
    if format != "json":
        raise OptionError("identityColumn", column, "a column of the schema, with "
                          "format=json only (format=message has no message identity)")
    columns = json_columns(factory_options)
    if columns is not None and column not in columns:
        raise OptionError("identityColumn", column,
                          f"a column of the schema: one of {', '.join(sorted(columns))}")
    if shard is None and SOURCE_OPTION_SPECS.given(options, "walLocation") is None:
        logging.getLogger("pyspark_reactive.source").warning(
            "reactive source: the mqtt option identityColumn has no effect without "
            "walLocation or the source's option shards (only a log remembers identities)")
    return column


def _shard_subscription(options: Mapping[str, str], topic: str, client_id: str,
                        clean_start: bool | None, shard: Any) -> tuple[str, str]:
    """The shared subscription and the client id of ``shard`` (option ``shards``)."""
    if not client_id:
        raise OptionError("clientId", None, "a client id, with shards: shard i reads with "
                          "the client id <clientId>-<i> and a persistent session, which "
                          "keeps what one task did not acknowledge for the next")
    if clean_start:
        raise OptionError("cleanStart", OPTION_SPECS.given(options, "cleanStart"),
                          "false with shards: a shard's session must outlive its task")
    group = OPTION_SPECS.given(options, "shareGroup") or client_id
    if not group or any(c in group for c in "/+#"):
        raise OptionError("shareGroup", group, "a share name without /, + or #")
    if not topic.startswith("$share/"):
        topic = f"$share/{group}/{topic}"
    return topic, f"{client_id}-{shard.index}"


def _check_window(options: Mapping[str, str], qos: int, given: int | None,
                  receive_maximum: int, per_trigger: int) -> None:
    """Without a log, QoS 1 messages are acknowledged only once Spark commits their batch,
    which it does when it plans the next: the broker's window must hold the batch Spark
    works on and a whole next one (with only one, each next batch would be whatever one
    message fits in beside it)."""
    if (SOURCE_OPTION_SPECS.given(options, "walLocation") is not None or qos == 0
            or receive_maximum > 2 * per_trigger):
        return
    why = ("without a log, messages are acknowledged only once Spark commits their batch, "
           "which it does when it plans the next")
    if given is not None and 2 * per_trigger < 65535:
        raise OptionError("receiveMaximum", given,
                          f"more than 2 x maxRecordsPerTrigger ({2 * per_trigger}) without "
                          f"walLocation ({why}); set walLocation, raise receiveMaximum or "
                          f"lower maxRecordsPerTrigger")
    default = "" if given else ", the default"
    given_per_trigger = SOURCE_OPTION_SPECS.given(options, "maxRecordsPerTrigger")
    raise OptionError("maxRecordsPerTrigger",
                      per_trigger if given_per_trigger is None else given_per_trigger,
                      f"at most {(receive_maximum - 1) // 2} without walLocation: "
                      f"receiveMaximum ({receive_maximum}{default}; at most 65535) must "
                      f"exceed 2 x maxRecordsPerTrigger ({why}); set walLocation or lower "
                      f"maxRecordsPerTrigger")


mqtt_publisher = sharded(mqtt_publisher)
default_schema = json_needs_schema(OPTION_SPECS, MESSAGE_SCHEMA, "each payload", "messages")

mqtt_publisher.default_schema = default_schema  # type: ignore[attr-defined]
mqtt_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


def _columns(message: MqttMessage) -> dict[str, Any]:
    return {"topic": message.topic, "payload": message.payload, "qos": message.qos,
            "retain": message.retain,
            "timestamp": datetime.datetime.fromtimestamp(message.timestamp,
                                                         datetime.timezone.utc)}


class _Publisher(MqttPublisher[Any]):
    """The built-in's publisher: with ``identityColumn``, each message's identity is that
    column's value, which a shard's log remembers to drop redeliveries
    (:mod:`~pyspark_reactive.source.durability`)."""

    identity_column: str | None = None

    def identity(self, element: Any) -> str | None:
        column = self.identity_column
        if column is None or not isinstance(element, dict):
            return None
        value = element.get(column)
        return None if value is None else str(value)


class _Skipping(_Publisher):
    """The publisher of ``badPayloads=skip``: it asks the reactive source to leave out,
    count and acknowledge every element that cannot become a row (``Undecodable`` ones,
    and values that do not fit the schema) instead of failing the query."""

    skip_unfit_elements = True


_FAIL_HINT = ("; the message stays unacknowledged in the broker's session, so a restart "
              "fails on it again (badPayloads=skip leaves such messages out)")


def _parse_json(message: MqttMessage, columns: frozenset[str] | None = None,
                hint: str = "") -> Any:
    # Never raises: a payload that is no row becomes an Undecodable element, which keeps
    # its place in the stream (and so is acknowledged in its turn with badPayloads=skip)
    # and fails the query at its offset otherwise.
    try:
        value = json.loads(message.payload)
    except RecursionError:
        problem = "is JSON nested too deeply to parse"
    except ValueError as error:  # UnicodeDecodeError and too many digits among them
        problem = f"is not JSON ({error})"
    else:
        if value is not None:
            # Fields the rows have no column for are left out, as from_json does.
            return keep_columns(value, columns)
        problem = "is JSON null, not a row"
    shown = message.payload[:80]
    return Undecodable(
        f"format=json: the payload {shown!r}{'...' if len(message.payload) > 80 else ''} "
        f"of a message of topic {message.topic!r} {problem}{hint}")


def _topic(text: str | None) -> str:
    if text is None or not text.strip():
        raise OptionError("topic", text, f"{_TOPIC}; it is required")
    try:
        return check_topic_filter(text)
    except ValueError as error:
        raise OptionError("topic", text, f"{_TOPIC} ({error})") from None
