"""What each shard of a sharded feed gave each micro-batch, kept durably before anything is
acknowledged, so that a retried task, a second attempt running at once, or a restarted
query reads exactly those rows again.

A shard's log is a write-ahead log of its own (``<walLocation>/shard-<index>``, with the
folder checks of :class:`~pyspark_reactive.source.wal.WriteAheadLog`), in which epoch ``e``
(the shard's ``e``-th micro-batch) is a segment of the shard's stream offsets (its
elements counted from 0) and a mark ``epoch-<e>`` naming that segment. The mark is
published only where no mark of that epoch exists (a hard link): of two attempts of one
task, the first to publish gives the epoch's rows, and the other reads them instead of its
own. A segment is kept even when it holds no rows, for the position key it carries; its
schema metadata also says why the task stopped taking and, where the shard's publisher
can tell (``pending()``), how much the shard still held.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import pyarrow as pa

from ..errors import PySparkReactiveError
from .durability import ResumePoint
from .wal import WalEntry, WriteAheadLog

__all__ = ["EpochRecord", "ShardLog", "ShardLogDamaged", "StaleAttempt", "shard_folder"]

log = logging.getLogger("pyspark_reactive.source")

# Schema metadata of an epoch's segment: the identities the shard remembers (a JSON
# list), and the epoch.
IDENTITIES_METADATA = b"reactive.identities"
EPOCH_METADATA = b"reactive.epoch"
ENDED_METADATA = b"reactive.ended"  # why the task stopped taking (shard_task.ENDINGS)
PENDING_METADATA = b"reactive.pending"  # what the shard still held (absent: it cannot tell)
# The oldest epoch not forgotten: written by prune() before it removes anything.
_FLOOR = "floor"
_MARK = re.compile(r"^epoch-(\d{20})$")
_SEGMENT = re.compile(r"^(\d{20})-(\d{20})-([0-9a-f]{8})\.arrow$")


def shard_folder(location: str, index: int) -> str:
    """Where shard ``index`` keeps its log under the source's ``walLocation``."""
    return f"{location.rstrip('/')}/shard-{index:04d}"


