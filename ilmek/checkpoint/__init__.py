"""Checkpointers: where threads keep their checkpoints and journals.

The port is :class:`~ilmek.checkpoint.base.Checkpointer`; the backends are
:class:`InMemoryCheckpointer`, ``SqliteCheckpointer`` and
``PostgresCheckpointer``. Backends are imported lazily so that importing
ilmek never imports a database driver.
"""

from __future__ import annotations

from .base import Checkpointer, ThreadHold
from .memory import InMemoryCheckpointer

__all__ = ["Checkpointer", "InMemoryCheckpointer", "ThreadHold"]
