"""Helpers for the host application: inspect a thread, edit its state.

Every helper takes the thread as ``thread_id=`` and finds its checkpointer
the same way: the one passed as ``checkpointer=``, else the one the graph was
compiled with (``compile(checkpointer=...)``)::

    thread_state(g, thread_id="conv-42")
    pending_interrupts(g, thread_id="conv-42")
    history(g, thread_id="conv-42", limit=10)
    update_state(g, thread_id="conv-42", update={"cart": []})

The positional forms of SPEC §4 keep working: ``pending_interrupts(cp,
thread_id)``, ``thread_state(g, cp, thread_id)``, ``history(cp, thread_id,
limit)`` and ``update_state(g, cp, thread_id, update)``.
"""

from __future__ import annotations

from typing import Any, Final, Literal, overload

import attrs

from . import checks
from .checkpoint.base import Checkpointer
from .errors import CheckpointNotFoundError, InvalidArgumentError
from .graph import CompiledGraph
from .journals import inherited_journals
from .subgraph_reading import child_states, child_thread
from .types import Checkpoint, Pending, StateT, new_checkpoint_id, task_id_for

__all__ = ["forget_unstored_steps", "history", "pending_interrupts", "thread_state", "update_state"]

_MISSING: Final = object()


def _thread(what: str, thread_id: Any) -> str:
    if thread_id is None:
        raise InvalidArgumentError(f"{what}() needs the thread: pass thread_id=...")
    return checks.thread_id(thread_id)


def _graph(what: str, graph: Any) -> CompiledGraph[Any]:
    if not isinstance(graph, CompiledGraph):
        raise InvalidArgumentError(
            f"{what}() takes a compiled graph first, got {type(graph).__name__}; "
            "call .compile() on the builder"
        )
    return graph


def _given(what: str, given: Any) -> Checkpointer | None:
    """The checkpointer a call passed, if any, checked."""
    if given is None or isinstance(given, Checkpointer):
        return given
    if isinstance(given, str):
        # thread_state(g, "t"): the second place is the checkpointer's.
        raise InvalidArgumentError(
            f"{what}() got the text {given!r} where the checkpointer goes; pass the thread "
            f"as thread_id={given!r} (the graph's bound checkpointer is then used)"
        )
    raise InvalidArgumentError(f"checkpointer must be a Checkpointer, got {type(given).__name__}")


def _checkpointer(
    what: str, graph: CompiledGraph[Any] | None, given: Checkpointer | None, thread_id: str
) -> Checkpointer:
    """The checkpointer a helper reads: the one given, else the graph's bound one."""
    if given is not None:
        return given
    if graph is not None and graph.checkpointer is not None:
        return graph.checkpointer
    where = (
        f"graph {graph.name!r} is not bound to one (compile(checkpointer=...))"
        if graph is not None
        else "none was given"
    )
    raise InvalidArgumentError(
        f"{what}() has no checkpointer to read thread {thread_id!r} from: {where}; pass checkpointer=..."
    )


def _source(
    what: str, source: Any, checkpointer: Any
) -> tuple[CompiledGraph[Any] | None, Checkpointer | None]:
    """A helper's first argument, a graph or a checkpointer, and the checkpointer given."""
    if isinstance(source, CompiledGraph):
        return source, _given(what, checkpointer)
    if source is None or isinstance(source, Checkpointer):
        if source is not None and checkpointer is not None:
            raise InvalidArgumentError(f"{what}() got two checkpointers; pass one")
        return None, source if source is not None else _given(what, checkpointer)
    raise InvalidArgumentError(
        f"{what}() takes a compiled graph or a checkpointer first, got {type(source).__name__}; "
        f"e.g. {what}(graph, thread_id=...)"
    )


@overload
def pending_interrupts(
    source: CompiledGraph[Any], /, thread_id: str, *, checkpointer: Checkpointer | None = None
) -> tuple[Pending, ...]: ...
@overload
def pending_interrupts(source: Checkpointer, /, thread_id: str) -> tuple[Pending, ...]: ...
@overload
def pending_interrupts(*, thread_id: str, checkpointer: Checkpointer) -> tuple[Pending, ...]: ...
def pending_interrupts(
    source: CompiledGraph[Any] | Checkpointer | None = None,
    /,
    thread_id: str | None = None,
    *,
    checkpointer: Checkpointer | None = None,
) -> tuple[Pending, ...]:
    """The thread's open pauses (empty when it is not waiting for anyone).

    Args:
        source: A compiled graph (its bound checkpointer is read) or a
            checkpointer.
        thread_id: The thread.
        checkpointer: Read this one instead of the graph's.

    Raises:
        InvalidArgumentError: no thread, or no checkpointer given or bound.
    """
    graph, given = _source("pending_interrupts", source, checkpointer)
    thread = _thread("pending_interrupts", thread_id)
    latest = _checkpointer("pending_interrupts", graph, given, thread).get(thread)
    return latest.pending if latest is not None else ()


