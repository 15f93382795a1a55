"""benchmarks/connect_publish_throughput.py's report and per-batch split, and what
compare_revisions.py reads of it, fed synthetic figures and a synthetic event log: nothing
here times anything or starts Spark."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import compare_revisions  # noqa: E402
import connect_publish_throughput as bench  # noqa: E402
from connect_split import (  # noqa: E402
    PHASES,
    Read,
    batch_splits,
    event_lines,
    median_split,
    operations,
    split_text,
)

CONNECT = "org.apache.spark.sql.connect.service.SparkListenerConnectOperation"
TABLE = re.compile(r"reactive_stage_[0-9A-Za-z_]*?_(\d+)(?![0-9A-Za-z_])")
CLIENT, FUNCTION = "client-session", "function-session"


def mode_figures(rate: float, latency_s: list[float]) -> dict[str, object]:
    return {"rate": rate, "query_s": 9.5, "latency_s": latency_s, "client": 2**27,
            "jvm": 2**29, "worker": 2**27, "python": 2**27, "batches": 4,
            "split": {name: 0.1 for name in (*PHASES, "period", "client_ops",
                                                "function_ops")}, "split_batches": 4}


def test_compare_revisions_reads_every_mode_its_latency_and_the_ratios() -> None:
    figures = {"classic": mode_figures(600_000, [0.1, 0.2, 0.3]),
               "connect": mode_figures(150_000, [0.9, 1.0, 1.1]),
               "ceiling": mode_figures(300_000, [0.4, 0.5, 0.6]),
               "ceiling-sync": mode_figures(200_000, [0.6, 0.7, 0.8])}
    output = "\n".join([*(bench.mode_text(mode, f) for mode, f in figures.items()),
                        *bench.ratio_lines(figures)])
    read = compare_revisions.figures_of(output)
    assert read == {
        "classic": (600_000, "rows/s"), "classic latency median": (200, "ms"),
        "connect": (150_000, "rows/s"), "connect latency median": (1000, "ms"),
        "ceiling": (300_000, "rows/s"), "ceiling latency median": (500, "ms"),
        "ceiling-sync": (200_000, "rows/s"), "ceiling-sync latency median": (700, "ms"),
        "connect / classic": (0.25, "ratio"), "connect / ceiling": (0.5, "ratio"),
        "connect / ceiling-sync": (0.75, "ratio")}
    # The split's line is printed under its mode and is no figure of its own.
    assert "per batch, median of 4 (ms): write 100," in output


def operation(op_id: str, session: str, start_ms: int, end_ms: int, text: str) -> list[str]:
    return [json.dumps({"Event": CONNECT + "Started", "operationId": op_id,
                        "eventTime": start_ms, "sessionId": session, "statementText": text}),
            json.dumps({"Event": CONNECT + "Finished", "operationId": op_id,
                        "eventTime": end_ms}),
            json.dumps({"Event": CONNECT + "Closed", "operationId": op_id,
                        "eventTime": end_ms + 1})]


def sql(query: str) -> str:
    return f'common {{\n  plan_id: 3\n}}\nsql {{\n  query: "{query}"\n}}\n'


def write(table: str) -> str:
    return (f'write_operation {{\n  input {{\n  }}\n  table {{\n    table_name: "`spark_catalog`.'
            f'`default`.`{table}`"\n  }}\n}}\n')


# A client's read of a partition, as Spark logs it: cut short before the table's name.
READ = "common {\n}\nto_df {\n  collect_metrics {\n    read {\n    }\n  }\n}\n"


def staged_run() -> list[str]:
    """Two batches as the project stages them: write, read-back, mark; the client's polls,
    a heartbeat while rows are taken, its outcome; the batch function's look and drop."""
    t0, t1 = "reactive_stage_ab12_cd34_0", "reactive_stage_ab12_cd34_1"
    ops = [
        # The query's start: its source is a read, but no read of a batch.
        ("start", CLIENT, 500, 900, 'write_stream_operation_start {\n  input {\n    read {\n'
                                    '      data_source {\n  format: "reactive"\n}\n}\n}\n}'),
        ("w0", FUNCTION, 1000, 2000, write(t0)),
        ("sum0", FUNCTION, 2000, 2400, f'aggregate {{\n  read {{\n named_table {{\n'
                                        f' unparsed_identifier: "{t0}"\n}}\n}}\n}}'),
        ("mark0", FUNCTION, 2400, 2500, sql(f"ALTER TABLE {t0} SET TBLPROPERTIES")),
        ("list0", CLIENT, 2600, 2610, sql("SHOW TABLES IN default LIKE 'reactive_stage_*'")),
        ("props0", CLIENT, 2620, 2630, sql(f"SHOW TBLPROPERTIES {t0}")),
        ("read0a", CLIENT, 2700, 2999, READ),
        ("read0b", CLIENT, 3100, 3299, READ),
        ("beat0", CLIENT, 3200, 3210, sql(f"ALTER TABLE {t0} SET TBLPROPERTIES alive")),
        ("outcome0", CLIENT, 3500, 3550, sql(f"ALTER TABLE {t0} SET TBLPROPERTIES")),
        ("look0", FUNCTION, 3600, 3610, sql(f"SHOW TBLPROPERTIES {t0}")),
        ("drop0", FUNCTION, 3700, 3750, sql(f"DROP TABLE IF EXISTS {t0}")),
        ("w1", FUNCTION, 4000, 5000, write(t1)),
        ("mark1", FUNCTION, 5100, 5200, sql(f"ALTER TABLE {t1} SET TBLPROPERTIES")),
        ("read1", CLIENT, 5300, 5599, READ),
        ("outcome1", CLIENT, 5700, 5710, sql(f"ALTER TABLE {t1} SET TBLPROPERTIES")),
        ("drop1", FUNCTION, 5800, 5900, sql(f"DROP TABLE IF EXISTS {t1}")),
    ]
    return ['{"Event": "SparkListenerLogStart"}',
            *(line for op in ops for line in operation(*op))]


