"""The README's mosquitto configuration keeps every message queued for a reader that is
down: the broker runs the README's ``conf`` block as written (only its listener moved to
a free port on 127.0.0.1), 3,000 QoS 1 messages are published to a persistent session
while no reader is connected (mosquitto's default keeps 1,000 and drops the rest
silently), and a reader then gets every one. No Spark: the adapter alone shows it.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import mosquitto
import pytest

from reactive_streams import collect
from reactive_streams.adapters.mqtt import MqttPublisher

pytest.importorskip("paho.mqtt.client")

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
QUEUED = 3000  # past mosquitto's default max_queued_messages (1000)


def _broker_config() -> str:
    blocks = re.findall(r"```conf\n(.*?)```", README, re.S)
    mqtt = [block for block in blocks if block.startswith("# mosquitto.conf")]
    assert len(mqtt) == 1, f"the README has {len(mqtt)} mosquitto conf blocks, not one"
    return mqtt[0]


def test_the_readme_example_broker_uses_the_settings_that_matter() -> None:
    # The example's set-up writes its own mosquitto.conf: it must not drop either.
    wanted = [line for line in _broker_config().splitlines()
              if line.startswith(("max_queued", "message_size_limit"))]
    assert wanted
    for line in wanted:
        assert f"{line}\\n" in README, f"the MQTT example's broker lacks {line!r}"


def test_the_readme_broker_config_drops_nothing_queued_while_the_reader_is_down() -> None:
    with mosquitto.Broker(config=_broker_config()) as broker:
        topic = f"readme/{uuid.uuid4().hex[:8]}"
        client_id = f"readme-{uuid.uuid4().hex[:8]}"
        # The persistent session, subscribed once, then left with nobody connected.
        client_id = mosquitto.persistent_session(broker, topic,
                                                 f"readme-{uuid.uuid4().hex[:8]}")
        mosquitto.publish(broker.host, broker.port, topic,
                          (b"%d" % i for i in range(QUEUED)), qos=1, timeout=60)
        reader = MqttPublisher(broker.host, topic, port=broker.port, client_id=client_id,
                               max_messages=QUEUED, decode=lambda m: int(m.payload))
        # With mosquitto's default (max_queued_messages 1000) only 1,000 would come: the
        # wait would time out instead.
        received = collect(reader, timeout=30)
        assert sorted(received) == list(range(QUEUED))
