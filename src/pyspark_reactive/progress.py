"""Reading the ``reactive`` source's offsets from Spark's streaming progress reports.

A query's progress (``query.lastProgress``, ``query.recentProgress``, a
``StreamingQueryListener``'s events) carries each source's ``startOffset``, ``endOffset``
and ``latestOffset``. Their form depends on the Spark line and on how the report was read:
JSON text (``'{"offset": 500}'``) on Spark 4.2+ and under Spark Connect, the text of a
parsed Python dict (``"{'offset': 500}"``) in a classic session's ``query.lastProgress``
and ``query.recentProgress`` on Spark 4.0 and 4.1, an already parsed dict in the
dictionary form of a report, and ``None`` or the text ``"None"`` where there is no
offset (before a query's first micro-batch). :func:`source_offset` reads them all.
"""

from __future__ import annotations

import ast
import json
from typing import Any

__all__ = ["source_completed", "source_offset"]


def source_offset(value: Any) -> int | None:
    """The position in one of the ``reactive`` source's offsets in a progress report.

    Parameters
    ----------
    value : str, dict or None
        An offset of a source's progress (``sources[0].startOffset``, ``endOffset`` or
        ``latestOffset``, or the same keys of ``query.lastProgress["sources"][0]``), in
        any form Spark gives it: JSON text such as ``'{"offset": 500}'`` (Spark 4.2+,
        Spark Connect), a Python dict's text such as ``"{'offset': 500}"`` (a classic
        session's ``lastProgress`` and ``recentProgress`` on Spark 4.0 and 4.1), a parsed
        ``dict``, or ``None``, ``"None"`` or ``""`` for no offset.

    Returns
    -------
    int or None
        The offset: the number of rows the source has had since the stream began (the
        next batch starts there). ``None`` where there is no offset, or where ``value``
        is not an offset of the ``reactive`` source (an object with an integer
        ``"offset"``, as other sources' offsets are not).

    Examples
    --------
    >>> from pyspark_reactive.progress import source_offset
    >>> source_offset('{"offset": 500}'), source_offset("{'offset': 500}")
    (500, 500)
    >>> source_offset({"offset": 7}), source_offset("None"), source_offset(None)
    (7, None, None)

    In a progress report (``or 0``: no offset before the first micro-batch):

    >>> for p in query.recentProgress:  # doctest: +SKIP
    ...     source = p.sources[0]
    ...     start = source_offset(source.startOffset) or 0
    ...     print(p.batchId, start, source_offset(source.endOffset))
    """
    fields = _fields(value)
    offset = None if fields is None else fields.get("offset")
    if isinstance(offset, bool) or not isinstance(offset, int):
        return None
    return offset


def source_completed(value: Any) -> bool:
    """Whether a ``reactive`` source's ``latestOffset`` (in any form :func:`source_offset`
    reads) says that its publisher completed and everything it sent was taken (Spark 4.2+
    reports ``latestOffset``; :func:`~pyspark_reactive.publish_on_demand` ends on it).

    >>> from pyspark_reactive.progress import source_completed
    >>> source_completed('{"offset": 50, "complete": true}'), source_completed("{'offset': 50}")
    (True, False)
    """
    fields = _fields(value)
    return fields is not None and fields.get("complete") is True


def _fields(value: Any) -> dict[str, Any] | None:
    """An offset as a dict, from any of its forms; ``None`` for no offset or another form."""
    if isinstance(value, str):
        text = value.strip()
        if not text or text == "None":
            return None
        try:
            value = json.loads(text)
        except ValueError:
            try:
                value = ast.literal_eval(text)  # literals only: no code runs
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return None
    return value if isinstance(value, dict) else None
