"""Write-ahead log of the reactive source: the rows of every micro-batch, durable before
Spark learns the batch's end offset, so a restarted query replays exactly those rows.

One Arrow IPC file per batch, named by its offsets (``<start>-<end>.arrow``), written
under a temporary name and renamed into place. A local directory is also locked by the
query run that uses it, so a restarted run waits for the stopped one to finish writing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import time
import urllib.parse
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

__all__ = ["WalEntry", "WalLockTimeout", "WriteAheadLog"]

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^(\d{20})-(\d{20})\.arrow$")
_COMMITTED = "committed"
_LOCK = ".lock"


@dataclass(frozen=True, order=True)
class WalEntry:
    """Rows for stream offsets ``start`` (inclusive) to ``end`` (exclusive)."""

    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.start:020d}-{self.end:020d}.arrow"


class WalLockTimeout(TimeoutError):
    """Another query run still holds the log's lock."""


# A URI scheme (RFC 3986): a letter, then letters, digits, "+", "-" or ".", then ":".
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def local_path(location: str) -> str | None:
    """The absolute local path ``location`` names, or ``None`` for another filesystem's URI.

    A plain path (``~`` expanded, relative to the working directory) and a ``file:`` URI
    in each form Hadoop and Spark write it (``file:/tmp/x``, ``file:///tmp/x``,
    ``file://localhost/tmp/x``, percent-escapes decoded) name a local directory.

    Raises
    ------
    ValueError
        For a ``file:`` URI that names another host or a relative path.
    """
    match = _SCHEME.match(location)
    if match is None or match.group(1).lower() != "file":
        if match is not None and len(match.group(1)) > 1:
            return None  # hdfs://, s3://, ...: pyarrow decides
        return os.path.abspath(os.path.expanduser(location))
    parsed = urllib.parse.urlsplit(location)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(
            f"a file: URI names a path on this machine, but this one names the host "
            f"{parsed.netloc!r}; write file:///{parsed.netloc}{parsed.path} or "
            f"/{parsed.netloc}{parsed.path} if that is what you meant")
    path = urllib.parse.unquote(parsed.path)
    if not path.startswith("/") or parsed.query or parsed.fragment:
        raise ValueError("a file: URI must name an absolute path, as in file:/tmp/wal or "
                         "file:///tmp/wal")
    return os.path.normpath(path)


class WriteAheadLog:
    """A directory of batches, on the local disk or any filesystem pyarrow understands.

    Parameters
    ----------
    location : str
        A local path, a ``file:`` URI (``file:/tmp/x``, ``file:///tmp/x``), or any URI
        ``pyarrow.fs.FileSystem.from_uri`` accepts (``hdfs://``, ``s3://``, ``gs://``, ...).

    Raises
    ------
    ValueError
        For a ``file:`` URI of another host or of a relative path, or a URI pyarrow
        does not understand.
    """

    def __init__(self, location: str) -> None:
        self.location = location
        self._lock_fd: int | None = None
        local = local_path(location)
        if local is None:
            try:
                self._fs, self._root = pafs.FileSystem.from_uri(location)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise ValueError(f"pyarrow does not understand this URI: {error}") from error
            self._local: str | None = None
        else:
            self._local = local
            self._fs, self._root = pafs.LocalFileSystem(), self._local

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    # -- writing -------------------------------------------------------------------------

    def probe(self) -> None:
        """Create the directory if needed and check that a file can be written there."""
        self._fs.create_dir(self._root, recursive=True)
        probe = self._path(f".probe-{uuid.uuid4().hex}")
        self._write_bytes(probe, b"probe")
        self._fs.delete_file(probe)

    def write(self, entry: WalEntry, batches: list[pa.RecordBatch], schema: pa.Schema) -> None:
        """Write the rows of ``entry`` durably; an existing entry is replaced whole."""
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        self._write_bytes(self._path(entry.name), sink.getvalue().to_pybytes())

    def _write_bytes(self, path: str, data: bytes) -> None:
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        if self._local is not None:
            # fsync the file and then the directory: after a crash the entry is either
            # whole under its final name or absent.
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            directory = os.open(os.path.dirname(path), os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        else:
            with self._fs.open_output_stream(temporary) as out:
                out.write(data)
            self._fs.move(temporary, path)

    # -- reading -------------------------------------------------------------------------

    def entries(self) -> list[WalEntry]:
        """Every entry in the log, in offset order."""
        selector = pafs.FileSelector(self._root, allow_not_found=True)
        found = []
        for info in self._fs.get_file_info(selector):
            match = _ENTRY.match(info.base_name)
            if match:
                found.append(WalEntry(int(match.group(1)), int(match.group(2))))
        return sorted(found)

    def read(self, entry: WalEntry) -> pa.Table:
        """The rows of ``entry``."""
        with self._fs.open_input_file(self._path(entry.name)) as source:
            return ipc.open_file(source).read_all()

    def committed(self) -> int | None:
        """The end offset last passed to :meth:`commit`, or ``None``."""
        try:
            with self._fs.open_input_stream(self._path(_COMMITTED)) as source:
                return int(source.read().decode().strip())
        except FileNotFoundError:
            return None

    # -- truncating ----------------------------------------------------------------------

    def claim(self, start: int) -> None:
        """Mark the log as referred to by a checkpoint that planned a batch from ``start``.

        Written as the committed mark (``start``: everything before it is committed) when
        the log has none yet, so a log that has one belongs to a checkpoint.
        """
        if self.committed() is None:
            self._write_bytes(self._path(_COMMITTED), str(start).encode())

    def commit(self, end: int) -> None:
        """Remember that Spark committed up to ``end`` and delete the entries before it."""
        self._write_bytes(self._path(_COMMITTED), str(end).encode())
        for entry in self.entries():
            if entry.end <= end:
                with contextlib.suppress(FileNotFoundError):
                    self._fs.delete_file(self._path(entry.name))

    # -- locking -------------------------------------------------------------------------

    def lock(self, timeout: float) -> None:
        """Hold the log for this process, waiting up to ``timeout`` s for another holder.

        Only a local directory can be locked; elsewhere this does nothing. The lock is
        released when the process exits, however it exits.
        """
        if self._local is None or self._lock_fd is not None:
            return
        os.makedirs(self._local, exist_ok=True)
        fd = os.open(os.path.join(self._local, _LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        pause = 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
            # flock has no timed wait; back off briefly while the other run finishes.
            if time.monotonic() >= deadline:
                os.close(fd)
                raise WalLockTimeout(
                    f"walLocation {self.location!r} is still in use by another query run "
                    f"after {timeout:.0f} s; two queries must not share a walLocation")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        self._lock_fd = fd
        log.debug("locked the write-ahead log at %s", self.location)

    def unlock(self) -> None:
        """Release the lock taken by :meth:`lock`."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None
