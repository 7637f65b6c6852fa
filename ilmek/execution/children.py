"""Subgraphs: a compiled graph run as a child of one task, under the parent run's thread.

A child is an ordinary :class:`~ilmek.execution.lifecycle.Run` of the child
graph on a child thread (:func:`ilmek.namespaces.child_thread_id`), driven
from inside the parent's task; its events join the parent's stream with the
child's namespace in front of their ``ns``. What lets the child pick up
exactly where it was is written in the parent task's journal, so it follows
the parent through a resume, a retry, crash recovery and a fork:

- ``<part>@pause#k``: the child paused at checkpoint ``C`` with these pause
  ids (recorded when the child's run ended ``interrupted``);
- ``<part>/<child pause id>#n``: the parent's own pause standing for that
  child pause; the answer a resume records there is handed to the child;
- ``<part>@resume#k``: the child thread's latest checkpoint when the parent
  first handed the answers to pause ``k`` in this branch. If the child is
  still there, the answers go to ``C`` (resumed in place, or forked from
  ``C`` when the child moved on in another branch); if it moved since, it
  already took them here, and it just continues.

A child that never paused continues from its own latest checkpoint (a
crash, an error, a retry), or starts from its input when it has none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..checkpoint.holds import HoldLostError
from ..context import NodeContext
from ..errors import InterruptSignal, InvalidArgumentError, ResumeError, SubgraphError, ThreadBusyError
from ..events import Event, RunEnd, RunStart
from ..graph import CompiledGraph
from ..namespaces import child_thread_id, join_path, root_thread_id
from ..options import RunOptions
from ..types import JournalEntry, Pending, pause_fields, task_id_for
from .answers import Resume
from .setup import RunSetup

__all__ = ["ChildHost", "surfaced_pauses"]


@attrs.frozen(kw_only=True)
class _PauseRecord:
    """One pause of the child, as the parent's journal holds it."""

    checkpoint: str
    pending: tuple[str, ...]


@attrs.define(eq=False)
class ChildHost:
    """What a task's ``ctx`` runs its subgraphs with: the parent run, the plan and the task."""

    setup: RunSetup
    plan_id: str
    task_key: str
    #: Hands a child's event to the parent's stream (with the child's ns in front).
    forward: Callable[[Event, tuple[str, ...]], None]
    #: The lease of the parent's hold (``None``: it cannot lapse while its holder lives).
    lease_seconds: float | None = None
    #: Whether this run just planned the superstep (so no child of it can exist yet: nothing to read).
    new_plan: bool = False
    #: Whether a child's one-task superstep may run on the task's thread (no reader wants events live).
    inline: bool = True

    def call(self, ctx: NodeContext, graph: CompiledGraph[Any], input: Any, part: str) -> Any:  # noqa: A002
        """Run ``graph`` as child ``part`` of the task; its final state (a pause raises)."""
        if not isinstance(graph, CompiledGraph):
            raise InvalidArgumentError(
                f"node {ctx.node!r} ran a subgraph that is a {type(graph).__name__}, not a compiled graph; "
                f"call .compile() on the builder (thread {ctx.thread_id!r})"
            )
        return _ChildCall(self, ctx, graph, part).run(input)


