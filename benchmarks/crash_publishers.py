"""The three publishers of the crash trials (``benchmarks/crash_trials.py``).

Each runs in Spark's source runner, named by ``.option("publisher",
"crash_publishers:<factory>")`` (the trials put this folder on the runner's PYTHONPATH),
signals ints at a steady pace against demand, and appends every element to its emission
record (the file named by ``emittedTo``) before signalling it, so that what it handed out
is known even after a SIGKILL. The three differ in what their upstream can do after a
crash:

``plain``
    A queue that hands each value out once and keeps no position of its own: the next
    value is the number of values ever handed out, read back from the emission record.
    Nothing is ever handed out twice, so whatever the source loses at a kill is gone.
``resumable``
    A sequence that can seek: each value is its stream offset. It starts where the
    source's log says the stream stands (``options.resume``) and gives each element a
    position key, so a kill loses and repeats nothing.
``acknowledging``
    A broker kept in files: an append-only message store (values 0, 1, 2, ... appended
    as demand asks for new ones) and an acknowledgement pointer. A subscription first
    redelivers every message from the pointer on, and the pointer moves only when the
    source reports elements durable (``on_durable``), as an MQTT QoS 1 session or a
    message queue would do.

Options (names are case-insensitive): ``emittedTo`` (required), ``run`` (the query run,
written into the record), ``rowsPerSecond`` (default 3000), ``stopFile`` (once that file
exists the publisher completes as soon as it owes nothing more: the plain queue at once,
the resumable sequence after the highest value it ever emitted, the broker after
redelivering every message it stores; it then creates the stop file's name followed by
``.completed``, once every element is signalled) and, for ``acknowledging``,
``brokerDir``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from reactive_streams import IterablePublisher, Publisher, Subscriber

__all__ = ["COMPLETED_SUFFIX", "Emission", "EmissionRecord", "acknowledging", "plain",
           "read_emissions", "resumable"]

DEFAULT_ROWS_PER_SECOND = 3000.0
# Added to the stop file's name for the file that says the publisher has completed.
COMPLETED_SUFFIX = ".completed"
# After a pause for demand, the pace resumes rather than catching up in a burst; it sleeps
# only when this far ahead of schedule, so a fast rate does not cost a sleep per element.
_CATCH_UP_S = 0.02
_SLEEP_AHEAD_S = 0.005


@dataclass(frozen=True)
class Emission:
    """One line of an emission record: ``value`` signalled in query run ``run`` at ``time``
    (``time.time()``, taken just before ``on_next``)."""

    run: int
    value: int
    time: float


def read_emissions(path: str | os.PathLike[str]) -> list[Emission]:
    """Every element recorded at ``path``, in the order signalled (empty if none yet).

    A line a kill cut short belongs to an element that was never signalled (the record
    is written before ``on_next``) and is left out.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    emissions = []
    for line in data.split(b"\n")[:-1]:
        fields = line.split()
        # A line a kill cut short was sealed by the next run (EmissionRecord.append): it
        # lacks a field or the time's last digits, and was never signalled.
        if len(fields) == 3 and len(fields[2].partition(b".")[2]) == 6:
            emissions.append(Emission(int(fields[0]), int(fields[1]), float(fields[2])))
    return emissions


class EmissionRecord:
    """Appends ``<run> <value> <time>`` lines to a file, each with one ``write`` call.

    The file is opened with ``O_APPEND`` and written without a user-space buffer, so a
    line is in the kernel's hands (and survives a SIGKILL of this process) before the
    element is signalled.
    """

    def __init__(self, path: str, run: int) -> None:
        self.path = path
        self.run = run
        self._fd: int | None = None

    def append(self, value: int) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size and not _ends_with_newline(self.path):
                os.write(self._fd, b"\n")  # seal a line a kill cut short: it stays apart
        os.write(self._fd, f"{self.run} {value} {time.time():.6f}\n".encode())

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


class _Pace:
    """Lets ``rate`` elements per second through, sleeping on the emitting thread."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.due = time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        self.due = max(self.due, now - _CATCH_UP_S)
        if self.due - now > _SLEEP_AHEAD_S:
            time.sleep(self.due - now)
        self.due += self.interval


class _CrashPublisher(Publisher[int]):
    """Paced ints from :meth:`_values`, each recorded before it is signalled.

    Signalling is :class:`~reactive_streams.IterablePublisher`'s: elements are taken from
    the generator only against demand, one at a time, on a thread of its own. The
    publisher serves one subscription at a time: the trials' source makes one per query
    run.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.record = EmissionRecord(_required(options, "emittedTo"), int(options.get("run", 0)))
        self.stop_file = options.get("stopFile")
        rate = float(options.get("rowsPerSecond", DEFAULT_ROWS_PER_SECOND))
        if not rate > 0:
            raise ValueError(f"crash publisher: rowsPerSecond must be a positive number, got "
                             f"{options.get('rowsPerSecond')!r}")
        self.rate = rate

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        IterablePublisher(self._emitting).subscribe(subscriber)

    def _emitting(self) -> Iterator[int]:
        pace = _Pace(self.rate)
        try:
            for value in self._values():
                pace.wait()
                self.record.append(value)  # before on_next: a kill after it shows as lost
                yield value
        finally:
            self.record.close()
        # Stopped, and the last element was signalled before this generator was resumed.
        assert self.stop_file is not None
        with open(f"{self.stop_file}{COMPLETED_SUFFIX}", "w"):
            pass

    def _values(self) -> Iterator[int]:
        raise NotImplementedError

    def _stopping(self) -> bool:
        return self.stop_file is not None and os.path.exists(self.stop_file)


