"""Peak memory of a process tree, by role: the Python driver, its JVM, the source runner and
the other Python workers Spark starts, sampled while a benchmark runs.

Spark's processes are the driver's descendants (DESIGN.md's process map), so one sampler
over the tree sees them all, including the short-lived ones::

    with ProcessTreeMemory() as memory:      # this process and every descendant
        query.awaitTermination()
    memory.peaks_mib   # {"driver python": 180.2, "driver JVM": 610.5, "source runner": 150.3, ...}

Each sample sums the resident set size (RSS) of the processes of each role; a role's peak
is the largest such sum. Sampling every ~50 ms can miss a spike shorter than that; RSS
counts shared pages once per process, so sums over forked workers overstate a little.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import psutil

MIB = 1 << 20
DRIVER_PYTHON = "driver python"
DRIVER_JVM = "driver JVM"
SOURCE_RUNNER = "source runner"
PYTHON_WORKERS = "python workers"
OTHER = "other"
ROLES = (DRIVER_PYTHON, DRIVER_JVM, SOURCE_RUNNER, PYTHON_WORKERS)


def role(process: psutil.Process, root: int) -> str:
    """What a process of the tree is, from its pid and command line."""
    if process.pid == root:
        return DRIVER_PYTHON
    try:
        cmdline = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return OTHER
    return role_of_cmdline(cmdline)


def role_of_cmdline(cmdline: list[str]) -> str:
    """The role of a descendant of the driver with this command line.

    >>> role_of_cmdline(["/usr/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit"])
    'driver JVM'
    >>> role_of_cmdline(["python", "-m", "pyspark.sql.streaming.python_streaming_source_runner"])
    'source runner'
    >>> role_of_cmdline(["python", "-m", "pyspark.daemon", "pyspark.worker"])
    'python workers'
    >>> role_of_cmdline(["bash", "spark-submit"])
    'other'
    """
    if not cmdline:
        return OTHER
    program = os.path.basename(cmdline[0])
    if program == "java":
        return DRIVER_JVM
    if any("streaming_source_runner" in part for part in cmdline):
        return SOURCE_RUNNER
    if program.startswith("python") or any(part.startswith("pyspark.") for part in cmdline):
        return PYTHON_WORKERS
    return OTHER


@dataclass
class Seen:
    """One process of the tree as the sampler saw it (times are epoch seconds)."""

    pid: int
    role: str
    command: str  # the module or program, for reports: "pyspark.daemon pyspark.worker"
    created: float
    first_seen: float
    last_seen: float
    peak_mib: float = 0.0


def command_of(cmdline: list[str]) -> str:
    """A short name for a command line: what follows ``-m``, else the program.

    >>> command_of(["/x/bin/python", "-m", "pyspark.daemon", "pyspark.worker"])
    'pyspark.daemon pyspark.worker'
    >>> command_of(["/usr/lib/jvm/bin/java", "-cp", "a.jar", "-Xmx1g"])
    'java'
    """
    if "-m" in cmdline:
        return " ".join(cmdline[cmdline.index("-m") + 1:][:2])
    return os.path.basename(cmdline[0]) if cmdline else "?"


class ProcessTreeMemory:
    """Samples the RSS of ``root`` and its descendants on a thread, by :func:`role`.

    Parameters
    ----------
    root : int, optional
        The tree's root; this process by default.
    interval : float
        Seconds between samples.

    Attributes
    ----------
    peaks_mib : dict of str to float
        Per role, the largest sum of its processes' RSS in one sample, in MiB.
    largest_process_mib : dict of str to float
        Per role, the largest RSS a single process of it reached, in MiB.
    samples : int
        How many samples were taken.
    timeline : list of (float, dict of str to float)
        Seconds since the start and the per-role sums in MiB, for plots.
    processes : list of Seen
        Every process seen, with its role, command, creation time and peak RSS; a
        process that lived less than one interval may be missing.
    """

    def __init__(self, root: int | None = None, interval: float = 0.05) -> None:
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.peaks_mib: dict[str, float] = {}
        self.largest_process_mib: dict[str, float] = {}
        self.samples = 0
        self.timeline: list[tuple[float, dict[str, float]]] = []
        self._seen: dict[tuple[int, float], Seen] = {}  # (pid, create time) -> Seen
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._began = 0.0

    def __enter__(self) -> ProcessTreeMemory:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("ProcessTreeMemory: already started")
        self._began = time.monotonic()
        self.sample()  # at least one sample, however short the run
        self._thread = threading.Thread(target=self._run, name="process-tree-memory",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (idempotent), after one last sample."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """Take one sample now."""
        try:
            root = psutil.Process(self.root)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        sums: dict[str, float] = {}
        now = time.time()
        for process in processes:
            try:
                rss = process.memory_info().rss / MIB
                seen = self._process(process, now)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # ended between the listing and the reading
            seen.last_seen = now
            seen.peak_mib = max(seen.peak_mib, rss)
            kind = seen.role
            sums[kind] = sums.get(kind, 0.0) + rss
            if rss > self.largest_process_mib.get(kind, 0.0):
                self.largest_process_mib[kind] = rss
        for kind, total in sums.items():
            if total > self.peaks_mib.get(kind, 0.0):
                self.peaks_mib[kind] = total
        self.samples += 1
        self.timeline.append((time.monotonic() - self._began, sums))

    def _process(self, process: psutil.Process, now: float) -> Seen:
        # The command line is read once per process (pids are reused: keyed with the
        # creation time too).
        key = (process.pid, process.create_time())
        seen = self._seen.get(key)
        if seen is None:
            command = "python (driver)" if process.pid == self.root else command_of(
                process.cmdline())
            seen = Seen(process.pid, role(process, self.root), command, key[1], now, now)
            self._seen[key] = seen
        return seen

    @property
    def processes(self) -> list[Seen]:
        return sorted(self._seen.values(), key=lambda seen: seen.created)

    def peak(self, kind: str) -> float:
        """The peak of one role in MiB (0.0 when no process of it was seen)."""
        return self.peaks_mib.get(kind, 0.0)

    def summary(self) -> str:
        """One line: each role's peak, for the console."""
        return ", ".join(f"{kind} {self.peaks_mib[kind]:.0f} MiB"
                         for kind in (*ROLES, OTHER) if kind in self.peaks_mib)
