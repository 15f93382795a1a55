"""Reactive Streams for Python: asynchronous streams with non-blocking backpressure.

The four interfaces of the specification (``Publisher``, ``Subscriber``, ``Subscription``,
``Processor``), reference implementations built on one signalling core, and helpers.
This package never imports pyspark.
"""

from ._version import __version__
from .api import UNBOUNDED, Processor, Publisher, Subscriber, Subscription
from .blocking import to_iterable
from .errors import ReactiveStreamsError
from .processors import MapProcessor
from .publishers import AsyncIterablePublisher, IterablePublisher, RangePublisher
from .pushing import create
from .subscribers import AsyncSubscriber, SyncSubscriber, collect

__all__ = [
    "UNBOUNDED",
    "AsyncIterablePublisher",
    "AsyncSubscriber",
    "IterablePublisher",
    "MapProcessor",
    "Processor",
    "Publisher",
    "RangePublisher",
    "ReactiveStreamsError",
    "Subscriber",
    "Subscription",
    "SyncSubscriber",
    "__version__",
    "collect",
    "create",
    "to_iterable",
]
