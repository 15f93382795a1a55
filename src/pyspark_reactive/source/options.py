"""The options of ``spark.readStream.format("reactive")``, validated once, in one place.

Every error names the option, the value given and what is accepted. Options arrive as
strings under case-insensitive names; :func:`parse_source_options` turns them into a
:class:`SourceOptions` that the data source, the runner and the tasks share.

Options are trusted input: ``publisher`` names code that is imported and called with the
options, as the user who runs Spark's driver. Whoever supplies the options supplies code;
:data:`PUBLISHER_MODULES_ENV` lets the environment allow only some modules.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reactive_streams.adapters.urls import redact_url, redact_url_in

from ..errors import PySparkReactiveError

__all__ = [
    "AVAILABLE_NOW_DEFAULT_BATCHES",
    "DEFAULT_FILL_TIMEOUT_MS",
    "DEFAULT_FILL_WAIT_MS",
    "DEFAULT_MAX_RECORDS_PER_TRIGGER",
    "DEFAULT_SUBSCRIBE_TIMEOUT_MS",
    "DEFAULT_WAL_SYNC_MS",
    "DEFAULT_WAL_SYNC_ROWS",
    "PUBLISHER_MODULES_ENV",
    "SOURCE_OPTIONS",
    "SOURCE_OPTION_SPECS",
    "CaseInsensitiveOptions",
    "OptionError",
    "OptionSpec",
    "OptionSpecs",
    "SourceOptions",
    "allowed_publisher_modules",
    "choice_option",
    "optional_int_option",
    "parse_source_options",
    "read_option_file",
    "resolve_factory",
    "warn_unknown_options",
]

DEFAULT_MAX_RECORDS_PER_TRIGGER = 10_000
DEFAULT_FILL_WAIT_MS = 100
DEFAULT_WAL_SYNC_MS = 50
DEFAULT_WAL_SYNC_ROWS = 100_000
DEFAULT_SUBSCRIBE_TIMEOUT_MS = 30_000
DEFAULT_FILL_TIMEOUT_MS = 30_000
# availableNowMaxRecords defaults to this many full micro-batches, so a scheduled
# availableNow run over an endless publisher lasts about as many batches whatever their size.
AVAILABLE_NOW_DEFAULT_BATCHES = 100

# Name -> "module:attribute" of the built-in publishers (the package pyspark_reactive.
# publishers; docs/reference/publishers/ describes them). A factory may
# carry an attribute default_schema(options) -> DDL string: the schema when none is given.
BUILTIN_PUBLISHERS = {
    "range": "pyspark_reactive.publishers.range:range_publisher",
    "rsocket": "pyspark_reactive.publishers.rsocket:rsocket_publisher",
    "mqtt": "pyspark_reactive.publishers.mqtt:mqtt_publisher",
    "rabbitmq": "pyspark_reactive.publishers.rabbitmq:rabbitmq_publisher",
    "nats": "pyspark_reactive.publishers.nats:nats_publisher",
    "websocket": "pyspark_reactive.publishers.websocket:websocket_publisher",
    "sse": "pyspark_reactive.publishers.sse:sse_publisher",
    "redis": "pyspark_reactive.publishers.redis:redis_publisher",
}

#: Environment variable that, when set, allows ``publisher`` import paths only from these
#: modules: a comma-separated list of module names, each allowing itself and its
#: submodules (``mycompany.feeds`` allows ``mycompany.feeds.ticks:factory``). Built-in
#: names are always allowed. Read where the factory is looked up (Spark's Python processes
#: on the driver, which inherit the environment of the process that started Spark).
PUBLISHER_MODULES_ENV = "PYSPARK_REACTIVE_PUBLISHER_MODULES"

# Set by read_stream() on the data source class it registers; never a user option.
SHIPPED_FACTORY = "<factory shipped with the data source>"

# Counts are longs on the JVM side (ReadMaxRows, offsets); durations in milliseconds are
# capped as Java ints are (about 24.8 days), well inside what Python's waits accept.
MAX_COUNT = 2**63 - 1
MAX_MILLISECONDS = 2**31 - 1
# How close (difflib's ratio of the lower-cased names) an unknown option must be to one
# of SOURCE_OPTIONS to be taken for a typo of it: maxRecordPerTrigger is (0.97),
# Kafka's maxOffsetsPerTrigger is (0.85); options of test and built-in publishers such as
# count, start, rowsPerSecond or recordTo are far from every one (0.5 or less).
CLOSE_TO_KNOWN = 0.75
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHOWN = 80

log = logging.getLogger("pyspark_reactive.source")


class OptionError(PySparkReactiveError, ValueError):
    """A source option with a value that is not accepted.

    The message names the option, the value and what is accepted. A value that is a URL
    (or a URI, such as ``walLocation``'s) is shown without its userinfo, query string and
    fragment, which may carry credentials (:func:`~reactive_streams.adapters.urls.
    redact_url`); ``value`` keeps what was given.
    """

    def __init__(self, option: str, value: object, accepted: str) -> None:
        self.option = option
        self.value = value
        shown = repr(redact_url(value) if isinstance(value, str) else value)
        if len(shown) > _SHOWN:
            shown = f"{shown[:_SHOWN - 3]}... ({len(str(value))} characters)"
        super().__init__(f"reactive source: option {option}={shown} is not accepted: "
                         f"{accepted}")


class CaseInsensitiveOptions(Mapping[str, str]):
    """The options as given to a publisher factory: names compare case-insensitively,
    as Spark's own options do (``options["recordTo"]`` and ``options["recordto"]`` agree).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = {str(k).lower(): str(v) for k, v in options.items()}

    def __getitem__(self, name: str) -> str:
        return self._options[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __repr__(self) -> str:
        return f"CaseInsensitiveOptions({self._options!r})"


@dataclass(frozen=True)
class OptionSpec:
    """One option of the source or of a built-in publisher, declared once.

    The same definition validates the option (:meth:`read`) and fills the documentation's
    option tables (``{reactive-options}`` in ``docs/``), so a default or an accepted range
    cannot differ between the code and the docs.

    Attributes
    ----------
    name : str
        The option's name as documented (names compare case-insensitively).
    meaning : str
        What it does, in one or two sentences of Markdown (the tables' last column).
    kind : {"int", "choice", "text"}
        ``int``: a whole number from ``minimum`` to ``maximum``; ``choice``: one of
        ``choices`` (case-insensitive); ``text``: checked by the code that reads it, which
        says what it accepts in ``accepted``.
    default : int, str or None
        The value when the option is not given; ``None`` for none.
    shown_default : str
        How the tables show the default, where ``default`` alone does not say it (a
        computed default, "none", "automatic"); empty to show ``default``.
    required : bool
        Whether the option must be given.
    queries : str
        The queries it applies to, as Spark's Kafka guide says it ("streaming",
        "streaming, availableNow trigger", ...).
    """

    name: str
    meaning: str
    kind: str = "text"
    default: int | str | None = None
    shown_default: str = ""
    minimum: int = 0
    maximum: int = MAX_COUNT
    choices: tuple[str, ...] = ()
    accepted: str = ""
    required: bool = False
    queries: str = "streaming"

    def __post_init__(self) -> None:
        if self.kind not in ("int", "choice", "text"):
            raise ValueError(f"OptionSpec {self.name}: kind {self.kind!r} is not int, "
                             "choice or text")
        if self.kind == "choice" and self.default not in self.choices:
            raise ValueError(f"OptionSpec {self.name}: the default {self.default!r} is not "
                             f"one of {self.choices}")
        if self.kind == "text" and not self.accepted:
            raise ValueError(f"OptionSpec {self.name}: a text option says what it accepts")

    @property
    def accepted_text(self) -> str:
        """What the option accepts, in the words its errors use."""
        if self.kind == "int":
            if self.maximum == MAX_COUNT:  # a long's bound: no news to a reader
                return "a positive integer" if self.minimum == 1 else \
                    f"an integer >= {self.minimum}"
            return _accepted(self.minimum, self.maximum)
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        return self.accepted

    @property
    def default_text(self) -> str:
        """The default as the tables show it."""
        if self.shown_default:
            return self.shown_default
        if self.required or self.default is None:
            return "none"
        return str(self.default)

    def read(self, options: Mapping[str, str]) -> Any:
        """The option's value from ``options`` (keyed by lower-cased names, or
        case-insensitive), checked; ``default`` when it is not given.

        Raises
        ------
        OptionError
            For an ``int`` or ``choice`` value that is not accepted, or a required option
            that is not given.
        """
        value: int | str | None
        if self.kind == "int":
            value = optional_int_option(options, self.name, self.minimum, self.maximum)
        elif self.kind == "choice":
            return choice_option(options, self.name, self.choices, str(self.default))
        else:
            value = options.get(self.name.lower())
        if value is None and self.required:
            raise OptionError(self.name, None, f"{self.accepted_text}; it is required")
        return self.default if value is None else value


class OptionSpecs(tuple[OptionSpec, ...]):
    """The options of the source or of a built-in publisher, in the order they are shown.

    Indexing by name (case-insensitive) gives an option's :class:`OptionSpec`; reading an
    option that is not declared is a ``KeyError``, so the code cannot read an option the
    documentation does not list.

    Examples
    --------
    >>> specs = OptionSpecs([OptionSpec("port", "The port.", "int", 1883, minimum=1,
    ...                                 maximum=65535)])
    >>> specs.read({"port": "8883"}, "Port"), specs.read({}, "port")
    (8883, 1883)
    >>> specs.read({}, "host")
    Traceback (most recent call last):
    ...
    KeyError: "option 'host' is not declared (declared: port)"
    """

    def __new__(cls, specs: Iterable[OptionSpec]) -> OptionSpecs:
        made = super().__new__(cls, tuple(specs))
        names = [spec.name.lower() for spec in made]
        if len(set(names)) != len(names):
            raise ValueError(f"options declared twice: {sorted(names)}")
        return made

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self)

    def spec(self, name: str) -> OptionSpec:
        for spec in self:
            if spec.name.lower() == name.lower():
                return spec
        raise KeyError(f"option {name!r} is not declared (declared: "
                       f"{', '.join(self.names)})")

    def read(self, options: Mapping[str, str], name: str) -> Any:
        """:meth:`OptionSpec.read` of the option named ``name``."""
        return self.spec(name).read(options)

    def given(self, options: Mapping[str, str], name: str) -> str | None:
        """The option's text as given, or ``None``: for checks of its own."""
        return options.get(self.spec(name).name.lower())


#: Every option the source itself reads, in the order the reference shows them. Any other
#: option is passed on to the publisher's factory, so it is not an error; one whose name is
#: close to these is warned about.
SOURCE_OPTION_SPECS = OptionSpecs([
    OptionSpec(
        "publisher", "The publisher to read: a built-in name (`range`, `mqtt`, `websocket`, "
        "`rsocket`) or the import path of a factory that takes the options and returns a "
        "`Publisher`. This is code the source imports and calls, so options are trusted "
        "input; `PYSPARK_REACTIVE_PUBLISHER_MODULES` limits the modules it may name. Not "
        "with `read_stream()`, which ships its factory with the data source.",
        accepted="a built-in name, or 'package.module:factory'", required=True,
        queries="streaming"),
    OptionSpec(
        "maxRecordsPerTrigger", "The demand per micro-batch, and the most rows in one: each "
        "batch requests this many elements from the publisher, and the rows held plus the "
        "demand outstanding never exceed it.", "int", DEFAULT_MAX_RECORDS_PER_TRIGGER,
        minimum=1),
    OptionSpec(
        "fillWaitMs", "How long a micro-batch waits for the publisher to fill it before "
        "taking what has arrived, and only while the publisher's recent rate could fill it "
        "in that time; with nothing at all there is no batch.", "int", DEFAULT_FILL_WAIT_MS,
        minimum=0, maximum=MAX_MILLISECONDS),
    OptionSpec(
        "availableNowMaxRecords", "The most rows a `trigger(availableNow=True)` run takes "
        "from the publisher beyond those the source holds when it starts; then the query "
        "ends (Spark 4.2+). On Spark 4.0/4.1, given explicitly, it sizes the first "
        "micro-batch of every run (under `availableNow`, the run's only batch), which "
        "without `walLocation` takes every row it requested (`fillTimeoutMs`).", "int",
        minimum=0, shown_default=f"{AVAILABLE_NOW_DEFAULT_BATCHES} × maxRecordsPerTrigger",
        queries="streaming, availableNow trigger"),
    OptionSpec(
        "walLocation", "Where the write-ahead log lives, one per query: every element the "
        "publisher signalled is kept there until Spark commits it, so a restart with the "
        "same checkpoint loses and repeats nothing. Without it, rows not yet processed when "
        "the query stops are lost. On the local disk only you (and root) may be able to "
        "change it: give a path that does not exist yet in a folder of yours (one from "
        "`tempfile.mkdtemp()`, or under your home directory); the log makes its folder "
        "there, 0700.",
        accepted="a local path, a file: URI (file:/home/me/wal, file:///home/me/wal) or any "
        "filesystem URI pyarrow understands (hdfs://, s3://, ...)"),
    OptionSpec(
        "walOwnerCheck", "With a local `walLocation`: whether the log's folder must be one "
        "only you (and root) can change, by its owners and modes. `false` only for a "
        "filesystem whose owners and modes do not say who can write, such as a Databricks "
        "volume or another FUSE mount with access control of its own: that control alone "
        "then keeps the log's rows to you.", "choice", "true", choices=("true", "false"),
        queries="streaming, with walLocation"),
    OptionSpec(
        "walSyncMs", "With `walLocation`: rows that arrived are synced to the log at least "
        "this often (a group commit), so a hard kill loses at most what arrived in the last "
        "interval.", "int", DEFAULT_WAL_SYNC_MS, minimum=1, maximum=MAX_MILLISECONDS,
        queries="streaming, with walLocation"),
    OptionSpec(
        "walSyncRows", "With `walLocation`: a group commit starts at once when this many "
        "rows wait, whatever `walSyncMs` says (the source never holds more than "
        "`maxRecordsPerTrigger`, so only a smaller value matters).", "int",
        DEFAULT_WAL_SYNC_ROWS, minimum=1, queries="streaming, with walLocation"),
    OptionSpec(
        "subscribeTimeoutMs", "How long the source waits for the publisher's `on_subscribe` "
        "before it fails the query; under `availableNow`, also how long a run waits for its "
        "first element.", "int", DEFAULT_SUBSCRIBE_TIMEOUT_MS, minimum=1,
        maximum=MAX_MILLISECONDS),
    OptionSpec(
        "fillTimeoutMs", "Spark 4.0/4.1 without `walLocation`: a run's one micro-batch, "
        "sized by an explicit `availableNowMaxRecords`, takes every row it requested; once "
        "the publisher has signalled a first one, the run fails if it then signals none "
        "for this long while rows are still requested (rows signalled after the run ended "
        "would be lost).", "int", DEFAULT_FILL_TIMEOUT_MS, minimum=1,
        maximum=MAX_MILLISECONDS, queries="streaming, availableNow trigger"),
    OptionSpec(
        "schema", "The rows' schema, as with `.schema(...)` (which takes precedence), but "
        "checked with every other option when the DataFrame is made. Without either: "
        "`value BIGINT` for `range`, the built-ins' own schemas, else `value STRING`.",
        accepted="a DDL string such as 'id BIGINT, name STRING'",
        shown_default="the publisher's"),
    OptionSpec(
        "numPartitions", "Partitions per micro-batch; automatic keeps each at about 1 MiB "
        "of Arrow.", "int", minimum=1, shown_default="automatic"),
    OptionSpec(
        "shards", "Read the feed as this many shards, each by a Spark task of its own on the "
        "executors: each micro-batch takes up to `maxRecordsPerTrigger` / `shards` rows "
        "(rounded up) from every shard, and rows never pass through the driver. Only for a "
        "publisher whose factory is declared `@sharded` (the built-ins `range` and `mqtt`, "
        "or yours); "
        "needs `walLocation`, where each shard's rows are kept per batch before they are "
        "acknowledged. Not given: one subscription, in the source runner on the driver.",
        "int", minimum=1, maximum=1024, shown_default="none (read on the driver)"),
])
SOURCE_OPTIONS = SOURCE_OPTION_SPECS.names


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one reactive source.

    Attributes
    ----------
    publisher : str
        A built-in name (``range``) or ``"package.module:factory"``: code that the source
        imports and calls with the options, so options are trusted input (see
        :func:`resolve_factory`).
    max_records_per_trigger : int
        Demand per micro-batch: the most rows in one batch.
    fill_wait_ms : int
        How long a micro-batch waits for the publisher to fill it before taking what
        has arrived; it waits only while the publisher's recent rate could fill it in
        that time (a slow stream's rows go at once).
    wal_location : str or None
        Where the write-ahead log lives; ``None`` for no log.
    wal_owner_check : bool
        Whether a local write-ahead log's folder must be one its user alone can change
        (``walOwnerCheck``; see :class:`~pyspark_reactive.source.wal.WriteAheadLog`).
    num_partitions : int or None
        Partitions per micro-batch; ``None`` to size them automatically.
    available_now_max_records : int
        The most elements an ``availableNow`` trigger takes from the publisher beyond
        those the source holds when the trigger starts; then the query ends. Default
        100 times ``maxRecordsPerTrigger``. Where Spark has no admission control for
        Python sources (``pyspark.sql.streaming.datasource`` missing: Spark 4.0/4.1,
        :data:`~pyspark_reactive.source.admission.ADMISSION_CONTROL`), Spark runs
        ``availableNow`` as a single micro-batch and the source cannot see the trigger:
        there, given explicitly, it sizes the first micro-batch of every query run,
        whatever the trigger (rows a stopped run left in the write-ahead log come first; that
        batch waits up to ``subscribeTimeoutMs`` for a first element; without a write-ahead
        log it then takes every row it requested, see ``fill_timeout_ms``; nothing more is
        requested from the publisher until Spark asks for a second batch, whose window is
        ``maxRecordsPerTrigger`` again). Not given, that run's one batch holds at most
        ``maxRecordsPerTrigger`` rows.
    available_now_explicit : bool
        Whether ``availableNowMaxRecords`` was given (rather than defaulted).
    wal_sync_ms : int
        With a write-ahead log, at most this many milliseconds pass between syncs of the
        elements that arrived (a group commit).
    wal_sync_rows : int
        With a write-ahead log, a sync starts as soon as this many elements wait.
    subscribe_timeout_ms : int
        How long the source waits for the publisher's ``on_subscribe`` before failing.
    fill_timeout_ms : int
        Where Spark has no admission control for Python sources and there is no
        write-ahead log: how long the first micro-batch of a query run sized by an explicit
        ``availableNowMaxRecords`` (under ``availableNow``, the whole run) waits for the
        publisher to signal more of the rows it requested, once it signalled a first one,
        before the run fails.
    schema : str or None
        The rows' schema as a DDL string (``"id BIGINT, name STRING"``), given as an
        option rather than with ``.schema(...)``: Spark then creates the source when the
        DataFrame is made, so every option is checked by ``load()``. ``None`` when not
        given. Spark parses it, and ``.schema(...)`` takes precedence.
    raw : dict of str to str
        Every option as given (with its original name), passed to the factory.
    shards : int or None
        How many shards the feed is read as, each by a task on the executors
        (:mod:`~pyspark_reactive.source.sharded`); ``None`` to read it on the driver.
    """

    publisher: str
    max_records_per_trigger: int
    fill_wait_ms: int
    wal_location: str | None
    num_partitions: int | None
    available_now_max_records: int
    raw: dict[str, str]
    wal_sync_ms: int = DEFAULT_WAL_SYNC_MS
    wal_sync_rows: int = DEFAULT_WAL_SYNC_ROWS
    subscribe_timeout_ms: int = DEFAULT_SUBSCRIBE_TIMEOUT_MS
    fill_timeout_ms: int = DEFAULT_FILL_TIMEOUT_MS
    schema: str | None = None
    available_now_explicit: bool = False
    wal_owner_check: bool = True
    shards: int | None = None


def parse_source_options(options: Mapping[str, str], *,
                         shipped_factory: bool = False) -> SourceOptions:
    """Validate the reader's options.

    Every option is checked, whatever the trigger or the publisher: a value that could
    only fail later (in the source runner, once the query runs) fails here. An option the
    source does not read is passed on to the publisher's factory; one whose name is close
    to an option of the source (``maxRecordPerTrigger``) is logged as a warning on the
    ``pyspark_reactive.source`` logger, naming the options the source knows.

    Parameters
    ----------
    options : mapping of str to str
        The options given to ``readStream`` (names are case-insensitive).
    shipped_factory : bool
        Whether a factory travels with the data source (``read_stream``), in which case
        ``publisher`` must not be given.

    Returns
    -------
    SourceOptions

    Raises
    ------
    OptionError
        Naming the first option whose value is not accepted, the value, and what is
        accepted.

    Examples
    --------
    >>> parse_source_options({"publisher": "range", "MAXRECORDSPERTRIGGER": " 500 "}
    ...                      ).max_records_per_trigger
    500
    >>> parse_source_options({"publisher": "range", "fillWaitMs": "2.5"})
    Traceback (most recent call last):
        ...
    pyspark_reactive.source.options.OptionError: reactive source: option fillWaitMs='2.5' is not \
accepted: an integer >= 0, at most 2147483647 (milliseconds); '2.5' is not a whole number
    """
    raw = {str(k): str(v) for k, v in options.items()}
    lower: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, value in raw.items():
        key = name.lower()
        if key in lower and key in _KNOWN_LOWER:
            # Spark keeps one of them (its options are case-insensitive); read_stream()
            # passes both: refuse rather than pick one silently.
            raise OptionError(_KNOWN_LOWER[key], value,
                              f"one value; it is also given as "
                              f"{names[key]}={redact_url(lower[key])!r} "
                              "(option names are case-insensitive)")
        lower[key] = value
        names[key] = name
    warn_unknown_options(raw)

    publisher = SOURCE_OPTION_SPECS.given(lower, "publisher")
    if shipped_factory:
        if publisher is not None:
            raise OptionError("publisher", publisher,
                              "not with read_stream(), which already names a factory")
        publisher = SHIPPED_FACTORY
    elif publisher is None or not publisher.strip():
        raise OptionError("publisher", publisher,
                          f"a built-in name ({', '.join(sorted(BUILTIN_PUBLISHERS))}) or an "
                          "import path 'package.module:factory'; it is required")
    else:
        publisher = publisher.strip()

    specs = SOURCE_OPTION_SPECS
    max_records = specs.read(lower, "maxRecordsPerTrigger")
    fill_wait = specs.read(lower, "fillWaitMs")
    partitions = specs.read(lower, "numPartitions")
    available_now = specs.read(lower, "availableNowMaxRecords")
    if available_now is None:
        available_now = min(MAX_COUNT, AVAILABLE_NOW_DEFAULT_BATCHES * max_records)
    wal_sync_ms = specs.read(lower, "walSyncMs")
    wal_sync_rows = specs.read(lower, "walSyncRows")
    wal_owner_check = specs.read(lower, "walOwnerCheck") == "true"
    subscribe_timeout = specs.read(lower, "subscribeTimeoutMs")
    fill_timeout = specs.read(lower, "fillTimeoutMs")
    schema = specs.given(lower, "schema")
    if schema is not None and not schema.strip():
        raise OptionError("schema", schema, "a DDL string such as 'id BIGINT, name STRING' "
                          f"(or no schema option); it is {'empty' if not schema else 'blank'}")
    wal = specs.given(lower, "walLocation")
    if wal is not None and not wal.strip():
        raise OptionError("walLocation", wal, "a local path or a filesystem URI pyarrow "
                          "understands (file:/path, hdfs://, s3://, ...); it is "
                          f"{'empty' if not wal else 'blank'}")
    shards = specs.read(lower, "shards")
    if shards is not None:
        from .wal import local_path

        if wal is None or local_path(wal.strip()) is None:
            raise OptionError(
                "walLocation", wal, f"a local path or file: URI (on a cluster, a folder every "
                f"executor and the driver mount at the same path); it is required with "
                f"shards={shards}: each shard's rows are kept there per micro-batch before "
                "they are acknowledged, each micro-batch's published by a hard link")
    if wal is None and ("walsyncms" in lower or "walsyncrows" in lower):
        log.warning("reactive source: walSyncMs and walSyncRows have no effect without "
                    "walLocation (there is no log to sync)")
    return SourceOptions(publisher=publisher, max_records_per_trigger=max_records,
                         fill_wait_ms=fill_wait, wal_location=wal.strip() if wal else None,
                         num_partitions=partitions, available_now_max_records=available_now,
                         raw=raw, wal_sync_ms=wal_sync_ms, wal_sync_rows=wal_sync_rows,
                         subscribe_timeout_ms=subscribe_timeout,
                         fill_timeout_ms=fill_timeout,
                         schema=schema.strip() if schema else None,
                         available_now_explicit="availablenowmaxrecords" in lower,
                         wal_owner_check=wal_owner_check, shards=shards)


_KNOWN_LOWER = {name.lower(): name for name in SOURCE_OPTIONS}


def warn_unknown_options(options: Mapping[str, str]) -> list[str]:
    """Warn about options whose names look like a misspelt option of the source.

    The source passes every option to the publisher's factory, which may read options
    of its own (``count``, ``recordTo``, ...), so an option the source does not read is
    not an error. One whose lower-cased name is close to a source option's (difflib's
    ratio of at least 0.75, such as ``maxRecordPerTrigger`` or Kafka's
    ``maxOffsetsPerTrigger``) is most likely a typo that would otherwise pass unseen:
    it is logged as a warning on the ``pyspark_reactive.source`` logger, naming the
    closest option and all of them.

    Parameters
    ----------
    options : mapping of str to str
        The options as given.

    Returns
    -------
    list of str
        The names warned about.

    Examples
    --------
    >>> warn_unknown_options({"publisher": "range", "maxRecordPerTrigger": "5", "count": "9"})
    ['maxRecordPerTrigger']
    """
    warned = []
    for name in options:
        key = str(name).lower()
        if key in _KNOWN_LOWER:
            continue
        close = difflib.get_close_matches(key, _KNOWN_LOWER, n=1, cutoff=CLOSE_TO_KNOWN)
        if not close:
            continue
        warned.append(str(name))
        log.warning(
            "reactive source: option %r is not an option of the source; did you mean %r? "
            "The source's options are %s (names are case-insensitive). Options the source "
            "does not know are passed to the publisher's factory: if yours reads %r, "
            "ignore this warning.", name, _KNOWN_LOWER[close[0]], ", ".join(SOURCE_OPTIONS),
            name)
    return warned


def _accepted(minimum: int, maximum: int) -> str:
    first = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    unit = " (milliseconds)" if maximum == MAX_MILLISECONDS else ""
    return f"{first}, at most {maximum}{unit}"


def optional_int_option(options: Mapping[str, str], name: str, minimum: int,
                        maximum: int = MAX_COUNT) -> int | None:
    """The option as an int, or ``None`` when it is not given; digits only (with a sign,
    and spaces around), as Spark's own integer options take them: not ``2.5``, ``1e6``,
    ``1_000`` or ``0x10``. ``options`` is keyed by lower-cased names (or
    case-insensitive); the built-in publishers use it for their options too.

    Raises
    ------
    OptionError
        For a value that is not a whole number from ``minimum`` to ``maximum``.
    """
    text = options.get(name.lower())
    if text is None:
        return None
    accepted = _accepted(minimum, maximum)
    stripped = text.strip()
    if not stripped:
        raise OptionError(name, text, f"{accepted}; it is {'empty' if not text else 'blank'}")
    if not _INTEGER.fullmatch(stripped):
        raise OptionError(name, text, f"{accepted}; {_shown(stripped)} is not a whole number")
    digits = stripped.lstrip("+-").lstrip("0")
    if len(digits) > len(str(MAX_COUNT)):
        # Beyond every bound (and beyond what int() parses, 4,300 digits): no need to.
        where = f"below {minimum}" if stripped.startswith("-") else f"above {maximum}"
        raise OptionError(name, text, f"{accepted}; it is {where}")
    value = int(stripped)
    if value < minimum:
        raise OptionError(name, text, f"{accepted}; {value} is below {minimum}")
    if value > maximum:
        raise OptionError(name, text, f"{accepted}; it is above {maximum}")
    return value


def choice_option(options: Mapping[str, str], name: str, choices: Iterable[str],
                  default: str) -> str:
    """The option as one of ``choices`` (lower-case names; the value compares
    case-insensitively, spaces around ignored), ``default`` when it is not given.

    Raises
    ------
    OptionError
        For any other value, naming the choices and the default.

    Examples
    --------
    >>> choice_option({"format": " JSON"}, "format", ("text", "json"), "text")
    'json'
    >>> choice_option({}, "format", ("text", "json"), "text")
    'text'
    >>> choice_option({"format": "xml"}, "format", ("text", "json"),
    ...               "text")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: ... format='xml' ...: one of text, json \
(default text)
    """
    allowed = tuple(choices)
    text = options.get(name.lower())
    if text is None:
        return default
    value = text.strip().lower()
    if value not in allowed:
        raise OptionError(name, text, f"one of {', '.join(allowed)} (default {default})")
    return value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN - 3]!r}..."


def resolve_factory(publisher: str) -> Callable[[Mapping[str, str]], Any]:
    """Find the publisher factory that ``publisher`` names.

    The ``publisher`` option is code: any importable module is imported (running its
    top-level code) and the callable it names is called with the options, as the user
    who runs Spark's driver. Options are therefore trusted input; never build them from
    what an untrusted party sends. Where the environment variable
    ``PYSPARK_REACTIVE_PUBLISHER_MODULES`` (:data:`PUBLISHER_MODULES_ENV`) is set, only
    the modules it lists (and their submodules) may be named, checked before anything is
    imported; built-in names are always allowed.

    Parameters
    ----------
    publisher : str
        A built-in name or ``"package.module:factory"`` (``factory`` may be dotted).

    Returns
    -------
    callable
        Called with the reader's options; returns a ``Publisher``.

    Raises
    ------
    OptionError
        When the name is not built in, the module is not among those
        ``PYSPARK_REACTIVE_PUBLISHER_MODULES`` allows, it cannot be imported, or the
        attribute is missing or not callable.

    Examples
    --------
    >>> resolve_factory("range").__name__
    'range_publisher'
    """
    path = BUILTIN_PUBLISHERS.get(publisher.lower(), publisher)
    module_name, sep, attribute = path.partition(":")
    accepted = (f"a built-in name ({', '.join(sorted(BUILTIN_PUBLISHERS))}) or an import "
                "path 'package.module:factory'")
    if not sep or not module_name or not attribute:
        raise OptionError("publisher", publisher, accepted)
    if publisher.lower() not in BUILTIN_PUBLISHERS:
        _check_allowed(publisher, module_name.strip(), accepted)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise OptionError("publisher", publisher,
                          f"{accepted}; importing {module_name!r} failed: {error}") from error
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise OptionError("publisher", publisher,
                              f"{accepted}; module {module_name!r} has no attribute "
                              f"{attribute!r}") from None
    if not callable(target):
        raise OptionError("publisher", publisher,
                          f"{accepted}; {path!r} is a {type(target).__name__}, not callable")
    factory: Callable[[Mapping[str, str]], Any] = target
    return factory


def read_option_file(option: str, path: str, holding: str, max_bytes: int) -> str:
    """The text of a small file an option names (``headersFile``, ``tokenFile``): how a
    secret reaches a publisher without travelling in the options, which the plan shows.

    The file is read by each of Spark's Python processes that makes the publisher (on the
    driver's machine), whose working directory is not the caller's: the path must be
    absolute (``~`` is expanded). Errors name the option and the path, never the content.

    Parameters
    ----------
    option : str
        The option's name, for errors.
    path : str
        The option's value.
    holding : str
        What the file holds, for errors (``"the RSocket service's token"``).
    max_bytes : int
        The most bytes it may hold: a larger file is a wrong path, not a secret.

    Returns
    -------
    str
        Its content, decoded as UTF-8.

    Raises
    ------
    OptionError
        For a relative path, a file that cannot be read, is larger than ``max_bytes`` or
        is not UTF-8.
    """
    accepted = (f"the absolute path of a readable file (UTF-8) holding {holding}, on the "
                "machine of Spark's driver")
    expanded = os.path.expanduser(path.strip())
    if not os.path.isabs(expanded):
        raise OptionError(option, path, f"{accepted}; it is a relative path")
    try:
        with open(expanded, "rb") as file:
            data = file.read(max_bytes + 1)
    except OSError as error:
        raise OptionError(option, path, f"{accepted}; reading it failed: "
                                        f"{error.strerror or error}") from None
    if len(data) > max_bytes:
        raise OptionError(option, path, f"{accepted}; it holds more than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise OptionError(option, path, f"{accepted}; it is not UTF-8 text") from None


def allowed_publisher_modules() -> tuple[str, ...] | None:
    """The modules ``PYSPARK_REACTIVE_PUBLISHER_MODULES`` allows ``publisher`` to name, or
    ``None`` when it is not set (any module may be named).

    Examples
    --------
    >>> import os
    >>> os.environ[PUBLISHER_MODULES_ENV] = " mycompany.feeds, tests "
    >>> allowed_publisher_modules()
    ('mycompany.feeds', 'tests')
    >>> del os.environ[PUBLISHER_MODULES_ENV]
    >>> allowed_publisher_modules() is None
    True
    """
    text = os.environ.get(PUBLISHER_MODULES_ENV)
    if text is None:
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _check_allowed(publisher: str, module_name: str, accepted: str) -> None:
    allowed = allowed_publisher_modules()
    if allowed is None:
        return
    # A module or its submodules: "feeds" allows "feeds.ticks", not "feedsevil".
    if any(module_name == name or module_name.startswith(f"{name}.") for name in allowed):
        return
    modules = ", ".join(allowed) if allowed else "none"
    raise OptionError("publisher", publisher,
                      f"{accepted} from a module that {PUBLISHER_MODULES_ENV} allows "
                      f"(modules: {modules}, with their submodules; built-in names are "
                      f"always allowed); {module_name!r} is not among them")


def check_wal_location(location: str, *, owner_check: bool = True,
                       links: bool = False) -> None:
    """Raise :class:`OptionError` unless the write-ahead log can be written at ``location``
    and, on the local disk, changed by its user alone (see
    :class:`~pyspark_reactive.source.wal.WalNotPrivate`; not checked with ``owner_check``
    false, ``walOwnerCheck=false``).

    The error shows the location, and the filesystem's reason, without the URI's
    credentials (userinfo, query string)."""
    from .wal import WalNotPrivate, WriteAheadLog

    try:
        WriteAheadLog(location, owner_check=owner_check).probe(links=links)
    except WalNotPrivate as error:
        raise OptionError("walLocation", location, error.reason) from None
    except OSError as error:
        raise OptionError("walLocation", location,
                          "a writable directory; writing there failed: "
                          f"{redact_url_in(str(error), location)}") from None
    except ValueError as error:
        # from None: the reason's own text may show the URI whole.
        raise OptionError("walLocation", location,
                          redact_url_in(str(error), location)) from None


def describe(options: SourceOptions) -> str:
    """One line naming the publisher and the demand, for logs (``walLocation`` without the
    URI's credentials)."""
    wal = redact_url(options.wal_location) if options.wal_location else "none"
    return (f"publisher={options.publisher} maxRecordsPerTrigger="
            f"{options.max_records_per_trigger} walLocation={wal} pid={os.getpid()}")
