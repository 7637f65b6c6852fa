"""The subgraphs a checkpoint's superstep ran, read for the thread page: their checkpoints and journals.

A child's thread is found the way the host finds it
(:func:`ilmek.subgraph_reading.child_parts` and
:func:`ilmek.namespaces.child_thread_id`): from the node that is a subgraph
in the thread's graph, the namespace of an open pause, or a ``ctx.call``
child's pause recorded in its task's journal; and from the child threads
stored under the thread (one bounded read per thread), which is all a
``ctx.call`` child that never paused leaves once its parent's superstep
committed. A child whose superstep ran children of its own holds them too,
at every depth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..checkpoint.base import Checkpointer
from ..errors import IlmekError
from ..graph import CompiledGraph
from ..namespaces import child_thread_id, plan_and_part
from ..subgraph_reading import child_graph, child_parts
from ..types import Checkpoint, JournalEntry

__all__ = ["CHILD_CHECKPOINTS", "CHILD_READS", "ChildView", "read_children"]

CHILD_CHECKPOINTS: Final = 20
"""The most checkpoints of one child the page lists (newest first)."""

MAX_DEPTH: Final = 8
"""How deep the page follows children of children."""

CHILD_READS: Final = 40
"""The most child runs one page reads (a child run in a loop, at every depth, would be many)."""

_DIGITS: Final = re.compile(r"(\d+)")

# What a task's journal records when a child run by ``ctx.call`` (or a node) paused: "<part>@pause#k".
_PAUSE_RECORD: Final = re.compile(r"^(?P<part>.+:.+)@pause#\d+$")


@attrs.frozen(kw_only=True)
class ChildView:
    """One child run, as the thread page shows it under the task that ran it.

    Attributes:
        path: Its namespace path from the root thread (``("outer:outer", "review:review")``).
        checkpoints: Its newest checkpoints, newest first.
        more: It has older checkpoints than those listed.
        journals: The journals of its latest checkpoint's tasks, by task key.
        children: The children its latest checkpoint's superstep ran, by task key.
        earlier: The children its earlier listed checkpoints' supersteps ran
            (a finished child's are all here), oldest last, each with the
            checkpoint whose superstep ran them.
    """

    path: tuple[str, ...]
    checkpoints: tuple[Checkpoint, ...]
    more: bool
    journals: Mapping[str, tuple[JournalEntry, ...]]
    children: Mapping[str, tuple[ChildView, ...]]
    earlier: tuple[tuple[Checkpoint, tuple[ChildView, ...]], ...] = ()

    @property
    def part(self) -> str:
        """Its own namespace part, ``"node:task_key"``."""
        return self.path[-1]


def _parts(
    graph: CompiledGraph[Any] | None,
    checkpoint: Checkpoint,
    journals: Mapping[str, tuple[JournalEntry, ...]],
    stored: Sequence[str],
) -> list[str]:
    """The parts of the children ``checkpoint``'s superstep ran: the host's, its journals', the stored."""
    parts = child_parts(graph, checkpoint)
    for entries in journals.values():
        for entry in entries:
            found = _PAUSE_RECORD.match(entry.key)
            if found is not None:
                parts.append(found["part"])
    parts.extend(stored)
    return list(dict.fromkeys(parts))


def _owner(part: str, checkpoint: Checkpoint) -> str | None:
    """The key of the task of ``checkpoint`` that ran the child ``part`` (its part ends with it)."""
    return next((task.task_key for task in checkpoint.next if part.endswith(f":{task.task_key}")), None)


def _journals(checkpointer: Checkpointer, checkpoint: Checkpoint) -> Mapping[str, tuple[JournalEntry, ...]]:
    try:
        return checkpointer.load_journals(checkpoint, [task.task_key for task in checkpoint.next])
    except (IlmekError, UnicodeError):
        # A damaged journal row: the child's checkpoints are still worth showing.
        return {}


def _flat(children: Mapping[str, tuple[ChildView, ...]]) -> tuple[ChildView, ...]:
    return tuple(child for runs in children.values() for child in runs)


@attrs.define
class _Budget:
    """How many more child threads one page may read (each costs a listing and a journal read)."""

    left: int = CHILD_READS
    #: A thread had more stored children than a page reads (some were never looked at).
    unlisted: bool = False

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0

    @property
    def cut(self) -> bool:
        """Some child runs were found (or stored) but not read."""
        return self.left < 0 or self.unlisted


def _stored(
    checkpointer: Checkpointer, thread_id: str, budget: _Budget, plan_id: str | None = None
) -> dict[str, list[str]]:
    """The parts of the child threads stored under ``thread_id`` (of ``plan_id``), by plan: one read.

    Each plan's parts in the order a task's calls ran (``key#2`` before ``key#10``).
    """
    ids = checkpointer._child_thread_ids(thread_id, plan_id, limit=CHILD_READS + 1)
    budget.unlisted |= len(ids) > CHILD_READS
    found: dict[str, list[str]] = {}
    for child in ids[:CHILD_READS]:
        plan, part = plan_and_part(thread_id, child)
        found.setdefault(plan, []).append(part)
    return {plan: sorted(parts, key=_counted) for plan, parts in found.items()}


def _counted(part: str) -> list[str | int]:
    """A part's sort key: its text, each run of digits by its value (``key#2`` before ``key#10``)."""
    # Splitting on a captured group puts the digit runs at the odd places.
    return [int(piece) if index % 2 else piece for index, piece in enumerate(_DIGITS.split(part))]


def _child(
    checkpointer: Checkpointer,
    graph: CompiledGraph[Any] | None,
    thread_id: str,
    path: tuple[str, ...],
    budget: _Budget,
) -> ChildView | None:
    """The child run stored under ``thread_id`` (``None`` when it has no checkpoint)."""
    listed = checkpointer.list(thread_id, limit=CHILD_CHECKPOINTS + 1)
    if not listed:
        return None
    latest, more, listed = listed[0], len(listed) > CHILD_CHECKPOINTS, listed[:CHILD_CHECKPOINTS]
    journals = _journals(checkpointer, latest)
    stored = _stored(checkpointer, thread_id, budget) if len(path) < MAX_DEPTH else {}
    # An earlier superstep's journals are dropped when it commits: only its children are left to show.
    # A pause's checkpoint shares its superstep's plan (and so its children) with the one before it.
    plans = {latest.plan_id or latest.id}
    earlier = []
    for older in listed[1:]:
        plan = older.plan_id or older.id
        if plan not in plans:
            plans.add(plan)
            ran = _flat(
                _children(checkpointer, graph, thread_id, older, {}, stored.get(plan, ()), path, budget)
            )
            if ran:
                earlier.append((older, ran))
    own = stored.get(latest.plan_id or latest.id, ())
    return ChildView(
        path=path,
        checkpoints=tuple(listed),
        more=more,
        journals=journals,
        children=_children(checkpointer, graph, thread_id, latest, journals, own, path, budget),
        earlier=tuple(earlier),
    )


def _children(
    checkpointer: Checkpointer,
    graph: CompiledGraph[Any] | None,
    thread_id: str,
    checkpoint: Checkpoint,
    journals: Mapping[str, tuple[JournalEntry, ...]],
    stored: Sequence[str],
    path: tuple[str, ...],
    budget: _Budget,
) -> dict[str, tuple[ChildView, ...]]:
    found: dict[str, list[ChildView]] = {}
    if len(path) >= MAX_DEPTH:
        return {}
    for part in _parts(graph, checkpoint, journals, stored):
        owner = _owner(part, checkpoint)
        if owner is None or not budget.spend():
            continue
        tid = child_thread_id(thread_id, checkpoint.plan_id or checkpoint.id, part)
        child = _child(checkpointer, child_graph(graph, part), tid, (*path, part), budget)
        if child is not None:
            found.setdefault(owner, []).append(child)
    return {key: tuple(children) for key, children in found.items()}


def read_children(
    checkpointer: Checkpointer,
    graph: CompiledGraph[Any] | None,
    thread_id: str,
    checkpoint: Checkpoint,
    journals: Mapping[str, tuple[JournalEntry, ...]],
) -> tuple[dict[str, tuple[ChildView, ...]], bool]:
    """The children a checkpoint's superstep ran, by the key of the task that ran each; whether some were cut.

    At most :data:`CHILD_READS` child runs are read for one page, the
    first found first (a child before its own children).

    Args:
        checkpointer: Where the thread is stored.
        graph: The graph of ``thread_id`` (``None`` when the console does not know it).
        thread_id: The root thread ``checkpoint`` belongs to.
        checkpoint: The checkpoint whose next tasks ran the children.
        journals: Those tasks' journals (they name children that paused).
    """
    budget = _Budget()
    plan = checkpoint.plan_id or checkpoint.id
    stored = _stored(checkpointer, thread_id, budget, plan).get(plan, []) if checkpoint.next else []
    return _children(checkpointer, graph, thread_id, checkpoint, journals, stored, (), budget), budget.cut
