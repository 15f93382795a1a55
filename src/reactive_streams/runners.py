"""Threads and event loops that a publisher or subscriber owns.

A :class:`Runner` is started when its first user acquires it and shut down when its last
user releases it, so a publisher that was given no executor owns exactly one, for exactly
as long as it has live subscriptions. A runner supplied by the caller is borrowed: it is
never shut down here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from .signalling import Dispatch

__all__ = ["LoopRunner", "Runner", "ThreadRunner"]


class Runner:
    """Reference-counted ownership of something that runs callables.

    Subclasses implement :meth:`_start` (return the dispatch function) and :meth:`_stop`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._dispatch: Dispatch | None = None

    def acquire(self) -> Dispatch:
        """Start the runner if needed and return its dispatch function."""
        with self._lock:
            if self._dispatch is None:
                self._dispatch = self._start()
            self._users += 1
            return self._dispatch

    def release(self) -> None:
        """Give up one use; the last release stops the runner (without waiting for it)."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._dispatch is None:
                return
            self._dispatch = None
            self._stop()

    @property
    def running(self) -> bool:
        """True while some user holds the runner."""
        return self._dispatch is not None

    def _start(self) -> Dispatch:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError


class ThreadRunner(Runner):
    """A thread pool: the given executor (borrowed), or one of its own (owned)."""

    def __init__(self, executor: Executor | None = None, max_workers: int = 4,
                 name: str = "reactive-streams") -> None:
        super().__init__()
        self._borrowed = executor
        self._owned: ThreadPoolExecutor | None = None
        self._max_workers = max_workers
        self._name = name

    def _start(self) -> Dispatch:
        if self._borrowed is not None:
            return self._borrowed.submit
        self._owned = ThreadPoolExecutor(self._max_workers, thread_name_prefix=self._name)
        return self._owned.submit

    def _stop(self) -> None:
        if self._owned is not None:
            # Called from a pool thread as often as not: never wait for ourselves.
            self._owned.shutdown(wait=False)
            self._owned = None


class LoopRunner(Runner):
    """An asyncio event loop: the given one (borrowed), or its own on a thread (owned)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None,
                 name: str = "reactive-streams-loop") -> None:
        super().__init__()
        self._borrowed = loop
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._name = name

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop; only valid while the runner is acquired."""
        if self._loop is None:
            raise RuntimeError("the loop runner is not running; acquire() it first")
        return self._loop

    def _start(self) -> Dispatch:
        if self._borrowed is not None:
            return _call_soon(self._borrowed)
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            try:
                loop.run_forever()
            finally:
                _cancel_remaining(loop)
                loop.close()

        # Daemon: a stream nobody cancels must not keep the interpreter from exiting.
        threading.Thread(target=run, name=self._name, daemon=True).start()
        if not started.wait(10):
            raise RuntimeError(f"{self._name}: the event loop thread did not start within 10 s")
        self._loop = loop
        return _call_soon(loop)

    def _stop(self) -> None:
        loop, self._loop = self._loop, self._borrowed
        if self._borrowed is None and loop is not None:
            loop.call_soon_threadsafe(loop.stop)


def _call_soon(loop: asyncio.AbstractEventLoop) -> Dispatch:
    def dispatch(fn: Callable[[], None]) -> object:
        return loop.call_soon_threadsafe(fn)

    return dispatch


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
