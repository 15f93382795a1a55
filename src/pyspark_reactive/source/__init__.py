"""The ``reactive`` data source: a Publisher's elements as a streaming DataFrame.

A row's way through it, module by module:

- :mod:`~pyspark_reactive.source.options`: the source's options, validated once; the
  built-in publishers by name.
- :mod:`~pyspark_reactive.source.reader`: what Spark calls (``DefaultSource``, its stream
  reader) and :func:`~pyspark_reactive.read_stream`.
- :mod:`~pyspark_reactive.source.run`: one query run in Spark's source runner, which the
  reader's calls go to; it holds the parts below.
- :mod:`~pyspark_reactive.source.upstream`: the subscription to the publisher (made by its
  factory, :mod:`~pyspark_reactive.source.durability` saying where it resumes), with
  :mod:`~pyspark_reactive.source.demand_buffer`, the subscriber that holds the publisher's
  elements within a demand window, and :mod:`~pyspark_reactive.source.intake`, which
  converts them to Arrow (:mod:`~pyspark_reactive.source.rows`,
  :mod:`~pyspark_reactive.source.arrow_elements`) and makes them durable as they arrive.
- :mod:`~pyspark_reactive.source.admission`: how much each micro-batch takes (the Spark
  line's admission control, ``availableNow``) and how long it waits to fill.
- :mod:`~pyspark_reactive.source.wal` and :mod:`~pyspark_reactive.source.run_log`: the
  write-ahead log, and what a run does with it (rows a stopped run left, claims, commits).
- :mod:`~pyspark_reactive.source.partitions`: a batch's rows as Arrow inside the
  partitions that travel to the executors.
- :mod:`~pyspark_reactive.source.termination`: how a run ends (SIGTERM, an orphaned runner,
  ``stop()``).
"""
