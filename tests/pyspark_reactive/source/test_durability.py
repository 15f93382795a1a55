"""The write-ahead log keeps rows as they arrive, and the two durability protocols.

These drive the source's reader the way Spark's runner does (``latestOffset``,
``partitions``, ``commit``), in this process or, where a hard kill is the point, in a
child process that kills itself with SIGKILL. The crash trials (``tests/crash``) do the
same through whole Spark queries.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.partitions import ArrowPartition
from pyspark_reactive.source.reader import ReactiveStreamReader
from pyspark_reactive.source.wal import WalEntry, WriteAheadLog
from reactive_streams import Publisher, RangePublisher, Subscriber

# Also runs on every older Spark line (./dev test): the write-ahead log's durability.
pytestmark = pytest.mark.spark_lines

SCHEMA = StructType([StructField("value", LongType())])


@pytest.fixture
def readers() -> Iterator[Callable[..., ReactiveStreamReader]]:
    """Makes readers as the runner does; stops them and restores SIGTERM's handler."""
    previous = signal.getsignal(signal.SIGTERM)
    made: list[ReactiveStreamReader] = []

    def make(factory: Callable[[Any], Any], **options: Any) -> ReactiveStreamReader:
        parsed = parse_source_options({k: str(v) for k, v in options.items()},
                                      shipped_factory=True)
        reader = ReactiveStreamReader(parsed, SCHEMA, factory)
        made.append(reader)
        return reader

    yield make
    for reader in made:
        reader.stop()
    signal.signal(signal.SIGTERM, previous)


def _logged(wal: Path) -> list[tuple[int, int, list[int]]]:
    log = WriteAheadLog(str(wal))
    return [(e.start, e.end, log.read(e).column("value").to_pylist()) for e in log.entries()]


def _wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _rows(reader: ReactiveStreamReader, start: int, end: int) -> list[int]:
    values: list[int] = []
    for partition in reader.partitions({"offset": start}, {"offset": end}):
        assert isinstance(partition, ArrowPartition)
        for batch in partition.batches():
            values += batch.column(0).to_pylist()
    return values


def test_rows_reach_the_log_as_they_arrive_each_once(readers: Any, tmp_path: Path) -> None:
    # After the first batch the publisher refills (demand 1,000 more): those rows must be
    # in the log soon, with no further latestOffset, and no offset written twice.
    wal = tmp_path / "wal"
    reader = readers(lambda o: RangePublisher(0, 10**9), maxRecordsPerTrigger=1000,
                     walLocation=wal, walSyncMs=20)
    assert reader.latestOffset({"offset": 0}, None) == {"offset": 1000}
    assert _wait_for(lambda: sum(e - s for s, e, _ in _logged(wal)) >= 2000), _logged(wal)
    segments = _logged(wal)
    assert segments[0][0] == 0
    for (_, end, _), (start, _, _) in itertools.pairwise(segments):
        assert start == end, f"segments must be contiguous and not overlap: {segments}"
    assert [v for _, _, values in segments for v in values] == list(range(2000))
    # The second batch refers to the segments already written: nothing is written again.
    files = sorted(os.listdir(wal))
    assert reader.latestOffset({"offset": 1000}, None) == {"offset": 2000}
    assert _rows(reader, 1000, 2000) == list(range(1000, 2000))
    assert [f for f in sorted(os.listdir(wal)) if f.endswith(".arrow")][:len(segments)] == [
        f for f in files if f.endswith(".arrow")]


