"""Running a graph: supersteps on a thread pool, journaled steps, pauses and forks.

A run holds its thread, loads the checkpoint it starts from, and loops:
plan (already recorded in the checkpoint's ``next``), run the tasks in
parallel, fold their writes in task order, commit a checkpoint. Everything
the run writes goes through the thread that drives it (the caller's):
workers hand their journal writes to it and wait, so a caller's database
connection is only ever used from the caller's thread, and a run that was
abandoned can write nothing more.

The engine talks only to the :class:`~ilmek.checkpoint.base.Checkpointer`
port; it never imports a concrete backend except the in-memory one it uses
when no checkpointer is given.
"""

from __future__ import annotations

import copy
import os
import queue
import threading
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from . import serde
from .checkpoint.base import Checkpointer, ThreadHold
from .context import NodeContext, PlanContext, TaskJournal
from .control import Command
from .errors import (
    CheckpointNotFoundError,
    IlmekError,
    InterruptSignal,
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
from .types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    Pending,
    Result,
    ScheduledTask,
    new_checkpoint_id,
    split_task_id,
    task_id_for,
)

__all__ = [
    "DEFAULT_RECURSION_LIMIT",
    "resume",
    "resume_keyed",
    "resume_keyed_stream",
    "resume_stream",
    "run",
    "stream",
]

DEFAULT_RECURSION_LIMIT = 25


@attrs.frozen
class _Start:
    input: Any


@attrs.frozen
class _Resume:
    answers: Any
    keyed: bool


_Mode = _Start | _Resume


class _RunClosed(IlmekError):
    """The run was closed (its stream abandoned); nothing more is written."""


class _Request:
    """A write a worker hands to the driving thread, and waits for."""

    __slots__ = ("done", "error", "fn")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.error: BaseException | None = None


@attrs.define
class _TaskRun:
    """One task of the superstep being run."""

    index: int
    task: ScheduledTask
    spec: NodeSpec
    task_id: str
    journal: TaskJournal
    outcome: str = "running"  # ok | interrupt | error | cancelled
    update: dict[str, Any] = attrs.Factory(dict)
    command: Command | None = None
    error: BaseException | None = None
    signal: InterruptSignal | None = None


class _Finished(Exception):
    """Internal: the run reached its end; carries the final event."""

    def __init__(self, end: RunEnd) -> None:
        super().__init__(end.status)
        self.end = end


