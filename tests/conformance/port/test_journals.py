"""The port suite, task journals: put, get, replace and drop them, alone or in batches."""

from __future__ import annotations

import pytest

from ilmek import Checkpointer, JournalEntry
from ilmek.types import task_id_for
from tests.support.port import JOURNAL

pytestmark = pytest.mark.timeout(60)


# --- journals ---------------------------------------------------------------------------


def test_a_journal_round_trips_steps_and_interrupts(checkpointer: Checkpointer) -> None:
    """Step entries keep their value; interrupts keep payload, answer and whether they were answered."""
    task_id = task_id_for("t", "c0001", "agent")
    checkpointer.put_journal(task_id, JOURNAL)

    assert JOURNAL == checkpointer.get_journal(task_id)


def test_put_journal_replaces_the_whole_journal(checkpointer: Checkpointer) -> None:
    """A second ``put_journal`` of a task replaces its entries, it does not add to them."""
    task_id = task_id_for("t", "c0001", "agent")
    checkpointer.put_journal(task_id, JOURNAL)
    checkpointer.put_journal(task_id, [JournalEntry(key="only#0", value=1)])

    assert (JournalEntry(key="only#0", value=1),) == checkpointer.get_journal(task_id)


def test_get_journal_without_one_is_an_empty_tuple(checkpointer: Checkpointer) -> None:
    """A task that never recorded anything has the journal ``()``."""
    assert () == checkpointer.get_journal(task_id_for("t", "c0001", "agent"))


def test_drop_journal_deletes_one_journal_and_tolerates_a_missing_one(checkpointer: Checkpointer) -> None:
    """``drop_journal`` removes that task's journal only; dropping one that is absent is fine."""
    first, second = task_id_for("t", "c0001", "a"), task_id_for("t", "c0001", "b")
    checkpointer.put_journals({first: JOURNAL, second: JOURNAL[:1]})

    checkpointer.drop_journal(first)
    checkpointer.drop_journal(first)
    checkpointer.drop_journal(task_id_for("t", "c0009", "never"))

    assert () == checkpointer.get_journal(first)
    assert JOURNAL[:1] == checkpointer.get_journal(second)


def test_put_journals_and_get_journals_work_in_batches(checkpointer: Checkpointer) -> None:
    """``put_journals`` stores several; ``get_journals`` returns those that exist, by task id."""
    journals = {task_id_for("t", "c0001", f"worker#{n}"): JOURNAL[: n + 1] for n in range(4)}
    checkpointer.put_journals(journals)
    absent = task_id_for("t", "c0001", "absent")

    assert journals == checkpointer.get_journals([*journals, absent])
    assert {} == checkpointer.get_journals([absent])
    assert {} == checkpointer.get_journals([])


def test_journals_of_different_threads_are_separate(checkpointer: Checkpointer) -> None:
    """The same checkpoint id and task key under two threads name two journals."""
    checkpointer.put_journal(task_id_for("a", "c0001", "agent"), JOURNAL[:1])
    checkpointer.put_journal(task_id_for("b", "c0001", "agent"), JOURNAL[1:2])

    assert JOURNAL[:1] == checkpointer.get_journal(task_id_for("a", "c0001", "agent"))
    assert JOURNAL[1:2] == checkpointer.get_journal(task_id_for("b", "c0001", "agent"))
