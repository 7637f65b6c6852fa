"""Running a graph: supersteps on a thread pool, journaled steps, pauses and forks.

A run holds its thread (one :class:`~ilmek.checkpoint.holds.Hold`, passed to
every write it makes), loads the checkpoint it starts from, and loops: run
the tasks planned in the checkpoint's ``next`` in parallel, fold their
writes in task order, plan what follows, commit a checkpoint. Everything
the run reads and writes goes through the thread that drives it (the
caller's): workers hand their journal writes to it as typed messages and
wait, so a caller's database connection is only ever used from the caller's
thread, and a run that was abandoned can write nothing more.

The engine talks only to the :class:`~ilmek.checkpoint.base.Checkpointer`
port; it never imports a concrete backend except the in-memory one it uses
when no checkpointer is given.
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import sys
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import checks, serde
from .checkpoint.base import Checkpointer, journal_view
from .checkpoint.holds import Hold, HoldLostError
from .context import NodeContext, PlanContext, TaskJournal
from .control import Command
from .errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    IlmekError,
    InterruptSignal,
    InvalidArgumentError,
    NondeterminismError,
    RecursionLimitError,
    ReducerError,
    ResumeError,
)
from .events import (
    CheckpointEvent,
    CustomEvent,
    Event,
    InterruptEvent,
    NodeEnd,
    NodeError,
    NodeRetry,
    NodeStart,
    RunEnd,
    RunStart,
    StateEvent,
    StepStart,
)
from .graph import START, CompiledGraph, NodeSpec
from .logs import logger
from .types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    Pending,
    Result,
    ScheduledTask,
    ThreadError,
    new_checkpoint_id,
    new_random_id,
    task_id_for,
)

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

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


DEFAULT_RECURSION_LIMIT = 25


# As concurrent.futures picks, counted once (os.cpu_count() is a system call).
_DEFAULT_WORKERS = min(32, (os.cpu_count() or 1) + 4)


def _optional_mapping(value: Any) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidArgumentError(f"meta must be a dict, got {type(value).__name__}")
    return value


@attrs.frozen(kw_only=True)
class RunOptions:
    """How to run: the same options for :func:`run`, :func:`resume` and their streams.

    Attributes:
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one the run keeps them
            in memory, and cannot pause (nobody could answer).
        checkpoint_id: Start from this checkpoint instead of the latest; if it
            is not the latest, the run forks a new branch.
        recursion_limit: The most supersteps this run may take.
        strict: Raise :class:`NondeterminismError` when a replayed task skips
            a journal key.
        meta: Free-form values nodes read as ``ctx.meta``.
        cancel: A ``threading.Event``; once set, the run stops at the next
            superstep boundary with status ``aborted``.
        max_workers: Threads for a superstep's tasks.
    """

    thread_id: str | None = None
    checkpointer: Checkpointer | None = None
    checkpoint_id: str | None = None
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    strict: bool = True
    meta: Mapping[str, Any] | None = attrs.field(default=None, converter=_optional_mapping)
    cancel: threading.Event | None = None
    max_workers: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.checkpointer is not None and not isinstance(self.checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must be a Checkpointer, got {type(self.checkpointer).__name__}"
            )
        if self.checkpointer is not None and self.thread_id is None:
            raise InvalidArgumentError("a checkpointer needs a thread_id: pass thread_id=...")
        if self.thread_id is not None:
            checks.thread_id(self.thread_id)
            if self.checkpointer is None:
                raise InvalidArgumentError(
                    f"thread_id={self.thread_id!r} was given without a checkpointer: nothing would keep "
                    "the thread, and a later run or resume could not find it. Pass checkpointer= "
                    "(InMemoryCheckpointer() keeps it in this process)"
                )
        checks.optional_checkpoint_id(self.checkpoint_id)
        checks.count(self.recursion_limit, "recursion_limit", minimum=1)
        checks.count(self.max_workers, "max_workers", minimum=1, optional=True)
        if not isinstance(self.strict, bool):
            raise InvalidArgumentError(f"strict must be True or False, got {self.strict!r}")
        if self.cancel is not None and not (hasattr(self.cancel, "is_set") and hasattr(self.cancel, "wait")):
            raise InvalidArgumentError(f"cancel must be a threading.Event, got {type(self.cancel).__name__}")

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RunOptions:
        """Options from keyword arguments, refusing unknown ones."""
        known = {field.name for field in attrs.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        return cls(**options)


class _Start:
    """A run that starts from input."""

    __slots__ = ("input",)

    def __init__(self, input: Any) -> None:  # noqa: A002 -- the name run() gives it
        self.input = input


class _Resume:
    """A run that answers pauses."""

    __slots__ = ("answers", "keyed")

    def __init__(self, answers: Any, keyed: bool) -> None:
        self.answers = answers
        self.keyed = keyed


_Mode = _Start | _Resume


class _RunClosed(IlmekError):
    """The run was closed (its stream abandoned); nothing more is written."""


class _MovedOn(ConcurrentUpdateError):
    """Internal: a resume limited to one checkpoint's pauses found the thread elsewhere; nothing answered."""


@attrs.define(eq=False)
class _Task:
    """One task of the superstep being run."""

    task: ScheduledTask
    spec: NodeSpec
    task_id: str
    journal: TaskJournal
    #: True from dispatch until its ``_Done`` is served: a message from a
    #: task that is no longer live is dropped, never misattributed.
    live: bool = True
    outcome: str = "running"  # ok | interrupt | error
    update: dict[str, Any] = attrs.Factory(dict)
    command: Command | None = None
    error: BaseException | None = None
    signal: InterruptSignal | None = None


