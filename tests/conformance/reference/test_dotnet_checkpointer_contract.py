"""Ported from the .NET port's checkpointer contract and the suites that run it.

Three reference files:

* ``dotnet/test/Ilmek.Core.Tests/CheckpointerContract.cs``, the memory
  port's contract (MODEL §7), an abstract class every backend's suite
  inherits. Here every case runs on memory, a SQLite file and Postgres
  through the ``ref_checkpointer`` fixture.
* ``dotnet/test/Ilmek.Checkpointer.Sqlite.Tests/SqliteContractTests.cs`` runs
  that contract on a SQLite file, and
  ``dotnet/test/Ilmek.Core.Tests/InMemoryCheckpointerTests.cs`` runs it in
  memory: both are the parametrization above, so neither adds a case of its
  own but for the three id cases of ``InMemoryCheckpointerTests`` at the end.

The reference's ``Journal`` object is Python's sequence of
:class:`~ilmek.JournalEntry` (``PutDone`` is a ``step`` entry, ``PutPending``
an unanswered ``interrupt``). Where the Python SPEC decides otherwise the
test follows it and says so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    ConcurrentUpdateError,
    JournalEntry,
    Pending,
    ScheduledTask,
    channel,
    graph,
    resume,
    run,
)
from ilmek.events import NodeStart
from ilmek.types import new_checkpoint_id, thread_of_task
from tests.support.reference_edge import done, keys_of, make_checkpoint, pending

pytestmark = pytest.mark.timeout(120)

# --- checkpoints --------------------------------------------------------------------------------


def test_an_unknown_thread_reads_as_none_and_an_empty_list(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.UnknownThread: "contract: get and list on an unknown thread return null and
    empty"."""
    assert None is ref_checkpointer.get("nobody")
    assert None is ref_checkpointer.get("nobody", "ckpt-x")
    assert [] == ref_checkpointer.list("nobody")


