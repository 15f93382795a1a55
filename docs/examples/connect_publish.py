"""The source and publish() through Spark Connect, as on Databricks standard access and
serverless compute: here against a local Spark Connect server.

Run it as ``python connect_publish.py`` (it needs the ``connect`` extra). With Databricks
Connect, only the session changes: ``DatabricksSession.builder.getOrCreate()``.
"""

import tempfile

from pyspark_reactive import publish
from pyspark_reactive.session import local_connect_session
from reactive_streams import SyncSubscriber

folder = tempfile.mkdtemp()
# A Spark Connect server in this process, and a client of it. Its tables (publish()
# stages each micro-batch in one) go to a warehouse folder of their own.
spark = local_connect_session(conf={"spark.sql.warehouse.dir": f"{folder}/warehouse"})
print(type(spark).__module__)
# prints: pyspark.sql.connect.session

# The publisher is made on the server's side, in the source runner, as in classic mode.
squares = (spark.readStream.format("reactive")
           .option("publisher", "range").option("count", 1000)
           .option("maxRecordsPerTrigger", 500)
           .option("walLocation", f"{folder}/wal")
           .load()
           .selectExpr("value", "value * value AS square"))


class Sum(SyncSubscriber):
    total = rows = 0

    def on_element(self, row):
        self.total += row.square
        self.rows += 1


# The batch function runs on the server and stages each micro-batch in a table of the
# staging schema (default: the session's current one); this process reads it back, checks
# it and offers it to the subscribers, and the batch ends once they have taken it.
publisher = publish(squares, trigger={"availableNow": True},
                    checkpointLocation=f"{folder}/checkpoint", staging="default")
subscriber = Sum(batch_size=256)
publisher.subscribe(subscriber)
subscriber.join(timeout=180)
print(subscriber.rows, subscriber.total)
# prints: 1000 332833500
print(spark.sql("SHOW TABLES IN default").count())   # each staged table dropped after use
# prints: 0
