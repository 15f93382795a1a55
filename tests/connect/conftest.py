"""The ``spark`` of these tests is a Spark Connect client of a local server started in this
process (``local_connect_session()``), as notebooks on Databricks standard and serverless
compute see Spark: user code on the client, ``foreachBatch`` in a process on the server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))
# The connector tests' helpers (spark_publishers.py, test_sink's subscribers), for the tests
# here to import too.
for _folder in reversed(FOLDERS):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from pyspark_reactive.session import local_connect_session

    # The server's Python processes (source runners, the foreachBatch worker, executors'
    # workers) inherit this environment: the tests' publishers and subscribers import
    # from these folders there.
    folders = [HERE, *FOLDERS]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*folders, *filter(None, [os.environ.get("PYTHONPATH")])])
    # publish() stages batches in tables of the current schema: its files go here rather
    # than into the working folder's spark-warehouse.
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = local_connect_session(conf={"spark.sql.warehouse.dir": str(warehouse)})
    assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)
    yield session
    session.stop()