_KILLED_WHILE_ARRIVING = """
import itertools, os, signal, sys, time
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.reader import ReactiveStreamReader
from pyspark_reactive.source.wal import WriteAheadLog
from reactive_streams.publishers import IterablePublisher

wal, record, killed, writes = sys.argv[1:5]
fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
wfd = os.open(writes, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
write = WriteAheadLog.write

def timed_write(self, entry, *args, **kwargs):
    # When each group commit's write (and fsync) began and ended, and its offsets.
    began = time.time()
    os.write(wfd, f"began {began:.6f}\\n".encode())
    write(self, entry, *args, **kwargs)
    os.write(wfd, f"ended {began:.6f} {time.time():.6f} {entry.start} {entry.end}\\n".encode())

WriteAheadLog.write = timed_write

def elements():
    began = time.monotonic()
    for k in itertools.count():
        delay = began + k / 2000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        os.write(fd, f"{k} {time.time():.6f}\\n".encode())  # before on_next
        yield k

options = parse_source_options({"maxRecordsPerTrigger": "100000", "walLocation": wal,
                                "walSyncMs": "50", "fillWaitMs": "0"}, shipped_factory=True)
schema = StructType([StructField("value", LongType())])
reader = ReactiveStreamReader(options, schema, lambda o: IterablePublisher(elements))
reader.initialOffset()
reader.latestOffset({"offset": 0}, None)  # subscribes; no batch is cut after this
time.sleep(1.5)
with open(killed, "w") as handle:
    handle.write(f"{time.time():.6f}")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _writes(writes: Path) -> tuple[list[tuple[float, float, int, int]], float | None]:
    """The group commit writes of the run (began, ended, first offset, end offset), and
    when the one under way at the kill began, if one was."""
    done: list[tuple[float, float, int, int]] = []
    under_way = None
    for line in writes.read_text().splitlines():
        what, *values = line.split()
        if what == "began":
            under_way = float(values[0])
        else:
            began, ended, start, end = values
            done.append((float(began), float(ended), int(start), int(end)))
            under_way = None
    return done, under_way


def test_a_hard_kill_loses_only_what_arrived_in_the_last_sync_interval(tmp_path: Path) -> None:
    wal, record, killed = tmp_path / "wal", tmp_path / "emitted", tmp_path / "killed"
    writes = tmp_path / "writes"
    done = subprocess.run([sys.executable, "-c", _KILLED_WHILE_ARRIVING, str(wal),
                           str(record), str(killed), str(writes)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    kill_time = float(killed.read_text())
    emitted = {int(k): float(t) for k, t in (line.split() for line in
                                             record.read_text().splitlines())}
    logged = [v for _, _, values in _logged(wal) for v in values]
    assert len(logged) == len(set(logged)), "a row was logged twice"
    assert set(logged) <= set(emitted)
    # A row waits for its group commit at most walSyncMs (50) after the write before it
    # ended; a write (and its fsync) takes 2 ms on a quiet disk, 0.3 s beside a process
    # that writes and syncs 200 MB in a loop. 100 ms more for the threads' scheduling.
    group_commits, under_way = _writes(writes)
    previous = 0.0
    for began, ended, start, end in group_commits:
        waited = began - min(emitted[k] for k in range(start, end))
        assert waited < 0.050 + previous + 0.100, (
            f"rows {start} to {end} waited {waited * 1000:.0f} ms for their group commit "
            f"(walSyncMs 50, the write before took {previous * 1000:.0f} ms)")
        previous = ended - began
    # So the kill loses at most the rows of the last interval and of the write under way,
    # which may have waited for the write before it.
    if under_way is not None:
        previous += kill_time - under_way
    must_have = {k for k, t in emitted.items() if t < kill_time - (0.050 + previous + 0.100)}
    assert len(must_have) > 1000, "the publisher emitted too little to judge"
    lost = sorted(must_have - set(logged))
    assert not lost, (f"{len(lost)} rows signalled more than walSyncMs + the last write "
                      f"({previous * 1000:.0f} ms) + 100 ms before the kill are not in the "
                      f"log, first {lost[:5]}")


_RANGE_RUN = """
import os, signal, sys, time
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.reader import ReactiveStreamReader
from pyspark_reactive.source.wal import WalEntry, WriteAheadLog

wal, phase = sys.argv[1], sys.argv[2]
options = parse_source_options({"publisher": "range", "maxRecordsPerTrigger": "100",
                                "walLocation": wal, "walSyncMs": "10"})
schema = StructType([StructField("value", LongType())])
reader = ReactiveStreamReader(options, schema, None)
log = WriteAheadLog(wal)

def values(start, end):
    return [v for p in reader.partitions({"offset": start}, {"offset": end})
            for b in p.batches() for v in b.column(0).to_pylist()]

if phase == "first":
    assert reader.latestOffset({"offset": 0}, None) == {"offset": 100}
    print(values(0, 100))  # Spark planned batch 0 and was killed before committing it
    deadline = time.monotonic() + 30
    while sum(e.end - e.start for e in log.entries()) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
else:
    # As Spark restarts: plan the recorded batch again, then ask what follows it.
    seen = values(0, 100)
    start = 100
    while start < 450:
        end = reader.latestOffset({"offset": start}, None)["offset"]
        seen += values(start, end)
        reader.commit({"offset": end})
        start = end
    print(seen)
