"""Running a graph through transient database failures: the retry loop the README shows.

A ``TransientStorageError`` (the server restarting, a connection killed, a
pool with nothing to lend) or a ``ThreadBusyError`` (another run still holds
the thread) is worth another try. The input is committed before any node
runs, so a retry must not send it twice: when the failed run had already
committed something (its checkpoints carry its ``run_id``, and so does the
error), the retry continues the thread with ``None`` instead.
"""

from __future__ import annotations

import time
from typing import Any

from ilmek import CompiledGraph, Result, ThreadBusyError, TransientStorageError, run
from ilmek.checkpoint.base import Checkpointer


def run_reliably(
    graph: CompiledGraph,
    update: Any,
    *,
    thread_id: str,
    checkpointer: Checkpointer,
    attempts: int = 8,
    backoff: float = 0.2,
) -> Result:
    """``run``, tried again (with growing pauses) while the failure is transient."""
    for attempt in range(1, attempts + 1):
        try:
            return run(graph, update, thread_id=thread_id, checkpointer=checkpointer)
        except (TransientStorageError, ThreadBusyError) as error:
            if attempt == attempts:
                raise
            time.sleep(backoff * 2 ** (attempt - 1))
            if update is not None and _committed(checkpointer, thread_id, error.run_id):
                update = None  # the input landed before the failure: continue, do not add it twice
    raise AssertionError("unreachable")


def _committed(checkpointer: Checkpointer, thread_id: str, run_id: str | None) -> bool:
    """Whether the failed run committed a checkpoint (its input at least)."""
    for _ in range(20):
        try:
            latest = checkpointer.get(thread_id)
        except TransientStorageError:
            time.sleep(0.5)
            continue
        return latest is not None and latest.metadata.get("run_id") == run_id
    return False
