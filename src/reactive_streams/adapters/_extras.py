"""Importing an adapter's library, with an error that names the extra providing it."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ReactiveStreamsError

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ReactiveStreamsError, ImportError):
    """An adapter's library is not installed; the message names the extra to install."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or raise :class:`MissingExtraError` naming
    ``extra``.

    Parameters
    ----------
    module : str
        The library's module (``"paho.mqtt.client"``).
    extra : str
        The extra of pyspark-reactive that installs it (``"mqtt"``).
    feature : str
        What needs it, as the user knows it (``"the mqtt publisher"``).

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    MissingExtraError
        When the module cannot be imported.

    Examples
    --------
    >>> require("json", "none", "a doctest").dumps(1)
    '1'
    >>> require("no_such_library_xyz", "mqtt", "the mqtt publisher")
    Traceback (most recent call last):
    ...
    reactive_streams.adapters._extras.MissingExtraError: the mqtt publisher needs \
'no_such_library_xyz', which is not installed: pip install 'pyspark-reactive[mqtt]' \
(No module named 'no_such_library_xyz')
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{feature} needs {module.split('.')[0]!r}, which is not installed: "
            f"pip install 'pyspark-reactive[{extra}]' ({error})") from error
