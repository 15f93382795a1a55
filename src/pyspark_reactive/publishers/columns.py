"""What the built-ins' ``format=json`` keeps of a JSON object: the fields the rows have a
column for, as Spark's ``from_json`` does (the factory options carry the reader's schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["json_columns", "keep_columns"]


def json_columns(options: Mapping[str, str]) -> frozenset[str] | None:
    """The names of the columns the source makes rows of (the factory options'
    ``schema``), for the built-ins' ``format=json``: like Spark's ``from_json``, an
    object's fields that are not columns are left out. ``None`` when the schema is not
    known (a factory called only to check its options).

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StructField, StructType
    >>> from pyspark_reactive.source.durability import FactoryOptions
    >>> schema = StructType([StructField("id", LongType())])
    >>> sorted(json_columns(FactoryOptions({}, schema=schema)))
    ['id']
    >>> json_columns({}) is None
    True
    """
    schema = getattr(options, "schema", None)
    if schema is None:
        return None
    return frozenset(field.name for field in schema.fields)


def keep_columns(value: Any, columns: frozenset[str] | None) -> Any:
    """``value`` with only the fields named in ``columns`` when it is a JSON object (a
    dict) and the columns are known; any other value as it is.

    Examples
    --------
    >>> keep_columns({"id": 7, "extra": 1}, frozenset({"id", "name"}))
    {'id': 7}
    >>> keep_columns([7, "seven"], frozenset({"id"}))
    [7, 'seven']
    """
    if columns is None or not isinstance(value, dict):
        return value
    return {name: field for name, field in value.items() if name in columns}