"""


def test_range_resumes_after_the_log_at_a_hard_kill(tmp_path: Path) -> None:
    # The built-in range is resumable: after a kill its new publisher starts right after
    # the last element in the log, so the stream has no gap and no repeat.
    wal = tmp_path / "wal"
    first = subprocess.run([sys.executable, "-c", _RANGE_RUN, str(wal), "first"],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    logged_end = max(e for _, e, _ in _logged(wal))
    assert logged_end >= 200  # the refill was durable before the kill
    second = subprocess.run([sys.executable, "-c", _RANGE_RUN, str(wal), "second"],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    seen = json.loads(second.stdout.strip().splitlines()[-1])
    # Offsets from logged_end on come from the new publisher: without resuming it would
    # start again at 0 there.
    assert seen[:450] == list(range(450)), "a gap or a repeat at the restart"


class _Acknowledging(Publisher[int]):
    """A range that writes down each ``on_durable`` call with what the log held then."""

    def __init__(self, wal: Path | None) -> None:
        self.wal = wal
        self.calls: list[tuple[int, int]] = []  # (count, rows in the log at the call)
        self.threads: set[str] = set()

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        RangePublisher(0, 10**9).subscribe(subscriber)

    def on_durable(self, count: int) -> None:
        held = sum(e - s for s, e, _ in _logged(self.wal)) if self.wal else -1
        self.calls.append((count, held))
        self.threads.add(threading.current_thread().name)


def test_on_durable_follows_the_log(readers: Any, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    publisher = _Acknowledging(wal)
    reader = readers(lambda o: publisher, maxRecordsPerTrigger=500, walLocation=wal,
                     walSyncMs=10)
    end = 0
    for _ in range(4):
        end = reader.latestOffset({"offset": end}, None)["offset"]
    assert end == 2000
    assert _wait_for(lambda: bool(publisher.calls) and publisher.calls[-1][0] >= 2500)
    counts = [count for count, _ in publisher.calls]
    assert counts == sorted(set(counts)), "on_durable counts must increase"
    for count, held in publisher.calls:
        assert held >= count, f"on_durable({count}) came when the log held {held} rows"


def test_on_durable_without_a_log_follows_spark_commits(readers: Any) -> None:
    publisher = _Acknowledging(None)
    reader = readers(lambda o: publisher, maxRecordsPerTrigger=500)
    assert reader.latestOffset({"offset": 0}, None) == {"offset": 500}
    assert reader.latestOffset({"offset": 500}, None) == {"offset": 1000}
    assert not _wait_for(lambda: bool(publisher.calls), timeout=0.3), \
        "nothing is durable before Spark commits"
    reader.commit({"offset": 500})
    assert _wait_for(lambda: [c for c, _ in publisher.calls] == [500])
    reader.commit({"offset": 1000})
    assert _wait_for(lambda: [c for c, _ in publisher.calls] == [500, 1000])
    assert publisher.threads == {"reactive-source-wal"}, "one thread, serially"


def test_a_failed_group_commit_keeps_its_rows_and_retries_them(
        readers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = tmp_path / "wal"
    publisher = _Acknowledging(wal)
    write = WriteAheadLog.write
    failed = threading.Event()

    def fail_once(self: WriteAheadLog, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "reactive-source-wal" and not failed.is_set():
            failed.set()
            raise OSError(28, "No space left on device (injected once)")
        return write(self, *args, **kwargs)

    monkeypatch.setattr(WriteAheadLog, "write", fail_once)
    reader = readers(lambda o: publisher, maxRecordsPerTrigger=500, walLocation=wal,
                     walSyncMs=5)
    seen: list[int] = []
    start = 0
    while start < 3000:
        end = reader.latestOffset({"offset": start}, None)["offset"]
        seen += _rows(reader, start, end)
        start = end
        if start == 500:
            # The refill arrives at once; the log's thread takes it within 5 ms and its
            # write fails. The next batches must still hold every row, in order.
            assert failed.wait(10), "the log's thread made no group commit"
    assert seen == list(range(3000)), "no row lost or moved by the failed write"
    logged = [v for _, _, values in _logged(wal) for v in values]
    assert logged[:3000] == list(range(3000))
    assert all(held >= count for count, held in publisher.calls)


def test_a_log_that_cannot_be_written_fails_the_query_naming_it(
        readers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = tmp_path / "wal-{run}"  # braces in the path must not upset the message

    def full(self: WriteAheadLog, *args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    reader = readers(lambda o: RangePublisher(0, 10**9), maxRecordsPerTrigger=500,
                     walLocation=wal)
    monkeypatch.setattr(WriteAheadLog, "write", full)
    with pytest.raises(RuntimeError) as raised:
        reader.latestOffset({"offset": 0}, None)
    message = str(raised.value)
    assert f"writing to the write-ahead log at '{wal}' failed" in message
    assert "No space left on device" in message and "restart" in message


def _segment(wal: Path, start: int, values: list[int]) -> Path:
    table = pa.table({"value": pa.array(values, pa.int64())})
    entry = WriteAheadLog(str(wal)).write(WalEntry(start, start + len(values)),
                                          table.to_batches(), table.schema)
    return wal / entry.name


def test_a_torn_write_is_set_aside_with_a_warning(readers: Any, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    wal = tmp_path / "wal"
    _segment(wal, 0, list(range(10)))
    whole = _segment(wal, 10, list(range(10, 20)))
    torn = wal / f"{whole.name}.tmp-0123abcd"
    torn.write_bytes(whole.read_bytes()[:57])
    whole.unlink()  # the write of [10, 20) was cut short before its rename
    with caplog.at_level(logging.WARNING):
        reader = readers(lambda o: RangePublisher(10, 10**9), maxRecordsPerTrigger=100,
                         walLocation=wal)
        assert reader.latestOffset({"offset": 0}, None) == {"offset": 10}
    assert not torn.exists() and (wal / "torn" / torn.name).exists()
    assert "cut short" in caplog.text and torn.name in caplog.text
    assert _rows(reader, 0, 10) == list(range(10))
    assert reader.latestOffset({"offset": 10}, None) == {"offset": 110}
    assert _rows(reader, 10, 110) == list(range(10, 110))


def test_a_damaged_segment_spark_never_learned_of_is_set_aside(
        readers: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wal = tmp_path / "wal"
    _segment(wal, 0, list(range(10)))
    damaged = _segment(wal, 10, list(range(10, 20)))
    after = _segment(wal, 20, list(range(20, 30)))
    damaged.write_bytes(damaged.read_bytes()[:-30])  # truncated
    with caplog.at_level(logging.WARNING):
        reader = readers(lambda o: RangePublisher(10, 10**9), maxRecordsPerTrigger=100,
                         walLocation=wal)
        # Spark recorded the batch [0, 10) and planned it; it never learned of [10, 30).
        assert _rows(reader, 0, 10) == list(range(10))
        assert reader.latestOffset({"offset": 10}, None) == {"offset": 110}
    assert "damaged segment" in caplog.text and damaged.name in caplog.text
    assert "[10, 30)" in caplog.text, "the warning names the offsets set aside"
    assert (wal / "torn" / damaged.name).exists() and (wal / "torn" / after.name).exists()
    assert _rows(reader, 10, 110) == list(range(10, 110))


def test_a_damaged_segment_holding_the_restart_offset_is_set_aside(
        readers: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Group commits and batches do not line up: Spark committed [0, 5) of the segment
    # [0, 10) and never learned of the rest, so the segment is set aside, not a failure.
    wal = tmp_path / "wal"
    damaged = _segment(wal, 0, list(range(10)))
    damaged.write_bytes(damaged.read_bytes()[:-30])
    with caplog.at_level(logging.WARNING):
        reader = readers(lambda o: RangePublisher(5, 10**9), maxRecordsPerTrigger=100,
                         walLocation=wal)
        assert reader.latestOffset({"offset": 5}, None) == {"offset": 105}
    assert "damaged segment" in caplog.text and (wal / "torn" / damaged.name).exists()
    assert _rows(reader, 5, 105) == list(range(5, 105))


def test_a_damaged_segment_spark_planned_fails_naming_file_and_offsets(
        readers: Any, tmp_path: Path) -> None:
    wal = tmp_path / "wal-{run}"
    damaged = _segment(wal, 0, list(range(10)))
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2:len(data) // 2 + 16] = b"\xff" * 16  # corrupted in the middle
    damaged.write_bytes(bytes(data))
    reader = readers(lambda o: RangePublisher(10, 10**9), maxRecordsPerTrigger=100,
                     walLocation=wal)
    with pytest.raises(RuntimeError) as raised:
        # Spark restarts and plans again the batch [0, 10) its checkpoint recorded.
        _rows(reader, 0, 10)
    message = str(raised.value)
    assert damaged.name in message and "[0, 10)" in message and "damaged" in message
