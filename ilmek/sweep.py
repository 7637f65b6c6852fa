"""Time's one sweep: :func:`tick` applies what has come due — deadlines' ``on_timeout`` and timers.

A pause with a deadline, and a timer (``ctx.sleep``), is stored with its due
time; the thread keeps the earliest as ``ThreadInfo.due_at``, in an indexed
column. ``tick`` asks for the threads due by now through that index (its
cost follows what is due, not how many threads there are) and answers each
one's due pauses by resuming it, under the thread's hold like any resume:
a thread another run holds is skipped this time, and the first answer
committed wins (a person who answered first stands; one who answers after
``tick`` finds the pause closed and gets a ``ResumeError``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping
from typing import Any

from . import checks
from .checkpoint.base import Checkpointer
from .engine import collect_result, resume_run
from .errors import ConcurrentUpdateError, DrainingError, InvalidArgumentError, ResumeError, ThreadBusyError
from .graph import CompiledGraph
from .logs import logger
from .notices import deliver_due
from .operations import graph_of, graph_registry
from .process_drain import draining
from .types import AnsweredBy, Checkpoint, Result, ThreadInfo, utc_now

__all__ = ["due_answers", "tick"]

_LOG = "ilmek.sweep"
#: Threads read at once when ``tick`` has a limit.
_PAGE = 100


def due_answers(latest: Checkpoint, now: _dt.datetime) -> tuple[dict[str, Any], dict[str, AnsweredBy]] | None:
    """The answers ``tick`` gives the open pauses of ``latest`` at ``now``, and who gives each.

    ``None`` unless every open pause has come due: a resume answers all of a
    thread's pauses at once, so a pause still waiting for a person keeps the
    thread waiting (its deadline applies with the others', once they are due).
    """
    pending = latest.pending
    if not pending or any(p.deadline is None or p.deadline > now for p in pending):
        return None
    answers = {p.id: p.on_timeout for p in pending}
    by: dict[str, AnsweredBy] = {p.id: "timer" if p.kind == "timer" else "deadline" for p in pending}
    return answers, by


def tick(
    graphs: CompiledGraph | Mapping[str, CompiledGraph],
    checkpointer: Checkpointer,
    *,
    now: _dt.datetime | None = None,
    limit: int | None = None,
    **run_options: Any,
) -> list[Result]:
    """Apply every due deadline and wake every due timer, continuing their threads.

    Each thread whose open pauses have all come due by ``now`` is resumed
    with their answers: a deadline's ``on_timeout`` (recorded
    ``by="deadline"``) and ``None`` for a timer (``by="timer"``, and
    ``ctx.sleep`` returns); then delivers the pause notices still in the
    outbox whose graph has an ``on_pause`` hook (a process that paused and
    died first, a hook that raised: see :mod:`ilmek.notices`). Safe from many processes at once: each thread
    is resumed under its hold, expecting the very pause it read, so a
    thread held by a run is skipped (a later tick takes it) and a pause a
    person answered meanwhile is left as they answered it.

    Args:
        graphs: One compiled graph, or a dict of graph name to graph (as for
            :func:`~ilmek.recover`); a thread of a graph not given is left alone.
        checkpointer: Where the threads are.
        now: The time to judge by (an aware ``datetime``); default the clock.
        limit: At most this many threads continued, the most overdue first
            (threads that cannot be continued yet do not count).
        run_options: More options for the resumes (``recursion_limit``...).

    Returns:
        The result of each thread continued (a node's failure is its
        result's ``status="error"``, as for any resume).

    Raises:
        InvalidArgumentError: ``now`` is naive, or ``graphs`` is not graphs.
        StorageError: the database failed (the sweep stops; nothing half done).
    """
    registry = graph_registry(graphs)
    moment = utc_now() if now is None else now
    if not isinstance(moment, _dt.datetime):
        raise InvalidArgumentError(f"now must be an aware datetime, got {type(moment).__name__}")
    checks.moment(moment, "now")
    limit = checks.count(limit, "limit", optional=True)
    results: list[Result] = []
    for info in _due_threads(checkpointer, moment, limit):
        if draining() or (limit is not None and len(results) >= limit):
            break  # draining: this process gives its work back, another process's tick takes the rest
        if info.running:
            continue  # a run has it now; the next tick looks again
        result = _wake(registry, checkpointer, info.id, moment, run_options)
        if result is not None:
            results.append(result)
    hooks = {g.name: g.defaults.on_pause for g in registry.values() if g.defaults.on_pause is not None}
    if hooks:
        deliver_due(hooks, checkpointer, moment.timestamp(), limit)
    return results


def _due_threads(checkpointer: Checkpointer, moment: _dt.datetime, limit: int | None) -> Iterator[ThreadInfo]:
    """The threads due by ``moment``, the most overdue first, read a page at a time.

    With a ``limit``, pages go on past threads that cannot be woken (a due
    pause beside one waiting for a person stays due): they would otherwise
    fill every page, and a thread behind them would never be woken.
    """
    if limit is None:
        yield from checkpointer.list_threads(due_before=moment)
        return
    page = max(limit, _PAGE)
    offset = 0
    while True:
        infos = checkpointer.list_threads(due_before=moment, offset=offset, limit=page)
        yield from infos
        if len(infos) < page:
            return
        offset += page


def _wake(
    registry: Mapping[str, CompiledGraph],
    checkpointer: Checkpointer,
    thread_id: str,
    now: _dt.datetime,
    run_options: Mapping[str, Any],
) -> Result | None:
    """Resume one thread with its due answers; ``None`` when it is not (or no longer) this tick's to do."""
    latest = checkpointer.get(thread_id)
    if latest is None:
        return None
    due = due_answers(latest, now)
    if due is None:
        return None
    graph = graph_of(registry, latest, "waking")
    if graph is None:
        return None
    answers, by = due
    options = {**run_options, "thread_id": thread_id, "checkpointer": checkpointer}
    # Expect the pause read above: if a person (or another tick) answered it
    # since, the resume is refused and their answer stands.
    options["expect_checkpoint_id"] = latest.id
    try:
        result = collect_result(graph, resume_run(graph, answers, True, options, by=by))
    except DrainingError:
        return None  # drained between the sweep's look and the resume: another process wakes it
    except (ThreadBusyError, ConcurrentUpdateError, ResumeError) as error:
        logger(_LOG).debug(
            "not waking thread %r this time: %s", thread_id, error, extra={"thread_id": thread_id}
        )
        return None
    logger(_LOG).info(
        "woke thread %r (%s): %s",
        thread_id,
        ", ".join(sorted(set(by.values()))),
        result.status,
        extra={"thread_id": thread_id, "checkpoint_id": result.checkpoint_id},
    )
    return result
