"""The serverless guard's own tests: each use that Databricks serverless forbids, in each of
its forms, fails with ``ServerlessForbidden`` in this (client) process and in each kind of
Python process the Connect server starts (the ``foreachBatch`` worker, the source runner,
the Python workers of UDFs and of a source's ``read()``); what serverless allows still
works; ``sitecustomize.py`` activates the guard only when asked, whenever pyspark is
imported, and runs the ``sitecustomize`` it hides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import serverless_guard
from local_server import server_python
from pyspark import StorageLevel, cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.functions import udf
from serverless_guard import (
    GUARD_DIR,
    VARIABLE,
    ServerlessForbidden,
    ServerlessForbiddenAttribute,
    guarded_environment,
)

# The functions and classes below run in the server's Python processes, whose venv has no
# pytest to import this module with: they travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT_S = 120.0
ROWS = 5

# What each kind's message says serverless does not allow, and what to use instead.
ADVICE = {
    "global_temp": ("global temporary views", "session temporary view", "or a table"),
    "cache": ("caching", "to a table"),
    "jvm": ("access to the JVM", "DataFrame and SparkSession APIs"),
    "trigger": ("triggers other than availableNow", "trigger(availableNow=True)"),
}


RULES_TEXT = {kind: f"Databricks serverless does not allow {forbids}"
              for kind, (forbids, _) in serverless_guard.RULES.items()}


def assert_refused(error: BaseException, used: str, kind: str) -> None:
    message = str(error)
    assert isinstance(error, ServerlessForbidden), f"{type(error).__name__}: {message}"
    assert used in message, message
    assert RULES_TEXT[kind] in message, message
    for fragment in ADVICE[kind]:
        assert fragment in message, (fragment, message)


@pytest.fixture
def no_query_left(spark: Any) -> Iterator[None]:
    """Stops what a failing test (a guard that let a query start) left running."""
    yield
    for query in spark.streams.active:
        query.stop()


@pytest.fixture(scope="module")
def source_table(spark: Any) -> str:
    """A table of ``ROWS`` rows (``saveAsTable``: allowed)."""
    spark.range(ROWS).write.mode("overwrite").saveAsTable("guard_source")
    return "guard_source"


# --- in this process ------------------------------------------------------------------

CLIENT_FORMS: list[tuple[str, str, str, Callable[[Any], Any]]] = [
    ("DataFrame.createGlobalTempView()", "global_temp", "DataFrame.createGlobalTempView()",
     lambda spark: spark.range(1).createGlobalTempView("g")),
    ("DataFrame.createOrReplaceGlobalTempView()", "global_temp",
     "DataFrame.createOrReplaceGlobalTempView()",
     lambda spark: spark.range(1).createOrReplaceGlobalTempView("g")),
    ("sql CREATE GLOBAL TEMP VIEW", "global_temp", "(CREATE GLOBAL TEMPORARY VIEW)",
     lambda spark: spark.sql("CREATE GLOBAL TEMP VIEW g AS SELECT 1")),
    ("sql create or replace global temporary view", "global_temp",
     "(CREATE GLOBAL TEMPORARY VIEW)",
     lambda spark: spark.sql("create or replace\n  global temporary view g as select 1")),
    ("sql global_temp.", "global_temp", "(the global_temp database)",
     lambda spark: spark.sql("SELECT * FROM global_temp.g")),
    ("sql `global_temp`", "global_temp", "(the global_temp database)",
     lambda spark: spark.sql("SELECT * FROM `global_temp`.`g`")),
    ("sql SHOW TABLES IN global_temp", "global_temp", "(the global_temp database)",
     lambda spark: spark.sql("SHOW TABLES IN global_temp")),
    ("spark.table", "global_temp", "spark.table('global_temp.g')",
     lambda spark: spark.table("global_temp.g")),
    ("spark.read.table", "global_temp", "DataFrameReader.table('global_temp.g')",
     lambda spark: spark.read.table("global_temp.g")),
    ("spark.read.table backquoted", "global_temp", "DataFrameReader.table('`global_temp`.g')",
     lambda spark: spark.read.table("`global_temp`.g")),
    ("spark.readStream.table", "global_temp", "DataStreamReader.table('global_temp.g')",
     lambda spark: spark.readStream.table("global_temp.g")),
    ("catalog.dropGlobalTempView", "global_temp", "spark.catalog.dropGlobalTempView()",
     lambda spark: spark.catalog.dropGlobalTempView("g")),
    ("catalog.tableExists", "global_temp", "spark.catalog.tableExists('global_temp')",
     lambda spark: spark.catalog.tableExists("g", "global_temp")),
    ("catalog.setCurrentDatabase", "global_temp",
     "spark.catalog.setCurrentDatabase('global_temp')",
     lambda spark: spark.catalog.setCurrentDatabase("global_temp")),
    ("sql USE global_temp", "global_temp", "(the global_temp database)",
     lambda spark: spark.sql("USE global_temp")),
    ("writeTo", "global_temp", "DataFrame.writeTo('global_temp.g')",
     lambda spark: spark.range(1).writeTo("global_temp.g")),
    ("persist", "cache", "DataFrame.persist()", lambda spark: spark.range(1).persist()),
    ("persist with a level", "cache", "DataFrame.persist()",
     lambda spark: spark.range(1).persist(StorageLevel.DISK_ONLY)),
    ("cache", "cache", "DataFrame.cache()", lambda spark: spark.range(1).cache()),
    ("sql CACHE TABLE", "cache", "(CACHE TABLE)", lambda spark: spark.sql("CACHE TABLE t")),
    ("sql cache lazy table", "cache", "(CACHE TABLE)",
     lambda spark: spark.sql("cache lazy table t as select 1")),
    ("catalog.cacheTable", "cache", "spark.catalog.cacheTable()",
     lambda spark: spark.catalog.cacheTable("t")),
    ("sparkContext", "jvm", "SparkSession.sparkContext", lambda spark: spark.sparkContext),
    ("_jvm", "jvm", "SparkSession._jvm", lambda spark: spark._jvm),
    ("_jsc", "jvm", "SparkSession._jsc", lambda spark: spark._jsc),
    ("_jsparkSession", "jvm", "SparkSession._jsparkSession",
     lambda spark: spark._jsparkSession),
    ("rdd", "jvm", "DataFrame.rdd", lambda spark: spark.range(1).rdd),
    ("_jdf", "jvm", "DataFrame._jdf", lambda spark: spark.range(1)._jdf),
    ("toJSON", "jvm", "DataFrame.toJSON", lambda spark: spark.range(1).toJSON()),
    ("launch_gateway", "jvm", "pyspark.java_gateway.launch_gateway()",
     lambda spark: __import__("pyspark.java_gateway").java_gateway.launch_gateway()),
    ("JavaGateway", "jvm", "py4j JavaGateway()",
     lambda spark: __import__("py4j.java_gateway").java_gateway.JavaGateway()),
]


@pytest.mark.parametrize(("kind", "used", "use"), [form[1:] for form in CLIENT_FORMS],
                         ids=[form[0] for form in CLIENT_FORMS])
def test_a_forbidden_use_fails_in_the_client(spark: Any, kind: str, used: str,
                                            use: Callable[[Any], Any]) -> None:
    with pytest.raises(ServerlessForbidden) as raised:
        use(spark)
    assert_refused(raised.value, used, kind)


def test_refused_attributes_are_attribute_errors_so_probes_answer_false(spark: Any) -> None:
    df = spark.range(1)
    # As on serverless, where Databricks Connect raises JVM_ATTRIBUTE_NOT_SUPPORTED.
    assert not hasattr(spark, "sparkContext")
    assert getattr(df, "rdd", None) is None
    with pytest.raises(ServerlessForbiddenAttribute, match=r"^SparkSession\._jsc: "):
        getattr(spark, "_jsc")  # noqa: B009 - the builtin, not an attribute read


STREAM_FORMS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("no trigger", "DataStreamWriter.start() with no trigger",
     lambda writer: writer.start()),
    ("processingTime", "DataStreamWriter.start() with trigger(processingTime=...)",
     lambda writer: writer.trigger(processingTime="1 second").start()),
    ("once", "DataStreamWriter.start() with trigger(once=...)",
     lambda writer: writer.trigger(once=True).start()),
    ("continuous", "DataStreamWriter.start() with trigger(continuous=...)",
     lambda writer: writer.trigger(continuous="1 second").start()),
    ("toTable without trigger", "DataStreamWriter.toTable() with no trigger",
     lambda writer: writer.toTable("guard_stream_out")),
]


@pytest.mark.usefixtures("no_query_left")
@pytest.mark.parametrize(("used", "start"), [form[1:] for form in STREAM_FORMS],
                         ids=[form[0] for form in STREAM_FORMS])
def test_a_query_without_available_now_is_refused_at_start(
        spark: Any, source_table: str, tmp_path: Path, used: str,
        start: Callable[[Any], Any]) -> None:
    writer = (spark.readStream.table(source_table).writeStream.format("noop")
              .option("checkpointLocation", str(tmp_path / "checkpoint")))
    with pytest.raises(ServerlessForbidden) as raised:
        start(writer)
    assert_refused(raised.value, used, "trigger")
    assert spark.streams.active == []


@pytest.mark.usefixtures("no_query_left")
def test_what_serverless_allows_still_works(spark: Any, source_table: str,
                                            tmp_path: Path) -> None:
    spark.range(3).createOrReplaceTempView("guard_session_view")
    assert spark.sql("SELECT count(*) AS n FROM guard_session_view").first().n == 3
    assert spark.read.table(source_table).count() == ROWS
    assert spark.table(source_table).count() == ROWS
    spark.sql(f"ALTER TABLE {source_table} SET TBLPROPERTIES ('guard.checked' = 'yes')")
    properties = spark.sql(f"SHOW TBLPROPERTIES {source_table}").collect()
    assert ("guard.checked", "yes") in [(r.key, r.value) for r in properties]
    assert source_table in [r.tableName for r in spark.sql("SHOW TABLES").collect()]
    assert spark.catalog.tableExists(source_table)
    # Words in strings and comments are not SQL that runs; a column may say global_temp.
    row = spark.sql("SELECT 'CACHE TABLE t, global_temp.g' AS s, 1 AS global_temp_n "
                    "-- CACHE TABLE t\n /* global_temp.g */").first()
    assert (row.s, row.global_temp_n) == ("CACHE TABLE t, global_temp.g", 1)

    # A streaming query with trigger(availableNow=True) runs and ends by itself.
    query = (spark.readStream.table(source_table).writeStream
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).toTable("guard_available_now"))
    assert query.awaitTermination(TIMEOUT_S), "the availableNow query did not end"
    assert query.exception() is None
    assert sorted(r.id for r in spark.read.table("guard_available_now").collect()) == list(
        range(ROWS))


def test_activate_is_idempotent() -> None:
    serverless_guard.activate()
    serverless_guard.activate()
    hooks = [f for f in sys.meta_path if type(f).__name__ == "_PostImportHook"]
    assert len(hooks) == 1, sys.meta_path


# --- in the server's Python processes -------------------------------------------------

def record_attempts(record_to: str, attempts: dict[str, Callable[[], Any]]) -> None:
    """Try each of ``attempts`` in this process, and write to ``record_to`` how each ended,
    with this process's command line and whether the guard is active in it."""
    outcome: dict[str, Any] = {"argv0": sys.argv[0], "pid": os.getpid(),
                               "active": serverless_guard.active()}
    for name, attempt in attempts.items():
        try:
            attempt()
            outcome[name] = "allowed"
        except Exception as error:  # each attempt's outcome, whatever it is
            outcome[name] = f"{type(error).__name__}: {error}"
    partial = f"{record_to}.{os.getpid()}"
    with open(partial, "w") as out:
        json.dump(outcome, out)
    os.replace(partial, record_to)


