"""The base of every exception class that ``pyspark_reactive`` defines."""

from __future__ import annotations

__all__ = ["PySparkReactiveError"]


class PySparkReactiveError(Exception):
    """Every exception and warning class of ``pyspark_reactive`` derives from this one.

    Each also derives from the built-in class its meaning calls for (a bad option from
    ``ValueError``, a write-ahead log that stays locked from ``TimeoutError``, a warning
    from ``UserWarning``), so ``except ValueError`` still catches an
    :class:`~pyspark_reactive.OptionError`, and ``except PySparkReactiveError`` catches
    any of them. Errors raised by Spark, or by a publisher (passed on as its cause), keep
    their own classes.
    """