READS = [Read(2.7, 3.0, 10), Read(3.1, 3.3, 10), Read(5.3, 5.6, 20)]


def test_each_batch_splits_into_phases_that_add_up_to_its_period() -> None:
    splits = batch_splits(operations(staged_run(), TABLE), READS, CLIENT)
    assert sorted(splits) == [0, 1]
    first = {key: round(value, 3) for key, value in splits[0].items()}
    # The heartbeat during the reads is not the release: the outcome after them is.
    assert first == {"write": 1.0, "digests": 0.5, "discovery": 0.2, "reads": 0.5,
                     "subscribers": 0.3, "settle": 0.25, "next": 0.25, "period": 3.0,
                     "client_ops": 6, "function_ops": 5}
    last = splits[1]
    assert round(sum(last[name] for name in PHASES), 3) == round(last["period"], 3) == 1.9
    assert round(median_split(splits)["write"], 3) == 1.0
    text = split_text(median_split(splits), len(splits))
    assert text.startswith("per batch, median of 2 (ms): write 1000, digests 350,")


def test_a_read_that_names_its_batch_is_kept_there() -> None:
    # A client reading batches that overlap (the ceiling) says which batch each read is of.
    reads = [Read(5.3, 5.4, 10, batch=0), Read(5.4, 5.6, 10, batch=1)]
    splits = batch_splits(operations(staged_run(), TABLE), reads, CLIENT)
    assert round(splits[0]["reads"], 3) == 0.1 and round(splits[1]["reads"], 3) == 0.2


def test_without_the_clients_own_reads_the_servers_view_of_them_serves() -> None:
    # (The client read otherwise than by toArrow().) Each read ends when the server closed
    # it, a millisecond after it finished; the query's start is no read.
    ops = operations(staged_run(), TABLE)
    assert [o.kind for o in ops if o.session == CLIENT and o.started < 1] == ["stream"]
    splits = batch_splits(ops, [], CLIENT)
    assert [round(splits[b]["reads"], 3) for b in (0, 1)] == [0.5, 0.3]
    assert round(splits[0]["discovery"], 3) == 0.2


def test_no_split_when_the_batch_function_shares_the_client_session() -> None:
    lines = [line.replace(FUNCTION, CLIENT) for line in staged_run()]
    assert batch_splits(operations(lines, TABLE), READS, CLIENT) == {}
    assert split_text({}, 0).startswith("per batch: n/a")


def test_the_event_log_is_read_plain_or_zstd_compressed(tmp_path: Path) -> None:
    lines = staged_run()
    app = tmp_path / "eventlog_v2_local-1"
    app.mkdir()
    with pa.CompressedOutputStream(str(app / "events_1_local-1.zstd"), "zstd") as out:
        out.write("\n".join(lines[:20]).encode() + b"\n")
    (app / "events_2_local-1").write_text("\n".join(lines[20:]) + "\n")
    (app / "appstatus_local-1").write_text("")
    assert list(event_lines(tmp_path)) == lines
