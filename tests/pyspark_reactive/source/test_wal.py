"""The write-ahead log on its own: where a ``walLocation`` puts it, and what it refuses."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_reactive.source.options import OptionError, check_wal_location
from pyspark_reactive.source.wal import WalDamaged, WalEntry, WalMarkDamaged, WriteAheadLog

# Also runs on every older Spark line (./dev test): the write-ahead log.
pytestmark = pytest.mark.spark_lines

SCHEMA = pa.schema([("value", pa.int64())])


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "file://localhost{}", "FILE:{}",
                                  "{}"])
def test_a_local_location_in_every_form_hadoop_writes_names_the_same_directory(
        form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Spark prints local paths as file:/tmp/x; a relative directory named "file:" under
    # the runner's working directory would lose the log at the next restart.
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    target = tmp_path / "the wal"
    location = form.format(str(target).replace(" ", "%20") if "file" in form.lower()
                           else str(target))
    log = WriteAheadLog(location)
    log.write(WalEntry(0, 2), [pa.record_batch([pa.array([1, 2])], schema=SCHEMA)], SCHEMA)
    assert os.listdir(work) == []
    assert WriteAheadLog(str(target)).entries() == [WalEntry(0, 2)]


@pytest.mark.parametrize(("location", "says"), [
    ("file://tmp/wal", "names the host 'tmp'; write file:///tmp/wal"),
    ("file:relative/wal", "must name an absolute path"),
])
def test_a_file_uri_that_is_not_a_local_absolute_path_is_refused(location: str,
                                                                 says: str) -> None:
    with pytest.raises(OptionError, match=f"walLocation={location!r}.*{says}"):
        check_wal_location(location)


# -- hardening (finding 11) ---------------------------------------------------------------


def one_row_log(location: Path) -> tuple[WriteAheadLog, WalEntry]:
    wal = WriteAheadLog(str(location))
    wal.probe()
    written = wal.write(WalEntry(0, 1), [pa.record_batch([pa.array([7])], schema=SCHEMA)],
                        SCHEMA)
    return wal, written


def legacy_segment(location: Path, entry: WalEntry, values: list[int]) -> None:
    """A segment as 0.1 wrote it: no checksum in its name."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_batch(pa.record_batch([pa.array(values)], schema=SCHEMA))
    (location / entry.name).write_bytes(sink.getvalue().to_pybytes())


def test_the_log_is_its_owners_alone_whatever_the_umask(tmp_path: Path) -> None:
    location = tmp_path / "parent" / "wal"
    previous = os.umask(0)
    try:
        wal, written = one_row_log(location)
        wal.lock(1)
        wal.commit(0)
        (location / "x.tmp-torn").write_bytes(b"")
        wal.set_aside_torn()
    finally:
        os.umask(previous)
        wal.unlock()
    modes = {path.relative_to(tmp_path).as_posix(): stat.S_IMODE(path.stat().st_mode)
             for path in [*tmp_path.rglob("*")] if path.name != "x.tmp-torn"}
    assert modes == {"parent": 0o700, "parent/wal": 0o700, "parent/wal/torn": 0o700,
                     f"parent/wal/{written.name}": 0o600, "parent/wal/committed": 0o600,
                     "parent/wal/format": 0o600, "parent/wal/.lock": 0o600}


def test_a_checksumless_segment_is_ignored_in_a_log_this_version_wrote(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wal, written = one_row_log(tmp_path / "wal")
    planted = WalEntry(1, 3)
    legacy_segment(tmp_path / "wal", planted, [666, 667])
    # A new reader (a restarted run) as well as the writer.
    for reader in (wal, WriteAheadLog(str(tmp_path / "wal"))):
        assert reader.entries() == [written]
    assert f"ignoring the segment {planted.name}: its name has no checksum" in caplog.text


def test_a_log_an_older_version_wrote_is_read_and_later_plants_are_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    location = tmp_path / "wal"
    location.mkdir()
    old = [WalEntry(0, 2), WalEntry(2, 3)]
    legacy_segment(location, old[0], [1, 2])
    legacy_segment(location, old[1], [3])
    wal = WriteAheadLog(str(location))
    assert wal.entries() == old
    assert wal.read(old[0]).column(0).to_pylist() == [1, 2]
    assert "was written by an older version" in caplog.text
    legacy_segment(location, WalEntry(3, 4), [666])
    assert WriteAheadLog(str(location)).entries() == old


@pytest.mark.parametrize("held", [b"twelve", b"-3", b"", b"\xff\xfe" * 100])
def test_a_damaged_committed_file_names_the_log_the_file_and_what_it_held(
        tmp_path: Path, held: bytes) -> None:
    wal, _ = one_row_log(tmp_path / "wal")
    (tmp_path / "wal" / "committed").write_bytes(held)
    with pytest.raises(WalMarkDamaged) as raised:
        wal.committed()
    message = str(raised.value)
    assert f"the write-ahead log at {str(tmp_path / 'wal')!r} has a damaged 'committed' " \
           "file: it holds " in message
    assert repr(held[:80].decode("utf-8", "backslashreplace")) in message
    assert "a non-negative whole number" in message


def test_a_damaged_format_mark_names_the_log_and_the_file(tmp_path: Path) -> None:
    one_row_log(tmp_path / "wal")
    (tmp_path / "wal" / "format").write_text('{"format": 2, "legacy": "all"}')
    with pytest.raises(WalMarkDamaged, match=r"has a damaged 'format' file: it holds "
                                             r"'\{\"format\": 2, \"legacy\": \"all\"\}'"):
        WriteAheadLog(str(tmp_path / "wal")).entries()


def test_no_file_of_the_log_is_opened_through_a_symbolic_link(tmp_path: Path) -> None:
    location = tmp_path / "wal"
    wal, written = one_row_log(location)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"someone else's")
    (location / ".lock").symlink_to(elsewhere)
    with pytest.raises(OSError, match=r"lock file .* is a symbolic link"):
        WriteAheadLog(str(location)).lock(1)
    (location / "committed").symlink_to(elsewhere)
    with pytest.raises(OSError):
        wal.committed()
    (location / written.name).unlink()
    (location / written.name).symlink_to(elsewhere)
    with pytest.raises(WalDamaged):
        wal.read(written)
    assert elsewhere.read_bytes() == b"someone else's"
