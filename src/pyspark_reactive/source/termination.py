"""How the source's query run ends in the runner: Spark's SIGTERM, a JVM that is gone, or
``stop()``.

Spark usually ends the runner with SIGTERM rather than ``stop()`` (see DESIGN.md). A
SIGTERM that arrives during one of Spark's calls waits for it (its rows may be half
logged), then the run shuts down and the process exits; one that arrives between calls
shuts down at once. If the JVM that started the runner is gone, the runner is orphaned:
every bounded wait looks at the parent process and the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Termination"]

log = logging.getLogger("pyspark_reactive.source")


class Termination:
    """The end of one run: ``shutdown`` (which cancels the subscription and keeps the rows
    held) is called once the run ends, then the process exits.

    The parent process is the one the runner had when this was made; the SIGTERM handler is
    installed by :meth:`install`, which the runner calls on its main thread.
    """

    def __init__(self, shutdown: Callable[[], None]) -> None:
        self._shutdown = shutdown
        self.parent = os.getppid()
        self._busy = False
        self._terminating = False

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around each of Spark's calls: a SIGTERM arriving meanwhile waits for it."""
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            if self._terminating:
                self.shutdown_and_exit()

    def orphaned(self) -> bool:
        """Whether the JVM that started this runner is gone."""
        return os.getppid() != self.parent

    def ending(self) -> bool:
        """Whether the run is ending: SIGTERM arrived (and waits for the call under way),
        or the JVM is gone. A long wait in a call looks at this to end early."""
        return self._terminating or self.orphaned()

    def check_orphaned(self) -> None:
        """End the run, and the process, if the JVM that started this runner is gone."""
        if self.orphaned():
            log.warning("reactive source: the JVM that started this runner is gone; stopping")
            self.shutdown_and_exit()

    def install(self) -> None:
        """Shut down on SIGTERM. Spark ends the runner with it rather than ``stop()``. Only
        the main thread may install handlers; the runner calls us there."""
        try:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:
            log.debug("not on the main thread: no SIGTERM handler")

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self._terminating:
            return  # a repeated SIGTERM must not cut short the shutdown under way
        self._terminating = True
        if not self._busy:  # else the call under way finishes its batch, then exits
            self.shutdown_and_exit()

    def shutdown_and_exit(self) -> None:
        self._terminating = True
        self._shutdown()
        logging.shutdown()
        sys.stderr.flush()
        # Not sys.exit: a publisher thread blocked in its own code must not keep the
        # runner alive once the subscription is cancelled and the rows are safe.
        os._exit(0)
