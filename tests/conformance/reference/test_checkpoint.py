"""Ported from the reference's ``ts/packages/core/test/checkpoint.test.ts``.

Checkpoint ids, the "interrupted" predicate, and the port: the reference runs
these on its in-memory backend; here every case runs on memory, a SQLite file
and Postgres, since they share the one port (SPEC §7).
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import Checkpoint, Checkpointer, ConcurrentUpdateError, JournalEntry, Pending
from ilmek.types import new_checkpoint_id

PAUSE = Pending(
    id="approve:interrupt#0", task_id="task-1", node="approve", key="interrupt#0", payload={"amount": 10}
)


def ckpt(thread_id: str = "t1", **fields: Any) -> Checkpoint:
    """A checkpoint with a fresh id and nothing in it unless told."""
    fields.setdefault("id", new_checkpoint_id())
    return Checkpoint(thread_id=thread_id, **fields)


def ids(checkpoints: list[Checkpoint]) -> list[str]:
    """The ids, in the order given."""
    return [c.id for c in checkpoints]


# --- checkpoint ids -----------------------------------------------------------------------


def test_checkpoint_ids_sort_lexically_in_generation_order() -> None:
    """checkpoint.test.ts · "ids sort lexically in generation order"."""
    made = [new_checkpoint_id() for _ in range(50)]

    assert sorted(made) == made


def test_checkpoint_ids_are_unique_even_inside_one_millisecond() -> None:
    """checkpoint.test.ts · "ids are unique even inside one millisecond"."""
    assert 1000 == len({new_checkpoint_id() for _ in range(1000)})


def test_checkpoint_ids_share_a_fixed_width_prefix_so_lexical_order_is_numeric_order() -> None:
    """checkpoint.test.ts · "ids share a fixed-width prefix so lexical order is numeric order".

    The reference's ids start with ``ckpt-``; SPEC §7 fixes no prefix, only
    the order, so the width is what is checked.
    """
    a, b = new_checkpoint_id(), new_checkpoint_id()

    assert len(a.rsplit("-", 1)[0]) == len(b.rsplit("-", 1)[0])
    assert len(a) == len(b)


# --- the interrupted predicate ----------------------------------------------------------------


def test_a_checkpoint_without_pending_pauses_is_not_interrupted() -> None:
    """checkpoint.test.ts · isInterrupted "false with no pending interrupts"."""
    assert "interrupted" != ckpt().status


def test_a_checkpoint_with_a_pending_pause_is_interrupted() -> None:
    """checkpoint.test.ts · isInterrupted "true with at least one"."""
    assert "interrupted" == ckpt(pending=(PAUSE,)).status


# --- checkpoints --------------------------------------------------------------------------------


def test_get_on_an_unknown_thread_returns_none(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "get on an unknown thread returns null"."""
    assert None is ref_checkpointer.get("nope")
    assert None is ref_checkpointer.get("nope", new_checkpoint_id())
    assert [] == ref_checkpointer.list("nope")


