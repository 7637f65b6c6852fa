"""How many threads each tab of the threads page holds, in one cheap query.

From a SQL store the console counts the ``threads`` table by status (its
status index answers it) and the live holds, through the checkpointer's own
transactions and SQL dialect, as :mod:`ilmek.web.previews` reads pauses.
The counts are of the whole store: the search and filters narrow the list
below the tabs, not the tabs. A store of the caller's that is neither SQL
nor in memory has no counts (the tabs then show none).
"""

from __future__ import annotations

import time
from typing import Final

from ..checkpoint.base import Checkpointer
from ..checkpoint.memory import InMemoryCheckpointer
from ..checkpoint.sql import SqlCheckpointer
from ..checkpoint.sql.statements import LIVE_HOLD
from ..dbapi import Session

__all__ = ["thread_counts"]

_BY_STATUS: Final = "SELECT t.status, COUNT(*) FROM {p}_threads AS t GROUP BY t.status"
_RUNNING: Final = (
    "SELECT COUNT(*) FROM {p}_threads AS t JOIN {p}_holds AS h ON h.thread_id = t.thread_id AND " + LIVE_HOLD
)
_STORED: Final = ("interrupted", "error", "unfinished", "done")


def thread_counts(checkpointer: Checkpointer) -> dict[str, int] | None:
    """Threads by status (``interrupted``, ``error``, ``running``, ``unfinished``, ``done``, ``all``).

    ``None`` from a store the console cannot count in bounded time.

    Raises:
        StorageError: the store could not be read.
    """
    if isinstance(checkpointer, InMemoryCheckpointer):
        counts = {status: len(checkpointer.list_threads(status=status)) for status in (*_STORED, "running")}
    elif isinstance(checkpointer, SqlCheckpointer):
        by_status = checkpointer.statements.built(_BY_STATUS)
        running = checkpointer.statements.built(_RUNNING)

        def read(session: Session) -> dict[str, int]:
            found = {str(status): int(count) for status, count in session.query(by_status)}
            found["running"] = int(session.query(running, now=time.time())[0][0])
            return found

        counts = checkpointer.transact(read, what="count threads", write=False)
    else:
        return None
    result = {status: counts.get(status, 0) for status in (*_STORED, "running")}
    result["all"] = sum(result[status] for status in _STORED)
    return result
