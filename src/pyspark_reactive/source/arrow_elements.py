"""Arrow elements: publishers whose elements are ``pyarrow.RecordBatch`` es go through the
source column by column, with no per-row Python. Each batch is checked against the
declared schema once per distinct batch schema, cast where that is safe, and refused with
an error naming the column, its type and the declared type where it is not.

Demand and offsets count rows (see :mod:`pyspark_reactive.source.demand_buffer`), so
``maxRecordsPerTrigger``, the write-ahead log and the partitions mean what they mean for
rows. Declare a publisher's elements with :func:`arrow_batches` (or an attribute
``arrow_batches = True``) so that its very first request asks for one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from reactive_streams import Publisher, Subscriber

from ..errors import PySparkReactiveError

__all__ = ["ArrowElementError", "ArrowElements", "arrow_batches", "first_record_batch",
           "record_batch_among_rows"]

_SHOWN = 80  # characters of an element's repr shown in an error
_PLANS = 16  # distinct batch schemas whose plans are kept
# string_view and binary_view (pyarrow 16+), by type id.
_VIEW_IDS = {name: getattr(pa, name)().id for name in ("string_view", "binary_view")
             if hasattr(pa, name)}


class ArrowElementError(PySparkReactiveError, ValueError):
    """An element of an Arrow stream that does not fit, or a stream that mixes kinds.

    Attributes
    ----------
    offset : int
        The stream offset of the element (for a RecordBatch, of its first row).
    column : str or None
        The column that does not fit; ``None`` when the element itself is of the wrong
        kind or shape.
    """

    def __init__(self, offset: int, column: str | None, message: str) -> None:
        self.offset = offset
        self.column = column
        super().__init__(message)


def arrow_batches(publisher: Publisher[pa.RecordBatch]) -> Publisher[pa.RecordBatch]:
    """Declare that ``publisher`` signals ``pyarrow.RecordBatch`` es.

    The ``reactive`` source then counts rows from the start: it requests one batch at a
    time while fewer than ``maxRecordsPerTrigger`` rows are buffered, so it holds at most
    that many rows plus one batch. Without the declaration the first element decides, but
    the first request has already asked for ``maxRecordsPerTrigger`` elements, which a
    publisher of batches may meet with as many batches. A publisher class can instead say
    ``arrow_batches = True``.

    Parameters
    ----------
    publisher : Publisher
        Any publisher whose elements are ``pyarrow.RecordBatch`` es.

    Returns
    -------
    Publisher
        A publisher that subscribes its subscribers to ``publisher`` and has
        ``arrow_batches = True``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from reactive_streams import IterablePublisher
    >>> batches = [pa.record_batch({"id": [1, 2]}), pa.record_batch({"id": [3]})]
    >>> arrow_batches(IterablePublisher(batches)).arrow_batches
    True
    """
    if not callable(getattr(publisher, "subscribe", None)):
        raise TypeError(f"arrow_batches: publisher must be a Publisher (an object with "
                        f"subscribe(subscriber)), got {type(publisher).__name__}")
    return _ArrowBatches(publisher)


class _ArrowBatches(Publisher[pa.RecordBatch]):
    arrow_batches = True

    def __init__(self, publisher: Publisher[pa.RecordBatch]) -> None:
        self.publisher = publisher

    def subscribe(self, subscriber: Subscriber[pa.RecordBatch]) -> None:
        self.publisher.subscribe(subscriber)

    def __getattr__(self, name: str) -> Any:
        # position_key, on_durable (pyspark_reactive.source.durability) and the like.
        if name == "publisher":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.publisher, name)

    def __repr__(self) -> str:
        return f"arrow_batches({self.publisher!r})"


def first_record_batch(elements: Sequence[Any]) -> int | None:
    """Index of the first ``RecordBatch`` among ``elements`` (row elements), or ``None``."""
    if pa.RecordBatch not in set(map(type, elements)):  # at C speed: the usual answer
        return None
    return next(i for i, element in enumerate(elements) if type(element) is pa.RecordBatch)


def record_batch_among_rows(offset: int, first: Any) -> ArrowElementError:
    """The error for a RecordBatch at ``offset`` in a stream whose first element, ``first``,
    made it a stream of rows."""
    return ArrowElementError(
        offset, None,
        f"element at offset {offset}: a pyarrow.RecordBatch in a stream of rows (its first "
        f"element was a {type(first).__name__}); a publisher signals rows or RecordBatches, "
        "not both. A publisher of RecordBatches signals only those (declare it with "
        "pyspark_reactive.arrow_batches)")


class ArrowElements:
    """Conforms RecordBatches to the schema Spark was declared, without per-row work.

    Parameters
    ----------
    schema : pyarrow.Schema
        The declared schema (``rows.arrow_schema``); every batch comes out with exactly it.
    declared : bool
        Whether the publisher declared its elements (for messages).

    Notes
    -----
    Columns are matched by name (their order in the batch does not matter); a batch must
    have every declared column and no other. A column whose type differs is cast when the
    cast cannot change a value silently: integers to wider or narrower integers,
    integers and floats to ``double`` (and to ``float`` from ``float`` or ``half_float``),
    integers and decimals to decimals, any string or binary layout to Spark's, dates,
    dictionary-encoded columns to their values, ``null`` columns to anything, timestamps
    with a time zone to ``timestamp`` (nanoseconds truncated to microseconds, as Spark
    does), timestamps without one to ``timestamp_ntz``, and lists, maps and structs whose
    parts cast by these rules. Every value is checked (an integer out of range fails).
    Anything else is refused, as are nulls in a column declared ``NOT NULL``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> conform = ArrowElements(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    >>> batches, error = conform.convert(
    ...     [pa.record_batch({"name": ["a"], "id": pa.array([1], pa.int32())})], 0)
    >>> batches[0].schema.types, error
    ([DataType(int64), DataType(string)], None)
    """

    def __init__(self, schema: pa.Schema, declared: bool = False) -> None:
        self.schema = schema
        self.declared = declared
        self._not_null = any(not field.nullable for field in schema)
        self._plans: dict[pa.Schema, list[tuple[int, pa.Field, pc.CastOptions | None]]
                          | ArrowElementError] = {}

    def convert(self, elements: Sequence[Any], first_offset: int
                ) -> tuple[list[pa.RecordBatch], ArrowElementError | None]:
        """Conform the longest good prefix of ``elements``.

        Parameters
        ----------
        elements : sequence
            Elements in stream order; the first row of the first has offset
            ``first_offset``.
        first_offset : int

        Returns
        -------
        tuple of (list of pyarrow.RecordBatch, ArrowElementError or None)
            One batch with the declared schema per element before the first that does
            not fit (all of them if all fit), and the error for that element.
        """
        conformed: list[pa.RecordBatch] = []
        offset = first_offset
        for element in elements:
            if type(element) is not pa.RecordBatch:
                return conformed, self._not_a_batch(offset, element)
            try:
                conformed.append(self.conform(element, offset))
            except ArrowElementError as error:
                return conformed, error
            offset += element.num_rows
        return conformed, None

    def conform(self, batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
        """``batch`` with exactly the declared schema; raises :class:`ArrowElementError`."""
        schema = batch.schema
        if not self._not_null and schema.equals(self.schema, check_metadata=True):
            return batch
        plan = self._plans.get(schema)
        if plan is None:
            plan = self._plan(schema)
            if len(self._plans) >= _PLANS:
                self._plans.clear()
            self._plans[schema] = plan
        if isinstance(plan, ArrowElementError):
            raise ArrowElementError(offset, plan.column, f"RecordBatch at offset {offset}: "
                                    f"{plan}")
        arrays = []
        for index, field, options in plan:
            column = batch.column(index)
            if options is not None:
                try:
                    column = pc.cast(column, options=options)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                    raise ArrowElementError(
                        offset, field.name,
                        f"RecordBatch at offset {offset} ({batch.num_rows} rows): column "
                        f"{field.name!r} ({column.type}) does not fit the declared "
                        f"{_spark_name(field.type)} ({field.type}): {error}") from None
            if not field.nullable and column.null_count:
                raise ArrowElementError(
                    offset, field.name,
                    f"RecordBatch at offset {offset} ({batch.num_rows} rows): column "
                    f"{field.name!r} holds {column.null_count} nulls but is declared NOT NULL")
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _plan(self, schema: pa.Schema) -> list[tuple[int, pa.Field, pc.CastOptions | None]] \
            | ArrowElementError:
        """Where each declared column comes from in a batch of ``schema``, and its cast."""
        names = schema.names
        declared = ", ".join(f"{f.name} {_spark_name(f.type)}" for f in self.schema)
        for name in names:
            if names.count(name) > 1:
                return ArrowElementError(0, name, f"the batch has column {name!r} "
                                         f"{names.count(name)} times")
        plan = []
        for field in self.schema:
            index = schema.get_field_index(field.name)
            if index < 0:
                alike = [n for n in names if n.lower() == field.name.lower()]
                hint = (f" (the batch has {alike[0]!r}: names must match exactly)" if alike
                        else f"; the batch has {names}")
                return ArrowElementError(
                    0, field.name, f"column {field.name!r} (declared "
                    f"{_spark_name(field.type)}) is missing{hint}")
            given = schema.field(index).type
            if given.equals(field.type):
                plan.append((index, field, None))
                continue
            refusal = _refusal(given, field.type)
            if refusal is not None:
                return ArrowElementError(
                    0, field.name, f"column {field.name!r} is {given}, which does not cast "
                    f"safely to the declared {_spark_name(field.type)} ({field.type}): "
                    f"{refusal}")
            plan.append((index, field, pc.CastOptions(field.type, allow_time_truncate=True)))
        for name in names:
            if self.schema.get_field_index(name) < 0:
                return ArrowElementError(
                    0, name, f"column {name!r} ({schema.field(name).type}) is not in the "
                    f"declared schema ({declared})")
        return plan

    def _not_a_batch(self, offset: int, element: Any) -> ArrowElementError:
        why = ("the publisher declares arrow_batches" if self.declared
               else "the stream's first element was one")
        shown = repr(element)
        if len(shown) > _SHOWN:
            shown = shown[:_SHOWN - 3] + "..."
        hint = " (signal table.to_batches())" if isinstance(element, pa.Table) else ""
        return ArrowElementError(
            offset, None, f"element at offset {offset}: expected a pyarrow.RecordBatch ({why}),"
            f" got {type(element).__name__} {shown}{hint}; a publisher signals rows or "
            "RecordBatches, not both")


def _refusal(given: pa.DataType, wanted: pa.DataType) -> str | None:
    """Why a column of type ``given`` does not cast safely to ``wanted`` (None: it does)."""
    types = pa.types
    if given.equals(wanted) or types.is_null(given):
        return None
    if types.is_dictionary(given):
        return _refusal(given.value_type, wanted)
    if types.is_integer(wanted):
        if types.is_integer(given):
            return None
        return "only integer columns cast to an integer type (a float would be truncated)"
    if types.is_floating(wanted):
        if types.is_integer(given) or (types.is_floating(given) and
                                       given.bit_width <= wanted.bit_width):
            return None
        return "only integers and floats no wider than it cast to a floating type"
    if types.is_decimal(wanted):
        if types.is_integer(given) or types.is_decimal(given):
            return None
        return "only integers and decimals cast to a decimal type"
    if types.is_string(wanted) or types.is_large_string(wanted):
        if types.is_string(given) or types.is_large_string(given) or _is_view(given,
                                                                               "string"):
            return None
        return ("only strings cast to a string type; convert the column yourself "
                "(pyarrow.compute.cast) if its text is what you mean")
    if types.is_binary(wanted) or types.is_large_binary(wanted):
        if (types.is_binary(given) or types.is_large_binary(given)
                or types.is_fixed_size_binary(given) or _is_view(given, "binary")):
            return None
        return "only binary columns cast to a binary type"
    if types.is_date(wanted):
        return None if types.is_date(given) else "only dates cast to a date type"
    if types.is_timestamp(wanted):
        if not types.is_timestamp(given):
            return "only timestamps cast to a timestamp type"
        if wanted.tz is not None and given.tz is None:
            return ("its timestamps have no time zone, so which instants they are is not "
                    "known: attach one (pyarrow.compute.assume_timezone) or declare the "
                    "column timestamp_ntz")
        if wanted.tz is None and given.tz is not None:
            return ("its timestamps are instants (time zone "
                    f"{given.tz}): declare the column timestamp, or drop the time zone")
        return None
    if types.is_boolean(wanted):
        return "only booleans cast to boolean"
    if types.is_list(wanted) or types.is_large_list(wanted):
        if types.is_list(given) or types.is_large_list(given) or \
                types.is_fixed_size_list(given):
            inner = _refusal(given.value_type, wanted.value_type)
            return None if inner is None else f"its elements: {inner}"
        return "only lists cast to an array type"
    if types.is_map(wanted):
        if not types.is_map(given):
            return "only maps cast to a map type"
        inner = _refusal(given.key_type, wanted.key_type) or _refusal(
            given.item_type, wanted.item_type)
        return None if inner is None else f"its keys or values: {inner}"
    if types.is_struct(wanted):
        if not types.is_struct(given):
            return "only structs cast to a struct type"
        fields = {given.field(i).name: given.field(i).type for i in range(given.num_fields)}
        names = [wanted.field(i).name for i in range(wanted.num_fields)]
        if sorted(fields) != sorted(names):
            return f"its fields are {sorted(fields)}, declared {sorted(names)}"
        for i in range(wanted.num_fields):
            part = wanted.field(i)
            inner = _refusal(fields[part.name], part.type)
            if inner is not None:
                return f"its field {part.name!r}: {inner}"
        return None
    return "no safe cast is known for these types"


def _is_view(arrow_type: pa.DataType, kind: str) -> bool:
    return arrow_type.id == _VIEW_IDS.get(f"{kind}_view")


def _spark_name(arrow_type: pa.DataType) -> str:
    """The type as Spark spells it (``bigint``), or the Arrow type where Spark has none."""
    try:
        from pyspark.sql.pandas.types import from_arrow_type

        name: str = from_arrow_type(arrow_type).simpleString()
    except Exception:
        return str(arrow_type)
    return name
