"""A streaming query's output as a Publisher again.

- :mod:`~pyspark_reactive.sink.publisher`: :class:`~pyspark_reactive.ForeachBatchPublisher`,
  the ``foreachBatch`` function that delivers each micro-batch against its subscribers'
  demand; :mod:`~pyspark_reactive.sink.fetch` brings the batch into the driver as Arrow
  and cuts it into elements.
- :mod:`~pyspark_reactive.sink.connect`: its transport under Spark Connect (each batch
  staged in a table on the server, fetched by the client).
- :mod:`~pyspark_reactive.sink.publish`: :func:`~pyspark_reactive.publish`, which starts the
  query either way.
- :mod:`~pyspark_reactive.sink.on_demand`: :func:`~pyspark_reactive.publish_on_demand`,
  ``availableNow`` runs started by the subscribers' demand.
- :mod:`~pyspark_reactive.sink.foreach_writer`:
  :class:`~pyspark_reactive.SubscriberForeachWriter`, subscribers on the executors.
"""
