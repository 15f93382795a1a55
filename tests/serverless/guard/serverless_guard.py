"""A local stand-in for what Databricks serverless refuses: global temporary views,
``cache``/``persist`` (and ``CACHE TABLE``), any reach into the JVM (``sparkContext``, RDDs,
``_jvm``, ``_jdf``, py4j, starting a ``SparkContext``) and streaming queries with a trigger
other than ``availableNow``. :func:`activate` patches pyspark's classes (Spark Connect's
and classic ones, imported now or later) so that each such use fails at once with
:class:`ServerlessForbidden`, naming what was used and what to use instead.

``sitecustomize.py`` beside this file activates it in every Python process that has this
folder on its ``PYTHONPATH`` and ``PYSPARK_REACTIVE_SERVERLESS_GUARD=1`` in its environment:
a Spark Connect server's ``foreachBatch`` worker, source runners and Python workers, a
notebook's kernel.

Only the user's code is refused, never pyspark's own workings: an attribute (``_jdf``,
``sparkContext``) is refused when the code that reads it lies outside pyspark, py4j and
Databricks Connect; an operation (``persist``, a SQL statement, starting a query or a JVM)
when any frame on the stack is such code. pyspark's worker processes call into pyspark
from its own ``main`` (through ``runpy``, which counts as neither), so what they do for
themselves goes through; what a ``foreachBatch`` function, a UDF or a data source does is
the user's.

The refusals of attributes are also ``AttributeError``s, as on serverless (where Databricks
Connect raises ``JVM_ATTRIBUTE_NOT_SUPPORTED``): ``hasattr(spark, "sparkContext")`` answers
``False`` there and here, and a direct ``spark.sparkContext`` fails with this module's
message.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from typing import Any

__all__ = ["GUARD_DIR", "VARIABLE", "ServerlessForbidden", "ServerlessForbiddenAttribute",
           "activate", "active", "guarded_environment", "refusal_of_sql"]

# The variable that asks sitecustomize.py to activate the guard.
VARIABLE = "PYSPARK_REACTIVE_SERVERLESS_GUARD"
# This folder: the one to put first on a process's PYTHONPATH.
GUARD_DIR = os.path.dirname(os.path.abspath(__file__))

# What serverless forbids, by kind: (what it does not allow, what to use instead).
RULES = {
    "global_temp": ("global temporary views (the global_temp database)",
                    "use a session temporary view (createOrReplaceTempView) or a table"),
    "cache": ("caching (cache(), persist(), CACHE TABLE, catalog.cacheTable)",
              "write what you would cache to a table and read that table instead"),
    "jvm": ("any access to the JVM (sparkContext, RDDs, _jvm, _jsc, _jsparkSession, _jdf, "
            "py4j, starting a SparkContext)",
            "use only the DataFrame and SparkSession APIs: there is no JVM to reach"),
    "trigger": ("streaming triggers other than availableNow",
                "use .trigger(availableNow=True)"),
}


class ServerlessForbidden(RuntimeError):
    """A use of Spark that Databricks serverless does not allow, refused by the guard.

    Parameters
    ----------
    used : str
        What was used, as the user wrote it (``"DataFrame.persist()"``).
    kind : str
        The key of :data:`RULES`: ``"global_temp"``, ``"cache"``, ``"jvm"`` or
        ``"trigger"``.
    """

    def __init__(self, used: str, kind: str) -> None:
        self.used = used
        self.kind = kind
        forbids, instead = RULES[kind]
        super().__init__(f"{used}: Databricks serverless does not allow {forbids}; {instead}. "
                         f"(Refused by the tests' serverless guard, {VARIABLE}=1.)")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.used, self.kind)


class ServerlessForbiddenAttribute(ServerlessForbidden, AttributeError):
    """A refused attribute (``spark.sparkContext``, ``df.rdd``, ``df._jdf``): an
    ``AttributeError`` too, so that probes (``hasattr``, ``getattr`` with a default)
    answer as on serverless."""


# --- whose code is calling ------------------------------------------------------------

_GUARD_FILES = {__file__, os.path.abspath(__file__)}
_PACKAGES = ("pyspark", "py4j", "databricks.connect")
_LIBRARIES = tuple({os.path.join(sysconfig.get_paths()[key], "")
                    for key in ("purelib", "platlib")})
_STANDARD = tuple({os.path.join(sysconfig.get_paths()[key], "")
                   for key in ("stdlib", "platstdlib")})


def _internal_folders() -> tuple[str, ...]:
    folders = []
    for name in _PACKAGES:
        module = sys.modules.get(name)
        folders += [os.path.join(folder, "") for folder in getattr(module, "__path__", ())]
    return tuple(folders)


def _is_user(filename: str, internal: tuple[str, ...]) -> bool | None:
    """``True`` for the user's code, ``False`` for pyspark's, py4j's, Databricks Connect's
    or the guard's, ``None`` for Python's standard library (which speaks for neither)."""
    if filename.startswith(internal) or filename in _GUARD_FILES:
        return False
    if filename.startswith("<frozen ") or (filename.startswith(_STANDARD)
                                           and not filename.startswith(_LIBRARIES)):
        return None
    return True


def _caller_is_user(frame: types.FrameType | None) -> bool:
    """Whether ``frame``, the code reading an attribute, is the user's."""
    return frame is not None and _is_user(frame.f_code.co_filename, _internal_folders()) is True


