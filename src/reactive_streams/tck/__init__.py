"""A pytest-native conformance kit for Reactive Streams implementations (a port of the
reference TCK 1.0.4): subclass a verification class in a file pytest collects, implement
its hooks, and every rule the reference TCK checks runs as a test."""

from .environment import LONG_MAX, TCKTestError, TestEnvironment
from .processor import IdentityProcessorVerification
from .publisher import SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE, PublisherVerification
from .subscriber_blackbox import SubscriberBlackboxVerification
from .subscriber_whitebox import (
    SubscriberPuppet,
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

__all__ = [
    "LONG_MAX",
    "SKIPPING_NO_ERROR_PUBLISHER_AVAILABLE",
    "IdentityProcessorVerification",
    "PublisherVerification",
    "SubscriberBlackboxVerification",
    "SubscriberPuppet",
    "SubscriberWhiteboxVerification",
    "TCKTestError",
    "TestEnvironment",
    "WhiteboxSubscriberProbe",
]
