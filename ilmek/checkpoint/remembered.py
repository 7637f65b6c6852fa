"""The latest checkpoint a process remembers committing: internal, a guess a run may start from.

A run with input reads its thread's latest checkpoint, then commits its
input on the condition that the thread still points there. When this
process itself committed that checkpoint, it can skip the read and make the
same conditional commit from what it remembers: the condition is the check
(a thread another process moved since fails it, and the run reads then).
:class:`~ilmek.checkpoint.base.Checkpointer` inherits :class:`RemembersLatest`,
which remembers nothing; the SQL checkpointers remember
(``sql/remembered.py``), where a read is a round trip.
"""

from __future__ import annotations

from ..types import Checkpoint

__all__ = ["RemembersLatest"]


class RemembersLatest:
    """The internal guess at a thread's latest checkpoint, from this process's own commits."""

    def _remembered_latest(self, thread_id: str) -> Checkpoint | None:
        """The thread's latest checkpoint as this process last committed it, or ``None``.

        Internal, for a run that commits input: only a checkpoint that plans
        no task and waits on no pause (nothing recorded after it can matter),
        with its values as a read would give them, new objects the caller
        may change (no other caller gets them). It may be stale: use it only
        for a write conditioned on the thread still pointing at it. The
        default remembers nothing (the run reads).
        """
        return None