class PlainQueue(_CrashPublisher):
    """Hands out 0, 1, 2, ... once each, across query runs; never repeats a value."""

    def _values(self) -> Iterator[int]:
        value = len(read_emissions(self.record.path))
        while not self._stopping():
            yield value
            value += 1


class ResumableSequence(_CrashPublisher):
    """Each value is its stream offset; starts at ``options.resume`` and keys positions."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        resume = getattr(options, "resume", None)  # None before the resume protocol
        offset = 0 if resume is None else resume.offset
        key = None if resume is None else resume.key
        if key is not None and int(key) + 1 != offset:
            # The key is where an upstream that seeks would start: the two must agree.
            raise ValueError(f"crash publisher resumable: options.resume has offset {offset} "
                             f"but key {key!r}; the key must name the value at offset - 1")
        self.start = offset

    def position_key(self, element: int) -> str:
        return str(element)

    def _values(self) -> Iterator[int]:
        # After a stop, everything up to the highest value ever emitted is still owed.
        owed = max((e.value for e in read_emissions(self.record.path)), default=-1)
        value = self.start
        while value <= owed or not self._stopping():
            yield value
            value += 1


class _Broker:
    """An append-only store of fixed-width messages and an acknowledgement pointer."""

    WIDTH = 20  # "%019d\n": message i sits at byte i * WIDTH

    def __init__(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        self.store_path = os.path.join(folder, "messages")
        self.ack_path = os.path.join(folder, "acked")
        self.fd = os.open(self.store_path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        if size % self.WIDTH:
            os.ftruncate(self.fd, size - size % self.WIDTH)  # a message a kill cut short
        self.stored = size // self.WIDTH

    def acked(self) -> int:
        try:
            with open(self.ack_path) as handle:
                return int(handle.read())
        except FileNotFoundError:
            return 0

    def acknowledge(self, upto: int) -> None:
        temporary = f"{self.ack_path}.tmp"
        with open(temporary, "w") as handle:
            handle.write(str(upto))
        os.replace(temporary, self.ack_path)

    def message(self, index: int) -> int:
        return int(os.pread(self.fd, self.WIDTH, index * self.WIDTH))

    def produce(self) -> int:
        """Append the next message (its value is its index) and return it."""
        value = self.stored
        os.pwrite(self.fd, f"{value:019d}\n".encode(), value * self.WIDTH)
        self.stored += 1
        return value


class AcknowledgingBroker(_CrashPublisher):
    """Redelivers from the acknowledgement pointer, then new messages; acks on_durable."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.broker = _Broker(_required(options, "brokerDir"))
        self._lock = threading.Lock()
        self.base: int | None = None  # the pointer when this subscription began
        self.acked = 0

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        with self._lock:
            self.base = self.acked = self.broker.acked()
        super().subscribe(subscriber)

    def on_durable(self, count: int) -> None:
        # The first `count` elements of this subscription are messages base .. base+count-1.
        with self._lock:
            assert self.base is not None, "on_durable before subscribe"
            upto = self.base + count
            if upto > self.acked:
                self.broker.acknowledge(upto)
                self.acked = upto

    def _values(self) -> Iterator[int]:
        assert self.base is not None
        index = self.base
        while index < self.broker.stored or not self._stopping():
            if index < self.broker.stored:
                yield self.broker.message(index)  # redelivery of an unacknowledged message
            else:
                yield self.broker.produce()
            index += 1


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise ValueError(f"crash publisher: option {name} is required (a file path), "
                         f"got {value!r}")
    return value


def plain(options: Mapping[str, str]) -> Publisher[int]:
    """A non-replayable queue: each value handed out once, whatever became of it."""
    return PlainQueue(options)


def resumable(options: Mapping[str, str]) -> Publisher[int]:
    """A sequence that resumes where the source's log stands (values are offsets)."""
    return ResumableSequence(options)


def acknowledging(options: Mapping[str, str]) -> Publisher[int]:
    """A broker that redelivers what the source has not reported durable."""
    return AcknowledgingBroker(options)

