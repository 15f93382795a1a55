"""The figures a benchmark script reports, in one shape that ``benchmarks/bench.py``
gathers into its table, its JSON file and its plots.

A script measures each case beside a baseline timed in the same run and reports a
:class:`Figure` per case. Given ``--json PATH`` it writes its figures there with
:func:`write` (the console output stays as it was)::

    figures = [Figure("core", "request(1024)", 2.4e6, "elements/s",
                      baseline="plain loop", baseline_value=14.6e6, target=(">=", 0.5))]
    write(args.json, "core", figures, series={"latency_ms": {...}})

``ratio`` is always ``value / baseline_value``; ``target`` is a bound on that ratio
(``(">=", 0.5)``: at least half the baseline; ``("<=", 1.3)``: at most 1.3 times it).
``bound`` is a bound on the value itself (``("<=", 150)`` ms).
``series`` carries raw samples a plot wants (latency samples, memory over time): a mapping
of plot name to a mapping of label to a list of numbers.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

OPERATORS = (">=", "<=")


@dataclass
class Figure:
    scenario: str  # the group it belongs to: "core", "rows", "source", "latency", "sink"
    case: str  # what was measured, e.g. "IterablePublisher -> AsyncSubscriber(1024)"
    value: float
    unit: str  # "elements/s", "rows/s", "s", "ms", "MiB"
    baseline: str | None = None  # what it is measured beside, in the same run
    baseline_value: float | None = None
    target: tuple[str, float] | None = None  # a bound on ratio, e.g. (">=", 0.5)
    bound: tuple[str, float] | None = None  # a bound on value itself, e.g. ("<=", 150)
    note: str = ""  # anything a reader needs: sizes, options
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. peak memory, batch count

    def __post_init__(self) -> None:
        for name in ("target", "bound"):
            limit = getattr(self, name)
            if limit is not None and limit[0] not in OPERATORS:
                raise ValueError(f"Figure.{name}: operator {limit[0]!r} is not one of "
                                 f"{OPERATORS}")

    @property
    def ratio(self) -> float | None:
        if self.baseline_value in (None, 0) or self.value is None:
            return None
        return self.value / self.baseline_value  # type: ignore[operator]

    @property
    def met(self) -> bool | None:
        """Whether the target and the bound hold (None: neither is set)."""
        checks = []
        if self.target is not None:
            checks.append(self.ratio is not None and _holds(self.ratio, self.target))
        if self.bound is not None:
            checks.append(_holds(self.value, self.bound))
        return all(checks) if checks else None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["met"] = self.met
        return data


def _holds(value: float, limit: tuple[str, float]) -> bool:
    op, bound = limit
    return value >= bound if op == ">=" else value <= bound


def write(path: str | None, scenario: str, figures: list[Figure],
          series: dict[str, dict[str, list[float]]] | None = None) -> None:
    """Writes ``figures`` (and ``series``) as JSON to ``path``; does nothing without one."""
    if not path:
        return
    document = {
        "scenario": scenario,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "figures": [figure.as_dict() for figure in figures],
        "series": series or {},
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=1)
    os.replace(tmp, path)


def read(path: str) -> tuple[list[Figure], dict[str, dict[str, list[float]]]]:
    """The figures and series a script wrote with :func:`write`."""
    with open(path, encoding="utf-8") as source:
        document = json.load(source)
    figures = []
    for data in document["figures"]:
        data = {k: v for k, v in data.items() if k not in ("ratio", "met")}
        for name in ("target", "bound"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        figures.append(Figure(**data))
    return figures, document.get("series", {})
