"""Where the time of each micro-batch goes in a table-staging Spark Connect transport, from
the server's event log and the client's own reads, with no instrumentation in ``src``.

``connect_publish_throughput.py`` starts its Connect server with an event log
(``spark.eventLog.dir``). Spark Connect logs every operation it runs (an
``ExecutePlan``: a SQL statement, a catalog call, a write, a read) as
``SparkListenerConnectOperationStarted`` / ``Finished`` / ``Closed`` with the session
that sent it and the plan's text, which names the staging table (and so the batch) of a
write, a SQL statement and a catalog call. The batch function runs in a session of its
own (Spark 4.3 clones the client's: ``spark.sql.connect.streaming.foreachBatch.
useClonedSession``), so the client's operations are told apart from the batch function's
by the client's session id. A read's plan text is cut short by Spark before the table's
name, so the client notes its reads itself (each ``toArrow()``: start, end, rows; and the
batch it belongs to when it knows), which :func:`batch_splits` puts in its batch.

Per batch, from these points in time (wall clock, seconds):

* the batch function's write of the table: its start and end;
* *staged*: the end of the batch function's first ``ALTER TABLE`` of it after the write
  (the project's signed mark), or the write's end when there is none;
* the client's first and last read of it;
* *released*: the start of the client's last ``ALTER TABLE`` or ``DROP TABLE`` of it
  after its last read (the project's outcome mark; a plain client's drop);
* *returned*: the end of the batch function's last operation on it (the project's drop;
  a batch function that waits for the table to go: its last look);
* the next batch's write start.

the phases are::

    write        write start  -> write end
    digests      write end    -> staged          (the project: counts and digests, the mark)
    discovery    staged       -> first read      (the client's polls, its checks of the mark)
    reads        the union of the client's read intervals
    subscribers  first read   -> released, less the reads (rows offered and taken)
    settle       released     -> returned        (the outcome, the batch function's polls)
    next         returned     -> next write start (Spark commits, plans the next batch)

which add up to the batch's whole period when batches do not overlap.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHASES = ("write", "digests", "discovery", "reads", "subscribers", "settle", "next")
_CONNECT = "org.apache.spark.sql.connect.service.SparkListenerConnectOperation"
_SQL = re.compile(r'sql\s*\{[^}]*?query:\s*"(?P<verb>[A-Z]+(?: [A-Z]+)?)')


@dataclass
class Operation:
    """One Spark Connect operation, as the server's event log has it."""

    session: str
    started: float
    finished: float | None
    closed: float | None
    kind: str  # "write", "read", "catalog", "stream", a SQL verb ("ALTER TABLE", ...), "other"
    table_batch: int | None  # the batch id of the staging table it names, if any

    @property
    def end(self) -> float:
        return self.finished or self.closed or self.started


@dataclass
class Read:
    """One read the client made (``toArrow()``), by the client's clock."""

    start: float
    end: float
    rows: int
    batch: int | None = None  # None: put in its batch by time


def event_lines(folder: Path) -> Iterator[str]:
    """The lines of every event log file under ``folder`` (rolling or not, compressed with
    zstd or not), in file order."""
    for path in sorted(p for p in Path(folder).rglob("*")
                       if p.is_file() and not p.name.startswith((".", "appstatus"))):
        if path.suffix == ".zstd":
            import pyarrow as pa

            with pa.CompressedInputStream(pa.OSFile(str(path)), "zstd") as stream:
                data = stream.read()
        else:
            data = path.read_bytes()
        yield from data.decode("utf-8", errors="replace").splitlines()


