"""Reading a thread's subgraphs from the host: their states, their histories, by namespace path.

A child's thread is named by its parent's thread, the plan of the parent's
superstep that ran it and its namespace part (:mod:`ilmek.namespaces`). The
children of a thread's *current* superstep (the one its latest checkpoint
plans: paused inside a child, crashed or failed in one) are found from that
checkpoint; a child of an earlier superstep is found by walking the
thread's plans back, newest first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .checkpoint.base import Checkpointer
from .errors import CheckpointNotFoundError
from .graph import CompiledGraph
from .namespaces import child_thread_id, join_path
from .types import Checkpoint

__all__ = ["child_graph", "child_parts", "child_states", "child_thread"]


def child_parts(graph: CompiledGraph[Any] | None, checkpoint: Checkpoint) -> list[str]:
    """The namespace parts of the children ``checkpoint``'s superstep may have run, in plan order."""
    parts = [p.ns[0] for p in checkpoint.pending if p.ns]
    if graph is not None:
        for task in checkpoint.next:
            spec = graph.nodes.get(task.node)
            if spec is not None and spec.subgraph is not None:
                parts.append(f"{task.node}:{task.task_key}")
    return list(dict.fromkeys(parts))


def child_graph(graph: CompiledGraph[Any] | None, part: str) -> CompiledGraph[Any] | None:
    """The graph a node-form child ``part`` (``"node:task_key"``) runs, when ``graph`` says."""
    if graph is None:
        return None
    spec = graph.nodes.get(part.split(":", 1)[0])
    return spec.subgraph if spec is not None else None


def child_states(
    graph: CompiledGraph[Any] | None, checkpointer: Checkpointer, thread_id: str, checkpoint: Checkpoint
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(ns path, state)`` of each child of ``checkpoint``'s superstep, depth first.

    A child whose graph is known (a node that is a subgraph) is viewed as
    its graph views state; one run by ``ctx.call`` reads as its channel values.
    """
    for part in child_parts(graph, checkpoint):
        tid = child_thread_id(thread_id, checkpoint.plan_id or checkpoint.id, part)
        latest = checkpointer.get(tid)
        if latest is None:
            continue
        sub = child_graph(graph, part)
        yield (part,), (sub.schema.view(latest.channels) if sub is not None else dict(latest.channels))
        for path, state in child_states(sub, checkpointer, tid, latest):
            yield (part, *path), state


def child_thread(
    graph: CompiledGraph[Any] | None, checkpointer: Checkpointer, thread_id: str, ns: tuple[str, ...]
) -> tuple[str, CompiledGraph[Any] | None]:
    """The thread id (and graph, when known) of the child at ``ns`` under ``thread_id``.

    Raises:
        CheckpointNotFoundError: no child ran at that path.
    """
    tid, sub = thread_id, graph
    for depth, part in enumerate(ns):
        found = _child_of(checkpointer, tid, part)
        if found is None:
            raise CheckpointNotFoundError(
                f"thread {thread_id!r} has no subgraph at {join_path(ns[: depth + 1])!r}; the paths of its "
                "open pauses are in Pending.ns, and thread_state(..., subgraphs=True) lists the children "
                "of its current superstep",
                thread_id=thread_id,
            )
        tid, sub = found, child_graph(sub, part)
    return tid, sub


def _child_of(checkpointer: Checkpointer, thread_id: str, part: str) -> str | None:
    """The newest child ``part`` of ``thread_id``: its current superstep's, else an earlier plan's."""
    seen: set[str] = set()
    for checkpoint in checkpointer.list(thread_id):
        plan = checkpoint.plan_id or checkpoint.id
        if plan in seen:
            continue
        seen.add(plan)
        tid = child_thread_id(thread_id, plan, part)
        if checkpointer.get_thread(tid) is not None:
            return tid
    return None