def _user_initiated(frame: types.FrameType | None) -> bool:
    """Whether any frame from ``frame`` outwards is the user's code: an operation the user
    asked for, directly or through pyspark's API."""
    internal = _internal_folders()
    while frame is not None:
        if _is_user(frame.f_code.co_filename, internal):
            return True
        frame = frame.f_back
    return False


# --- what is refused ------------------------------------------------------------------

# Quoted strings and comments are not SQL that runs: 'CACHE TABLE t' as a value is fine.
_NOT_CODE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|/\*.*?\*/", re.S)
_SQL_REFUSALS = [
    (re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?GLOBAL\s+TEMP(?:ORARY)?\s+VIEW\b", re.I),
     "global_temp", "CREATE GLOBAL TEMPORARY VIEW"),
    # The database itself, bare or backquoted: global_temp.v, `global_temp`.`v`, SHOW TABLES
    # IN global_temp.
    (re.compile(r"(?<!\w)global_temp(?!\w)", re.I), "global_temp", "the global_temp database"),
    (re.compile(r"\bCACHE\s+(?:LAZY\s+)?TABLE\b", re.I), "cache", "CACHE TABLE"),
]
_GLOBAL_TEMP = _SQL_REFUSALS[1][0]


def refusal_of_sql(text: str) -> tuple[str, str] | None:
    """What in the SQL ``text`` serverless refuses, as ``(kind, form)``, or ``None``."""
    code = _NOT_CODE.sub(" ", text)
    for pattern, kind, form in _SQL_REFUSALS:
        if pattern.search(code):
            return kind, form
    return None


def _short(text: str, width: int = 70) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= width else text[:width - 3] + "...")


def _always(used: str, kind: str) -> Callable[..., tuple[str, str]]:
    return lambda *args, **kwargs: (used, kind)


def _first(*checks: Callable[..., tuple[str, str] | None]
           ) -> Callable[..., tuple[str, str] | None]:
    def check(*args: Any, **kwargs: Any) -> tuple[str, str] | None:
        return next((found for c in checks if (found := c(*args, **kwargs))), None)
    return check


def _sql(*args: Any, **kwargs: Any) -> tuple[str, str] | None:
    text = args[1] if len(args) > 1 else kwargs.get("sqlQuery", "")
    found = refusal_of_sql(str(text))
    return (f"spark.sql({_short(text)}) ({found[1]})", found[0]) if found else None


