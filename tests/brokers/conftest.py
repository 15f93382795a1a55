"""tests/brokers: the brokers users run (RabbitMQ, NATS JetStream, Redis Streams, and
Server-Sent Events), each a real server started by the tests on 127.0.0.1 (tests/peers),
in a pytest process of its own (``./dev`` runs this folder as one group). The connector's
test helpers (``test_source``'s ``reactive``, ``streaming``'s ``ProgressWatch``) go on the
path here, for every broker's tests."""

from __future__ import annotations

import sys

from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py

for folder in reversed(FOLDERS):
    if folder not in sys.path:
        sys.path.insert(0, folder)
