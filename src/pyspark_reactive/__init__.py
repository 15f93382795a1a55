"""The PySpark connector of pyspark-reactive: Reactive Streams in and out of Spark.

In: ``spark.readStream.format("reactive")`` (:class:`DefaultSource`, found by Spark with
no ``register`` call) and :func:`read_stream` turn a Publisher into a streaming DataFrame.
Out: :func:`publish` and :class:`ForeachBatchPublisher` make a query's output a Publisher;
:class:`SubscriberForeachWriter` feeds subscribers on the executors.
:func:`local_session` is the configured local SparkSession of tests, demo and notebooks.
:func:`expose` serves a live publisher of this process to the source, and
:func:`serve_publisher` a query's output to remote clients, over RSocket (extra
``rsocket``, imported when called). :func:`arrow_batches` declares a publisher of
``pyarrow.RecordBatch`` elements, which the source takes whole.
"""

from .arrow_elements import arrow_batches
from .foreach_writer import SubscriberForeachWriter
from .options import OptionError
from .remote import expose, serve_publisher
from .session import local_session
from .sink import ForeachBatchPublisher, SparkConnectNotSupported, publish
from .source import DefaultSource, read_stream

__all__ = [
    "DefaultSource",
    "ForeachBatchPublisher",
    "OptionError",
    "SparkConnectNotSupported",
    "SubscriberForeachWriter",
    "arrow_batches",
    "expose",
    "local_session",
    "publish",
    "read_stream",
    "serve_publisher",
]
