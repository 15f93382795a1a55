"""``df.writeStream.foreach(SubscriberForeachWriter(factory))``: rows into subscribers that
live on the executors, one per task, each setting the pace of its own task.

``process(row)`` waits for demand before ``on_next(row)``, so a slow subscriber holds its
task, the micro-batch ends later and the source behind the query requests no more. The wait
ends too when Spark is done with the task (a stop, a kill, the executor gone).
"""

from __future__ import annotations

import logging
import numbers
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from reactive_streams import Subscriber, Subscription
from reactive_streams.api import UNBOUNDED
from reactive_streams.signalling import signal_violation

from ..errors import PySparkReactiveError

__all__ = ["SubscriberForeachWriter", "TaskGone"]

# The name users configure (docs/reference/foreach-writer.md), kept from before sink/.
log = logging.getLogger("pyspark_reactive.foreach_writer")

# How often a wait for demand looks whether Spark is still running the task.
_TASK_POLL_S = 0.5


class _TaskSubscription(Subscription):
    """The subscription a task's subscriber holds: demand, cancel, and nothing else.

    Signals go out only from the task's thread, inside ``process`` and ``close`` (§1.3);
    ``request`` and ``cancel`` may come from any thread.
    """

    def __init__(self, scope: str | None = None) -> None:
        self._changed = threading.Condition()
        self.demand = 0
        self.cancelled = False
        self.failure: BaseException | None = None
        self._scope = scope

    def batch_scope(self) -> str | None:
        """``"<query id>.<epoch>.<partition>"`` of this task: the same when Spark runs the
        task again or a restarted query replays the epoch, so a subscriber that numbers
        the rows it receives gives each row the same key in every attempt."""
        return self._scope

    def request(self, n: int) -> None:
        with self._changed:
            if self.cancelled:
                return  # §3.6
            if type(n) is not int or n <= 0:
                # §3.9: a non-positive request is an error signalled through on_error,
                # never raised; the task's thread signals it.
                self.failure = self.failure or ValueError(
                    f"§3.9: request(n) needs n > 0, got {n!r}")
            else:
                # §3.17: capped, never overflowing.
                self.demand = min(UNBOUNDED, self.demand + n)
            self._changed.notify_all()

    def cancel(self) -> None:
        # §3.5, §3.7: idempotent, returns at once.
        with self._changed:
            self.cancelled = True
            self._changed.notify_all()

    def wait_for_demand(self, timeout: float | None,
                        task: _TaskLink | None = None) -> bool:
        """Wait until there is demand, a cancel or a failure; False on timeout.

        Raises :class:`TaskGone` when ``task`` says Spark no longer runs the task.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self.demand == 0 and not self.cancelled and self.failure is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if task is None:
                    self._changed.wait(left)
                    continue
                self._changed.wait(_TASK_POLL_S if left is None else min(left, _TASK_POLL_S))
                if task.gone():
                    raise TaskGone("SubscriberForeachWriter: Spark ended the task (the query "
                                   "stopped, the task was killed or the executor is gone) "
                                   "while process() waited for the subscriber's demand")
            return True


class TaskGone(PySparkReactiveError, RuntimeError):
    """Spark no longer runs the task whose ``process`` was waiting for demand."""


class _TaskLink:
    """Whether the executor still runs this Python worker's task.

    Python's ``TaskContext`` says nothing about a kill, and with the default worker reuse
    Spark kills no worker whose task has ended. What does change is the worker's socket to
    its executor: when the task ends without the worker, the executor closes it (and so
    does the kernel when the executor dies). Looking costs one ``poll`` with no wait.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._parent = os.getppid()
        # POLLRDHUP (Linux): the executor closed its end, even with rows left unread.
        # POLLHUP, POLLERR and POLLNVAL are reported whether asked for or not.
        self._events = getattr(select, "POLLRDHUP", 0)

    @classmethod
    def find(cls) -> _TaskLink | None:
        """The link of the task calling this, or ``None`` outside a Spark Python worker."""
        if not hasattr(select, "poll"):
            # Windows: the wait then ends on demand, cancel or demand_timeout only.
            return None  # pragma: no cover
        # The task runs inside pyspark.worker.main(infile, outfile), on this very thread;
        # infile reads the socket to the executor.
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "main" and code.co_filename.endswith(
                    os.path.join("pyspark", "worker.py")):
                try:
                    return cls(frame.f_locals["infile"].fileno())
                except (AttributeError, KeyError, OSError, ValueError):
                    return None
            frame = frame.f_back
        return None

    def gone(self) -> bool:
        if os.getppid() != self._parent:
            return True  # the daemon or executor that started this worker has died
        poller = select.poll()
        poller.register(self._fd, self._events)
        return any(events for _, events in poller.poll(0))


