"""Reading the deliveries of one consuming channel straight from the bytes pika receives.

pika turns every frame into objects (a method, a properties object, a body frame), runs
them through its callback registry and its content assembler, and queues an event per
message for its blocking channel to dispatch: most of a consumer's time at tens of
thousands of messages a second. :class:`DeliveryReader` takes pika's place at the one
point where received bytes enter it (``Connection._on_data_available``): a complete
``basic.deliver`` on the consuming channel, with its content header and body, is read
there with ``struct`` and handed over as the values of one message; every other frame
(and any delivery it does not read: a body over the limit, more than one body frame, an
unusual header, and every delivery after one of those until pika has handed that one to
the consumer) goes to pika's own frame decoding and processing, in the order received.
So the connection's handshake, heartbeats, flow control, errors and closing stay pika's.

It needs pika 1.x's ``Connection._on_data_available``, ``_frame_buffer``,
``_process_frame`` and ``bytes_received``, and ``Channel._consumers`` and ``_cancelled``
(all in pika 1.3 and 1.4); where they are missing, :meth:`install` leaves pika as it is.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from ..errors import ReactiveStreamsError

_FRAME: Final = struct.Struct(">BHL")  # type, channel, size
_METHOD_ID: Final = struct.Struct(">I")
_TAG: Final = struct.Struct(">Q")
_HEADER: Final = struct.Struct(">HHQH")  # class, weight, body size, property flags
_METHOD, _CONTENT_HEADER, _BODY = 1, 2, 3
_FRAME_END: Final = 0xCE
_BASIC: Final = 60
_BASIC_DELIVER: Final = (_BASIC << 16) | 60
#: Bytes asked of the socket at a time (pika asks 4,096): fewer trips through its loop.
RECV_BYTES: Final = 65536

#: The content header's property flags, as AMQP 0-9-1 numbers them.
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS = 1 << 15, 1 << 14, 1 << 13
_DELIVERY_MODE, _PRIORITY, _CORRELATION_ID = 1 << 12, 1 << 11, 1 << 10
_REPLY_TO, _EXPIRATION, _MESSAGE_ID = 1 << 9, 1 << 8, 1 << 7
_TIMESTAMP, _TYPE, _USER_ID, _APP_ID, _CLUSTER_ID = 1 << 6, 1 << 5, 1 << 4, 1 << 3, 1 << 2
_FLAG_MORE = 1
#: Short strings before message_id, after the one-byte fields.
_SKIPPED_BEFORE_ID: Final = (_CORRELATION_ID, _REPLY_TO, _EXPIRATION)

#: One message's values: body, routing key, exchange, redelivered, delivery tag,
#: message_id, headers, content_type, timestamp.
Delivery = tuple[bytes, Any, Any, bool, int, Any, dict[Any, Any], Any, Any]


class _NotPlain(ReactiveStreamsError):
    """A delivery this reader leaves to pika."""


class _NotOurs(_NotPlain):
    """A delivery for no consumer of the channel: pika refuses it, and it never reaches
    the consumer's callback."""


def _short(buf: bytes, at: int) -> tuple[Any, int]:
    """A short string at ``at``: text, or its bytes where they are not UTF-8 (as pika)."""
    end = at + 1 + buf[at]
    if end > len(buf):
        raise _NotPlain
    raw = buf[at + 1:end]
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError:
        return raw, end


