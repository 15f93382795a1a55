"""A local write-ahead log is used only where nobody else can change it (issue 27, finding
4): its folder and everything in it the user's and writable by the user alone, every folder
above it the user's or root's and not writable by others unless sticky.

The cross-user tests run the other side as uid 65534 (tests/peers/other_user.py) and skip,
saying why, where this machine cannot; the rest run as any user.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType
from test_source import reactive

from pyspark_reactive.source import wal as wal_module
from pyspark_reactive.source.options import OptionError, check_wal_location, parse_source_options
from pyspark_reactive.source.reader import DefaultSource, ReactiveStreamReader
from pyspark_reactive.source.wal import WalEntry, WalNotPrivate, WriteAheadLog
from reactive_streams import RangePublisher

SCHEMA = pa.schema([("value", pa.int64())])
# The fix every refusal offers (a sentence of its own, or after "otherwise").
NEW_LOG = re.compile("give walLocation a path that does not exist yet in a folder only you "
                     "can write", re.IGNORECASE)


def arrow_file(values: list[int]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(pa.table({"value": pa.array(values, pa.int64())}))
    return bytes(sink.getvalue().to_pybytes())


def refused(location: Path | str, path: Path | str, says: str) -> str:
    """The start of the refusal of ``location`` for ``path``, and what it says of it."""
    return (re.escape(f"reactive source: option walLocation={str(location)!r} is not "
                      f"accepted: the write-ahead log must be where only you, ")
            + ".*" + re.escape(f"{str(path)!r} {says}"))


def one_row_log(location: Path) -> WalEntry:
    return WriteAheadLog(str(location)).write(
        WalEntry(0, 1), [pa.record_batch([pa.array([7])], schema=SCHEMA)], SCHEMA)


# -- another uid: a squatted folder -------------------------------------------------------

@pytest.fixture
def other_user() -> Any:
    from other_user import other_user_reason, run_as_other_user

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    return run_as_other_user


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder like /tmp (every user may make names there, sticky), reached through
    folders the other uid can enter."""
    folder = Path(tempfile.mkdtemp(prefix="wal-shared-"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# As the other uid: make the folder (0777, as squatting a predictable name gives) and plant
# a format mark naming a checksum-less segment, that segment, and one with a valid CRC.
_PLANT = """
import json, os, sys
target, legacy, planted, named = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
os.makedirs(target, exist_ok=True)
os.chmod(target, 0o777)
files = {"format": json.dumps({"format": 2, "legacy": [legacy]}).encode(),
         legacy: bytes.fromhex(planted), named: bytes.fromhex(planted)}
for name, data in files.items():
    with open(os.path.join(target, name), "wb") as handle:
        handle.write(data)
print(os.stat(target).st_uid)
"""


def plant(run_as_other_user: Any, target: Path, values: list[int]) -> list[str]:
    """Have the other uid plant ``values`` at ``target``; return the names it put there."""
    data = arrow_file(values)
    legacy = WalEntry(0, len(values)).name
    named = WalEntry(len(values), 2 * len(values), zlib.crc32(data)).name
    done = run_as_other_user(_PLANT, str(target), legacy, data.hex(), named)
    assert done.returncode == 0 and done.stdout.strip() == "65534", done.stderr
    return sorted(["format", legacy, named])


def test_a_folder_another_user_made_first_is_refused_before_anything_is_read(
        other_user: Any, shared_tmp: Path) -> None:
    target = shared_tmp / "wal"
    names = plant(other_user, target, [666, 667])
    says = "is owned by nobody (uid 65534): another user could have put rows there"
    # Where load() checks the option, and where the source's runner opens the log.
    with pytest.raises(OptionError, match=refused(target, target, says)) as raised:
        check_wal_location(str(target))
    assert NEW_LOG.search(str(raised.value)) and "tempfile.mkdtemp()" in str(raised.value)
    subscribed: list[bool] = []

    def factory(options: Any) -> RangePublisher:
        subscribed.append(True)
        return RangePublisher(0, 10)

    options = parse_source_options({"walLocation": str(target)}, shipped_factory=True)
    reader = ReactiveStreamReader(options, StructType([StructField("value", LongType())]),
                                  factory)
    try:
        with pytest.raises(WalNotPrivate, match=refused(target, target, says)):
            reader.latestOffset({"offset": 0}, None)
    finally:
        reader.stop()
    assert subscribed == []  # refused before the publisher was made
    # Nothing was changed there: no lock, no format mark of ours, the planted files as made.
    assert sorted(os.listdir(target)) == names
    assert json.loads((target / "format").read_text())["legacy"] == [names[0]]


def test_a_query_on_a_squatted_folder_fails_to_start_naming_it(
        other_user: Any, shared_tmp: Path, spark: SparkSession) -> None:
    target = shared_tmp / "wal"
    plant(other_user, target, [666, 667])
    with pytest.raises(Exception, match=refused(target, target, "is owned by nobody")):
        reactive(spark, publisher="range", walLocation=target).load()


def test_a_folder_above_the_log_made_by_another_user_is_refused(
        other_user: Any, shared_tmp: Path) -> None:
    # They cannot plant in the log itself (ours, 0700), but can put another in its place.
    done = other_user(f"import os; os.mkdir({str(shared_tmp / 'app')!r}, 0o755)")
    assert done.returncode == 0, done.stderr
    with pytest.raises(WalNotPrivate, match=refused(
            shared_tmp / "app" / "wal", shared_tmp / "app",
            "is owned by nobody (uid 65534), who can rename what is in it and put a folder "
            "of theirs in its place")):
        WriteAheadLog(str(shared_tmp / "app" / "wal"))


def test_a_file_planted_while_the_folder_was_open_is_refused_after_it_is_closed(
        other_user: Any, shared_tmp: Path) -> None:
    # Why the log does not just set its folder's mode: what came in meanwhile stays.
    target = shared_tmp / "wal"
    one_row_log(target)
    os.chmod(target, 0o777)
    with pytest.raises(WalNotPrivate, match=refused(target, target, "is writable by every user")):
        WriteAheadLog(str(target))
    done = other_user(f"open({str(target / 'committed.new')!r}, 'w').write('0')")
    assert done.returncode == 0, done.stderr
    os.chmod(target, 0o700)
    with pytest.raises(WalNotPrivate, match=refused(
            target, target / "committed.new", "is owned by nobody (uid 65534)")):
        WriteAheadLog(str(target))


def test_a_folder_made_by_another_user_between_the_check_and_mkdir_is_refused(
        other_user: Any, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The race, made certain: the other uid makes the name just before the log's mkdir.
    target = shared_tmp / "wal"
    real_mkdir = os.mkdir

    def raced(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == target:
            plant(other_user, target, [666])
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", raced)
    with pytest.raises(WalNotPrivate, match=refused(target, target, "is owned by nobody")):
        WriteAheadLog(str(target))


def test_a_log_removed_and_made_again_by_another_user_is_refused_at_the_next_write(
        other_user: Any, shared_tmp: Path) -> None:
    target = shared_tmp / "wal"
    wal = WriteAheadLog(str(target))
    shutil.rmtree(target)  # as by hand while the query runs; the name is free again
    names = plant(other_user, target, [666])
    with pytest.raises(WalNotPrivate, match=refused(target, target, "is owned by nobody")):
        wal.write(WalEntry(0, 1), [pa.record_batch([pa.array([1])], schema=SCHEMA)], SCHEMA)
    assert sorted(os.listdir(target)) == names  # no row of ours went into their folder


# -- the same user: modes, the folders above, links ---------------------------------------

@pytest.mark.parametrize(("mode", "who"), [(0o777, "every user"), (0o770, "its group"),
                                           (0o1777, "every user")])
def test_a_log_folder_others_can_write_is_refused_and_left_as_it_is(
        tmp_path: Path, mode: int, who: str) -> None:
    target = tmp_path / "wal"
    written = one_row_log(target)
    os.chmod(target, mode)
    before = sorted(os.listdir(target))
    with pytest.raises(WalNotPrivate, match=refused(target, target, f"is writable by {who}")) \
            as raised:
        WriteAheadLog(str(target))
    assert f"chmod -R go-w {str(target)!r}" in str(raised.value)
    assert sorted(os.listdir(target)) == before
    assert stat.S_IMODE(os.stat(target).st_mode) == mode  # not mended silently
    os.chmod(target, 0o700)  # the fix the message gives
    assert WriteAheadLog(str(target)).entries() == [written]


@pytest.mark.parametrize("inside", ["torn", "torn/deeper", "format", "torn/x.arrow"])
def test_anything_in_the_log_others_can_write_is_refused(tmp_path: Path, inside: str) -> None:
    target = tmp_path / "wal"
    one_row_log(target)
    path = target / inside
    if not path.exists():
        if path.suffix:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            path.write_bytes(b"")
        else:
            path.mkdir(mode=0o700, parents=True)
    os.chmod(path, 0o766 if path.is_dir() else 0o622)
    with pytest.raises(WalNotPrivate, match=refused(target, path, "is writable by every user")):
        WriteAheadLog(str(target))


@pytest.mark.parametrize(("mode", "accepted"), [(0o777, False), (0o770, False), (0o1777, True),
                                                (0o755, True), (0o700, True)])
def test_a_folder_above_others_can_write_without_the_sticky_bit_is_refused(
        tmp_path: Path, mode: int, accepted: bool) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    os.chmod(parent, mode)
    target = parent / "deeper" / "wal"  # made here, both levels
    if accepted:
        WriteAheadLog(str(target))
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(target.parent).st_mode) == 0o700
        return
    with pytest.raises(WalNotPrivate, match=refused(target, parent, "is writable by")) as raised:
        WriteAheadLog(str(target))
    assert "has no sticky bit" in str(raised.value) and NEW_LOG.search(str(raised.value))
    assert not (parent / "deeper").exists()  # refused before anything was made there


def test_a_log_reached_through_links_of_its_user_lives_at_the_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to("real")
    (real / "up").symlink_to("..")
    wal = WriteAheadLog(str(tmp_path / "link" / "up" / "real" / "wal"))
    written = wal.write(WalEntry(0, 1), [pa.record_batch([pa.array([1])], schema=SCHEMA)],
                        SCHEMA)
    assert (real / "wal" / written.name).is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
@pytest.mark.parametrize("whose", ["link above", "file inside", "folder above"])
def test_what_another_uid_owns_on_the_way_or_inside_is_refused(tmp_path: Path,
                                                               whose: str) -> None:
    target = tmp_path / "wal"
    if whose == "link above":
        (tmp_path / "real").mkdir(mode=0o700)
        (tmp_path / "link").symlink_to("real")
        os.lchown(tmp_path / "link", 65534, 65534)
        target, path, says = tmp_path / "link" / "wal", tmp_path / "link", \
            "is a symbolic link owned by nobody (uid 65534), who can point it elsewhere"
    elif whose == "file inside":
        one_row_log(target)
        path, says = target / "committed", "is owned by nobody (uid 65534)"
        path.write_text("0")
        os.chown(path, 65534, 65534)
    else:
        (tmp_path / "above").mkdir(mode=0o755)
        os.chown(tmp_path / "above", 65534, 65534)
        target, path, says = tmp_path / "above" / "wal", tmp_path / "above", \
            "is owned by nobody (uid 65534), who can rename"
    with pytest.raises(WalNotPrivate, match=refused(target, path, says)):
        WriteAheadLog(str(target))


# -- walOwnerCheck=false: a filesystem whose owners and modes do not say who can write -----

def open_to_all(folder: Path) -> Path:
    """``folder``, made writable by every user and not sticky: how a FUSE mount such as a
    Databricks volume shows its folders, its own grants deciding who may write."""
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


@pytest.mark.parametrize("value", ["no", "0", "", "off"])
def test_walOwnerCheck_takes_true_or_false_only(value: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_source_options({"publisher": "range", "walOwnerCheck": value})
    assert (raised.value.option, raised.value.value) == ("walOwnerCheck", value)
    assert str(raised.value) == (f"reactive source: option walOwnerCheck={value!r} is not "
                                 "accepted: one of true, false (default true)")
    assert parse_source_options({"publisher": "range", "WALOWNERCHECK": " False "}
                                ).wal_owner_check is False
    assert parse_source_options({"publisher": "range"}).wal_owner_check is True


def test_with_walOwnerCheck_false_folders_others_can_write_are_used_as_they_are(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # With the check on, refused: the tests above.
    target = open_to_all(tmp_path / "volume") / "wal"
    with caplog.at_level(logging.INFO, logger="pyspark_reactive.source.wal"):
        written = WriteAheadLog(str(target), owner_check=False).write(
            WalEntry(0, 1), [pa.record_batch([pa.array([7])], schema=SCHEMA)], SCHEMA)
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o700  # still made 0700
        os.chmod(target, 0o777)
        # Where load() checks the option, and where the source's runner opens the log.
        source = DefaultSource({"publisher": "range", "count": "3", "walLocation": str(target),
                                "walOwnerCheck": "false"})
        reader = source.streamReader(StructType([StructField("value", LongType())]))
        try:
            assert reader.latestOffset({"offset": 0}, None)["offset"] >= 1
        finally:
            reader.stop()
    assert WriteAheadLog(str(target), owner_check=False).entries()[0] == written
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777  # used as it is, not mended
    said = [r for r in caplog.records if "walOwnerCheck=false" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO], said  # once, for three openings
    assert f"the write-ahead log at {str(target)!r}" in said[0].getMessage()
    assert "only that filesystem's own access control keeps its rows" in said[0].getMessage()


def test_on_a_fuse_mount_the_refusal_names_walOwnerCheck(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Mounting FUSE takes privileges and a daemon: the refusal reads instead a mount table
    # in the kernel's format where the folder (a space in its name, written \040 there) is
    # a FUSE mount on an ext4 root.
    volume = open_to_all(tmp_path / "my volume")
    table = tmp_path / "mountinfo"
    escaped = str(volume).replace(" ", "\\040")
    table.write_text("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                     f"999 27 0:99 / {escaped} rw,nosuid,nodev shared:1 - fuse volumes "
                     "rw,user_id=0,group_id=0\n")
    monkeypatch.setattr(wal_module, "_MOUNTINFO", str(table))
    with pytest.raises(OptionError) as raised:
        check_wal_location(str(volume / "wal"))
    message = str(raised.value)
    assert NEW_LOG.search(message)  # the fix it gives everywhere, then the option
    assert message.endswith(
        f"(chmod +t). {str(volume)!r} is on a mount of type fuse, whose owners and modes need "
        "not say who can write: if its own access control keeps the log to you (as a "
        "Databricks volume's grants can), set walOwnerCheck=false"), message


def test_on_a_local_disk_the_refusal_does_not_name_walOwnerCheck(tmp_path: Path) -> None:
    # There the modes do say who can write: turning the check off would not mend that.
    fstype = wal_module.mount_type(os.path.realpath(tmp_path))
    if fstype is None or wal_module._modes_may_not_tell(fstype):
        pytest.skip(f"{tmp_path} is on a filesystem of type {fstype}, not a local disk")
    target = open_to_all(tmp_path / "wal")
    with pytest.raises(WalNotPrivate, match=refused(target, target, "is writable by")) \
            as raised:
        WriteAheadLog(str(target))
    assert "walOwnerCheck" not in str(raised.value)
