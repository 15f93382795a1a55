"""A publisher of your own, checked by the TCK: a test file that pytest collects.

In your project, save it as ``test_countdown.py`` and run ``pytest test_countdown.py``.
Run as a script (``python tck_countdown.py``), it runs pytest on itself.
"""

import sys

import pytest

from reactive_streams import Publisher
from reactive_streams.signalling import COMPLETE, Emitter, Source
from reactive_streams.tck import PublisherVerification


class Countdown(Source[int]):
    """start, start - 1, ..., 1: what is ready now, and the end once it is reached."""

    def __init__(self, start):
        self.left = start

    def pull(self, n):
        out = range(self.left, max(self.left - n, 0), -1)
        self.left -= len(out)
        return out, (COMPLETE if self.left == 0 else None)


class Unavailable(Source[int]):
    """A countdown whose upstream is gone: raising is the same as failing the stream."""

    def pull(self, n):
        raise OSError("the countdown's upstream is unavailable")


class CountdownPublisher(Publisher[int]):
    def __init__(self, start, source=Countdown):
        self.start, self.source = start, source

    def subscribe(self, subscriber):
        Emitter(subscriber, self.source(self.start)).start()


class TestCountdownPublisher(PublisherVerification[int]):
    def create_publisher(self, elements):      # exactly `elements` elements, then complete
        return CountdownPublisher(elements)

    def create_failed_publisher(self):         # on_subscribe then on_error; None skips
        return CountdownPublisher(3, source=lambda start: Unavailable())


if __name__ == "__main__":
    # -rN: no summary of skips; the last line counts what passed and what skipped.
    sys.exit(pytest.main([__file__, "-q", "-rN", "-p", "no:cacheprovider"]))
    # prints:
    # ...
    # 31 passed, 7 skipped in ...s
