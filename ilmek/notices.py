"""Pause notices: tell someone a pause opened, at least once, from an outbox in the store.

A graph compiled (or bound) with ``on_pause=fn`` has each pause a run opens
written to the store's outbox in the pause's own commit. Right after that
commit the pausing process calls ``fn(PauseNotice(...))`` for each and
takes the notice out of the outbox. If the process dies first, or the hook
raises, the notice stays there and :func:`~ilmek.tick` delivers it later:
:data:`~ilmek.checkpoint.outbox.DELIVERY_GRACE` seconds after the commit,
then with a backoff that doubles after every failure (up to an hour). A
notice may so arrive more than once; ``notice.id`` is the same each time,
so a hook deduplicates on it. A hook's failure is logged, never raised:
the run it follows has already paused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .checkpoint.base import Checkpointer
from .checkpoint.outbox import DELIVERY_GRACE, OutboxNotice, notice_id
from .errors import IlmekError
from .logs import logger
from .redact import mask_secrets, printable
from .types import Pending

__all__ = ["MAX_BACKOFF", "PauseNotice", "deliver", "deliver_due", "outbox_notices"]

_LOG = "ilmek.notices"

MAX_BACKOFF = 3600.0
"""The longest wait, in seconds, between two deliveries of a notice whose hook keeps failing."""


@attrs.frozen(kw_only=True)
class PauseNotice:
    """That a pause opened: what an ``on_pause`` hook receives.

    Attributes:
        id: Stable across deliveries of this notice: deduplicate on it.
        thread_id: The paused thread.
        checkpoint_id: The checkpoint that holds the pause (what
            :func:`~ilmek.answer_token` signs).
        graph: The graph's name.
        pending: The open pause (its payload, contract and deadline).
    """

    id: str
    thread_id: str
    checkpoint_id: str
    graph: str
    pending: Pending


def outbox_notices(
    graph: str, thread_id: str, checkpoint_id: str, pending: Sequence[Pending]
) -> list[OutboxNotice]:
    """The outbox rows of a pause commit: one per person pause it opened (a timer wakes by itself)."""
    due = time.time() + DELIVERY_GRACE
    return [
        OutboxNotice(
            id=notice_id(thread_id, checkpoint_id, pause.id),
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            pause_id=pause.id,
            graph=graph,
            due_at=due,
        )
        for pause in pending
        if pause.kind == "person"
    ]


def deliver(
    hook: Callable[[PauseNotice], Any],
    checkpointer: Checkpointer,
    notice: OutboxNotice,
    pause: Pending,
    now: float | None = None,
) -> bool:
    """Call ``hook`` once for ``notice``; settle the outbox row either way. Whether it took it.

    A hook that raises is logged (its message escaped by the log's
    formatter, never raised again) and the notice is put off with backoff,
    counted from ``now`` (epoch seconds; default the clock).
    """
    shown = PauseNotice(
        id=notice.id,
        thread_id=notice.thread_id,
        checkpoint_id=notice.checkpoint_id,
        graph=notice.graph,
        pending=pause,
    )
    where = {"thread_id": notice.thread_id, "checkpoint_id": notice.checkpoint_id}
    try:
        hook(shown)
    except Exception as problem:
        retry_in = min(DELIVERY_GRACE * 2**notice.attempts, MAX_BACKOFF)
        logger(_LOG).warning(
            "the on_pause hook failed for pause %r of thread %r (%s: %s); tick retries it in %.0f s",
            notice.pause_id,
            notice.thread_id,
            type(problem).__name__,
            # What the hook raised may carry anything (a URL with a password, control characters).
            printable(mask_secrets(str(problem))),
            retry_in,
            extra=where,
        )
        _settle(checkpointer.notice_failed, notice, (time.time() if now is None else now) + retry_in)
        return False
    _settle(checkpointer.notice_delivered, notice)
    return True


def _settle(mark: Callable[..., None], notice: OutboxNotice, *args: Any) -> None:
    """Mark the outbox row; a store that fails here leaves it for ``tick`` and never fails the run."""
    try:
        mark(notice.id, *args)
    except IlmekError as problem:
        logger(_LOG).warning(
            "could not mark the notice of pause %r of thread %r (%s); tick delivers it again",
            notice.pause_id,
            notice.thread_id,
            printable(mask_secrets(str(problem))),
            extra={"thread_id": notice.thread_id, "checkpoint_id": notice.checkpoint_id},
        )


def deliver_due(
    hooks: Mapping[str, Callable[[PauseNotice], Any]],
    checkpointer: Checkpointer,
    now: float,
    limit: int | None = None,
) -> int:
    """Deliver the outbox's notices due by ``now`` whose graph has a hook here; how many were delivered.

    A notice whose pause no longer exists (its thread deleted or pruned) is
    taken out of the outbox without a call; one whose graph is not among
    ``hooks`` is left for a process that has it.
    """
    delivered = 0
    for notice in checkpointer.due_notices(now, limit):
        hook = hooks.get(notice.graph)
        if hook is None:
            continue
        checkpoint = checkpointer.get(notice.thread_id, notice.checkpoint_id)
        pause = (
            None
            if checkpoint is None
            else next((p for p in checkpoint.pending if p.id == notice.pause_id), None)
        )
        if pause is None:
            checkpointer.notice_delivered(notice.id)
            continue
        delivered += deliver(hook, checkpointer, notice, pause, now)
    return delivered
