"""The write-ahead log on its own: where a ``walLocation`` puts it, and what it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_reactive.options import OptionError, check_wal_location
from pyspark_reactive.wal import WalEntry, WriteAheadLog

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
