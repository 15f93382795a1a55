"""What the built-in publishers' option parsing shares: booleans, ``tls`` with ``caCerts``,
and the ``default_schema`` of a built-in whose ``format=json`` needs a schema given."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping

from ..source.options import OptionError, OptionSpecs

__all__ = ["BOOLEAN", "CA_CERTS", "json_needs_schema", "read_bool", "read_tls"]

BOOLEAN = "true or false"
CA_CERTS = "a readable PEM file of certificate authorities"
_BOOLEANS = {"true": True, "false": False}


def read_bool(specs: OptionSpecs, options: Mapping[str, str], name: str) -> bool | None:
    """The option ``name`` as a bool, or None when not given.

    Examples
    --------
    >>> from pyspark_reactive.publishers.mqtt import OPTION_SPECS
    >>> read_bool(OPTION_SPECS, {"tls": "True "}, "tls")
    True
    >>> read_bool(OPTION_SPECS, {"tls": "yes"}, "tls")
    Traceback (most recent call last):
    ...
    pyspark_reactive.source.options.OptionError: reactive source: option tls='yes' is not \
accepted: true or false
    """
    text = specs.given(options, name)
    if text is None:
        return None
    value = _BOOLEANS.get(text.strip().lower())
    if value is None:
        raise OptionError(name, text, BOOLEAN)
    return value


def read_tls(specs: OptionSpecs, options: Mapping[str, str],
             implied: bool = False) -> bool | ssl.SSLContext:
    """The options ``tls`` and ``caCerts``: False, True (the system's authorities) or a
    context with the authorities of ``caCerts``, which implies TLS. ``implied``: TLS
    already follows from elsewhere (a URL's scheme)."""
    tls = read_bool(specs, options, "tls")
    ca_certs = specs.given(options, "caCerts")
    if ca_certs is None:
        return bool(tls) or implied
    if tls is False:
        raise OptionError("caCerts", ca_certs, "no value with tls=false (caCerts implies TLS)")
    try:
        return ssl.create_default_context(cafile=ca_certs)
    except (OSError, ssl.SSLError) as error:
        raise OptionError("caCerts", ca_certs, f"{CA_CERTS} ({error})") from None


def json_needs_schema(specs: OptionSpecs, schema: str, parsed: str, raw: str,
                      raw_format: str = "message") -> Callable[[Mapping[str, str]], str]:
    """A built-in's ``default_schema(options)``: ``schema`` with ``format=<raw_format>``;
    with ``format=json`` an :class:`OptionError` asks for one (``parsed``: what json
    parses, ``raw``: what the raw format's rows are)."""

    def default_schema(options: Mapping[str, str]) -> str:
        lower = {str(k).lower(): str(v) for k, v in options.items()}
        if specs.read(lower, "format") == "json":
            raise OptionError("schema", None,
                              f"format=json parses {parsed} into the schema given, so give "
                              f"one: .schema('id BIGINT, value DOUBLE'); for the raw {raw} "
                              f"use format={raw_format} ({schema}); it is required with "
                              "format=json")
        return schema

    default_schema.__doc__ = (f"The rows' schema when none is given: ``{schema}``; "
                              "``format=json`` has none (an OptionError asks for one).")
    return default_schema
