# TEMPORARY stand-in until rows.py lands; deleted before commit.
from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


class RowConversionError(ValueError):
    def __init__(self, offset: int, column: str | None, value: Any, reason: str) -> None:
        self.offset, self.column, self.value = offset, column, value
        super().__init__(f"element at offset {offset}: column {column!r} cannot hold "
                         f"{value!r}: {reason}")


def arrow_schema(schema: StructType) -> pa.Schema:
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:
        return to_arrow_schema(schema)


class RowConverter:
    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.arrow = arrow_schema(schema)
        self.names = schema.fieldNames()

    def _row(self, e: Any) -> tuple:
        if isinstance(e, dict):
            return tuple(e.get(n) for n in self.names)
        if isinstance(e, (tuple, list)):
            if len(e) != len(self.names):
                raise ValueError(f"{len(e)} values for {len(self.names)} columns")
            return tuple(e)
        if len(self.names) == 1:
            return (e,)
        raise ValueError("not a row")

    def convert(self, elements: list[Any], first_offset: int):
        if len(self.names) == 1 and str(self.arrow[0].type) == "int64":
            import numpy as np
            try:
                arr = pa.array(np.fromiter(elements, dtype=np.int64, count=len(elements)))
                return pa.RecordBatch.from_arrays([arr], schema=self.arrow), None
            except Exception:
                pass
        rows = []
        error = None
        for i, e in enumerate(elements):
            try:
                row = self._row(e)
                for v, f in zip(row, self.arrow, strict=False):
                    pa.array([v], type=f.type)
            except Exception as exc:
                error = RowConversionError(first_offset + i, None, e, str(exc))
                break
            rows.append(row)
        cols = [pa.array([r[k] for r in rows], type=f.type) for k, f in enumerate(self.arrow)]
        return pa.RecordBatch.from_arrays(cols, schema=self.arrow), error
