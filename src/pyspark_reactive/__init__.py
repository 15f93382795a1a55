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

The sub-packages follow a row's way through Spark: :mod:`~pyspark_reactive.publishers`
(what a source can name, and publishers served across processes) feed
:mod:`~pyspark_reactive.source` (the ``reactive`` data source: demand, rows, the
write-ahead log), and :mod:`~pyspark_reactive.sink` makes a query's output a Publisher
again. Spark finds ``DefaultSource`` as an attribute of this package (a top-level module
named ``pyspark_*``), so it is imported here.
"""

def _require_pyspark() -> None:
    """Fail at import, saying what to install, where no PySpark 4 can be imported: the
    package does not depend on pyspark (a Databricks Runtime and Databricks Connect carry
    their own, which pip cannot see), so nothing else would say so before a deep
    ``ImportError``."""
    how = ("Install one of:\n"
           "  - OSS Spark: pip install 'pyspark-reactive[spark]' (or "
           "'pyspark-reactive[connect]' for a Spark Connect client);\n"
           "  - Databricks Connect: pip install 'databricks-connect>=17' (it carries its "
           "own pyspark), then pip install pyspark-reactive;\n"
           "  - a Databricks notebook: %pip install pyspark-reactive on a runtime with "
           "Spark 4 (Databricks Runtime 17 or newer, or serverless), which provides "
           "pyspark.\n"
           "reactive_streams (the Reactive Streams core) works without pyspark.")
    try:
        import pyspark
    except ImportError as error:
        raise ImportError(f"pyspark_reactive needs PySpark 4.0 or newer, and none can be "
                          f"imported ({error}). {how}") from None
    version = str(getattr(pyspark, "__version__", ""))
    major = version.split(".")[0]
    if not major.isdigit() or int(major) < 4:
        raise ImportError(f"pyspark_reactive needs PySpark 4.0 or newer, and the pyspark "
                          f"imported is {version or 'of unknown version'} (from "
                          f"{getattr(pyspark, '__file__', '?')}). {how}")


_require_pyspark()

from reactive_streams._version import __version__  # noqa: E402 - after the check

from .errors import PySparkReactiveError  # noqa: E402 - after the check, which says why
from .publishers.remote import expose, serve_publisher  # noqa: E402
from .session import local_session  # noqa: E402
from .sink.foreach_writer import SubscriberForeachWriter  # noqa: E402
from .sink.on_demand import OnDemandPublisher, publish_on_demand  # noqa: E402
from .sink.publish import AvailableNowWarning, publish  # noqa: E402
from .sink.publisher import (  # noqa: E402
    Element,
    ForeachBatchPublisher,
    SparkConnectNotSupported,
    WhenStalled,
    WhenUnsubscribed,
)
from .source.arrow_elements import arrow_batches  # noqa: E402
from .source.options import OptionError  # noqa: E402
from .source.reader import DefaultSource, read_stream  # noqa: E402
from .source.shards import Shard, sharded  # noqa: E402

__all__ = [
    "AvailableNowWarning",
    "DefaultSource",
    "Element",
    "ForeachBatchPublisher",
    "OnDemandPublisher",
    "OptionError",
    "PySparkReactiveError",
    "Shard",
    "SparkConnectNotSupported",
    "SubscriberForeachWriter",
    "WhenStalled",
    "WhenUnsubscribed",
    "__version__",
    "arrow_batches",
    "expose",
    "local_session",
    "publish",
    "publish_on_demand",
    "read_stream",
    "serve_publisher",
    "sharded",
]
