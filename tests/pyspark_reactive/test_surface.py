"""The package's typed, versioned surface: what a user's type checker and ``except`` see."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyspark_reactive
import reactive_streams
from pyspark_reactive import PySparkReactiveError
from reactive_streams import ReactiveStreamsError

ROOT = Path(__file__).resolve().parents[2]

_USER_CODE = """
from pyspark.sql import DataFrame, SparkSession
from pyspark_reactive import publish, publish_on_demand, read_stream
from reactive_streams import RangePublisher

def start(spark: SparkSession, df: DataFrame) -> DataFrame:
    publish(df, element={element!r}, when_unsubscribed={unsubscribed!r},
            when_stalled={stalled!r})
    return read_stream(spark, lambda options: RangePublisher(0, 5), schema="value BIGINT")
"""


def mypy_strict(tmp_path: Path, **files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One ``mypy --strict`` run over a user's module per entry of ``files`` (its name:
    the values it passes); mypy reads pyspark's types once for all of them."""
    paths = []
    for name, values in files.items():
        source = tmp_path / f"{name}.py"
        source.write_text(_USER_CODE.format(**values))
        paths.append(str(source))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / "cache"), *paths],
                          capture_output=True, text=True, timeout=300)


def test_a_users_type_checker_catches_a_misspelt_value(tmp_path: Path) -> None:
    done = mypy_strict(tmp_path,
                       misspelt=dict(element="dcit", unsubscribed="stpo", stalled="cancel"),
                       accepted=dict(element="dict", unsubscribed="stop", stalled="fail"))
    assert done.returncode == 1, done.stdout
    misspelt = [line for line in done.stdout.splitlines() if "misspelt.py:" in line]
    assert any('Argument "element" to "publish" has incompatible type "Literal[\'dcit\']"'
               in line for line in misspelt), done.stdout
    assert any('Argument "when_unsubscribed"' in line for line in misspelt), done.stdout
    assert "when_stalled" not in done.stdout  # "cancel" is accepted
    # The same code with accepted values passes, read_stream's DataFrame included.
    assert "accepted.py:" not in done.stdout, done.stdout
    assert "Found 2 errors in 1 file (checked 2 source files)" in done.stdout, done.stdout


def test_every_exception_class_derives_from_its_packages_base() -> None:
    found = {}
    for package, base in ((pyspark_reactive, PySparkReactiveError),
                          (reactive_streams, ReactiveStreamsError)):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
            name = name.removesuffix(".__init__")
            try:
                module = __import__(name, fromlist=["_"])
            except ImportError:  # an adapter whose library is an extra not installed
                continue
            for _, value in inspect.getmembers(module, inspect.isclass):
                if (issubclass(value, BaseException) and value.__module__ == name):
                    found[f"{name}.{value.__name__}"] = issubclass(value, base)
    assert found and all(found.values()), [name for name, ok in found.items() if not ok]
    assert "pyspark_reactive.source.options.OptionError" in found
    assert issubclass(pyspark_reactive.OptionError, ValueError)  # still caught as before
    assert issubclass(pyspark_reactive.AvailableNowWarning, UserWarning)


def test_the_version_is_the_distributions() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    [declared] = re.findall(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)
    assert pyspark_reactive.__version__ == reactive_streams.__version__ == declared


@pytest.mark.parametrize("name", ["Element", "WhenUnsubscribed", "WhenStalled"])
def test_the_literals_are_what_the_checks_accept(name: str) -> None:
    from typing import get_args

    from pyspark_reactive.sink import publisher

    accepted = {"Element": publisher.ELEMENT_TYPES,
                "WhenUnsubscribed": publisher.WHEN_UNSUBSCRIBED,
                "WhenStalled": publisher.WHEN_STALLED}[name]
    assert get_args(getattr(publisher, name)) == accepted and accepted