@overload
def thread_state(
    graph: CompiledGraph[StateT], checkpointer: Checkpointer, thread_id: str
) -> StateT | None: ...
@overload
def thread_state(
    graph: CompiledGraph[StateT], checkpointer: Checkpointer | None = None, *, thread_id: str
) -> StateT | None: ...
@overload
def thread_state(
    graph: CompiledGraph[Any],
    checkpointer: Checkpointer | None = None,
    thread_id: str | None = None,
    *,
    subgraphs: Literal[True],
) -> dict[tuple[str, ...], Any] | None: ...
def thread_state(
    graph: CompiledGraph[Any],
    checkpointer: Checkpointer | None = None,
    thread_id: str | None = None,
    *,
    subgraphs: bool = False,
) -> Any:
    """The thread's latest state as nodes see it, or ``None`` for an unknown thread.

    A dict for a graph with a channel map or a ``TypedDict``, an instance of
    the state class for a graph whose state is an ``attrs`` class.

    Args:
        graph: The thread's graph (it says how to view the state).
        checkpointer: Read this one instead of the graph's bound checkpointer.
        thread_id: The thread.
        subgraphs: Return a dict of namespace path to state instead: the
            thread's own under ``()``, then each child of its current
            superstep (paused inside a child, or stopped in one) under its
            path, ``("outer:outer", "inner:inner")`` for a grandchild. A child
            run by ``ctx.call`` reads as its channel values.

    Raises:
        InvalidArgumentError: no thread, or no checkpointer given or bound.
    """
    graph = _graph("thread_state", graph)
    given = _given("thread_state", checkpointer)
    thread = _thread("thread_state", thread_id)
    store = _checkpointer("thread_state", graph, given, thread)
    latest = store.get(thread)
    if latest is None:
        return None
    state = graph.schema.view(latest.channels)
    if not subgraphs:
        return state
    return {(): state, **dict(child_states(graph, store, thread, latest))}


@overload
def history(
    source: CompiledGraph[Any],
    /,
    thread_id: str,
    limit: int | None = None,
    *,
    checkpointer: Checkpointer | None = None,
    ns: tuple[str, ...] = (),
) -> list[Checkpoint]: ...
@overload
def history(
    source: Checkpointer, /, thread_id: str, limit: int | None = None, *, ns: tuple[str, ...] = ()
) -> list[Checkpoint]: ...
@overload
def history(
    *, thread_id: str, limit: int | None = None, checkpointer: Checkpointer, ns: tuple[str, ...] = ()
) -> list[Checkpoint]: ...
def history(
    source: CompiledGraph[Any] | Checkpointer | None = None,
    /,
    thread_id: str | None = None,
    limit: int | None = None,
    *,
    checkpointer: Checkpointer | None = None,
    ns: tuple[str, ...] = (),
) -> list[Checkpoint]:
    """The thread's checkpoints, newest first, forks included.

    Each record's ``channels`` load only when first read, so listing a long
    history is cheap.

    Args:
        source: A compiled graph (its bound checkpointer is read) or a
            checkpointer.
        thread_id: The thread.
        limit: At most this many, newest first.
        checkpointer: Read this one instead of the graph's.
        ns: The namespace path of a subgraph (``Pending.ns``, or a key of
            ``thread_state(..., subgraphs=True)``): list that child's
            checkpoints instead (the newest child at that path).

    Raises:
        InvalidArgumentError: no thread, or no checkpointer given or bound.
        CheckpointNotFoundError: no subgraph ran at ``ns``.
    """
    graph, given = _source("history", source, checkpointer)
    thread = _thread("history", thread_id)
    store = _checkpointer("history", graph, given, thread)
    if ns:
        thread = child_thread(graph, store, thread, tuple(ns))[0]
    return store.list(thread, limit=limit)


