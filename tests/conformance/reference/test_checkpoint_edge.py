"""Ported from the reference's ``ts/packages/core/test/checkpoint.edge.test.ts``.

Checkpointer edge cases the reference writes for its in-memory backend, run
here on memory, a SQLite file and Postgres; and the task-id helpers that let
``delete_thread`` find a thread's journals. The reference's
``threadJournalPrefixes`` is :func:`ilmek.types.thread_of_task` in Python, and
its ``taskIdFor(thread, null, key)`` ("root") has no Python counterpart: a run
commits its input first (beyond ilmek/1), so every task is planned from a
checkpoint.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest

from ilmek import START, Checkpointer, channel, graph, history, resume, run
from ilmek.errors import InvalidArgumentError
from ilmek.types import new_checkpoint_id, split_task_id, task_id_for, thread_of_task
from tests.support.reference_edge import done, greet_graph, keys_of, make_checkpoint

pytestmark = pytest.mark.timeout(60)


# --- taskIdFor / threadJournalPrefixes -----------------------------------------------------


def test_a_task_id_names_thread_checkpoint_and_task_key() -> None:
    """checkpoint.edge · "a thread's first superstep is planned from root".

    Python plans the first superstep from the input's checkpoint (beyond ilmek/1):
    the id is ``<thread>:<checkpoint>:<task key>`` and splits back into its parts.
    """
    checkpoint_id = new_checkpoint_id()

    task_id = task_id_for("t", checkpoint_id, "work")

    assert f"t:{checkpoint_id}:work" == task_id
    assert ("t", checkpoint_id, "work") == split_task_id(task_id)


def test_later_supersteps_are_keyed_by_the_checkpoint_they_were_planned_from() -> None:
    """checkpoint.edge · "later supersteps are keyed by the checkpoint they were planned from"."""
    assert "t:ckpt-1:worker#2" == task_id_for("t", "ckpt-1", "worker#2")


def test_every_task_id_of_a_thread_maps_back_to_that_thread() -> None:
    """checkpoint.edge · "every task id the engine can produce for a thread matches one of its prefixes"."""
    ids = [task_id_for("t", new_checkpoint_id(), "a"), task_id_for("t", new_checkpoint_id(), "b#0")]

    assert ["t", "t"] == [thread_of_task(task_id) for task_id in ids]


def test_no_task_of_a_lookalike_thread_maps_to_the_thread() -> None:
    """checkpoint.edge · "no prefix of one thread matches a task of a thread that merely shares a …"."""
    foreign = [
        task_id_for("t2", new_checkpoint_id(), "a"),
        task_id_for("tt", new_checkpoint_id(), "a"),
        task_id_for("x", new_checkpoint_id(), "t"),
        task_id_for("t:x", new_checkpoint_id(), "a"),
    ]

    assert ["t2", "tt", "x", "t:x"] == [thread_of_task(task_id) for task_id in foreign]


def test_the_engines_task_ids_are_the_ones_task_id_for_computes(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "the engine's task ids, observed live, are the ones taskIdFor computes".

    ``a`` is planned from the input's checkpoint (beyond ilmek/1), ``b`` from ``a``'s.
    """
    g = (
        graph("ids", {"n": channel.last_write(0)})
        .node("a", lambda state: {"n": 1})
        .node("b", lambda state: {"n": 2})
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )

    result = run(g, {}, thread_id="t-ids", checkpointer=ref_checkpointer)

    starts = [e.task_id for e in result.events if e.type == "node_start"]
    oldest_first = [c.id for c in reversed(history(ref_checkpointer, "t-ids"))]
    assert [task_id_for("t-ids", oldest_first[0], "a"), task_id_for("t-ids", oldest_first[1], "b")] == starts


# --- checkpointer edge cases ---------------------------------------------------------------------


