"""The installed distribution's version, one source for both packages: ``pyproject.toml``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("pyspark-reactive")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
