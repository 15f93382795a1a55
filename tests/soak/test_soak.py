"""The soak (benchmarks/soak.py): its verdict on made-up runs, then two real minutes.

The real run starts a SparkSession of its own, whose JVM holds its whole heap from the
start (see ``soak_session``), so this folder runs in a pytest process of its own (see
tests/conftest.py). It takes about 3 minutes: Spark's start, the first row, 2 minutes of
rows, the stop.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import soak

MIB = 2**20

# (rss, fds, threads) of one process at second t, or None when it does not run then.
Process = Callable[[int], "tuple[float, int, int] | None"]


def steady(rss_mib: float, fds: int, threads: int) -> Process:
    # A small, repeating wobble, as real samples have.
    return lambda t: (rss_mib * MIB + (t * 7 % 5) * MIB, fds + t % 3, threads + t * 5 % 4)


def alive(process: Process, since: int, until: int) -> Process:
    return lambda t: process(t) if since <= t < until else None


def made_up_run(processes: dict[tuple[int, str], Process], seconds: int = 120,
                rows: Callable[[int], int] = lambda t: 90_000 * t,
                error: str | None = None) -> dict[str, Any]:
    samples = []
    for t in range(seconds + 1):
        procs = []
        for (pid, role), process in processes.items():
            values = process(t)
            if values is not None:
                procs.append({"pid": pid, "role": role, "rss": values[0], "fds": values[1],
                              "threads": values[2]})
        samples.append({"t": float(t), "rows": rows(t), "rows_per_s": 0.0,
                        "processes": procs})
    return {"settings": {"minutes": seconds / 60, "maxRecordsPerTrigger": 1},
            "roles": soak.ROLES, "samples": samples, "error": error}


def pipeline(**changes: Process) -> dict[tuple[int, str], Process]:
    """A healthy pipeline; ``changes`` replace processes by role (a worker: pid 5)."""
    processes: dict[tuple[int, str], Process] = {
        (1, "driver"): steady(140, 14, 8),
        (2, "jvm"): steady(1400, 360, 310),
        (3, "source-runner"): steady(200, 5, 5),
        (4, "worker-daemon"): steady(46, 4, 1),
        # Workers come and go: one replaced at 70 s, one more from 90 s (the total RSS
        # jumps by 120 MiB there, and nothing leaks).
        (5, "worker"): alive(steady(120, 6, 2), 0, 70),
        (6, "worker"): alive(steady(120, 6, 2), 70, 999),
        (7, "worker"): steady(120, 6, 2),
        (8, "worker"): alive(steady(120, 6, 2), 90, 999),
    }
    for role, process in changes.items():
        key = next(k for k in processes if k[1] == role.replace("_", "-"))
        processes[key] = process
    return processes


def test_a_healthy_pipeline_passes() -> None:
    assert soak.check(made_up_run(pipeline())) == []


@pytest.mark.parametrize(("seconds", "warmup"), [(60, 30), (120, 60), (600, 120), (1800, 360)])
def test_the_warm_up_is_a_fifth_at_least_60_s_at_most_half(seconds: int, warmup: int) -> None:
    assert soak.warmup_seconds(made_up_run(pipeline(), seconds=seconds)["samples"]) == warmup


@pytest.mark.parametrize(("grows_mib", "fails"), [(40, False), (60, True)])
def test_a_process_whose_rss_grows_beyond_50_mib_fails(grows_mib: int, fails: bool) -> None:
    def runner(t: int) -> tuple[float, int, int]:
        return (200 + grows_mib * max(0, t - 60) / 60) * MIB, 5, 5  # after the warm-up

    problems = soak.check(made_up_run(pipeline(source_runner=runner)))
    assert bool(problems) is fails, problems
    if fails:
        assert len(problems) == 1 and problems[0].startswith(
            "source-runner (pid 3): RSS grew by 56 MiB after the warm-up (limit 50 MiB)"), \
            problems


def test_rss_grown_during_the_warm_up_does_not_count() -> None:
    def jvm(t: int) -> tuple[float, int, int]:
        return (900 + 500 * min(t, 40) / 40) * MIB, 360, 310

    assert soak.check(made_up_run(pipeline(jvm=jvm))) == []


def test_file_descriptors_that_keep_growing_fail() -> None:
    def runner(t: int) -> tuple[float, int, int]:
        return 200 * MIB, 5 + t // 4, 5  # one more every 4 s

    problems = soak.check(made_up_run(pipeline(source_runner=runner)))
    assert len(problems) == 1 and problems[0].startswith(
        "source-runner: open file descriptors keep growing after the warm-up: "), problems


def test_threads_that_grow_once_and_stay_pass() -> None:
    def jvm(t: int) -> tuple[float, int, int]:
        return 1400 * MIB, 360, 310 + (12 if t >= 85 else 0) + t % 3  # a pool made once

    assert soak.check(made_up_run(pipeline(jvm=jvm))) == []


def test_threads_that_keep_growing_across_replaced_workers_fail() -> None:
    # Each replacement worker holds the threads the last one left behind, and one more.
    def worker(n: int) -> Process:
        return alive(lambda t: (120 * MIB, 6, 2 + n), 10 * n, 10 * n + 10)

    workers = {(10 + n, "worker"): worker(n) for n in range(13)}
    processes = {k: v for k, v in pipeline().items() if k[1] != "worker"} | workers
    problems = soak.check(made_up_run(processes))
    assert len(problems) == 1 and problems[0].startswith(
        "worker: threads keep growing after the warm-up: "), problems


def test_processes_that_keep_piling_up_fail() -> None:
    workers = {(10 + n, "worker"): alive(steady(120, 6, 2), 10 * n, 999) for n in range(13)}
    problems = soak.check(made_up_run(pipeline() | workers))
    assert any(p.startswith("worker: processes keep growing after the warm-up: ")
               for p in problems), problems


def test_ten_seconds_without_a_row_is_a_stall() -> None:
    def rows(t: int) -> int:
        return 90_000 * (t if t < 70 else max(70, t - 10))  # nothing from 70 s to 80 s

    assert soak.check(made_up_run(pipeline(), rows=rows)) == [
        "stalled: no row reached the subscriber for 10 s after the warm-up (limit 10 s)"]


def test_a_stream_that_ended_early_fails() -> None:
    problems = soak.check(made_up_run(pipeline(), error="the stream ended after 50 s"))
    assert problems == ["the stream ended after 50 s"]


@pytest.mark.parametrize(("pid", "ppid", "cmdline", "role"), [
    (1, 0, ["python", "soak.py"], "driver"),
    (2, 1, ["java", "-cp", "x"], "jvm"),
    (3, 2, ["python", "-m", "pyspark.sql.streaming.python_streaming_source_runner"],
     "source-runner"),
    (4, 2, ["python", "-m", "pyspark.daemon", "pyspark.worker"], "worker-daemon"),
    (5, 4, ["python", "-m", "pyspark.daemon", "pyspark.worker"], "worker"),
    (6, 2, ["python", "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"],
     "planner-daemon"),
    (7, 6, ["python", "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"],
     "planner"),
    (8, 2, ["bash", "-c", "x"], "other"),
])
def test_processes_are_named_by_role(pid: int, ppid: int, cmdline: list[str],
                                     role: str) -> None:
    assert soak.role_of(pid, ppid, cmdline, driver_pid=1, jvm_pid=2) == role


@pytest.mark.timeout(600)
def test_two_minutes_of_soak_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spark = soak.soak_session()
    try:
        run = soak.run_soak(spark, 2.0)
    finally:
        spark.stop()
    summary, problems = soak.write_results(run, tmp_path)
    table = soak.summary_table(summary)
    with capsys.disabled():
        print(f"\n2-minute soak, samples and plot in {tmp_path}:\n{table}")
    roles = {r["role"] for r in summary["roles"]}
    assert {"driver", "jvm", "source-runner", "worker"} <= roles, roles
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert not problems, "\n".join(problems)
    assert summary["mean_rows_per_s"] > 0
