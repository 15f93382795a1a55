"""Elements to Arrow: how the reactive source turns what a publisher signalled into the
``RecordBatch`` Spark accepts from a Python source, and names the first element that does
not fit the schema (its offset, column and value) without losing the rows before it.

Shapes: a tuple or list is a row by position, a dict by name, a ``Row`` by name (or by
position when it has no names), and any other element is the value of a one-column schema.
When that one column is an array, map or struct, every element is its value. Values
convert as Spark converts a Python data source's rows: strings accept any scalar (``str``),
naive datetimes are local time for ``TIMESTAMP``, ``TIMESTAMP_NTZ`` takes naive ones only.
Where Spark would store a Python repr nobody meant, it is refused instead: ``bytes`` or a
dict, list, tuple or set in a ``STRING`` column, and a string that is not valid text.

Speed: elements of one shape are split into whole columns and each column goes to pyarrow
in one call; the element-by-element, value-by-value path (Spark's own per-value
conversion) runs only for mixed shapes, values pyarrow would read differently from
Spark, and to find the first element that does not fit. Both give the same batches
(``RowConverter(schema, fast=False)`` is that reference, and the tests compare them).
"""

from __future__ import annotations

import datetime
import decimal
import inspect
import operator
import zoneinfo
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..errors import PySparkReactiveError

__all__ = ["RowConversionError", "RowConverter", "Undecodable", "arrow_schema"]

# Spark hands values of these types to pyarrow unconverted, so pyarrow's own conversion
# (with its range checks) is Spark's.
_DIRECT = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, BooleanType,
           DateType)
_NESTED = (ArrayType, MapType, StructType)
# Spark's converter rejects the wrong Python type with a bare assert: say what it wanted.
_NEEDS: list[tuple[type[DataType], tuple[type, ...], str]] = [
    (ArrayType, (list,), "a list"),
    (MapType, (dict,), "a dict"),
    (TimestampType, (datetime.datetime,), "a datetime"),
    (TimestampNTZType, (datetime.datetime,), "a naive datetime"),
    (DecimalType, (decimal.Decimal,), "a Decimal"),
    (BinaryType, (bytes, bytearray), "bytes or bytearray"),
]
# A value of these types in a column that is not an array, map or struct is a mistake of
# shape (Spark would store its repr in a STRING column, and fail obscurely elsewhere).
_CONTAINERS = (dict, list, tuple, set, frozenset)
# Not text: Spark would store "b'...'" in a STRING column; which encoding is meant is
# the publisher's to say.
_NOT_TEXT = (bytes, bytearray, memoryview)
# Integer columns: their width in bits, and what they refuse though pyarrow would
# truncate it.
_INTEGRAL_BITS: list[tuple[type[DataType], int]] = [
    (ByteType, 8), (ShortType, 16), (IntegerType, 32), (LongType, 64)]
_FRACTIONAL = (float, decimal.Decimal)
# What the columns whose values go to pyarrow unconverted take, for messages.
_TAKES: list[tuple[tuple[type[DataType], ...], str]] = [
    ((ByteType, ShortType, IntegerType, LongType), "an int"),
    ((FloatType, DoubleType), "a float or an int"),
    ((BooleanType,), "a bool"), ((DateType,), "a date"),
]
# Column conversion is tried on chunks of this many values to find a bad one quickly.
_CHUNK = 4096
_SHOWN = 80
_NONE = type(None)
_DATETIMES = {datetime.datetime, _NONE}
_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1)
_SECOND_US = 1_000_000
_MICROSECOND = datetime.timedelta(microseconds=1)
# datetime's range in microseconds from the epoch; the seconds from datetime.min to the
# epoch shift every second to >= 0 so that Arrow's integer division (which truncates)
# floors, and below _ZONE_STRIDE, so that zone and second make one lookup key.
_MIN_US = (datetime.datetime.min - _EPOCH) // _MICROSECOND
_MAX_US = (datetime.datetime.max - _EPOCH) // _MICROSECOND
_SHIFT_S = -_MIN_US // _SECOND_US
_ZONE_STRIDE = 2**39
# UTC offsets are looked up once per zone and distinct second of wall time, unless that
# would be nearly as many lookups as values.
_DISTINCT_SHARE = 0.25
_KNOWN_ZONES = (datetime.timezone, zoneinfo.ZoneInfo)


