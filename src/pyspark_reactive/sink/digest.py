"""The digest of a staged partition under Spark Connect: SHA-256 over a canonical form of its
rows in their order, computed alike from Arrow data by the stager (as the rows it writes
pass through it) and by the client (over the rows it fetched), so the two can be compared.

The canonical form: every column, and every field nested in it, is one or more streams of
bytes, each hashed apart and in row order (so how the rows are cut into Arrow batches does
not matter): where the values are NULL, their positions; a value's bytes (fixed-width values
as Arrow stores them, NULL slots as zeros; strings and binaries as their lengths and their
bytes); a list's and a map's lengths, then its elements as a column of their own; a
struct's fields as columns of their own. The digest is SHA-256 over the row count and those
streams' digests in the order of the schema. So a NULL that moves, a value that changes
anywhere inside a struct, list or map (a map's entries in the order they are stored), and
two rows that swap places all give another digest; a forger would need a second preimage
of SHA-256.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_reactive.errors import PySparkReactiveError

__all__ = ["DIGEST", "SEQ", "DigestAsWritten", "PartitionDigest", "UndigestibleType"]

_VERSION = b"pyspark-reactive partition digest 1\n"
#: The staged table's column that numbers each partition's rows from 0, in the order the
#: digest binds: the client reads a partition in this order (a table format keeps no order).
SEQ = "__reactive_seq"
#: The column that carries a partition's digest from the write to the stager's observation;
#: it is never written.
DIGEST = "__reactive_digest"


class UndigestibleType(PySparkReactiveError, TypeError):
    """A column holds an Arrow type the digest has no canonical form for."""


class _Stream:
    """One stream of the canonical form: its hash and how many values it has seen."""

    __slots__ = ("hash", "seen")

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.seen = 0


class PartitionDigest:
    """The digest of one partition's rows, fed with Arrow record batches in row order.

    Parameters
    ----------
    schema : pyarrow.Schema
        The columns to digest, in order; a batch given to :meth:`update` has these
        columns (more columns after them are ignored).

    Raises
    ------
    UndigestibleType
        For a column of a type with no canonical form here (a union, an extension type),
        naming it.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows = 0
        self._streams: dict[str, _Stream] = {}
        for field in schema:
            _check(field.type, field.name)

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add ``batch``'s rows, which follow those given so far."""
        for index in range(len(self.schema)):
            column = batch.column(index)
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            for chunk in chunks:
                self._array(str(index), chunk)
        self.rows += batch.num_rows

    def hexdigest(self) -> str:
        """The digest of the rows given so far (hex, 64 digits)."""
        total = hashlib.sha256(_VERSION)
        total.update(f"{self.rows}\n".encode())
        for path in sorted(self._streams):  # every name is made alike on both sides
            stream = self._streams[path]
            total.update(f"{path}:{stream.seen}:".encode())
            total.update(stream.hash.digest())
        return total.hexdigest()

    # -- the canonical form -----------------------------------------------------------------

    def _stream(self, path: str) -> _Stream:
        stream = self._streams.get(path)
        if stream is None:
            stream = self._streams[path] = _Stream()
        return stream

    def _array(self, path: str, array: pa.Array) -> None:
        kind = array.type
        if pa.types.is_dictionary(kind):
            array = array.dictionary_decode()
            kind = array.type
        length = len(array)
        nulls = self._stream(path + "/null")
        if array.null_count:
            # Positions from the stream's own start, so a batch's cut changes nothing.
            positions = pc.add(pc.indices_nonzero(array.is_null()), pa.scalar(nulls.seen,
                                                                              pa.uint64()))
            nulls.hash.update(_values(positions.cast(pa.uint64()), 8))
        nulls.seen += length
        if pa.types.is_null(kind):
            return
        if pa.types.is_boolean(kind):
            values = pc.fill_null(array, False).cast(pa.uint8())
            self._fixed(path, values, 1)
        elif pa.types.is_struct(kind):
            for index, child in enumerate(array.flatten()):  # NULL structs' fields as NULL
                self._array(f"{path}.{index}", child)
        elif pa.types.is_map(kind):
            entries = pa.list_(pa.field("entries", pa.struct([kind.key_field, kind.item_field]),
                                        nullable=False))
            self._list(path, array.view(entries))
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            self._list(path, array)
        elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)
              or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            self._bytes(path, array)
        else:
            width = kind.bit_width // 8  # _check allows only whole bytes here
            if array.null_count:
                array = pc.fill_null(array.view(pa.binary(width)), b"\0" * width)
            self._fixed(path, array, width)

    def _fixed(self, path: str, array: pa.Array, width: int) -> None:
        stream = self._stream(path)
        stream.hash.update(_values(array, width))
        stream.seen += len(array)

    def _bytes(self, path: str, array: pa.Array) -> None:
        if array.null_count:
            # A NULL slot may cover bytes; its value is nothing.
            array = pc.fill_null(array, b"" if pa.types.is_binary(array.type)
                                 or pa.types.is_large_binary(array.type) else "")
        lengths = self._stream(path + "/len")
        lengths.hash.update(_values(pc.binary_length(array).cast(pa.int64()), 8))
        lengths.seen += len(array)
        large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
        _, offsets, data = array.buffers()
        ends = pa.Array.from_buffers(pa.int64() if large else pa.int32(), len(array) + 1,
                                     [None, offsets], offset=array.offset)
        low, high = ends[0].as_py(), ends[len(array)].as_py()
        stream = self._stream(path)
        if data is not None and high > low:
            stream.hash.update(data.slice(low, high - low))
        stream.seen += len(array)

    def _list(self, path: str, array: pa.Array) -> None:
        lengths = self._stream(path + "/len")
        counts = pc.fill_null(pc.list_value_length(array), 0).cast(pa.int64())
        lengths.hash.update(_values(counts, 8))
        lengths.seen += len(array)
        self._array(path + "[]", array.flatten())  # NULL lists' elements are none