class SubscriberForeachWriter:
    """A ``foreach`` writer that feeds a subscriber made on the executor for each task.

    Parameters
    ----------
    factory : callable
        ``factory(partition_id, epoch_id) -> Subscriber``, called in ``open`` on the
        executor; it travels there pickled, so a closure works.
    demand_timeout : float, optional
        Seconds ``process`` waits for demand before failing the task: a positive number;
        ``None`` (default) waits as long as the subscriber takes, or until Spark ends the
        task.

    Raises
    ------
    TypeError
        When ``factory`` is not callable.
    ValueError
        When ``demand_timeout`` is neither ``None`` nor a positive number.

    Notes
    -----
    After the subscriber cancels, the task's remaining rows are dropped (the task still
    succeeds, so Spark does not run them again); rows are never signalled past a cancel
    (§3.12). When ``process`` raises or Spark fails the task, ``close`` signals
    ``on_error``; a subscriber that raises from a signal is treated as cancelled and the
    error logged (§2.13). Like every ``foreach`` sink, delivery is at-least-once: a
    retried task or a replayed micro-batch feeds a new subscriber the same rows again.
    The subscription's ``batch_scope()`` names the query, epoch and partition of the task,
    the same in each attempt, so a subscriber can key its rows to drop those repeats.

    A subscriber with a method ``wait_done()`` (the broker subscribers: rows count only
    once the broker confirmed them) is waited for in ``close``, after ``on_complete``;
    what it raises (a broker that refused rows, after which it cancelled) fails the task,
    so the rows it dropped are not lost: Spark runs the task again.

    A wait for demand ends within about half a second once Spark no longer runs the task
    (``query.stop()``, a killed task, a lost executor): ``process`` raises
    :class:`TaskGone`, the subscriber gets ``on_error`` with it, and the Python worker is
    free again (Spark itself left it blocked: measured on 4.3).

    Examples
    --------
    >>> from reactive_streams import SyncSubscriber
    >>> class Print(SyncSubscriber):
    ...     def on_element(self, row):
    ...         print(row)
    >>> writer = SubscriberForeachWriter(lambda partition, epoch: Print(batch_size=16))
    >>> df.writeStream.foreach(writer).start()                       # doctest: +SKIP
    """

    def __init__(self, factory: Callable[[int, int], Subscriber[Any]],
                 demand_timeout: float | None = None) -> None:
        if not callable(factory):
            raise TypeError(f"SubscriberForeachWriter: factory must be callable, got "
                            f"{type(factory).__name__}")
        self.factory = factory
        self.demand_timeout = _seconds_or_none(demand_timeout)
        self._subscriber: Subscriber[Any] | None = None
        self._subscription: _TaskSubscription | None = None
        self._task: _TaskLink | None = None
        self._wait_done: Callable[[], Any] | None = None
        self.dropped = 0

    def open(self, partition_id: int, epoch_id: int) -> bool:
        subscriber = self.factory(partition_id, epoch_id)
        if subscriber is None or not callable(getattr(subscriber, "on_next", None)):
            raise TypeError(f"SubscriberForeachWriter: the factory returned "
                            f"{type(subscriber).__name__}, not a Subscriber")
        self._subscriber = subscriber
        # Kept past a cancel (which releases the subscriber): close() waits on it.
        wait_done = getattr(subscriber, "wait_done", None)
        self._wait_done = wait_done if callable(wait_done) else None
        self._subscription = _TaskSubscription(_task_scope(partition_id, epoch_id))
        self._task = _TaskLink.find()
        self._signal("on_subscribe", self._subscription)
        return True

    def process(self, row: Any) -> None:
        subscription = self._subscription
        assert subscription is not None, "process() before open()"
        if self._subscriber is None or subscription.cancelled:
            self.dropped += 1
            return
        if not subscription.wait_for_demand(self.demand_timeout, self._task):
            raise TimeoutError(f"SubscriberForeachWriter: no demand from the subscriber "
                               f"within demand_timeout={self.demand_timeout} s")
        if subscription.failure is not None:
            self._end(subscription.failure)
            return
        if subscription.cancelled:
            self._release()
            self.dropped += 1
            return
        with subscription._changed:
            if subscription.demand != UNBOUNDED:
                subscription.demand -= 1
        self._signal("on_next", row)

    def close(self, error: BaseException | None) -> None:
        subscription = self._subscription
        if self._subscriber is not None and subscription is not None:
            if subscription.failure is not None:
                error = subscription.failure
            if subscription.cancelled:
                self._release()
            else:
                self._end(error)
        if self.dropped:
            log.info("SubscriberForeachWriter: %d rows dropped after the subscriber "
                     "cancelled", self.dropped)
        wait_done, self._wait_done = self._wait_done, None
        if error is None and wait_done is not None:
            # A subscriber that hands rows on (a broker's) ends once they are confirmed,
            # and raises what stopped it (a refusal, after which it cancelled and the
            # task's other rows were dropped): the task fails, and Spark runs it again.
            wait_done()

    def _end(self, error: BaseException | None) -> None:
        if error is None:
            self._signal("on_complete")
        else:
            self._signal("on_error", error)
        self._release()

    def _release(self) -> None:
        # §3.13: no reference to the subscriber once the subscription ended.
        self._subscriber = None

    def _signal(self, name: str, *args: Any) -> None:
        subscriber = self._subscriber
        if subscriber is None:
            return
        try:
            getattr(subscriber, name)(*args)
        except Exception as error:
            # §2.13: the subscriber broke the rule; treat it as cancelled and say so.
            signal_violation(subscriber, name, error)
            if self._subscription is not None:
                self._subscription.cancel()
            self._release()
            # It got no terminal signal: its wait_done() would wait for one forever.
            self._wait_done = None


def _task_scope(partition_id: int, epoch_id: int) -> str:
    """The query, epoch and partition of the task calling this (the query id as Spark's
    streaming execution names it in the task's local properties, where it does)."""
    query_id = None
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None:
            query_id = context.getLocalProperty("sql.streaming.queryId")
    except Exception:  # outside a task, or an older context without properties
        query_id = None
    return f"{query_id or 'query'}.{epoch_id}.{partition_id}"


def _seconds_or_none(value: Any) -> float | None:
    # Checked here, in the driver, rather than in process() on an executor: a bad value
    # there fails a task far from the line that gave it.
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
        if seconds > 0:  # NaN is not
            return seconds
    raise ValueError(f"SubscriberForeachWriter: demand_timeout={value!r} is not accepted: "
                     "None (wait as long as the subscriber takes) or a positive number of "
                     "seconds")
