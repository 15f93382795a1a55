"""Write-ahead log of the reactive source: the rows the publisher signalled, durable
within ``walSyncMs`` of their arrival and always before Spark learns a batch's end offset,
so a restarted query replays exactly those rows.

The log is a directory of segments, one Arrow IPC file per group commit, named by the
stream offsets it holds (``<start>-<end>.arrow``), written under a temporary name, synced
and renamed into place: under its final name a segment is whole. A batch refers to the
segments its offsets fall in; a commit removes the segments wholly before it. A write cut
short by a crash leaves only a temporary file, which the next run sets aside under
``torn/`` with a warning. A local directory is also locked by the query run that uses it,
so a restarted run waits for the stopped one to finish writing.

The rows are the stream's, so on the local disk the log keeps them to its owner: files
are created 0600 and the directories it creates 0700, whatever the umask, and no file is
opened through a symbolic link. Its folder is accepted only where nobody else can change
it: the folder and everything in it the user's and not writable by others, every folder
above it the user's or root's and not writable by others unless sticky (``/tmp``);
``walOwnerCheck=false`` turns that check off, for a filesystem whose owners and modes do not
tell who can write (a Databricks volume, a FUSE mount with access control of its own). A
segment name without a checksum (as logs of 0.1 wrote them) is read only from a log that
an older version wrote: the first time this version opens a log it writes a ``format``
mark listing such segments, and any other is ignored.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import pwd
import re
import stat
import threading
import time
import urllib.parse
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from reactive_streams.adapters.urls import redact_url

from .._testing.faults import crash_point
from ..errors import PySparkReactiveError

__all__ = ["WalDamaged", "WalEntry", "WalLockTimeout", "WalMarkDamaged", "WalNotPrivate",
           "WriteAheadLog"]

log = logging.getLogger(__name__)

# <start>-<end>[-<crc32 of the file, 8 hex digits>].arrow (logs of 0.1 had no checksum)
_ENTRY = re.compile(r"^(\d{20})-(\d{20})(?:-([0-9a-f]{8}))?\.arrow$")
_COMMITTED = "committed"
# Written by this version on its first look at a log: the checksum-less segments an older
# version left, which alone are read (see _legacy()).
_FORMAT = "format"
_FORMAT_VERSION = 2
_LOCK = ".lock"
_FILE_MODE = 0o600
_DIR_MODE = 0o700
# Never follow a symbolic link planted under one of the log's names.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_MAX_MARK = 4096  # bytes of a mark file read: a mark is a number or a short list
_TORN = "torn"
_TEMPORARY = ".tmp-"
# Schema metadata of a segment: the position key of its last element (durability.py).
KEY_METADATA = b"reactive.position_key"


@dataclass(frozen=True, order=True)
class WalEntry:
    """Rows for stream offsets ``start`` (inclusive) to ``end`` (exclusive); ``crc`` is the
    CRC-32 of the segment's file, checked when it is read (``None``: not known)."""

    start: int
    end: int
    crc: int | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        checksum = "" if self.crc is None else f"-{self.crc:08x}"
        return f"{self.start:020d}-{self.end:020d}{checksum}.arrow"


class WalLockTimeout(PySparkReactiveError, TimeoutError):
    """Another query run still holds the log's lock."""


class WalDamaged(PySparkReactiveError, RuntimeError):
    """A segment under its final name that cannot be read."""

    def __init__(self, location: str, entry: WalEntry, cause: BaseException) -> None:
        self.entry = entry
        super().__init__(
            f"the write-ahead log at {location!r} has a damaged segment {entry.name} (offsets "
            f"[{entry.start}, {entry.end})): {type(cause).__name__}: {cause}")


class WalMarkDamaged(PySparkReactiveError, RuntimeError):
    """One of the log's own marks (``committed``, ``format``) holds something else than
    this version writes there."""

    def __init__(self, location: str, name: str, held: bytes, expected: str,
                 remedy: str) -> None:
        self.name = name
        shown = held[:80].decode("utf-8", "backslashreplace")
        more = "..." if len(held) > 80 else ""
        super().__init__(
            f"the write-ahead log at {location!r} has a damaged {name!r} file: it holds "
            f"{shown!r}{more}, where {expected} is expected. {remedy}")


