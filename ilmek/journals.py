"""Which journals a new checkpoint inherits: one rule, called by every path that makes a checkpoint.

The tasks of a checkpoint see the steps recorded from the checkpoints its
``journal_chain`` names, then those recorded from the checkpoint itself (and,
in stores written by ilmek 0.1, the journals it carries in
``task_journals``). A pause, a run's input committed over an unfinished plan,
a fork and a human edit (``update_state``) each make a checkpoint that plans
the tasks of the one before; :func:`inherited_journals` says what they replay.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .types import Checkpoint, JournalEntry

__all__ = ["InheritedJournals", "inherited_journals"]


@attrs.frozen(kw_only=True)
class InheritedJournals:
    """The journal fields of a new checkpoint (see :class:`~ilmek.types.Checkpoint`).

    Attributes:
        task_journals: Journals carried inside the checkpoint (ilmek 0.1's pauses).
        journal_chain: The checkpoints whose recorded steps its tasks replay, oldest first.
    """

    task_journals: Mapping[str, tuple[JournalEntry, ...]] = attrs.field(factory=dict)
    journal_chain: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether the new checkpoint's tasks start with nothing recorded."""
        return not self.task_journals and not self.journal_chain


_NOTHING = InheritedJournals()


def inherited_journals(parent: Checkpoint | None, *, fork: bool = False) -> InheritedJournals:
    """What a checkpoint made from ``parent`` inherits, so no step its tasks paid for runs again.

    - No ``parent`` (the thread's first checkpoint), or one that plans
      nothing: nothing (the graph starts again at ``START``).
    - A fork from a pause: what the pause inherits, not what was recorded
      from the pause itself (the answers of branches already resumed from
      it, and the steps they ran after the answers): the new branch answers
      afresh.
    - Otherwise (the same branch going on, or a fork from a checkpoint that
      is not a pause): everything ``parent``'s tasks see, its own journal
      included; a pause answered by a resume that did not finish keeps
      that answer and the steps after it.

    Args:
        parent: The checkpoint the new one follows (``None``: the thread has none yet).
        fork: Whether the new checkpoint starts a new branch from ``parent``.
    """
    if parent is None or not parent.next:
        return _NOTHING
    if fork and parent.pending:
        return InheritedJournals(task_journals=parent.task_journals, journal_chain=parent.journal_chain)
    return InheritedJournals(
        task_journals=parent.task_journals, journal_chain=(*parent.journal_chain, parent.id)
    )