class _Null:
    """Stands for the epoch of a null value: ``None - _NULL`` is ``None``."""

    __slots__ = ()

    def __rsub__(self, other: None) -> None:
        return None


_NULL = _Null()


def _timestamps(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array | None:
    """``datetime``s (or ``None``) as Spark stores them in a ``TIMESTAMP`` column.

    Spark calls ``value.astimezone(timezone.utc)``: an aware value keeps its instant, a
    naive one is local time of this process. That is the value's wall time less its UTC
    offset, and the offset depends only on the zone, the wall time's whole second and the
    fold (``astimezone`` and ``ZoneInfo`` work in whole seconds). So each value's wall time
    is taken by subtracting an epoch of its own zone (no offset involved), and offsets are
    worked out once per zone (``datetime.timezone``: one offset) or per zone and distinct
    second (local time, ``ZoneInfo``). ``None`` when only value-by-value conversion can
    say: other zone classes, a second where the fold changes the offset (ambiguous or
    skipped wall time), too many distinct seconds, or a value outside ``datetime``'s range
    in UTC (``astimezone`` raises).
    """
    zones = [_NULL if value is None else value.tzinfo for value in values]
    distinct = list(set(zones))
    # Other zone classes may compute offsets from more than the wall second and the fold.
    if not all(zone is None or zone is _NULL or type(zone) in _KNOWN_ZONES
               for zone in distinct):
        return None
    epochs: list[Any] = [_NULL if isinstance(zone, _Null) else _EPOCH.replace(tzinfo=zone)
                         for zone in distinct]
    if len(distinct) == 1:
        walls = list(map(operator.sub, values, repeat(epochs[0])))
        index = None
    else:
        position = {zone: i for i, zone in enumerate(distinct)}
        epoch_of = dict(zip(distinct, epochs, strict=True))
        walls = list(map(operator.sub, values, map(epoch_of.__getitem__, zones)))
        index = pa.array(map(position.__getitem__, zones), type=pa.int64())
    micros = pa.array(walls, type=pa.duration("us")).cast(pa.int64())
    variable = [int(zone is None or type(zone) is zoneinfo.ZoneInfo) for zone in distinct]
    keys = None
    if any(variable):
        seconds = pc.divide(pc.subtract(micros, _MIN_US), _SECOND_US)  # + _SHIFT_S
        if index is None:
            keys = seconds
        else:
            keys = pc.add(pc.multiply(index, _ZONE_STRIDE), pc.multiply(
                seconds, pc.take(pa.array(variable, type=pa.int64()), index)))
    if keys is None:  # offsets constant per zone
        offsets = [_offset(zone, None) for zone in distinct]
        lookup = index
    else:
        unique = pc.unique(keys).drop_null()
        if len(unique) > max(16, _DISTINCT_SHARE * len(values)):
            return None
        offsets = []
        for key in unique.to_pylist():
            zone = distinct[key // _ZONE_STRIDE]
            wall = (_EPOCH + datetime.timedelta(seconds=key % _ZONE_STRIDE - _SHIFT_S)
                    if variable[key // _ZONE_STRIDE] else None)
            offset = _offset(zone, wall)
            if offset is None:
                return None
            offsets.append(offset)
        lookup = pc.index_in(keys, unique)
    if lookup is None:
        utc = pc.subtract(micros, offsets[0]) if offsets[0] else micros
    else:
        utc = pc.subtract(micros, pc.take(pa.array(offsets, type=pa.int64()), lookup))
    bounds = pc.min_max(utc)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and (low < _MIN_US or high > _MAX_US):
        return None  # astimezone() raises OverflowError for these
    return utc.cast(arrow_type)


def _offset(zone: Any, wall: datetime.datetime | None) -> int | None:
    """Microseconds to subtract from a wall time (second ``wall``, when the zone's offset
    varies) in ``zone`` (``None``: local time) to get UTC; ``None`` if the fold decides."""
    if zone is _NULL:
        return 0
    if wall is None:  # datetime.timezone
        return zone.utcoffset(None) // _MICROSECOND
    earlier: datetime.timedelta | None
    later: datetime.timedelta | None
    try:
        if zone is None:
            earlier = wall - wall.astimezone(_UTC).replace(tzinfo=None)
            later = wall - wall.replace(fold=1).astimezone(_UTC).replace(tzinfo=None)
        else:
            earlier = wall.replace(tzinfo=zone).utcoffset()
            later = wall.replace(tzinfo=zone, fold=1).utcoffset()
    except (OverflowError, ValueError, OSError):
        return None
    if earlier != later or earlier is None:
        return None  # ambiguous or skipped there: each value's fold decides
    return earlier // _MICROSECOND


def _wall_times(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array | None:
    """Naive ``datetime``s (or ``None``) as their wall time, as Spark stores them in a
    ``TIMESTAMP_NTZ`` column; ``None`` if one is aware (Spark refuses it, pyarrow would
    move it to UTC)."""
    if any(value.tzinfo is not None for value in values if value is not None):
        return None
    return pa.array(values, type=arrow_type)


class _Refused(PySparkReactiveError, TypeError):
    """A value the converter refuses before Spark's conversion sees it; says why."""


class Undecodable:
    """An element signalled in place of one its publisher could not decode.

    The converter never makes a row of it: it is an element that does not fit, with
    ``reason`` as the reason, so the query fails at its offset naming the reason, or,
    from a publisher that asks the source to skip such elements
    (``skip_unfit_elements``, see :mod:`pyspark_reactive.source.intake`), it is left out and
    counted like any other element that does not fit. Signalling it instead of failing
    the stream keeps its place in the stream, so an acknowledging publisher acknowledges
    it in its turn.

    Parameters
    ----------
    reason : str
        What was wrong with the input (shown in the error or the log line).

    Examples
    --------
    >>> Undecodable("the payload b'{' is not JSON")
    Undecodable("the payload b'{' is not JSON")
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Undecodable({self.reason!r})"


class RowConversionError(PySparkReactiveError, ValueError):
    """An element that does not fit the schema.

    Parameters
    ----------
    offset : int
        The element's stream offset.
    column : str or None
        The column whose value does not fit; ``None`` when the element's shape is wrong.
    value : object
        The value that does not fit (the whole element for a shape error).
    reason : str
        Why it does not fit.
    column_type : str, optional
        The column's type as Spark spells it (``bigint``), shown with the column.

    Attributes
    ----------
    offset : int
        The element's stream offset.
    column : str or None
        The column whose value does not fit; ``None`` when the element's shape is wrong.
    value : object
        The value that does not fit (the whole element for a shape error).
    """

    def __init__(self, offset: int, column: str | None, value: object, reason: str,
                 column_type: str = "") -> None:
        self.offset = offset
        self.column = column
        self.value = value
        self.reason = reason
        if isinstance(value, Undecodable):
            super().__init__(f"element at offset {offset}: {reason}")
            return
        try:
            shown = repr(value)
        except RecursionError:  # nested deeper than repr can go from here
            shown = f"<a {type(value).__name__} nested too deeply to show>"
        if len(shown) > _SHOWN:
            shown = shown[:_SHOWN - 3] + "..."
        where = f"column {column!r} ({column_type}) cannot hold" if column else "cannot use"
        super().__init__(f"element at offset {offset}: {where} {shown} "
                         f"({type(value).__name__}): {reason}")


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark requires of batches for ``schema`` (timestamps in UTC).

    Parameters
    ----------
    schema : StructType
        The rows' schema.

    Returns
    -------
    pyarrow.Schema
        Equal to what Spark's Python data source reader checks a yielded batch against.

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> arrow_schema(StructType([StructField("value", LongType())]))
    value: int64
    """
    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # Spark 4.1+
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # Spark 4.0: UTC timestamps by default


def _spark_converter(data_type: DataType) -> Callable[[Any], Any] | None:
    # Spark's own per-value conversion for its Python data sources, so values mean here
    # what they mean there. It is private API (4.0 to 4.3 agree on this call): without it
    # (None) values pass through to pyarrow.
    try:
        from pyspark.sql.conversion import LocalDataToArrowConversion

        converter = LocalDataToArrowConversion._create_converter(data_type)
    except Exception:  # pragma: no cover - depends on the installed pyspark
        converter = None
    return converter if callable(converter) else None


class _Column:
    """Converts one column's values to an Arrow array, fast for plain scalars."""

    def __init__(self, name: str, data_type: DataType, arrow_type: pa.DataType,
                 nullable: bool, fast: bool = True) -> None:
        self.name = name
        self.data_type = data_type
        self.type_name = data_type.simpleString()
        self.arrow_type = arrow_type
        self.nullable = nullable
        direct = isinstance(data_type, _DIRECT)
        self.convert_value = None if direct else _spark_converter(data_type)
        # Values of these types need no conversion even where Spark's would be called:
        # Spark's returns them unchanged and pyarrow takes them as they are (it would take
        # bytes for a string too, where Spark wants str()). Exact types: a subclass may
        # have a __str__ of its own.
        self.native: set[type] = set()
        # Whole columns Spark converts value by value but pyarrow can do at once.
        self.columnar: Callable[[Sequence[Any], pa.DataType], pa.Array | None] | None = None
        if fast:
            if isinstance(data_type, StringType):
                self.native = {str, _NONE}
            elif isinstance(data_type, BinaryType):
                self.native = {bytes, _NONE}
            elif isinstance(data_type, TimestampType):
                self.columnar = _timestamps
            elif isinstance(data_type, TimestampNTZType):
                self.columnar = _wall_times
        self.flat = not isinstance(data_type, _NESTED)
        self.text = isinstance(data_type, StringType)
        bits = next((b for kind, b in _INTEGRAL_BITS if isinstance(data_type, kind)), None)
        self.bounds = None if bits is None else (-2**(bits - 1), 2**(bits - 1) - 1)
        # Whether array() looks at the values' types, or first lets pyarrow infer them.
        self.typed = self.bounds is not None or bool(self.native) or self.columnar is not None
        self.inferred = fast and isinstance(data_type, LongType)

    def array(self, values: Sequence[Any], types: set[type] | None = None) -> pa.Array:
        """``values`` as an Arrow array; ``types``, when known, are their types."""
        if types is None and self.inferred:
            # pyarrow infers int64 only when every value is an int (no float, Decimal or
            # bool), which is what the type check below is for: one pass instead of two.
            try:
                array = pa.array(values)
            except Exception:
                array = None
            if array is not None and array.type == self.arrow_type:
                return array
        if types is None and self.typed:
            types = set(map(type, values))
        if self.bounds is not None:
            assert types is not None
            self._refuse_fractions(values, types)
        if self.convert_value is None or (self.native and types is not None
                                          and types <= self.native):
            return pa.array(values, type=self.arrow_type)
        if self.columnar is not None and types is not None and types <= _DATETIMES:
            try:
                array = self.columnar(values, self.arrow_type)
            except Exception:  # whatever it is, Spark's own conversion below says
                array = None
            if array is not None:
                return array
        convert = self.convert_value
        assert convert is not None
        if self.text:
            self._refuse_non_text(values)
        return pa.array([None if v is None else convert(v) for v in values],
                        type=self.arrow_type)

    def _refuse_fractions(self, values: Sequence[Any], types: set[type]) -> None:
        # pyarrow (26) truncates 5.5 to 5 in an integer column, as does Spark's own
        # conversion, which hands such values to pyarrow: a value silently changed is
        # refused instead, like Spark's createDataFrame refuses a float for an int column.
        if any(issubclass(kind, _FRACTIONAL) for kind in types):
            value = next(v for v in values if isinstance(v, _FRACTIONAL))
            raise _Refused(f"{self.type_name} takes an int, and a {type(value).__name__} is "
                           "not one (it would be truncated): convert it with int() or round() "
                           "first, or declare the column DOUBLE or DECIMAL")

    def _refuse_non_text(self, values: Sequence[Any]) -> None:
        for value in values:
            if isinstance(value, _NOT_TEXT):
                raise _Refused(f"{self.type_name} takes text, and {type(value).__name__} is "
                               "not text: decode it (value.decode('utf-8')) or declare the "
                               "column BINARY")
            if isinstance(value, _CONTAINERS):
                raise _Refused(self._not_flat(value))

    def _not_flat(self, value: Any) -> str:
        return (f"{self.type_name} takes one value, not a {type(value).__name__}: declare "
                "the column ARRAY, MAP or STRUCT to keep it nested, or give its parts "
                "columns of their own")

    def first_bad(self, values: Sequence[Any]) -> tuple[int, str] | None:
        """Index and reason of the first value that does not convert, or ``None``."""
        for low in range(0, len(values), _CHUNK):
            chunk = values[low:low + _CHUNK]
            try:
                self.array(chunk)
                continue
            except Exception as error:
                chunk_error = error
            for index, value in enumerate(chunk):
                try:
                    self.array([value])
                except Exception as error:
                    return low + index, self.reason(error, value)
            # No value fails alone though the chunk did: blame its first, not let it pass.
            return low, self.reason(chunk_error, chunk[0])  # pragma: no cover
        return None

    def reason(self, error: BaseException, value: Any) -> str:
        """A short reason from ``error``, raised converting ``value``."""
        if isinstance(error, _Refused):
            return str(error)
        if self.flat and isinstance(value, _CONTAINERS):
            return self._not_flat(value)
        if isinstance(error, UnicodeEncodeError):
            # pyarrow encodes str as UTF-8: a lone surrogate (often from decoding bytes
            # with errors="surrogateescape") has no encoding.
            bad = error.object[error.start:error.end]
            return (f"not valid text: {bad!r} at position {error.start} cannot be encoded "
                    f"as UTF-8 ({error.reason}); a string must hold only encodable characters")
        for kind, accepted, needed in _NEEDS:
            if isinstance(self.data_type, kind) and not isinstance(value, accepted):
                return f"{self.type_name} needs {needed}"
        if self.bounds and isinstance(value, int) and not isinstance(value, bool):
            low, high = self.bounds
            if not low <= value <= high:
                return f"{self.type_name} takes an int from {low} to {high}"
        # pyarrow's messages repeat the value: keep the first line, shortened.
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        if len(text) > 2 * _SHOWN:
            text = text[:2 * _SHOWN - 3] + "..."
        takes = next((what for kind, what in _TAKES if isinstance(self.data_type, kind)), None)
        if text and takes and text.startswith(("Could not convert", "object of type")):
            return f"{text}; {self.type_name} takes {takes}"
        if text:
            return text
        if isinstance(self.data_type, TimestampNTZType):
            return f"{self.type_name} needs a naive datetime, without tzinfo"
        return f"Spark's conversion to {self.type_name} rejects it ({type(error).__name__})"


class RowConverter:
    """Turns elements into a ``RecordBatch`` of ``schema``.

    Element shapes: a tuple or list gives the row's values by position (as many as there
    are columns); a dict by column name (a missing key is null, a key that is no column
    is an error); a ``Row`` by name when it has names, else by position. With a one-column
    schema any other element is that column's value, while a tuple, list, dict or ``Row``
    is still a row by its shape, so ``(4,)`` and ``{"value": 4}`` both give 4. When that one
    column is an array, map or struct, every element is its value instead, since a list,
    dict or tuple is then exactly such a value (``[1, 2]`` is one array, not a row).

    Values convert as Spark converts the rows a Python data source yields: a string
    column takes any value as its ``str`` (``True`` as ``"true"``); integer columns check
    their range; a ``TIMESTAMP`` takes a ``datetime``, a naive one read as local time of
    this process (Spark calls ``astimezone``), and is stored in UTC; a ``TIMESTAMP_NTZ``
    takes only a naive ``datetime``, stored as its wall time; a decimal column takes a
    ``Decimal``, rounded half even to the column's scale where the installed Spark does so
    (4.3 does, 4.0 refuses digits beyond the scale). ``None`` in a non-nullable column, or
    nested where the type does not allow null, is an error.

    Parameters
    ----------
    schema : StructType
        The rows' schema.
    fast : bool, default True
        Convert elements of one shape column by column in whole columns. ``False`` takes
        every element through its shape check and every value through Spark's own
        per-value conversion: the same batches and errors, several times slower; it is
        the reference the fast paths are tested against.

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StringType, StructType
    >>> converter = RowConverter(StructType().add("id", LongType()).add("name", StringType()))
    >>> batch, error = converter.convert([(1, "a"), {"id": 2, "name": "b"}, (3,)], 100)
    >>> batch.to_pylist()
    [{'id': 1, 'name': 'a'}, {'id': 2, 'name': 'b'}]
    >>> print(error)
    element at offset 102: cannot use (3,) (tuple): 1 value for 2 columns
    """

    def __init__(self, schema: StructType, *, fast: bool = True) -> None:
        self.schema = schema
        self.fast = fast
        self.arrow_schema = arrow_schema(schema)
        self.names = schema.fieldNames()
        self.name_set = set(self.names)
        self.columns = [
            _Column(field.name, field.dataType, self.arrow_schema.field(i).type, field.nullable,
                    fast)
            for i, field in enumerate(schema.fields)]
        only = schema.fields[0].dataType if len(schema.fields) == 1 else None
        # One column: scalars are its value; one nested column: every element is.
        self.whole_element = isinstance(only, _NESTED)
        self.single = only is not None

    def convert(self, elements: Sequence[Any],
                first_offset: int) -> tuple[pa.RecordBatch, RowConversionError | None]:
        """Convert the longest good prefix of ``elements``.

        Parameters
        ----------
        elements : sequence
            Elements in stream order; the one at index ``i`` has offset
            ``first_offset + i``.
        first_offset : int
            Offset of the first element.

        Returns
        -------
        tuple of (pyarrow.RecordBatch, RowConversionError or None)
            The rows before the first element that does not fit (all of them if all fit),
            and the error for that element.
        """
        # The element types, once: the fast paths choose by them.
        kinds = set(map(type, elements))
        if Undecodable in kinds:
            # Never a value (a STRING column would take its str()): the rows before it,
            # and it as the element that does not fit, unless one before it does not.
            index = next(i for i, e in enumerate(elements) if type(e) is Undecodable)
            batch, error = self.convert(elements[:index], first_offset)
            if error is None:
                bad = elements[index]
                error = RowConversionError(first_offset + index, None, bad, bad.reason)
            return batch, error
        if self.fast:
            batch = self._by_columns(elements, kinds)
            if batch is not None:
                return batch, None
        # Mixed shapes, or a value the fast paths cannot take: element by element, which
        # also finds the first element that does not fit.
        columns, error = self._columns(elements, first_offset, kinds)
        count = len(columns[0]) if columns else 0
        # With one column of scalars (or of nested values), the elements are its values.
        types = kinds if self.whole_element or (self.single and not any(
            issubclass(kind, (tuple, list, dict)) for kind in kinds)) else None
        try:
            arrays = [column.array(values, types) for column, values in zip(
                self.columns, columns, strict=True)]
        except Exception:
            arrays = None
        if arrays is None or not self._nulls_fit(arrays):
            bad = self._first_bad_value(columns)
            if bad is not None:
                index, column, reason = bad
                error = RowConversionError(first_offset + index, column.name,
                                           columns[self.columns.index(column)][index], reason,
                                           column.type_name)
                count = index
                columns = [values[:count] for values in columns]
                arrays = [column.array(values) for column, values in zip(self.columns, columns,
                                                                             strict=True)]
        assert arrays is not None
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
        return batch, error

    def _by_columns(self, elements: Sequence[Any], kinds: set[type]) -> pa.RecordBatch | None:
        """All of ``elements`` as a batch, each column converted whole.

        ``None`` when the elements are not all of one shape that splits into columns
        without looking at each (see :meth:`_split`), or a column does not convert: the
        element by element path decides then.
        """
        split = self._split(elements, kinds)
        if split is None:
            return None
        columns, types = split
        try:
            arrays = [column.array(values, kind) for column, values, kind in zip(
                self.columns, columns, types, strict=True)]
        except Exception:
            return None
        if not self._nulls_fit(arrays):
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _split(self, elements: Sequence[Any], kinds: set[type],
               ) -> tuple[list[list[Any]], list[set[type] | None]] | None:
        """The values column by column, and each column's value types where known, when
        every element has the same shape; ``None`` otherwise.

        What each shape means is :meth:`_row`'s: these are its cases taken a whole column
        at a time (``operator.itemgetter``, ``dict.get`` or a slice over all elements), with
        no Python call per element.
        """
        width = len(self.names)
        unknown: list[set[type] | None] = [None] * width
        if not elements:
            return None
        if self.whole_element or (self.single and not any(
                issubclass(kind, (tuple, list, dict)) for kind in kinds)):
            return [list(elements)], [kinds]
        if kinds <= {tuple, list}:
            if set(map(len, elements)) != {width}:
                return None
            return [list(map(itemgetter(i), elements)) for i in range(width)], unknown
        if kinds == {Row}:
            positions = self._row_positions(elements)
            if positions is None:
                return None
            # All values in one list, by tuple's iterator (Row's __getitem__ is Python, and
            # a tuple per row would wake the garbage collector), then every length-th.
            length = len(elements[0])
            values = list(chain.from_iterable(elements))
            return [[None] * len(elements) if i is None else values[i::length]
                    for i in positions], unknown
        if kinds == {dict}:
            if not set().union(*elements) <= self.name_set:  # every key is a column's
                return None
            return [list(map(dict.get, elements, repeat(name))) for name in self.names], unknown
        return None

    def _row_positions(self, rows: Sequence[Row]) -> list[int | None] | None:
        """Where each column's value is in every one of ``rows`` (``None``: in none, so
        null), when they all have the same field names, or all none; else ``None``."""
        lengths = set(map(len, rows))
        if len(lengths) != 1:
            return None
        (length,) = lengths
        fields = list(map(getattr, rows, repeat("__fields__"), repeat(None)))
        first = fields[0]
        if first is None:  # by position, like a tuple
            if fields.count(None) != len(fields) or length != len(self.names):
                return None
            return list(range(length))
        # By name (Row.asDict pairs names and values with zip): a Row made with keywords
        # holds its names as a list, one made by a Row factory the factory, a tuple.
        if not isinstance(first, (list, tuple)) or fields.count(first) != len(fields):
            return None
        names = list(first)[:length]
        if not self.name_set.issuperset(names):
            return None
        index = {name: i for i, name in enumerate(names)}  # a name twice: the last, as asDict
        return [index.get(name) for name in self.names]

    def _nulls_fit(self, arrays: list[pa.Array]) -> bool:
        return not any(not c.nullable and a.null_count
                       for c, a in zip(self.columns, arrays, strict=True))

    def _first_bad_value(self, columns: list[list[Any]]) -> tuple[int, _Column, str] | None:
        # The earliest bad value in any column: a later column may fail at an earlier row.
        found: tuple[int, _Column, str] | None = None
        for column, values in zip(self.columns, columns, strict=True):
            bad = column.first_bad(values)
            if bad is None and not column.nullable:
                nulls = column.array(values).is_null()
                if pc.any(nulls).as_py():
                    bad = (pc.index(nulls, True).as_py(), "the column is not nullable")
            if bad is not None and (found is None or bad[0] < found[0]):
                found = (bad[0], column, bad[1])
        return found

    def _columns(self, elements: Sequence[Any], first_offset: int,
                 kinds: set[type]) -> tuple[list[list[Any]], RowConversionError | None]:
        """The elements' values column by column, up to the first element of a wrong shape."""
        if self.whole_element:
            return [list(elements)], None
        if self.single and not any(issubclass(kind, (tuple, list, dict)) for kind in kinds):
            return [list(elements)], None
        width = len(self.names)
        rows: list[Sequence[Any]] = []
        error = None
        for index, element in enumerate(elements):
            try:
                rows.append(self._row(element, width))
            except ValueError as reason:
                error = RowConversionError(first_offset + index, None, element, str(reason))
                break
        # Column lists by itemgetter: zip(*rows) makes a tuple per row for the collector.
        return [list(map(itemgetter(i), rows)) for i in range(width)], error

    def _row(self, element: Any, width: int) -> Sequence[Any]:
        if isinstance(element, Row) and hasattr(element, "__fields__"):
            return self._by_name(element.asDict(recursive=False), "Row field")
        if isinstance(element, (tuple, list)):
            if len(element) != width:
                values = "value" if len(element) == 1 else "values"
                raise ValueError(f"{len(element)} {values} for {width} columns")
            return element
        if isinstance(element, dict):
            return self._by_name(element, "key")
        if self.single:
            return (element,)
        if element is None:
            raise ValueError(f"None is not a row (a tuple, list, dict or Row of {width} values "
                             "is needed; §2.13: a publisher must not signal None)")
        raise ValueError(f"a tuple, list, dict or Row of {width} values is needed")

    def _by_name(self, values: dict[Any, Any], what: str) -> tuple[Any, ...]:
        unknown = [k for k in values if k not in self.name_set]
        if unknown:
            raise ValueError(f"{what} {unknown[0]!r} is not a column (columns: "
                             f"{', '.join(self.names)})")
        return tuple(values.get(name) for name in self.names)
