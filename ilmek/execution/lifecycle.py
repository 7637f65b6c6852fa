"""One run, from its start to its end: hold the thread, start, resume or fork, loop, end.

:class:`Run` is what :mod:`ilmek.engine` builds from a call; its
:meth:`Run.events` holds the thread and drives the run, yielding its events.
Starting means answering the pause (a resume), committing the input (a run
with input, or a fork's first checkpoint) before any node runs, or simply
continuing the thread's plan. Then supersteps follow until the plan is
empty, a pause, a failure, a cancel or the recursion limit ends the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from typing import Any, NoReturn

import attrs

from .. import process_drain as draining
from .. import tracing
from ..checkpoint.holds import Hold
from ..errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    IlmekError,
    InvalidArgumentError,
    RecursionLimitError,
    ResumeError,
    SubgraphError,
)
from ..events import CheckpointEvent, Event, RunEnd, RunStart, StateEvent
from ..graph import START, CompiledGraph
from ..journals import inherited_journals
from ..namespaces import is_child_thread
from ..types import Checkpoint, Pending, ScheduledTask, task_id_for
from . import exiting
from .answers import Resume, answers_by_id, record_answers
from .keeping import HoldKeeper
from .position import ThreadPosition
from .setup import EventStamper, RunOptions, RunSetup
from .superstep import RunEnds, Superstep, plan_context
from .tasks import INLINE_IF_ONE, SERIAL, WORKERS, Placement, TaskRunner
from .telemetry import RunTelemetry

__all__ = ["MovedOn", "Run", "Start"]


class Start:
    """A run that starts from input (``None``: continue the thread)."""

    __slots__ = ("input",)

    def __init__(self, input: Any) -> None:  # noqa: A002 -- the name run() gives it
        self.input = input


Mode = Start | Resume


MovedOn = ResumeError
"""What a run limited to the checkpoint its caller saw raises when the thread is elsewhere (a plain
:class:`ResumeError`, as the reference raises for a pause that is not open; kept for older imports)."""


class _Finished(Exception):
    """Internal: the run reached its end; carries the final event."""

    def __init__(self, end: RunEnd) -> None:
        super().__init__(end.status)
        self.end = end


class Run:
    """One run of a graph on a thread; :meth:`events` drives it.

    Attributes:
        may_run_inline: Whether nobody reads the events live (run(),
            resume()): then a superstep of one task may run it on the driving
            thread itself, with no hand-off to a worker and back; streams keep
            every task on a worker so its custom events reach the reader as
            they happen. The checkpointer has the last word
            (``Checkpointer.tasks_on_caller_thread``).
        only_if: Asked once the hold is taken, before anything is read:
            False ends the run with a ConcurrentUpdateError (recover() uses
            it to run only a thread that is still as it found it).
        answer_only_at: The checkpoint the caller saw
            (``RunOptions.expect_checkpoint_id``): for a resume, the pause it
            answers. Another open pause may carry the same ids, so if the
            thread's latest is any other checkpoint, nothing is answered.
    """

    def __init__(self, graph: CompiledGraph, mode: Mode, options: RunOptions, *, child: bool = False) -> None:
        self.setup = RunSetup.of(graph, options, resuming=isinstance(mode, Resume))
        if not child and is_child_thread(self.setup.thread_id):
            raise InvalidArgumentError(
                f"thread id {self.setup.thread_id!r} holds U+001F, which ilmek reserves for the threads of "
                "subgraphs; choose a thread id without it"
            )
        self.mode = mode
        # Refused before anything is yielded or written.
        self.input_writes = (
            self.setup.schema.writes_from_input(mode.input, thread_id=self.setup.thread_id)
            if isinstance(mode, Start) and mode.input is not None
            else None
        )
        self.may_run_inline = False
        self.only_if: Callable[[Hold], bool] | None = None
        self.answer_only_at: str | None = options.expect_checkpoint_id
        self._event = EventStamper(self.setup.run_id, self.setup.thread_id)
        #: The run's log records and span, from the moment it starts driving.
        self.telemetry: RunTelemetry | None = None

    @property
    def thread_id(self) -> str:
        return self.setup.thread_id

    @property
    def run_id(self) -> str:
        return self.setup.run_id

    def events(self) -> Iterator[Event]:
        """Drive the run, yielding its events as they happen (closed at exit if still open)."""
        return exiting.watch(self._events())

    def _events(self) -> Generator[Event, None, None]:
        setup = self.setup
        draining.refuse_if_draining(setup.thread_id)
        telemetry = self.telemetry = RunTelemetry(setup, "resume" if isinstance(self.mode, Resume) else "run")
        try:
            # Every statement the run sends on the reader's thread belongs to its span.
            yield from tracing.within(telemetry.span, self._held())
        except IlmekError as error:
            if error.run_id is None:
                error.run_id = setup.run_id
            telemetry.raised(error)
            raise
        except GeneratorExit:
            telemetry.closed()
            raise
        except BaseException as error:
            telemetry.raised(error)
            raise

    def _held(self) -> Generator[Event, None, None]:
        """The run under its thread's hold, given back however it ends."""
        setup = self.setup
        # A run that begins by committing its input, or a resume by
        # recording its answers, takes the hold in that write's
        # transaction (one durable write fewer); the others take it
        # before reading anything.
        defer = (
            (isinstance(self.mode, Resume) or self.input_writes is not None)
            and setup.options.checkpoint_id is None
            and self.only_if is None
        )
        cp = setup.checkpointer
        holding = cp.deferred_hold if defer else cp.hold
        with contextlib.ExitStack() as holding_it:
            hold = holding_it.enter_context(holding(setup.thread_id))
            driving = _Driving(self, hold)
            try:
                yield from driving.drive()
            finally:
                driving.let_go(holding_it)