class WalNotPrivate(PySparkReactiveError, PermissionError):
    """A local ``walLocation`` that someone else than its user (or root) could change: the
    log's folder or something in it belongs to another user or is writable by others, or
    a folder above it lets others replace it.

    Raised before anything in the folder is read or written; nothing is changed there.
    Where the path at fault is on a FUSE or network filesystem, whose owners and modes need
    not say who can write, the message also names ``walOwnerCheck=false``.
    ``path`` is the folder or file at fault, ``reason`` the message after the option's
    name and value.
    """

    def __init__(self, location: str, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"reactive source: option walLocation={location!r} is not "
                         f"accepted: {reason}")


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
        raise ValueError("a file: URI must name an absolute path, as in file:/home/me/wal "
                         "or file:///home/me/wal")
    return os.path.normpath(path)


# Symbolic links followed on the way to the log's folder before giving up (as Linux does).
_MAX_LINKS = 40
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_NEW_LOG = ("give walLocation a path that does not exist yet in a folder only you can "
            "write (one made by tempfile.mkdtemp(), or under your home directory), where the "
            "log makes its folder, 0700")
_NEW_LOG_SENTENCE = _NEW_LOG[0].upper() + _NEW_LOG[1:]


# Where the kernel lists this process's mounts and each one's filesystem type.
_MOUNTINFO = "/proc/self/mountinfo"
# Filesystems whose owners and modes need not say who can write: FUSE (a Databricks volume,
# /dbfs, s3fs, sshfs), whose daemon decides each access, and network filesystems, whose
# server does (by its own users, ACLs or grants), the modes shown being a client's guess.
_FUSE_OR_NETWORK = ("fuse", "nfs")  # prefixes: fuse.s3fs, fuseblk, nfs4
_NETWORK = frozenset({"cifs", "smb3", "smbfs", "9p", "ceph", "afs", "lustre", "gpfs",
                      "glusterfs", "virtiofs"})
_ESCAPED = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space as \040, and so on


def mount_type(path: str) -> str | None:
    """The filesystem type (``ext4``, ``fuse``, ``nfs4``, ...) of the mount that holds the
    absolute real ``path``, as this process's mount table lists it, or ``None`` where that
    table cannot be read (not Linux)."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    found, longest = None, -1
    for line in lines:
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        mounted = _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = mounted == "/" or path == mounted or path.startswith(mounted + "/")
        # A later line for the same mount point is mounted over the earlier one.
        if inside and len(mounted) >= longest:
            found, longest = fields[fields.index("-", 6) + 1], len(mounted)
    return found


def _modes_may_not_tell(fstype: str | None) -> bool:
    return fstype is not None and (fstype.startswith(_FUSE_OR_NETWORK) or fstype in _NETWORK)


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _writers(mode: int) -> str:
    """Who besides the owner may write, by ``mode``'s bits."""
    if mode & stat.S_IWOTH:
        return "every user"
    return "its group"