def jvm_attempts() -> dict[str, Callable[[], Any]]:
    """Reaching a JVM from a server-side Python process, each way (OSS pyspark there)."""
    from py4j.java_gateway import JavaGateway
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    return {"SparkContext.getOrCreate()": SparkContext.getOrCreate,
            "SparkContext()": lambda: SparkContext("local[1]", "guard"),
            "pyspark.java_gateway.launch_gateway()": launch_gateway,
            "py4j JavaGateway()": JavaGateway}


def assert_recorded(record: Path, process: str, refused: dict[str, str],
                    client_pid: int) -> dict[str, Any]:
    outcome: dict[str, Any] = json.loads(record.read_text())
    assert process in outcome["argv0"], outcome["argv0"]
    assert outcome["pid"] != client_pid
    assert outcome["active"] is True
    for used, kind in refused.items():
        assert outcome[used].startswith(("ServerlessForbidden: ",
                                         "ServerlessForbiddenAttribute: ")), (used, outcome)
        for fragment in (used, RULES_TEXT[kind], *ADVICE[kind]):
            assert fragment in outcome[used], (fragment, outcome[used])
    return outcome

FOREACH_BATCH_REFUSALS = {
    "DataFrame.persist()": "cache", "DataFrame.cache()": "cache",
    "spark.catalog.cacheTable()": "cache", "(CACHE TABLE)": "cache",
    "DataFrame.createGlobalTempView()": "global_temp",
    "DataFrame.createOrReplaceGlobalTempView()": "global_temp",
    "(CREATE GLOBAL TEMPORARY VIEW)": "global_temp", "(the global_temp database)": "global_temp",
    "SparkSession.sparkContext": "jvm", "DataFrame.rdd": "jvm", "DataFrame._jdf": "jvm",
    "SparkContext.getOrCreate()": "jvm", "DataStreamWriter.start() with no trigger": "trigger",
}


