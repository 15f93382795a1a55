"""Elements to Arrow: how the reactive source turns what a publisher signalled into the
``RecordBatch`` Spark accepts from a Python source, and names the first element that does
not fit the schema (its offset, column and value) without losing the rows before it.

Shapes: a tuple or list is a row by position, a dict by name, a ``Row`` by name (or by
position when it has no names), and any other element is the value of a one-column schema.
When that one column is an array, map or struct, every element is its value. Values
convert as Spark converts a Python data source's rows: strings accept any value (``str``),
naive datetimes are local time for ``TIMESTAMP``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

__all__ = ["RowConversionError", "RowConverter", "arrow_schema"]

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_FLOATS = (FloatType, DoubleType)
_NESTED = (ArrayType, MapType, StructType)
# Column conversion is tried on chunks of this many values to find a bad one quickly.
_CHUNK = 4096
_SHOWN = 80


class RowConversionError(ValueError):
    """An element that does not fit the schema.

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
        shown = repr(value)
        if len(shown) > _SHOWN:
            shown = shown[:_SHOWN - 3] + "..."
        where = f"column {column!r} ({column_type}) cannot hold" if column else "cannot use"
        super().__init__(f"element at offset {offset}: {where} {shown} "
                         f"({type(value).__name__}): {reason}")


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark requires of batches for ``schema`` (timestamps in UTC).

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> arrow_schema(StructType([StructField("value", LongType())]))
    value: int64
    """
    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # Spark 4.1+
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # Spark 4.0: UTC timestamps by default


def _spark_converter(data_type: DataType) -> Callable[[Any], Any]:
    # Spark's own per-value conversion for its Python data sources, so values mean here
    # what they mean there. It is private API: fall back to passing values through.
    try:
        from pyspark.sql.conversion import LocalDataToArrowConversion

        converter = LocalDataToArrowConversion._create_converter(data_type)
    except Exception:  # pragma: no cover - depends on the installed pyspark
        converter = None
    return converter if callable(converter) else (lambda value: value)


class _Column:
    """Converts one column's values to an Arrow array, fast for plain scalars."""

    def __init__(self, name: str, data_type: DataType, arrow_type: pa.DataType,
                 nullable: bool) -> None:
        self.name = name
        self.type_name = data_type.simpleString()
        self.arrow_type = arrow_type
        self.nullable = nullable
        # pyarrow converts and range-checks plain scalars itself, at C speed.
        plain = isinstance(data_type, (*_INTEGERS, *_FLOATS, BooleanType))
        self.convert_value = None if plain else _spark_converter(data_type)
        # Values of these types need no conversion even where Spark's would be called.
        self.native = {str, type(None)} if isinstance(data_type, StringType) else set()

    def array(self, values: Sequence[Any]) -> pa.Array:
        if self.convert_value is not None and not (
                self.native and set(map(type, values)) <= self.native):
            convert = self.convert_value
            return pa.array([None if v is None else convert(v) for v in values],
                            type=self.arrow_type)
        return pa.array(values, type=self.arrow_type)

    def first_bad(self, values: Sequence[Any]) -> tuple[int, str] | None:
        """Index and reason of the first value that does not convert, or ``None``."""
        for low in range(0, len(values), _CHUNK):
            chunk = values[low:low + _CHUNK]
            try:
                self.array(chunk)
                continue
            except Exception:
                pass
            for index, value in enumerate(chunk):
                try:
                    self.array([value])
                except Exception as error:
                    return low + index, _reason(error)
        return None


def _reason(error: BaseException) -> str:
    # pyarrow's messages repeat the value: keep the first line, shortened.
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if len(text) > 2 * _SHOWN:
        text = text[:2 * _SHOWN - 3] + "..."
    return text or type(error).__name__


class RowConverter:
    """Turns elements into a ``RecordBatch`` of ``schema``.

    Parameters
    ----------
    schema : StructType
        The rows' schema.

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

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.arrow_schema = arrow_schema(schema)
        self.names = schema.fieldNames()
        self.columns = [
            _Column(field.name, field.dataType, self.arrow_schema.field(i).type, field.nullable)
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
        columns, error = self._columns(elements, first_offset)
        count = len(columns[0]) if columns else 0
        try:
            arrays = [column.array(values) for column, values in zip(self.columns, columns,
                                                                         strict=True)]
        except Exception:
            arrays = None
        if arrays is None or any(not c.nullable and a.null_count
                                 for c, a in zip(self.columns, arrays, strict=True)):
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

    def _columns(self, elements: Sequence[Any],
                 first_offset: int) -> tuple[list[list[Any]], RowConversionError | None]:
        """The elements' values column by column, up to the first element of a wrong shape."""
        if self.whole_element:
            return [list(elements)], None
        if self.single and not any(issubclass(kind, (tuple, list, dict))
                                   for kind in set(map(type, elements))):
            return [list(elements)], None
        width = len(self.names)
        if (set(map(type, elements)) <= {tuple, list}
                and set(map(len, elements)) == {width}):
            return [list(values) for values in zip(*elements, strict=True)], None
        rows: list[Sequence[Any]] = []
        error = None
        for index, element in enumerate(elements):
            try:
                rows.append(self._row(element, width))
            except ValueError as reason:
                error = RowConversionError(first_offset + index, None, element, str(reason))
                break
        if not rows:
            return [[] for _ in self.names], error
        return [list(values) for values in zip(*rows, strict=True)], error

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
        raise ValueError(f"a tuple, list, dict or Row of {width} values is needed")

    def _by_name(self, values: dict[Any, Any], what: str) -> tuple[Any, ...]:
        unknown = [k for k in values if k not in self.names]
        if unknown:
            raise ValueError(f"{what} {unknown[0]!r} is not a column (columns: "
                             f"{', '.join(self.names)})")
        return tuple(values.get(name) for name in self.names)
