"""One task's attempts: the node's body called under its retry policy, then its update checked.

Runs on a worker, or inline on the driving thread. The outcome goes on the
:class:`~ilmek.execution.messages.TaskRun` (``ok``, ``interrupt``, ``error``
or ``storage``); a retry is announced to the driver as a
:class:`~ilmek.execution.messages.Retry` message, which becomes a
``node_retry`` event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import serde, tracing
from ..checkpoint.holds import HoldLostError
from ..context import NodeContext
from ..control import Command
from ..errors import IlmekError, InterruptSignal, NondeterminismError, ReducerError, StepResultNotStoredError
from .messages import Message, Retry, RunClosed, StorageFailed, TaskRun
from .setup import RunSetup

__all__ = ["Attempts"]


class Attempts:
    """Calls nodes' bodies for one run, each task's attempts in turn."""

    def __init__(self, setup: RunSetup, post: Callable[[Message], None]) -> None:
        self._setup = setup
        #: Hands a message to the driver (the run's queue).
        self._post = post

    def run(self, task_run: TaskRun, state: Any, ctx: NodeContext) -> None:
        """Call the body until it returns, pauses, fails for good or the run closes; set the outcome.

        Inside the task's span (see :mod:`ilmek.tracing`), current on this
        thread while the body runs, and the parent of its steps' spans.
        """
        span = tracing.child(
            "ilmek.task",
            task_run.parent_span,
            {"ilmek.node": task_run.spec.name, "ilmek.task_id": task_run.task_id},
        )
        if span is None:
            self._attempts(task_run, state, ctx)
            return
        ctx._span = span
        try:
            with tracing.current(span):
                self._attempts(task_run, state, ctx)
        finally:
            tracing.set_attributes(
                span, {"ilmek.attempts": task_run.attempts, "ilmek.outcome": task_run.outcome}
            )
            failed = task_run.error if task_run.outcome in ("error", "storage") else None
            tracing.end(span, failed)

    def _attempts(self, task_run: TaskRun, state: Any, ctx: NodeContext) -> None:
        policy = task_run.spec.retry
        cancel = self._setup.cancel
        attempt = 1
        while True:
            task_run.attempts = attempt
            task_run.journal.begin_attempt()
            ctx._begin_attempt()
            try:
                value = task_run.spec.body(state, ctx)
                self._check_replay(task_run)
            except InterruptSignal as signal:
                task_run.outcome, task_run.signal = "interrupt", signal
                return
            except (HoldLostError, RunClosed) as error:
                task_run.outcome, task_run.error = "error", error
                return
            except StorageFailed as failed:
                task_run.outcome, task_run.error = "storage", failed.error
                return
            except Exception as error:
                # A step whose result could not be stored is recorded as run:
                # every attempt would meet the same error at its key.
                if (
                    policy is not None
                    and not cancel.is_set()
                    and not isinstance(error, StepResultNotStoredError)
                    and policy.should_retry(attempt, error)
                ):
                    self._post(Retry(task_run, attempt + 1, error))
                    if cancel.wait(policy.delay(attempt)):
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

    def _check_replay(self, task_run: TaskRun) -> None:
        """After a body returned: no swallowed pause, and (strict) no vanished journal key."""
        thread_id = self._setup.thread_id
        swallowed = task_run.journal.open_pauses()
        if swallowed:
            raise NondeterminismError(
                f"node {task_run.spec.name!r} returned although its pause {swallowed[0]!r} has no answer "
                f"(thread {thread_id!r}): it caught the InterruptSignal. Let InterruptSignal "
                "propagate (catch Exception, not BaseException)",
                key=swallowed[0],
                node=task_run.spec.name,
                thread_id=thread_id,
            )
        if self._setup.strict:
            vanished = task_run.journal.unrequested()
            if vanished:
                raise NondeterminismError(
                    f"node {task_run.spec.name!r} finished without asking for journal key(s) "
                    f"{', '.join(map(repr, vanished))}, which an earlier pass recorded (thread "
                    f"{thread_id!r}, task {task_run.task_id!r}): a side effect escaped ctx.step, or "
                    "the node branches on something outside its state and journal (the node must be "
                    "deterministic apart from its steps)",
                    key=vanished[0],
                    keys=tuple(vanished),
                    node=task_run.spec.name,
                    thread_id=thread_id,
                )

    def _update_of(self, node: str, value: Any) -> tuple[dict[str, Any], Command | None]:
        thread_id = self._setup.thread_id
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
                f"None, or command(...) (thread {thread_id!r})",
                node=node,
                thread_id=thread_id,
            )
        if not isinstance(update, Mapping):
            raise ReducerError(
                f"node {node!r} returned a command whose update is {type(update).__name__}, "
                f"not a dict (thread {thread_id!r})",
                node=node,
                thread_id=thread_id,
            )
        self._setup.schema.check_writes(update, who=f"node {node!r}", thread_id=thread_id, node=node)
        for channel, written in update.items():
            # A value that could not be stored fails its node here, not the commit.
            serde.encode(written, where=f"the write of node {node!r} to channel {channel!r}")
        return dict(update), command
