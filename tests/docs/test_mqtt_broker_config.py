"""The mosquitto configuration of docs/how-to/mqtt.md keeps every message queued for a
reader that is down, and lets in only clients that log in.

The broker runs the page's configuration block as written, with three lines changed for
the test: its listener moves to a free port on 127.0.0.1, its ``password_file`` to a file
made here with ``mosquitto_passwd``, and a ``user`` line keeps mosquitto running as this
user (as root it would become "mosquitto", which cannot read the test's folder). Then
3,000 QoS 1 messages are published to a persistent session while no reader is connected
(mosquitto's default keeps 1,000 and drops the rest silently), and a reader gets every
one. No Spark: the adapter alone shows it.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

import mosquitto  # tests/peers
import pytest

from reactive_streams import collect
from reactive_streams.adapters.mqtt import MqttError, MqttPublisher

mqtt = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402 - after the skip
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "mqtt.md"
QUEUED = 3000  # past mosquitto's default max_queued_messages (1000)
SETTINGS = ("max_queued", "message_size_limit")


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _page_config() -> str:
    blocks = re.findall(r"```text\n(.*?)```", _page(), re.S)
    configs = [block for block in blocks if block.startswith("# mosquitto.conf")]
    assert len(configs) == 1, f"{PAGE.name} has {len(configs)} mosquitto.conf blocks, not one"
    return configs[0]


def _runnable(config: str, passwords: Path) -> str:
    lines = config.splitlines()
    files = [i for i, line in enumerate(lines) if line.split()[:1] == ["password_file"]]
    assert len(files) == 1, "the page's configuration names no password_file"
    lines[files[0]] = f"password_file {passwords}"
    return "\n".join([*lines, f"user {getpass.getuser()}", ""])


def _password_file(folder: Path, users: dict[str, str]) -> Path:
    tool = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    path = folder / "passwd"
    for index, (user, password) in enumerate(users.items()):
        create = ["-c"] if index == 0 else []
        subprocess.run([tool, "-b", *create, str(path), user, password], check=True,
                       capture_output=True, timeout=30)
    return path


def test_the_pages_example_broker_uses_the_settings_that_matter() -> None:
    # The example's set-up writes its own mosquitto.conf: it must not drop either.
    wanted = [line for line in _page_config().splitlines() if line.startswith(SETTINGS)]
    assert len(wanted) == 3, wanted
    for line in wanted:
        assert f"{line}\\n" in _page(), f"the MQTT example's broker lacks {line!r}"
    assert "allow_anonymous false" in _page_config()


def test_the_pages_broker_config_drops_nothing_and_lets_in_only_its_users(
        tmp_path: Path) -> None:
    passwords = _password_file(tmp_path, {"reader": "reader-secret", "plant": "plant-secret"})
    config = _runnable(_page_config(), passwords)
    with mosquitto.Broker(config=config) as broker:
        topic = f"docs/{uuid.uuid4().hex[:8]}"
        client_id = f"docs-{uuid.uuid4().hex[:8]}"
        anonymous = MqttPublisher(broker.host, topic, port=broker.port, max_messages=1)
        with pytest.raises(MqttError, match="Not authorized"):
            collect(anonymous, timeout=30)

        _persistent_session(broker.host, broker.port, client_id, topic,
                            ("reader", "reader-secret"))
        sender = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        sender.username_pw_set("plant", "plant-secret")
        sender.max_inflight_messages_set(1000)
        sender.connect(broker.host, broker.port)
        sender.loop_start()
        try:
            sent = [sender.publish(topic, b"%d" % i, qos=1) for i in range(QUEUED)]
            for info in sent:
                info.wait_for_publish(60)
                assert info.is_published(), f"message {info.mid} was not acknowledged"
        finally:
            sender.disconnect()
            sender.loop_stop()

        reader = MqttPublisher(broker.host, topic, port=broker.port, client_id=client_id,
                               username="reader", password="reader-secret",
                               max_messages=QUEUED, decode=lambda m: int(m.payload))
        # With mosquitto's default (max_queued_messages 1000) only 1,000 would come: the
        # wait would time out instead.
        assert sorted(collect(reader, timeout=60)) == list(range(QUEUED))


def _persistent_session(host: str, port: int, client_id: str, topic: str,
                        login: tuple[str, str]) -> None:
    """Connect as ``client_id`` with a session the broker keeps for a day, subscribe to
    ``topic`` at QoS 1, and leave: the broker queues the topic's messages meanwhile."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv5)
    client.username_pw_set(*login)
    expiry = Properties(PacketTypes.CONNECT)
    expiry.SessionExpiryInterval = 86400
    granted = threading.Event()
    client.on_subscribe = lambda *args: granted.set()
    client.connect(host, port, clean_start=False, properties=expiry)
    client.loop_start()
    try:
        client.subscribe(topic, qos=1)
        assert granted.wait(20), f"no SUBACK for {topic} within 20 s"
    finally:
        client.disconnect()
        client.loop_stop()
