"""The PySpark connector of pyspark-reactive: Reactive Streams in and out of Spark.

For now it holds :func:`local_session`, the configured local SparkSession used by tests,
the demo and notebooks; the streaming source and sink come later.
"""

from .session import local_session

__all__ = ["local_session"]