class _Run:
    """One run of a graph on a thread; :meth:`events` drives it."""

    def __init__(
        self,
        graph: CompiledGraph,
        mode: _Mode,
        *,
        thread_id: str | None,
        checkpointer: Checkpointer | None,
        checkpoint_id: str | None,
        recursion_limit: int,
        strict: bool,
        meta: Mapping[str, Any] | None,
        cancel: threading.Event | None,
        max_workers: int | None,
    ) -> None:
        if not isinstance(graph, CompiledGraph):
            raise TypeError(
                f"expected a compiled graph, got {type(graph).__name__}; call .compile() on the builder"
            )
        if checkpointer is not None and thread_id is None:
            raise ValueError("a checkpointer needs a thread_id: pass thread_id=...")
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id or "\0" in thread_id):
            raise ValueError(f"a thread_id is a non-empty string without NUL, got {thread_id!r}")
        if recursion_limit < 1:
            raise ValueError(f"recursion_limit must be at least 1, got {recursion_limit}")
        if checkpointer is None:
            from .checkpoint.memory import InMemoryCheckpointer

            checkpointer = InMemoryCheckpointer()
        self.graph = graph
        self.schema = graph.schema
        self.mode = mode
        self.cp = checkpointer
        self.thread_id = thread_id if thread_id is not None else uuid.uuid4().hex
        self.checkpoint_id = checkpoint_id
        self.limit = recursion_limit
        self.strict = strict
        self.meta = dict(meta or {})
        self.cancel = cancel if cancel is not None else threading.Event()
        self.max_workers = max_workers or min(32, (os.cpu_count() or 1) + 4)
        self.run_id = uuid.uuid4().hex
        self._seq = 0
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._hold: ThreadHold | None = None
        self._expect: str | None = None
        self._run_steps = 0
        # Checkpoints this run committed: no journal can exist for their tasks
        # yet (the run holds the thread), so there is nothing to look up.
        self._committed: set[str] = set()

    # --- the stream -------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        """Drive the run, yielding its events as they happen."""
        with self.cp.hold(self.thread_id) as hold:
            self._hold = hold
            try:
                yield from self._drive()
            finally:
                self._close()

    def _event(self, cls: type[Event], **fields: Any) -> Event:
        self._seq += 1
        return cls(run_id=self.run_id, thread_id=self.thread_id, seq=self._seq, **fields)

    def _drive(self) -> Iterator[Event]:
        latest = self.cp.get(self.thread_id)
        base = latest
        if self.checkpoint_id is not None and (latest is None or latest.id != self.checkpoint_id):
            base = self.cp.get(self.thread_id, self.checkpoint_id)
            if base is None:
                raise CheckpointNotFoundError(
                    f"thread {self.thread_id!r} has no checkpoint {self.checkpoint_id!r}; "
                    "list its checkpoints with history()",
                    thread_id=self.thread_id,
                    checkpoint_id=self.checkpoint_id,
                )
        self._expect = latest.id if latest is not None else None
        values: dict[str, Any] = dict(base.channels) if base is not None else {}

        if isinstance(self.mode, _Resume):
            if base is None or not base.pending:
                raise ResumeError(
                    f"thread {self.thread_id!r} is not waiting for an answer "
                    f"({_describe(base)}); start or continue it with run()",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id if base is not None else None,
                )
            self._record_answers(base)
            yield self._event(RunStart)
        else:
            start_input = self.mode.input
            if base is not None and base.pending:
                ids = ", ".join(p.id for p in base.pending)
                raise ResumeError(
                    f"thread {self.thread_id!r} is paused at checkpoint {base.id!r} waiting for "
                    f"{ids}; answer with resume() or resume_keyed() (a plain run would drop the pause)",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            yield self._event(RunStart)
            if start_input is not None or base is None:
                try:
                    base, values = self._commit_input(base, values, start_input or {})
                except _Finished as finished:
                    yield finished.end
                    return
                yield self._event(StateEvent, channels=self.schema.full_values(values))
                yield self._event(CheckpointEvent, id=base.id)

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
                self._run_steps += 1
                base, values = yield from self._superstep(base, values)
        except _Finished as finished:
            yield finished.end

    def _abort_reason(self) -> str:
        return str(getattr(self.cancel, "reason", None) or "the cancel event was set")

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

    # --- starting ----------------------------------------------------------------

    def _plan_context(self, state: Any, step_index: int) -> PlanContext:
        return PlanContext(
            graph=self.graph,
            thread_id=self.thread_id,
            run_id=self.run_id,
            step_index=step_index,
            recursion_limit=self.limit,
            remaining_steps=max(self.limit - self._run_steps, 0),
            state=state,
            meta=self.meta,
            cancel=self.cancel,
        )

    def _commit_input(
        self, base: Checkpoint | None, values: dict[str, Any], update: Any
    ) -> tuple[Checkpoint, dict[str, Any]]:
        writes = self.schema.writes_from_input(update, thread_id=self.thread_id)
        values, changes = self.schema.fold(values, [(None, writes)], thread_id=self.thread_id)
        step = base.step + 1 if base is not None else 0
        view = self.schema.view(values)
        try:
            names, sends = self.graph.targets(START, None, view, self._plan_context(view, step))
        except Exception as error:
            raise _Finished(self._end("error", base, values, errors=((START, error),))) from error
        checkpoint_id = new_checkpoint_id(after=self._expect)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id if base is not None else None,
            plan_id=checkpoint_id,
            channels=values,
            next=self.graph.schedule(names, sends),
            step=step,
            metadata=self._metadata("input"),
        )
        self._commit(checkpoint, changes, ())
        return checkpoint, values

    def _metadata(self, source: str, **more: Any) -> dict[str, Any]:
        return {"source": source, "run_id": self.run_id, "graph": self.graph.name, **more}

    def _commit(
        self,
        checkpoint: Checkpoint,
        changes: Mapping[str, ChannelChange],
        drop_journals: Sequence[str],
    ) -> None:
        self.cp.commit(
            self.thread_id,
            checkpoint,
            changes=changes,
            expect_latest=self._expect,
            drop_journals=drop_journals,
            # A pause or a finished plan is the run's last write: the hold can
            # go back in the same transaction.
            release_hold=bool(checkpoint.pending) or not checkpoint.next,
        )
        self._expect = checkpoint.id
        self._committed.add(checkpoint.id)

    # --- answering pauses ---------------------------------------------------------

    def _record_answers(self, base: Checkpoint) -> None:
        assert isinstance(self.mode, _Resume)
        pending = base.pending
        if self.mode.keyed:
            answers = self.mode.answers
            if not isinstance(answers, Mapping):
                raise ResumeError(
                    f"resume_keyed() takes a dict of pause id to answer, got "
                    f"{type(answers).__name__} (thread {self.thread_id!r})",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            missing = [p.id for p in pending if p.id not in answers]
            if missing:
                raise ResumeError(
                    f"thread {self.thread_id!r} waits for {len(pending)} answers; missing "
                    f"{', '.join(map(repr, missing))}. Nothing was recorded: answer every open "
                    "pause in one resume_keyed() call",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            by_id = {p.id: answers[p.id] for p in pending}
        else:
            if len(pending) != 1:
                raise ResumeError(
                    f"thread {self.thread_id!r} has {len(pending)} open pauses "
                    f"({', '.join(repr(p.id) for p in pending)}); a bare answer is only for one. "
                    "Answer each by id with resume_keyed(g, {id: answer, ...})",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            by_id = {pending[0].id: self.mode.answers}

        task_ids = list(dict.fromkeys(p.task_id for p in pending))
        stored = self.cp.get_journals(task_ids)
        journals: dict[str, dict[str, JournalEntry]] = {}
        for task_id in task_ids:
            task_key = split_task_id(task_id)[2]
            entries = stored.get(task_id) or base.task_journals.get(task_key, ())
            journals[task_id] = {e.key: e for e in entries}
        for pause in pending:
            answer = by_id[pause.id]
            # Compare in JSON space: that is what a stored answer comes back as.
            canonical = serde.decode(serde.encode(answer, where=f"the answer to {pause.id!r}"))
            journal = journals[pause.task_id]
            recorded = journal.get(pause.key)
            if recorded is not None and recorded.answered and recorded.value != canonical:
                raise ResumeError(
                    f"pause {pause.id!r} of thread {self.thread_id!r} was already answered with "
                    f"{recorded.value!r} by a resume that did not finish; steps after the pause "
                    "may have acted on it. Resume with that same answer, or fork from an earlier "
                    "checkpoint with checkpoint_id=",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            journal[pause.key] = JournalEntry(
                key=pause.key, kind="interrupt", payload=pause.payload, value=answer, answered=True
            )
        self.cp.put_journals({task_id: tuple(e.values()) for task_id, e in journals.items()})

    # --- supersteps ---------------------------------------------------------------

    def _superstep(
        self, base: Checkpoint, values: dict[str, Any]
    ) -> Generator[Event, None, tuple[Checkpoint, dict[str, Any]]]:
        step = base.step + 1
        tasks = base.next
        yield self._event(StepStart, step=step, tasks=tuple(t.task_key for t in tasks))
        task_ids = [task_id_for(self.thread_id, base.id, t.task_key) for t in tasks]
        stored = {} if base.id in self._committed else self.cp.get_journals(task_ids)
        view = self.schema.view(values)
        runs: list[_TaskRun] = []
        for index, task in enumerate(tasks):
            spec = self.graph.nodes.get(task.node)
            if spec is None:
                raise ResumeError(
                    f"checkpoint {base.id!r} of thread {self.thread_id!r} schedules node "
                    f"{task.node!r}, which graph {self.graph.name!r} does not have; run it with "
                    "the graph that wrote it, or fork from another checkpoint",
                    thread_id=self.thread_id,
                    checkpoint_id=base.id,
                )
            entries = stored.get(task_ids[index]) or base.task_journals.get(task.task_key, ())
            journal = TaskJournal(task_ids[index], entries, self._persist)
            journal.stored = task_ids[index] in stored
            runs.append(_TaskRun(index=index, task=task, spec=spec, task_id=task_ids[index], journal=journal))
        pool = self._workers()
        for task_run in runs:
            state = task_run.task.input if task_run.task.is_send else _task_copy(view)
            ctx = NodeContext(
                node=task_run.spec.name,
                task_id=task_run.task_id,
                journal=task_run.journal,
                emit=_emitter(self._queue, task_run.index),
                verify=self._verify_hold
                if self._hold is not None and self._hold.verifies
                else self._check_open,
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
            pool.submit(self._task_body, task_run, state, ctx)
        # Every task starts now, however slowly the stream is read; what they
        # emit meanwhile waits in the queue until their node_start was yielded.
        for task_run in runs:
            yield self._event(NodeStart, node=task_run.spec.name, task_id=task_run.task_id)
        yield from self._collect(runs)

        errors = tuple((r.spec.name, r.error) for r in runs if r.outcome == "error" and r.error)
        if errors:
            raise _Finished(self._end("error", base, values, errors=errors))
        if any(r.outcome == "cancelled" for r in runs):
            # A task gave up its retries because the run was cancelled: nothing
            # of this superstep is kept but its journals, as at any boundary.
            raise _Finished(self._end("aborted", base, values, abort_reason=self._abort_reason()))
        # Only journals that exist need dropping: most supersteps have none left.
        superseded = [r.task_id for r in runs if r.journal.stored]
        if any(r.outcome == "interrupt" for r in runs):
            yield from self._pause(base, values, runs, superseded)
        new_values, changes = self._reduce(base, values, runs)
        next_tasks = self._plan(base, new_values, runs, step)
        checkpoint_id = new_checkpoint_id(after=self._expect)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id,
            plan_id=checkpoint_id,
            channels=new_values,
            next=next_tasks,
            step=step,
            metadata=self._metadata("loop", tasks=[r.task.task_key for r in runs]),
        )
        self._commit(checkpoint, changes, superseded)
        yield self._event(StateEvent, channels=self.schema.full_values(new_values))
        yield self._event(CheckpointEvent, id=checkpoint.id)
        return checkpoint, new_values

    def _reduce(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[_TaskRun]
    ) -> tuple[dict[str, Any], dict[str, ChannelChange]]:
        try:
            return self.schema.fold(values, [(r.spec.name, r.update) for r in runs], thread_id=self.thread_id)
        except ReducerError as error:
            raise _Finished(self._end("error", base, values, errors=((error.node or "?", error),))) from error

    def _plan(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[_TaskRun], step: int
    ) -> tuple[ScheduledTask, ...]:
        view = self.schema.view(values)
        ctx = self._plan_context(view, step)
        names: set[str] = set()
        sends = []
        for task_run in runs:
            try:
                more_names, more_sends = self.graph.targets(task_run.spec.name, task_run.command, view, ctx)
            except Exception as error:
                raise _Finished(
                    self._end("error", base, values, errors=((task_run.spec.name, error),))
                ) from error
            names |= more_names
            sends.extend(more_sends)
        return self.graph.schedule(names, sends)

    def _pause(
        self,
        base: Checkpoint,
        values: dict[str, Any],
        runs: Sequence[_TaskRun],
        superseded: Sequence[str],
    ) -> Iterator[Event]:
        checkpoint_id = new_checkpoint_id(after=self._expect)
        pending = tuple(
            Pending(
                id=f"{r.task.task_key}:{r.signal.key}",
                task_id=task_id_for(self.thread_id, checkpoint_id, r.task.task_key),
                node=r.spec.name,
                key=r.signal.key,
                payload=r.signal.payload,
            )
            for r in runs
            if r.outcome == "interrupt" and r.signal is not None
        )
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=self.thread_id,
            parent_id=base.id,
            plan_id=base.plan_id,
            channels=values,
            next=base.next,
            pending=pending,
            task_journals={r.task.task_key: r.journal.entries() for r in runs if r.journal.entries()},
            step=base.step,
            metadata=self._metadata("pause"),
        )
        self._commit(checkpoint, {}, superseded)
        yield self._event(CheckpointEvent, id=checkpoint.id)
        yield self._event(InterruptEvent, pending=pending)
        raise _Finished(self._end("interrupted", checkpoint, values, pending=pending))

    # --- tasks ------------------------------------------------------------------

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.max_workers, thread_name_prefix=f"ilmek-{self.graph.name}"
            )
        return self._pool

    def _collect(self, runs: Sequence[_TaskRun]) -> Iterator[Event]:
        """Serve the workers until every task is done, yielding events live."""
        remaining = len(runs)
        interval = self._hold.keep_alive_interval if self._hold is not None else None
        while remaining:
            try:
                message = self._queue.get(timeout=interval)
            except queue.Empty:
                assert self._hold is not None
                self._hold.keep_alive()
                continue
            kind = message[0]
            if kind == "persist":
                request: _Request = message[1]
                try:
                    request.fn()
                except BaseException as error:  # handed to the worker that asked
                    request.error = error
                request.done.set()
            elif kind == "emit":
                task_run = runs[message[1]]
                yield self._event(
                    CustomEvent, payload=message[2], node=task_run.spec.name, task_id=task_run.task_id
                )
            elif kind == "retry":
                task_run = runs[message[1]]
                yield self._event(
                    NodeRetry,
                    node=task_run.spec.name,
                    attempt=message[2],
                    error=message[3],
                    task_id=task_run.task_id,
                )
            elif kind == "done":
                remaining -= 1
                task_run = message[1]
                if task_run.outcome == "ok":
                    yield self._event(
                        NodeEnd, node=task_run.spec.name, update=task_run.update, task_id=task_run.task_id
                    )
                elif task_run.outcome == "error":
                    yield self._event(
                        NodeError, node=task_run.spec.name, error=task_run.error, task_id=task_run.task_id
                    )

    def _persist(self, task_id: str, entries: tuple[JournalEntry, ...]) -> None:
        """Called on a worker: have the driving thread store a journal, and wait."""
        self._ask_driver(lambda: self.cp.put_journal(task_id, entries))

    def _check_open(self) -> None:
        """Called on a worker before a step's effect: a closed run starts no new effect."""
        if self._closed:
            raise _RunClosed(
                f"the run of thread {self.thread_id!r} was closed; step not run",
                thread_id=self.thread_id,
            )

    def _verify_hold(self) -> None:
        """Called on a worker before a step's effect: is the thread still ours?"""
        assert self._hold is not None
        self._ask_driver(self._hold.verify)

    def _ask_driver(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the driving thread (the only one that touches storage) and wait."""
        request = _Request(work)
        with self._close_lock:
            if self._closed:
                raise _RunClosed(
                    f"the run of thread {self.thread_id!r} was closed; step not recorded",
                    thread_id=self.thread_id,
                )
            self._queue.put(("persist", request))
        request.done.wait()
        if request.error is not None:
            raise request.error

    def _task_body(self, task_run: _TaskRun, state: Any, ctx: NodeContext) -> None:
        """Runs on a worker: the node's attempts, then a ``done`` message."""
        try:
            self._attempts(task_run, state, ctx)
        except BaseException as error:  # the driving thread reports it
            task_run.outcome, task_run.error = "error", error
        self._queue.put(("done", task_run))

    def _attempts(self, task_run: _TaskRun, state: Any, ctx: NodeContext) -> None:
        policy = task_run.spec.retry
        attempt = 1
        while True:
            task_run.journal.begin_attempt()
            try:
                value = task_run.spec.body(state, ctx)
            except InterruptSignal as signal:
                task_run.outcome, task_run.signal = "interrupt", signal
                return
            except NondeterminismError as error:
                task_run.outcome, task_run.error = "error", error
                return
            except Exception as error:
                if policy is not None and not self.cancel.is_set() and policy.should_retry(attempt, error):
                    self._queue.put(("retry", task_run.index, attempt, error))
                    if self.cancel.wait(policy.delay(attempt)):
                        task_run.outcome, task_run.error = "cancelled", error
                        return
                    attempt += 1
                    continue
                task_run.outcome, task_run.error = "error", error
                return
            break
        swallowed = task_run.journal.open_pause()
        if swallowed is not None:
            task_run.outcome = "error"
            task_run.error = NondeterminismError(
                f"node {task_run.spec.name!r} returned although its pause {swallowed!r} has no answer "
                f"(thread {self.thread_id!r}): it caught the InterruptSignal. Let InterruptSignal "
                "propagate (catch Exception, not BaseException)",
                key=swallowed,
                node=task_run.spec.name,
                thread_id=self.thread_id,
            )
            return
        if self.strict:
            vanished = task_run.journal.unrequested()
            if vanished:
                task_run.outcome = "error"
                task_run.error = NondeterminismError(
                    f"node {task_run.spec.name!r} finished without asking for journal key "
                    f"{vanished[0]!r}, which an earlier pass recorded (thread {self.thread_id!r}, "
                    f"task {task_run.task_id!r}): a side effect escaped ctx.step, or the node "
                    "branches on something outside its state and journal",
                    key=vanished[0],
                    node=task_run.spec.name,
                    thread_id=self.thread_id,
                )
                return
        try:
            task_run.update, task_run.command = self._update_of(task_run.spec.name, value)
        except ReducerError as error:
            task_run.outcome, task_run.error = "error", error
            return
        task_run.outcome = "ok"

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
        return dict(update), command

    def _close(self) -> None:
        """Refuse further writes, fail any still waiting, and let the workers go."""
        with self._close_lock:
            self._closed = True
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                break
            if message[0] == "persist":
                message[1].error = _RunClosed(
                    f"the run of thread {self.thread_id!r} was closed; step not recorded",
                    thread_id=self.thread_id,
                )
                message[1].done.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _emitter(messages: queue.SimpleQueue[tuple[Any, ...]], index: int) -> Callable[[Any], None]:
    def emit(payload: Any) -> None:
        messages.put(("emit", index, payload))

    return emit


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


def _collect_result(graph: CompiledGraph, run: _Run) -> Result:
    events = list(run.events())
    end = events[-1]
    assert isinstance(end, RunEnd)
    return Result(
        status=end.status,  # type: ignore[arg-type]
        state=end.state,
        pending=end.pending,
        errors=end.errors,
        abort_reason=end.abort_reason,
        thread_id=run.thread_id,
        run_id=run.run_id,
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

    The run starts when the first event is requested and holds its thread
    until the iterator is exhausted or closed.
    """
    return _Run(
        graph,
        _Start(input),
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
    ).events()


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
            committed before any node runs; the run then starts at ``START``.
            ``None`` continues the thread where it stopped (replaying the
            steps its unfinished superstep recorded).
        thread_id: The thread; required with a checkpointer.
        checkpointer: Where checkpoints live; without one the run keeps them
            in memory and cannot be resumed later.
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
        The :class:`Result`.

    Raises:
        ResumeError: the thread is paused (answer it with :func:`resume`).
        ThreadBusyError: another run holds the thread.
        RecursionLimitError: the run took ``recursion_limit`` supersteps.
        CheckpointNotFoundError: ``checkpoint_id`` is not the thread's.
        ConcurrentUpdateError: another writer moved the thread on meanwhile.
    """
    the_run = _Run(
        graph,
        _Start(input),
        thread_id=thread_id,
        checkpointer=checkpointer,
        checkpoint_id=checkpoint_id,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        cancel=cancel,
        max_workers=max_workers,
    )
    return _collect_result(graph, the_run)


def _resume_run(graph: CompiledGraph, answers: Any, keyed: bool, options: dict[str, Any]) -> _Run:
    return _Run(graph, _Resume(answers, keyed), **_with_defaults(options))


def _with_defaults(options: dict[str, Any]) -> dict[str, Any]:
    allowed = {
        "thread_id": None,
        "checkpointer": None,
        "checkpoint_id": None,
        "recursion_limit": DEFAULT_RECURSION_LIMIT,
        "strict": True,
        "meta": None,
        "cancel": None,
        "max_workers": None,
    }
    unknown = set(options) - set(allowed)
    if unknown:
        raise TypeError(f"unexpected keyword argument {sorted(unknown)[0]!r}")
    return {**allowed, **options}


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