class DeliveryReader:
    """Reads the ``basic.deliver`` messages of ``channel`` (a ``pika.channel.Channel``)
    for its consumers from what the pika connection ``impl`` (the
    ``pika.connection.Connection`` under a blocking connection) receives, and passes each
    run of them to ``deliver`` (a list of :data:`Delivery`) before any frame that follows
    them. A delivery for a consumer tag the channel does not have, or has cancelled, is
    pika's to refuse; bodies over ``max_body`` bytes are left to pika (and to whatever
    bounds it there)."""

    def __init__(self, impl: Any, channel: Any, max_body: int,
                 deliver: Callable[[list[Delivery]], None]) -> None:
        self.impl, self.max_body, self.deliver = impl, max_body, deliver
        self.channel_impl, self.channel = channel, channel.channel_number
        self.read = 0  # deliveries read here (the rest went through pika)
        self.with_pika = 0  # deliveries left to pika and not yet at the consumer's callback

    def install(self) -> bool:
        """Take the place of pika's ``_on_data_available``; False (pika left as it is)
        where this pika lacks what the reader uses."""
        impl = self.impl
        if not all(hasattr(impl, name) for name in (
                "_on_data_available", "_frame_buffer", "_process_frame", "bytes_received")
        ) or not all(hasattr(self.channel_impl, name) for name in ("_consumers", "_cancelled")):
            return False
        from pika import data as pika_data  # type: ignore[import-untyped]
        from pika import frame as pika_frame

        self._decode_frame = pika_frame.decode_frame
        self._decode_table = pika_data.decode_table
        impl._on_data_available = self.data_available
        transport = getattr(impl, "_transport", None)
        if transport is not None and hasattr(transport, "_MAX_RECV_BYTES"):
            transport._MAX_RECV_BYTES = RECV_BYTES
        return True

    def data_available(self, data: bytes) -> None:
        impl = self.impl
        buf: bytes = impl._frame_buffer + data if impl._frame_buffer else data
        size, at = len(buf), 0
        read: list[Delivery] = []
        unpack_frame, unpack_id = _FRAME.unpack_from, _METHOD_ID.unpack_from
        try:
            while size - at >= 8:
                kind, channel, length = unpack_frame(buf, at)
                end = at + 8 + length
                if end > size:
                    break
                deliver = (kind == _METHOD and channel == self.channel and length >= 4
                           and unpack_id(buf, at + 7)[0] == _BASIC_DELIVER)
                ours = deliver
                if deliver and not self.with_pika:
                    try:
                        after = self._delivery(buf, at, end, read)
                    except _NotOurs:
                        after, ours = 0, False
                    except Exception:  # _NotPlain, or malformed: pika's decoding says how
                        after = 0
                    if after is None:
                        break  # its header or body is still on its way
                    if after:
                        at = after
                        continue
                if read:
                    batch, read = read, []
                    self._hand_over(batch)
                consumed, frame_value = self._decode_frame(buf[at:end])
                impl.bytes_received += at + consumed
                impl._frame_buffer = buf[at + consumed:]
                if ours:
                    self.with_pika += 1
                impl._process_frame(frame_value)
                buf = impl._frame_buffer
                size, at = len(buf), 0
        finally:
            if read:
                batch, read = read, []
                self._hand_over(batch)
        impl.bytes_received += at
        impl._frame_buffer = buf[at:] if at else buf

    def pika_delivered(self) -> None:
        """A delivery left to pika reached the consumer's callback: once each has, the
        deliveries after them are read here again (never before them: pika's blocking
        channel hands its deliveries over later, in its own loop)."""
        self.with_pika = max(0, self.with_pika - 1)

    def _hand_over(self, read: list[Delivery]) -> None:
        self.read += len(read)
        self.deliver(read)

    def _delivery(self, buf: bytes, at: int, end: int, read: list[Delivery]) -> int | None:
        """Read the delivery whose method frame spans ``at``..``end``: the offset after
        its last frame, None when not all of it is here yet; raises _NotPlain for one
        pika should read."""
        if buf[end - 1] != _FRAME_END:
            raise _NotPlain
        cursor = at + 11
        consumer, cursor = _short(buf, cursor)
        channel = self.channel_impl
        if consumer not in channel._consumers or consumer in channel._cancelled:
            raise _NotOurs
        tag = _TAG.unpack_from(buf, cursor)[0]
        redelivered = bool(buf[cursor + 8] & 1)
        exchange, cursor = _short(buf, cursor + 9)
        routing_key, cursor = _short(buf, cursor)
        if cursor != end - 1:
            raise _NotPlain
        size = len(buf)
        if size - end < 8:
            return None
        kind, channel, length = _FRAME.unpack_from(buf, end)
        if kind != _CONTENT_HEADER or channel != self.channel:
            raise _NotPlain
        header_end = end + 8 + length
        if header_end > size:
            return None
        if buf[header_end - 1] != _FRAME_END:
            raise _NotPlain
        class_id, _, body_size, flags = _HEADER.unpack_from(buf, end + 7)
        if class_id != _BASIC or body_size > self.max_body or flags & _FLAG_MORE:
            raise _NotPlain
        message_id, headers, content_type, timestamp = self._properties(
            buf, end + 21, flags, header_end - 1)
        after: int = header_end
        if body_size == 0:
            body = b""
        else:
            if size - after < 8:
                return None
            kind, channel, length = _FRAME.unpack_from(buf, after)
            if kind != _BODY or channel != self.channel or length != body_size:
                raise _NotPlain  # more than one body frame: pika assembles them
            body_end = after + 8 + length
            if body_end > size:
                return None
            if buf[body_end - 1] != _FRAME_END:
                raise _NotPlain
            body = buf[after + 7:body_end - 1]
            after = body_end
        read.append((body, routing_key, exchange, redelivered, tag, message_id, headers,
                     content_type, timestamp))
        return after

    def _properties(self, buf: bytes, at: int, flags: int, end: int
                    ) -> tuple[Any, dict[Any, Any], Any, Any]:
        """message_id, headers ({} without), content_type and timestamp of a content
        header's properties, which span ``at``..``end``."""
        content_type = message_id = timestamp = None
        headers: dict[Any, Any] = {}
        if flags & _CONTENT_TYPE:
            content_type, at = _short(buf, at)
        if flags & _CONTENT_ENCODING:
            at += 1 + buf[at]
        if flags & _HEADERS:
            headers, at = self._decode_table(buf, at)
        if flags & _DELIVERY_MODE:
            at += 1
        if flags & _PRIORITY:
            at += 1
        for flag in _SKIPPED_BEFORE_ID:
            if flags & flag:
                at += 1 + buf[at]
        if flags & _MESSAGE_ID:
            message_id, at = _short(buf, at)
        if flags & _TIMESTAMP:
            timestamp = _TAG.unpack_from(buf, at)[0]
            at += 8
        for flag in (_TYPE, _USER_ID, _APP_ID, _CLUSTER_ID):
            if flags & flag:
                at += 1 + buf[at]
        if at != end:
            raise _NotPlain
        return message_id, headers, content_type, timestamp
