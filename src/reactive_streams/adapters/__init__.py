"""Adapters between Reactive Streams and the publishers users already have.

Each module imports its library only when used, and a missing library raises an
``ImportError`` that names the extra to install (``pip install 'pyspark-reactive[mqtt]'``):

- :mod:`reactive_streams.adapters.aio`: ``async for`` over any Publisher, and a
  Publisher over any async iterable (no extra: asyncio is in the standard library);
- :mod:`reactive_streams.adapters.rx`: ReactiveX observables (extra ``rx``);
- :mod:`reactive_streams.adapters.rsocket`: RSocket request-streams (extra ``rsocket``);
- :mod:`reactive_streams.adapters.mqtt`: MQTT 5 subscriptions (extra ``mqtt``);
- :mod:`reactive_streams.adapters.websocket`: WebSocket feeds (extra ``websocket``).
"""
