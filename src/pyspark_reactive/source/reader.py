"""``spark.readStream.format("reactive")``: any Publisher as a micro-batch stream.

What Spark calls: :class:`DefaultSource` (found by name, options checked at ``load()``),
its :class:`ReactiveStreamReader`, and :func:`read_stream`, which ships a factory with a
data source of its own. The publisher and its subscription live in Spark's source runner
process (see DESIGN.md): the reader holds there one
:class:`~pyspark_reactive.source.run.QueryRun`, made on the first call, which subscribes on
the first ``latestOffset``. Each ``latestOffset`` cuts a batch of at most
``maxRecordsPerTrigger`` rows from the
:class:`~pyspark_reactive.source.demand_buffer.DemandBuffer`, which at once requests as
many more, converts the rows to Arrow, writes them to the write-ahead log when there is
one, and returns the end offset. ``partitions`` ships the batch's Arrow rows inside the
partitions (:mod:`~pyspark_reactive.source.partitions`), so ``read`` on the executors only
decodes them. An ``availableNow`` trigger (Spark 4.2+) takes at most
``availableNowMaxRecords`` elements beyond those the source holds when it starts, and
requests no more than that, so the query ends on an endless publisher too.

Where Spark has no admission control for Python sources
(:data:`~pyspark_reactive.source.admission.ADMISSION_CONTROL` false: Spark 4.0/4.1), it runs
an ``availableNow`` trigger as a single micro-batch and never tells the source which
trigger runs; an ``availableNowMaxRecords`` given explicitly then sizes the first batch of
every query run, which without a write-ahead log takes every row it requested or fails the
run after ``fillTimeoutMs`` of silence, so no row signalled within demand is left to a run
that has ended (see :class:`~pyspark_reactive.source.options.SourceOptions`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .._testing.faults import crash_point
from .admission import ReadMaxRows, SupportsTriggerAvailableNow
from .durability import FactoryOptions
from .options import (
    BUILTIN_PUBLISHERS,
    SHIPPED_FACTORY,
    CaseInsensitiveOptions,
    OptionError,
    SourceOptions,
    check_wal_location,
    parse_source_options,
    resolve_factory,
)
from .partitions import ArrowPartition
from .run import QueryRun
from .sharded import ShardedStreamReader
from .shards import Shard, is_sharded
from .upstream import Factory

__all__ = ["DEFAULT_SCHEMA", "DefaultSource", "ReactiveStreamReader", "read_stream"]

DEFAULT_SCHEMA = "value STRING"


class DefaultSource(DataSource):
    """The ``reactive`` streaming data source.

    Found by Spark under the name ``reactive`` with no ``register`` call once the package
    is installed; ``spark.dataSource.register(DefaultSource)`` works too. Options are
    validated when the DataFrame is created (``load()``), before any query starts.

    Examples
    --------
    >>> df = (spark.readStream.format("reactive")               # doctest: +SKIP
    ...       .option("publisher", "range").option("maxRecordsPerTrigger", 500).load())
    """

    # A factory shipped with the class by read_stream(); None: the "publisher" option.
    _shipped_factory: Factory | None = None

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        shipped = type(self)._shipped_factory is not None
        self.source_options = parse_source_options(options, shipped_factory=shipped)
        if self.source_options.shards is not None:
            check_sharded(type(self)._shipped_factory or
                          resolve_factory(self.source_options.publisher),
                          self.source_options)
        if not shipped:
            factory = resolve_factory(self.source_options.publisher)
            if self.source_options.publisher.lower() in BUILTIN_PUBLISHERS:
                # Built-in publishers are ours and cheap to make: making one checks its
                # options now, not once the query runs (with shards, as a shard).
                shards = self.source_options.shards
                factory(FactoryOptions(self.source_options.raw, shard=Shard(0, shards))
                        if shards is not None
                        else CaseInsensitiveOptions(self.source_options.raw))
        if self.source_options.wal_location is not None:
            check_wal_location(self.source_options.wal_location,
                               owner_check=self.source_options.wal_owner_check,
                               links=self.source_options.shards is not None)

    @classmethod
    def name(cls) -> str:
        return "reactive"

    def schema(self) -> str:
        # Spark asks only when no .schema(...) was given; the schema option (a DDL string)
        # lets load() check every option with a schema of one's own (docs/troubleshooting.md).
        if self.source_options.schema is not None:
            return self.source_options.schema
        if type(self)._shipped_factory is not None:
            return DEFAULT_SCHEMA
        # A factory (built-in or the user's) may say what its elements look like.
        default = getattr(resolve_factory(self.source_options.publisher), "default_schema",
                          None)
        if default is None:
            return DEFAULT_SCHEMA
        ddl: str = default(CaseInsensitiveOptions(self.source_options.raw))
        return ddl

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.source_options.shards is not None:
            return ShardedStreamReader(self.source_options, schema, type(self)._shipped_factory)
        return ReactiveStreamReader(self.source_options, schema, type(self)._shipped_factory)


def check_sharded(factory: Factory, options: SourceOptions) -> None:
    """Refuse the option ``shards`` for a factory not declared ``@sharded``."""
    if not is_sharded(factory):
        name = ("the factory given to read_stream()" if options.publisher == SHIPPED_FACTORY
                else f"publisher={options.publisher!r}")
        raise OptionError("shards", str(options.shards),
                          f"only for a publisher whose factory is declared @sharded "
                          f"(pyspark_reactive.sharded), which {name} is not; without "
                          "shards it is read on the driver")


class ReactiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the ``reactive`` source; its live state exists only in the runner.

    Offsets are ``{"offset": n}``, the count of elements since the stream began.
    """

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        self.options = options
        self.schema = schema
        self._factory = factory
        self._run: QueryRun | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get a copy for read(): no subscription, no threads, no factory.
        state = self.__dict__.copy()
        state["_run"] = None
        state["_factory"] = None
        return state

    def _live(self) -> QueryRun:
        if self._run is None:
            self._run = QueryRun(self.options, self.schema, self._factory)
        return self._run

    def initialOffset(self) -> dict[str, int]:
        # Asked by a fresh query, but also by a restarted one whose first batch was
        # planned and not committed (the checkpoint records a batch's end, not its
        # start): latest() tells the two apart.
        return {"offset": 0}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.options.max_records_per_trigger)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, int]:
        return {"offset": self._live().latest(_offset(start), limit)}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark 4.2+ shows this as the source's "latestOffset" in query progress: how far
        # the publisher has got, so latestOffset - endOffset is what the source holds,
        # and "complete" once the publisher completed and everything it sent was taken
        # (publish_on_demand ends its runs on it).
        run = self._run
        reported = None if run is None else run.reported()
        if run is None or reported is None:
            return None
        return {"offset": reported, **({"complete": True} if run.completed() else {})}

    def prepareForTriggerAvailableNow(self) -> None:
        # Spark 4.2+ calls this first, when an availableNow trigger starts. A push-based
        # publisher has no "latest data" to point at, so the bound is a count: what the
        # source holds now plus availableNowMaxRecords. latestOffset returns its start
        # once that is taken (or the publisher pauses for fillWaitMs, or completes), and
        # the query ends.
        self._live().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self._live().partitions(_offset(start), _offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ArrowPartition)
        crash_point("read")
        return partition.batches()

    def commit(self, end: dict[str, Any]) -> None:
        self._live().commit(_offset(end))

    def stop(self) -> None:
        if self._run is not None:
            self._run.stop()


