"""What every verification class shares: a fresh environment per check, skip helpers,
and the helper publisher that supplies element values to subscriber checks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Final, Generic, NoReturn, TypeVar

import pytest

from ..api import Publisher
from ..publishers import IterablePublisher
from .environment import INT_MAX, TestEnvironment

__all__ = ["NOT_VERIFIED", "Verification", "WithHelperPublisher"]

T = TypeVar("T")

NOT_VERIFIED: Final = "Not verified by this TCK."
SKIPPING_OPTIONAL_TEST_FAILED: Final = (
    "Skipped because the tested implementation does NOT implement this OPTIONAL requirement.")


class Verification:
    """Base of the verification classes: pytest runs each ``test_*`` method with a new
    instance, after :meth:`setup_method` has made a fresh :class:`TestEnvironment`."""

    env: TestEnvironment

    def create_test_environment(self) -> TestEnvironment:
        """Override to set timeouts: ``return TestEnvironment(default_timeout_millis=300)``."""
        return TestEnvironment()

    def setup_method(self, method: object = None) -> None:
        self.env = self.create_test_environment()
        self.env.clear_async_errors()

    def not_verified(self, message: str = NOT_VERIFIED) -> NoReturn:
        pytest.skip(message)

    def optional_test(self, body: Callable[[], None]) -> None:
        """Run an OPTIONAL check: a failure means "not supported" and becomes a skip."""
        try:
            body()
        except pytest.skip.Exception:
            raise
        except AssertionError as exc:
            pytest.skip(f"{SKIPPING_OPTIONAL_TEST_FAILED} Reason for skipping was: {exc}")
        except Exception as exc:
            pytest.skip(f"{SKIPPING_OPTIONAL_TEST_FAILED} Reason for skipping was: {exc!r}")


class WithHelperPublisher(Generic[T]):
    """Supplies element values: ``create_element(i)`` for ``i = 0, 1, 2, ...``, published
    asynchronously on :meth:`publisher_executor_service` by our own IterablePublisher."""

    def create_element(self, element: int) -> T:
        """Map an id to an element; different ids must give different, hashable elements."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_element")

    def publisher_executor_service(self) -> Executor:
        """Where the helper publisher signals from."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement publisher_executor_service")

    def create_helper_publisher(self, elements: int) -> Publisher[T]:
        """A publisher of ``elements`` elements; infinite above ``INT_MAX``."""
        create = self.create_element

        def values() -> Iterable[T]:
            ids: Iterable[int] = itertools.count() if elements > INT_MAX else range(elements)
            return map(create, ids)

        return IterablePublisher(values, executor=self.publisher_executor_service())


class WithOwnHelperExecutor(WithHelperPublisher[T], Generic[T]):
    """A helper publisher on a pool of 4 threads owned by the verification class."""

    _helper_pool: Any = None

    @classmethod
    def setup_class(cls) -> None:
        cls._helper_pool = ThreadPoolExecutor(4, thread_name_prefix="tck-helper")

    @classmethod
    def teardown_class(cls) -> None:
        if cls._helper_pool is not None:
            cls._helper_pool.shutdown(wait=False, cancel_futures=True)
            cls._helper_pool = None

    def publisher_executor_service(self) -> Executor:
        if type(self)._helper_pool is None:  # used outside pytest's class set-up
            type(self).setup_class()
        pool: Executor = type(self)._helper_pool
        return pool
