"""Checkpointers: where threads keep their checkpoints and journals.

The port is :class:`~ilmek.checkpoint.base.Checkpointer`; the backends are
:class:`InMemoryCheckpointer`, ``SqliteCheckpointer`` and
``PostgresCheckpointer``. Importing them imports no database driver: the
Postgres backend only ever uses the driver of the client it is given.
"""

from __future__ import annotations

from .base import Checkpointer, ThreadHold
from .memory import InMemoryCheckpointer
from .postgres import PostgresCheckpointer
from .sqlite import SqliteCheckpointer

__all__ = ["Checkpointer", "InMemoryCheckpointer", "PostgresCheckpointer", "SqliteCheckpointer", "ThreadHold"]
