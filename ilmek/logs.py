"""ilmek's loggers, without importing :mod:`logging` until something is logged.

``import ilmek`` stays 4 ms shorter for a program that never logs; one that
does has imported :mod:`logging` already, and pays nothing more. The names are
the ones to configure: ``ilmek.run``, ``ilmek.node``, ``ilmek.holds``,
``ilmek.storage``, ``ilmek.operations`` and ``ilmek.web``.

Every record on them is made safe for a terminal before any handler sees it,
as the command line's output is (:func:`ilmek.redact.printable`): a node's
error text, a stored id or a driver's message cannot colour, retitle or
rewrite the terminal of the app, of ``ilmek recover`` or of ``ilmek web``.
Every module of ilmek takes its logger from here, never from
:func:`logging.getLogger`, so no record escapes the rule.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .redact import printable

if TYPE_CHECKING:
    import logging

__all__ = ["escape_record", "logger", "logger_if_configurable"]


_LOGGERS: dict[str, logging.Logger] = {}
"""The loggers handed out, by name: asked for at every run, found without logging's module lock."""


def logger(name: str) -> logging.Logger:
    """The standard library's logger called ``name``, escaping every record it makes."""
    log = _LOGGERS.get(name)
    if log is None:
        import logging

        log = logging.getLogger(name)
        log.addFilter(escape_record)  # once: a filter already there is not added again
        _LOGGERS[name] = log
    return log


def escape_record(record: logging.LogRecord) -> bool:
    """Escape the control characters of a record's message and traceback, in place; keep the record.

    The message is formatted with its arguments first (an argument is where
    hostile text comes from) and kept as it was when nothing needs escaping.
    A traceback is formatted here, escaped except for its own line breaks, and
    left in ``exc_text``, which formatters print instead of formatting it again.
    """
    try:
        message = record.getMessage()
    except Exception:  # arguments that do not fit the message: the handler reports it, as without us
        return True
    if not message.isprintable():
        record.msg, record.args = printable(message), None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        import logging

        record.exc_text = printable(logging.Formatter().formatException(record.exc_info), keep_newlines=True)
    if record.stack_info:
        record.stack_info = printable(record.stack_info, keep_newlines=True)
    return True


def logger_if_configurable(name: str) -> logging.Logger | None:
    """The logger called ``name``, or None while nothing has imported :mod:`logging`.

    For records below WARNING: until something imports :mod:`logging`, no
    handler can exist to show them (only WARNING and above reach logging's
    last-resort handler), so skipping them changes no output and keeps a
    script that never logs from importing it.
    """
    if "logging" not in sys.modules:
        return None
    return logger(name)
