"""ilmek's loggers, without importing :mod:`logging` until something is logged.

``import ilmek`` stays 4 ms shorter for a program that never logs; one that
does has imported :mod:`logging` already, and pays nothing more. The names are
the ones to configure: ``ilmek.run``, ``ilmek.node``, ``ilmek.holds``,
``ilmek.storage`` and ``ilmek.operations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["logger"]


def logger(name: str) -> logging.Logger:
    """The standard library's logger called ``name``."""
    import logging

    return logging.getLogger(name)
