"""Running a graph: the public entry points ``run``, ``resume``, ``stream`` and their kin.

A run holds its thread (one :class:`~ilmek.checkpoint.holds.Hold`, passed to
every write it makes), loads the checkpoint it starts from, and loops: run
the tasks planned in the checkpoint's ``next`` in parallel, fold their
writes in task order, plan what follows, commit a checkpoint. How that
happens lives in :mod:`ilmek.execution`, one collaborator per job; this
module turns a call into a run and collects its result.

The engine talks only to the :class:`~ilmek.checkpoint.base.Checkpointer`
port; it never imports a concrete backend except the in-memory one it uses
when no checkpointer is given, and names no framework.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any, overload

from .checkpoint.base import Checkpointer
from .events import Event, RunEnd
from .execution.answers import Resume
from .execution.lifecycle import Run, Start
from .execution.setup import DEFAULT_RECURSION_LIMIT, RunOptions
from .graph import CompiledGraph
from .types import AnsweredBy, AttrsStateT, MappingInput, MappingStateT, Result, StateT

__all__ = [
    "DEFAULT_RECURSION_LIMIT",
    "RunOptions",
    "resume",
    "resume_keyed",
    "resume_keyed_stream",
    "resume_stream",
    "run",
    "stream",
]

# run and stream type their input from the graph's state: a TypedDict graph
# (or a channel map's dict) takes that mapping, so a misspelt key is a type
# error; an attrs graph takes a mapping of writes or an instance. There is no
# catch-all overload, so a TypedDict input that does not fit is an error
# rather than a match of a looser signature.
#
# Every entry point spells out the same keyword-only options, so that a type
# checker catches a misspelt one; None means "the graph's binding, else the
# library's default", resolved in one place: RunSetup.of.


def collect_result(graph: CompiledGraph[StateT], the_run: Run) -> Result[StateT]:
    """Drive ``the_run`` to its end and sum it up as a :class:`Result`."""
    # Nobody reads these events live, so a lone task may run on the caller's
    # thread (where the checkpointer allows it: Checkpointer.tasks_on_caller_thread).
    the_run.may_run_inline = True
    events = list(the_run.events())
    end = events[-1]
    assert isinstance(end, RunEnd)
    # As in the reference: the state of a run that finished; a paused,
    # failed or aborted run's thread is read with thread_state().
    state: Any = end.state if end.status == "done" else None
    return Result(
        status=end.status,
        state=state,
        pending=end.pending,
        errors=end.errors,
        abort_reason=end.abort_reason,
        thread_id=the_run.thread_id,
        run_id=the_run.run_id,
        checkpoint_id=end.checkpoint_id,
        events=tuple(events),
        graph_name=graph.name,
    )


@overload
def stream(
    graph: CompiledGraph[MappingStateT],
    input: MappingInput[MappingStateT] = None,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Iterator[Event]: ...
@overload
def stream(
    graph: CompiledGraph[AttrsStateT],
    input: Mapping[str, Any] | AttrsStateT | None = None,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Iterator[Event]: ...
def stream(
    graph: CompiledGraph[StateT],
    input: Any = None,  # noqa: A002 - the spec's name
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Iterator[Event]:
    """Run a graph and yield its events as they happen; see :func:`run`.

    Bad arguments (an undeclared input channel included) raise here, before
    anything is yielded. The run starts when the first event is requested
    and holds its thread until the iterator is exhausted or closed.
    """
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return Run(graph, Start(input), options).events()


@overload
def run(
    graph: CompiledGraph[MappingStateT],
    input: MappingInput[MappingStateT] = None,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Result[MappingStateT]: ...
@overload
def run(
    graph: CompiledGraph[AttrsStateT],
    input: Mapping[str, Any] | AttrsStateT | None = None,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Result[AttrsStateT]: ...
def run(
    graph: CompiledGraph[StateT],
    input: Any = None,  # noqa: A002 - the spec's name
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Result[StateT]:
    """Run a graph on a thread until it finishes, pauses, fails or is cancelled.

    Args:
        graph: A compiled graph; the options it was compiled with (its bound
            checkpointer...) apply unless given here.
        input: A partial update folded through the channels' reducers and
            committed before any node runs. On a thread whose last run did
            not finish (planned tasks left by a crash, a node error or the
            recursion limit) the run then continues that plan, replaying
            every recorded step; otherwise it starts at ``START``. ``None``
            continues the thread where it stopped.
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one (given or bound)
            the run keeps them in memory and cannot pause.
        checkpoint_id: Start from this checkpoint instead of the latest; if it
            is not the latest, the run forks a new branch.
        recursion_limit: The most supersteps this run may take (default 25).
        strict: Raise :class:`NondeterminismError` when a replayed task skips a
            journal key (default ``True``).
        meta: Free-form values nodes read as ``ctx.meta``, laid over the
            graph's bound ``meta``.
        cancel: A ``threading.Event``; once set, the run stops at the next
            superstep boundary with status ``aborted``.
        max_workers: Threads for a superstep's tasks.
        expect_checkpoint_id: Run only while the thread's latest checkpoint is
            this one (the one the caller saw); else a :class:`ResumeError`.

    Every option left ``None`` takes the graph's binding (see
    :meth:`~ilmek.GraphBuilder.compile`), else the default shown.

    Returns:
        The :class:`Result`. A node's failure is ``status="error"``, never raised.

    Raises:
        InvalidArgumentError: a bad argument, an undeclared input channel, or a
            ``thread_id`` without a checkpointer, or a checkpointer without a
            ``thread_id`` (before any node runs).
        ResumeError: the thread is paused (answer it with :func:`resume`).
        ThreadBusyError: another run holds the thread.
        RecursionLimitError: the run took ``recursion_limit`` supersteps.
        CheckpointNotFoundError: ``checkpoint_id`` is not the thread's.
        ConcurrentUpdateError: another writer moved the thread on meanwhile.
        GraphError: a router or guard routed somewhere the graph has no node.
    """
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return collect_result(graph, Run(graph, Start(input), options))


def resume_run(
    graph: CompiledGraph[Any],
    answers: Any,
    keyed: bool,
    options: Mapping[str, Any],
    by: AnsweredBy | Mapping[str, AnsweredBy] = "person",
) -> Run:
    """The run a resume makes (``keyed``: ``answers`` is a dict of pause id to answer).

    ``options`` are keyword options as :func:`run` takes them; the graph's
    bindings fill in what they leave out. ``by`` is who answered, as the
    journal records it (one for all, or by pause id).
    """
    return Run(graph, Resume(answers, keyed, by), RunOptions.of(options))


def resume(
    graph: CompiledGraph[StateT],
    answer: Any,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Result[StateT]:
    """Answer the thread's one open pause and run on; options as for :func:`run`.

    Pass ``expect_checkpoint_id=`` the paused run's ``Result.checkpoint_id``
    (the pause the caller saw) to be sure the answer goes to that pause: a
    second answer to it (a double click) is refused instead of answering a
    later pause. Without it, a resume answers the pause it first read, and
    refuses if another resume answered that pause meanwhile.

    Raises:
        ResumeError: the thread is not paused, or has more than one open pause
            (use :func:`resume_keyed`), or the pause was already answered
            differently by a resume that did not finish.
    """
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return collect_result(graph, Run(graph, Resume(answer, False), options))


def resume_keyed(
    graph: CompiledGraph[StateT],
    answers: Mapping[str, Any],
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Result[StateT]:
    """Answer open pauses by their ``id`` and run on; options as for :func:`run`.

    Every open pause must be answered; answers for ids that are not open are
    ignored. Nothing is recorded unless every pause is answered.
    """
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return collect_result(graph, Run(graph, Resume(answers, True), options))


def resume_stream(
    graph: CompiledGraph[StateT],
    answer: Any,
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Iterator[Event]:
    """:func:`resume`, yielding events as they happen; options as for :func:`run`."""
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return Run(graph, Resume(answer, False), options).events()


def resume_keyed_stream(
    graph: CompiledGraph[StateT],
    answers: Mapping[str, Any],
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    expect_checkpoint_id: str | None = None,
) -> Iterator[Event]:
    """:func:`resume_keyed`, yielding events as they happen; options as for :func:`run`."""
    options = RunOptions(
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
        expect_checkpoint_id=expect_checkpoint_id,
    )
    return Run(graph, Resume(answers, True), options).events()
