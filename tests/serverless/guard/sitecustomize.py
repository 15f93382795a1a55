"""Activates the tests' serverless guard (``serverless_guard.activate()``) in every Python
process started with this folder on its ``PYTHONPATH`` and
``PYSPARK_REACTIVE_SERVERLESS_GUARD=1`` in its environment; without the variable it does
nothing. Either way it then runs the ``sitecustomize`` that this one hides (the next on
``sys.path``), if there is one, as Python would have.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run_the_hidden_sitecustomize() -> None:
    rest = [entry for entry in sys.path
            if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("PYSPARK_REACTIVE_SERVERLESS_GUARD") == "1":
    # Before the other sitecustomize: what it imports is patched too.
    import serverless_guard

    serverless_guard.activate()

_run_the_hidden_sitecustomize()
