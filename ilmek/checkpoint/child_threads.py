"""Listing a thread's subgraph threads: internal, for the console; one method of its own room.

A ``ctx.call`` child that never paused leaves no record in its parent's
journal once the parent's superstep committed: its stored thread is all
there is to find it by. :class:`~ilmek.checkpoint.base.Checkpointer`
inherits :class:`ChildThreads` (a backend that cannot list them finds
none); the in-memory checkpointer lists its threads by prefix
(:class:`MemoryChildThreads`), the SQL ones read an index range
(``sql/threads.py``).
"""

from __future__ import annotations

import builtins
from contextlib import AbstractContextManager
from typing import Any

from .. import checks
from ..namespaces import own_children

__all__ = ["ChildThreads", "MemoryChildThreads"]


class ChildThreads:
    """The internal listing of the child threads a thread's own supersteps ran."""

    def _child_thread_ids(
        self, thread_id: str, plan_id: str | None = None, *, limit: int
    ) -> builtins.list[str]:
        """The ids of the child threads ``thread_id``'s own supersteps ran (not their children).

        Internal, for the console: one bounded read.

        Args:
            thread_id: The thread (a root or a child).
            plan_id: Only the children of that plan's superstep.
            limit: At most this many, the newest plan's first
                (:func:`ilmek.namespaces.own_children`'s order).

        The default finds none: the console then shows the children found
        otherwise (a subgraph node, a pause).
        """
        return []


class MemoryChildThreads(ChildThreads):
    """The in-memory checkpointer's: its threads' ids, by prefix, under its lock."""

    _lock: AbstractContextManager[Any]
    _threads: dict[str, Any]

    def _child_thread_ids(
        self, thread_id: str, plan_id: str | None = None, *, limit: int
    ) -> builtins.list[str]:
        thread_id = checks.thread_id(thread_id)
        with self._lock:
            return own_children(thread_id, builtins.list(self._threads), plan_id)[:limit]
