"""Checkpointers: where threads keep their checkpoints and journals.

The port is :class:`~ilmek.checkpoint.base.Checkpointer`; the backends are
``InMemoryCheckpointer``, ``SqliteCheckpointer`` and ``PostgresCheckpointer``,
imported only when first named (so ``import ilmek`` loads neither ``sqlite3``
nor any Postgres code). No database driver is ever imported by ilmek: the
Postgres backend only uses the driver of the client it is given.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Checkpointer
from .holds import Hold, HoldLostError

if TYPE_CHECKING:
    from .memory import InMemoryCheckpointer
    from .postgres import PostgresCheckpointer
    from .sqlite import SqliteCheckpointer

__all__ = [
    "Checkpointer",
    "Hold",
    "HoldLostError",
    "InMemoryCheckpointer",
    "PostgresCheckpointer",
    "SqliteCheckpointer",
]


def scratch_store() -> Checkpointer:
    """A store for a run the caller gave no checkpointer: in this process's memory, gone with the run."""
    from .memory import InMemoryCheckpointer

    return InMemoryCheckpointer()


_LAZY = {
    "InMemoryCheckpointer": ".memory",
    "PostgresCheckpointer": ".postgres",
    "SqliteCheckpointer": ".sqlite",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
