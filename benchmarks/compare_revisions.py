"""A/B throughput of two checkouts of this project, interleaved: runs one benchmark script
of each checkout in turn (old, new, old, new, ...), each in a fresh process with that
checkout's ``src`` first on ``PYTHONPATH`` (Spark's Python processes inherit it), and
prints every figure the script printed as ``<label>: <N> rows/s``, the batch latency
median on such a line, and every ratio it printed as ``<mode> / <baseline> = <R>``, per
round and as the median of each side, with new / old.

Interleaving puts both sides under the same drifting load of a shared machine; the median
of several rounds discards the odd slow one. Make the old checkout with, for example,
``git worktree add /tmp/old <commit>``.

Run from the repository root::

    .venv/bin/python benchmarks/compare_revisions.py --old /tmp/old --rounds 5 \\
        rsocket_throughput.py --repeat 1 --rows 100000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent
# "(b) publisher=rsocket into Spark (noop): 123,456 rows/s" (rsocket_throughput and the
# like) or "  ceiling-sync     123,456 rows/s  query ..." (connect_publish_throughput): a
# label, then the figure.
FIGURE = re.compile(r"^\s*(?:(?P<label>\([a-z]\)[^:]*):|(?P<word>[a-z][a-z-]*))\s+"
                    r"(?P<value>[\d,]+(?:\.\d+)?) rows/s")
# On such a line: "batch latency median   971 ms" (connect_publish_throughput).
LATENCY = re.compile(r"batch latency median\s+(?P<value>\d+(?:\.\d+)?) ms")
# "connect / ceiling-sync = 0.74 (rows/s)" (connect_publish_throughput).
RATIO = re.compile(r"^\s*(?P<label>[a-z][a-z-]* / [a-z][a-z-]*) = (?P<value>\d+(?:\.\d+)?)"
                   r"\b")


def figures_of(output: str) -> dict[str, tuple[float, str]]:
    """The figures in a benchmark's ``output``: label -> (value, unit), in the order
    printed; the unit is ``rows/s``, ``ms`` (a batch latency median) or ``ratio``."""
    figures: dict[str, tuple[float, str]] = {}
    for line in output.splitlines():
        match = FIGURE.match(line)
        if match:
            label = (match["label"] or match["word"]).strip()
            figures[label] = (float(match["value"].replace(",", "")), "rows/s")
            latency = LATENCY.search(line)
            if latency:
                figures[f"{label} latency median"] = (float(latency["value"]), "ms")
            continue
        ratio = RATIO.match(line)
        if ratio:
            figures[ratio["label"]] = (float(ratio["value"]), "ratio")
    return figures


def shown(value: float, unit: str) -> str:
    return f"{value:.2f}" if unit == "ratio" else f"{value:,.0f} {unit}"


def run(tree: Path, script: str, args: list[str], timeout: float
        ) -> dict[str, tuple[float, str]]:
    """Figures of one run of ``tree``'s ``benchmarks/<script>``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tree / "src"), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(tree / "benchmarks" / script), *args],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"compare_revisions: {tree}/benchmarks/{script} failed "
                         f"(exit {done.returncode}):\n{done.stderr[-3000:]}")
    figures = figures_of(done.stdout)
    if not any(unit == "rows/s" for _, unit in figures.values()):
        raise SystemExit(f"compare_revisions: no 'label: N rows/s' line in the output of "
                         f"{tree}/benchmarks/{script}:\n{done.stdout[-2000:]}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, type=Path, help="the old checkout's root")
    parser.add_argument("--new", type=Path, default=NEW, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("script", help="a script in benchmarks/, e.g. rsocket_throughput.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed to the script")
    options = parser.parse_args()
    if options.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {options.rounds}")
    for tree in (options.old, options.new):
        if not (tree / "benchmarks" / options.script).is_file():
            parser.error(f"{tree}/benchmarks/{options.script} does not exist")
    sides = {"old": options.old.resolve(), "new": options.new.resolve()}
    seen: dict[str, list[dict[str, tuple[float, str]]]] = {"old": [], "new": []}
    started = time.monotonic()
    for round_ in range(1, options.rounds + 1):
        for side, tree in sides.items():
            figures = run(tree, options.script, options.args, options.timeout)
            seen[side].append(figures)
            text = ", ".join(f"{label} {shown(*figure)}" for label, figure in figures.items())
            print(f"round {round_}/{options.rounds} {side}: {text} "
                  f"({time.monotonic() - started:.0f} s, load average "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
    print(f"\n{options.script} {' '.join(options.args)}: median of {options.rounds} "
          f"interleaved rounds")
    labels = [label for label in seen["old"][0] if all(label in f for f in
                                                        seen["old"] + seen["new"])]
    for label in labels:
        unit = seen["old"][0][label][1]
        old = statistics.median(f[label][0] for f in seen["old"])
        new = statistics.median(f[label][0] for f in seen["new"])
        print(f"  {label}: old {shown(old, unit)}, new {shown(new, unit)}, new/old "
              f"{new / old:.2f}" if old else f"  {label}: old {shown(old, unit)}, new "
              f"{shown(new, unit)}")


if __name__ == "__main__":
    main()
