"""Every benchmark scenario in one command (``./dev bench``): a table of figures beside
their baselines timed in the same run, a JSON file and plots.

Each scenario script runs in a process of its own, one after another (the machine's cores
are then its alone), as ``python benchmarks/<script>.py --json <file>``, and reports its
figures with ``report.py``. Its console output is shown as it goes (indented), its
standard error kept in ``<out>/<date>-logs/<script>.log``. A script that does not exist, fails
or writes no figures is reported as such in the table and makes the exit status 1; the
others still run. Targets that are not met are shown, never enforced.

Written to ``--out`` (default ``benchmarks/results/``): ``<date>.json`` (every figure, the
raw series, and the machine: cpus, load average before and after, Python, pyspark, git
commit), ``<date>-ratios.png`` (each scenario's ratios against their targets),
``<date>-latency.png`` (the distribution of latency samples) and ``<date>-memory.png``
(peak memory figures), the last two when some script reports them.

Run from anywhere::

    ./dev bench [--only SCRIPT ...] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from report import Figure, read

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
# In the order they run: the cheap in-process ones first.
SCRIPTS = ("core_throughput", "rows_throughput", "source_throughput", "source_records",
           "latency", "sink_throughput")
SCRIPT_TIMEOUT_S = 900.0
STDERR_TAIL = 12


@dataclass
class Outcome:
    """What one script's run gave."""

    script: str
    status: str  # "ok", "missing", "failed"
    elapsed_s: float = 0.0
    returncode: int | None = None
    error: str = ""
    figures: list[Figure] = field(default_factory=list)
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    log: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"script": self.script, "status": self.status,
                "elapsed_s": round(self.elapsed_s, 2), "returncode": self.returncode,
                "error": self.error, "log": self.log,
                "figures": [f.as_dict() for f in self.figures], "series": self.series}


def accepts(script: Path, flag: str) -> bool:
    """Whether a script takes ``flag``: its source names it as an option."""
    return f'"{flag}"' in script.read_text(encoding="utf-8")