def _offset(offset: Mapping[str, Any] | None) -> Any:
    if offset is None:
        return None
    if "shards" in offset and "offset" not in offset:
        held = offset["shards"]
        count = len(held) if isinstance(held, Mapping) else "some"
        raise OptionError("shards", None, f"shards={count}, as the checkpoint was written "
                          f"reading {count} shards on the executors; or start a new "
                          "checkpointLocation to read the feed on the driver")
    value = offset.get("offset")
    if type(value) is not int or value < 0:
        raise ValueError(f"reactive source: offset {offset!r} is not {{'offset': n}} with n >= 0")
    return value


def read_stream(spark: Any, factory: Factory, schema: StructType | str | None = None,
                **options: Any) -> DataFrame:
    """A streaming DataFrame of the publisher that ``factory`` makes.

    The factory travels to Spark's source runner with the data source (pickled with
    cloudpickle), so a lambda or closure defined in a notebook works. It is called once
    per query run, in the runner, with the options as a mapping.

    Parameters
    ----------
    spark : SparkSession
    factory : callable
        ``factory(options) -> Publisher``; must be picklable by cloudpickle.
    schema : StructType or str, optional
        The rows' schema (a DDL string such as ``"id BIGINT, name STRING"`` works);
        default ``value STRING``.
    **options
        Any option of the ``reactive`` source except ``publisher``; values are turned
        into strings.

    Returns
    -------
    DataFrame
        A streaming DataFrame.

    Raises
    ------
    TypeError
        When ``factory`` is not callable, is a generator function (it would return a
        generator, not a Publisher: wrap the generator in ``IterablePublisher``), or
        cannot be pickled.
    OptionError
        For an option whose value is not accepted.

    Examples
    --------
    >>> def rows(options):
    ...     yield ("a", 1)
    >>> read_stream(None, rows)
    Traceback (most recent call last):
    ...
    TypeError: read_stream: the factory rows is a generator function, so it returns a \
generator, not a Publisher; make it return one: lambda options: \
IterablePublisher(lambda: rows(options)) (from reactive_streams)
    >>> from reactive_streams import RangePublisher
    >>> df = read_stream(spark, lambda opts: RangePublisher(0, 10),  # doctest: +SKIP
    ...                  schema="value BIGINT", maxRecordsPerTrigger=5)
    """
    import uuid

    if not callable(factory):
        raise TypeError(f"read_stream: factory must be callable, got {type(factory).__name__}")
    if inspect.isgeneratorfunction(factory) or inspect.isasyncgenfunction(factory):
        wrapper = ("AsyncIterablePublisher" if inspect.isasyncgenfunction(factory)
                   else "IterablePublisher")
        name = getattr(factory, "__name__", "given")
        raise TypeError(f"read_stream: the factory {name} is a generator function, so it "
                        "returns a generator, not a Publisher; make it return one: lambda "
                        f"options: {wrapper}(lambda: {name}(options)) (from reactive_streams)")
    text_options = {str(k): str(v) for k, v in options.items()}
    # Validate here too, so the error is a plain Python one raised in the caller's process.
    parsed = parse_source_options(text_options, shipped_factory=True)
    if parsed.shards is not None:
        check_sharded(factory, parsed)
    name = f"reactive_{uuid.uuid4().hex[:12]}"
    source = type(f"ReactiveSource_{name}", (DefaultSource,), {
        "_shipped_factory": staticmethod(factory),
        "name": classmethod(lambda cls: name),
        "__module__": __name__,
    })
    try:
        spark.dataSource.register(source)
    except Exception as error:
        if "pickl" in str(error).lower():
            raise TypeError(f"read_stream: the factory cannot be pickled for Spark's source "
                            f"runner: {error}") from error
        raise
    reader = spark.readStream.format(name).options(**text_options)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()
