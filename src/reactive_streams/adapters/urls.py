"""URLs as they may be shown in logs, errors, reprs and thread names: without the parts
that carry credentials (``user:password@``, the query string, the fragment).

Every place that prints the URL or address of a publisher goes through :func:`redact_url`,
so a password or an ``?access_token=`` given in a URL never reaches a log line, an
exception, a repr or a thread name.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["HIDDEN", "redact_url", "redact_url_in"]

#: What stands in place of each part left out.
HIDDEN: Final = "***"


def redact_url(url: str) -> str:
    """``url`` without its userinfo, query string and fragment, each replaced by
    :data:`HIDDEN`, so that it can be shown.

    Only text with a scheme (``scheme://``) is taken for a URL: a plain path is returned as
    it is, except that text before an ``@`` in its first segment (``user:pw@host/x``, a URL
    whose scheme is missing) is hidden too. Nothing is parsed, so no text, however
    malformed, makes it fail or show what it should hide.

    Parameters
    ----------
    url : str
        A URL, a filesystem URI or a path.

    Returns
    -------
    str
        What may be shown of it.

    Examples
    --------
    >>> redact_url("wss://alice:pw@example.com:8443/feed?access_token=x#frag")
    'wss://***@example.com:8443/feed?***'
    >>> redact_url("s3://KEY:SECRET@bucket/wal")
    's3://***@bucket/wal'
    >>> redact_url("ws://127.0.0.1:8765/feed")
    'ws://127.0.0.1:8765/feed'
    >>> redact_url("/tmp/wal?1")
    '/tmp/wal?1'
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    # The authority ends at the first "/", "?" or "#"; userinfo ends at its last "@".
    end = _first(rest, "/?#")
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{HIDDEN}@{authority.rpartition('@')[2]}"
    if separator:
        cut = _first(tail, "?#")
        if cut < len(tail) - 1:  # a bare "?" at the end hides nothing
            tail = f"{tail[:cut + 1]}{HIDDEN}"
        return f"{scheme}://{authority}{tail}"
    return f"{authority}{tail}"


def redact_url_in(text: str, url: str) -> str:
    """``text`` (an error message from a library, say) with ``url`` shown as
    :func:`redact_url` shows it, and with each part that it hides (userinfo, query string,
    fragment) hidden wherever else it occurs, such as a library's own rendering of the URL.

    Examples
    --------
    >>> url = "ws://u:pw@h/x?token=abc#frag"
    >>> redact_url_in(f"{url} isn't valid: fragment; query token=abc, password pw", url)
    "ws://***@h/x?*** isn't valid: fragment; query ***, password ***"
    """
    shown = redact_url(url)
    text = text.replace(url, shown)
    for part in _hidden_parts(url):
        # Where it stands alone: a fragment "frag" is no reason to blot out "fragment".
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(part)}(?![A-Za-z0-9])", HIDDEN, text)
    return text


def _hidden_parts(url: str) -> list[str]:
    _, separator, rest = url.partition("://")
    if not separator:
        rest = url
    end = _first(rest, "/?#")
    authority, tail = rest[:end], rest[end:]
    parts = []
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
        parts += [userinfo, userinfo.partition(":")[2]]  # the password alone, too
    if separator:
        cut = _first(tail, "?#")
        query, _, fragment = tail[cut + 1:].partition("#") if tail[cut:cut + 1] == "?" else (
            "", "", tail[cut + 1:])
        parts += [query, fragment]
    # Longest first, so that no shorter part spoils a longer one; a part that is empty
    # (or one character, like a bare "?") is no secret and would blot out the whole text.
    return sorted((part for part in parts if len(part) > 1), key=len, reverse=True)


def _first(text: str, characters: str) -> int:
    found = [index for index in map(text.find, characters) if index >= 0]
    return min(found, default=len(text))
