"""Keys out of the server's log: a :class:`logging.Filter` that redacts API keys from
uvicorn's log records (docs/operations.md, "Access control").

uvicorn writes the request line of every HTTP request to ``uvicorn.access`` (args
``(client, method, path?query, http_version, status)``) and of every WebSocket handshake
to ``uvicorn.error`` (``'%s - "WebSocket %s" [accepted]'``); at log level ``debug`` the
``websockets`` library logs each handshake header to ``uvicorn.error`` as well
(``"< %s: %s"``, name and value).  A key given as ``?access_token=<key>`` (still accepted
for old clients, app/api/security.py) would so be written in clear.

:class:`RedactKeys` rewrites, in a record's ``msg`` and in every string of its ``args``
(the tuple keeps its length and types, since uvicorn's ``AccessFormatter`` unpacks it):

- the value of the query parameters :data:`KEY_PARAMETERS` -> ``REDACTED``;
- the key-bearing WebSocket subprotocol ``zapverify.key.<base64url>`` -> ``zapverify.key.REDACTED``;
- the value of a header line whose name is in :data:`KEY_HEADERS` -> ``REDACTED``
  (``Authorization: Bearer <key>``, ``X-API-Key: <key>`` in the debug header dump).

:func:`install` adds one filter to each of :data:`LOGGERS` (idempotent: the app factory
may run more than once in a process).  A filter on a logger sees the records logged
through that logger, which is how uvicorn logs these lines.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

__all__ = ["KEY_HEADERS", "KEY_PARAMETERS", "LOGGERS", "REDACTED", "RedactKeys", "install", "redact"]

REDACTED = "REDACTED"

#: Query parameters whose value is a key: ``access_token`` is the one the server reads;
#: the others are names clients commonly put keys under, redacted in case one does.
KEY_PARAMETERS = ("access_token", "api_key", "apikey", "token", "key")

#: Header names whose value is a key (compared case-insensitively).
KEY_HEADERS = frozenset({"authorization", "x-api-key", "proxy-authorization", "cookie"})

#: The loggers uvicorn writes request lines and handshake headers to.
LOGGERS = ("uvicorn.access", "uvicorn.error")

# A parameter at the start of a query (after ? or &, percent-encoded or not): its value runs
# to the next &, #, space, quote or end.
_PARAM = re.compile(r"(?i)(?P<lead>[?&;](?:%20)?)(?P<name>" + "|".join(KEY_PARAMETERS) + r")=(?P<value>[^&#\s\"']*)")
_SUBPROTOCOL = re.compile(r"zapverify\.key\.[A-Za-z0-9_\-=%.]+")
_HEADER_LINE = re.compile(r"(?i)^(?P<head>[<>]?\s*(?:" + "|".join(map(re.escape, KEY_HEADERS)) + r")\s*:\s*).+$",
                          re.MULTILINE)


def redact(text: str) -> str:
    """``text`` with every key it holds (see the module doc) replaced by ``REDACTED``."""
    if "=" in text:
        text = _PARAM.sub(lambda m: f"{m['lead']}{m['name']}={REDACTED}", text)
    if "zapverify.key." in text:
        text = _SUBPROTOCOL.sub("zapverify.key." + REDACTED, text)
    if ":" in text:
        text = _HEADER_LINE.sub(lambda m: m["head"] + REDACTED, text)
    return text


def _redact_arg(value: object, after_key_header: bool) -> object:
    if not isinstance(value, str):
        return value
    return REDACTED if after_key_header else redact(value)


class RedactKeys(logging.Filter):
    """Rewrites a record's ``msg`` and string ``args`` so that no key is logged; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            out = []
            previous: object = None
            for value in args:
                # "< %s: %s" with (name, value): the value of a key header, whatever it looks like.
                key_header = isinstance(previous, str) and previous.strip().lower() in KEY_HEADERS
                out.append(_redact_arg(value, key_header))
                previous = value
            record.args = tuple(out)
        elif isinstance(args, Mapping):
            record.args = {k: _redact_arg(v, str(k).lower() in KEY_HEADERS) for k, v in args.items()}
        return True


def install(loggers: tuple[str, ...] = LOGGERS) -> None:
    """Add a :class:`RedactKeys` to each of ``loggers`` that has none yet, neither on the
    logger nor on every one of its handlers (app/logs.py's configuration puts one on its
    handler: a second would scan every line again)."""
    for name in loggers:
        logger = logging.getLogger(name)
        handled = bool(logger.handlers) and all(any(isinstance(f, RedactKeys) for f in h.filters)
                                                 for h in logger.handlers)
        if not handled and not any(isinstance(f, RedactKeys) for f in logger.filters):
            logger.addFilter(RedactKeys())
