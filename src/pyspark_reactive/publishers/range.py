"""The built-in publisher ``range``: consecutive integers, paced or as fast as demand allows,
so that demos and tests need nothing else. Like every built-in, a factory called with the
reader's options in the source runner.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from reactive_streams import IterablePublisher, Publisher, RangePublisher
from reactive_streams.api import UNBOUNDED

from ..source.options import OptionError, OptionSpec, OptionSpecs
from ..source.shards import sharded

__all__ = ["OPTION_SPECS", "range_publisher"]

#: The options of ``range``, as the reference shows them.
OPTION_SPECS = OptionSpecs([
    OptionSpec("start", "The first integer.", "int", 0, minimum=-2**63, maximum=2**63 - 1),
    OptionSpec("count", "How many integers; without it the stream is endless.", "int",
               minimum=0, shown_default="endless"),
    OptionSpec("rowsPerSecond", "The most integers a second, signalled on a thread of the "
               "publisher's own; without it, as fast as demand allows.",
               accepted="a positive number", shown_default="unpaced"),
])


def range_publisher(options: Mapping[str, str]) -> Publisher[int]:
    """Publisher of consecutive integers: the built-in ``range``. It is resumable: element
    ``k`` of the stream is always ``start + k``, so a restarted query's publisher begins
    right after the last element the write-ahead log holds (``options.resume``, see
    :mod:`pyspark_reactive.source.durability`), and a hard kill loses and repeats nothing.
    It is sharded (:func:`~pyspark_reactive.sharded`): with the source's option ``shards``
    (n), shard i signals ``start + i``, ``start + i + n``, ..., its element ``k`` being
    ``start + i + k * n``; ``rowsPerSecond`` is divided among the shards, each task pacing
    its shard's share while it reads (nothing is signalled between tasks, so over time
    the feed is slower than that). With a ``count``, a shard's publisher tells the task
    how many of its integers it has not signalled (``pending()``, the shard's lag).

    Parameters
    ----------
    options : mapping of str to str
        :data:`OPTION_SPECS`: ``start`` (int, default 0); ``count`` (int >= 0; omitted:
        endless); ``rowsPerSecond`` (positive number; omitted: as fast as demand allows). With an
        attribute ``resume`` (a ``ResumePoint``), the elements before its offset are
        left out.

    Returns
    -------
    Publisher of int
        A synchronous ``RangePublisher`` when unpaced; otherwise a publisher that
        signals on a thread of its own at the given rate. A shard's is an
        ``IterablePublisher`` (paced or not) with ``pending()``.

    Raises
    ------
    OptionError
        For a value of ``start``, ``count`` or ``rowsPerSecond`` that is not accepted.

    Examples
    --------
    >>> from reactive_streams import collect
    >>> collect(range_publisher({"start": "3", "count": "4"}))
    [3, 4, 5, 6]
    """
    lower = {k.lower(): v for k, v in options.items()}
    start = OPTION_SPECS.read(lower, "start")
    count = OPTION_SPECS.read(lower, "count")
    stop = UNBOUNDED if count is None else start + count
    resume = getattr(options, "resume", None)
    skipped = resume.offset if resume is not None else 0
    rate_text = OPTION_SPECS.given(lower, "rowsPerSecond")
    rate = None
    if rate_text is not None:
        try:
            rate = float(rate_text)
        except ValueError:
            rate = -1.0
        if not rate > 0:
            raise OptionError("rowsPerSecond", rate_text, "a positive number")
    shard = getattr(options, "shard", None)
    if shard is not None:
        # Shard i of n: the integers start + i, start + i + n, ...; its element k is
        # start + i + k * n, and the rate is shared among the shards.
        first = min(stop, start + shard.index + skipped * shard.count)
        step = shard.count
        return _RangeShard(range(first, stop, step), None if rate is None else rate / step,
                           endless=count is None)
    first = min(stop, start + skipped)
    if rate is None:
        return RangePublisher(first, stop - first)
    return IterablePublisher(lambda: _paced(range(first, stop), rate))


range_publisher = sharded(range_publisher)
range_publisher.default_schema = lambda options: "value BIGINT"  # type: ignore[attr-defined]
range_publisher.option_specs = OPTION_SPECS  # type: ignore[attr-defined]


class _RangeShard(IterablePublisher[int]):
    """A shard of ``range``: the core ``IterablePublisher`` over the shard's integers, which
    can tell how many of them its latest subscription has not signalled (``pending()``,
    see :mod:`pyspark_reactive.source.durability`)."""

    def __init__(self, values: range, rate: float | None, endless: bool) -> None:
        self._values = values
        self._rate = rate
        # len() refuses a range longer than sys.maxsize; a count may be longer.
        self._total = None if endless else max(0, -(-(values.stop - values.start)
                                                      // values.step))
        self._signalled = 0  # by the latest subscription
        super().__init__(self._subscribed)

    def _subscribed(self) -> Iterator[int]:
        self._signalled = 0
        values = self._values if self._rate is None else _paced(self._values, self._rate)
        for value in values:
            self._signalled += 1  # counted as it goes to be signalled, not while paced
            yield value

    def pending(self) -> int | None:
        """How many integers of the shard's stream the latest subscription has not
        signalled; None when the stream is endless (no ``count``)."""
        return None if self._total is None else self._total - self._signalled


def _paced(values: range, rate: float) -> Iterator[int]:
    # Element k is due at began + k / rate; sleeping only until the next one is due keeps
    # the rate exact over time and lets a cancel take effect within one interval.
    began = time.monotonic()
    for k, value in enumerate(values):
        delay = began + k / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield value
