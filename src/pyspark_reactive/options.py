"""The options of ``spark.readStream.format("reactive")``, validated once, in one place.

Every error names the option, the value given and what is accepted. Options arrive as
strings under case-insensitive names; :func:`parse_source_options` turns them into a
:class:`SourceOptions` that the data source, the runner and the tasks share.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AVAILABLE_NOW_DEFAULT_BATCHES",
    "DEFAULT_FILL_WAIT_MS",
    "DEFAULT_MAX_RECORDS_PER_TRIGGER",
    "CaseInsensitiveOptions",
    "OptionError",
    "SourceOptions",
    "parse_source_options",
    "resolve_factory",
]

DEFAULT_MAX_RECORDS_PER_TRIGGER = 10_000
DEFAULT_FILL_WAIT_MS = 100
# availableNowMaxRecords defaults to this many full micro-batches, so a scheduled
# availableNow run over an endless publisher lasts about as many batches whatever their size.
AVAILABLE_NOW_DEFAULT_BATCHES = 100

# Name -> "module:attribute" of the built-in publishers (see builtin.py).
BUILTIN_PUBLISHERS = {"range": "pyspark_reactive.builtin:range_publisher"}

# Set by read_stream() on the data source class it registers; never a user option.
SHIPPED_FACTORY = "<factory shipped with the data source>"


class OptionError(ValueError):
    """A source option with a value that is not accepted."""

    def __init__(self, option: str, value: object, accepted: str) -> None:
        self.option = option
        self.value = value
        super().__init__(f"reactive source: option {option}={value!r} is not accepted: "
                         f"{accepted}")


class CaseInsensitiveOptions(Mapping[str, str]):
    """The options as given to a publisher factory: names compare case-insensitively,
    as Spark's own options do (``options["recordTo"]`` and ``options["recordto"]`` agree).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = {str(k).lower(): str(v) for k, v in options.items()}

    def __getitem__(self, name: str) -> str:
        return self._options[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __repr__(self) -> str:
        return f"CaseInsensitiveOptions({self._options!r})"


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one reactive source.

    Attributes
    ----------
    publisher : str
        A built-in name (``range``) or ``"package.module:factory"``.
    max_records_per_trigger : int
        Demand per micro-batch: the most rows in one batch.
    fill_wait_ms : int
        How long a micro-batch waits for the publisher to fill it before taking what
        has arrived.
    wal_location : str or None
        Where the write-ahead log lives; ``None`` for no log.
    num_partitions : int or None
        Partitions per micro-batch; ``None`` to size them automatically.
    available_now_max_records : int
        The most elements an ``availableNow`` trigger takes from the publisher beyond
        those the source holds when the trigger starts; then the query ends.
    raw : dict of str to str
        Every option as given (with its original name), passed to the factory.
    """

    publisher: str
    max_records_per_trigger: int
    fill_wait_ms: int
    wal_location: str | None
    num_partitions: int | None
    available_now_max_records: int
    raw: dict[str, str]


def parse_source_options(options: Mapping[str, str], *,
                         shipped_factory: bool = False) -> SourceOptions:
    """Validate the reader's options.

    Parameters
    ----------
    options : mapping of str to str
        The options given to ``readStream`` (names are case-insensitive).
    shipped_factory : bool
        Whether a factory travels with the data source (``read_stream``), in which case
        ``publisher`` must not be given.

    Returns
    -------
    SourceOptions

    Raises
    ------
    OptionError
        Naming the first option whose value is not accepted.
    """
    raw = {str(k): str(v) for k, v in options.items()}
    lower = {k.lower(): v for k, v in raw.items()}

    publisher = lower.get("publisher")
    if shipped_factory:
        if publisher is not None:
            raise OptionError("publisher", publisher,
                              "not with read_stream(), which already names a factory")
        publisher = SHIPPED_FACTORY
    elif publisher is None or not publisher.strip():
        raise OptionError("publisher", publisher,
                          f"a built-in name ({', '.join(sorted(BUILTIN_PUBLISHERS))}) or an "
                          "import path 'package.module:factory'; it is required")
    else:
        publisher = publisher.strip()

    max_records = _int_option(lower, "maxRecordsPerTrigger", DEFAULT_MAX_RECORDS_PER_TRIGGER, 1)
    assert max_records is not None
    fill_wait = _int_option(lower, "fillWaitMs", DEFAULT_FILL_WAIT_MS, 0)
    partitions = _int_option(lower, "numPartitions", None, 1)
    available_now = _int_option(lower, "availableNowMaxRecords",
                                AVAILABLE_NOW_DEFAULT_BATCHES * max_records, 0)
    wal = lower.get("wallocation")
    if wal is not None and not wal.strip():
        raise OptionError("walLocation", wal, "a local path or a filesystem URI pyarrow "
                          "understands (file:/path, hdfs://, s3://, ...)")
    assert fill_wait is not None and available_now is not None
    return SourceOptions(publisher=publisher, max_records_per_trigger=max_records,
                         fill_wait_ms=fill_wait, wal_location=wal.strip() if wal else None,
                         num_partitions=partitions, available_now_max_records=available_now,
                         raw=raw)


def _int_option(options: Mapping[str, str], name: str, default: int | None,
                minimum: int) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return default
    accepted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(name, text, accepted) from None
    if value < minimum:
        raise OptionError(name, text, accepted)
    return value


def resolve_factory(publisher: str) -> Callable[[Mapping[str, str]], Any]:
    """Find the publisher factory that ``publisher`` names.

    Parameters
    ----------
    publisher : str
        A built-in name or ``"package.module:factory"`` (``factory`` may be dotted).

    Returns
    -------
    callable
        Called with the reader's options; returns a ``Publisher``.

    Raises
    ------
    OptionError
        When the name is not built in, the module cannot be imported, the attribute is
        missing or not callable.
    """
    path = BUILTIN_PUBLISHERS.get(publisher.lower(), publisher)
    module_name, sep, attribute = path.partition(":")
    accepted = (f"a built-in name ({', '.join(sorted(BUILTIN_PUBLISHERS))}) or an import "
                "path 'package.module:factory'")
    if not sep or not module_name or not attribute:
        raise OptionError("publisher", publisher, accepted)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise OptionError("publisher", publisher,
                          f"{accepted}; importing {module_name!r} failed: {error}") from error
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise OptionError("publisher", publisher,
                              f"{accepted}; module {module_name!r} has no attribute "
                              f"{attribute!r}") from None
    if not callable(target):
        raise OptionError("publisher", publisher,
                          f"{accepted}; {path!r} is a {type(target).__name__}, not callable")
    factory: Callable[[Mapping[str, str]], Any] = target
    return factory


def check_wal_location(location: str) -> None:
    """Raise :class:`OptionError` unless the write-ahead log can be written at ``location``."""
    from .wal import WriteAheadLog

    try:
        WriteAheadLog(location).probe()
    except OSError as error:
        raise OptionError("walLocation", location,
                          f"a writable directory; writing there failed: {error}") from error
    except ValueError as error:
        raise OptionError("walLocation", location, str(error)) from error


def describe(options: SourceOptions) -> str:
    """One line naming the publisher and the demand, for logs."""
    wal = options.wal_location or "none"
    return (f"publisher={options.publisher} maxRecordsPerTrigger="
            f"{options.max_records_per_trigger} walLocation={wal} pid={os.getpid()}")