def test_delete_thread_drops_its_journals_and_nobody_elses(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "deleteThread drops that thread's journals and nobody else's"."""
    journal = (done("s#0", "v"),)
    owned = [task_id_for("t", "ckpt-0", "a"), task_id_for("t", new_checkpoint_id(), "b")]
    foreign = [task_id_for("t2", "ckpt-0", "a"), task_id_for("other", "ckpt-0", "t")]
    for task_id in owned + foreign:
        ref_checkpointer.put_journal(task_id, journal)

    ref_checkpointer.delete_thread("t")

    assert [(), ()] == [ref_checkpointer.get_journal(task_id) for task_id in owned]
    assert [journal, journal] == [ref_checkpointer.get_journal(task_id) for task_id in foreign]


def test_a_fresh_run_on_a_deleted_threads_id_never_replays_it(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "a fresh run on a deleted thread's id never replays the deleted conversation"."""

    g = greet_graph()
    options: dict[str, Any] = {"thread_id": "reused", "checkpointer": ref_checkpointer}
    run(g, {"who": "alice"}, **options)
    ref_checkpointer.delete_thread("reused")

    bob = run(g, {"who": "bob"}, **options)

    assert {"hello": "hello bob"} == bob.pending[0].payload
    assert ["hello bob/hi"] == resume(g, "hi", **options).state["log"]


def test_list_with_limit_zero_is_empty_and_a_large_limit_returns_all(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "list with limit 0 is empty; a limit above the count returns everything"."""
    first = make_checkpoint("t")
    ref_checkpointer.put("t", first)
    ref_checkpointer.put("t", make_checkpoint("t", parent_id=first.id))

    assert [] == ref_checkpointer.list("t", limit=0)
    assert 2 == len(ref_checkpointer.list("t", limit=50))


def test_an_empty_thread_id_is_refused_and_a_blank_one_is_a_thread(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "an empty-string thread id is a thread like any other".

    The Python SPEC differs on purpose (issue #11): a thread id is a non-empty
    string on every backend, so "" is an InvalidArgumentError before anything
    is read or written; a blank id such as " " is an id like any other.
    """
    with pytest.raises(InvalidArgumentError, match="thread_id must not be empty"):
        ref_checkpointer.put("", make_checkpoint("", channels={"v": 1}))
    with pytest.raises(InvalidArgumentError, match="thread_id must not be empty"):
        ref_checkpointer.get("")

    ref_checkpointer.put(" ", make_checkpoint(" ", channels={"v": 1}))
    found = ref_checkpointer.get(" ")
    assert found is not None
    assert {"v": 1} == dict(found.channels)


def test_an_empty_checkpoint_id_means_latest(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "an empty-string checkpoint id means latest, like null" (issue #8)."""
    checkpoint = make_checkpoint("t")
    ref_checkpointer.put("t", checkpoint)

    by_empty, by_none = ref_checkpointer.get("t", ""), ref_checkpointer.get("t", None)

    assert (checkpoint.id, checkpoint.id) == (
        by_empty.id if by_empty else None,
        by_none.id if by_none else None,
    )


def test_an_empty_journal_round_trips_as_empty(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "an empty journal round-trips as empty"."""
    ref_checkpointer.put_journal("t:root:n", ())

    assert () == ref_checkpointer.get_journal("t:root:n")


def test_a_multi_megabyte_value_is_stored_and_returned_whole(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "a multi-megabyte value is stored and returned whole"."""
    big = "x" * (5 * 1024 * 1024)
    ref_checkpointer.put("t", make_checkpoint("t", channels={"big": big}))

    found = ref_checkpointer.get("t")

    assert found is not None
    assert len(big) == len(found.channels["big"])
    assert big == found.channels["big"]


def test_unicode_thread_ids_and_journal_keys_match_exactly(ref_checkpointer: Checkpointer) -> None:
    """checkpoint.edge · "unicode thread ids and journal keys are distinct, exact-match keys"."""
    composed, decomposed = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert composed != decomposed
    ref_checkpointer.put(composed, make_checkpoint(composed, channels={"form": "nfc"}))
    ref_checkpointer.put(decomposed, make_checkpoint(decomposed, channels={"form": "nfd"}))
    ref_checkpointer.put_journal("🧶:root:n", (done("🧶#0", "stitch"),))

    forms = [ref_checkpointer.get(thread_id) for thread_id in (composed, decomposed)]

    assert ["nfc", "nfd"] == [found.channels["form"] if found else None for found in forms]
    assert ["🧶#0"] == keys_of(ref_checkpointer.get_journal("🧶:root:n"))
    assert (done("🧶#0", "stitch"),) == ref_checkpointer.get_journal("🧶:root:n")