def operations(lines: Iterable[str], table: re.Pattern[str]) -> list[Operation]:
    """The Connect operations in the event log ``lines``; ``table`` finds a staging table's
    name in a plan's text, its group 1 being the batch id."""
    ops: dict[str, dict[str, Any]] = {}
    for line in lines:
        if _CONNECT not in line:
            continue
        event = json.loads(line)
        name = event["Event"][len(_CONNECT):]
        op = ops.setdefault(event["operationId"], {})
        op[name] = event["eventTime"] / 1000.0
        if name == "Started":
            op["session"] = event.get("sessionId", "")
            op["text"] = event.get("statementText", "")
    found = []
    for op in ops.values():
        if "Started" not in op:
            continue
        text = op["text"]
        sql = _SQL.search(text)
        if sql:
            kind = sql["verb"]
        elif "write_stream_operation_start" in text or "streaming_query" in text:
            kind = "stream"  # the query's start (its source is a read) and its status
        elif "write_operation" in text:
            kind = "write"
        elif re.search(r"\bread\s*\{", text):
            kind = "read"
        elif text.lstrip().startswith("common") and "catalog {" in text:
            kind = "catalog"
        else:
            kind = "other"
        named = table.search(text)
        found.append(Operation(op["session"], op["Started"], op.get("Finished"),
                               op.get("Closed"), kind, int(named[1]) if named else None))
    return sorted(found, key=lambda o: o.started)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def batch_splits(ops: list[Operation], reads: list[Read], client_session: str
                 ) -> dict[int, dict[str, float]]:
    """Seconds of each phase (``PHASES``), and the batch's round trips
    (``client_ops``, ``function_ops``), by batch id; a batch whose write or reads are
    missing is left out. Empty when the batch function shares the client's session (Spark
    before 4.3): the two sides cannot be told apart."""
    function = [o for o in ops if o.session != client_session]
    client = [o for o in ops if o.session == client_session]
    writes = {o.table_batch: o for o in function
              if o.kind == "write" and o.table_batch is not None}
    if not writes or not client:
        return {}
    staged: dict[int, float] = {}
    returned: dict[int, float] = {}
    for batch_id, write in writes.items():
        after = [o for o in function if o.table_batch == batch_id and o.started >= write.end]
        marks = [o for o in after if o.kind == "ALTER TABLE"]
        staged[batch_id] = marks[0].end if marks else write.end
        returned[batch_id] = max([write.end, *(o.end for o in after)])
    order = sorted(writes)
    if not reads:  # the client read otherwise than by toArrow(): the server's view of it
        reads = [Read(o.started, o.closed or o.end, 0) for o in client if o.kind == "read"]
    by_batch: dict[int, list[Read]] = {b: [] for b in order}
    for read in reads:
        owner = read.batch
        if owner is None:  # the last batch staged before the read began
            earlier = [b for b in order if staged[b] <= read.start]
            owner = earlier[-1] if earlier else None
        if owner is not None and owner in by_batch:
            by_batch[owner].append(read)
    splits: dict[int, dict[str, float]] = {}
    for index, batch_id in enumerate(order):
        mine = by_batch[batch_id]
        if not mine:
            continue
        write = writes[batch_id]
        first = min(r.start for r in mine)
        last = max(r.end for r in mine)
        # The last, not the first: a heartbeat may touch the table while rows are still
        # being taken; nothing of the client's follows its outcome (or its drop).
        released = max((o.started for o in client if o.table_batch == batch_id
                        and o.kind in ("ALTER TABLE", "DROP TABLE") and o.started >= last),
                       default=last)
        following = writes[order[index + 1]].started if index + 1 < len(order) else None
        reads_s = _union([(r.start, r.end) for r in mine])
        end = following if following is not None else max(released, returned[batch_id])
        splits[batch_id] = {
            "write": write.end - write.started,
            "digests": staged[batch_id] - write.end,
            "discovery": first - staged[batch_id],
            "reads": reads_s,
            "subscribers": max(0.0, released - first - reads_s),
            "settle": max(0.0, returned[batch_id] - released),
            "next": following - returned[batch_id] if following is not None else 0.0,
            "period": end - write.started,
            "client_ops": sum(1 for o in client if write.started <= o.started < end),
            "function_ops": sum(1 for o in function if write.started <= o.started < end),
        }
    return splits


def median_split(splits: dict[int, dict[str, float]]) -> dict[str, float]:
    """The median of each phase over the batches (each phase's own median: they need not
    add up to the median period)."""
    if not splits:
        return {}
    keys = next(iter(splits.values())).keys()
    return {key: statistics.median(s[key] for s in splits.values()) for key in keys}


def split_text(split: dict[str, float], batches: int) -> str:
    """One line: the median of each phase in ms, and the round trips per batch."""
    if not split:
        return ("per batch: n/a (no batch found in the server's event log, or the batch "
                "function shares the client's session)")
    phases = ", ".join(f"{name} {split[name] * 1e3:.0f}" for name in PHASES)
    return (f"per batch, median of {batches} (ms): {phases}; period "
            f"{split['period'] * 1e3:.0f}; round trips: client {split['client_ops']:.0f}, "
            f"batch function {split['function_ops']:.0f}")
