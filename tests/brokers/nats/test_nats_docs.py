"""The settings of docs/how-to/nats.md keep every message: the page's nats-server.conf
(run as written, its listen and store_dir moved here) lets in only its users and keeps the
stream across a server restart; the page's stream drops a message published again with the
same Nats-Msg-Id; the page's consumer (explicit acknowledgement, its AckWait and
max_ack_pending) gives every message to the reader, which reads as the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nats_server
import pytest

from reactive_streams import collect
from reactive_streams.adapters.nats_jetstream import JetStreamError, JetStreamPublisher

PAGE = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "nats.md"
USERS = {"READER_PASSWORD": "reader-docs-secret", "PLANT_PASSWORD": "plant-docs-secret"}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _server_config() -> str:
    configs = [b for b in _blocks("text") if b.startswith("# nats-server.conf")]
    assert len(configs) == 1, f"{PAGE.name} has {len(configs)} nats-server.conf blocks"
    return configs[0]


def _json(key: str) -> dict[str, Any]:
    found = [json.loads(b) for b in _blocks("json") if f'"{key}"' in b]
    assert len(found) == 1, f"{PAGE.name} has {len(found)} JSON blocks with {key}"
    return found[0]


def test_the_pages_settings_are_those_that_matter() -> None:
    stream, consumer = _json("subjects"), _json("durable_name")
    assert stream["storage"] == "file" and stream["duplicate_window"] > 0
    assert consumer["ack_policy"] == "explicit" and consumer["max_deliver"] == -1
    assert "store_dir" in _server_config() and "authorization" in _server_config()


def test_the_pages_server_stream_and_consumer_lose_nothing(tmp_path: Path) -> None:
    from nats.js.api import ConsumerConfig, StreamConfig

    stream, consumer = _json("subjects"), _json("durable_name")
    name, durable = stream["name"], consumer["durable_name"]
    subject = stream["subjects"][0].replace(">", "new")
    server = nats_server.Server(tmp_path, config=_server_config(), env=USERS)
    with server:
        plant = {"user": "plant", "password": USERS["PLANT_PASSWORD"]}

        async def set_up(js: Any) -> list[bool]:
            await js.add_stream(StreamConfig.from_response(dict(stream)))
            await js.add_consumer(name, ConsumerConfig.from_response(dict(consumer)))
            acks = []
            for i in [*range(100), *range(50)]:  # 50 published twice: dropped once
                acks.append((await js.publish(subject, json.dumps({"id": i}).encode(),
                                              headers={"Nats-Msg-Id": f"m{i}"})).duplicate
                            is True)
            return acks

        acks = _run_as(server, plant, set_up)
        assert acks == [False] * 100 + [True] * 50
        with pytest.raises(JetStreamError, match="refused the credentials"):
            collect(JetStreamPublisher(server.url, name, durable, max_messages=1,
                                       connect_timeout=3.0), timeout=20)
    # The stream is on file storage: a restarted server still has every message.
    with nats_server.Server(tmp_path, config=_server_config(), env=USERS) as again:
        reader = JetStreamPublisher(again.url, name, durable, username="reader",
                                    password=USERS["READER_PASSWORD"], max_messages=100,
                                    decode=lambda m: json.loads(m.data)["id"])
        assert sorted(collect(reader, timeout=30)) == list(range(100))
        # Acknowledged as each on_next returned: written by the time the connection closes.
        assert reader.wait_closed(10)
        login = {"user": "reader", "password": USERS["READER_PASSWORD"]}

        def read_info() -> Any:
            return _run_as(again, login, lambda js: js.consumer_info(name, durable))

        counts = nats_server.settled_counts(read_info)
        info = read_info()
        assert info.config.ack_wait == consumer["ack_wait"] / 1e9
        assert info.config.max_ack_pending == consumer["max_ack_pending"]
        assert counts == (0, 0)


def _run_as(server: nats_server.Server, login: dict[str, str], work: Any) -> Any:
    import asyncio

    import nats

    async def main() -> Any:
        client = await nats.connect(servers=[server.url], allow_reconnect=False, **login)
        try:
            return await work(client.jetstream())
        finally:
            await client.drain()

    return asyncio.run(main())
