"""Test machinery that ships with the package because it must act inside the processes Spark
starts (the source runner, the executors' Python workers), where a test cannot reach.

Nothing here is API, and nothing here acts unless its environment variable is set. It lives
apart, under a private name, so that the production modules stay about production: they
only call its hooks (:func:`~pyspark_reactive._testing.faults.crash_point`), which do
nothing by default.
"""
