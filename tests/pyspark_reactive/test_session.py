"""local_session(): the shared local SparkSession and its spark-conf/ directory."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyspark_reactive.session import (
    SPARK_DEFAULTS_FILE,
    _find_conf_dir,
    local_session,
    read_spark_defaults,
)


def test_python_workers_run_the_drivers_interpreter(spark: SparkSession) -> None:
    # Two partitions on local[2]: two workers, each reporting its own interpreter.
    workers = spark.sparkContext.parallelize(range(2), 2).map(lambda _: sys.executable)
    assert set(workers.collect()) == {sys.executable}


def _pyspark_origin(_: object) -> str:
    import pyspark

    zipped = [p for p in sys.path if p.endswith(".zip") and "pyspark" in Path(p).parts]
    return f"{pyspark.__file__} {zipped}"


def test_spark_s_python_processes_import_the_installed_pyspark_not_its_zip(
        spark: SparkSession, tmp_path: Path) -> None:
    # Spark puts pyspark.zip first on its Python processes' PYTHONPATH; local_session()'s
    # launcher takes it off, so they import the installed, byte-compiled pyspark.
    import pyspark

    installed = f"{pyspark.__file__} []"
    workers = spark.sparkContext.parallelize(range(2), 2).map(_pyspark_origin).collect()
    assert set(workers) == {installed}
    # The source runner, where the factory is called.
    from pyspark_reactive import read_stream
    from reactive_streams import IterablePublisher

    df = read_stream(spark, lambda options: IterablePublisher([_pyspark_origin(None)]),
                     schema="origin STRING")
    query = (df.writeStream.format("memory").queryName("runner_origin")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert [r.origin for r in spark.table("runner_origin").collect()] == [installed]
    # The source as Spark finds it by name (no register call), as users and the repro
    # scripts read it: Spark starts its processes with PYSPARK_DRIVER_PYTHON. From the zip
    # each compiles pyspark again (2 to 3 s more on a busy machine), and a source runner
    # that is not connected back within Spark's fixed 10 s fails the query ("Python
    # worker failed to connect back").
    df = (spark.readStream.format("reactive")
          .option("publisher", "test_session:_origin_publisher").schema("origin STRING").load())
    query = (df.writeStream.format("memory").queryName("found_runner_origin")
             .option("checkpointLocation", str(tmp_path / "found"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert [r.origin for r in spark.table("found_runner_origin").collect()] == [installed]


def _origin_publisher(options: object) -> object:
    """The factory of the ``reactive`` source above: where its runner's pyspark comes from."""
    from reactive_streams import IterablePublisher

    return IterablePublisher([_pyspark_origin(None)])


def test_the_launcher_is_kept_only_in_a_private_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pyspark_reactive.session import _python_without_spark_zips

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    private = _python_without_spark_zips()
    assert private is not None and Path(private).parent == tmp_path / "pyspark-reactive"
    assert os.access(private, os.X_OK)
    # A folder others may write to is not trusted: the launcher goes elsewhere.
    (tmp_path / "pyspark-reactive").chmod(0o777)
    elsewhere = _python_without_spark_zips()
    assert elsewhere is not None and Path(elsewhere).parent != tmp_path / "pyspark-reactive"


def test_settings_from_spark_defaults_conf_are_applied(spark: SparkSession) -> None:
    spark_conf = spark.sparkContext.getConf()
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark_conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.uiWebUrl is None
    assert spark.sparkContext.defaultParallelism == 2
    # Every other line of the file too, not only the ones named above.
    defaults = read_spark_defaults(_find_conf_dir(None) / SPARK_DEFAULTS_FILE)
    assert {key: spark_conf.get(key) for key in defaults} == defaults


