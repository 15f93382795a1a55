"""Credentials given in the reader's options stay out of logs, errors, thread names and the
plan (issue 19, finding 7); a failing built-in publisher's error says what failed first
(finding 14); ``publisher`` may be limited to listed modules (finding 10).

The secrets: a password and an access token in the WebSocket ``url``, a header value in
``headers`` (or ``headersFile``), a key in a ``walLocation`` URI (pyarrow's in-memory
``mock:`` filesystem takes userinfo as an S3 URI would).
"""

from __future__ import annotations

import base64
import logging
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch
from websocket_server import WebSocketServer, text_message

from pyspark_reactive.publishers.websocket import websocket_publisher
from pyspark_reactive.source.options import (
    PUBLISHER_MODULES_ENV,
    OptionError,
    check_wal_location,
    describe,
    parse_source_options,
    resolve_factory,
)
from pyspark_reactive.source.reader import ReactiveStreamReader
from pyspark_reactive.source.wal import WriteAheadLog
from reactive_streams import collect

__all__ = ["queries", "watch"]  # fixtures shared with test_source

PASSWORD, TOKEN, HEADER, WAL_KEY = "S3cretPw", "TOK123", "HDR456", "WalS3cret"
HEADERS = f'{{"Authorization": "Bearer {HEADER}"}}'
WAL = f"mock://AKIAEXAMPLE:{WAL_KEY}@bucket/wal"


def secrets_in(text: str) -> list[str]:
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()  # websockets' Basic auth
    return [secret for secret in (PASSWORD, TOKEN, HEADER, WAL_KEY, basic) if secret in text]