def run_script(script: str, *, bench_dir: Path = BENCH_DIR, quick: bool = False,
               log_dir: Path | None = None, python: str = sys.executable,
               timeout: float = SCRIPT_TIMEOUT_S, echo: bool = True) -> Outcome:
    """Run ``<bench_dir>/<script>.py --json <file>`` and read the figures it wrote."""
    path = bench_dir / f"{script}.py"
    if not path.is_file():
        return Outcome(script, "missing", error=f"{path.relative_to(bench_dir.parent)} "
                       "does not exist")
    with tempfile.TemporaryDirectory(prefix=f"bench-{script}-") as tmp:
        figures_file = Path(tmp) / "figures.json"
        command = [python, str(path), "--json", str(figures_file)]
        if quick and accepts(path, "--quick"):
            command.append("--quick")
        log_path = (log_dir / f"{script}.log") if log_dir else Path(tmp) / "stderr.log"
        began = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen(
                command, cwd=bench_dir.parent, stdout=subprocess.PIPE, stderr=log, text=True,
                bufsize=1, start_new_session=True,  # a group of its own: ended as one
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # the script's group: Spark too

            watchdog = threading.Timer(timeout, kill)
            watchdog.start()
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    if echo:
                        print(f"    {line.rstrip()}", flush=True)
                returncode = process.wait()
            finally:
                watchdog.cancel()
        elapsed = time.monotonic() - began
        outcome = Outcome(script, "ok", elapsed, returncode,
                          log=str(log_path) if log_dir else None)
        if figures_file.is_file():
            try:
                outcome.figures, outcome.series = read(str(figures_file))
            except (ValueError, KeyError, TypeError) as error:
                outcome.status, outcome.error = "failed", f"unreadable figures: {error}"
        if timed_out.is_set():
            outcome.status, outcome.error = "failed", f"timed out after {timeout:.0f} s"
        elif returncode != 0:
            outcome.status = "failed"
            outcome.error = f"exit status {returncode}: {last_error(log_path)}"
        elif not outcome.figures and outcome.status == "ok":
            outcome.status, outcome.error = "failed", "no figures written (--json)"
        return outcome


def last_error(log_path: Path) -> str:
    """The last meaningful line of a script's standard error."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("at ") and "WARN" not in text:
            return text[:200]
    return ""


# -- the table ----------------------------------------------------------------------------

COLUMNS = ("scenario", "case", "value", "baseline", "baseline value", "ratio", "target",
           "met")


def number(value: float | None, unit: str = "") -> str:
    """A figure for the table: large rates in millions, small ones with 3 digits.

    >>> number(2_412_000, "elements/s"), number(243.4, "ms"), number(0.912)
    ('2.41 M elements/s', '243 ms', '0.912')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1e5:
        text = f"{value / 1e6:.2f} M"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def target_text(figure: Figure) -> str:
    parts = []
    if figure.target is not None:
        parts.append(f"ratio {figure.target[0]} {figure.target[1]:g}")
    if figure.bound is not None:
        parts.append(f"value {figure.bound[0]} {number(figure.bound[1], figure.unit)}")
    return "; ".join(parts) or "-"


def table_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    rows = []
    for outcome in outcomes:
        for figure in outcome.figures:
            met = figure.met
            rows.append((
                figure.scenario, figure.case, number(figure.value, figure.unit),
                figure.baseline or "-",
                number(figure.baseline_value, figure.unit) if figure.baseline else "-",
                "-" if figure.ratio is None else f"{figure.ratio:.2f}",
                target_text(figure), "-" if met is None else ("yes" if met else "NO")))
        if outcome.status != "ok":
            rows.append((outcome.script, f"{outcome.status.upper()}: {outcome.error}",
                         "-", "-", "-", "-", "-", "NO"))
    return rows


def format_table(rows: Sequence[tuple[str, ...]], case_width: int = 56) -> str:
    """The rows as aligned text; long case names wrap within their column."""
    wrapped = []
    for row in rows:
        case_lines = textwrap.wrap(row[1], case_width) or [""]
        wrapped.append([(*row[:1], case_lines[0], *row[2:])]
                       + [("", line, *[""] * (len(row) - 2)) for line in case_lines[1:]])
    lines = [line for block in wrapped for line in block]
    widths = [max(len(str(x)) for x in column) for column in zip(COLUMNS, *lines, strict=True)]
    numeric = {2, 4, 5}

    def render(cells: Sequence[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [render(COLUMNS), render(["-" * w for w in widths])]
    out += [render(line) for line in lines]
    return "\n".join(out)


# -- the record ---------------------------------------------------------------------------

def machine_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    for package in ("pyspark", "pyarrow"):
        try:
            facts[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            facts[package] = None
    try:
        import psutil

        facts["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    facts["git_commit"] = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no")
    facts["git_changed_files"] = len(changed.splitlines()) if changed else 0
    return facts


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_results(path: Path, outcomes: Sequence[Outcome], machine: dict[str, Any],
                  started: dt.datetime, elapsed_s: float) -> None:
    document = {
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 1),
        "machine": machine,
        "scenarios": [o.as_dict() for o in outcomes],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=1), encoding="utf-8")
    os.replace(tmp, path)


# -- the plots ----------------------------------------------------------------------------

def plot_all(outcomes: Sequence[Outcome], out_dir: Path, stem: str) -> list[Path]:
    """Every plot the figures allow; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    for plot in (plot_ratios, plot_latency, plot_memory):
        path = out_dir / f"{stem}-{plot.__name__.removeprefix('plot_')}.png"
        if plot(outcomes, path):
            written.append(path)
    return written


def _label(text: str, width: int = 38) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def plot_ratios(outcomes: Sequence[Outcome], path: Path) -> bool:
    """One panel per scenario: each figure's ratio to its baseline, its target marked."""
    import matplotlib.pyplot as plt

    groups: dict[str, list[Figure]] = {}
    for outcome in outcomes:
        for figure in outcome.figures:
            if figure.ratio is not None and figure.unit != "MiB":  # memory: its own plot
                groups.setdefault(figure.scenario, []).append(figure)
    if not groups:
        return False
    heights = [max(1.6, 0.55 * len(figs) + 1.0) for figs in groups.values()]
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (scenario, figs) in zip(axes[:, 0], groups.items(), strict=False):
        ratios = [f.ratio or 0.0 for f in figs]
        colours = ["tab:grey" if f.met is None else "tab:green" if f.met else "tab:red"
                   for f in figs]
        ys = list(range(len(figs)))
        ax.barh(ys, ratios, color=colours)
        for y, f in zip(ys, figs, strict=False):
            if f.target is not None:
                ax.plot([f.target[1]] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
            ax.annotate(f"{f.ratio:.2f}", (f.ratio or 0.0, y), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.axvline(1.0, color="tab:blue", linestyle=":", linewidth=1)
        ax.set_yticks(ys, [_label(f"{f.case} / {f.baseline}") for f in figs], fontsize=7)
        ax.invert_yaxis()
        positive = [r for r in ratios if r > 0]
        if positive and max(positive) / min(positive) > 30:
            ax.set_xscale("log")
        ax.set_title(f"{scenario}: value / same-run baseline (black: target; green met, "
                     "red not)", fontsize=9)
        ax.set_xlabel("ratio (dotted: 1.0, as good as the baseline)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_latency(outcomes: Sequence[Outcome], path: Path) -> bool:
    """The cumulative distribution of every latency series (``series["latency_ms"]``)."""
    import matplotlib.pyplot as plt

    curves = {label: sorted(samples) for o in outcomes
              for label, samples in o.series.get("latency_ms", {}).items() if samples}
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(9, 5))
    for label, samples in curves.items():
        n = len(samples)
        ax.step(samples, [(i + 1) / n for i in range(n)], where="post",
                label=f"{label} (p50 {samples[n // 2]:.0f} ms, {n} rows)")
    bounds = sorted({f.bound[1] for o in outcomes for f in o.figures
                     if f.bound is not None and f.unit == "ms"})
    for bound in bounds:
        ax.axvline(bound, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"{bound:g} ms", (bound, 0.02), rotation=90, fontsize=8,
                    xytext=(3, 0), textcoords="offset points")
    ax.set_xlabel("latency: arrival in foreachBatch minus emission (ms)")
    ax.set_ylabel("fraction of rows at or below")
    ax.set_ylim(0, 1.01)
    ax.set_title("Latency in steady state, same rate, same sink (dashed: bounds)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def memory_entries(outcomes: Sequence[Outcome]) -> list[tuple[str, float, float | None]]:
    """Every memory figure (unit MiB) with its baseline's value, and every ``extra`` value
    whose key names MiB: (label, value, baseline value or None)."""
    entries: list[tuple[str, float, float | None]] = []
    for outcome in outcomes:
        for f in outcome.figures:
            if f.unit == "MiB":
                label = f"{f.scenario}: {f.case}" + (f"\n(grey: {f.baseline})"
                                                     if f.baseline else "")
                entries.append((label, float(f.value), f.baseline_value))
            for key, value in f.extra.items():
                if "mib" in key.lower() and isinstance(value, (int, float)):
                    entries.append((f"{f.scenario}: {f.case}, {key}", float(value), None))
    return list(dict.fromkeys(entries))


def plot_memory(outcomes: Sequence[Outcome], path: Path) -> bool:
    """Peak memory figures as bars, each beside its baseline's (grey)."""
    import matplotlib.pyplot as plt

    entries = memory_entries(outcomes)
    if not entries:
        return False
    fig, ax = plt.subplots(figsize=(10, max(2.0, 0.6 * len(entries) + 1.2)))
    for y, (_, value, baseline) in enumerate(entries):
        offset = 0.0 if baseline is None else -0.2
        ax.barh(y + offset, value, height=0.4 if baseline is not None else 0.6,
                color="tab:purple")
        ax.annotate(f"{value:.0f}", (value, y + offset), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
        if baseline is not None:
            ax.barh(y + 0.2, baseline, height=0.4, color="tab:grey")
            ax.annotate(f"{baseline:.0f}", (baseline, y + 0.2), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(range(len(entries)), [label for label, _, _ in entries], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("peak resident memory (MiB)")
    ax.set_title("Peak memory by process role (purple), beside the same-run baseline (grey)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- main ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run every benchmark scenario; print a table of figures beside their "
                    "same-run baselines; write JSON and PNG plots.")
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, metavar="SCRIPT",
                        help=f"run only these scripts (of: {', '.join(SCRIPTS)})")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results",
                        help="where the JSON file and plots go (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes, for scripts that take --quick")
    parser.add_argument("--timeout", type=float, default=SCRIPT_TIMEOUT_S,
                        help="seconds one script may take before it is killed "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    scripts = [s for s in SCRIPTS if s in args.only] if args.only else list(SCRIPTS)

    started = dt.datetime.now()
    stem = started.strftime("%Y-%m-%d")
    out_dir: Path = args.out
    log_dir = out_dir / f"{stem}-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_facts()
    machine["load_average_before"] = load_average()
    print(f"bench: {len(scripts)} scenario scripts, {machine['cpus']} cpus, load average "
          f"{machine['load_average_before']}, Python {machine['python']}, pyspark "
          f"{machine['pyspark']}, commit {machine['git_commit'][:10]}"
          + (" (quick)" if args.quick else ""), flush=True)
    began = time.monotonic()
    outcomes = []
    for number_, script in enumerate(scripts, start=1):
        print(f"[{number_}/{len(scripts)}] {script} (at {_clock(began)})", flush=True)
        outcome = run_script(script, quick=args.quick, log_dir=log_dir,
                             timeout=args.timeout)
        outcomes.append(outcome)
        detail = f"{len(outcome.figures)} figures" if outcome.status == "ok" else (
            f"{outcome.status.upper()}: {outcome.error}")
        print(f"[{number_}/{len(scripts)}] {script}: {detail}, {outcome.elapsed_s:.0f} s "
              f"(total {_clock(began)})", flush=True)
        if outcome.status == "failed" and outcome.log:
            tail = Path(outcome.log).read_text(encoding="utf-8", errors="replace")
            for line in tail.splitlines()[-STDERR_TAIL:]:
                print(f"    ! {line}", flush=True)
    elapsed = time.monotonic() - began
    machine["load_average_after"] = load_average()

    print()
    print(format_table(table_rows(outcomes)))
    results = out_dir / f"{stem}.json"
    write_results(results, outcomes, machine, started, elapsed)
    plots = plot_all(outcomes, out_dir, stem)
    print(f"\n{_clock(began)} in all; load average before {machine['load_average_before']}, "
          f"after {machine['load_average_after']} ({machine['cpus']} cpus)")
    print(f"wrote {results}" + "".join(f", {p.name}" for p in plots)
          + f"; standard error of each script in {log_dir}")
    bad = [o.script for o in outcomes if o.status != "ok"]
    if bad:
        print(f"not run or failed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def _clock(began: float) -> str:
    seconds = int(time.monotonic() - began)
    return f"{seconds // 60}:{seconds % 60:02d}"


if __name__ == "__main__":
    sys.exit(main())
