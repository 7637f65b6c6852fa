"""The notice outbox's rows: one per pause a run opened while its graph has an ``on_pause`` hook.

A row is written in the same transaction as the pause's checkpoint, so a
pause committed always has its notice waiting; it leaves the outbox once
the hook has taken it (``notice_delivered``), or is put off with a later
due time when the hook failed (``notice_failed``). ``tick`` asks for the
rows due by now through an index on the due time.
"""

from __future__ import annotations

import builtins
import hashlib
import threading
from collections.abc import Iterable, Sequence

import attrs

__all__ = ["DELIVERY_GRACE", "MemoryOutbox", "NoticeOutbox", "OutboxNotice", "notice_id"]

DELIVERY_GRACE = 30.0
"""Seconds the pausing process has to deliver a notice itself before ``tick`` may deliver it too."""


def notice_id(thread_id: str, checkpoint_id: str, pause_id: str) -> str:
    """The stable id of the notice of one pause (the same every time it is delivered)."""
    digest = hashlib.sha256(f"{thread_id}\0{checkpoint_id}\0{pause_id}".encode()).hexdigest()
    return f"n{digest[:31]}"


@attrs.frozen(kw_only=True)
class OutboxNotice:
    """A notice waiting in the store to be delivered.

    Attributes:
        id: Stable (see :func:`notice_id`): hooks deduplicate on it.
        thread_id: The paused thread.
        checkpoint_id: The checkpoint that holds the pause.
        pause_id: The pause's ``Pending.id``.
        graph: The graph's name, to find its hook.
        due_at: When it may be delivered next (epoch seconds).
        attempts: How many deliveries have failed so far.
    """

    id: str
    thread_id: str
    checkpoint_id: str
    pause_id: str
    graph: str
    due_at: float
    attempts: int = 0


class NoticeOutbox:
    """The outbox part of the checkpointer port; this default keeps none.

    A backend that keeps an outbox writes the ``notices`` its ``commit`` is
    given in the same transaction as the checkpoint; without one, the
    pausing process still delivers each notice once, but nobody delivers it
    again after a crash.
    """

    def due_notices(self, now: float, limit: int | None = None) -> builtins.list[OutboxNotice]:
        """The outbox's notices due by ``now`` (epoch seconds), the longest due first; indexed."""
        return []

    def notice_delivered(self, notice_id: str) -> None:
        """Take a delivered notice out of the outbox (nothing when it is gone already)."""

    def notice_failed(self, notice_id: str, retry_at: float) -> None:
        """Count a failed delivery and put the notice off until ``retry_at`` (epoch seconds)."""


class MemoryOutbox(NoticeOutbox):
    """An outbox in this process's memory (the in-memory checkpointer's), thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self._outbox_lock = threading.Lock()
        self._outbox: dict[str, OutboxNotice] = {}

    def keep_notices(self, notices: Sequence[OutboxNotice]) -> None:
        """Put ``notices`` in the outbox; one already there is kept as it is."""
        with self._outbox_lock:
            for notice in notices:
                self._outbox.setdefault(notice.id, notice)

    def due_notices(self, now: float, limit: int | None = None) -> builtins.list[OutboxNotice]:
        with self._outbox_lock:
            due = sorted(
                (n for n in self._outbox.values() if n.due_at <= now), key=lambda n: (n.due_at, n.id)
            )
        return due if limit is None else due[:limit]

    def notice_delivered(self, notice_id: str) -> None:
        with self._outbox_lock:
            self._outbox.pop(notice_id, None)

    def forget_notices(self, thread_ids: Iterable[str]) -> None:
        """Take every notice of ``thread_ids`` out of the outbox (their threads were deleted)."""
        gone = set(thread_ids)
        with self._outbox_lock:
            for notice_id in [key for key, n in self._outbox.items() if n.thread_id in gone]:
                del self._outbox[notice_id]

    def notice_failed(self, notice_id: str, retry_at: float) -> None:
        with self._outbox_lock:
            notice = self._outbox.get(notice_id)
            if notice is not None:
                self._outbox[notice_id] = attrs.evolve(notice, due_at=retry_at, attempts=notice.attempts + 1)
