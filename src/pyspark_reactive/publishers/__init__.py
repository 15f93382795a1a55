"""Publishers the ``reactive`` source can name, and publishers served across processes.

- :mod:`~pyspark_reactive.publishers.range`, :mod:`~pyspark_reactive.publishers.mqtt`,
  :mod:`~pyspark_reactive.publishers.websocket`, :mod:`~pyspark_reactive.publishers.rsocket`:
  the built-ins that ``.option("publisher", name)`` selects (each a factory called with the
  reader's options in the source runner); :mod:`~pyspark_reactive.publishers.columns`
  holds what their ``format=json`` keeps of an object.
- :mod:`~pyspark_reactive.publishers.remote`: :func:`~pyspark_reactive.expose` (a live
  publisher of this process, served to the source runner) and
  :func:`~pyspark_reactive.serve_publisher` (a query's output, served to remote clients),
  over RSocket.
"""
