"""A/B throughput of two checkouts of this project, interleaved: runs one benchmark script
of each checkout in turn (old, new, old, new, ...), each in a fresh process with that
checkout's ``src`` first on ``PYTHONPATH`` (Spark's Python processes inherit it), and
prints every figure the script printed as ``<label>: <N> rows/s``, per round and as the
median of each side, with new / old.

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
# like) or "  connect     123,456 rows/s  query ..." (connect_publish_throughput): a label,
# then the figure.
FIGURE = re.compile(r"^\s*(?:(?P<label>\([a-z]\)[^:]*):|(?P<word>[a-z]+))\s+"
                    r"(?P<value>[\d,]+(?:\.\d+)?) rows/s")


def run(tree: Path, script: str, args: list[str], timeout: float) -> dict[str, float]:
    """Figures of one run of ``tree``'s ``benchmarks/<script>``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tree / "src"), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(tree / "benchmarks" / script), *args],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"compare_revisions: {tree}/benchmarks/{script} failed "
                         f"(exit {done.returncode}):\n{done.stderr[-3000:]}")
    figures = {}
    for line in done.stdout.splitlines():
        match = FIGURE.match(line)
        if match:
            label = (match["label"] or match["word"]).strip()
            figures[label] = float(match["value"].replace(",", ""))
    if not figures:
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
    seen: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    started = time.monotonic()
    for round_ in range(1, options.rounds + 1):
        for side, tree in sides.items():
            figures = run(tree, options.script, options.args, options.timeout)
            seen[side].append(figures)
            shown = ", ".join(f"{label} {value:,.0f}" for label, value in figures.items())
            print(f"round {round_}/{options.rounds} {side}: {shown} "
                  f"({time.monotonic() - started:.0f} s)", flush=True)
    print(f"\n{options.script} {' '.join(options.args)}: median of {options.rounds} "
          f"interleaved rounds, rows/s")
    labels = [label for label in seen["old"][0] if all(label in f for f in
                                                        seen["old"] + seen["new"])]
    for label in labels:
        old = statistics.median(f[label] for f in seen["old"])
        new = statistics.median(f[label] for f in seen["new"])
        print(f"  {label}: old {old:,.0f}, new {new:,.0f}, new/old {new / old:.2f}")


if __name__ == "__main__":
    main()