def test_an_unknown_checkpoint_id_reads_as_none_not_the_latest(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.UnknownCheckpointId: "contract: get with an unknown id returns null rather than
    falling back to latest"."""
    ref_checkpointer.put("t", make_checkpoint("t"))

    assert None is ref_checkpointer.get("t", "ckpt-does-not-exist")


def test_the_latest_is_the_greatest_id_not_the_last_put(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.LatestIsMaxId: "contract: latest is the max id, not the last put"."""
    older = make_checkpoint("t", step=1)
    newer = make_checkpoint("t", step=2)
    ref_checkpointer.put("t", newer)
    ref_checkpointer.put("t", older)

    latest = ref_checkpointer.get("t")
    by_id = ref_checkpointer.get("t", older.id)

    assert newer.id == (latest.id if latest else None)
    assert older.id == (by_id.id if by_id else None)


def test_putting_the_same_id_twice_keeps_the_first(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.PutSameIdReplaces: "contract: putting the same id twice replaces it".

    Python SPEC §7, "nothing is overwritten": the second put is a
    ``ConcurrentUpdateError`` and the first checkpoint stays, alone.
    """
    first = make_checkpoint("t", step=1, channels={"v": "first"})
    ref_checkpointer.put("t", first)

    with pytest.raises(ConcurrentUpdateError):
        ref_checkpointer.put("t", attrs.evolve(first, step=2, channels={"v": "second"}))

    (only,) = ref_checkpointer.list("t")
    assert (1, "first") == (only.step, only.channels["v"])


def test_threads_are_isolated_even_with_the_same_checkpoint_id(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.ThreadsIsolated: "contract: threads are isolated, even with the same checkpoint
    id"."""
    shared_id = new_checkpoint_id()
    ref_checkpointer.put("a", make_checkpoint("a", id=shared_id, channels={"who": "a"}))
    ref_checkpointer.put("b", make_checkpoint("b", id=shared_id, channels={"who": "b"}))

    of_a = ref_checkpointer.get("a", shared_id)
    of_b = ref_checkpointer.get("b", shared_id)

    assert ("a", "b") == (of_a.channels["who"] if of_a else None, of_b.channels["who"] if of_b else None)
    assert 1 == len(ref_checkpointer.list("a"))


def test_list_is_newest_first_and_honours_its_limit(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.ListOrderAndLimits: "contract: list is newest-first; limit 0 is empty, a limit
    past the count returns all"."""
    made: list[str] = []
    for step in range(4):
        checkpoint = make_checkpoint("t", parent_id=made[-1] if made else None, step=step)
        made.append(checkpoint.id)
        ref_checkpointer.put("t", checkpoint)

    assert made[::-1] == [c.id for c in ref_checkpointer.list("t")]
    assert made[::-1][:2] == [c.id for c in ref_checkpointer.list("t", limit=2)]
    assert [] == ref_checkpointer.list("t", limit=0)
    assert 4 == len(ref_checkpointer.list("t", limit=100))


def test_a_thread_is_a_tree_two_children_may_share_a_parent(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.ThreadIsATree: "contract: a thread is a tree — two children may share one
    parent"."""
    root = make_checkpoint("t")
    left = make_checkpoint("t", parent_id=root.id, step=1)
    right = make_checkpoint("t", parent_id=root.id, step=1)
    for checkpoint in (root, left, right):
        ref_checkpointer.put("t", checkpoint)

    children = sorted(c.id for c in ref_checkpointer.list("t") if c.parent_id == root.id)

    assert sorted([left.id, right.id]) == children


def test_a_checkpoint_round_trips_its_pauses_plan_id_and_send_inputs(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.CheckpointRoundTripsFields: "contract: a checkpoint round-trips its pending
    interrupts, plan id and send inputs".

    The reference's ``ts`` is epoch milliseconds (42); Python's is an aware
    ``datetime``.
    """
    parent = new_checkpoint_id()
    written = make_checkpoint(
        "t",
        parent_id=parent,
        plan_id="ckpt-plan",
        channels={"n": 3, "flag": True, "none": None},
        next=[
            ScheduledTask(node="a", task_key="a"),
            ScheduledTask(node="w", task_key="w#0", is_send=True, input={"id": "x"}),
        ],
        pending=[
            Pending(id="a:interrupt#0", task_id="t:ckpt-plan:a", node="a", key="interrupt#0", payload="q?")
        ],
        step=7,
        ts=dt.datetime.fromtimestamp(0.042, dt.UTC),
    )
    ref_checkpointer.put("t", written)

    back = ref_checkpointer.get("t")

    assert back is not None
    assert (parent, "ckpt-plan", 7) == (back.parent_id, back.plan_id, back.step)
    assert dt.datetime.fromtimestamp(0.042, dt.UTC) == back.ts
    assert "interrupted" == back.status
    assert {"n": 3, "flag": True, "none": None} == dict(back.channels)
    (pause,) = back.pending
    assert ("a:interrupt#0", "t:ckpt-plan:a", "a", "interrupt#0", "q?") == (
        pause.id,
        pause.task_id,
        pause.node,
        pause.key,
        pause.payload,
    )
    assert [("a", "a", False), ("w", "w#0", True)] == [(t.node, t.task_key, t.is_send) for t in back.next]
    assert "x" == back.next[1].input["id"]


TEXT = 'emoji 🧶👩🏽💻 · CJK 编织针 · RTL שלום مرحبا · NUL[\0] · tab\t · quote" · backslash\\'


def test_unicode_round_trips_exactly(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.UnicodeRoundTrips: "contract: unicode — emoji, CJK, RTL and an embedded NUL —
    round-trips exactly".

    In a thread id, a channel value and a journal's task id, key and value.
    The reference also uses the whole text, NUL included, as a channel name;
    Python refuses NUL in channel names (SPEC §2: channel names are strings
    without NUL, since Postgres text cannot hold it), so that name is the
    text without its NUL.
    """
    name = TEXT.replace("\0", "")
    ref_checkpointer.put("t-ü-🧶", make_checkpoint("t-ü-🧶", channels={"s": TEXT, name: "key"}))
    ref_checkpointer.put_journal("task-🧶", [done("step:é🧶#0", TEXT)])

    back = ref_checkpointer.get("t-ü-🧶")

    assert back is not None
    assert (TEXT, "key") == (back.channels["s"], back.channels[name])
    assert (done("step:é🧶#0", TEXT),) == ref_checkpointer.get_journal("task-🧶")


def test_a_multi_megabyte_channel_value_round_trips_intact(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.HugePayloadRoundTrips: "contract: a multi-megabyte channel value round-trips
    intact"."""
    huge = "".join(chr(ord("a") + i % 26) for i in range(4 * 1024 * 1024))
    ref_checkpointer.put("t", make_checkpoint("t", channels={"blob": huge}))

    back = ref_checkpointer.get("t")

    assert back is not None
    assert len(huge) == len(back.channels["blob"])
    assert huge == back.channels["blob"]


def test_delete_thread_drops_that_thread_only(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.DeleteThreadIsolated: "contract: DeleteThread drops that thread only; an unknown
    thread is a no-op"."""
    ref_checkpointer.put("gone", make_checkpoint("gone"))
    ref_checkpointer.put("kept", make_checkpoint("kept"))

    ref_checkpointer.delete_thread("gone")
    ref_checkpointer.delete_thread("never-existed")

    assert None is ref_checkpointer.get("gone")
    assert [] == ref_checkpointer.list("gone")
    assert None is not ref_checkpointer.get("kept")


# --- journals -----------------------------------------------------------------------------------


def test_an_unknown_tasks_journal_is_empty_and_an_empty_journal_round_trips(
    ref_checkpointer: Checkpointer,
) -> None:
    """CheckpointerContract.EmptyJournals: "contract: an unknown task's journal is fresh and empty; an empty
    journal round-trips"."""
    assert () == ref_checkpointer.get_journal("nobody")

    ref_checkpointer.put_journal("empty", ())

    assert () == ref_checkpointer.get_journal("empty")


def test_a_journal_round_trips_entries_order_and_open_pauses(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.JournalRoundTrips: "contract: a journal round-trips entries, order and pending
    status"."""
    written = (done("b#0", "B"), pending("interrupt#0", "question?"), done("a#0", 1), done("nil#0", None))
    ref_checkpointer.put_journal("task", written)

    back = ref_checkpointer.get_journal("task")

    assert ["b#0", "interrupt#0", "a#0", "nil#0"] == keys_of(back)
    assert ("B", 1) == (back[0].value, back[2].value)
    assert ("step", None) == (back[3].kind, back[3].value)
    assert [("interrupt#0", "question?")] == [
        (e.key, e.payload) for e in back if e.kind == "interrupt" and not e.answered
    ]


def test_a_put_stores_a_snapshot_and_every_get_is_independent(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.JournalSnapshots: "contract: a put stores a snapshot, and each get hands out an
    independent journal".

    Python's journals are sequences of frozen entries: a list changed after
    the put must not leak in, and a get hands out an immutable tuple.
    """
    entries: list[JournalEntry] = [done("a#0", "A")]
    ref_checkpointer.put_journal("task", entries)
    entries.append(done("b#0", "B"))

    first = ref_checkpointer.get_journal("task")
    second = ref_checkpointer.get_journal("task")

    assert isinstance(first, tuple)
    assert ["a#0"] == keys_of(second)


def test_drop_journal_makes_a_task_look_unstarted(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.DropJournal: "contract: DropJournal makes a task look unstarted; dropping an
    unknown task is a no-op"."""
    journal = (done("a#0", "A"),)
    ref_checkpointer.put_journal("task", journal)
    ref_checkpointer.put_journal("other", journal)

    ref_checkpointer.drop_journal("task")
    ref_checkpointer.drop_journal("never")

    assert () == ref_checkpointer.get_journal("task")
    assert ["a#0"] == keys_of(ref_checkpointer.get_journal("other"))


def test_delete_thread_drops_that_threads_journals_and_only_those(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.DeleteThreadDropsItsJournals: "contract: DeleteThread drops the thread's journals,
    and only that thread's".

    Task ids as the engine builds them, ``<thread>:<checkpoint>:<task key>``;
    the other threads' ids share a prefix with ``t`` or would match it as a
    ``LIKE`` pattern.
    """
    journal = (done("greet#0", "hello"), pending("interrupt#0", "?"))
    mine = ["t:root:w", f"t:{new_checkpoint_id()}:w", "t:root:worker#0"]
    others = ["t2:root:w", "t%:root:w", "t_:root:w", "tt:root:w", f"t2:{new_checkpoint_id()}:w"]
    for task_id in mine + others:
        ref_checkpointer.put_journal(task_id, journal)

    ref_checkpointer.delete_thread("t")

    assert dict.fromkeys(mine, ()) == {task_id: ref_checkpointer.get_journal(task_id) for task_id in mine}
    assert {task_id: ["greet#0", "interrupt#0"] for task_id in others} == {
        task_id: keys_of(ref_checkpointer.get_journal(task_id)) for task_id in others
    }


def test_delete_thread_with_sql_wildcards_in_its_id_drops_only_its_journals(
    ref_checkpointer: Checkpointer,
) -> None:
    """CheckpointerContract.DeleteThreadWildcardIds: "contract: DeleteThread on an id with SQL wildcards
    removes only that thread's journals"."""
    journal = (done("s#0", "v"),)
    for task_id in ("a%_:root:w", "abc:root:w", "a%_x:root:w"):
        ref_checkpointer.put_journal(task_id, journal)

    ref_checkpointer.delete_thread("a%_")

    assert () == ref_checkpointer.get_journal("a%_:root:w")
    assert 1 == len(ref_checkpointer.get_journal("abc:root:w"))
    assert 1 == len(ref_checkpointer.get_journal("a%_x:root:w"))


def test_a_deleted_threads_id_starts_clean(ref_checkpointer: Checkpointer) -> None:
    """CheckpointerContract.DeletedThreadDoesNotLeak: "contract: a deleted thread's id starts clean — a new
    run does not replay the old conversation".

    Alice pauses in the first superstep; after the thread is deleted, Bob's
    run on the same id must run its own greet step and ask his own question.
    """
    greets: list[str] = []

    def greet(who: str) -> str:
        greets.append(who)
        return f"hello {who}"

    def w(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        greeting = ctx.step("greet", greet, state["who"])
        ok = ctx.interrupt({"q": f"{greeting}, proceed?"})
        return {"log": [f"{greeting}:{ok}"]}

    g = (
        graph("greeter", {"who": channel.last_write(""), "log": channel.append()})
        .node("w", w)
        .edge(START, "w")
        .edge("w", END)
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "t", "checkpointer": ref_checkpointer}

    alice = run(g, {"who": "alice"}, **opts)
    assert "interrupted" == alice.status
    ref_checkpointer.delete_thread("t")

    bob = run(g, {"who": "bob"}, **opts)

    assert "interrupted" == bob.status
    assert ["alice", "bob"] == greets
    (pause,) = bob.pending
    assert "hello bob, proceed?" == pause.payload["q"]
    assert ["hello bob:yes"] == resume(g, "yes", **opts).state["log"]


# --- InMemoryCheckpointerTests.cs: the id helpers ----------------------------------------------------


def test_checkpoint_ids_sort_in_generation_order_and_are_unique() -> None:
    """InMemoryCheckpointerTests.GeneratedIdsSortAndAreUnique: "checkpoint ids sort lexically in generation
    order and are unique within a millisecond".

    The reference's ids start with ``ckpt-``; SPEC §7 fixes no prefix, only
    the order, so a fixed width is what is checked.
    """
    made = [new_checkpoint_id() for _ in range(2000)]

    assert sorted(made) == made
    assert len(made) == len(set(made))
    assert 1 == len({len(checkpoint_id) for checkpoint_id in made})


def test_an_engine_task_id_names_its_thread() -> None:
    """InMemoryCheckpointerTests.ThreadJournalPrefixes: "ThreadJournalPrefixes covers the engine's root and
    checkpoint-planned task ids".

    Python's task ids are always ``<thread>:<checkpoint>:<task key>`` (no
    ``root`` form), and a backend finds a journal's thread with
    ``thread_of_task`` rather than by prefix; thread ids and task keys may
    hold ``:``.
    """
    assert "t-1" == thread_of_task(f"t-1:{new_checkpoint_id()}:w")
    assert "t-1" == thread_of_task(f"t-1:{new_checkpoint_id()}:worker#0")
    assert "t:1" == thread_of_task(f"t:1:{new_checkpoint_id()}:a:b")


def test_the_engines_task_ids_for_a_thread_all_name_that_thread(ref_checkpointer: Checkpointer) -> None:
    """InMemoryCheckpointerTests.EngineTaskIdsMatchPrefixes: "the engine's task ids for a thread all start
    with one of its journal prefixes"."""
    g = (
        graph("ids", {"n": channel.last_write(0)})
        .node("a", lambda state: {"n": 1})
        .node("b", lambda state, ctx: ctx.interrupt())
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    result = run(g, None, thread_id="tid", checkpointer=ref_checkpointer)

    task_ids = [e.task_id for e in result.events if isinstance(e, NodeStart)]
    assert 2 == len(task_ids)
    assert ["tid", "tid"] == [thread_of_task(task_id) for task_id in task_ids]
    assert all(task_id.startswith("tid:") for task_id in task_ids)
