"""A micro-batch's way into the driver, and into elements: the batch's rows fetched as Arrow
a partition at a time (:func:`fetch_arrow`), and cut into chunks of ``Row``, dict, tuple or
``RecordBatch`` elements (:func:`chunks_of`) that the
:class:`~pyspark_reactive.ForeachBatchPublisher` offers its subscribers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]
from pyspark.serializers import NoOpSerializer, UTF8Deserializer, read_int
from pyspark.sql import DataFrame, Row

__all__ = ["Chunk", "check_arrow_carries", "chunks_of", "fetch_arrow",
           "fetch_arrow_through_python"]

log = logging.getLogger("pyspark_reactive.sink")


def check_arrow_carries(schema: Any) -> None:
    """Refuse, naming the column, a type that the batch's way to the driver (Spark's
    ``mapInArrow``) cannot carry: PySpark's Arrow path fails on year-month intervals with
    a bare ``KeyError`` from deep inside pyarrow."""
    from pyspark.sql.types import ArrayType, MapType, StructType, YearMonthIntervalType

    def carries(data_type: Any) -> bool:
        if isinstance(data_type, YearMonthIntervalType):
            return False
        if isinstance(data_type, ArrayType):
            return carries(data_type.elementType)
        if isinstance(data_type, MapType):
            return carries(data_type.keyType) and carries(data_type.valueType)
        if isinstance(data_type, StructType):
            return all(carries(field.dataType) for field in data_type.fields)
        return True

    for field in schema.fields:
        if not carries(field.dataType):
            raise TypeError(
                f"ForeachBatchPublisher: column {field.name!r} is (or holds) "
                f"{field.dataType.simpleString()}, a year-month interval, which PySpark's "
                "Arrow path cannot carry to the driver; select it as months "
                "(CAST(col AS INT) on an INTERVAL MONTH) or as a STRING first")


#: Elements on offer, and what makes each one as a subscriber takes it (None: as they are).
Chunk = tuple[Sequence[Any], "Callable[[Any], Any] | None"]


def chunks_of(record_batch: pa.RecordBatch, element: str, chunk_rows: int) -> Iterator[Chunk]:
    """``record_batch`` as chunks of up to ``chunk_rows`` rows of ``element``s."""
    names = list(record_batch.schema.names)
    for low in range(0, record_batch.num_rows, chunk_rows):
        yield _elements(record_batch.slice(low, chunk_rows), element, names)


def _elements(piece: pa.RecordBatch, element: str, names: list[str]) -> Chunk:
    if element == "arrow":
        return [piece], None
    if element == "dict":
        if not any(_holds_map(field.type) for field in piece.schema):
            return piece.to_pylist(), None
        return piece.to_pylist(maps_as_pydicts="lossy"), None
    # Column by column, then zipped: pyarrow makes each column's values at C speed.
    # Maps become dicts, as Spark's own collect() gives them (pyarrow's default is a list
    # of key-value pairs); asked only where a column holds one, as the option slows
    # pyarrow's conversion of every column about fifteenfold.
    columns = [column.to_pylist(maps_as_pydicts="lossy") if _holds_map(column.type)
               else column.to_pylist() for column in piece.columns]
    tuples = list(zip(*columns, strict=True)) if columns else [()] * piece.num_rows
    if element == "tuple" or not names:
        return tuples, None
    # A Row subclass that carries the field names on the class lets tuple.__new__ make
    # each row without a Python call; the mailbox makes them as they are taken.
    return tuples, functools.partial(tuple.__new__, _row_class(tuple(names)))


def _holds_map(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` is or holds a map."""
    if pa.types.is_map(data_type):
        return True
    return any(_holds_map(data_type.field(i).type) for i in range(data_type.num_fields))


@functools.lru_cache(maxsize=64)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    """A ``pyspark.sql.Row`` whose rows all have the fields ``names``."""
    return type("Row", (Row,), {"__fields__": list(names), "__slots__": ()})


