"""The SQL checkpointer, shared by SQLite and Postgres: one module per concern of the data path.

``SqlCheckpointer`` (in :mod:`.checkpointer`) is the façade the backends
subclass; the statements, the schema, the holds, the superstep writes, the
journals, the reads and the thread operations each live in a module named
for them (see :mod:`.checkpointer` for the map).
"""

from __future__ import annotations

from .calls import LONG_WAY_SQLSTATE
from .checkpointer import SqlCheckpointer
from .holds import SqlHold
from .journals import answered_meanwhile_error
from .schema import Migration, copy_v1_journals
from .statements import validate_prefix

__all__ = [
    "LONG_WAY_SQLSTATE",
    "Migration",
    "SqlCheckpointer",
    "SqlHold",
    "answered_meanwhile_error",
    "copy_v1_journals",
    "validate_prefix",
]
