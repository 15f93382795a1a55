"""The redis.conf of docs/how-to/redis.md loses nothing: a server running it, killed with
SIGKILL after entries were added and read by a group, comes back with every entry and
every pending entry; out of memory it refuses writes rather than evict a stream.

The server runs the page's configuration block as written, with its ``include`` line (the
password file a user keeps apart) dropped: the test's server sets its own password, port,
bind address and folder after it (tests/peers/redis_server.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis_server
from redis_server import RedisServer

PAGE = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "redis.md"
SETTINGS = {"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"}


def _page_config() -> str:
    blocks = re.findall(r"```text\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    configs = [block for block in blocks if block.startswith("# redis.conf")]
    assert len(configs) == 1, f"{PAGE.name} has {len(configs)} redis.conf blocks, not one"
    return configs[0]


def _runnable(config: str) -> str:
    lines = config.splitlines()
    includes = [i for i, line in enumerate(lines) if line.split()[:1] == ["include"]]
    assert len(includes) == 1, "the page's configuration includes no password file"
    del lines[includes[0]]
    return "\n".join(lines)


def test_the_pages_config_keeps_entries_and_pending_entries_across_a_kill(
        tmp_path: Path) -> None:
    config = _runnable(_page_config())
    first = RedisServer(directory=tmp_path, config=config).start()
    try:
        client = first.client()
        try:
            for name, value in SETTINGS.items():
                assert client.config_get(name)[name] == value, name
        finally:
            client.close()
        redis_server.create_group(first, "orders", "g", "0")
        redis_server.add_json(first, "orders", 1000)
        client = first.client()
        try:
            read = client.xreadgroup("g", "c", {"orders": ">"}, count=300)[0][1]
            client.xack("orders", "g", *[entry_id for entry_id, _ in read[:100]])
        finally:
            client.close()
        assert first.process is not None
        first.process.kill()  # SIGKILL, by its pid: no chance to save anything
        first.process.wait(10)
    finally:
        first.stop()
    again = RedisServer(directory=tmp_path, config=config).start()
    try:
        assert redis_server.stream_length(again, "orders") == 1000
        assert redis_server.pending_count(again, "orders", "g") == 200
    finally:
        again.stop()


def test_the_pages_config_refuses_writes_rather_than_evict(tmp_path: Path) -> None:
    import redis

    with RedisServer(directory=tmp_path, config=_runnable(_page_config())) as server:
        client = server.client()
        try:
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used + 2 * 2**20)
            added = 0
            with pytest.raises(redis.exceptions.OutOfMemoryError, match="maxmemory"):
                for _ in range(10_000):
                    client.xadd("orders", {"payload": b"x" * 10_000})
                    added += 1
            assert added > 0
            assert client.xlen("orders") == added  # nothing evicted
        finally:
            client.close()
