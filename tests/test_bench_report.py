"""benchmarks/bench.py's harness, table, record and plots, fed synthetic figures: nothing
here times anything. The scenario scripts are stand-ins written to a temporary folder."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench  # noqa: E402
from report import Figure, read, write  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def synthetic_figures() -> list[Figure]:
    return [
        Figure("core", "request(1024)", 2.4e6, "elements/s", baseline="plain loop",
               baseline_value=4.0e6, target=(">=", 0.5)),
        Figure("core", "request(1)", 0.5e6, "elements/s", baseline="plain loop",
               baseline_value=4.0e6, target=(">=", 0.5)),
        Figure("latency", "p50, reactive", 120.0, "ms", baseline="rate source",
               baseline_value=500.0, target=("<=", 1.0), bound=("<=", 150.0)),
        Figure("latency", "p99, reactive", 450.0, "ms", baseline="rate source",
               baseline_value=900.0, target=("<=", 1.0), bound=("<=", 400.0)),
        Figure("source", "peak memory, source runner", 160.0, "MiB",
               baseline="simple reader", baseline_value=150.0),
        Figure("source", "cold start", 7.5, "s", extra={"runner peak MiB": 140.0}),
    ]


def outcomes() -> list[bench.Outcome]:
    figures = synthetic_figures()
    series = {"latency_ms": {"reactive": [100.0, 120.0, 130.0, 450.0],
                             "rate source": [400.0, 500.0, 600.0, 900.0]}}
    return [bench.Outcome("core_throughput", "ok", 3.0, 0, figures=figures[:2]),
            bench.Outcome("latency", "ok", 30.0, 0, figures=figures[2:4], series=series),
            bench.Outcome("source_records", "ok", 60.0, 0, figures=figures[4:]),
            bench.Outcome("rows_throughput", "missing",
                          error="benchmarks/rows_throughput.py does not exist")]


def test_table_has_each_figure_beside_its_baseline_ratio_target_and_verdict() -> None:
    table = bench.format_table(bench.table_rows(outcomes()))
    lines = table.splitlines()
    assert lines[0].split() == ["scenario", "case", "value", "baseline", "baseline", "value",
                                "ratio", "target", "met"]
    row = next(line for line in lines if "request(1024)" in line)
    assert "2.40 M elements/s" in row and "4.00 M elements/s" in row
    assert "0.60" in row and "ratio >= 0.5" in row and row.endswith("yes")
    assert next(line for line in lines if "request(1)" in line).endswith("NO")
    p50 = next(line for line in lines if "p50, reactive" in line)
    # Both the ratio target and the bound on the value must hold.
    assert "0.24" in p50 and "ratio <= 1; value <= 150 ms" in p50 and p50.endswith("yes")
    assert next(line for line in lines if "p99, reactive" in line).endswith("NO")
    cold = next(line for line in lines if "cold start" in line)
    assert "7.5 s" in cold and cold.endswith("-")  # no baseline, no target: no verdict
    missing = next(line for line in lines if "rows_throughput" in line)
    assert "MISSING: benchmarks/rows_throughput.py does not exist" in missing
    assert missing.endswith("NO")


def test_long_case_names_wrap_within_their_column() -> None:
    long_case = "start() to first rows, reactive, default options, vs bare Python source"
    rows = bench.table_rows([bench.Outcome("latency", "ok", figures=[
        Figure("latency", long_case, 6.2, "s", baseline="bare", baseline_value=6.0)])])
    header, _, *lines = bench.format_table(rows, case_width=30).splitlines()
    start = header.index("case")
    cases = [line[start:start + 30].strip() for line in lines]
    assert len(lines) == 3 and all(len(case) <= 30 for case in cases)
    assert " ".join(cases) == long_case
    assert "6.2 s" in lines[0] and lines[1].strip() == cases[1]  # values on the first line


def write_script(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body), encoding="utf-8")


def test_run_script_reads_figures_and_reports_missing_failed_and_silent_scripts(
        tmp_path: Path) -> None:
    shutil.copy(BENCH_DIR / "report.py", tmp_path / "report.py")
    write_script(tmp_path, "good", """
        import argparse
        from report import Figure, write
        parser = argparse.ArgumentParser()
        parser.add_argument("--json")
        parser.add_argument("--quick", action="store_true")
        args = parser.parse_args()
        print("measuring")
        write(args.json, "core", [Figure("core", "quick" if args.quick else "full", 2.0,
                                         "elements/s", baseline="loop", baseline_value=4.0,
                                         target=(">=", 0.5))],
              series={"latency_ms": {"x": [1.0, 2.0]}})
        """)
    write_script(tmp_path, "no_quick", """
        import argparse
        from report import Figure, write
        parser = argparse.ArgumentParser()
        parser.add_argument("--json")
        write(parser.parse_args().json, "core", [Figure("core", "c", 1.0, "s")])
        """)
    write_script(tmp_path, "broken", """
        import sys
        print("Traceback: something broke", file=sys.stderr)
        sys.exit(3)
        """)
    write_script(tmp_path, "silent", "print('forgot --json')\n")
    logs = tmp_path / "logs"
    logs.mkdir()

    good = bench.run_script("good", bench_dir=tmp_path, quick=True, log_dir=logs, echo=False)
    assert good.status == "ok" and good.returncode == 0
    assert [(f.case, f.ratio, f.met) for f in good.figures] == [("quick", 0.5, True)]
    assert good.series == {"latency_ms": {"x": [1.0, 2.0]}}
    # A script that does not take --quick is run without it.
    no_quick = bench.run_script("no_quick", bench_dir=tmp_path, quick=True, echo=False)
    assert no_quick.status == "ok" and no_quick.figures[0].case == "c"

    broken = bench.run_script("broken", bench_dir=tmp_path, log_dir=logs, echo=False)
    assert broken.status == "failed" and broken.returncode == 3
    assert broken.error == "exit status 3: Traceback: something broke"
    assert (logs / "broken.log").read_text().strip() == "Traceback: something broke"

    silent = bench.run_script("silent", bench_dir=tmp_path, echo=False)
    assert (silent.status, silent.error) == ("failed", "no figures written (--json)")

    missing = bench.run_script("absent", bench_dir=tmp_path, echo=False)
    assert missing.status == "missing" and "absent.py does not exist" in missing.error


def test_a_script_over_its_time_is_killed_and_reported(tmp_path: Path) -> None:
    write_script(tmp_path, "stuck", "import time\nprint('started', flush=True)\n"
                                    "time.sleep(60)\n")
    outcome = bench.run_script("stuck", bench_dir=tmp_path, timeout=1.0, echo=False)
    assert outcome.status == "failed" and outcome.error == "timed out after 1 s"
    assert outcome.elapsed_s < 30


def test_results_file_holds_machine_facts_and_every_scenario(tmp_path: Path) -> None:
    import datetime as dt

    machine = bench.machine_facts()
    machine["load_average_before"] = bench.load_average()
    path = tmp_path / "2026-01-02.json"
    bench.write_results(path, outcomes(), machine, dt.datetime(2026, 1, 2, 3, 4, 5), 12.3)
    document = json.loads(path.read_text())
    assert document["started"] == "2026-01-02T03:04:05" and document["elapsed_s"] == 12.3
    facts = document["machine"]
    assert facts["cpus"] >= 1 and facts["python"] and facts["pyspark"]
    assert len(facts["git_commit"]) == 40 and len(facts["load_average_before"]) == 3
    statuses = {s["script"]: s["status"] for s in document["scenarios"]}
    assert statuses == {"core_throughput": "ok", "latency": "ok", "source_records": "ok",
                        "rows_throughput": "missing"}
    core = document["scenarios"][0]["figures"][0]
    assert (core["ratio"], core["met"]) == (0.6, True)
    # A script's own file (report.write) reads back to the same figures.
    own = tmp_path / "core.json"
    write(str(own), "core", synthetic_figures()[:2])
    assert [f.as_dict() for f in read(str(own))[0]] == [
        f.as_dict() for f in synthetic_figures()[:2]]


def test_plots_of_ratios_latency_and_memory_are_written(tmp_path: Path) -> None:
    written = bench.plot_all(outcomes(), tmp_path, "2026-01-02")
    assert [p.name for p in written] == ["2026-01-02-ratios.png", "2026-01-02-latency.png",
                                         "2026-01-02-memory.png"]
    for path in written:
        assert path.read_bytes()[:8] == PNG
    entries = bench.memory_entries(outcomes())
    assert [(value, baseline) for _, value, baseline in entries] == [(160.0, 150.0),
                                                                     (140.0, None)]


def test_no_plot_without_figures_that_need_it(tmp_path: Path) -> None:
    only_core = outcomes()[:1]
    assert [p.name for p in bench.plot_all(only_core, tmp_path, "d")] == ["d-ratios.png"]
    assert bench.plot_all([], tmp_path, "e") == []