def test_jvm_logs_through_the_directorys_log4j2_properties(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    source = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    location = Path(source.getConfigurationSource().getLocation())
    assert location == _find_conf_dir(None) / "log4j2.properties"


def test_an_active_session_is_returned_unchanged(spark: SparkSession) -> None:
    again = local_session(app_name="other", conf={"spark.sql.shuffle.partitions": "7"})
    assert again is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"


def test_missing_conf_dir_names_the_path_tried(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    with pytest.raises(FileNotFoundError, match="no Spark configuration directory") as error:
        local_session(conf_dir=missing)
    assert str(missing) in str(error.value)


def test_conf_dir_without_log4j2_properties_is_an_error(tmp_path: Path) -> None:
    (tmp_path / SPARK_DEFAULTS_FILE).write_text("spark.ui.enabled false\n")
    with pytest.raises(FileNotFoundError, match="log4j2.properties"):
        local_session(conf_dir=tmp_path)


def test_read_spark_defaults_parses_like_spark(tmp_path: Path) -> None:
    path = tmp_path / SPARK_DEFAULTS_FILE
    path.write_text(
        "# a comment\n"
        "\n"
        "spark.ui.enabled      false\n"
        "  spark.driver.extraJavaOptions\t-Da=1 -Db=2  \n"
        "spark.app.name x # not a comment\n"
    )
    assert read_spark_defaults(path) == {
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": "-Da=1 -Db=2",
        "spark.app.name": "x # not a comment",
    }


def test_read_spark_defaults_rejects_a_key_without_value(tmp_path: Path) -> None:
    path = tmp_path / SPARK_DEFAULTS_FILE
    path.write_text("spark.ui.enabled false\nspark.master\n")
    with pytest.raises(ValueError, match=r"spark-defaults\.conf:2: expected 'key value'"):
        read_spark_defaults(path)


def test_local_connect_session_listens_on_loopback_only() -> None:
    from pyspark_reactive.session import local_connect_session

    # Refused before anything starts: the server has no TLS, so the token would cross the
    # network in clear text.
    with pytest.raises(ValueError, match=r"spark\.connect\.grpc\.binding\.address='0\.0\.0\.0'"):
        local_connect_session(conf={"spark.connect.grpc.binding.address": "0.0.0.0"})


def test_local_connect_session_refuses_a_token_that_cannot_travel_without_showing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark_reactive.session import local_connect_session

    given = "half;token=another-secret"
    with pytest.raises(ValueError, match=r"spark\.connect\.authenticate\.token") as error:
        local_connect_session(conf={"spark.connect.authenticate.token": given})
    assert "another-secret" not in str(error.value)
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", " ")
    with pytest.raises(ValueError, match="SPARK_CONNECT_AUTHENTICATE_TOKEN"):
        local_connect_session()


class Widgets:
    """Databricks' ``dbutils.widgets`` as notebook_parameter() uses it: ``text`` creates a
    widget with its default unless one of that name exists (a job's parameter, say), whose
    value it keeps; ``get`` of a widget that does not exist fails."""

    def __init__(self, **values: str) -> None:
        self.values = dict(values)
        self.created: list[tuple[str, str]] = []

    def text(self, name: str, default: str) -> None:
        self.created.append((name, default))
        self.values.setdefault(name, default)

    def get(self, name: str) -> str:
        if name not in self.values:
            raise ValueError(f"InputWidgetNotDefined: {name}")
        return self.values[name]


class DBUtils:
    def __init__(self, **values: str) -> None:
        self.widgets = Widgets(**values)


def test_notebook_parameter_is_the_default_outside_databricks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark_reactive.session import notebook_parameter

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    dbutils = DBUtils(BASE_PATH="/Volumes/main/default/scratch")
    assert notebook_parameter("BASE_PATH", "/tmp/here", dbutils=dbutils) == "/tmp/here"
    assert notebook_parameter("BASE_PATH") == ""
    assert dbutils.widgets.created == []  # no widget made outside Databricks


def test_notebook_parameter_reads_the_widget_on_databricks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark_reactive.session import notebook_parameter

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.9")
    # A job's parameter (or the widget bar) set it: that value wins over the default.
    dbutils = DBUtils(BASE_PATH="/Volumes/main/default/scratch")
    assert notebook_parameter("BASE_PATH", "", dbutils=dbutils) == "/Volumes/main/default/scratch"
    # None set: the widget is made with the default, which is the value.
    assert notebook_parameter("TABLE", "main.default.t", dbutils=dbutils) == "main.default.t"
    assert dbutils.widgets.created == [("BASE_PATH", ""), ("TABLE", "main.default.t")]


def test_notebook_parameter_finds_the_notebooks_dbutils(monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from pyspark_reactive.session import notebook_parameter

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    # No IPython shell (a Python script run as a job): no widgets, the default.
    assert notebook_parameter("BASE_PATH", "/tmp/here") == "/tmp/here"
    # In a notebook, Databricks defines dbutils in the shell's namespace.
    shell = InteractiveShell.instance()
    try:
        shell.user_ns["dbutils"] = DBUtils(BASE_PATH="/Volumes/main/default/scratch")
        assert notebook_parameter("BASE_PATH", "/tmp/here") == "/Volumes/main/default/scratch"
    finally:
        InteractiveShell.clear_instance()


def test_sessions_run_with_sparks_own_authentication(spark: SparkSession) -> None:
    # Spark's RPC (driver endpoints, block manager) then refuses a peer without the
    # application's secret, which Spark makes itself for local masters;
    # tests/connect/test_connect_security.py tries it as another user.
    assert spark.sparkContext.getConf().get("spark.authenticate") == "true"
    assert spark.sparkContext.getConf().get("spark.authenticate.secret") is None


@pytest.mark.parametrize("serving, other, other_family", [
    ("127.0.0.1", "::1", socket.AF_INET6), ("::1", "127.0.0.1", socket.AF_INET)])
def test_a_reserved_port_is_held_on_the_other_loopback_address(
        serving: str, other: str, other_family: int) -> None:
    from pyspark_reactive.session import _reserve_loopback_port

    family = socket.AF_INET if other_family == socket.AF_INET6 else socket.AF_INET6
    try:
        port, hold = _reserve_loopback_port(serving)
    except OSError as error:  # serving on ::1 where there is no IPv6 loopback
        pytest.skip(f"no {serving} here: {error}")
    try:
        with socket.socket(family, socket.SOCK_STREAM) as server:
            server.bind((serving, port))  # free for the server
            server.listen(1)
            with socket.socket(other_family, socket.SOCK_STREAM) as squatter:
                squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                with pytest.raises(OSError) as refused:
                    squatter.bind((other, port))
            # Without a hold the machine has no such address: nobody can listen there.
            expected = errno.EADDRINUSE if hold is not None else errno.EADDRNOTAVAIL
            assert refused.value.errno == expected, refused.value
            if hold is not None:  # a client that tries there first is turned away at once
                with socket.socket(other_family, socket.SOCK_STREAM) as client:
                    client.settimeout(5)
                    assert client.connect_ex((other, port)) == errno.ECONNREFUSED
    finally:
        if hold is not None:
            hold.close()
    with pytest.raises(ValueError, match=r"serving='localhost' is not accepted"):
        _reserve_loopback_port("localhost")


def test_secret_settings_travel_in_a_private_properties_file_spark_reads_back(
        spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import shlex

    from pyspark_reactive.session import _properties_escaped, _submitted_privately

    tricky = {"spark.authenticate.secret": "a=b:c #d\\e\tf\u00e9\U0001f600 ",
              "spark.x.password": "!x"}
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    with _submitted_privately(tricky):
        words = shlex.split(os.environ["PYSPARK_SUBMIT_ARGS"])
        assert words[0] == "--properties-file" and words[2:] == [
            "--load-spark-defaults", "pyspark-shell"]
        path = Path(words[1])
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
        text = path.read_text(encoding="ascii")
    assert not path.parent.exists() and "PYSPARK_SUBMIT_ARGS" not in os.environ
    # Java reads back every character (Spark trims the value's ends, as it does in
    # spark-defaults.conf).
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    properties = jvm.java.util.Properties()
    properties.load(jvm.java.io.StringReader(text))
    assert {key: properties.getProperty(key) for key in tricky} == tricky
    assert _properties_escaped("spark.a_b-c/d") == "spark.a_b-c/d"
    # Another properties file named by the caller would stand in for ours: refused.
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--properties-file /x.conf pyspark-shell")
    with pytest.raises(ValueError, match="PYSPARK_SUBMIT_ARGS names --properties-file"):
        with _submitted_privately(tricky):
            pass
    assert os.environ["PYSPARK_SUBMIT_ARGS"] == "--properties-file /x.conf pyspark-shell"


def test_a_standalone_master_needs_the_clusters_secret_from_a_private_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark_reactive.session import _cluster_secret, _settings

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    master = "spark://127.0.0.1:7077"
    with pytest.raises(ValueError, match="no spark.authenticate.secret is given") as error:
        _cluster_secret(_settings("x", master, None, None))
    assert str(tmp_path / SPARK_DEFAULTS_FILE) in str(error.value)
    # Given in conf (it travels privately, see above), or in spark-submit's own defaults.
    _cluster_secret(_settings("x", master, {"spark.authenticate.secret": "s"}, None))
    defaults = tmp_path / SPARK_DEFAULTS_FILE
    defaults.write_text("spark.authenticate.secret s\n")
    defaults.chmod(0o600)
    _cluster_secret(_settings("x", master, None, None))
    defaults.chmod(0o644)
    with pytest.raises(ValueError, match=r"mode is 0644: other users may read it; chmod 600"):
        _cluster_secret(_settings("x", master, None, None))
    # A cluster that runs without authentication, said so.
    _cluster_secret(_settings("x", master, {"spark.authenticate": "false"}, None))
    # local-cluster: its master and workers run in the driver's JVM; a secret is made.
    local_cluster = _settings("x", "local-cluster[1,1,512]", None, None)
    _cluster_secret(local_cluster)
    assert len(local_cluster["spark.authenticate.secret"]) == 64
    # local masters: Spark makes its own.
    local = _settings("x", "local[2]", None, None)
    _cluster_secret(local)
    assert local["spark.authenticate"] == "true" and "spark.authenticate.secret" not in local


def test_a_conf_dir_whose_defaults_hold_a_secret_must_be_private(tmp_path: Path) -> None:
    (tmp_path / "log4j2.properties").write_text("")
    defaults = tmp_path / SPARK_DEFAULTS_FILE
    defaults.write_text("spark.ssl.keyStorePassword p\n")
    defaults.chmod(0o640)
    with pytest.raises(ValueError, match=r"holds spark.ssl.keyStorePassword \(secret\)"):
        local_session(conf_dir=tmp_path)
