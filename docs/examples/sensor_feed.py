"""A publisher factory in a module of your own, named by its import path.

Spark makes the publisher in its source runner, a Python process of its own: the option
``publisher`` names the factory as ``"module:function"``, and that process imports the
module. Run this file as ``python sensor_feed.py``: it reads itself, as the module
``sensor_feed``.
"""

import os

from reactive_streams import IterablePublisher


def readings(options):
    """The factory: called once per query run, in the source runner, with the options."""
    sensors = int(options.get("sensors", "3"))      # an option of this factory
    return IterablePublisher(lambda: (
        {"sensor": i % sensors, "celsius": 20.0 + i % 7} for i in range(1000)))


# The schema when the reader gives none.
readings.default_schema = lambda options: "sensor INT, celsius DOUBLE"


if __name__ == "__main__":
    # Spark's Python processes inherit the environment of the process that starts Spark:
    # put this module's folder on their path, and allow only this module to be named.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        path for path in (here, os.environ.get("PYTHONPATH")) if path)
    os.environ["PYSPARK_REACTIVE_PUBLISHER_MODULES"] = "sensor_feed"

    from pyspark_reactive import local_session

    spark = local_session()
    df = (spark.readStream.format("reactive")
          .option("publisher", "sensor_feed:readings")
          .option("sensors", 4)
          .option("maxRecordsPerTrigger", 500)
          .load())
    print(df.schema.simpleString())
    # prints: struct<sensor:int,celsius:double>

    query = (df.writeStream.format("memory").queryName("readings")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    print(spark.sql("SELECT sensor, count(*) AS n FROM readings GROUP BY sensor "
                    "ORDER BY sensor").collect())
    # prints:
    # [Row(sensor=0, n=250), Row(sensor=1, n=250),
    #  Row(sensor=2, n=250), Row(sensor=3, n=250)]
