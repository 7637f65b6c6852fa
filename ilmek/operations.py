"""Operating threads from outside their runs: recover stalled ones, ask a running one to stop.

Both work through the database, so they reach runs in any process on any
machine that shares it. :func:`recover` is safe to call from several
processes at once: each thread runs in one of them, the others find it held.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

from . import checks
from .checkpoint.base import Checkpointer
from .checkpoint.holds import Hold
from .engine import RunOptions, collect_result
from .errors import (
    ConcurrentUpdateError,
    DrainingError,
    InvalidArgumentError,
    RecursionLimitError,
    StorageError,
    ThreadBusyError,
)
from .execution.lifecycle import Run, Start
from .graph import CompiledGraph
from .logs import logger
from .process_drain import DRAIN_REASON, draining
from .types import Checkpoint, Result, ThreadError, ThreadInfo

__all__ = ["recover", "request_cancel", "stalled_threads", "why_stalled"]

_PAGE = 200


def request_cancel(checkpointer: Checkpointer, thread_id: str, reason: str = "cancelled") -> bool:
    """Ask the run that holds ``thread_id`` now, in any process, to stop.

    The run sees the request at its next superstep boundary (``ctx.cancel``
    is set at once for nodes that look, where the run's hold is renewed in
    the background) and ends ``aborted`` with ``reason``; its last checkpoint
    stands.

    Returns:
        Whether a run was holding the thread. The request dies with that run
        and never touches a later one.
    """
    return checkpointer.request_cancel(checks.thread_id(thread_id), checks.text(reason, "reason"))


def graph_registry(graphs: CompiledGraph | Mapping[str, CompiledGraph]) -> dict[str, CompiledGraph]:
    """``graphs`` (one compiled graph, or a dict of name to graph) as a dict of name to graph."""
    if isinstance(graphs, CompiledGraph):
        return {graphs.name: graphs}
    if isinstance(graphs, Mapping) and all(isinstance(g, CompiledGraph) for g in graphs.values()):
        return dict(graphs)
    raise InvalidArgumentError("graphs must be a compiled graph or a dict of graph name to compiled graph")


def graph_of(registry: Mapping[str, CompiledGraph], latest: Checkpoint, doing: str) -> CompiledGraph | None:
    """The graph that wrote ``latest`` (by the name its metadata records), or ``None``, logged, if not given.

    A checkpoint that names no graph is taken to be the one graph given, if one is.
    """
    name = latest.metadata.get("graph")
    graph = registry.get(name) if isinstance(name, str) else None
    if graph is None and len(registry) == 1 and name is None:
        graph = next(iter(registry.values()))
    if graph is None:
        logger("ilmek.operations").info(
            "not %s thread %r: its graph %r was not given",
            doing,
            latest.thread_id,
            name,
            extra={"thread_id": latest.thread_id},
        )
    return graph


_RECURSION_LIMIT = f"{RecursionLimitError.__module__}.{RecursionLimitError.__qualname__}"


def why_stalled(info: ThreadInfo) -> str | None:
    """Why a thread with work planned is not moving, in a few words; ``None`` when it is not stalled.

    Told apart by what its last run recorded: the recursion limit and a
    failed node (``info.error``), a cancel or this process's drain
    (``info.cancelled``); a thread no run holds that recorded none of these
    was left by a process that died or was killed mid-superstep.
    """
    if info.running or info.status not in ("unfinished", "error"):
        return None
    error = info.error
    if error is not None:
        if error.type == _RECURSION_LIMIT:
            return "it reached the recursion limit (that many supersteps in one run)"
        where = f"node {error.node!r} failed" if error.node is not None else "its run failed outside any node"
        return f"{where}: {error.type}"
    if info.cancelled is not None:
        if info.cancelled.reason == DRAIN_REASON:
            return "its process drained (a deploy or a shutdown) at a superstep boundary"
        return f"its run was cancelled: {info.cancelled.reason}"
    return "no run holds it and none recorded an end: its process died or was killed mid-superstep"


def stalled_threads(
    checkpointer: Checkpointer, *, older_than: float = 0.0, limit: int | None = None
) -> list[ThreadInfo]:
    """Threads a crash (or a failed run) left with planned tasks, no open pause, and no live run.

    Args:
        checkpointer: Where the threads are.
        older_than: Only threads last updated at least this many seconds ago.
        limit: At most this many, the least recently updated first.
    """
    older_than = checks.seconds(older_than, "older_than")
    limit = checks.count(limit, "limit", optional=True)
    found: list[ThreadInfo] = []
    for status in ("unfinished", "error"):
        offset = 0
        while True:
            page = checkpointer.list_threads(
                status=status, updated_before=time.time() - older_than, offset=offset, limit=_PAGE
            )
            found.extend(info for info in page if not info.running)
            if len(page) < _PAGE:
                break
            offset += _PAGE
    found.sort(key=lambda info: (info.updated_at, info.id))
    return found if limit is None else found[:limit]


def _unchanged(checkpointer: Checkpointer, found: ThreadInfo, hold: Hold) -> bool:
    """Whether the thread still reads as it did when it was listed as stalled (read under ``hold``).

    Read through the run's own connection: a recovering run uses one
    connection of a pool, as every run does.
    """
    now = checkpointer.read_thread(found.id, hold=hold)
    return now is not None and (now.checkpoint_id, now.updated_at, now.status, now.error) == (
        found.checkpoint_id,
        found.updated_at,
        found.status,
        found.error,
    )


def _could_not_run(
    checkpointer: Checkpointer, graph: CompiledGraph, run_id: str, latest: Checkpoint, error: Exception
) -> Result:
    """Record why a stalled thread could not be continued (its status becomes ``error``); its Result."""
    thread_id = latest.thread_id
    node = getattr(error, "node", None)
    node = node if isinstance(node, str) else None
    try:
        with checkpointer.hold(thread_id) as hold:
            checkpointer.record_failure(hold, ThreadError.of(error, node=node, checkpoint_id=latest.id))
    except (ThreadBusyError, StorageError) as problem:
        logger("ilmek.operations").warning(
            "could not record why thread %r could not be recovered: %s",
            thread_id,
            problem,
            extra={"thread_id": thread_id},
        )
    logger("ilmek.operations").warning(
        "could not recover thread %r: %s: %s",
        thread_id,
        type(error).__name__,
        error,
        extra={"thread_id": thread_id, "checkpoint_id": latest.id},
    )
    return Result(
        status="error",
        state=None,
        pending=(),
        errors=((node or "?", error),),
        abort_reason=None,
        thread_id=thread_id,
        run_id=run_id,
        checkpoint_id=latest.id,
        events=(),
        graph_name=graph.name,
    )


def recover(
    graphs: CompiledGraph | Mapping[str, CompiledGraph],
    checkpointer: Checkpointer,
    *,
    older_than: float = 0.0,
    limit: int | None = None,
    **run_options: Any,
) -> list[Result]:
    """Continue every stalled thread with its graph, replaying what its steps recorded.

    A thread is stalled when its latest checkpoint plans tasks, no pause is
    open and no live run holds it: a process died mid-superstep, or a node
    failed. Each is continued with ``run(graph, None, ...)``, so no completed
    step runs again. Safe from several processes at once: a thread another
    recoverer (or any run) holds is skipped.

    Args:
        graphs: One compiled graph, or a dict of graph name to graph: a
            checkpoint records the name of the graph that wrote it, and a
            thread of a graph not given is left alone.
        checkpointer: Where the threads are.
        older_than: Only threads idle for at least this many seconds (a run
            that is merely slow renews its hold, so it is never stalled).
        limit: At most this many threads.
        run_options: More options for :func:`~ilmek.run` (``recursion_limit``...).

    Returns:
        The result of each thread continued. A thread that could not even
        run (its checkpoint plans a node the graph no longer has, a router
        raised, the recursion limit) does not stop the sweep: its failure is
        recorded on it (it then lists under ``status="error"``) and its result
        has ``status="error"`` with that error. A storage failure stops the
        sweep (raised).
    """
    registry = graph_registry(graphs)
    results: list[Result] = []
    for info in stalled_threads(checkpointer, older_than=older_than, limit=limit):
        if draining():
            break  # this process gives its work back: another process's recover takes the rest
        latest = checkpointer.get(info.id)
        if latest is None or latest.pending or not latest.next:
            continue
        graph = graph_of(registry, latest, "recovering")
        if graph is None:
            continue
        the_run = Run(
            graph,
            Start(None),
            RunOptions.of({**run_options, "thread_id": info.id, "checkpointer": checkpointer}),
        )
        # Checked under the run's hold: another recoverer may have continued
        # the thread (to its end, a pause, or the same failure) since it was listed.
        the_run.only_if = functools.partial(_unchanged, checkpointer, info)
        try:
            result = collect_result(graph, the_run)
        except (ThreadBusyError, ConcurrentUpdateError):
            # Another recoverer, or a run, has it or had it: it is in good hands.
            continue
        except DrainingError:
            break  # drained between the look and the run: nothing was written
        except StorageError:
            raise  # the database's failure, not the thread's: the sweep cannot go on either
        except Exception as error:
            # This thread cannot run (a node a deploy removed, a router that
            # raises, an endless loop): say so on the thread and go on, so
            # one bad thread never stops every later sweep.
            result = _could_not_run(checkpointer, graph, the_run.run_id, latest, error)
        logger("ilmek.operations").info(
            "recovered thread %r: %s",
            info.id,
            result.status,
            extra={"thread_id": info.id, "checkpoint_id": result.checkpoint_id},
        )
        results.append(result)
    return results