def test_get_without_an_id_returns_the_latest_checkpoint(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "get without an id returns the latest checkpoint"."""
    first = ckpt(step=0)
    second = ckpt(step=1, parent_id=first.id)
    ref_checkpointer.put("t1", first)
    ref_checkpointer.put("t1", second)

    latest = ref_checkpointer.get("t1")
    assert latest is not None
    assert second.id == latest.id


def test_the_latest_is_the_greatest_id_not_the_last_put(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "latest is the max id, not the last put"."""
    older, newer = ckpt(), ckpt()
    ref_checkpointer.put("t1", newer)
    ref_checkpointer.put("t1", older)

    latest = ref_checkpointer.get("t1")
    assert latest is not None
    assert newer.id == latest.id


def test_get_with_an_id_returns_that_exact_checkpoint(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "get with an id returns that exact checkpoint"."""
    first = ckpt(step=0)
    ref_checkpointer.put("t1", first)
    ref_checkpointer.put("t1", ckpt(step=1))

    found = ref_checkpointer.get("t1", first.id)
    assert found is not None
    assert 0 == found.step


def test_get_with_an_unknown_id_returns_none_rather_than_the_latest(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "get with an unknown id returns null rather than falling back to latest"."""
    ref_checkpointer.put("t1", ckpt())

    assert None is ref_checkpointer.get("t1", "ckpt-does-not-exist")


def test_putting_the_same_id_twice_is_refused_and_the_first_stays(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "putting the same id twice replaces it".

    Python SPEC §7 differs on purpose: nothing is overwritten, so the second
    put is a ConcurrentUpdateError and the first checkpoint stays.
    """
    checkpoint_id = new_checkpoint_id()
    ref_checkpointer.put("t1", ckpt(id=checkpoint_id, step=0))

    with pytest.raises(ConcurrentUpdateError):
        ref_checkpointer.put("t1", ckpt(id=checkpoint_id, step=9))

    assert 1 == len(ref_checkpointer.list("t1"))
    found = ref_checkpointer.get("t1", checkpoint_id)
    assert found is not None
    assert 0 == found.step


def test_threads_are_isolated(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "threads are isolated"."""
    ref_checkpointer.put("a", ckpt("a"))
    ref_checkpointer.put("b", ckpt("b"))

    assert 1 == len(ref_checkpointer.list("a"))
    latest = ref_checkpointer.get("a")
    assert latest is not None
    assert "a" == latest.thread_id


def test_list_is_newest_first_and_honours_limit(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "list is newest-first and honours limit"."""
    made = [ckpt(step=i) for i in range(5)]
    for checkpoint in made:
        ref_checkpointer.put("t1", checkpoint)
    newest_first = ids(made)[::-1]

    assert newest_first == ids(ref_checkpointer.list("t1"))
    assert newest_first[:2] == ids(ref_checkpointer.list("t1", limit=2))
    assert [] == ref_checkpointer.list("t1", limit=0)


def test_a_thread_is_a_tree_two_children_may_share_one_parent(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "a thread is a tree: two children may share one parent"."""
    root = ckpt()
    ref_checkpointer.put("t1", root)
    ref_checkpointer.put("t1", ckpt(parent_id=root.id, step=1))
    ref_checkpointer.put("t1", ckpt(parent_id=root.id, step=1))

    listed = ref_checkpointer.list("t1")
    assert 3 == len(listed)
    assert 2 == sum(1 for c in listed if c.parent_id == root.id)


def test_delete_thread_drops_every_checkpoint_of_that_thread_only(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "deleteThread drops every checkpoint of that thread only"."""
    ref_checkpointer.put("a", ckpt("a"))
    ref_checkpointer.put("b", ckpt("b"))

    ref_checkpointer.delete_thread("a")

    assert None is ref_checkpointer.get("a")
    assert 1 == len(ref_checkpointer.list("b"))


def test_delete_thread_on_an_unknown_thread_is_a_no_op(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "deleteThread on an unknown thread is a no-op"."""
    ref_checkpointer.delete_thread("nope")

    assert None is ref_checkpointer.get("nope")


# --- journals ---------------------------------------------------------------------------------------


def test_get_journal_of_an_unknown_task_is_empty(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "getJournal on an unknown task returns a fresh empty journal"."""
    assert () == ref_checkpointer.get_journal("task-unknown")


def test_a_journal_round_trips_entries_order_and_pending_status(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "round-trips entries, order and pending status"."""
    entries = (
        JournalEntry(key="charge#0", value={"id": "ch_1"}),
        JournalEntry(key="approve#0", kind="interrupt", payload={"amount": 10}),
    )
    ref_checkpointer.put_journal("task-1", entries)

    back = ref_checkpointer.get_journal("task-1")
    assert entries == back
    assert ["approve#0"] == [e.key for e in back if e.kind == "interrupt" and not e.answered]


def test_put_journal_stores_a_snapshot(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "stores a snapshot: mutating after the put does not leak in"."""
    entries = [JournalEntry(key="a#0", value=1)]
    ref_checkpointer.put_journal("task-1", entries)

    entries.append(JournalEntry(key="b#0", value=2))

    assert ["a#0"] == [e.key for e in ref_checkpointer.get_journal("task-1")]


def test_each_get_journal_hands_out_an_independent_journal(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "each get hands out an independent journal"."""
    ref_checkpointer.put_journal("task-1", [])

    one = list(ref_checkpointer.get_journal("task-1"))
    one.append(JournalEntry(key="a#0", value=1))

    assert () == ref_checkpointer.get_journal("task-1")


def test_drop_journal_makes_the_task_look_unstarted_again(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "dropJournal makes the task look unstarted again"."""
    ref_checkpointer.put_journal("task-1", [JournalEntry(key="charge#0", value="ok")])

    ref_checkpointer.drop_journal("task-1")

    assert () == ref_checkpointer.get_journal("task-1")


def test_drop_journal_on_an_unknown_task_is_a_no_op(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "dropJournal on an unknown task is a no-op"."""
    ref_checkpointer.drop_journal("nope")

    assert () == ref_checkpointer.get_journal("nope")


def test_journals_are_keyed_by_task_id(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.test.ts · "journals are keyed by task id"."""
    ref_checkpointer.put_journal("task-a", [JournalEntry(key="a#0", value=1)])
    ref_checkpointer.put_journal("task-b", [JournalEntry(key="b#0", value=2)])

    assert ["a#0"] == [e.key for e in ref_checkpointer.get_journal("task-a")]
    assert ["b#0"] == [e.key for e in ref_checkpointer.get_journal("task-b")]