def fetch_arrow(batch: DataFrame, schemas: dict[tuple[str, ...], pa.Schema]
                   ) -> Iterator[pa.RecordBatch]:
    """The rows of ``batch`` as Arrow, one partition at a time, in order.

    The driver JVM computes one partition per job and the next one while this one is
    read (``PythonRDD.toLocalIteratorAndServe`` over ``toArrowBatchRdd``: no Python worker
    on the way, and, unlike a Dataset's ``toLocalIterator()``, nothing kept once served);
    this process holds one Arrow batch (``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows) at a time. ``schemas`` caches the JVM's Arrow schema for each batch schema.
    Where this Spark lacks that path, one job per partition through ``mapInArrow``.
    """
    try:
        rdd = batch._jdf.toArrowBatchRdd()
    except Py4JJavaError:
        raise
    except (Py4JError, AttributeError):  # pragma: no cover - depends on the Spark version
        log.debug("no toArrowBatchRdd here; fetching through mapInArrow", exc_info=True)
        yield from fetch_arrow_through_python(batch)
        return
    session = batch.sparkSession
    key = (batch.schema.json(), str(session.conf.get("spark.sql.session.timeZone")),
           str(session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")))
    schema = schemas.get(key)
    if schema is None:
        schema = schemas[key] = _jvm_arrow_schema(batch)
    from pyspark.util import _local_iterator_from_socket

    jvm = session.sparkContext._jvm
    assert jvm is not None
    served = jvm.PythonRDD.toLocalIteratorAndServe(rdd, True)
    for message in _local_iterator_from_socket(served, NoOpSerializer()):
        yield ipc.read_record_batch(pa.py_buffer(message), schema)


def _jvm_arrow_schema(batch: DataFrame) -> pa.Schema:
    """The Arrow schema the driver JVM gives ``batch``'s rows, read from what it sends for
    no rows at all (``limit(0)``, which Spark answers without running a job)."""
    from pyspark.util import local_connect_and_auth

    port, secret, server = batch.limit(0)._jdf.collectAsArrowToPython()
    stream, sock = local_connect_and_auth(port, secret)
    try:
        sock.settimeout(None)
        reader = ipc.open_stream(stream)
        schema = reader.schema
        for _ in reader:  # pragma: no cover - limit(0) has no rows
            pass
        count = read_int(stream)  # then the batches' order, or an error
        if count == -1:
            raise RuntimeError(f"ForeachBatchPublisher: reading the batch's Arrow schema "
                               f"failed: {UTF8Deserializer().loads(stream)}")
        for _ in range(count):
            read_int(stream)
    finally:
        stream.close()
        sock.close()
    server.getResult()
    return schema


def fetch_arrow_through_python(batch: DataFrame) -> Iterator[pa.RecordBatch]:
    """:func:`fetch_arrow` where ``toArrowBatchRdd`` is missing: each Arrow batch of a
    partition is written as IPC by a Python worker (``mapInArrow``) and fetched by one job
    per partition, so the driver holds one partition at a time."""
    blobs = batch.mapInArrow(_arrow_to_ipc, "ipc BINARY").rdd
    context = batch.sparkSession.sparkContext
    for partition in range(blobs.getNumPartitions()):
        for blob in context.runJob(blobs, _as_list, [partition]):
            yield from ipc.open_stream(blob.ipc)


def _as_list(rows: Iterable[Any]) -> list[Any]:
    return list(rows)


def _arrow_to_ipc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # On the executors: each Arrow batch of the partition travels as one binary value,
    # so the driver receives a few large values instead of one Python object per row.
    for batch in batches:
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        data = sink.getvalue()
        # One binary value over the IPC buffer, without copying it.
        offsets = pa.array([0, data.size], pa.int32()).buffers()[1]
        value = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])
        yield pa.RecordBatch.from_arrays([value], names=["ipc"])
