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

A shard whose last epoch brought nothing, or whose publisher told, after a task that
stopped short of its share, that it held nothing more (``pending()``, kept with the
epoch), is idle: idle shards are read again together, at once the first time a run finds
one, then once each ``max(fillWaitMs, 1 s)``. Under ``availableNow`` (Spark 4.2+) a run
reads every shard once, then again those whose last task kept rows and told more
pending, or, where the shard cannot tell, stopped with its share full or at its time cap,
up to ``availableNowMaxRecords`` rows; then the query ends.
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
from .run_log import WAL_LOCK_TIMEOUT_S
from .shard_log import EpochRecord, ShardLog
from .shard_task import epoch_batches, read_epoch
from .shards import Shard, is_sharded
from .upstream import Factory
from .wal import WriteAheadLog

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
        raise OptionError("shards", str(shards), f"{len(held)}: the checkpoint was written "
                          f"with {len(held)} shards, each counting its own stream; keep "
                          f"shards={len(held)}, or start a new checkpointLocation and "
                          "walLocation for another number")
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

    Driver side (Spark's source runner): plans epochs, holds the write-ahead log's folder
    for the run (its lock) and prunes the shards' logs on commit; it holds no
    subscription. ``read`` (executors) reads one shard's epoch.
    """

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        assert options.shards is not None and options.wal_location is not None
        self.options = options
        self.schema = schema
        self._factory = factory  # shipped by read_stream(): it travels with the reader
        self.shards = options.shards
        self.share = math.ceil(options.max_records_per_trigger / self.shards)
        self._current: list[int] | None = None
        self._idle_at: float | None = None  # when idle shards were last read
        self._available_now: list[int] | None = None
        self._base: list[int] = []  # each shard's position where availableNow started
        self._logs: list[ShardLog] | None = None
        self._root: WriteAheadLog | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get a copy for read(): the factory, not the driver's logs and lock.
        state = self.__dict__.copy()
        state["_logs"] = state["_root"] = None
        return state

    # -- driver side ---------------------------------------------------------------------

    def _start(self, start: list[int] | None) -> None:
        """On the runner's first call: hold the log's folder for this run, and refuse one
        that another checkpoint has used (Spark 4.2+ says when this checkpoint is new)."""
        if self._root is not None:
            return
        location = self.options.wal_location
        assert location is not None
        self._root = WriteAheadLog(location, owner_check=self.options.wal_owner_check)
        self._root.lock(WAL_LOCK_TIMEOUT_S)
        self._logs = [ShardLog(location, index, owner_check=self.options.wal_owner_check)
                      for index in range(self.shards)]
        for shard_log in self._logs:
            shard_log.wal.set_aside_torn()  # a task killed mid-write left its temporary file
        if start is not None and not any(start) and self._root.committed() is not None:
            raise RuntimeError(
                f"reactive source: walLocation {self._root.location!r} holds the shard logs "
                "of another checkpoint, but this query starts from a checkpoint that has "
                "recorded no batch. A walLocation belongs to one checkpoint: give this query "
                "one of its own (for example beside its checkpointLocation), or delete that "
                "directory to start over")
        log.info("reactive source: reading %d shards on the executors, %d rows a shard a "
                 "batch at most (%s)", self.shards, self.share, describe(self.options))

    def _log(self, index: int) -> ShardLog:
        if self._logs is None:
            self._start(None)
        assert self._logs is not None
        return self._logs[index]

    def initialOffset(self) -> dict[str, Any]:
        return _offset([0] * self.shards)

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.options.max_records_per_trigger)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, Any]:
        given = shard_offsets(start, self.shards)
        self._start(given)
        epochs = (given or self._current
                  or [self._log(index).last_epoch() for index in range(self.shards)])
        if self._available_now is _PENDING:
            self._available_now = list(epochs)  # where this availableNow run starts
            self._base = [self._position(index, epoch) for index, epoch in enumerate(epochs)]
        if self._available_now:
            planned = self._plan_available_now(epochs)
        else:
            planned = self._plan(epochs)
        self._current = planned
        return _offset(planned)

    def _last(self, index: int, epoch: int) -> EpochRecord | None:
        """Shard ``index``'s record of its epoch ``epoch`` (of the one before, where that
        has run no task yet), or None when it has none."""
        shard_log = self._log(index)
        for known in (epoch, epoch - 1):
            record = shard_log.record(known) if known > 0 else None
            if record is not None:
                return record
        return None

    def _position(self, index: int, epoch: int) -> int:
        """Shard ``index``'s position after its epoch ``epoch`` (the one before, where
        that has run no task yet): the elements of its stream kept so far."""
        record = self._last(index, epoch)
        return 0 if record is None else record.end

    def _plan(self, epochs: list[int]) -> list[int]:
        """The next epochs: every shard whose last epoch brought rows (or that has none
        yet); the idle ones, whose last epoch brought nothing or told 0 pending, together,
        first at once, then each ``max(fillWaitMs, 1 s)``."""
        idle = []
        for index, epoch in enumerate(epochs):
            record = self._log(index).record(epoch) if epoch else None
            # Told 0 after a take that stopped short of its share: nothing more is there.
            # (After a full share, more may have come meanwhile: read on at once.)
            if record is not None and (record.end == record.start or (
                    record.pending == 0 and record.ended in ("paused", "completed"))):
                idle.append(index)
        now = time.monotonic()
        pause = max(self.options.fill_wait_ms / 1000, IDLE_PAUSE_S)
        due = self._idle_at is None or now - self._idle_at >= pause
        if idle and due:
            self._idle_at = now
        return [epoch + 1 if index not in idle or due else epoch
                for index, epoch in enumerate(epochs)]

    def _plan_available_now(self, epochs: list[int]) -> list[int]:
        """An availableNow run's next epochs: every shard once, then those whose last
        epoch kept rows and told more pending, or, where the shard cannot tell, was full
        (or capped), until the run has taken availableNowMaxRecords rows."""
        since = self._available_now or []
        taken = sum(self._position(index, epoch) - self._base[index]
                    for index, epoch in enumerate(epochs))
        if taken >= self.options.available_now_max_records:
            return list(epochs)
        planned = []
        for index, epoch in enumerate(epochs):
            shard_log = self._log(index)
            record = shard_log.record(epoch) if epoch > since[index] else None
            # More is there: the shard told that it held more after a task that kept
            # rows. Where it cannot tell, more may be there: the last task stopped with
            # its share full, or at its time cap while elements still came (not at a
            # pause or the end).
            if record is None:
                more = False
            elif record.pending is not None:
                more = record.pending > 0 and record.end > record.start
            else:
                more = record.ended in ("full", "capped")
            planned.append(epoch + 1 if epoch == since[index] or more else epoch)
        return planned

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """What Spark 4.2+ shows as the source's ``latestOffset`` in query progress, not an
        offset: each shard's epochs, its ``positions`` (the elements of its stream kept
        so far) and its ``lag`` (the elements it still held when its last epoch was
        taken), the latter only for shards whose publisher can tell (``pending()``), and
        not at all when none can."""
        if self._current is None:
            return None
        positions, lag = {}, {}
        for index, epoch in enumerate(self._current):
            record = self._last(index, epoch)
            positions[str(index)] = 0 if record is None else record.end
            if record is not None and record.pending is not None:
                lag[str(index)] = record.pending
        report: dict[str, Any] = {**_offset(self._current), "positions": positions}
        if lag:
            report["lag"] = lag
        return report

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = _PENDING  # the run's start: the next latestOffset's

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first = shard_offsets(start, self.shards) or [0] * self.shards
        last = shard_offsets(end, self.shards) or [0] * self.shards
        self._start(None)
        self._current = list(last)
        return [ShardPartition(index, self.shards, epoch)
                for index in range(self.shards)
                for epoch in range(first[index] + 1, last[index] + 1)]

    def commit(self, end: dict[str, Any]) -> None:
        epochs = shard_offsets(end, self.shards) or []
        self._start(None)
        assert self._root is not None
        self._root.claim(1)  # this walLocation belongs to a checkpoint now
        for index, epoch in enumerate(epochs):
            if epoch:
                self._log(index).prune(epoch)

    def stop(self) -> None:
        if self._root is not None:
            self._root.unlock()

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