@attrs.define(eq=False)
class _Driving:
    """One driving of a :class:`Run`, with the collaborators that share its hold."""

    run: Run
    hold: Hold
    keeper: HoldKeeper = attrs.field(init=False)
    position: ThreadPosition = attrs.field(init=False)
    runner: TaskRunner = attrs.field(init=False)
    superstep: Superstep = attrs.field(init=False)
    steps_taken: int = 0
    #: The checkpoint the run must start from (the caller's, or the pause a resume first read).
    answer_only_at: str | None = attrs.field(init=False)
    #: Where the tasks run (see ilmek.execution.tasks), decided once, on the driving thread.
    placement: Placement = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        setup, event = self.run.setup, self.run._event
        self.answer_only_at = self.run.answer_only_at
        self.placement = _placement(setup.checkpointer.tasks_on_caller_thread, self.run.may_run_inline)
        self.keeper = HoldKeeper(setup, self.hold)
        self.position = ThreadPosition(setup, self.hold)
        self.runner = TaskRunner(setup, self.keeper, event)
        telemetry = self.run.telemetry
        self.superstep = Superstep(
            setup,
            self.position,
            self.runner,
            self.keeper,
            event,
            run_span=telemetry.span if telemetry is not None else None,
        )

    @property
    def setup(self) -> RunSetup:
        return self.run.setup

    def let_go(self, holding: contextlib.ExitStack) -> None:
        """The run is over, however it ended: stop its tasks, then give the thread back.

        The thread is given back only once no step function of the run is
        running and each one's record is written. The end waits for them
        (and keeps the hold meanwhile); where the hold can be kept without
        this thread, it waits one lease at most, then leaves the hold kept
        and ``holding`` (which gives it back) to the last running step, so
        a closed stream returns promptly. Only a wait interrupted on a hold
        bound to this thread (a second Ctrl-C) leaves the hold to lapse.
        Giving back never raises over the run's own outcome.
        """
        stopped = False
        try:
            stopped = self.runner.close(wait_seconds=self.keeper.close_wait())
        finally:
            # Interrupted while waiting (a second Ctrl-C) counts as still running.
            if self.keeper.let_go(stopped=stopped):
                self.runner.when_idle(holding.pop_all().close)

    def drive(self) -> Iterator[Event]:
        setup, hold = self.setup, self.hold
        only_if = self.run.only_if
        if only_if is not None and not only_if(hold):
            raise ConcurrentUpdateError(
                f"thread {setup.thread_id!r} changed after it was chosen for this run; nothing was run",
                thread_id=setup.thread_id,
            )
        guess = self._guess()
        while True:
            latest = guess if guess is not None else setup.checkpointer.load(setup.thread_id, hold=hold)
            try:
                # A guess's values are new objects, the run's own: its input extends its lists in place.
                base = yield from self._start(latest, owned=guess is not None)
                break
            except ConcurrentUpdateError:
                if hold.taken:
                    raise
                if guess is not None:
                    # The thread moved since this process last wrote it: read it as any run does.
                    guess = None
                    continue
                # Another run moved the thread between the read and the
                # input's commit (or the answers' write), which took nothing:
                # take the hold first, then read again. A resume still answers
                # only the pause it read: a thread that moved on since (another
                # resume answered that pause) is refused, never answered anew.
                if isinstance(self.run.mode, Resume) and self.answer_only_at is None and latest is not None:
                    self.answer_only_at = latest.id
                hold.take()
        values = dict(base.channels)
        try:
            while True:
                base, values = yield from self._next(base, values)
        except _Finished as finished:
            yield finished.end

    def _guess(self) -> Checkpoint | None:
        """The thread's latest checkpoint as this process last committed it, for a run that commits input.

        Its first write, conditioned on the thread still being there, takes
        the hold: one round trip fewer than reading first. Only where the hold
        is still to be taken, which :meth:`Run._held` decides: a run with
        input or a resume, never a fork or a tick's run; and of those, not a
        resume or a run that must start from a checkpoint its caller saw.
        """
        if not isinstance(self.run.mode, Start) or self.hold.taken or self.answer_only_at is not None:
            return None
        return self.setup.checkpointer._remembered_latest(self.setup.thread_id)

    def _next(
        self, base: Checkpoint, values: dict[str, Any]
    ) -> Generator[Event, None, tuple[Checkpoint, dict[str, Any]]]:
        """The superstep after ``base``, or the run's end (raising ``_Finished``)."""
        setup = self.setup
        if not base.next:
            raise _Finished(self._end("done", base, values))
        if setup.cancel.is_set() or draining.draining():
            self._abort(base, values)
        if self.steps_taken >= setup.limit:
            limit_error = RecursionLimitError(
                f"thread {setup.thread_id!r} ran {setup.limit} supersteps in this run without "
                f"finishing (recursion_limit={setup.limit}); checkpoint {base.id!r} stands: "
                "continue with run(g, None, ...) or raise recursion_limit",
                limit=setup.limit,
                thread_id=setup.thread_id,
                checkpoint_id=base.id,
            )
            # Recorded on the thread, so it says why it stopped (not like a process that died).
            self.position.record_failure(base, None, limit_error)
            yield self._end("error", base, values)
            raise limit_error
        try:
            base, values = yield from self.superstep.run(
                base, values, steps_taken=self.steps_taken, placement=self.placement
            )
        except RunEnds as ends:
            if ends.errors and all(_stopped_child(error) for _, error in ends.errors):
                # Its subgraphs stopped for the cancel (or drain) the run itself heard.
                self._abort(ends.base, ends.values)
            raise _Finished(
                self._end(
                    ends.status,
                    ends.base,
                    ends.values,
                    pending=ends.pending,
                    errors=ends.errors,
                    failed_tasks=ends.failed_tasks,
                )
            ) from None
        self.steps_taken += 1
        return base, values

    def _abort(self, base: Checkpoint, values: Any) -> NoReturn:
        """End the run ``aborted`` at ``base``, by cancel or by the process's drain."""
        setup = self.setup
        # The process's drain stops its runs where a cancel does, under its own reason.
        reason = self.keeper.abort_reason() if setup.cancel.is_set() else draining.DRAIN_REASON
        self.position.record_cancel(base, reason)
        raise _Finished(self._end("aborted", base, values, abort_reason=reason))

    def _start(self, latest: Checkpoint | None, *, owned: bool = False) -> Generator[Event, None, Checkpoint]:
        """Answer the pause or commit the input: the checkpoint the first superstep runs from.

        ``owned``: nobody else holds ``latest``'s values (see :meth:`_commit_start`).
        """
        setup, event = self.setup, self.run._event
        base = latest
        wanted = setup.options.checkpoint_id
        fork = wanted is not None and (latest is None or latest.id != wanted)
        if fork:
            base = setup.checkpointer.load(setup.thread_id, wanted, hold=self.hold)
            if base is None:
                raise CheckpointNotFoundError(
                    f"thread {setup.thread_id!r} has no checkpoint {wanted!r}; "
                    "list its checkpoints with history()",
                    thread_id=setup.thread_id,
                    checkpoint_id=wanted,
                )
        self.position.expect = latest.id if latest is not None else None
        mode = self.run.mode
        if not isinstance(mode, Resume):
            self._check_expected(latest, answering=False)
        if isinstance(mode, Resume):
            base = self._answer(mode, latest, base, fork)
            yield event(RunStart)
        else:
            if base is not None and base.pending:
                ids = ", ".join(repr(p.id) for p in base.pending)
                raise ResumeError(
                    f"thread {setup.thread_id!r} is interrupted at checkpoint {base.id!r}, waiting for an "
                    f"answer to {ids}; answer with resume() or resume_keyed() (a plain run would drop "
                    "the pause)",
                    thread_id=setup.thread_id,
                    checkpoint_id=base.id,
                )
            if self.run.input_writes is not None or base is None or (fork and base.next):
                # Committed before run_start is told, so a run that must read
                # again (its deferred hold lost a race) tells it once.
                base = self._commit_start(base, fork, owned=owned and not fork)
                yield event(RunStart)
                yield event(StateEvent, channels=setup.schema.full_values(base.channels))
                yield event(CheckpointEvent, id=base.id)
            else:
                yield event(RunStart)
        assert base is not None
        return base

    def _answer(
        self, mode: Resume, latest: Checkpoint | None, base: Checkpoint | None, fork: bool
    ) -> Checkpoint:
        """A resume's start: check and record the answers; the pause (or its fork) to run from."""
        setup = self.setup
        self._check_expected(latest, answering=True)
        if base is None:
            raise ResumeError(
                f"cannot resume thread {setup.thread_id!r}: it has no checkpoint; start it with run()",
                thread_id=setup.thread_id,
            )
        if not base.pending:
            raise ResumeError(
                f"thread {setup.thread_id!r} is not interrupted ({_describe(base)}); "
                "start or continue it with run()",
                thread_id=setup.thread_id,
                checkpoint_id=base.id,
            )
        answers = answers_by_id(setup, mode, base)
        if fork:
            base = self._fork(base)
        record_answers(setup, self.position, self.hold, base, answers, mode.by)
        return base

    def _check_expected(self, latest: Checkpoint | None, *, answering: bool) -> None:
        """Refuse a run whose caller saw another checkpoint than the thread's latest.

        Judged on a read made without the hold; the run's first write
        confirms under it that the thread is still there. A thread never
        moves back to a checkpoint it left, so a refusal is final.
        """
        expected = self.answer_only_at
        if expected is None or (latest is not None and latest.id == expected):
            return
        thread_id = self.setup.thread_id
        fork_from = self.setup.options.checkpoint_id
        if fork_from is not None and fork_from != expected:
            what = (
                f"thread {thread_id!r} moved on from checkpoint {expected!r} ({_describe(latest)}): a fork "
                f"from {fork_from!r} was made already, or another run came first; nothing was run again. "
                "Look at the thread's latest checkpoint"
            )
        elif answering:
            what = (
                f"the pause at checkpoint {expected!r} of thread {thread_id!r} is not open any more "
                f"({_describe(latest)}): it was already answered, or the thread moved on; nothing was "
                "answered. Look at the thread's open pauses again"
            )
        else:
            what = (
                f"thread {thread_id!r} moved on from checkpoint {expected!r} ({_describe(latest)}); "
                "nothing was run. Look at the thread again"
            )
        raise ResumeError(what, thread_id=thread_id, checkpoint_id=latest.id if latest is not None else None)

    def _commit_start(self, base: Checkpoint | None, fork: bool, *, owned: bool = False) -> Checkpoint:
        """Commit the run's input (or a fork's first checkpoint) before any node runs.

        On a thread whose latest checkpoint still plans tasks (a crash, a
        node error, the recursion limit), the input is folded in and that
        plan continues, its recorded steps inherited; otherwise the graph
        starts again at START. ``owned``: ``base``'s values are the run's
        alone, so the input extends its lists instead of copying them.
        """
        setup, position = self.setup, self.position
        input_writes = self.run.input_writes
        values, changes = setup.schema.fold(
            base.channels if base is not None else {},
            [(None, input_writes or {})],
            thread_id=setup.thread_id,
            owned=owned,
        )
        step = base.step if base is not None else 0
        checkpoint_id = position.next_id()
        inherited = inherited_journals(base, fork=fork)
        if base is not None and base.next:
            tasks: tuple[ScheduledTask, ...] = base.next
            plan_id = base.plan_id
        else:
            view = setup.schema.view(values)
            names, sends = setup.graph.targets(
                START, None, view, plan_context(setup, view, step, setup.limit)
            )
            tasks = setup.graph.schedule(names, sends)
            plan_id = checkpoint_id
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=setup.thread_id,
            parent_id=base.id if base is not None else None,
            plan_id=plan_id,
            channels=values,
            next=tasks,
            task_journals=inherited.task_journals,
            journal_chain=inherited.journal_chain,
            step=step,
            metadata=position.metadata("fork" if fork and input_writes is None else "input"),
        )
        position.commit(checkpoint, changes, fresh=inherited.empty, last=not tasks)
        return checkpoint

    def _fork(self, pause: Checkpoint) -> Checkpoint:
        """A new branch from an old pause: its first checkpoint copies the pause.

        It inherits what the paused superstep recorded before the pause, but
        not the answers (or anything after them) of the branches that were
        already resumed from that pause: this branch answers afresh.
        """
        setup, position = self.setup, self.position
        checkpoint_id = position.next_id()
        inherited = inherited_journals(pause, fork=True)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=setup.thread_id,
            parent_id=pause.id,
            plan_id=pause.plan_id,
            channels=pause.channels,
            next=pause.next,
            pending=tuple(
                attrs.evolve(p, task_id=task_id_for(setup.thread_id, checkpoint_id, p.task_key))
                for p in pause.pending
            ),
            task_journals=inherited.task_journals,
            journal_chain=inherited.journal_chain,
            step=pause.step,
            metadata=position.metadata("fork"),
        )
        position.commit(checkpoint, {})
        return checkpoint

    def _end(
        self,
        status: str,
        base: Checkpoint | None,
        values: Any,
        *,
        pending: tuple[Pending, ...] = (),
        errors: tuple[tuple[str, BaseException], ...] = (),
        failed_tasks: tuple[str, ...] = (),
        abort_reason: str | None = None,
    ) -> RunEnd:
        if errors:
            self.position.record_failure(base, *errors[0], tasks=failed_tasks)
        end = self.run._event(
            RunEnd,
            status=status,
            state=self.setup.schema.view(values),
            pending=pending,
            errors=errors,
            abort_reason=abort_reason,
            checkpoint_id=base.id if base is not None else None,
        )
        assert isinstance(end, RunEnd)
        if self.run.telemetry is not None:
            self.run.telemetry.ended(end)
        return end


def _placement(policy: bool | None, no_live_reader: bool) -> Placement:
    """Where the tasks run: the checkpointer's policy first, then whether a reader wants events live."""
    if policy is True:
        return SERIAL
    if policy is False or not no_live_reader:
        return WORKERS
    return INLINE_IF_ONE


def _stopped_child(error: BaseException) -> bool:
    """Whether ``error`` is a subgraph that stopped (not failed): a cancel or drain reached it."""
    return isinstance(error, SubgraphError) and error.node is None


def _describe(checkpoint: Checkpoint | None) -> str:
    if checkpoint is None:
        return "it has no checkpoints"
    return f"it is {checkpoint.status} at checkpoint {checkpoint.id!r}"