@attrs.define(eq=False)
class _ChildCall:
    """One call of a subgraph from one pass of a task."""

    host: ChildHost
    ctx: NodeContext
    graph: CompiledGraph[Any]
    part: str

    @property
    def thread_id(self) -> str:
        return child_thread_id(self.ctx.thread_id, self.host.plan_id, self.part)

    def run(self, input: Any) -> Any:  # noqa: A002
        setup = self.host.setup
        cp = setup.checkpointer
        pauses = self._replayed_pauses()
        info = None if self.host.new_plan and not pauses else cp.get_thread(self.thread_id)
        latest = info.checkpoint_id if info is not None else None
        if not pauses:
            if info is not None and info.status == "interrupted":
                # It paused, but the parent fell before it wrote so: take the pause up now.
                self._pause_at(latest, self._open_pauses(latest))
            # Started already (a crash, an error, a retry): it continues, its input folded once.
            return self._drive(None, input if info is None else None)
        last = pauses[-1]
        answered = self._answers(last)
        moved_from = self.ctx.step(f"{self.part}@resume", lambda: latest)
        if latest == moved_from:
            resume = Resume(
                {pid: entry.value for pid, entry in answered.items()},
                True,
                {pid: entry.by or "person" for pid, entry in answered.items()},
            )
            # Answered in place (after any edit of the paused child), or, when the child
            # moved on in another branch, on a fork from that pause.
            at = None if self._edited_from(latest, last.checkpoint) else last.checkpoint
            return self._drive(resume, None, checkpoint_id=at)
        if info is not None and info.status == "interrupted":
            # It took the answers in this branch and paused again before the parent knew.
            self._pause_at(latest, self._open_pauses(latest))
        return self._drive(None, None)

    # --- the parent's journal ---------------------------------------------------------

    def _replayed_pauses(self) -> list[_PauseRecord]:
        """The child's pauses this task recorded in this branch, oldest first (each claimed)."""
        journal = self.ctx._journal
        records: list[_PauseRecord] = []
        while True:
            entry = journal.get(journal.next_key(f"{self.part}@pause"))
            if entry is None or entry.kind != "step" or not isinstance(entry.value, Mapping):
                return records
            journal.claim(f"{self.part}@pause")
            record = _PauseRecord(checkpoint=entry.value["checkpoint"], pending=tuple(entry.value["pending"]))
            if records:
                # Pauses before the last were answered and left behind: their keys were asked for.
                self._claim_answers(records[-1])
                journal.claim(f"{self.part}@resume")
            records.append(record)

    def _claim_answers(self, record: _PauseRecord) -> dict[str, str]:
        """The parent's journal key of each of the child's pauses in ``record`` (claimed)."""
        journal = self.ctx._journal
        return {pid: journal.claim(f"{self.part}/{pid}") for pid in record.pending}

    def _answers(self, record: _PauseRecord) -> dict[str, JournalEntry]:
        """The answers the parent's pauses received for the child's pause ``record``."""
        keys = self._claim_answers(record)
        found = {pid: self.ctx._journal.get(key) for pid, key in keys.items()}
        answered = {pid: entry for pid, entry in found.items() if entry is not None and entry.answered}
        if len(answered) != len(found):
            # Asked again before an answer (a fork that carried none): the pause stands.
            self._paused(self._open_pauses(record.checkpoint), keys=keys)
        return answered

    def _edited_from(self, latest: str | None, pause: str) -> bool:
        """Whether ``latest`` is ``pause``, or ``pause`` edited by ``update_state`` (still paused there)."""
        cp = self.host.setup.checkpointer
        at = latest
        while at is not None and at != pause:
            checkpoint = cp.get(self.thread_id, at)
            if checkpoint is None or checkpoint.metadata.get("source") != "update":
                return False
            at = checkpoint.parent_id
        return at == pause

    def _open_pauses(self, checkpoint_id: str | None) -> tuple[Pending, ...]:
        child = self.host.setup.checkpointer.get(self.thread_id, checkpoint_id)
        return child.pending if child is not None else ()

    # --- running the child ------------------------------------------------------------

    def _drive(self, resume: Resume | None, input: Any, *, checkpoint_id: str | None = None) -> Any:  # noqa: A002
        """Run the child (answering ``resume``, else from ``input``); its final state, or raise."""
        from .lifecycle import Run, Start  # the run drives supersteps, whose tasks call this

        setup = self.host.setup
        options = RunOptions(
            thread_id=self.thread_id,
            checkpointer=setup.checkpointer,
            checkpoint_id=checkpoint_id,
            strict=setup.strict,
            meta=setup.meta,
            cancel=setup.cancel,
            max_workers=setup.max_workers,
        )
        graph = self.graph
        if graph.defaults.on_pause is not None:
            # A child's pause is told as its root's pause (by the root's hook), never as a thread of its own.
            graph = attrs.evolve(graph, defaults=attrs.evolve(graph.defaults, on_pause=None))
        ns = (self.part,)
        end: RunEnd | None = None
        waited_until: float | None = None
        while end is None:
            run = Run(graph, resume if resume is not None else Start(input), options, child=True)
            run.may_run_inline = self.host.inline
            told = False
            try:
                for event in run.events():
                    if isinstance(event, RunEnd):
                        end = event
                    elif not isinstance(event, RunStart):
                        told = True
                        self.host.forward(event, ns)
            except ThreadBusyError as busy:
                waited_until = self._wait_out_stale_hold(busy, told, waited_until)
        if end.status == "done":
            return end.state
        if end.status == "interrupted":
            self._pause_at(end.checkpoint_id, end.pending)
        raise self._failed(end)

    def _pause_at(self, checkpoint_id: str | None, pending: Sequence[Pending]) -> None:
        """Record in the parent's journal that the child paused at ``checkpoint_id``, then pause the task."""
        self.ctx.step(
            f"{self.part}@pause", lambda: {"checkpoint": checkpoint_id, "pending": [p.id for p in pending]}
        )
        self._paused(pending)

    def _wait_out_stale_hold(self, busy: ThreadBusyError, told: bool, until: float | None) -> float:
        """Wait a little for the child's stale hold to lapse (or re-raise ``busy``); the wait's deadline.

        The parent holds the root thread, so no live run holds the child:
        a hold on it is a killed process's, which lapses within one lease of
        the parent's own (whose lapse let this run in).
        """
        lease = self.host.lease_seconds
        now = time.monotonic()
        until = until if until is not None else now + 2 * (lease or 0.0)
        if told or busy.thread_id != self.thread_id or isinstance(busy, HoldLostError) or now >= until:
            raise busy
        if self.host.setup.cancel.wait(min(0.05, (lease or 1.0) / 10)):
            raise busy
        return until

    def _paused(self, pending: Sequence[Pending], *, keys: Mapping[str, str] | None = None) -> None:
        """Pause the parent task for the child's open pauses (its own pauses stand for them)."""
        if not self.host.setup.can_pause:
            raise ResumeError(
                f"subgraph {self.graph.name!r} of node {self.ctx.node!r} paused in a run without a "
                f"checkpointer (thread {self.ctx.thread_id!r}): nobody could answer it. Run with a "
                "checkpointer and a thread_id",
                thread_id=self.ctx.thread_id,
            )
        journal = self.ctx._journal
        surfaced = []
        for pause in pending:
            key = keys[pause.id] if keys is not None else journal.claim(f"{self.part}/{pause.id}")
            if journal.get(key) is None:
                # Stored with the parent's pause checkpoint, as a node's own pause is.
                journal.record(JournalEntry(key=key, kind="interrupt", payload=pause.payload), durable=False)
            surfaced.append(
                attrs.evolve(pause, id=f"{self.part}/{pause.id}", key=key, ns=(self.part, *pause.ns))
            )
        if not surfaced:
            raise SubgraphError(
                f"subgraph {self.graph.name!r} of node {self.ctx.node!r} reads as paused but has no open "
                f"pause (thread {self.ctx.thread_id!r}); fork from an earlier checkpoint",
                ns=(self.part,),
                thread_id=self.ctx.thread_id,
            )
        first = surfaced[0]
        signal = InterruptSignal(first.key, first.payload)
        signal.children = tuple(surfaced)
        raise signal

    def _failed(self, end: RunEnd) -> SubgraphError:
        ns: tuple[str, ...] = (self.part,)
        node, cause = end.errors[0] if end.errors else (None, None)
        if isinstance(cause, SubgraphError):
            # Named once, from the root: the path to the child that failed and its own error.
            ns, node, cause = (self.part, *cause.ns), cause.node, cause.__cause__
        if end.status == "aborted":
            why = f"was stopped ({end.abort_reason})"
        else:
            why = f"failed in node {node!r}: {type(cause).__name__}: {cause}"
        error = SubgraphError(
            f"the subgraph at {join_path(ns)!r} {why} (thread {root_thread_id(self.ctx.thread_id)!r}); "
            "run or resume the thread again to continue the subgraph from its last checkpoint",
            ns=ns,
            node=node,
            thread_id=root_thread_id(self.ctx.thread_id),
            checkpoint_id=end.checkpoint_id,
        )
        error.__cause__ = cause
        return error


def surfaced_pauses(
    signal: InterruptSignal, node: str, task_key: str, thread_id: str, checkpoint_id: str
) -> tuple[Pending, ...]:
    """The pauses a paused task opens in pause checkpoint ``checkpoint_id``: its own, or its subgraph's."""
    task_id = task_id_for(thread_id, checkpoint_id, task_key)
    if signal.children:
        return tuple(attrs.evolve(pause, task_id=task_id, node=node) for pause in signal.children)
    return (
        Pending(
            id=f"{task_key}:{signal.key}",
            task_id=task_id,
            node=node,
            key=signal.key,
            payload=signal.payload,
            **pause_fields(signal.terms),
        ),
    )
