"""The ``reactive`` data source: a Publisher's elements as a streaming DataFrame.

A row's way through it, module by module:

- :mod:`~pyspark_reactive.source.options`: the source's options, validated once; the
  built-in publishers by name.
- :mod:`~pyspark_reactive.source.reader`: what Spark calls (``DefaultSource``, its stream
  reader) and :func:`~pyspark_reactive.read_stream`.
- :mod:`~pyspark_reactive.source.demand_buffer`: the subscriber to the publisher, holding
  its elements within a demand window.
- :mod:`~pyspark_reactive.source.intake`: elements converted to Arrow
  (:mod:`~pyspark_reactive.source.rows`, :mod:`~pyspark_reactive.source.arrow_elements`)
  and made durable in the write-ahead log (:mod:`~pyspark_reactive.source.wal`) as they
  arrive.
- :mod:`~pyspark_reactive.source.durability`: how a publisher resumes, or acknowledges
  what is durable, so that a hard kill loses nothing.
- :mod:`~pyspark_reactive.source.admission`: how much a micro-batch may take, as the
  Spark line allows.
"""