def _names(method: str) -> Callable[..., tuple[str, str] | None]:
    """A table name (or database name) in the global_temp database."""
    def check(*args: Any, **kwargs: Any) -> tuple[str, str] | None:
        for value in (*args[1:], *kwargs.values()):
            if isinstance(value, str) and _GLOBAL_TEMP.search(value):
                return f"{method}({value!r})", "global_temp"
        return None
    return check


_TRIGGER_NAMES = {"available_now": "availableNow", "processing_time_interval": "processingTime",
                  "once": "once", "continuous_checkpoint_interval": "continuous"}
_CLASSIC_TRIGGER = "_serverless_guard_trigger"


def _trigger(method: str) -> Callable[..., tuple[str, str] | None]:
    """A streaming query started with a trigger other than availableNow, or none (Spark's
    default: a processing-time trigger)."""
    def check(writer: Any, *args: Any, **kwargs: Any) -> tuple[str, str] | None:
        proto = getattr(writer, "_write_proto", None)
        if proto is not None:  # Spark Connect: the trigger is in the command being built
            which = proto.WhichOneof("trigger")
            chosen = _TRIGGER_NAMES.get(which, which) if which else None
        else:  # classic: what trigger() was called with, remembered by the guard
            chosen = writer.__dict__.get(_CLASSIC_TRIGGER)
        if chosen == "availableNow":
            return None
        how = f"trigger({chosen}=...)" if chosen else "no trigger (the default processing-time one)"
        return f"DataStreamWriter.{method}() with {how}", "trigger"
    return check


