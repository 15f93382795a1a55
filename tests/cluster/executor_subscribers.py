"""The subscriber of the cluster tests, in the test process and on the executors.

It keeps its own count of demand, so a signal beyond what it requested (§1.1) is recorded
rather than trusted to the publisher's bookkeeping. On an executor it writes what it saw,
with its process id and ancestry, to a file the test reads back. The spark fixture puts
this folder on the executors' PYTHONPATH, so a factory can name the class by reference.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from reactive_streams import Subscriber, Subscription


def ancestry() -> list[int]:
    """This process's id, then its parent's, up to init (Linux ``/proc``; elsewhere two)."""
    chain = [os.getpid(), os.getppid()]
    while chain[-1] > 1:
        try:
            with open(f"/proc/{chain[-1]}/stat") as stat:
                chain.append(int(stat.read().rsplit(")", 1)[1].split()[1]))
        except (OSError, IndexError, ValueError):
            break
    return chain


class DemandChecked(Subscriber[Any]):
    """Requests ``batch`` elements whenever the previous request has all arrived and keeps
    the first field of each element; with ``report_to``, writes a JSON report there at the
    terminal signal."""

    def __init__(self, batch: int, report_to: str | None = None) -> None:
        self.batch = batch
        self.report_to = report_to
        self.values: list[Any] = []
        self.outstanding = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self.completed = False
        self.done = threading.Event()
        self._changed = threading.Condition()
        self._subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self.outstanding = self.batch
        subscription.request(self.batch)

    def on_next(self, element: Any) -> None:
        if self.outstanding <= 0:
            self.violations.append(f"§1.1: on_next of element {len(self.values)} with no "
                                   f"demand outstanding")
        self.outstanding -= 1
        with self._changed:
            self.values.append(element[0])
            self._changed.notify_all()
        if self.outstanding == 0:
            self.outstanding = self.batch
            assert self._subscription is not None
            self._subscription.request(self.batch)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def on_complete(self) -> None:
        self.completed = True
        self._finish()

    def _finish(self) -> None:
        if self.report_to is not None:
            partial = f"{self.report_to}.partial"  # a reader never sees half a report
            with open(partial, "w") as report:
                json.dump({"pid": os.getpid(), "ancestry": ancestry(), "values": self.values,
                           "violations": self.violations, "completed": self.completed,
                           "error": repr(self.error) if self.error else None}, report)
            os.replace(partial, self.report_to)
        with self._changed:
            self.done.set()
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> None:
        """Wait until ``count`` elements arrived or the stream ended."""
        with self._changed:
            if not self._changed.wait_for(
                    lambda: len(self.values) >= count or self.done.is_set(), timeout):
                raise AssertionError(f"{len(self.values)} of {count} elements after "
                                     f"{timeout} s")