def test_foreach_batch_worker_refuses_each_forbidden_use(
        spark: Any, source_table: str, tmp_path: Path, no_query_left: None) -> None:
    record = str(tmp_path / "foreach_batch.json")
    checkpoint = str(tmp_path / "checkpoint")

    def probe(batch: Any, batch_id: int) -> None:
        from pyspark import SparkContext

        session = batch.sparkSession

        def allowed() -> None:  # a session temp view of the batch and a table
            batch.createOrReplaceTempView("guard_batch")
            session.sql("SELECT * FROM guard_batch").write.mode("append").saveAsTable(
                "guard_foreach_batch_out")

        record_attempts(record, {
            "allowed": allowed,
            "DataFrame.persist()": batch.persist,
            "DataFrame.cache()": batch.cache,
            "spark.catalog.cacheTable()": lambda: session.catalog.cacheTable(source_table),
            "(CACHE TABLE)": lambda: session.sql(f"CACHE TABLE {source_table}"),
            "DataFrame.createGlobalTempView()": lambda: batch.createGlobalTempView("g"),
            "DataFrame.createOrReplaceGlobalTempView()":
                lambda: batch.createOrReplaceGlobalTempView("g"),
            "(CREATE GLOBAL TEMPORARY VIEW)":
                lambda: session.sql("CREATE GLOBAL TEMP VIEW g AS SELECT 1"),
            "(the global_temp database)": lambda: session.sql("SELECT * FROM global_temp.g"),
            "SparkSession.sparkContext": lambda: session.sparkContext,
            "DataFrame.rdd": lambda: batch.rdd,
            "DataFrame._jdf": lambda: batch._jdf,
            "SparkContext.getOrCreate()": SparkContext.getOrCreate,
            "DataStreamWriter.start() with no trigger": lambda: session.readStream.table(
                source_table).writeStream.format("noop").option(
                "checkpointLocation", f"{checkpoint}-inner").start(),
        })
        batch.persist()  # and unguarded: the query fails with the guard's message

    query = (spark.readStream.table(source_table).writeStream.foreachBatch(probe)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination(TIMEOUT_S)
    assert "ServerlessForbidden" in str(raised.value), raised.value
    assert RULES_TEXT["cache"] in str(raised.value), raised.value
    assert "DataFrame.persist()" in str(raised.value), raised.value

    outcome = assert_recorded(Path(record), "foreach_batch_worker", FOREACH_BATCH_REFUSALS,
                              os.getpid())
    assert outcome["allowed"] == "allowed", outcome["allowed"]
    assert spark.read.table("guard_foreach_batch_out").count() == ROWS


JVM_REFUSALS = {name: "jvm" for name in ("SparkContext.getOrCreate()", "SparkContext()",
                                         "pyspark.java_gateway.launch_gateway()",
                                         "py4j JavaGateway()")}


class GuardProbe(DataSource):
    """A streaming source of ``ROWS`` rows; with ``probe`` set, its reader (in the source
    runner) first tries to reach a JVM each way, records how that went, then reaches for
    ``SparkContext.getOrCreate()`` unguarded."""

    @classmethod
    def name(cls) -> str:
        return "guard_probe"

    def schema(self) -> str:
        return "value BIGINT"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GuardProbeReader(self.options.get("probe"))


class GuardProbeReader(DataSourceStreamReader):
    def __init__(self, probe: str | None) -> None:
        self.probe = probe

    def _offset(self, value: int) -> dict[str, int]:
        if self.probe:  # Spark 4.0 asks latestOffset first, later versions initialOffset
            from pyspark import SparkContext

            record_attempts(self.probe, jvm_attempts())
            SparkContext.getOrCreate()
        return {"offset": value}

    def initialOffset(self) -> dict[str, int]:
        return self._offset(0)

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        return self._offset(ROWS)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition((start["offset"], end["offset"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        first, end = partition.value
        for value in range(first, end):
            yield (value,)

    def commit(self, end: dict[str, int]) -> None:
        pass


@pytest.fixture(scope="module")
def guard_probe(spark: Any) -> str:
    spark.dataSource.register(GuardProbe)
    return GuardProbe.name()


@pytest.mark.usefixtures("no_query_left")
def test_source_runner_refuses_the_jvm(spark: Any, guard_probe: str, tmp_path: Path) -> None:
    record = tmp_path / "runner.json"
    query = (spark.readStream.format(guard_probe).option("probe", str(record)).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination(TIMEOUT_S)
    message = str(raised.value)
    assert "ServerlessForbidden" in message and "SparkContext.getOrCreate()" in message, message
    assert RULES_TEXT["jvm"] in message, message
    assert_recorded(record, "python_streaming_source_runner", JVM_REFUSALS, os.getpid())


@pytest.mark.usefixtures("no_query_left")
def test_a_python_source_with_available_now_runs(spark: Any, guard_probe: str,
                                                 tmp_path: Path) -> None:
    query = (spark.readStream.format(guard_probe).load().writeStream
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).toTable("guard_probe_out"))
    assert query.awaitTermination(TIMEOUT_S), "the availableNow query did not end"
    assert query.exception() is None
    assert sorted(r.value for r in spark.read.table("guard_probe_out").collect()) == list(
        range(ROWS))


def test_python_workers_refuse_the_jvm(spark: Any, tmp_path: Path) -> None:
    record = str(tmp_path / "udf.json")

    # No type hints: from them pyspark would try to infer a pandas UDF, and warn.
    @udf("long")
    def probe(value):  # type: ignore[no-untyped-def]
        record_attempts(record, jvm_attempts())
        return value

    @udf("long")
    def reach(value):  # type: ignore[no-untyped-def]
        from py4j.java_gateway import JavaGateway

        JavaGateway()
        return value

    assert spark.range(1).select(probe("id").alias("id")).first().id == 0
    # A Python worker forked by pyspark's daemon, which sitecustomize.py guarded at its start.
    assert_recorded(Path(record), os.path.join("pyspark", "daemon.py"), JVM_REFUSALS,
                    os.getpid())
    with pytest.raises(Exception, match=r"(?s)ServerlessForbidden.*py4j JavaGateway\(\): "
                       "Databricks serverless does not allow any access to the JVM"):
        spark.range(1).select(reach("id")).collect()


# --- sitecustomize.py and the import hook ---------------------------------------------

_CLASSIC = r"""
import json, sys
# Imported after sitecustomize.py ran: the guard patches them as they are imported.
from pyspark import SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession
from pyspark.sql.classic.dataframe import DataFrame
from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

import serverless_guard

outcome = {"active": serverless_guard.active(),
           "hooks": sum(type(f).__name__ == "_PostImportHook" for f in sys.meta_path)}
attempts = {
    "SparkContext.getOrCreate()": SparkContext.getOrCreate,
    "SparkContext()": lambda: SparkContext("local[1]", "guard"),
    "builder.getOrCreate()": lambda: SparkSession.builder.master("local[1]").getOrCreate(),
    "launch_gateway()": launch_gateway,
}
for name, attempt in attempts.items():
    try:
        attempt()
        outcome[name] = "allowed"
    except Exception as error:
        outcome[name] = f"{type(error).__name__}: {error}"
outcome["connect persist guarded"] = hasattr(ConnectDataFrame.persist, "__serverless_guard__")
outcome["classic persist guarded"] = hasattr(DataFrame.persist, "__serverless_guard__")
print(json.dumps(outcome))
"""

_UNGUARDED = r"""
import json, sys
from pyspark.sql.connect.dataframe import DataFrame
print(json.dumps({"imported": "serverless_guard" in sys.modules,
                  "persist guarded": hasattr(DataFrame.persist, "__serverless_guard__")}))
"""


def run_python(script: str, environment: dict[str, str]) -> dict[str, Any]:
    """Run ``script`` with the server venv's Python (OSS pyspark: classic and Connect) and
    ``environment`` added to this process's (without Spark's variables); its JSON output."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    result = subprocess.run([str(server_python()), "-c", script], capture_output=True,
                            text=True, timeout=TIMEOUT_S, env={**base, **environment})
    assert result.returncode == 0, result.stderr
    outcome: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return outcome


def test_sitecustomize_guards_classic_pyspark_imported_later() -> None:
    outcome = run_python(_CLASSIC, guarded_environment())
    assert outcome["active"] is True and outcome["hooks"] == 1, outcome
    assert outcome["connect persist guarded"] and outcome["classic persist guarded"], outcome
    for name in ("SparkContext.getOrCreate()", "SparkContext()", "builder.getOrCreate()"):
        assert outcome[name].startswith("ServerlessForbidden: SparkContext"), (name, outcome)
        assert RULES_TEXT["jvm"] in outcome[name], outcome[name]
    assert outcome["launch_gateway()"].startswith(
        "ServerlessForbidden: pyspark.java_gateway.launch_gateway(): "), outcome


def test_sitecustomize_does_nothing_without_the_variable() -> None:
    environment = guarded_environment()
    del environment[VARIABLE]
    assert run_python(_UNGUARDED, environment) == {"imported": False,
                                                   "persist guarded": False}


def test_sitecustomize_runs_the_one_it_hides(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import os\nos.environ['HIDDEN_SITECUSTOMIZE_RAN'] = __file__\n")
    script = ("import json, os, sys\nprint(json.dumps({'hidden': os.environ.get("
              "'HIDDEN_SITECUSTOMIZE_RAN'), 'guarded': 'serverless_guard' in sys.modules}))")
    environment = {"PYTHONPATH": os.pathsep.join([GUARD_DIR, str(hidden)]),
                   VARIABLE: "1"}
    assert run_python(script, environment) == {"hidden": str(hidden / "sitecustomize.py"),
                                               "guarded": True}