def _remember_trigger(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def trigger(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        chosen = [name for name, value in kwargs.items() if value is not None]
        available_now = chosen == ["availableNow"] and kwargs["availableNow"] is True
        self.__dict__[_CLASSIC_TRIGGER] = ("availableNow" if available_now
                                           else chosen[0] if chosen else "unknown")
        return result
    trigger.__serverless_guard__ = True  # type: ignore[attr-defined]
    return trigger


# --- patching -------------------------------------------------------------------------

def _guard_call(owner: Any, name: str, check: Callable[..., tuple[str, str] | None]) -> None:
    """Wrap the function or method ``owner.name`` so that it raises ServerlessForbidden when
    ``check`` (given its arguments) names a refusal and the user's code asked for it."""
    original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if original is None or getattr(original, "__serverless_guard__", False):
        return
    binder = type(original) if isinstance(original, (classmethod, staticmethod)) else None
    function = original.__func__ if binder else original
    if getattr(function, "__serverless_guard__", False):
        return

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        refusal = check(*args, **kwargs)
        if refusal is not None and _user_initiated(sys._getframe(1)):
            raise ServerlessForbidden(*refusal)
        return function(*args, **kwargs)

    guarded.__serverless_guard__ = True  # type: ignore[attr-defined]
    setattr(owner, name, binder(guarded) if binder else guarded)


class _GuardedAttribute:
    """An attribute that the user's code may not read; pyspark's own code reads what was
    there before (a property, a method, the instance's value, or ``__getattr__``'s answer)."""

    __serverless_guard__ = True

    def __init__(self, name: str, original: Any, used: str) -> None:
        self.name = name
        self.original = original
        self.used = used

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            if self.original is None:
                raise AttributeError(self.name)
            getter = getattr(self.original, "__get__", None)
            return getter(None, owner) if getter else self.original
        if _caller_is_user(sys._getframe(1)):
            raise ServerlessForbiddenAttribute(self.used, "jvm")
        if self.original is not None:
            getter = getattr(self.original, "__get__", None)
            return getter(instance, owner) if getter else self.original
        try:
            return instance.__dict__[self.name]
        except KeyError:  # then Python asks the class's __getattr__, if it has one
            raise AttributeError(self.name) from None

    def __set__(self, instance: Any, value: Any) -> None:
        setter = getattr(self.original, "__set__", None)
        if setter:
            setter(instance, value)
        else:
            instance.__dict__[self.name] = value

    def __delete__(self, instance: Any) -> None:
        deleter = getattr(self.original, "__delete__", None)
        if deleter:
            deleter(instance)
        else:
            del instance.__dict__[self.name]


def _guard_attributes(cls: type, names: Sequence[str], owner_name: str) -> None:
    """Refuse the user's reads of ``cls``'s attributes ``names`` (ServerlessForbiddenAttribute),
    through the class's ``__getattr__`` too: Python calls it after an AttributeError."""
    guarded = {}
    for name in names:
        current = cls.__dict__.get(name)
        if not isinstance(current, _GuardedAttribute):
            setattr(cls, name, _GuardedAttribute(name, current, f"{owner_name}.{name}"))
        guarded[name] = f"{owner_name}.{name}"
    fallback = getattr(cls, "__getattr__", None)
    if fallback is None or getattr(fallback, "__serverless_guard__", False):
        return

    @functools.wraps(fallback)
    def __getattr__(self: Any, name: str) -> Any:
        if name in guarded and _caller_is_user(sys._getframe(1)):
            raise ServerlessForbiddenAttribute(guarded[name], "jvm")
        return fallback(self, name)

    __getattr__.__serverless_guard__ = True  # type: ignore[attr-defined]
    cls.__getattr__ = __getattr__  # type: ignore[attr-defined]


def _patch_dataframe(cls: type) -> None:
    for name in ("createGlobalTempView", "createOrReplaceGlobalTempView"):
        _guard_call(cls, name, _always(f"DataFrame.{name}()", "global_temp"))
    for name in ("persist", "cache"):
        _guard_call(cls, name, _always(f"DataFrame.{name}()", "cache"))
    _guard_call(cls, "writeTo", _names("DataFrame.writeTo"))
    _guard_attributes(cls, ("rdd", "toJSON", "_jdf"), "DataFrame")


def _patch_session(cls: type) -> None:
    _guard_call(cls, "sql", _sql)
    _guard_call(cls, "table", _names("spark.table"))
    _guard_attributes(cls, ("sparkContext", "_jvm", "_jsc", "_jsparkSession", "_jconf"),
                      "SparkSession")


def _patch_catalog(cls: type) -> None:
    _guard_call(cls, "cacheTable", _always("spark.catalog.cacheTable()", "cache"))
    _guard_call(cls, "dropGlobalTempView",
                _always("spark.catalog.dropGlobalTempView()", "global_temp"))
    for name in ("getTable", "tableExists", "listTables", "listColumns", "refreshTable",
                 "isCached", "uncacheTable", "listFunctions", "setCurrentDatabase",
                 "getDatabase", "databaseExists"):
        _guard_call(cls, name, _names(f"spark.catalog.{name}"))


def _patch_readwriter(module: types.ModuleType) -> None:
    for reader in ("DataFrameReader", "DataStreamReader"):
        if isinstance(getattr(module, reader, None), type):
            _guard_call(getattr(module, reader), "table", _names(f"{reader}.table"))
    writer = getattr(module, "DataFrameWriter", None)
    if isinstance(writer, type):
        for name in ("saveAsTable", "insertInto"):
            _guard_call(writer, name, _names(f"DataFrameWriter.{name}"))
    stream_writer = getattr(module, "DataStreamWriter", None)
    if isinstance(stream_writer, type):
        if not module.__name__.startswith("pyspark.sql.connect."):  # classic: no proto
            trigger = stream_writer.__dict__.get("trigger")
            if trigger is not None and not getattr(trigger, "__serverless_guard__", False):
                stream_writer.trigger = _remember_trigger(trigger)
        _guard_call(stream_writer, "start", _trigger("start"))
        _guard_call(stream_writer, "toTable", _first(_names("DataStreamWriter.toTable"),
                                                     _trigger("toTable")))


def _patch_context(module: types.ModuleType) -> None:
    cls = getattr(module, "SparkContext", None)
    if isinstance(cls, type):
        _guard_call(cls, "__init__", _always("SparkContext()", "jvm"))
        _guard_call(cls, "getOrCreate", _always("SparkContext.getOrCreate()", "jvm"))
    gateway = sys.modules.get("pyspark.java_gateway")
    if gateway is not None and hasattr(module, "launch_gateway"):
        module.launch_gateway = gateway.launch_gateway  # the guarded one (imported before)


def _patch_classes(*names: str, patch: Callable[[type], None]) -> Callable[[types.ModuleType],
                                                                         None]:
    def patch_module(module: types.ModuleType) -> None:
        for name in names:
            cls = getattr(module, name, None)
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                patch(cls)
    return patch_module


def _patch_pyspark_gateway(module: types.ModuleType) -> None:
    _guard_call(module, "launch_gateway", _always("pyspark.java_gateway.launch_gateway()", "jvm"))


def _patch_py4j(module: types.ModuleType) -> None:
    _guard_call(module, "launch_gateway", _always("py4j.java_gateway.launch_gateway()", "jvm"))
    if isinstance(getattr(module, "JavaGateway", None), type):
        _guard_call(module.JavaGateway, "__init__", _always("py4j JavaGateway()", "jvm"))


_dataframes = _patch_classes("DataFrame", patch=_patch_dataframe)
_sessions = _patch_classes("SparkSession", patch=_patch_session)
_catalogs = _patch_classes("Catalog", patch=_patch_catalog)

# Module -> what to patch in it once it is imported.
_PATCHES: dict[str, Callable[[types.ModuleType], None]] = {
    "pyspark.sql.connect.dataframe": _dataframes,
    "pyspark.sql.connect.session": _sessions,
    "pyspark.sql.connect.catalog": _catalogs,
    "pyspark.sql.connect.readwriter": _patch_readwriter,
    "pyspark.sql.connect.streaming.readwriter": _patch_readwriter,
    "pyspark.sql.dataframe": _dataframes,  # classic on 3.5, the common parent on 4.x
    "pyspark.sql.classic.dataframe": _dataframes,  # classic on 4.x
    "pyspark.sql.session": _sessions,
    "pyspark.sql.catalog": _catalogs,
    "pyspark.sql.readwriter": _patch_readwriter,
    "pyspark.sql.streaming.readwriter": _patch_readwriter,
    "pyspark.java_gateway": _patch_pyspark_gateway,
    "pyspark.core.context": _patch_context,  # 4.x
    "pyspark.context": _patch_context,  # 3.5 (on 4.x an alias of pyspark.core.context)
    "py4j.java_gateway": _patch_py4j,
}


def _patch(module: types.ModuleType) -> None:
    patch = _PATCHES.get(module.__name__)
    if patch is not None:
        patch(module)


class _PatchingLoader:
    """The module's own loader, which patches the module once it has run."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _PostImportHook:
    """A ``sys.meta_path`` finder that finds nothing itself: it asks the finders after it
    for the modules the guard patches, and wraps their loaders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)  # type: ignore[assignment]
                return spec
        return None


_LOCK = threading.Lock()
_HOOK: list[_PostImportHook] = []


def activate() -> None:
    """Install the guard in this process: patch the modules already imported, and the
    others as they are imported. Idempotent."""
    with _LOCK:
        if not _HOOK:
            _HOOK.append(_PostImportHook())
            sys.meta_path.insert(0, _HOOK[0])
        for name in _PATCHES:  # pyspark.java_gateway before the contexts that import it
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)


def guarded_environment() -> dict[str, str]:
    """The variables that activate the guard in a child process: ``PYTHONPATH`` with the
    guard's folder first (then this process's ``PYTHONPATH``), and ``VARIABLE=1``. Merge
    them into its environment::

        subprocess.run(command, env={**os.environ, **guarded_environment()})
    """
    path = [GUARD_DIR, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path), VARIABLE: "1"}


def active() -> bool:
    """Whether :func:`activate` ran in this process."""
    return bool(_HOOK)