# --- what workers send the driving thread ---------------------------------------------
# Plain slotted classes, as these are made per message and never compared: an
# attrs class costs ``import ilmek`` half a millisecond to generate.


class _Emit:
    """A task emitted a custom event."""

    __slots__ = ("payload", "task")

    def __init__(self, task: _Task, payload: Any) -> None:
        self.task = task
        self.payload = payload


class _Retry:
    """A task's attempt failed and it runs again."""

    __slots__ = ("attempt", "error", "task")

    def __init__(self, task: _Task, attempt: int, error: BaseException) -> None:
        self.task = task
        self.attempt = attempt
        self.error = error


class _Done:
    """A task finished: its outcome is on the task."""

    __slots__ = ("task",)

    def __init__(self, task: _Task) -> None:
        self.task = task


class _Request:
    """Storage work a worker hands to the driving thread, and waits for."""

    __slots__ = ("done", "error", "work")

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work
        self.done = threading.Event()
        self.error: BaseException | None = None


_Message = _Emit | _Retry | _Done | _Request


class _Finished(Exception):
    """Internal: the run reached its end; carries the final event."""

    def __init__(self, end: RunEnd) -> None:
        super().__init__(end.status)
        self.end = end


class _Run:
    """One run of a graph on a thread; :meth:`events` drives it."""

    def __init__(self, graph: CompiledGraph, mode: _Mode, options: RunOptions) -> None:
        if not isinstance(graph, CompiledGraph):
            raise InvalidArgumentError(
                f"expected a compiled graph, got {type(graph).__name__}; call .compile() on the builder"
            )
        self.graph = graph
        self.schema = graph.schema
        self.mode = mode
        self.options = options
        self.can_pause = options.checkpointer is not None
        if options.checkpointer is None:
            if isinstance(mode, _Resume):
                raise ResumeError(
                    "cannot resume without a checkpointer: the thread has no checkpoint to answer. "
                    "Pass the checkpointer= and thread_id= of the run that paused"
                )
            from .checkpoint.memory import InMemoryCheckpointer

            self.cp: Checkpointer = InMemoryCheckpointer()
        else:
            self.cp = options.checkpointer
        self.thread_id = options.thread_id if options.thread_id is not None else new_random_id()
        # Refused before anything is yielded or written.
        self.input_writes = (
            self.schema.writes_from_input(mode.input, thread_id=self.thread_id)
            if isinstance(mode, _Start) and mode.input is not None
            else None
        )
        self.limit = options.recursion_limit
        self.strict = options.strict
        self.meta = dict(options.meta or {})
        self.cancel = options.cancel if options.cancel is not None else threading.Event()
        self.max_workers = options.max_workers or _DEFAULT_WORKERS
        self.run_id = new_random_id()
        self._seq = 0
        self._queue: queue.SimpleQueue[_Message] = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._hold: Hold | None = None
        self._expect: str | None = None
        self._run_steps = 0
        # Whether a superstep of one task may run it on the driving thread
        # itself, with no hand-off to a worker and back: only when nobody
        # reads the events live (run(), resume()); streams keep every task
        # on a worker so its custom events reach the reader as they happen.
        self.may_run_inline = False
        self._driver: int | None = None
        self._inline = False
        # Asked once the hold is taken, before anything is read: False ends
        # the run with a ConcurrentUpdateError (recover() uses it to run only
        # a thread that is still as it found it).
        self.only_if: Callable[[], bool] | None = None
        # For a resume: the checkpoint whose pauses the caller saw (a page
        # drawn earlier). Another open pause may carry the same ids, so if
        # the thread's latest is any other checkpoint, nothing is answered.
        self.answer_only_at: str | None = None
        # Checkpoints this run committed without inherited journals: nothing
        # can be recorded for their tasks yet, so there is nothing to read.
        self._fresh: set[str] = set()
        # The journals of a pause this run just answered, as the answers'
        # write left them (base id, task key to entries): its first superstep
        # need not read them again.
        self._answered: tuple[str, dict[str, tuple[JournalEntry, ...]]] | None = None

    # --- the stream -------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        """Drive the run, yielding its events as they happen."""
        try:
            # A run that begins by committing its input, or a resume by
            # recording its answers, takes the hold in that write's
            # transaction (one durable write fewer); the others take it
            # before reading anything.
            defer = (
                (isinstance(self.mode, _Resume) or self.input_writes is not None)
                and self.options.checkpoint_id is None
                and self.only_if is None
            )
            holding = self.cp.deferred_hold if defer else self.cp.hold
            with holding(self.thread_id) as hold:
                self._hold = hold
                hold.on_cancel = self._cancel_requested
                try:
                    yield from self._drive(hold)
                finally:
                    self._close()
        except IlmekError as error:
            if error.run_id is None:
                error.run_id = self.run_id
            raise

    def _cancel_requested(self, reason: str) -> None:
        """Another process asked the run to stop (seen by a fenced write or a renewal)."""
        if getattr(self.cancel, "reason", None) is None:
            with contextlib.suppress(AttributeError):
                self.cancel.reason = reason  # type: ignore[attr-defined]
        self.cancel.set()

    def _event(self, cls: type[Event], **fields: Any) -> Event:
        self._seq += 1
        return cls(run_id=self.run_id, thread_id=self.thread_id, seq=self._seq, **fields)

    def _drive(self, hold: Hold) -> Iterator[Event]:
        if self.only_if is not None and not self.only_if():
            raise ConcurrentUpdateError(
                f"thread {self.thread_id!r} changed after it was chosen for this run; nothing was run",
                thread_id=self.thread_id,
            )
        while True:
            latest = self.cp.load(self.thread_id, hold=hold)
            try:
                base = yield from self._start(hold, latest)
                break
            except ConcurrentUpdateError:
                if hold.taken:
                    raise
                # Another run moved the thread between the read and the
                # input's commit, which took nothing: take the hold first,
                # then read again.
                hold.take()
        values = dict(base.channels)
        try:
            while True:
                if not base.next:
                    raise _Finished(self._end("done", base, values))
                if self.cancel.is_set():
                    raise _Finished(self._end("aborted", base, values, abort_reason=self._abort_reason()))
                if self._run_steps >= self.limit:
                    yield self._end("error", base, values)
                    raise RecursionLimitError(
                        f"thread {self.thread_id!r} ran {self.limit} supersteps in this run without "
                        f"finishing (recursion_limit={self.limit}); checkpoint {base.id!r} stands: "
                        "continue with run(g, None, ...) or raise recursion_limit",
                        limit=self.limit,
                        thread_id=self.thread_id,
                        checkpoint_id=base.id,
                    )
                base, values = yield from self._superstep(base, values)
                self._run_steps += 1
        except _Finished as finished:
            yield finished.end

    def _start(self, hold: Hold, latest: Checkpoint | None) -> Generator[Event, None, Checkpoint]:
        """Answer the pause or commit the input: the checkpoint the first superstep runs from."""
        base = latest
        wanted = self.options.checkpoint_id
        fork = wanted is not None and (latest is None or latest.id != wanted)
        if fork:
            base = self.cp.load(self.thread_id, wanted, hold=hold)
            if base is None:
                raise CheckpointNotFoundError(
                    f"thread {self.thread_id!r} has no checkpoint {wanted!r}; "
                    "list its checkpoints with history()",
                    thread_id=self.thread_id,
                    checkpoint_id=wanted,
                )
        self._expect = latest.id if latest is not None else None

        if isinstance(self.mode, _Resume):
            if self.answer_only_at is not None and (latest is None or latest.id != self.answer_only_at):
                # Judged on a read made without the hold; the answers' write
                # confirms under it that the thread is still there.
                raise _MovedOn(
                    f"thread {self.thread_id!r} moved on from checkpoint {self.answer_only_at!r} "
                    f"({_describe(latest)}); nothing was answered. Look at its open pauses again",
                    thread_id=self.thread_id,
                    checkpoint_id=latest.id if latest is not None else None,
                )
            if base is None:
                raise ResumeError(
                    f"cannot resume thread {self.thread_id!r}: it has no checkpoint; start it with run()",
                    thread_id=self.thread_id,
                )
            if not base.pending:
                raise ResumeError(
                    f"thread {self.thread_id!r} is not interrupted ({_describe(base)}); "
                    "start or continue it with run()",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            answers = self._answers_by_id(base)
            if fork:
                base = self._fork(base)
            self._record_answers(base, answers)
            yield self._event(RunStart)
        else:
            if base is not None and base.pending:
                ids = ", ".join(repr(p.id) for p in base.pending)
                raise ResumeError(
                    f"thread {self.thread_id!r} is paused at checkpoint {base.id!r} waiting for "
                    f"{ids}; answer with resume() or resume_keyed() (a plain run would drop the pause)",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            if self.input_writes is not None or base is None or (fork and base.next):
                # Committed before run_start is told, so a run that must read
                # again (its deferred hold lost a race) tells it once.
                base = self._commit_start(base, fork)
                yield self._event(RunStart)
                yield self._event(StateEvent, channels=self.schema.full_values(base.channels))
                yield self._event(CheckpointEvent, id=base.id)
            else:
                yield self._event(RunStart)

        assert base is not None
        return base

    def _abort_reason(self) -> str:
        reason = getattr(self.cancel, "reason", None)
        if reason is None and self._hold is not None:
            reason = self._hold.cancel_reason
        if isinstance(reason, BaseException):
            return str(reason) or type(reason).__name__
        return str(reason) if reason is not None else "aborted"

    def _end(
        self,
        status: str,
        base: Checkpoint | None,
        values: Mapping[str, Any],
        *,
        pending: tuple[Pending, ...] = (),
        errors: tuple[tuple[str, BaseException], ...] = (),
        abort_reason: str | None = None,
    ) -> RunEnd:
        if errors:
            self._record_failure(base, *errors[0])
        end = self._event(
            RunEnd,
            status=status,
            state=self.schema.view(values),
            pending=pending,
            errors=errors,
            abort_reason=abort_reason,
            checkpoint_id=base.id if base is not None else None,
        )
        assert isinstance(end, RunEnd)
        return end

    def _record_failure(self, base: Checkpoint | None, node: str | None, error: BaseException) -> None:
        """Store why the run failed, so the thread reads ``error``; never masks the failure."""
        if self._hold is None or not self.can_pause:
            return
        kind = type(error)
        failure = ThreadError(
            type=kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}",
            message=str(error),
            node=node,
            checkpoint_id=base.id if base is not None else None,
        )
        try:
            self.cp.record_failure(self._hold, failure)
        except Exception as problem:
            logger("ilmek.run").warning(
                "could not record the failure of thread %r: %s",
                self.thread_id,
                problem,
                extra={"thread_id": self.thread_id},
            )

    # --- starting ----------------------------------------------------------------

    def _plan_context(self, state: Any, step_index: int, remaining: int) -> PlanContext:
        return PlanContext(
            graph=self.graph,
            thread_id=self.thread_id,
            run_id=self.run_id,
            step_index=step_index,
            recursion_limit=self.limit,
            remaining_steps=max(remaining, 0),
            state=state,
            meta=self.meta,
            cancel=self.cancel,
        )

    def _commit_start(self, base: Checkpoint | None, fork: bool) -> Checkpoint:
        """Commit the run's input (or a fork's first checkpoint) before any node runs.

        On a thread whose latest checkpoint still plans tasks (a crash, a
        node error, the recursion limit), the input is folded in and that
        plan continues, its recorded steps inherited; otherwise the graph
        starts again at START.
        """
        writes = self.input_writes or {}
        values, changes = self.schema.fold(
            base.channels if base is not None else {}, [(None, writes)], thread_id=self.thread_id
        )
        step = base.step if base is not None else 0
        checkpoint_id = new_checkpoint_id(after=self._expect)
        if base is not None and base.next:
            tasks: tuple[ScheduledTask, ...] = base.next
            plan_id = base.plan_id
            chain: tuple[str, ...] = (*base.journal_chain, base.id)
        else:
            view = self.schema.view(values)
            names, sends = self.graph.targets(START, None, view, self._plan_context(view, step, self.limit))
            tasks = self.graph.schedule(names, sends)
            plan_id = checkpoint_id
            chain = ()
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id if base is not None else None,
            plan_id=plan_id,
            channels=values,
            next=tasks,
            journal_chain=chain,
            step=step,
            metadata=self._metadata("fork" if fork and self.input_writes is None else "input"),
        )
        self._commit(checkpoint, changes, fresh=not chain, last=not tasks)
        return checkpoint

    def _fork(self, pause: Checkpoint) -> Checkpoint:
        """A new branch from an old pause: its first checkpoint copies the pause.

        It inherits what the paused superstep recorded before the pause, but
        not the answers (or anything after them) of the branches that were
        already resumed from that pause: this branch answers afresh.
        """
        checkpoint_id = new_checkpoint_id(after=self._expect)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=pause.id,
            plan_id=pause.plan_id,
            channels=pause.channels,
            next=pause.next,
            pending=tuple(
                attrs.evolve(p, task_id=task_id_for(self.thread_id, checkpoint_id, p.task_key))
                for p in pause.pending
            ),
            journal_chain=pause.journal_chain,
            task_journals=pause.task_journals,
            step=pause.step,
            metadata=self._metadata("fork"),
        )
        self._commit(checkpoint, {})
        return checkpoint

    def _metadata(self, source: str, **more: Any) -> dict[str, Any]:
        return {"source": source, "run_id": self.run_id, "graph": self.graph.name, **more}

    def _commit(
        self,
        checkpoint: Checkpoint,
        changes: Mapping[str, ChannelChange],
        *,
        drop_journals: Sequence[str] = (),
        journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None = None,
        fresh: bool = False,
        last: bool = False,
    ) -> None:
        self.cp.commit(
            self.thread_id,
            checkpoint,
            changes=changes,
            expect_latest=self._expect,
            hold=self._hold,
            drop_journals=drop_journals,
            journal=journal,
            # The run's last write (a pause, a plan with nothing left) gives
            # the hold back in the same transaction.
            release_hold=last,
        )
        self._expect = checkpoint.id
        if fresh:
            self._fresh.add(checkpoint.id)

    # --- answering pauses ---------------------------------------------------------

    def _answers_by_id(self, base: Checkpoint) -> dict[str, Any]:
        """Each open pause's answer, checked before anything is recorded."""
        assert isinstance(self.mode, _Resume)
        pending = base.pending
        expected = ", ".join(repr(p.id) for p in pending)
        if self.mode.keyed:
            answers = self.mode.answers
            if not isinstance(answers, Mapping):
                raise ResumeError(
                    f"resume_keyed() takes a dict of pause id to answer, got "
                    f"{type(answers).__name__} (thread {self.thread_id!r}); expected ids: {expected}",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            missing = [p.id for p in pending if p.id not in answers]
            if missing:
                raise ResumeError(
                    f"thread {self.thread_id!r} waits for {len(pending)} answer(s); no answer supplied for "
                    f"{', '.join(map(repr, missing))} (expected ids: {expected}). Nothing was recorded: "
                    "answer every open pause, by id, in one resume_keyed() call",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            by_id = {p.id: answers[p.id] for p in pending}
        else:
            if len(pending) != 1:
                raise ResumeError(
                    f"{len(pending)} interrupts are pending on thread {self.thread_id!r} ({expected}), so a "
                    "bare answer is ambiguous; answer each by id with resume_keyed(g, {id: answer, ...})",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            by_id = {pending[0].id: self.mode.answers}
        for pause_id, answer in by_id.items():
            serde.encode(answer, where=f"the answer to {pause_id!r}")
        return by_id

    def _record_answers(self, base: Checkpoint, by_id: Mapping[str, Any]) -> None:
        assert self._hold is not None
        keys = list(dict.fromkeys([*(t.task_key for t in base.next), *(p.task_key for p in base.pending)]))
        journals = self.cp.load_journals(base, keys, hold=self._hold)
        answers: dict[str, list[JournalEntry]] = {}
        for pause in base.pending:
            key = pause.task_key
            answer = by_id[pause.id]
            # Compare in JSON space: that is what a stored answer comes back as.
            canonical = serde.decode(serde.encode(answer, where=f"the answer to {pause.id!r}"))
            recorded = next((e for e in journals.get(key, ()) if e.key == pause.key), None)
            if recorded is not None and recorded.answered and recorded.value != canonical:
                if not self._hold.taken:
                    # Read without the hold: another resume may have answered
                    # it and moved on since. Judge again under the hold.
                    raise ConcurrentUpdateError(
                        f"pause {pause.id!r} of thread {self.thread_id!r} was answered meanwhile",
                        thread_id=self.thread_id,
                        checkpoint_id=base.id,
                    )
                raise ResumeError(
                    f"pause {pause.id!r} of thread {self.thread_id!r} was already answered with "
                    f"{recorded.value!r} by a resume that did not finish; steps after the pause "
                    "may have acted on it. Resume with that same answer, or fork from an earlier "
                    "checkpoint with checkpoint_id=",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            answers.setdefault(key, []).append(
                JournalEntry(
                    key=pause.key, kind="interrupt", payload=pause.payload, value=answer, answered=True
                )
            )
        from_pause = self.cp.record_answers(self._hold, base.id, answers)
        if from_pause is not None:
            # What the read found, then what is recorded from the pause itself
            # now (the answers' write refused anything recorded from it since
            # the read): the journals a read would find, in its order.
            self._answered = (
                base.id,
                {key: journal_view(journals.get(key, ()), [from_pause.get(key, ())]) for key in keys},
            )

    # --- supersteps ---------------------------------------------------------------

    def _superstep(
        self, base: Checkpoint, values: dict[str, Any]
    ) -> Generator[Event, None, tuple[Checkpoint, dict[str, Any]]]:
        assert self._hold is not None
        step = base.step
        tasks = base.next
        keys = [t.task_key for t in tasks]
        yield self._event(StepStart, step=step, tasks=tuple(keys))
        answered, self._answered = self._answered, None
        if answered is not None and answered[0] == base.id:
            stored = answered[1]
        elif base.id in self._fresh:
            stored = {}
        else:
            stored = self.cp.load_journals(base, keys, hold=self._hold)
        view = self.schema.view(values)
        runs: list[_Task] = []
        for task in tasks:
            spec = self.graph.nodes.get(task.node)
            if spec is None:
                raise ResumeError(
                    f"checkpoint {base.id!r} of thread {self.thread_id!r} schedules node "
                    f"{task.node!r}, which graph {self.graph.name!r} does not have; run it with "
                    "the graph that wrote it, or fork from another checkpoint",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            task_id = task_id_for(self.thread_id, base.id, task.task_key)
            journal = TaskJournal(
                task_id, stored.get(task.task_key, ()), self._persister(base.id, task.task_key)
            )
            runs.append(_Task(task=task, spec=spec, task_id=task_id, journal=journal))
        self._driver = threading.get_ident()
        contexts = []
        for task_run in runs:
            state = task_run.task.input if task_run.task.is_send else _task_copy(view)
            ctx = NodeContext(
                node=task_run.spec.name,
                task_id=task_run.task_id,
                journal=task_run.journal,
                emit=_emitter(self._queue, task_run),
                verify=self._verify,
                can_pause=self.can_pause,
                strict=self.strict,
                graph=self.graph,
                thread_id=self.thread_id,
                run_id=self.run_id,
                step_index=step,
                recursion_limit=self.limit,
                remaining_steps=max(self.limit - self._run_steps, 0),
                state=state,
                meta=self.meta,
                cancel=self.cancel,
            )
            contexts.append((task_run, state, ctx))
        if self._runs_inline(runs):
            ((task_run, state, ctx),) = contexts
            yield self._event(NodeStart, node=task_run.spec.name, task_id=task_run.task_id)
            self._inline = True
            try:
                self._attempts(task_run, state, ctx)
            except Exception as error:
                task_run.outcome, task_run.error = "error", error
            finally:
                self._inline = False
            self._queue.put(_Done(task_run))
        else:
            pool = self._workers()
            for task_run, state, ctx in contexts:
                pool.submit(self._task_body, task_run, state, ctx)
            # Every task starts now, however slowly the stream is read; what they
            # emit meanwhile waits in the queue until their node_start was yielded.
            for task_run in runs:
                yield self._event(NodeStart, node=task_run.spec.name, task_id=task_run.task_id)
        yield from self._collect(runs)

        if self._hold.lost or any(isinstance(r.error, HoldLostError) for r in runs):
            raise self._hold.mark_lost("a write of this superstep was refused")
        errors = tuple((r.spec.name, r.error) for r in runs if r.outcome == "error" and r.error is not None)
        if errors:
            raise _Finished(self._end("error", base, values, errors=errors))
        if any(r.outcome == "interrupt" for r in runs):
            yield from self._pause(base, values, runs)
        new_values, changes = yield from self._reduce(base, values, runs)
        next_tasks = self._plan(base, new_values, runs, step + 1)
        checkpoint_id = new_checkpoint_id(after=self._expect)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id,
            plan_id=checkpoint_id,
            channels=new_values,
            next=next_tasks,
            step=step + 1,
            metadata=self._metadata("loop", tasks=keys),
        )
        # The superstep ended: what its tasks recorded from this base is spent,
        # except under a pause, whose answers stay readable with it.
        # (A task with an empty journal has no rows to drop.)
        spent = [] if base.pending else [r.task_id for r in runs if r.journal.entries()]
        self._commit(checkpoint, changes, drop_journals=spent, fresh=True, last=not next_tasks)
        yield self._event(StateEvent, channels=self.schema.full_values(new_values))
        yield self._event(CheckpointEvent, id=checkpoint.id)
        return checkpoint, new_values

    def _reduce(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[_Task]
    ) -> Generator[Event, None, tuple[dict[str, Any], dict[str, ChannelChange]]]:
        try:
            return self.schema.fold(values, [(r.spec.name, r.update) for r in runs], thread_id=self.thread_id)
        except ReducerError as error:
            node = error.node or "?"
            yield self._event(NodeError, node=node, error=error, task_id=_task_id_of(runs, node))
            raise _Finished(self._end("error", base, values, errors=((node, error),))) from error

    def _plan(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[_Task], step: int
    ) -> tuple[ScheduledTask, ...]:
        view = self.schema.view(values)
        ctx = self._plan_context(view, step, self.limit - self._run_steps - 1)
        names: set[str] = set()
        sends = []
        for task_run in runs:
            try:
                more_names, more_sends = self.graph.targets(task_run.spec.name, task_run.command, view, ctx)
            except BaseException as error:
                # Routers and guards are graph code, not a task: as in the
                # reference their failure ends the run by raising. The thread
                # keeps its planned tasks and what they recorded.
                self._record_failure(base, task_run.spec.name, error)
                raise
            names |= more_names
            sends.extend(more_sends)
        return self.graph.schedule(names, sends)

    def _pause(self, base: Checkpoint, values: dict[str, Any], runs: Sequence[_Task]) -> Iterator[Event]:
        checkpoint_id = new_checkpoint_id(after=self._expect)
        paused = [r for r in runs if r.outcome == "interrupt" and r.signal is not None]
        pending = tuple(
            Pending(
                id=f"{r.task.task_key}:{r.signal.key}",
                task_id=task_id_for(self.thread_id, checkpoint_id, r.task.task_key),
                node=r.spec.name,
                key=r.signal.key,
                payload=r.signal.payload,
            )
            for r in paused
            if r.signal is not None
        )
        # The open pauses join the journal of the superstep, so a fork from
        # before the pause meets them (and a step reusing their key is caught).
        opened = {
            r.task.task_key: [e for e in r.journal.entries() if e.kind == "interrupt" and not e.answered]
            for r in paused
        }
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id,
            plan_id=base.plan_id,
            channels=values,
            next=base.next,
            pending=pending,
            journal_chain=(*base.journal_chain, base.id),
            step=base.step,
            metadata=self._metadata("pause"),
        )
        self._commit(checkpoint, {}, journal=(base.id, opened), last=True)
        yield self._event(CheckpointEvent, id=checkpoint.id)
        yield self._event(InterruptEvent, pending=pending)
        raise _Finished(self._end("interrupted", checkpoint, values, pending=pending))

    # --- tasks ------------------------------------------------------------------

    def _runs_inline(self, runs: Sequence[_Task]) -> bool:
        """Whether this superstep's one task runs on the driving thread.

        Only when the run allows it (``may_run_inline``: run() or resume(),
        not inside a Django atomic block), and only when the hold's storage
        may be used from any thread: the keeper renews the hold while the driver is
        busy with the node, and steps recorded from threads the node starts
        are written from those threads (nobody is free to serve them). A
        Ctrl-C in such a node stops the program, as on the driving thread.
        """
        hold = self._hold
        return self.may_run_inline and len(runs) == 1 and hold is not None and hold.any_thread

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # Imported on first use: a run whose supersteps each have one task
            # never needs it, and ``import ilmek`` is 3 ms shorter without it.
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(
                max_workers=self.max_workers, thread_name_prefix=f"ilmek-{self.graph.name}"
            )
        return self._pool

    def _keep_hold(self) -> None:
        """Renew the hold when due, wherever the driver waits; a loss is seen at the next write."""
        assert self._hold is not None
        try:
            self._hold.renew_if_due()
        except IlmekError as error:
            logger("ilmek.run").warning(
                "could not renew the hold on %r: %s",
                self.thread_id,
                error,
                extra={"thread_id": self.thread_id},
            )

    def _collect(self, runs: Sequence[_Task]) -> Iterator[Event]:
        """Serve the workers until every task is done, yielding events live."""
        assert self._hold is not None
        remaining = len(runs)
        while remaining:
            try:
                message: _Message | None = self._queue.get(timeout=self._hold.seconds_until_renewal())
            except queue.Empty:
                message = None
            self._keep_hold()
            if message is None:
                continue
            if isinstance(message, _Request):
                self._serve(message)
            elif isinstance(message, _Done):
                remaining -= 1
                task_run = message.task
                task_run.live = False
                if task_run.outcome == "ok":
                    yield self._event(
                        NodeEnd, node=task_run.spec.name, update=task_run.update, task_id=task_run.task_id
                    )
                elif task_run.outcome == "error":
                    yield self._event(
                        NodeError, node=task_run.spec.name, error=task_run.error, task_id=task_run.task_id
                    )
            elif not message.task.live:
                logger("ilmek.run").info(
                    "dropped a %s from task %r, which is no longer running",
                    "custom event" if isinstance(message, _Emit) else "retry notice",
                    message.task.task_id,
                    extra={"thread_id": self.thread_id},
                )
            elif isinstance(message, _Emit):
                yield self._event(
                    CustomEvent,
                    payload=message.payload,
                    node=message.task.spec.name,
                    task_id=message.task.task_id,
                )
            else:
                yield self._event(
                    NodeRetry,
                    node=message.task.spec.name,
                    attempt=message.attempt,
                    error=message.error,
                    task_id=message.task.task_id,
                )

    def _serve(self, request: _Request) -> None:
        """Do a worker's storage work on the driving thread."""
        try:
            request.work()
        except Exception as error:  # handed to the worker that asked
            request.error = error
        except BaseException:
            # Ctrl-C or SystemExit on the driving thread stops the program,
            # not just the node that happened to be waiting.
            request.error = _RunClosed(
                f"the run of thread {self.thread_id!r} was interrupted; step not recorded",
                thread_id=self.thread_id,
            )
            request.done.set()
            raise
        request.done.set()

    def _persister(self, base_id: str, task_key: str) -> Callable[[JournalEntry], None]:
        def persist(entry: JournalEntry) -> None:
            assert self._hold is not None
            hold = self._hold
            self._ask_driver(lambda: self.cp.append_journal(hold, base_id, task_key, entry))

        return persist

    def _verify(self) -> None:
        """Called on a worker before a step's effect: is the run open, and the thread still ours?"""
        if self._closed:
            raise _RunClosed(
                f"the run of thread {self.thread_id!r} was closed; step not run", thread_id=self.thread_id
            )
        hold = self._hold
        assert hold is not None
        if hold.lost:
            hold.verify()
        if hold.must_confirm():
            self._ask_driver(hold.verify)

    def _ask_driver(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the driving thread (the only one that touches storage) and wait."""
        if self._inline or threading.get_ident() == self._driver:
            # A task running inline (on the driving thread, or on a thread it
            # started): nobody else would serve the request.
            if self._closed:
                raise _RunClosed(
                    f"the run of thread {self.thread_id!r} was closed; step not recorded",
                    thread_id=self.thread_id,
                )
            work()
            return
        request = _Request(work)
        with self._close_lock:
            if self._closed:
                raise _RunClosed(
                    f"the run of thread {self.thread_id!r} was closed; step not recorded",
                    thread_id=self.thread_id,
                )
            self._queue.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error

    def _task_body(self, task_run: _Task, state: Any, ctx: NodeContext) -> None:
        """Runs on a worker: the node's attempts, then a ``_Done`` message."""
        try:
            self._attempts(task_run, state, ctx)
        except BaseException as error:  # the driving thread reports it
            task_run.outcome, task_run.error = "error", error
        self._queue.put(_Done(task_run))

    def _attempts(self, task_run: _Task, state: Any, ctx: NodeContext) -> None:
        policy = task_run.spec.retry
        attempt = 1
        while True:
            task_run.journal.begin_attempt()
            ctx._begin_attempt()
            try:
                value = task_run.spec.body(state, ctx)
                self._check_replay(task_run)
            except InterruptSignal as signal:
                task_run.outcome, task_run.signal = "interrupt", signal
                return
            except (HoldLostError, _RunClosed) as error:
                task_run.outcome, task_run.error = "error", error
                return
            except Exception as error:
                if policy is not None and not self.cancel.is_set() and policy.should_retry(attempt, error):
                    self._queue.put(_Retry(task_run, attempt + 1, error))
                    if self.cancel.wait(policy.delay(attempt)):
                        # Cancelled while waiting to retry: the node failed with its last error.
                        task_run.outcome, task_run.error = "error", error
                        return
                    attempt += 1
                    continue
                task_run.outcome, task_run.error = "error", error
                return
            break
        try:
            task_run.update, task_run.command = self._update_of(task_run.spec.name, value)
        except IlmekError as error:
            task_run.outcome, task_run.error = "error", error
            return
        task_run.outcome = "ok"

    def _check_replay(self, task_run: _Task) -> None:
        """After a body returned: no swallowed pause, and (strict) no vanished journal key."""
        swallowed = task_run.journal.open_pauses()
        if swallowed:
            raise NondeterminismError(
                f"node {task_run.spec.name!r} returned although its pause {swallowed[0]!r} has no answer "
                f"(thread {self.thread_id!r}): it caught the InterruptSignal. Let InterruptSignal "
                "propagate (catch Exception, not BaseException)",
                key=swallowed[0],
                node=task_run.spec.name,
                thread_id=self.thread_id,
            )
        if self.strict:
            vanished = task_run.journal.unrequested()
            if vanished:
                raise NondeterminismError(
                    f"node {task_run.spec.name!r} finished without asking for journal key(s) "
                    f"{', '.join(map(repr, vanished))}, which an earlier pass recorded (thread "
                    f"{self.thread_id!r}, task {task_run.task_id!r}): a side effect escaped ctx.step, or "
                    "the node branches on something outside its state and journal (the node must be "
                    "deterministic apart from its steps)",
                    key=vanished[0],
                    keys=tuple(vanished),
                    node=task_run.spec.name,
                    thread_id=self.thread_id,
                )

    def _update_of(self, node: str, value: Any) -> tuple[dict[str, Any], Command | None]:
        command: Command | None = None
        if value is None:
            update: Mapping[str, Any] = {}
        elif isinstance(value, Command):
            command = value
            update = value.update or {}
        elif isinstance(value, Mapping):
            update = value
        else:
            raise ReducerError(
                f"node {node!r} returned {type(value).__name__}; return a dict of channel writes, "
                f"None, or command(...) (thread {self.thread_id!r})",
                node=node,
                thread_id=self.thread_id,
            )
        if not isinstance(update, Mapping):
            raise ReducerError(
                f"node {node!r} returned a command whose update is {type(update).__name__}, "
                f"not a dict (thread {self.thread_id!r})",
                node=node,
                thread_id=self.thread_id,
            )
        self.schema.check_writes(update, who=f"node {node!r}", thread_id=self.thread_id, node=node)
        for channel, written in update.items():
            # A value that could not be stored fails its node here, not the commit.
            serde.encode(written, where=f"the write of node {node!r} to channel {channel!r}")
        return dict(update), command

    def _close(self) -> None:
        """Refuse further writes, record what is already waiting, and let the workers go."""
        with self._close_lock:
            self._closed = True
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(message, _Request):
                # A step that finished before the stream was abandoned already
                # had its effect: record it rather than lose the record.
                self._serve(message)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _emitter(messages: queue.SimpleQueue[_Message], task_run: _Task) -> Callable[[Any], None]:
    def emit(payload: Any) -> None:
        messages.put(_Emit(task_run, payload))

    return emit


def _task_id_of(runs: Sequence[_Task], node: str) -> str:
    return next((r.task_id for r in runs if r.spec.name == node), "")


def _task_copy(view: Any) -> Any:
    # Each task gets its own top-level container, so one task rebinding a key
    # cannot leak into a sibling; values inside are shared and must not be mutated.
    if type(view) is dict:
        return dict(view)
    return copy.copy(view)


def _describe(checkpoint: Checkpoint | None) -> str:
    if checkpoint is None:
        return "it has no checkpoints"
    return f"it is {checkpoint.status} at checkpoint {checkpoint.id!r}"


# --- the public entry points ----------------------------------------------------------


def _caller_in_django_transaction() -> bool:
    """Whether the calling thread has a Django ``atomic`` block open (Django imported or not)."""
    django_db = sys.modules.get("django.db")
    if django_db is None:
        return False
    try:
        return any(
            connection.in_atomic_block for connection in django_db.connections.all(initialized_only=True)
        )
    except Exception as error:
        # Imported but never configured: no connection, so no atomic block.
        # Any other failure (an older Django): do not guess.
        exceptions = sys.modules.get("django.core.exceptions")
        return exceptions is None or not isinstance(error, exceptions.ImproperlyConfigured)


def _collect_result(graph: CompiledGraph, the_run: _Run) -> Result:
    # A node run on the caller's thread would share its thread-bound state:
    # inside a Django atomic block, a step's ORM writes would join the
    # caller's transaction (and vanish with its rollback) while the step's
    # record, written by ilmek, stays. Such runs keep every task on a worker.
    the_run.may_run_inline = not _caller_in_django_transaction()
    events = list(the_run.events())
    end = events[-1]
    assert isinstance(end, RunEnd)
    return Result(
        status=end.status,  # type: ignore[arg-type]
        # As in the reference: the state of a run that finished; a paused,
        # failed or aborted run's thread is read with thread_state().
        state=end.state if end.status == "done" else None,
        pending=end.pending,
        errors=end.errors,
        abort_reason=end.abort_reason,
        thread_id=the_run.thread_id,
        run_id=the_run.run_id,
        checkpoint_id=end.checkpoint_id,
        events=tuple(events),
        graph_name=graph.name,
    )


def stream(
    graph: CompiledGraph,
    input: Any = None,  # noqa: A002 - the spec's name
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int = DEFAULT_RECURSION_LIMIT,
    strict: bool = True,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
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
    )
    return _Run(graph, _Start(input), options).events()


def run(
    graph: CompiledGraph,
    input: Any = None,  # noqa: A002 - the spec's name
    *,
    thread_id: str | None = None,
    checkpointer: Checkpointer | None = None,
    checkpoint_id: str | None = None,
    recursion_limit: int = DEFAULT_RECURSION_LIMIT,
    strict: bool = True,
    meta: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
) -> Result:
    """Run a graph on a thread until it finishes, pauses, fails or is cancelled.

    Args:
        graph: A compiled graph.
        input: A partial update folded through the channels' reducers and
            committed before any node runs. On a thread whose last run did
            not finish (planned tasks left by a crash, a node error or the
            recursion limit) the run then continues that plan, replaying
            every recorded step; otherwise it starts at ``START``. ``None``
            continues the thread where it stopped.
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one the run keeps them
            in memory and cannot pause.
        checkpoint_id: Start from this checkpoint instead of the latest; if it
            is not the latest, the run forks a new branch.
        recursion_limit: The most supersteps this run may take.
        strict: Raise :class:`NondeterminismError` when a replayed task skips a
            journal key.
        meta: Free-form values nodes read as ``ctx.meta``.
        cancel: A ``threading.Event``; once set, the run stops at the next
            superstep boundary with status ``aborted``.
        max_workers: Threads for a superstep's tasks.

    Returns:
        The :class:`Result`. A node's failure is ``status="error"``, never raised.

    Raises:
        InvalidArgumentError: a bad argument, an undeclared input channel, or a
            ``thread_id`` without a checkpointer (before any node runs).
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
    )
    return _collect_result(graph, _Run(graph, _Start(input), options))


def _resume_run(graph: CompiledGraph, answers: Any, keyed: bool, options: Mapping[str, Any]) -> _Run:
    return _Run(graph, _Resume(answers, keyed), RunOptions.of(options))


def resume(graph: CompiledGraph, answer: Any, **options: Any) -> Result:
    """Answer the thread's one open pause and run on; options as for :func:`run`.

    Raises:
        ResumeError: the thread is not paused, or has more than one open pause
            (use :func:`resume_keyed`), or the pause was already answered
            differently by a resume that did not finish.
    """
    return _collect_result(graph, _resume_run(graph, answer, False, options))


def resume_keyed(graph: CompiledGraph, answers: Mapping[str, Any], **options: Any) -> Result:
    """Answer open pauses by their ``id`` and run on; options as for :func:`run`.

    Every open pause must be answered; answers for ids that are not open are
    ignored. Nothing is recorded unless every pause is answered.
    """
    return _collect_result(graph, _resume_run(graph, answers, True, options))


def resume_stream(graph: CompiledGraph, answer: Any, **options: Any) -> Iterator[Event]:
    """:func:`resume`, yielding events as they happen."""
    return _resume_run(graph, answer, False, options).events()


def resume_keyed_stream(graph: CompiledGraph, answers: Mapping[str, Any], **options: Any) -> Iterator[Event]:
    """:func:`resume_keyed`, yielding events as they happen."""
    return _resume_run(graph, answers, True, options).events()
