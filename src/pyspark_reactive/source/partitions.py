"""How a micro-batch's rows travel to the executors: as Arrow IPC inside the partitions.

``partitions(start, end)`` runs in the source runner, which holds the rows; Spark pickles
each partition into its task, so ``read()`` on an executor only decodes what it carries.
:func:`split` cuts a batch into partitions of about :data:`PARTITION_BYTES` each (or into
``numPartitions``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql.datasource import InputPartition

__all__ = ["PARTITION_BYTES", "ArrowPartition", "split"]

# Spark warns when a task is larger than 1 MiB; rows travel inside the partitions.
PARTITION_BYTES = 1 << 20


class ArrowPartition(InputPartition):
    """A slice of a micro-batch: its rows as an Arrow IPC stream."""

    def __init__(self, start: int, rows: int, payload: bytes) -> None:
        super().__init__(start)
        self.start = start
        self.rows = rows
        self.payload = payload

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from ipc.open_stream(self.payload)

    def __repr__(self) -> str:
        return f"ArrowPartition(start={self.start}, rows={self.rows}, bytes={len(self.payload)})"


def split(table: pa.Table, start: int, count: int | None) -> list[InputPartition]:
    """The rows of ``table`` (offsets from ``start`` on) as ``count`` partitions, or, with
    ``count`` None, as many as keep each near :data:`PARTITION_BYTES`."""
    rows = table.num_rows
    if count is None:
        count = max(1, math.ceil(table.nbytes / PARTITION_BYTES))
    count = max(1, min(count, rows))
    size = math.ceil(rows / count)
    partitions: list[InputPartition] = []
    for offset in range(0, rows, size):
        piece = table.slice(offset, size)
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, table.schema) as writer:
            for batch in piece.to_batches():
                writer.write_batch(batch)
        partitions.append(ArrowPartition(start + offset, piece.num_rows,
                                         sink.getvalue().to_pybytes()))
    return partitions