@overload
def update_state(
    graph: CompiledGraph[Any], checkpointer: Checkpointer, thread_id: str, update: Any
) -> Checkpoint: ...
@overload
def update_state(
    graph: CompiledGraph[Any], checkpointer: Checkpointer | None = None, *, thread_id: str, update: Any
) -> Checkpoint: ...
def update_state(
    graph: CompiledGraph[Any],
    checkpointer: Checkpointer | None = None,
    thread_id: str | None = None,
    update: Any = _MISSING,
    *,
    ns: tuple[str, ...] = (),
) -> Checkpoint:
    """Fold ``update`` into the thread's state as a new checkpoint: a human edit.

    The new checkpoint keeps what was scheduled and any open pause, so the
    thread carries on from where it was. Steps its planned tasks already
    recorded still replay (as when a crashed run is continued with new
    input), and so does an answer a resume recorded before it failed: the
    pause takes only that same answer, and the steps after it that ran do
    not run again. To answer differently, fork from an earlier checkpoint.

    Args:
        graph: The thread's graph (its channels fold the update).
        checkpointer: Write to this one instead of the graph's bound checkpointer.
        thread_id: The thread.
        update: A dict of channel writes, folded through the reducers.
        ns: The namespace path of a subgraph run by a node of ``graph``
            (``Pending.ns``): edit that child's state instead, under the
            thread's hold. The child goes on from the edit when the thread
            is resumed.

    Returns:
        The new checkpoint.

    Raises:
        InvalidArgumentError: no thread, no update, or no checkpointer given or bound.
        CheckpointNotFoundError: the thread has no checkpoint (start it with ``run``).
        ReducerError: the update names an undeclared channel or a reducer failed.
        ThreadBusyError: a run holds the thread.
        ConcurrentUpdateError: another writer moved the thread on meanwhile.
    """
    graph = _graph("update_state", graph)
    given = _given("update_state", checkpointer)
    thread_id = _thread("update_state", thread_id)
    if update is _MISSING:
        raise InvalidArgumentError(
            f"update_state() needs the edit to fold into thread {thread_id!r}: pass update={{...}}"
        )
    checkpointer = _checkpointer("update_state", graph, given, thread_id)
    if ns:
        with checkpointer.hold(thread_id):
            child, sub = child_thread(graph, checkpointer, thread_id, tuple(ns))
            if sub is None:
                raise InvalidArgumentError(
                    f"the subgraph at {'/'.join(ns)!r} of thread {thread_id!r} is run by ctx.call(), so "
                    "its graph is not known here: call update_state() with that graph and the ns"
                )
            return _fold_update(sub, checkpointer, child, update)
    return _fold_update(graph, checkpointer, thread_id, update)


def _fold_update(
    graph: CompiledGraph[Any], checkpointer: Checkpointer, thread_id: str, update: Any
) -> Checkpoint:
    """:func:`update_state` on one thread (a root or a child), under that thread's hold."""
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
            attrs.evolve(p, task_id=task_id_for(thread_id, checkpoint_id, p.task_key)) for p in latest.pending
        )
        # The same branch goes on: a pause answered by a resume that did not
        # finish keeps that answer and the steps it paid for after it.
        inherited = inherited_journals(latest)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=thread_id,
            parent_id=latest.id,
            plan_id=latest.plan_id,
            channels=values,
            next=latest.next,
            pending=pending,
            task_journals=inherited.task_journals,
            journal_chain=inherited.journal_chain,
            step=latest.step,
            metadata={"source": "update", "graph": graph.name},
        )
        checkpointer.commit(thread_id, checkpoint, changes=changes, expect_latest=latest.id, hold=hold)
        return checkpoint


def forget_unstored_steps(
    graph: CompiledGraph[Any], checkpointer: Checkpointer | None = None, *, thread_id: str
) -> tuple[str, ...]:
    """Let the steps whose results could not be stored run again, on the thread's next run.

    A step whose function ran but whose result could not be stored is
    recorded as run (:class:`~ilmek.errors.StepResultNotStoredError`): no
    retry and no later run calls its function again. Once the step returns
    something storable (plain data, or a class registered with
    :func:`ilmek.serde.register`), this is how you say that it may: the
    thread's next run (``run(g, None, ...)``) calls each such function once
    more, so its effect happens again (give it an idempotency key).

    Args:
        graph: The thread's graph (for its bound checkpointer).
        checkpointer: Use this one instead of the graph's bound checkpointer.
        thread_id: The thread.

    Returns:
        The steps forgotten, as ``"<task key>:<step key>"`` (``"pay:charge#0"``);
        empty when there were none.

    Raises:
        InvalidArgumentError: no thread, or no checkpointer given or bound.
        ThreadBusyError: a run holds the thread.
    """
    graph = _graph("forget_unstored_steps", graph)
    given = _given("forget_unstored_steps", checkpointer)
    thread_id = _thread("forget_unstored_steps", thread_id)
    checkpointer = _checkpointer("forget_unstored_steps", graph, given, thread_id)
    forgotten: list[str] = []
    with checkpointer.hold(thread_id) as hold:
        latest = checkpointer.load(thread_id, hold=hold)
        if latest is None:
            return ()
        # The journals the thread's planned tasks replay from.
        sources = inherited_journals(latest).journal_chain
        for task in latest.next:
            for source in sources:
                task_id = task_id_for(thread_id, source, task.task_key)
                entries = checkpointer.get_journal(task_id)
                unstored = [entry.key for entry in entries if entry.kind == "unstored"]
                if unstored:
                    checkpointer.put_journal(task_id, [e for e in entries if e.kind != "unstored"])
                    forgotten.extend(f"{task.task_key}:{key}" for key in unstored)
    return tuple(forgotten)
