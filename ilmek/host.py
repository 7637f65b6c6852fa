"""Helpers for the host application: inspect a thread, edit its state."""

from __future__ import annotations

from typing import Any

from .checkpoint.base import Checkpointer
from .errors import CheckpointNotFoundError
from .graph import CompiledGraph
from .types import Checkpoint, Pending, new_checkpoint_id, split_task_id, task_id_for

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
    thread carries on from where it was; tasks that run after the edit run
    afresh (their journals start empty, since the state they see changed),
    except that steps recorded before an open pause still replay.

    Returns:
        The new checkpoint.

    Raises:
        CheckpointNotFoundError: the thread has no checkpoint (start it with ``run``).
        ReducerError: the update names an undeclared channel or a reducer failed.
        ThreadBusyError: a run holds the thread.
        ConcurrentUpdateError: another writer moved the thread on meanwhile.
    """
    with checkpointer.hold(thread_id):
        latest = checkpointer.get(thread_id)
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
            Pending(
                id=p.id,
                task_id=task_id_for(thread_id, checkpoint_id, split_task_id(p.task_id)[2]),
                node=p.node,
                key=p.key,
                payload=p.payload,
            )
            for p in latest.pending
        )
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=thread_id,
            parent_id=latest.id,
            plan_id=latest.plan_id,
            channels=values,
            next=latest.next,
            pending=pending,
            task_journals=latest.task_journals,
            step=latest.step,
            metadata={"source": "update", "graph": graph.name},
        )
        checkpointer.commit(thread_id, checkpoint, changes=changes, expect_latest=latest.id)
        return checkpoint