class ShardLogDamaged(PySparkReactiveError, RuntimeError):
    """A shard's log lacks a record the stream needs, or holds one it cannot read."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"the shard log at {location!r}: {reason}")


class StaleAttempt(ShardLogDamaged):
    """A task's attempt outlived its epoch: Spark committed it meanwhile."""


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of a shard: the segment of its rows, offsets ``start`` to ``end`` of the
    shard's stream (its name says them), and what its footer says of the shard then.

    Attributes
    ----------
    epoch : int
        Which of the shard's micro-batches.
    entry : WalEntry
        The segment.
    ended : str
        Why the task stopped taking elements (``shard_task.ENDINGS``; "" if unknown).
    pending : int or None
        How many elements the shard still held when the task stopped taking (its
        publisher's ``pending()``, plus those signalled after the task stopped, which were
        not kept); None when the publisher cannot tell.
    """

    epoch: int
    entry: WalEntry
    ended: str = ""
    pending: int | None = None

    @property
    def start(self) -> int:
        return self.entry.start

    @property
    def end(self) -> int:
        return self.entry.end


class ShardLog:
    """The epochs of shard ``index`` of a sharded feed, under ``location`` (the source's
    ``walLocation``)."""

    def __init__(self, location: str, index: int, *, owner_check: bool = True) -> None:
        self.index = index
        self.wal = WriteAheadLog(shard_folder(location, index), owner_check=owner_check)
        # A published epoch never changes (prune() only forgets it): the runner asks for
        # the same ones at every latestOffset, so each is read once.
        self._records: dict[int, EpochRecord] = {}

    def record(self, epoch: int) -> EpochRecord | None:
        """The epoch's record, or None when no task has published it yet."""
        if epoch in self._records:
            return self._records[epoch]
        held = self.wal.mark(_mark(epoch))
        if held is None:
            return None
        name = held.decode(errors="replace").strip()
        match = _SEGMENT.match(name)
        if match is None:
            raise ShardLogDamaged(self.wal.location, f"the mark {_mark(epoch)} names "
                                  f"{name[:80]!r}, not a segment")
        entry = WalEntry(int(match[1]), int(match[2]), int(match[3], 16))
        footer = self.wal.metadata(entry)
        pending = footer.get(PENDING_METADATA, b"").decode(errors="replace")
        record = EpochRecord(epoch, entry, footer.get(ENDED_METADATA, b"").decode(),
                             int(pending) if pending.isdigit() else None)
        self._records[epoch] = record
        return record

    def last_epoch(self) -> int:
        """The latest epoch a task kept (0 when none)."""
        return max((int(m[1]) for name in self.wal.names() if (m := _MARK.match(name))),
                   default=0)

    def resume_point(self, epoch: int) -> ResumePoint:
        """Where epoch ``epoch`` starts: after the rows of the epoch before it (the
        shard's start for epoch 1).

        Raises
        ------
        ShardLogDamaged
            When the record of the epoch before is missing (epoch 2 and later): the log
            lost it, or was given to another query.
        """
        if epoch <= 1:
            return ResumePoint()
        before = self.record(epoch - 1)
        if before is None:
            raise ShardLogDamaged(
                self.wal.location, f"shard {self.index} has no record of its epoch "
                f"{epoch - 1}, where epoch {epoch} goes on: was walLocation changed, or "
                "emptied, since the checkpoint was written?")
        # The position key of its last element (carried over by an epoch that had none).
        return ResumePoint(before.end, self.wal.key(before.entry))

    def publish(self, epoch: int, start: int, batches: list[pa.RecordBatch],
                schema: pa.Schema, key: str | None,
                identities: list[str] | None = None, ended: str = "",
                pending: int | None = None) -> tuple[EpochRecord, bool]:
        """Keep ``batches`` (the shard's elements from offset ``start`` on) as epoch
        ``epoch``, with ``identities`` (the messages' identities the shard remembers, see
        :meth:`identities`) where it has some, why the task stopped taking (``ended``) and
        how much the shard still held (``pending``, where its publisher can tell), unless
        another attempt did first; return the epoch's record and whether it is this
        call's.

        Raises
        ------
        StaleAttempt
            When the epoch was committed and forgotten (:meth:`prune`) while this attempt
            ran: its rows are nobody's, and must not be acknowledged.
        """
        rows = sum(batch.num_rows for batch in batches)
        # The epoch in every segment: two attempts' segments never share a name, even
        # when both are empty from the same offset.
        metadata = {**(schema.metadata or {}), EPOCH_METADATA: str(epoch).encode(),
                    ENDED_METADATA: ended.encode()}
        if identities:
            metadata[IDENTITIES_METADATA] = json.dumps(identities).encode()
        if pending is not None:
            metadata[PENDING_METADATA] = str(pending).encode()
        entry = self.wal.write(WalEntry(start, start + rows), batches,
                               schema.with_metadata(metadata), key)
        won = self.wal.publish(_mark(epoch), entry.name.encode())
        if won and epoch < self.floor():
            # prune() writes the floor before it removes marks: a mark published after
            # the removal sees it here.
            self.wal.remove(_mark(epoch))
            self.wal.remove(entry.name)
            raise StaleAttempt(self.wal.location, f"shard {self.index}'s epoch {epoch} was "
                               "committed while this attempt of its task ran")
        record = self.record(epoch)
        assert record is not None  # published by this call or another
        if not won and record.entry.name != entry.name:
            self.wal.remove(entry.name)  # the other attempt's rows are the epoch's
        return record, won

    def rows(self, record: EpochRecord) -> pa.Table:
        return self.wal.read(record.entry)

    def identities(self, record: EpochRecord) -> list[str]:
        """The message identities the shard remembered at ``record``: its messages', those
        of the redeliveries it dropped, then the newest of the epochs before, in order."""
        held = self.wal.metadata(record.entry).get(IDENTITIES_METADATA)
        if held is None:
            return []
        try:
            found = json.loads(held)
        except ValueError as error:
            raise ShardLogDamaged(self.wal.location, f"the identities kept with epoch "
                                  f"{record.epoch} cannot be read: {error}") from None
        return [str(identity) for identity in found]

    def floor(self) -> int:
        """The oldest epoch not yet forgotten (0 when nothing was)."""
        held = self.wal.mark(_FLOOR)
        return int(held) if held and held.strip().isdigit() else 0

    def prune(self, keep: int) -> None:
        """Forget the epochs before ``keep`` (committed by Spark): its record stays, where
        the next one starts. The floor is raised first, so an attempt of a forgotten epoch
        that publishes later finds it (:meth:`publish`). Segments of attempts that lost (or
        died before publishing) and end before the kept epoch go too."""
        kept = self.record(keep)
        if kept is None or keep <= self.floor():
            return
        self.wal.put(_FLOOR, str(keep).encode())
        self._records = {e: r for e, r in self._records.items() if e >= keep}
        for name in self.wal.names():
            mark = _MARK.match(name)
            if mark is not None and int(mark[1]) < keep:
                held = self.wal.mark(name)
                self.wal.remove(name)
                named = held.decode(errors="replace").strip() if held else ""
                if _SEGMENT.match(named) and named != kept.entry.name:
                    self.wal.remove(named)
        for name in self.wal.names():
            orphan = _SEGMENT.match(name)
            if orphan is not None and int(orphan[2]) < kept.start:
                self.wal.remove(name)


def _mark(epoch: int) -> str:
    return f"epoch-{epoch:020d}"