def _check(kind: pa.DataType, name: str) -> None:
    """Raise :class:`UndigestibleType` for a type with no canonical form here."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            _check(kind.field(index).type, f"{name}.{kind.field(index).name}")
        return
    if pa.types.is_map(kind):
        _check(kind.key_type, f"{name} (its keys)")
        _check(kind.item_type, f"{name} (its values)")
        return
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        _check(kind.value_type, f"{name} (its elements)")
        return
    if (pa.types.is_null(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)):
        return
    if isinstance(kind, pa.ExtensionType) or _width(kind) is None:
        raise UndigestibleType(
            f"column {name!r} is of the Arrow type {kind}, which a staged batch's digest has "
            "no canonical form for; select it as a string (or another type) first")


def _values(array: pa.Array, width: int) -> pa.Buffer:
    """The bytes of a fixed-width array's values (NULL slots as they are stored)."""
    return array.buffers()[1].slice(array.offset * width, len(array) * width)


def _width(kind: Any) -> int | None:
    """The bytes of one value of a fixed-width type, or None for another type."""
    try:
        bits = kind.bit_width
    except ValueError:
        return None
    return bits // 8 if bits % 8 == 0 and bits > 0 else None


class DigestAsWritten:
    """The ``mapInArrow`` function the rows of a staged write pass through on the server:
    each row leaves with its place in its partition (a column of its own, numbered from 0)
    and the partition's last row with ``"<partition>:<rows>:<digest>"`` in a column the
    stager observes and does not write; every other value passes unchanged.

    Parameters
    ----------
    columns : int
        How many columns of each batch are the rows' own (digested); the next one holds
        the partition's id, the same on every row of a partition.
    """

    def __init__(self, columns: int) -> None:
        self.columns = columns

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        digest: PartitionDigest | None = None
        held: pa.RecordBatch | None = None
        partition = None
        for batch in batches:
            if not batch.num_rows:
                continue
            if digest is None:
                digest = PartitionDigest(pa.schema(list(batch.schema)[:self.columns]))
                partition = batch.column(self.columns)[0].as_py()
            if held is not None:
                yield held.append_column(DIGEST, pa.nulls(held.num_rows, pa.string()))
            start = digest.rows
            digest.update(batch)
            # Held back one batch: only at the end is it known to hold the last row.
            held = batch.append_column(SEQ, pa.array(range(start, digest.rows),
                                                            pa.int64()))
        if held is not None and digest is not None:
            text = f"{partition}:{digest.rows}:{digest.hexdigest()}"
            last = pa.concat_arrays([pa.nulls(held.num_rows - 1, pa.string()),
                                     pa.array([text], pa.string())])
            yield held.append_column(DIGEST, last)
