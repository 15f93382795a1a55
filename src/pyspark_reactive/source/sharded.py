"""The reactive source over a sharded feed: each micro-batch reads every shard in a Spark
task of its own, on the executors, and no row passes through the driver.

Offsets are per shard and count epochs, not rows: ``{"shards": {"0": e0, "1": e1, ...}}``,
where ``e`` is how many micro-batches have read that shard. Spark fixes a batch's end
offsets on the driver (``latestOffset``) before any task runs, and the driver cannot see
how many elements a pushing shard will have: so a batch's end offset says "epoch e of
shard i", and the task that reads it fixes the epoch's rows in the shard's log
(:mod:`~pyspark_reactive.source.shard_log`) before anything is acknowledged. A retried or
second attempt, or a restarted query, reads that record again: one outcome per epoch.
A partition carries a shard's index and epoch, not rows.

The number of shards is fixed for a checkpoint (each shard's elements are counted in its
own stream): a restart with another ``shards`` value, or from a checkpoint the source
wrote reading on the driver, is refused, naming the option.

A shard whose last epoch brought nothing is read again only after ``max(fillWaitMs,
1 s)``: an idle feed costs at most one micro-batch (a Spark job, an offsets and a commit
file in the checkpoint) a second, and one task per shard. Under ``availableNow`` (Spark
4.2+) a run reads every shard once, then again only those whose last epoch was full, up
to ``availableNowMaxRecords`` rows; then the query ends.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .admission import ReadMaxRows, SupportsTriggerAvailableNow
from .options import OptionError, SourceOptions, describe, resolve_factory
from .shard_log import ShardLog
from .shard_task import epoch_batches, read_epoch
from .shards import Shard, is_sharded
from .upstream import Factory

__all__ = ["ShardPartition", "ShardedStreamReader", "shard_offsets"]

log = logging.getLogger("pyspark_reactive.source")

#: The shortest pause before a shard whose last epoch was empty is read again.
IDLE_PAUSE_S = 1.0
# An availableNow run was prepared; its start is the next latestOffset's.
_PENDING: list[int] = []


class ShardPartition(InputPartition):
    """One shard's epoch of a micro-batch: which shard, of how many, and which epoch."""

    def __init__(self, shard: int, shards: int, epoch: int) -> None:
        super().__init__(shard)
        self.shard = shard
        self.shards = shards
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"ShardPartition(shard={self.shard}, shards={self.shards}, epoch={self.epoch})"


def shard_offsets(offset: Mapping[str, Any] | None, shards: int) -> list[int] | None:
    """The epochs of ``offset`` (``{"shards": {"0": e0, ...}}``), one a shard.

    Raises
    ------
    OptionError
        For an offset of the source reading on the driver (``{"offset": n}``), or of
        another number of shards: the checkpoint cannot go on with this ``shards``.
    ValueError
        For anything else that is not such an offset.
    """
    if offset is None:
        return None
    if "offset" in offset and "shards" not in offset:
        raise OptionError("shards", str(shards), "no shards with this checkpoint: it was "
                          f"written reading the feed on the driver (offset {dict(offset)}); "
                          "go on without the option shards, or start a new "
                          "checkpointLocation and walLocation")
    held = offset.get("shards")
    if not isinstance(held, Mapping):
        raise ValueError(f"reactive source: offset {offset!r} is not "
                         '{"shards": {"0": e0, ...}}')
    if len(held) != shards:
        raise OptionError("shards", str(shards), f"{len(held)}, as the checkpoint was "
                          f"written with {len(held)} shards, each counting its own stream; "
                          "a new number of shards needs a new checkpointLocation and "
                          "walLocation")
    epochs = []
    for index in range(shards):
        value = held.get(str(index))
        if type(value) is not int or value < 0:
            raise ValueError(f"reactive source: offset {offset!r} has no epoch >= 0 for "
                             f"shard {index}")
        epochs.append(value)
    return epochs


def _offset(epochs: Sequence[int]) -> dict[str, dict[str, int]]:
    return {"shards": {str(index): epoch for index, epoch in enumerate(epochs)}}


class ShardedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the ``reactive`` source with the option ``shards``.

    Driver side (Spark's source runner): plans epochs and prunes the shards' logs on
    commit; it holds no subscription. ``read`` (executors) reads one shard's epoch.
    """

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        assert options.shards is not None
        self.options = options
        self.schema = schema
        self._factory = factory  # shipped by read_stream(): it travels with the reader
        self.shards = options.shards
        self.share = math.ceil(options.max_records_per_trigger / self.shards)
        self._current: list[int] | None = None
        self._idle_since: dict[int, float] = {}
        self._available_now: list[int] | None = None
        self._said = False

    # -- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return _offset([0] * self.shards)

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.options.max_records_per_trigger)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, Any]:
        if not self._said:
            self._said = True
            log.info("reactive source: reading %d shards on the executors, %d rows a shard "
                     "a batch at most (%s)", self.shards, self.share, describe(self.options))
        epochs = (shard_offsets(start, self.shards) or self._current
                  or [self._log(index).last_epoch() for index in range(self.shards)])
        if self._available_now is _PENDING:
            self._available_now = list(epochs)  # where this availableNow run starts
        if self._available_now:
            planned = self._plan_available_now(epochs)
        else:
            now = time.monotonic()
            planned = [epoch + 1 if self._plan(index, epoch, now) else epoch
                       for index, epoch in enumerate(epochs)]
        self._current = planned
        return _offset(planned)

    def _plan(self, index: int, epoch: int, now: float) -> bool:
        """Whether shard ``index``, which has had ``epoch`` epochs, is read in the next:
        unless its last epoch brought nothing, and it has been idle less than the pause."""
        record = self._log(index).record(epoch) if epoch else None
        if record is None or record.end > record.start:
            self._idle_since.pop(index, None)
            return True
        idle = self._idle_since.setdefault(index, now)
        if now - idle >= max(self.options.fill_wait_ms / 1000, IDLE_PAUSE_S):
            self._idle_since[index] = now
            return True
        return False

    def _plan_available_now(self, epochs: list[int]) -> list[int]:
        """An availableNow run's next epochs: every shard once, then those whose last
        epoch was full, while the run has taken fewer than availableNowMaxRecords rows."""
        since = self._available_now or []
        taken = sum(self._rows(index, since[index], epoch)
                    for index, epoch in enumerate(epochs))
        planned = []
        for index, epoch in enumerate(epochs):
            record = self._log(index).record(epoch) if epoch > since[index] else None
            full = record is not None and record.end - record.start >= self.share
            more = epoch == since[index] or (
                full and taken < self.options.available_now_max_records)
            planned.append(epoch + 1 if more else epoch)
        return planned

    def _rows(self, index: int, since: int, until: int) -> int:
        """Rows shard ``index`` gave from epoch ``since`` (exclusive) to ``until``."""
        if until <= since:
            return 0
        shard_log = self._log(index)
        first, last = shard_log.record(since + 1), shard_log.record(until)
        if first is None or last is None:
            return 0
        return last.end - first.start

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark 4.2+ shows this as the source's "latestOffset" in query progress: each
        # shard's epochs, and its position (the elements of its stream read so far).
        if self._current is None:
            return None
        positions = {}
        for index, epoch in enumerate(self._current):
            # The epoch just planned has no record until its task runs: the one before.
            shard_log = self._log(index)
            record = next(filter(None, (shard_log.record(e) for e in (epoch, epoch - 1)
                                        if e > 0)), None)
            positions[str(index)] = 0 if record is None else record.end
        return {**_offset(self._current), "positions": positions}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = _PENDING  # the run's start: the next latestOffset's

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first = shard_offsets(start, self.shards) or [0] * self.shards
        last = shard_offsets(end, self.shards) or [0] * self.shards
        self._current = list(last)
        return [ShardPartition(index, self.shards, epoch)
                for index in range(self.shards)
                for epoch in range(first[index] + 1, last[index] + 1)]

    def commit(self, end: dict[str, Any]) -> None:
        epochs = shard_offsets(end, self.shards) or []
        for index, epoch in enumerate(epochs):
            if epoch:
                self._log(index).prune(epoch)

    def _log(self, index: int) -> ShardLog:
        assert self.options.wal_location is not None
        return ShardLog(self.options.wal_location, index,
                        owner_check=self.options.wal_owner_check)

    def stop(self) -> None:
        pass  # no subscription lives on the driver

    # -- executors -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardPartition)
        factory = self._factory or resolve_factory(self.options.publisher)
        if not is_sharded(factory):
            raise OptionError("shards", str(self.shards),
                              f"only for a factory declared @sharded; publisher="
                              f"{self.options.publisher!r} is not")
        shard_log, record = read_epoch(self.options, self.schema, factory,
                                       Shard(partition.shard, partition.shards),
                                       partition.epoch, self.share)
        return iter(epoch_batches(shard_log, record))
