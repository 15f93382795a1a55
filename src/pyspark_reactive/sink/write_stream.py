"""The ``writeStream`` side of :func:`~pyspark_reactive.publish` and
:func:`~pyspark_reactive.publish_on_demand`: their keywords onto a ``DataStreamWriter``,
whichever way the batches then travel (in this process, or through the Spark Connect
transport of :mod:`pyspark_reactive.sink.connect`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["configure_writer"]


def configure_writer(writer: Any, options: dict[str, Any],
                     trigger: dict[str, Any] | None) -> Any:
    """Apply :func:`publish`'s keywords to a ``DataStreamWriter``."""
    for key, value in options.items():
        if key == "queryName":
            writer = writer.queryName(value)
        elif key == "outputMode":
            writer = writer.outputMode(value)
        else:
            writer = writer.option(key, str(value))
    if trigger:
        writer = writer.trigger(**trigger)
    return writer
