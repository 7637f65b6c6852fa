"""ilmek's loggers, without importing :mod:`logging` until something is logged.

``import ilmek`` stays 4 ms shorter for a program that never logs; one that
does has imported :mod:`logging` already, and pays nothing more. The names are
the ones to configure: ``ilmek.run``, ``ilmek.node``, ``ilmek.holds``,
``ilmek.storage`` and ``ilmek.operations``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["logger", "logger_if_configurable"]


def logger(name: str) -> logging.Logger:
    """The standard library's logger called ``name``."""
    import logging

    return logging.getLogger(name)


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
