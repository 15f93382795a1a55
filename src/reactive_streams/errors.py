"""The base of every exception class that ``reactive_streams`` defines."""

from __future__ import annotations

__all__ = ["ReactiveStreamsError"]


class ReactiveStreamsError(Exception):
    """Every exception class of ``reactive_streams`` derives from this one.

    Each also derives from the built-in class its meaning calls for (an adapter's lost
    connection from ``ConnectionError``, a missing optional library from ``ImportError``),
    so ``except ConnectionError`` still catches it. Errors the specification maps to a
    built-in class (``TypeError`` for a ``None`` argument, ``ValueError`` for a request
    of ``n <= 0``, §2.13 and §3.9) are raised or signalled as that class itself.
    """