def with_credentials(port: int, path: str = "/feed") -> str:
    return f"ws://alice:{PASSWORD}@127.0.0.1:{port}{path}?access_token={TOKEN}"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections (the kernel's backlog) and never
    answers, so a WebSocket handshake waits there until its timeout."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(4)
        yield listening.getsockname()[1]


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound, never listening, held until
    the test ends (so no one else takes it meanwhile)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def spark_style(error: BaseException) -> str:
    """The text Spark shows for what a source runner raised (pyspark.util's
    handle_worker_exception formats it so)."""
    return "".join(traceback.TracebackException(type(error), error, error.__traceback__,
                                                compact=True).format())


def first_error_line(text: str) -> str:
    """The first line of a traceback's text that is an exception's message: not the
    "Traceback" header, nor a frame (indented), nor a blank line."""
    for line in text.splitlines():
        if line and not line.startswith((" ", "Traceback (most recent call last):")):
            return line
    raise AssertionError(f"no exception line in {text!r}")


# -- option errors and log lines (no Spark) ---------------------------------------------------

@pytest.mark.parametrize(("make", "shown"), [
    (lambda: websocket_publisher({"url": with_credentials(1).replace("ws:", "https:")}),
     "option url='https://***@127.0.0.1:1/feed?***' is not accepted"),
    (lambda: websocket_publisher({"url": with_credentials(1) + "#frag"}),
     "(ws://***@127.0.0.1:1/feed?*** isn't a valid URI: fragment identifier is meaningless)"),
    (lambda: websocket_publisher({"url": f"ws://alice:{PASSWORD}@127.0.0.1:99999/feed"}),
     "option url='ws://***@127.0.0.1:99999/feed' is not accepted"),
    (lambda: parse_source_options({"publisher": "range", "walLocation": WAL,
                                   "WALLOCATION": WAL + "2"}),
     "option walLocation='mock://***@bucket/wal2' is not accepted: one value; it is also "
     "given as walLocation='mock://***@bucket/wal'"),
    (lambda: check_wal_location(f"file://alice:{WAL_KEY}@otherhost/wal"),
     "option walLocation='file://***@otherhost/wal' is not accepted: a file: URI names a "
     "path on this machine, but this one names the host '***@otherhost'"),
])
def test_option_errors_show_urls_without_credentials(make: Any, shown: str) -> None:
    with pytest.raises(OptionError) as raised:
        make()
    assert shown in str(raised.value)
    # All of what Spark would show, causes included.
    assert secrets_in(spark_style(raised.value)) == []


def test_the_logged_description_and_the_write_ahead_log_hide_the_uri_key() -> None:
    options = parse_source_options({"publisher": "range", "walLocation": WAL})
    assert "walLocation=mock://***@bucket/wal " in describe(options)
    assert WriteAheadLog(WAL).location == "mock://***@bucket/wal"


@pytest.fixture
def runner_reader() -> Iterator[list[ReactiveStreamReader]]:
    """Readers run in this process as the source runner runs them; stopped at the end, and
    SIGTERM's handler (which a run installs) restored."""
    previous = signal.getsignal(signal.SIGTERM)
    made: list[ReactiveStreamReader] = []
    yield made
    for reader in made:
        reader.stop()
    signal.signal(signal.SIGTERM, previous)


def test_the_runner_logs_and_names_threads_without_credentials_and_fails_message_first(
        runner_reader: list[ReactiveStreamReader], silent_port: int,
        caplog: pytest.LogCaptureFixture) -> None:
    # The handshake waits (openTimeoutMs) on a server that never answers: meanwhile the
    # subscription's thread is there to be seen.
    options = parse_source_options({"publisher": "websocket",
                                    "url": with_credentials(silent_port),
                                    "headers": HEADERS, "walLocation": WAL,
                                    "openTimeoutMs": "1500", "fillWaitMs": "20"})
    reader = ReactiveStreamReader(options, StructType([StructField("value", StringType())]),
                                  None)
    runner_reader.append(reader)
    names: set[str] = set()
    failure: BaseException | None = None
    deadline = time.monotonic() + 20
    with caplog.at_level(logging.DEBUG):
        while failure is None and time.monotonic() < deadline:
            names.update(thread.name for thread in threading.enumerate())
            try:
                reader.latestOffset({"offset": 0}, None)
            except Exception as error:
                failure = error
    assert failure is not None, "a refused connection did not fail latestOffset in 20 s"
    logged = caplog.text
    assert "subscribing to WebSocketPublisher('ws://***@127.0.0.1:" in logged
    assert "walLocation=mock://***@bucket/wal" in logged
    assert secrets_in(logged) == []
    assert "websocket-publisher" in names and secrets_in(" ".join(names)) == []
    shown = spark_style(failure)
    assert secrets_in(shown) == []
    # The first message is what failed; the library's traceback comes after it.
    first = first_error_line(shown)
    assert first == (
        "RuntimeError: reactive source: the publisher (websocket) signalled on_error: "
        f"ConnectionError: websocket publisher: could not connect to ws://***@127.0.0.1:"
        f"{silent_port}/feed?***: TimeoutError: timed out during opening handshake"), shown
    assert shown.index(first) < shown.index("websockets/asyncio/client.py")


# -- through Spark: the plan and the query's error ---------------------------------------------

def test_explain_shows_no_credentials(spark: SparkSession,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    df = reactive(spark, publisher="websocket", url=with_credentials(1), headers=HEADERS,
                  walLocation=WAL, password=PASSWORD, token=TOKEN).load()
    capsys.readouterr()
    df.explain(extended=True)
    plan = capsys.readouterr().out
    [relation, *_] = [line for line in plan.splitlines() if "StreamingRelationV2" in line]
    for option in ("url", "headers", "walLocation", "password", "token"):
        assert f"{option}=*********(redacted)" in relation, relation
    assert secrets_in(plan) == []


def test_a_failing_websocket_query_says_what_failed_first_without_credentials(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path, refused_port: int) -> None:
    url = with_credentials(refused_port)
    df = reactive(spark, publisher="websocket", url=url, headers=HEADERS).load()
    query, _ = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is not None
    error = query.exception()
    assert error is not None
    shown = str(error)
    assert secrets_in(shown) == []
    # What the user reads first, after Spark's own prefix and the runner's frames.
    first = first_error_line(shown.split("latestOffset: ", 1)[1])
    assert first == (
        "RuntimeError: reactive source: the publisher (websocket) signalled on_error: "
        f"ConnectionError: websocket publisher: could not connect to ws://***@127.0.0.1:"
        f"{refused_port}/feed?***: ConnectionRefusedError: [Errno 111] Connect call failed "
        f"('127.0.0.1', {refused_port})"), shown
    # The library's traceback follows, as the cause.
    assert shown.index(first) < shown.index("site-packages/websockets/") < shown.index(
        "ConnectionRefusedError: [Errno 111]", shown.index(first) + len(first))


# -- headersFile ------------------------------------------------------------------------------

def test_headers_file_sends_its_headers_and_shows_only_its_path(tmp_path: Path) -> None:
    path = tmp_path / "headers.json"
    path.write_text(HEADERS)
    with WebSocketServer() as server:
        publisher = websocket_publisher({"url": f"{server.url}/count/2",
                                         "headersFile": str(path)})
        assert collect(publisher, timeout=10) == [text_message(0), text_message(1)]
        assert server.request_headers[-1]["Authorization"] == f"Bearer {HEADER}"


@pytest.mark.parametrize(("content", "extra", "expected"), [
    (None, {}, "reading it failed: No such file or directory"),
    ("Authorization: Bearer " + HEADER, {}, "; what it holds; it is not JSON"),
    (f'{{"X": 1, "Y": "{HEADER}"}}', {}, "header 'X' has a value of type int"),
    (HEADERS, {"headers": HEADERS}, "either headers or headersFile, not both"),
    (HEADERS, {"relative": "yes"}, "it is a relative path"),
    (" " * 70_000 + HEADERS, {}, "it holds more than 65536 bytes"),
])
def test_a_bad_headers_file_names_the_option_and_path_never_its_content(
        tmp_path: Path, content: str | None, extra: dict[str, str], expected: str) -> None:
    path = tmp_path / "headers.json"
    if content is not None:
        path.write_text(content)
    given = "headers.json" if extra.pop("relative", None) else str(path)
    with pytest.raises(OptionError) as raised:
        websocket_publisher({"url": "ws://127.0.0.1:1/feed", "headersFile": given, **extra})
    message = str(raised.value)
    assert message.startswith(f"reactive source: option headersFile={given!r} is not "
                              "accepted: "), message
    assert expected in message and secrets_in(spark_style(raised.value)) == []


# -- publisher: trusted input, optionally limited to listed modules ---------------------------

def test_publisher_modules_setting_allows_only_listed_modules(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A module that records being imported: refused means never imported.
    (tmp_path / "feeds_evil.py").write_text("IMPORTED = True\ndef make(options): pass\n")
    (tmp_path / "feeds").mkdir()
    (tmp_path / "feeds" / "__init__.py").write_text("")
    (tmp_path / "feeds" / "ticks.py").write_text("def make(options): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PUBLISHER_MODULES_ENV, "feeds, other.pkg")
    with pytest.raises(OptionError) as raised:
        resolve_factory("feeds_evil:make")
    assert "feeds_evil" not in sys.modules
    assert str(raised.value) == (
        "reactive source: option publisher='feeds_evil:make' is not accepted: a built-in "
        "name (mqtt, nats, rabbitmq, range, redis, rsocket, sse, websocket) or an import "
        "path 'package.module:factory' "
        f"from a module that {PUBLISHER_MODULES_ENV} allows (modules: feeds, other.pkg, "
        "with their submodules; built-in names are always allowed); 'feeds_evil' is not "
        "among them")
    assert resolve_factory("feeds.ticks:make").__module__ == "feeds.ticks"
    assert resolve_factory("websocket") is websocket_publisher
    monkeypatch.delenv(PUBLISHER_MODULES_ENV)
    assert callable(resolve_factory("feeds_evil:make"))  # no setting: any module
