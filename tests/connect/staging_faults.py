"""Batch functions for ``publish()``'s Connect transport that misbehave on purpose, on the
server: a test puts one in place of :class:`~pyspark_reactive.sink.connect.ConnectStager`
(``monkeypatch.setattr(connect_sink, "ConnectStager", ...)``) and Spark pickles it to the
server's ``foreachBatch`` worker, which imports this module (``tests/connect`` is on the
server's ``PYTHONPATH``). Kept apart from the tests so that the worker imports no more than
this."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from pyspark_reactive.sink import connect as connect_sink

#: Longest a paused batch function waits for the test before failing the batch.
PAUSE_S = 120.0


class PausedStager(connect_sink.ConnectStager):
    """Stops between its first batch's write and its staged mark (before ``_summary``),
    until the test says go: the window in which another session's write must not count.

    The folder of the two signal files is taken, when the stager is made in the test's
    process, from :attr:`folder`, and travels pickled with it: ``written`` appears when the
    batch is written, and the stager goes on once ``go`` exists.
    """

    folder: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.signals = PausedStager.folder
        self.paused = False

    def _summary(self, *args: Any) -> Any:
        if not self.paused and self.signals is not None:
            self.paused = True
            folder = Path(self.signals)
            (folder / "written").touch()
            deadline = time.monotonic() + PAUSE_S
            pause = threading.Event()  # never set: a bounded wait between looks
            while not (folder / "go").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the test did not say go within {PAUSE_S:.0f} s")
                pause.wait(0.05)
        return super()._summary(*args)


class _Unobserved:
    """What Spark Connect's ``Observation`` gives when no metrics came back with the write
    (reported for Delta writes)."""

    get: ClassVar[dict[str, Any]] = {}


class UnobservedStager(connect_sink.ConnectStager):
    """Its write's observation comes back empty."""

    def _summary(self, batch_id: int, seen: Any) -> Any:
        return super()._summary(batch_id, _Unobserved())
