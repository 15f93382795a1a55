"""The PySpark connector of pyspark-reactive: Reactive Streams in and out of Spark.

``spark.readStream.format("reactive")`` (:class:`DefaultSource`, found by Spark with no
``register`` call) and :func:`read_stream` turn a Publisher into a streaming DataFrame;
:func:`local_session` is the configured local SparkSession of tests, demo and notebooks.
"""

from .options import OptionError
from .session import local_session
from .source import DefaultSource, read_stream

__all__ = ["DefaultSource", "OptionError", "local_session", "read_stream"]
