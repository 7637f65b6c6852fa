"""The run's place in its thread: the checkpoint it expects to be latest, and what it commits.

Every checkpoint a run writes goes through :meth:`ThreadPosition.commit`,
which passes the run's hold and the expected latest checkpoint (the
compare-and-set that keeps two writers from forking history), then moves
the run's position to the new checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..checkpoint.holds import Hold
from ..checkpoint.outbox import OutboxNotice
from ..logs import logger
from ..types import ChannelChange, Checkpoint, JournalEntry, ThreadCancel, ThreadError, new_checkpoint_id
from .setup import RunSetup

__all__ = ["ThreadPosition"]


class ThreadPosition:
    """Where the run stands in its thread, and the journals it already knows.

    Attributes:
        expect: The id the thread's latest checkpoint must have for the
            run's next commit to land (``None``: the thread has none yet).
        answered: The journals of a pause this run just answered, as the
            answers' write left them (base id, task key to entries): its
            first superstep need not read them again.
        answered_by: Who answered that pause, by pause id: the next
            checkpoint's metadata keeps it (``answered_by``), so ``history``
            tells it once the journals are gone.
    """

    def __init__(self, setup: RunSetup, hold: Hold) -> None:
        self._setup = setup
        self._hold = hold
        self.expect: str | None = None
        # Checkpoints this run committed without inherited journals: nothing
        # can be recorded for their tasks yet, so there is nothing to read.
        self._fresh: set[str] = set()
        self.answered: tuple[str, dict[str, tuple[JournalEntry, ...]]] | None = None
        self.answered_by: dict[str, str] | None = None

    def next_id(self) -> str:
        """An id for the run's next checkpoint, sorting after the latest."""
        return new_checkpoint_id(after=self.expect)

    def metadata(self, source: str, **more: Any) -> dict[str, Any]:
        """A new checkpoint's metadata: where it came from, which run and graph wrote it (and, the first
        after answers, who gave them)."""
        answered_by, self.answered_by = self.answered_by, None
        if answered_by:
            more = {"answered_by": answered_by, **more}
        return {"source": source, "run_id": self._setup.run_id, "graph": self._setup.graph.name, **more}

    def is_fresh(self, checkpoint_id: str) -> bool:
        """Whether this run committed ``checkpoint_id`` with no journals to inherit."""
        return checkpoint_id in self._fresh

    def take_answered(self, base_id: str) -> dict[str, tuple[JournalEntry, ...]] | None:
        """The answered pause's journals if ``base_id`` is that pause (once)."""
        answered, self.answered = self.answered, None
        if answered is not None and answered[0] == base_id:
            return answered[1]
        return None

    def commit(
        self,
        checkpoint: Checkpoint,
        changes: Mapping[str, ChannelChange],
        *,
        drop_journals: Sequence[str] = (),
        journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None = None,
        fresh: bool = False,
        last: bool = False,
        notices: Sequence[OutboxNotice] = (),
    ) -> None:
        """Commit ``checkpoint`` after the expected latest; it becomes the run's position."""
        self._setup.checkpointer.commit(
            self._setup.thread_id,
            checkpoint,
            changes=changes,
            expect_latest=self.expect,
            hold=self._hold,
            drop_journals=drop_journals,
            journal=journal,
            # The run's last write (a pause, a plan with nothing left) gives
            # the hold back in the same transaction.
            release_hold=last,
            notices=notices,
        )
        self.expect = checkpoint.id
        if fresh:
            self._fresh.add(checkpoint.id)

    def record_failure(
        self, base: Checkpoint | None, node: str | None, error: BaseException, *, tasks: tuple[str, ...] = ()
    ) -> None:
        """Store why the run failed, so the thread reads ``error``; never masks the failure.

        ``tasks``: the keys of the tasks that raised, this error's first.
        """
        setup = self._setup
        if not setup.can_pause:
            return
        failure = ThreadError.of(
            error, node=node, checkpoint_id=base.id if base is not None else None, tasks=tasks
        )
        try:
            setup.checkpointer.record_failure(self._hold, failure)
        except Exception as problem:
            logger("ilmek.run").warning(
                "could not record the failure of thread %r: %s",
                setup.thread_id,
                problem,
                extra={"thread_id": setup.thread_id},
            )

    def record_cancel(self, base: Checkpoint, reason: str) -> None:
        """Store that the run was cancelled, why and where, so the thread says so; never masks the end."""
        setup = self._setup
        if not setup.can_pause:
            return
        try:
            setup.checkpointer.record_cancel(self._hold, ThreadCancel(reason=reason, checkpoint_id=base.id))
        except Exception as problem:
            logger("ilmek.run").warning(
                "could not record the cancel of thread %r: %s",
                setup.thread_id,
                problem,
                extra={"thread_id": setup.thread_id},
            )
