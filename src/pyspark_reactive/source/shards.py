"""Sharded publishers: a feed made of independent streams, each read by a task of its own.

A factory declares that it can make one shard of a feed with :func:`sharded`. The source's
option ``shards`` (N) then asks for N shards: each micro-batch reads every shard in a Spark
task of its own, on the executors (``pyspark_reactive.source.sharded``), where the factory
is called with the options, whose attribute ``shard`` is a :class:`Shard` (which one, of
how many) and whose ``resume`` (a ``ResumePoint``) says where that shard's stream goes on.

A shard must be one that can be subscribed again without loss, since a task subscribes to
it, takes its share of the batch and leaves: it resumes from the offset it is given (each
shard's elements are counted from 0, as a stream's are), or it redelivers what was not
acknowledged (give its publisher ``on_durable(count)``; see
:mod:`~pyspark_reactive.source.durability`). A factory without the declaration keeps the
one subscription in the source runner on the driver, and ``shards`` is refused for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Shard", "is_sharded", "sharded"]

#: The attribute :func:`sharded` sets on a factory.
SHARDED_ATTRIBUTE = "reactive_sharded"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Shard:
    """Which shard of a feed a factory makes.

    Attributes
    ----------
    index : int
        The shard, from 0 to ``count - 1``.
    count : int
        How many shards the feed is read as (the option ``shards``).

    Examples
    --------
    >>> Shard(1, 4)
    Shard(index=1, count=4)
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count}: the index is 0 to "
                             f"{self.count - 1}")


def sharded(factory: F) -> F:
    """Declare that ``factory`` can make one shard of its feed.

    It is then called with options whose attribute ``shard`` is a :class:`Shard`, and whose
    ``resume`` gives the offset of that shard's next element (its elements counted from 0),
    once per micro-batch, in a Spark task on an executor, when the reader gives the option
    ``shards``; without that option, once per query run on the driver with ``shard`` None,
    as any factory. The publisher it makes must resume from ``resume.offset`` or
    acknowledge upstream only in ``on_durable(count)``, so that a task that subscribes,
    takes its share and leaves loses nothing.

    Examples
    --------
    >>> from reactive_streams import IterablePublisher
    >>> @sharded
    ... def evens_and_odds(options):
    ...     shard = options.shard                 # Shard(index, count)
    ...     first = options.resume.offset * shard.count + shard.index
    ...     return IterablePublisher(lambda: iter(range(first, 100, shard.count)))
    >>> is_sharded(evens_and_odds)
    True
    """
    setattr(factory, SHARDED_ATTRIBUTE, True)
    return factory


def is_sharded(factory: object) -> bool:
    """Whether ``factory`` was declared with :func:`sharded`."""
    return getattr(factory, SHARDED_ATTRIBUTE, False) is True
