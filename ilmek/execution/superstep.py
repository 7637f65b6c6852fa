"""One superstep: the tasks a checkpoint plans run together, their writes fold, the next one commits.

:meth:`Superstep.run` reads the journals the tasks replay from, gives each
task its context, has the :class:`~ilmek.execution.tasks.TaskRunner` run
them, then either ends the run (a node failed: :class:`RunEnds`), pauses it
(a task asked a person: the pause checkpoint, then :class:`RunEnds`), or
folds the writes in task order, plans what follows and commits the next
checkpoint.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from .. import tracing
from ..checkpoint.holds import HoldLostError
from ..context import NodeContext, PlanContext, TaskJournal
from ..errors import ReducerError, ResumeError
from ..events import CheckpointEvent, Event, InterruptEvent, NodeError, StateEvent, StepStart
from ..journals import inherited_journals
from ..notices import deliver, outbox_notices
from ..types import ChannelChange, Checkpoint, JournalEntry, Pending, ScheduledTask, task_id_for
from .children import ChildHost, surfaced_pauses
from .keeping import HoldKeeper
from .messages import TaskRun
from .position import ThreadPosition
from .setup import EventStamper, RunSetup
from .tasks import WORKERS, Placement, TaskRunner

__all__ = ["RunEnds", "Superstep", "plan_context"]


class RunEnds(Exception):
    """Internal: the superstep ended the run (a node failed, or a pause): how it ends."""

    def __init__(
        self,
        status: str,
        base: Checkpoint,
        values: Mapping[str, Any],
        *,
        pending: tuple[Pending, ...] = (),
        errors: tuple[tuple[str, BaseException], ...] = (),
        failed_tasks: tuple[str, ...] = (),
    ) -> None:
        super().__init__(status)
        self.status = status
        self.base = base
        self.values = values
        self.pending = pending
        self.errors = errors
        self.failed_tasks = failed_tasks


def plan_context(setup: RunSetup, state: Any, step_index: int, remaining: int) -> PlanContext:
    """What guards and routers see when they plan from ``state``."""
    return PlanContext(
        graph=setup.graph,
        thread_id=setup.thread_id,
        run_id=setup.run_id,
        step_index=step_index,
        recursion_limit=setup.limit,
        remaining_steps=max(remaining, 0),
        state=state,
        meta=setup.meta,
        cancel=setup.cancel,
    )


class Superstep:
    """Runs a run's supersteps, one call of :meth:`run` each."""

    def __init__(
        self,
        setup: RunSetup,
        position: ThreadPosition,
        runner: TaskRunner,
        keeper: HoldKeeper,
        event: EventStamper,
        *,
        run_span: Any | None = None,
    ) -> None:
        self._setup = setup
        #: The run's span, parent of each superstep's (see ilmek.tracing); the superstep's own while it runs.
        self._run_span = run_span
        self._span: Any | None = None
        self._position = position
        self._runner = runner
        self._keeper = keeper
        self._event = event

    def run(
        self, base: Checkpoint, values: dict[str, Any], *, steps_taken: int, placement: Placement
    ) -> Generator[Event, None, tuple[Checkpoint, dict[str, Any]]]:
        """Run the superstep ``base`` plans; returns the next checkpoint and its values.

        Raises:
            RunEnds: a node failed, or the superstep paused.
        """
        span = self._span = tracing.child(
            "ilmek.superstep",
            self._run_span,
            {"ilmek.step": base.step, "ilmek.checkpoint_id": base.id, "ilmek.tasks": len(base.next)},
        )
        try:
            return (yield from self._run(base, values, steps_taken=steps_taken, placement=placement))
        except RunEnds as ends:
            if ends.errors:
                node, error = ends.errors[0]
                tracing.record_error(span, error, f"node {node!r} failed: {type(error).__name__}: {error}")
            raise
        except GeneratorExit:
            raise
        except BaseException as error:
            tracing.record_error(span, error)
            raise
        finally:
            self._span = None
            tracing.end(span)

    def _run(
        self, base: Checkpoint, values: dict[str, Any], *, steps_taken: int, placement: Placement
    ) -> Generator[Event, None, tuple[Checkpoint, dict[str, Any]]]:
        setup = self._setup
        step = base.step
        keys = [t.task_key for t in base.next]
        yield self._event(StepStart, step=step, tasks=tuple(keys))
        runs = self._task_runs(base, keys)
        contexts = self._contexts(base, values, runs, steps_taken, placement)
        yield from self._runner.run(contexts, placement=placement)

        hold = self._keeper.hold
        if hold.lost or any(isinstance(r.error, HoldLostError) for r in runs):
            raise hold.mark_lost("a write of this superstep was refused")
        storage = next((r.error for r in runs if r.outcome == "storage" and r.error is not None), None)
        if storage is not None:
            # The database failed the run, not a node: the thread stays as a
            # crash leaves it (its planned tasks, every step recorded so far)
            # and the caller's retry continues it.
            raise storage
        failed = [r for r in runs if r.outcome == "error" and r.error is not None]
        if failed:
            raise RunEnds(
                "error",
                base,
                values,
                errors=tuple((r.spec.name, r.error) for r in failed if r.error is not None),
                failed_tasks=tuple(r.task.task_key for r in failed),
            )
        if any(r.outcome == "interrupt" for r in runs):
            yield from self._pause(base, values, runs)
        new_values, changes = yield from self._reduce(base, values, runs)
        next_tasks = self._plan(base, new_values, runs, step + 1, steps_taken)
        position = self._position
        checkpoint_id = position.next_id()
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=setup.thread_id,
            parent_id=base.id,
            plan_id=checkpoint_id,
            channels=new_values,
            next=next_tasks,
            step=step + 1,
            metadata=position.metadata("loop", tasks=keys),
        )
        # The superstep ended: what its tasks recorded from this base is spent,
        # except under a pause, whose answers stay readable with it.
        # (A task with an empty journal has no rows to drop.)
        spent = [] if base.pending else [r.task_id for r in runs if r.journal.entries()]
        with tracing.current(self._span):  # the commit's SQL shows under the superstep's span
            position.commit(checkpoint, changes, drop_journals=spent, fresh=True, last=not next_tasks)
        yield self._event(StateEvent, channels=setup.schema.full_values(new_values))
        yield self._event(CheckpointEvent, id=checkpoint.id)
        return checkpoint, new_values

    def _task_runs(self, base: Checkpoint, keys: Sequence[str]) -> list[TaskRun]:
        """The superstep's tasks, each with the journal it replays."""
        setup = self._setup
        stored = self._position.take_answered(base.id)
        if stored is None:
            if self._position.is_fresh(base.id):
                stored = {}
            else:
                stored = setup.checkpointer.load_journals(base, keys, hold=self._keeper.hold)
        runs: list[TaskRun] = []
        for task in base.next:
            spec = setup.graph.nodes.get(task.node)
            if spec is None:
                raise ResumeError(
                    f"checkpoint {base.id!r} of thread {setup.thread_id!r} schedules node "
                    f"{task.node!r}, which graph {setup.graph.name!r} does not have; run it with "
                    "the graph that wrote it, or fork from another checkpoint",
                    thread_id=setup.thread_id,
                    checkpoint_id=base.id,
                )
            task_id = task_id_for(setup.thread_id, base.id, task.task_key)
            journal = TaskJournal(
                task_id, stored.get(task.task_key, ()), self._runner.persister(base.id, task.task_key)
            )
            runs.append(
                TaskRun(task=task, spec=spec, task_id=task_id, journal=journal, parent_span=self._span)
            )
        return runs

    def _contexts(
        self,
        base: Checkpoint,
        values: Mapping[str, Any],
        runs: Sequence[TaskRun],
        steps_taken: int,
        placement: Placement,
    ) -> list[tuple[TaskRun, Any, NodeContext]]:
        """Each task with the state it reads and the ``ctx`` it gets.

        Its subgraphs run their tasks where this run does: in workers when a
        reader wants events live (so a child node's events reach it as they
        are emitted, not when the node returns).
        """
        setup = self._setup
        view = setup.schema.view(values)
        contexts = []
        for task_run in runs:
            state = task_run.task.input if task_run.task.is_send else _task_copy(view)
            ctx = NodeContext(
                node=task_run.spec.name,
                task_id=task_run.task_id,
                journal=task_run.journal,
                emit=self._runner.emitter(task_run),
                gate=self._runner.gate,
                can_pause=setup.can_pause,
                strict=setup.strict,
                graph=setup.graph,
                thread_id=setup.thread_id,
                run_id=setup.run_id,
                step_index=base.step,
                recursion_limit=setup.limit,
                remaining_steps=max(setup.limit - steps_taken, 0),
                state=state,
                meta=setup.meta,
                cancel=setup.cancel,
                children=functools.partial(
                    self._child_host,
                    base,
                    task_run,
                    new_plan=base.plan_id == base.id and self._position.is_fresh(base.id),
                    inline=placement != WORKERS,
                ),
            )
            contexts.append((task_run, state, ctx))
        return contexts

    def _child_host(self, base: Checkpoint, task_run: TaskRun, *, new_plan: bool, inline: bool) -> ChildHost:
        """What runs ``task_run``'s subgraphs (made at its first subgraph call)."""
        return ChildHost(
            self._setup,
            base.plan_id or base.id,
            task_run.task.task_key,
            self._runner.forwarder(task_run),
            self._keeper.hold.lease_seconds,
            new_plan=new_plan,
            inline=inline,
        )

    def _reduce(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[TaskRun]
    ) -> Generator[Event, None, tuple[dict[str, Any], dict[str, ChannelChange]]]:
        setup = self._setup
        try:
            return setup.schema.fold(
                values, [(r.spec.name, r.update) for r in runs], thread_id=setup.thread_id
            )
        except ReducerError as error:
            node = error.node or "?"
            task_id = next((r.task_id for r in runs if r.spec.name == node), "")
            yield self._event(NodeError, node=node, error=error, task_id=task_id)
            raise RunEnds("error", base, values, errors=((node, error),)) from error

    def _plan(
        self, base: Checkpoint, values: dict[str, Any], runs: Sequence[TaskRun], step: int, steps_taken: int
    ) -> tuple[ScheduledTask, ...]:
        setup = self._setup
        view = setup.schema.view(values)
        ctx = plan_context(setup, view, step, setup.limit - steps_taken - 1)
        names: set[str] = set()
        sends = []
        for task_run in runs:
            try:
                more_names, more_sends = setup.graph.targets(task_run.spec.name, task_run.command, view, ctx)
            except BaseException as error:
                # Routers and guards are graph code, not a task: as in the
                # reference their failure ends the run by raising. The thread
                # keeps its planned tasks and what they recorded.
                self._position.record_failure(base, task_run.spec.name, error)
                raise
            names |= more_names
            sends.extend(more_sends)
        return setup.graph.schedule(names, sends)

    def _pause(self, base: Checkpoint, values: dict[str, Any], runs: Sequence[TaskRun]) -> Iterator[Event]:
        setup, position = self._setup, self._position
        checkpoint_id = position.next_id()
        paused = [r for r in runs if r.outcome == "interrupt" and r.signal is not None]
        pending = tuple(
            pause
            for r in paused
            if r.signal is not None
            for pause in surfaced_pauses(
                r.signal, r.spec.name, r.task.task_key, setup.thread_id, checkpoint_id
            )
        )
        # The open pauses join the journal of the superstep, so a fork from
        # before the pause meets them (and a step reusing their key is caught).
        opened: dict[str, list[JournalEntry]] = {
            r.task.task_key: [e for e in r.journal.entries() if e.kind == "interrupt" and not e.answered]
            for r in paused
        }
        inherited = inherited_journals(base)
        checkpoint = Checkpoint(
            id=checkpoint_id,
            thread_id=setup.thread_id,
            parent_id=base.id,
            plan_id=base.plan_id,
            channels=values,
            next=base.next,
            pending=pending,
            task_journals=inherited.task_journals,
            journal_chain=inherited.journal_chain,
            step=base.step,
            metadata=position.metadata("pause"),
        )
        hook = setup.options.on_pause if setup.can_pause else None
        notices = (
            [] if hook is None else outbox_notices(setup.graph.name, setup.thread_id, checkpoint.id, pending)
        )
        position.commit(checkpoint, {}, journal=(base.id, opened), last=True, notices=notices)
        if hook is not None:
            for notice, pause in zip(notices, [p for p in pending if p.kind == "person"], strict=True):
                deliver(hook, setup.checkpointer, notice, pause)
        yield self._event(CheckpointEvent, id=checkpoint.id)
        yield self._event(InterruptEvent, pending=pending)
        raise RunEnds("interrupted", checkpoint, values, pending=pending)


def _task_copy(view: Any) -> Any:
    # Each task gets its own top-level container, so one task rebinding a key
    # cannot leak into a sibling; values inside are shared and must not be mutated.
    if type(view) is dict:
        return dict(view)
    return copy.copy(view)