class _PrivateFolder:
    """Finds (and makes, 0700, where missing) the local folder of a log, refusing it with
    :class:`WalNotPrivate` wherever someone else than the user could change what the log
    reads. Every check uses ``lstat`` and the real path that results, so nothing another
    user can redirect (a symbolic link, a folder they can rename) is trusted later.

    With ``checked`` false (``walOwnerCheck=false``) it only finds and makes the folder:
    the filesystem's own access control is then what keeps the log to its user."""

    def __init__(self, location: str, checked: bool = True) -> None:
        self.location = location
        self.checked = checked
        self.uid = os.geteuid()

    def refuse(self, path: str, reason: str) -> WalNotPrivate:
        also = "" if self.uid == 0 else " and root"
        fstype = mount_type(path)
        if _modes_may_not_tell(fstype):
            # Named only there: on a disk whose modes do say who can write, turning the
            # check off would open the log to those others, not mend anything.
            reason += (f". {path!r} is on a mount of type {fstype}, whose owners and modes "
                       f"need not say who can write: if its own access control keeps the log "
                       f"to you (as a Databricks volume's grants can), set walOwnerCheck=false")
        return WalNotPrivate(
            self.location, path,
            f"the write-ahead log must be where only you, {_who(self.uid)}{also}, can change "
            f"it, since what it holds is read back as the stream's rows; {path!r} {reason}")

    def resolve(self, given: str) -> str:
        """The real path of the log's folder ``given`` (absolute), made where missing,
        once every folder on the way to it and everything in it has passed."""
        self.above("/", os.lstat("/"))
        pending = list(reversed(given.split("/")))
        current, links = "/", 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":  # current holds no link: its parent is its name's
                current = os.path.dirname(current)
                continue
            path = os.path.join(current, part)
            held = self.made(path)
            if stat.S_ISLNK(held.st_mode):
                # Its target is read now and never again: later paths are real ones.
                if self.checked and held.st_uid not in (0, self.uid):
                    raise self.refuse(path, f"is a symbolic link owned by {_who(held.st_uid)}, "
                                      f"who can point it elsewhere. {_NEW_LOG_SENTENCE}")
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), given)
                target = os.readlink(path)
                if target.startswith("/"):
                    current = "/"
                pending.extend(reversed(target.split("/")))
                continue
            if not stat.S_ISDIR(held.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            if any(p not in ("", ".") for p in pending):
                self.above(path, held)  # the log's own folder: inside() checks it
            current = path
        self.inside(current)
        return current

    def above(self, path: str, held: os.stat_result) -> None:
        """A folder on the way to the log: who can change it can put another folder in
        the log's place (rename it, or what leads to it)."""
        if not self.checked:
            return
        if held.st_uid not in (0, self.uid):
            raise self.refuse(path, f"is owned by {_who(held.st_uid)}, who can rename what is "
                              f"in it and put a folder of theirs in its place. "
                              f"{_NEW_LOG_SENTENCE}")
        if held.st_mode & _OTHERS_WRITE and not held.st_mode & stat.S_ISVTX:
            raise self.refuse(path, f"is writable by {_writers(held.st_mode)} and has no sticky "
                              f"bit, so they can rename what is in it and put a folder of "
                              f"theirs in its place. {_NEW_LOG_SENTENCE}; or make {path!r} "
                              f"writable by its owner alone (chmod go-w) or sticky (chmod +t)")

    def inside(self, root: str) -> None:
        """The log's folder, everything in it and in its ``torn/``: the user's, writable
        by the user alone (a symbolic link's own mode means nothing, and the log never
        follows one). Deeper folders hold nothing the log uses, and a folder given by
        mistake (a home directory) is not walked whole."""
        if not self.checked:
            return
        self.check(root, os.lstat(root), root)
        for folder in (root, os.path.join(root, _TORN)):
            try:
                found = os.scandir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue  # no torn/ yet (or a file by that name, checked as an entry)
            with found:
                for entry in found:
                    self.check(entry.path, entry.stat(follow_symlinks=False), root)

    def check(self, path: str, held: os.stat_result, root: str) -> None:
        if not self.checked:
            return
        if held.st_uid != self.uid:
            raise self.refuse(path, f"is owned by {_who(held.st_uid)}: another user could "
                              f"have put rows there, so nothing in "
                              f"{'it' if path == root else repr(root)} can be trusted. "
                              f"{_NEW_LOG_SENTENCE}; if that folder is yours "
                              f"(made under another account), make everything in it yours "
                              f"again (chown -R)")
        if held.st_mode & _OTHERS_WRITE and not stat.S_ISLNK(held.st_mode):
            # Not mended here: while it was open, others could have put, renamed or
            # removed files, which no mode set now undoes.
            raise self.refuse(path, f"is writable by {_writers(held.st_mode)}: others could "
                              f"have put, renamed or removed files in the log, which the log "
                              f"does not mend by changing the mode itself. If nobody else "
                              f"could have written there, chmod -R go-w {root!r}; otherwise "
                              f"{_NEW_LOG}")

    def made(self, path: str, root: str | None = None) -> os.stat_result:
        """``path``'s own status (``lstat``), made a 0700 folder first where missing; in
        the log whose folder is ``root`` it must be a folder of the user's alone."""
        try:
            held = os.lstat(path)
        except FileNotFoundError:
            try:
                os.mkdir(path, _DIR_MODE)
            except FileExistsError:
                pass  # made meanwhile by someone else: the checks say whose it is
            else:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
                try:
                    os.fchmod(fd, _DIR_MODE)  # the umask may have taken bits off
                finally:
                    os.close(fd)
            held = os.lstat(path)
        if root is not None:
            if not stat.S_ISDIR(held.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            self.check(path, held, root)
        return held


# The local logs this process was told not to check, each said once (at INFO): the same
# log is opened at load() and by every run, and its folders are made again when removed.
_UNCHECKED: set[str] = set()
_UNCHECKED_LOCK = threading.Lock()


def _say_unchecked(path: str) -> None:
    with _UNCHECKED_LOCK:
        if path in _UNCHECKED:
            return
        _UNCHECKED.add(path)
    fstype = mount_type(path)
    log.info("reactive source: walOwnerCheck=false: the write-ahead log at %r%s is used "
             "without checking who owns it, what is in it and the folders above it, or who "
             "can write there; only that filesystem's own access control keeps its rows to "
             "this query's user", path, f" (filesystem type {fstype})" if fstype else "")


class WriteAheadLog:
    """A directory of batches, on the local disk or any filesystem pyarrow understands.

    Parameters
    ----------
    location : str
        A local path, a ``file:`` URI (``file:/tmp/x``, ``file:///tmp/x``), or any URI
        ``pyarrow.fs.FileSystem.from_uri`` accepts (``hdfs://``, ``s3://``, ``gs://``, ...).
    owner_check : bool
        Whether a local folder must be one its user alone can change (the option
        ``walOwnerCheck``). False for a filesystem whose owners and modes do not say who
        can write (a Databricks volume, a FUSE mount with access control of its own): the
        folder is then made and used as it is, and that access control alone keeps the
        log to its user. Files and folders are still made 0600 and 0700, never through a
        link. Nothing is checked on other filesystems either way.

    On the local disk the log's folder is made (0700, with any missing folder above it)
    and checked at once, before anything in it is read: see :class:`WalNotPrivate`.

    Raises
    ------
    ValueError
        For a ``file:`` URI of another host or of a relative path, or a URI pyarrow
        does not understand.
    WalNotPrivate
        For a local folder that someone else than the user (or root) could change.
    OSError
        For a local folder that cannot be made.
    """

    def __init__(self, location: str, *, owner_check: bool = True) -> None:
        # For messages only, without a URI's credentials (s3://key:secret@...).
        self.location = redact_url(location)
        self._lock_fd: int | None = None
        self._legacy_names: frozenset[str] | None = None  # see _legacy()
        self._refused: set[str] = set()  # checksum-less names already warned about
        local = local_path(location)
        if local is None:
            try:
                self._fs, self._root = pafs.FileSystem.from_uri(location)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise ValueError(f"pyarrow does not understand this URI: {error}") from error
            self._local: str | None = None
        else:
            # Its real path from now on: nothing on the way to it can be redirected.
            self._private = _PrivateFolder(self.location, owner_check)
            self._local = self._private.resolve(local)
            self._fs, self._root = pafs.LocalFileSystem(), self._local
            if not owner_check:
                _say_unchecked(self._local)

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    # -- writing -------------------------------------------------------------------------

    def probe(self, links: bool = False) -> None:
        """Create the directory if needed and check that a file can be written there
        (and, with ``links``, published: see :meth:`publish`)."""
        self._make_dirs(self._root)
        probe = self._path(f".probe-{uuid.uuid4().hex}")
        self._write_bytes(probe, b"probe")
        self._fs.delete_file(probe)
        if links:
            name = f".probe-link-{uuid.uuid4().hex}"
            try:
                self.publish(name, b"probe")
            except OSError as error:
                raise OSError(error.errno, "a file could not be published there with a "
                              f"hard link ({error.strerror}); shards need a filesystem "
                              "with hard links") from None
            finally:
                self.remove(name)
        self._legacy()

    def _make_dirs(self, path: str) -> None:
        """Create ``path`` (the log's folder or one in it) and any missing folder between;
        on the local disk each one 0700 and checked to be the user's alone, as it may
        have been removed since the log was opened (pyarrow's filesystems elsewhere set
        no modes: see docs/explanation/write-ahead-log.md)."""
        if self._local is None:
            self._fs.create_dir(path, recursive=True)
            return
        relative = os.path.relpath(path, self._local)
        folder = self._local
        try:
            self._private.made(folder, self._local)
        except FileNotFoundError:  # a folder above it went too: made again, all checked
            self._private.resolve(self._local)
        for part in ([] if relative == "." else relative.split(os.sep)):
            folder = os.path.join(folder, part)
            self._private.made(folder, self._local)

    def write(self, entry: WalEntry, batches: list[pa.RecordBatch], schema: pa.Schema,
              key: str | None = None) -> WalEntry:
        """Write the rows of ``entry`` durably and return it with its file's checksum.

        ``key`` is the position key of the entry's last element (see :meth:`key`).
        """
        if key is not None:
            schema = schema.with_metadata({**(schema.metadata or {}),
                                           KEY_METADATA: key.encode()})
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch.replace_schema_metadata(schema.metadata))
        data = sink.getvalue().to_pybytes()
        written = WalEntry(entry.start, entry.end, zlib.crc32(data))
        self._write_bytes(self._path(written.name), data)
        return written

    def publish(self, name: str, data: bytes) -> bool:
        """Write the file ``name`` durably unless it exists: True when this call wrote it,
        False when it was there already (written by another writer, perhaps at the same
        moment: exactly one of them wins). Local logs only (a hard link makes it atomic).

        Raises
        ------
        ValueError
            For a log that is not on a local (or locally mounted) filesystem.
        """
        if self._local is None:
            raise ValueError("a file is published only in a log on a local or mounted "
                             "filesystem (one with hard links)")
        return self._write_bytes(self._path(name), data, replace=False)

    def put(self, name: str, data: bytes) -> None:
        """Write the small file ``name`` durably, replacing it where it exists."""
        self._write_bytes(self._path(name), data)

    def mark(self, name: str) -> bytes | None:
        """The first bytes of the small file ``name`` (4 KiB at most), or None."""
        return self._read_mark(name)

    def get(self, name: str, limit: int) -> bytes | None:
        """The whole file ``name`` (at most ``limit`` bytes read), or None if it is not
        there."""
        try:
            with self._open(name) as source:
                data: bytes = source.read(limit)
                return data
        except FileNotFoundError:
            return None

    def remove(self, name: str) -> None:
        """Delete the file ``name``, if it is there."""
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self._path(name))

    def names(self) -> list[str]:
        """The names in the log's folder."""
        return self._names()

    def _write_bytes(self, path: str, data: bytes, replace: bool = True) -> bool:
        temporary = f"{path}{_TEMPORARY}{uuid.uuid4().hex}"
        if self._local is not None:
            # fsync the file and then the directory: after a crash the entry is either
            # whole under its final name or absent. O_EXCL: never through a link.
            self._make_dirs(os.path.dirname(path))
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                         | _CLOEXEC, _FILE_MODE)
            with open(fd, "wb") as handle:
                os.fchmod(fd, _FILE_MODE)  # whatever the umask
                if len(data) > 1:
                    handle.write(data[:len(data) // 2])
                    handle.flush()
                    crash_point("wal-write")  # a crash trial may kill us here: a torn file
                    handle.write(data[len(data) // 2:])
                else:
                    handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            won = True
            if replace:
                os.replace(temporary, path)
            else:
                try:
                    os.link(temporary, path)
                except FileExistsError:
                    won = False
                finally:
                    os.unlink(temporary)
            directory = os.open(os.path.dirname(path), os.O_RDONLY | _CLOEXEC)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            return won
        with self._fs.open_output_stream(temporary) as out:
            out.write(data)
        self._fs.move(temporary, path)
        return True

    # -- reading -------------------------------------------------------------------------

    def entries(self) -> list[WalEntry]:
        """Every entry in the log, in offset order.

        A segment without a checksum in its name is listed only if an older version wrote
        it (see :meth:`_legacy`); any other is ignored with a warning.
        """
        legacy = self._legacy()
        found = []
        for name in self._names():
            match = _ENTRY.match(name)
            if not match:
                continue
            if match.group(3) is None and name not in legacy:
                if name not in self._refused:
                    self._refused.add(name)
                    log.warning(
                        "the write-ahead log at %s: ignoring the segment %s: its name has no "
                        "checksum, and this log was not written by a version that wrote such "
                        "names (only segments listed in its %r file were), so it was put "
                        "there by something else than this log's writer", self.location, name,
                        _FORMAT)
                continue
            crc = None if match.group(3) is None else int(match.group(3), 16)
            found.append(WalEntry(int(match.group(1)), int(match.group(2)), crc))
        return sorted(found)

    def _names(self) -> list[str]:
        selector = pafs.FileSelector(self._root, allow_not_found=True)
        return [info.base_name for info in self._fs.get_file_info(selector)]

    def _legacy(self) -> frozenset[str]:
        """The checksum-less segments that an older version of this log wrote.

        Read from the ``format`` mark; a log without one is marked now: when it holds
        checksum-less segments and none with a checksum, an older version wrote it, and
        those segments (and no later ones) are read, with a warning; otherwise none is.
        """
        if self._legacy_names is not None:
            return self._legacy_names
        held = self._read_mark(_FORMAT)
        if held is None:
            names = self._names()
            old = sorted(n for n in names if (m := _ENTRY.match(n)) and m.group(3) is None)
            if any((m := _ENTRY.match(n)) and m.group(3) is not None for n in names):
                old = []  # this version's log: a checksum-less name is not its own
            if old:
                log.warning("the write-ahead log at %s was written by an older version "
                            "(segments without checksums); reading its %d segments %s to "
                            "%s, unchecked", self.location, len(old), old[0], old[-1])
            if self._fs.get_file_info(self._root).type != pafs.FileType.Directory:
                return frozenset()  # no log yet: marked once it is made
            self._write_bytes(self._path(_FORMAT), json.dumps(
                {"format": _FORMAT_VERSION, "legacy": old}).encode())
            self._legacy_names = frozenset(old)
            return self._legacy_names
        try:
            mark = json.loads(held)
            legacy = mark["legacy"]
            if mark["format"] != _FORMAT_VERSION or not isinstance(legacy, list) or \
                    not all(isinstance(n, str) and _ENTRY.match(n) for n in legacy):
                raise ValueError(legacy)
        except (ValueError, KeyError, TypeError):
            raise WalMarkDamaged(
                self.location, _FORMAT, held,
                f'{{"format": {_FORMAT_VERSION}, "legacy": [segment names]}}',
                "This version writes it on its first look at a log; if no segment name in "
                "the log lacks a checksum, writing the expected text with an empty list "
                "repairs it") from None
        self._legacy_names = frozenset(legacy)
        return self._legacy_names

    def _read_mark(self, name: str) -> bytes | None:
        """The first bytes of the mark file ``name``, or None when there is none."""
        path = self._path(name)
        try:
            if self._local is None:
                with self._fs.open_input_stream(path) as source:
                    return bytes(source.read(_MAX_MARK))
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
            with open(fd, "rb") as handle:
                return handle.read(_MAX_MARK)
        except FileNotFoundError:
            return None

    def _open(self, name: str) -> Any:
        """The file ``name``, opened for random access, never through a symbolic link on
        the local disk."""
        if self._local is None:
            return self._fs.open_input_file(self._path(name))
        return open(os.open(self._path(name), os.O_RDONLY | _NOFOLLOW | _CLOEXEC), "rb")

    def _read_file(self, name: str) -> bytes:
        with self._open(name) as source:
            return bytes(source.read())

    def read(self, entry: WalEntry) -> pa.Table:
        """The rows of ``entry``.

        Raises
        ------
        WalDamaged
            When the segment cannot be read, or holds another number of rows than its
            name says.
        """
        try:
            data = self._read_file(entry.name)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            raise WalDamaged(self.location, entry, error) from error  # a link: refused
        if entry.crc is not None and zlib.crc32(data) != entry.crc:
            raise WalDamaged(self.location, entry, ValueError(
                f"its checksum is {zlib.crc32(data):08x}, not {entry.crc:08x}"))
        try:
            table = ipc.open_file(pa.py_buffer(data)).read_all()
        except (pa.ArrowInvalid, OSError) as error:
            raise WalDamaged(self.location, entry, error) from error
        if table.num_rows != entry.end - entry.start:
            raise WalDamaged(self.location, entry, ValueError(
                f"it holds {table.num_rows} rows, not {entry.end - entry.start}"))
        return table.replace_schema_metadata(None)

    def key(self, entry: WalEntry) -> str | None:
        """The position key kept with the last element of ``entry`` (None: none)."""
        value = self.metadata(entry).get(KEY_METADATA)
        return None if value is None else value.decode()

    def metadata(self, entry: WalEntry) -> dict[bytes, bytes]:
        """The schema metadata kept with ``entry`` (its file's footer only is read)."""
        try:
            with self._open(entry.name) as source:
                metadata: dict[bytes, bytes] = ipc.open_file(source).schema.metadata or {}
        except (pa.ArrowInvalid, OSError) as error:
            raise WalDamaged(self.location, entry, error) from error
        return metadata

    def set_aside(self, name: str) -> str:
        """Move the file ``name`` into ``torn/``, where nothing reads it; return its path."""
        target = self._path(f"{_TORN}/{name}")
        self._make_dirs(self._path(_TORN))
        self._fs.move(self._path(name), target)
        return target

    def set_aside_torn(self) -> list[str]:
        """Set aside the temporary files of writes a crash cut short; return their paths.

        A segment is renamed into place only once it is whole and synced, so a temporary
        file holds rows that Spark was never told about.
        """
        selector = pafs.FileSelector(self._root, allow_not_found=True)
        moved = []
        for info in self._fs.get_file_info(selector):
            if _TEMPORARY in info.base_name and info.type == pafs.FileType.File:
                moved.append(self.set_aside(info.base_name))
        if moved:
            log.warning("the write-ahead log at %s had %d writes a crash cut short (rows "
                        "Spark was never told about); set aside: %s", self.location,
                        len(moved), ", ".join(moved))
        return moved

    def committed(self) -> int | None:
        """The end offset last passed to :meth:`commit`, or ``None``.

        Raises
        ------
        WalMarkDamaged
            When the ``committed`` file holds anything but a non-negative whole number.
        """
        held = self._read_mark(_COMMITTED)
        if held is None:
            return None
        text = held.strip()
        if not (text.isdigit() and text.isascii()):
            raise WalMarkDamaged(
                self.location, _COMMITTED, held,
                "a non-negative whole number (the stream offset up to which Spark committed "
                "the log's rows, written by this log alone)",
                "Write there the end offset of the last batch that this query's checkpoint "
                "committed, or delete the file: the log then counts as not yet claimed by a "
                "checkpoint, and the next batch planned marks it again")
        return int(text)

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
        self._make_dirs(self._local)
        path = os.path.join(self._local, _LOCK)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, _FILE_MODE)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            raise OSError(error.errno, f"the write-ahead log's lock file {path!r} is a "
                          "symbolic link, which it does not follow; remove the link") from None
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
