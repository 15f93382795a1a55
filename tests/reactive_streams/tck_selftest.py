"""Running one check of a verification class on a deliberately broken implementation,
as the TCK's own tests do, and asserting how it ends."""

from __future__ import annotations

from typing import Any

import pytest

from reactive_streams.tck._base import Verification

#: How deep in an exception's cause chain an expected message fragment may be.
CAUSE_DEPTH = 5


def _run(verification: Verification, check: str) -> BaseException | None:
    verification.setup_method()
    method: Any = getattr(verification, check)
    try:
        method()
    except BaseException as exc:  # AssertionError, an implementation's error, or a skip
        return exc
    finally:
        teardown = getattr(type(verification), "teardown_class", None)
        if teardown is not None:
            teardown()
    return None


def _messages(error: BaseException) -> list[str]:
    found, current = [], error
    for _ in range(CAUSE_DEPTH + 1):
        found.append(str(current))
        following = current.__cause__ or current.__context__
        if following is None:
            break
        current = following
    return found


def _is_tck_bug(error: BaseException) -> bool:
    # The Java TCK treats a NullPointerException escaping a check as a bug of the TCK;
    # ours is an AttributeError/TypeError about None coming out of its own code.
    return isinstance(error, (AttributeError, TypeError)) and "NoneType" in str(error)


def require_test_failure(verification: Verification, check: str, fragment: str) -> None:
    """The check must fail (or skip) with ``fragment`` in its message or its causes."""
    error = _run(verification, check)
    assert error is not None, f"{check} passed, but it should have failed with '{fragment}'"
    assert not _is_tck_bug(error), f"{check} failed inside the TCK itself: {error!r}"
    messages = _messages(error)
    assert any(fragment in m for m in messages), (
        f"{check} failed, but without '{fragment}' in its messages: {messages}")


def require_test_skip(verification: Verification, check: str, fragment: str) -> None:
    error = _run(verification, check)
    assert isinstance(error, pytest.skip.Exception), (
        f"{check} should have skipped with '{fragment}', but ended with {error!r}")
    assert fragment in str(error), f"{check} skipped, but not with '{fragment}': {error}"


def require_test_pass(verification: Verification, check: str) -> None:
    error = _run(verification, check)
    assert error is None, f"{check} should have passed, but ended with {error!r}"


def require_optional_test_pass(verification: Verification, check: str) -> None:
    """An optional check must neither fail nor skip."""
    require_test_pass(verification, check)
