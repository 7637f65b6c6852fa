"""Helpers for the host application: inspect a thread, edit its state."""

from __future__ import annotations

from typing import Any

import attrs

from . import checks
from .checkpoint.base import Checkpointer
from .errors import CheckpointNotFoundError
from .graph import CompiledGraph
from .types import Checkpoint, Pending, new_checkpoint_id, task_id_for

__all__ = ["history", "pending_interrupts", "thread_state", "update_state"]


def pending_interrupts(checkpointer: Checkpointer, thread_id: str) -> tuple[Pending, ...]:
    """The thread's open pauses (empty when it is not waiting for anyone)."""
    latest = checkpointer.get(thread_id)
    return latest.pending if latest is not None else ()


def thread_state(graph: CompiledGraph, checkpointer: Checkpointer, thread_id: str) -> Any:
    """The thread's latest state as nodes see it, or ``None`` for an unknown thread.

    A dict for a graph with a channel map, an instance of the state class for
    a graph whose state is an ``attrs`` class.
    """
    latest = checkpointer.get(thread_id)
    if latest is None:
        return None
    return graph.schema.view(latest.channels)


def history(checkpointer: Checkpointer, thread_id: str, limit: int | None = None) -> list[Checkpoint]:
    """The thread's checkpoints, newest first, forks included.

    Each record's ``channels`` load only when first read, so listing a long
    history is cheap.
    """
    return checkpointer.list(thread_id, limit=limit)


def update_state(graph: CompiledGraph, checkpointer: Checkpointer, thread_id: str, update: Any) -> Checkpoint:
    """Fold ``update`` into the thread's state as a new checkpoint: a human edit.

    The new checkpoint keeps what was scheduled and any open pause, so the
    thread carries on from where it was. Steps its planned tasks already
    recorded still replay (as when a crashed run is continued with new
    input); a pause still open is answered afresh.

    Returns:
        The new checkpoint.

    Raises:
        CheckpointNotFoundError: the thread has no checkpoint (start it with ``run``).
        ReducerError: the update names an undeclared channel or a reducer failed.
        ThreadBusyError: a run holds the thread.
        ConcurrentUpdateError: another writer moved the thread on meanwhile.
    """
    thread_id = checks.thread_id(thread_id)
    with checkpointer.hold(thread_id) as hold:
        latest = checkpointer.load(thread_id, hold=hold)
        if latest is None:
            raise CheckpointNotFoundError(
                f"thread {thread_id!r} has no checkpoint to update; start it with run()",
                thread_id=thread_id,
            )
        schema = graph.schema
        writes = schema.writes_from_input(update, thread_id=thread_id)
        values, changes = schema.fold(latest.channels, [(None, writes)], thread_id=thread_id)
        checkpoint_id = new_checkpoint_id(after=latest.id)
        pending = tuple(
            attrs.evolve(p, task_id=task_id_for(thread_id, checkpoint_id, p.id[: -len(p.key) - 1]))
            for p in latest.pending
        )
        # A paused checkpoint's own journal holds the answers of resumes that
        # did not finish: an edit starts the answering afresh.
        chain = latest.journal_chain if latest.pending else (*latest.journal_chain, latest.id)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=thread_id,
            parent_id=latest.id,
            plan_id=latest.plan_id,
            channels=values,
            next=latest.next,
            pending=pending,
            task_journals=latest.task_journals,
            journal_chain=chain,
            step=latest.step,
            metadata={"source": "update", "graph": graph.name},
        )
        checkpointer.commit(thread_id, checkpoint, changes=changes, expect_latest=latest.id, hold=hold)
        return checkpoint
