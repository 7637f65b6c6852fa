"""The checkpointer conformance suite: one set of tests, run on every backend.

Every test takes the ``checkpointer`` fixture of ``tests/conftest.py`` and uses
only the port and host API of :class:`ilmek.Checkpointer` and the value types
of :mod:`ilmek.types`, so a backend joins the suite by joining that fixture.

Where the contract leaves room, this suite decides:

* ``ts`` comes back aware, in UTC, and the same instant to the millisecond; a
  backend may keep microseconds but need not.
* A ``list_threads`` metadata filter matches a stored value that is equal and
  of the same JSON type (``1`` matches neither ``True`` nor ``"1"``); a nested
  dict matches as a whole value, whatever its key order, never as a subset.
* Putting a checkpoint under another thread's id is a ``ValueError``.
* A thread that has metadata but no checkpoint yet has ``checkpoint_id`` None
  and step 0; its status is left open.
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import pytest

from ilmek import (
    Checkpoint,
    Checkpointer,
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    JournalEntry,
    Pending,
    ScheduledTask,
    SerializationError,
    ThreadBusyError,
    ThreadInfo,
)
from ilmek.types import Extend, Replace, ThreadStatus, new_checkpoint_id, task_id_for

pytestmark = pytest.mark.timeout(60)

UTC = dt.UTC
TASK = ScheduledTask(node="agent", task_key="agent")


# --- helpers -----------------------------------------------------------------------------


def cid(n: int) -> str:
    """The n-th checkpoint id of a test; ids sort as their numbers do."""
    return f"c{n:04d}"


def make_checkpoint(
    thread_id: str, checkpoint_id: str, parent_id: str | None = None, **channels: Any
) -> Checkpoint:
    """A checkpoint holding ``channels`` and nothing else; ``attrs.evolve`` sets the rest."""
    return Checkpoint(
        id=checkpoint_id,
        thread_id=thread_id,
        parent_id=parent_id,
        plan_id=checkpoint_id,
        channels=channels,
    )


def pause(thread_id: str, checkpoint_id: str = "c0000", payload: Any = None) -> Pending:
    """An open pause of the ``agent`` task run from ``checkpoint_id``."""
    return Pending(
        id="agent:interrupt#0",
        task_id=task_id_for(thread_id, checkpoint_id, "agent"),
        node="agent",
        key="interrupt#0",
        payload=payload,
    )


def put_chain(checkpointer: Checkpointer, thread_id: str, states: Iterable[Mapping[str, Any]]) -> list[str]:
    """Put one checkpoint per state, each the child of the one before; return their ids."""
    ids: list[str] = []
    for n, channels in enumerate(states):
        parent = ids[-1] if ids else None
        ids.append(cid(n))
        checkpointer.put(thread_id, make_checkpoint(thread_id, cid(n), parent, **channels))
    return ids


def ids_of(records: Iterable[Checkpoint | ThreadInfo]) -> list[str]:
    """The ids of checkpoints or threads, in the order given."""
    return [record.id for record in records]


def thread_info(checkpointer: Checkpointer, thread_id: str) -> ThreadInfo:
    """``get_thread`` of a thread that must exist."""
    info = checkpointer.get_thread(thread_id)
    assert info is not None, f"thread {thread_id!r} is missing"
    return info


def channels_at(
    checkpointer: Checkpointer, thread_id: str, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """The channel values of a checkpoint as a plain dict (a ``<missing>`` key marks a missing one)."""
    found = checkpointer.get(thread_id, checkpoint_id)
    return dict(found.channels) if found is not None else {"<missing>": checkpoint_id}


def typed(value: Any) -> Any:
    """``value`` with every part's type shown (``1`` is not ``True``), dicts and sets in a fixed order."""
    if type(value) is dict:
        return ("dict", sorted(((typed(k), typed(v)) for k, v in value.items()), key=repr))
    if type(value) in (list, tuple):
        return (type(value).__name__, [typed(item) for item in value])
    if type(value) in (set, frozenset):
        return (type(value).__name__, sorted(repr(typed(item)) for item in value))
    # repr keeps what == hides: a Decimal's exponent, a datetime's zone, -0.0.
    return (type(value).__name__, repr(value))


def assert_same_instant(expected: dt.datetime, actual: dt.datetime) -> None:
    """``actual`` is aware, in UTC, and ``expected`` to the millisecond."""
    assert dt.timedelta(0) == actual.utcoffset()
    assert abs(expected - actual) < dt.timedelta(milliseconds=1)


def wait_for_clock_tick() -> None:
    """Sleep long enough that the next write gets a later timestamp than the last one."""
    time.sleep(0.005)


# --- 1. put / get --------------------------------------------------------------------------

FULL_TS = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def full_checkpoint(thread_id: str) -> Checkpoint:
    """A checkpoint with every field set to something a lazy backend could get wrong."""
    return Checkpoint(
        id="c0002",
        thread_id=thread_id,
        parent_id="c0001",
        plan_id="c0001",
        channels={
            "messages": [
                {"role": "user", "text": "hi"},
                {"role": "bot", "text": "yo", "meta": {"scores": [1, 2.5, None, True], "deep": {"a": {}}}},
            ],
            "cart": {"items": ["coffee", "mug"], "total": 249.9, "paid": False},
            "count": 3,
            "nothing": None,
            "empty_list": [],
            "empty_dict": {},
        },
        next=(
            TASK,
            ScheduledTask(
                node="worker", task_key="worker#0", is_send=True, input={"job": 1, "args": ("a", 2)}
            ),
            ScheduledTask(node="worker", task_key="worker#1", is_send=True, input=[1, [2, 3]]),
        ),
        pending=(pause(thread_id, "c0001", {"question": "Charge 249.9?", "options": ["yes", "no"]}),),
        task_journals={
            "agent": (
                JournalEntry(key="create_order#0", value={"id": 7, "total": 249.9}),
                JournalEntry(key="interrupt#0", kind="interrupt", payload={"question": "Charge 249.9?"}),
            ),
            "worker#0": (JournalEntry(key="fetch#0", value=None),),
        },
        step=7,
        ts=FULL_TS,
        metadata={"source": "loop", "run_id": "r-1", "writes": {"agent": {"count": 3}}},
    )


def test_put_then_get_round_trips_every_field(checkpointer: Checkpointer) -> None:
    """Every field of a checkpoint comes back from ``get`` as it was put (``ts`` to the millisecond)."""
    checkpointer.put("t", make_checkpoint("t", "c0001", count=1))
    expected = full_checkpoint("t")
    checkpointer.put("t", expected)

    for found in (checkpointer.get("t", "c0002"), checkpointer.get("t")):
        assert found is not None
        assert_same_instant(FULL_TS, found.ts)
        assert expected == attrs.evolve(found, ts=FULL_TS)
        assert typed(dict(expected.channels)) == typed(dict(found.channels))


def test_a_first_checkpoint_has_no_parent(checkpointer: Checkpointer) -> None:
    """``parent_id`` and ``plan_id`` of ``None`` come back as ``None``, ``step`` 0 as 0."""
    checkpointer.put("t", attrs.evolve(make_checkpoint("t", "c0001"), plan_id=None))

    found = checkpointer.get("t")

    assert found is not None
    assert (None, None, 0, {}) == (found.parent_id, found.plan_id, found.step, dict(found.channels))


def test_get_returns_the_greatest_id_even_when_put_out_of_order(checkpointer: Checkpointer) -> None:
    """The latest checkpoint is the one with the greatest id, not the one put last."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=1))
    checkpointer.put("t", make_checkpoint("t", "c0003", "c0001", n=3))
    checkpointer.put("t", make_checkpoint("t", "c0002", "c0001", n=2))

    assert {"n": 3} == channels_at(checkpointer, "t")
    assert ["c0003", "c0002", "c0001"] == ids_of(checkpointer.list("t"))


def test_ids_from_new_checkpoint_id_order_checkpoints_as_made(checkpointer: Checkpointer) -> None:
    """Checkpoints named by ``new_checkpoint_id`` list in the order they were made."""
    made: list[str] = []
    for n in range(5):
        made.append(new_checkpoint_id(after=made[-1] if made else None))
        checkpointer.put("t", make_checkpoint("t", made[-1], made[-2] if n else None, n=n))

    assert made[::-1] == ids_of(checkpointer.list("t"))
    assert {"n": 4} == channels_at(checkpointer, "t")


def test_get_of_an_unknown_checkpoint_id_is_none(checkpointer: Checkpointer) -> None:
    """An id the thread never had reads as ``None``."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))

    assert None is checkpointer.get("t", "c0009")


def test_get_of_another_threads_checkpoint_is_none(checkpointer: Checkpointer) -> None:
    """A checkpoint id of thread ``a`` asked of thread ``b`` reads as ``None``."""
    checkpointer.put("a", make_checkpoint("a", "c0001", secret=1))
    checkpointer.put("b", make_checkpoint("b", "c0002"))

    assert None is checkpointer.get("b", "c0001")


def test_get_of_an_unknown_thread_is_none(checkpointer: Checkpointer) -> None:
    """A thread with no checkpoint reads as ``None``, latest or by id."""
    assert None is checkpointer.get("nobody")
    assert None is checkpointer.get("nobody", "c0001")


def test_put_refuses_a_checkpoint_of_another_thread(checkpointer: Checkpointer) -> None:
    """A checkpoint put under another thread's id is a ValueError, and nothing is written."""
    with pytest.raises(ValueError, match="'a'"):
        checkpointer.put("b", make_checkpoint("a", "c0001"))

    assert (None, None) == (checkpointer.get("a"), checkpointer.get("b"))


def test_a_stored_checkpoint_is_never_overwritten(checkpointer: Checkpointer) -> None:
    """Putting an id the thread already has is ConcurrentUpdateError; the stored one stays as it was."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=1))

    with pytest.raises(ConcurrentUpdateError, match="c0001"):
        checkpointer.put("t", make_checkpoint("t", "c0001", n=2))

    assert {"n": 1} == channels_at(checkpointer, "t")


# --- 2. list -------------------------------------------------------------------------------


@pytest.fixture
def five(checkpointer: Checkpointer) -> Checkpointer:
    """A checkpointer whose thread ``t`` has checkpoints c0000..c0004, one after the other."""
    put_chain(checkpointer, "t", ({"n": n, "log": list(range(n + 1))} for n in range(5)))
    return checkpointer


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [4, 3, 2, 1, 0]),
        ({"limit": 2}, [4, 3]),
        ({"limit": 0}, []),
        ({"limit": 99}, [4, 3, 2, 1, 0]),
        ({"before": cid(3)}, [2, 1, 0]),
        ({"before": cid(0)}, []),
        ({"before": "c0002x"}, [2, 1, 0]),
        ({"before": "d"}, [4, 3, 2, 1, 0]),
        ({"limit": 2, "before": cid(4)}, [3, 2]),
        ({"limit": 5, "before": cid(2)}, [1, 0]),
    ],
)
def test_list_is_newest_first_within_limit_and_before(
    five: Checkpointer, options: dict[str, Any], expected: list[int]
) -> None:
    """``list`` is newest first; ``limit`` caps it; ``before`` keeps ids sorting before that one."""
    assert [cid(n) for n in expected] == ids_of(five.list("t", **options))


def test_list_of_an_unknown_thread_is_empty(five: Checkpointer) -> None:
    """A thread with no checkpoint lists nothing, and ``t`` does not leak into it."""
    assert [] == five.list("nobody")
    assert [] == five.list("t%")


def test_list_records_equal_what_get_returns(five: Checkpointer) -> None:
    """Each listed record, channels included, equals ``get`` of the same id."""
    listed = five.list("t")

    assert 5 == len(listed)
    for record in listed:
        assert five.get("t", record.id) == record
        assert {"n": int(record.id[1:]), "log": list(range(int(record.id[1:]) + 1))} == dict(record.channels)


def test_listed_records_keep_their_own_values_after_later_writes(five: Checkpointer) -> None:
    """Records listed before more checkpoints are written still load the values they were listed with."""
    listed = five.list("t")
    five.put("t", make_checkpoint("t", cid(5), cid(4), n=5, log=list(range(7))))
    five.put("t", make_checkpoint("t", cid(6), cid(2), n=6, log=[0, 1, 2, "fork"]))

    expected = [{"n": n, "log": list(range(n + 1))} for n in (4, 3, 2, 1, 0)]
    assert expected == [dict(record.channels) for record in listed]


# --- 3. channel storage --------------------------------------------------------------------


def test_a_list_growing_by_a_suffix_keeps_every_version(checkpointer: Checkpointer) -> None:
    """A list that grows reads whole at the child and unchanged at the parent."""
    put_chain(checkpointer, "t", [{"log": ["a"]}, {"log": ["a", "b", "c"]}, {"log": ["a", "b", "c"]}])

    assert {"log": ["a"]} == channels_at(checkpointer, "t", cid(0))
    assert {"log": ["a", "b", "c"]} == channels_at(checkpointer, "t", cid(1))
    assert {"log": ["a", "b", "c"]} == channels_at(checkpointer, "t", cid(2))


@pytest.mark.parametrize(
    "versions",
    [
        pytest.param([["a", "b", "c"], ["x"], ["x", "y"]], id="shorter-then-grows"),
        pytest.param([["a", "b"], ["a", "c"], ["a", "c", "d"]], id="same-length-other-item"),
        pytest.param([["a"], [], ["z"]], id="emptied"),
        pytest.param([[1, 2], "now text", [3]], id="list-text-list"),
        pytest.param([{"k": 1}, [{"k": 1}], [{"k": 1}, {"k": 2}]], id="dict-to-list"),
        pytest.param([["a"], ("a", "b"), ["a", "b"]], id="list-tuple-list"),
    ],
)
def test_a_replaced_value_reads_as_replaced_at_every_checkpoint(
    checkpointer: Checkpointer, versions: list[Any]
) -> None:
    """Lists replaced by other lists or other types read back exactly, version by version."""
    ids = put_chain(checkpointer, "t", ({"v": version} for version in versions))

    for checkpoint_id, version in zip(ids, versions, strict=True):
        assert typed({"v": version}) == typed(channels_at(checkpointer, "t", checkpoint_id))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"n": 1}, {"n": True}, id="dict-int-to-bool"),
        pytest.param([1], [1.0], id="list-int-to-float"),
        pytest.param([1], [True, 2], id="list-prefix-int-to-bool"),
    ],
)
def test_a_value_changing_type_but_not_equality_is_stored(
    checkpointer: Checkpointer, before: Any, after: Any
) -> None:
    """A child whose value equals its parent's under ``==`` but differs in type reads as the child's."""
    put_chain(checkpointer, "t", [{"v": before}, {"v": after}])

    assert typed({"v": after}) == typed(channels_at(checkpointer, "t"))


def test_a_channel_removed_in_a_child_is_absent_there_only(checkpointer: Checkpointer) -> None:
    """A channel missing from a child is not inherited from its parent; the parent keeps it."""
    put_chain(checkpointer, "t", [{"a": 1, "log": ["x"], "gone": {"k": 1}}, {"a": 1}, {"a": 2, "log": ["y"]}])

    assert {"a": 1, "log": ["x"], "gone": {"k": 1}} == channels_at(checkpointer, "t", cid(0))
    assert {"a": 1} == channels_at(checkpointer, "t", cid(1))
    assert {"a": 2, "log": ["y"]} == channels_at(checkpointer, "t", cid(2))


def test_the_branches_of_a_fork_keep_their_own_items(checkpointer: Checkpointer) -> None:
    """Two children of one parent append different items; both read right and the parent is unchanged."""
    put = checkpointer.put
    put("t", make_checkpoint("t", "c0001", log=["a"], note="root"))
    put("t", make_checkpoint("t", "c0002", "c0001", log=["a", "b"], note="left"))
    put("t", make_checkpoint("t", "c0003", "c0001", log=["a", "c"], note="root"))
    put("t", make_checkpoint("t", "c0004", "c0002", log=["a", "b", "d"], note="left"))
    put("t", make_checkpoint("t", "c0005", "c0003", log=["a", "c", "e"], note="right"))
    put("t", make_checkpoint("t", "c0006", "c0002", log=["a", "b", "f"], note="left again"))

    assert {"log": ["a"], "note": "root"} == channels_at(checkpointer, "t", "c0001")
    assert {"log": ["a", "b"], "note": "left"} == channels_at(checkpointer, "t", "c0002")
    assert {"log": ["a", "c"], "note": "root"} == channels_at(checkpointer, "t", "c0003")
    assert {"log": ["a", "b", "d"], "note": "left"} == channels_at(checkpointer, "t", "c0004")
    assert {"log": ["a", "c", "e"], "note": "right"} == channels_at(checkpointer, "t", "c0005")
    assert {"log": ["a", "b", "f"], "note": "left again"} == channels_at(checkpointer, "t", "c0006")


def test_a_deep_chain_has_every_item_in_order(checkpointer: Checkpointer) -> None:
    """200 checkpoints appending one item each: the latest has all 200, a middle one its prefix."""
    ids = put_chain(checkpointer, "t", ({"log": list(range(n + 1)), "n": n} for n in range(200)))

    assert {"log": list(range(200)), "n": 199} == channels_at(checkpointer, "t")
    assert {"log": list(range(100)), "n": 99} == channels_at(checkpointer, "t", ids[99])
    assert 200 == len(checkpointer.list("t"))


def test_an_empty_list_channel_reads_as_an_empty_list_and_grows(checkpointer: Checkpointer) -> None:
    """``[]`` comes back as ``[]`` (a list) and can then be appended to."""
    put_chain(checkpointer, "t", [{"log": []}, {"log": ["a"]}])

    assert typed({"log": []}) == typed(channels_at(checkpointer, "t", cid(0)))
    assert {"log": ["a"]} == channels_at(checkpointer, "t", cid(1))


def test_a_child_of_an_unknown_parent_stores_its_full_values(checkpointer: Checkpointer) -> None:
    """A checkpoint whose parent was never stored still reads back whole."""
    checkpointer.put("t", make_checkpoint("t", "c0005", "c0004", log=["a", "b"], n=5))

    assert {"log": ["a", "b"], "n": 5} == channels_at(checkpointer, "t")


# --- 4. journals ---------------------------------------------------------------------------

JOURNAL = (
    JournalEntry(key="charge#0", value={"charged": 249.9, "ids": (1, 2)}),
    JournalEntry(key="empty#0", value=None),
    JournalEntry(key="interrupt#0", kind="interrupt", payload={"question": "Charge?"}),
    JournalEntry(key="interrupt#1", kind="interrupt", payload=["a", "b"], value="yes", answered=True),
    JournalEntry(key="interrupt#2", kind="interrupt", payload=None, value=None, answered=True),
)


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


# --- 5. delete_thread and thread ids that look alike ---------------------------------------

LOOKALIKE_IDS = [
    "t",
    "t%",
    "t_",
    "t2",
    "T",
    "t:x",
    "t\\",
    "t ",
    "🧵",
    'it\'s "quoted"',
    "x'; DROP TABLE ilmek_checkpoints; --",
]


def populate(checkpointer: Checkpointer, thread_id: str) -> None:
    """Give a thread two checkpoints, a journal and metadata, all naming the thread."""
    checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001", log=[thread_id], owner=thread_id))
    checkpointer.put(
        thread_id, make_checkpoint(thread_id, "c0002", "c0001", log=[thread_id, 2], owner=thread_id)
    )
    checkpointer.put_journal(
        task_id_for(thread_id, "c0001", "agent"), [JournalEntry(key="k#0", value=thread_id)]
    )
    checkpointer.put_thread_metadata(thread_id, {"owner": thread_id})


def assert_populated(checkpointer: Checkpointer, thread_id: str) -> None:
    """Everything :func:`populate` wrote for the thread is there and names that thread."""
    assert {"log": [thread_id, 2], "owner": thread_id} == channels_at(checkpointer, thread_id)
    assert {"log": [thread_id], "owner": thread_id} == channels_at(checkpointer, thread_id, "c0001")
    assert ["c0002", "c0001"] == ids_of(checkpointer.list(thread_id))
    assert (JournalEntry(key="k#0", value=thread_id),) == checkpointer.get_journal(
        task_id_for(thread_id, "c0001", "agent")
    )
    info = thread_info(checkpointer, thread_id)
    assert (thread_id, "c0002", {"owner": thread_id}) == (info.id, info.checkpoint_id, dict(info.metadata))
    assert [thread_id, 2] == checkpointer.read_channel(thread_id, "log")


def assert_gone(checkpointer: Checkpointer, thread_id: str) -> None:
    """Nothing of the thread is left: checkpoints, journals, thread record."""
    assert None is checkpointer.get(thread_id)
    assert None is checkpointer.get(thread_id, "c0001")
    assert [] == checkpointer.list(thread_id)
    assert () == checkpointer.get_journal(task_id_for(thread_id, "c0001", "agent"))
    assert None is checkpointer.get_thread(thread_id)
    assert thread_id not in ids_of(checkpointer.list_threads())


@pytest.mark.parametrize("thread_id", LOOKALIKE_IDS)
def test_any_text_works_as_a_thread_id(checkpointer: Checkpointer, thread_id: str) -> None:
    """Put, get, list, journals, the host API and delete all work for ids with %, _, quotes, emoji, SQL."""
    populate(checkpointer, thread_id)

    assert_populated(checkpointer, thread_id)
    assert [thread_id] == ids_of(checkpointer.list_threads())

    checkpointer.delete_thread(thread_id)

    assert_gone(checkpointer, thread_id)


def test_delete_thread_leaves_lookalike_threads_untouched(checkpointer: Checkpointer) -> None:
    """Deleting any one of the look-alike ids removes only it; each is deleted in turn, then restored."""
    for thread_id in LOOKALIKE_IDS:
        populate(checkpointer, thread_id)

    for target in LOOKALIKE_IDS:
        checkpointer.delete_thread(target)

        assert_gone(checkpointer, target)
        for other in LOOKALIKE_IDS:
            if other != target:
                assert_populated(checkpointer, other)
        populate(checkpointer, target)


def test_delete_thread_of_an_unknown_thread_is_fine(checkpointer: Checkpointer) -> None:
    """Deleting a thread that does not exist does nothing and raises nothing."""
    populate(checkpointer, "t")

    checkpointer.delete_thread("nobody")
    checkpointer.delete_thread("t%")

    assert_populated(checkpointer, "t")


def test_a_deleted_thread_id_starts_afresh(checkpointer: Checkpointer) -> None:
    """After ``delete_thread`` the id can be used again and nothing old shows through."""
    populate(checkpointer, "t")
    checkpointer.delete_thread("t")

    checkpointer.put("t", make_checkpoint("t", "c0001", fresh=True))

    assert {"fresh": True} == channels_at(checkpointer, "t")
    assert ["c0001"] == ids_of(checkpointer.list("t"))
    info = thread_info(checkpointer, "t")
    assert {} == dict(info.metadata)
    assert [] == checkpointer.read_channel("t", "log")


# --- 6. the host API: threads ----------------------------------------------------------------


def put_with_status(
    checkpointer: Checkpointer, thread_id: str, status: ThreadStatus, checkpoint_id: str = "c0001"
) -> None:
    """Put a checkpoint that leaves the thread ``done``, ``interrupted`` or ``unfinished``."""
    checkpoint = make_checkpoint(thread_id, checkpoint_id)
    if status == "interrupted":
        # Pauses win over scheduled tasks: a paused superstep still lists its tasks.
        checkpoint = attrs.evolve(checkpoint, next=(TASK,), pending=(pause(thread_id, checkpoint_id),))
    elif status == "unfinished":
        checkpoint = attrs.evolve(checkpoint, next=(TASK,))
    checkpointer.put(thread_id, checkpoint)


def test_list_threads_puts_the_most_recently_updated_first(checkpointer: Checkpointer) -> None:
    """Threads list by their last update, newest first; a new checkpoint or new metadata moves one up."""
    for thread_id in ("b", "c", "a"):
        checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001"))
        wait_for_clock_tick()
    assert ["a", "c", "b"] == ids_of(checkpointer.list_threads())

    checkpointer.put("b", make_checkpoint("b", "c0002", "c0001"))
    wait_for_clock_tick()
    assert ["b", "a", "c"] == ids_of(checkpointer.list_threads())

    checkpointer.put_thread_metadata("c", {"touched": True})
    assert ["c", "b", "a"] == ids_of(checkpointer.list_threads())


def test_list_threads_is_empty_without_threads(checkpointer: Checkpointer) -> None:
    """A fresh store lists no threads."""
    assert [] == checkpointer.list_threads()


@pytest.mark.parametrize(
    ("search", "expected"),
    [
        ("order", {"Order-42", "order-7", "ORDERS"}),
        ("ORDER-", {"Order-42", "order-7"}),
        ("rs", {"ORDERS"}),
        ("%", {"t%"}),
        ("_", {"t_"}),
        ("\\", {"t\\x"}),
        ("'", {"it's"}),
        ("🧵", {"🧵 thread"}),
        ("nothing like it", set()),
    ],
)
def test_list_threads_search_is_a_case_insensitive_substring(
    checkpointer: Checkpointer, search: str, expected: set[str]
) -> None:
    """``search`` keeps ids containing the text, ignoring ASCII case; %, _ and \\ are literal."""
    for thread_id in ("Order-42", "order-7", "ORDERS", "invoice-1", "t%", "t_", "t\\x", "it's", "🧵 thread"):
        checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001"))

    assert expected == set(ids_of(checkpointer.list_threads(search=search)))


METADATA = {
    "a": {
        "team": "x",
        "n": 1,
        "flag": True,
        "note": None,
        "cfg": {"k": "v", "depth": 2},
        "zero": 0,
        "tags": ["a", "b"],
    },
    "b": {"team": "x", "n": True, "flag": False, "zero": False},
    "c": {"team": "y", "n": 1, "cfg": {"k": "v"}, "tags": ["a"]},
    "d": {"team": "x", "n": "1", "flag": 1},
    "e": {},
}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"team": "x"}, {"a", "b", "d"}, id="str"),
        pytest.param({"team": "x", "n": 1}, {"a"}, id="two-keys"),
        pytest.param({"team": "y", "n": 1, "cfg": {"k": "v"}}, {"c"}, id="three-keys"),
        pytest.param({"team": "X"}, set(), id="values-are-case-sensitive"),
        pytest.param({"n": 1}, {"a", "c"}, id="int-is-not-bool-or-str"),
        pytest.param({"n": True}, {"b"}, id="bool-is-not-int"),
        pytest.param({"n": "1"}, {"d"}, id="str-is-not-int"),
        pytest.param({"flag": True}, {"a"}, id="true-is-not-1"),
        pytest.param({"zero": 0}, {"a"}, id="zero-is-not-false"),
        pytest.param({"zero": False}, {"b"}, id="false-is-not-zero"),
        pytest.param({"note": None}, {"a"}, id="none-needs-the-key"),
        pytest.param({"missing": None}, set(), id="absent-key-is-not-none"),
        pytest.param({"cfg": {"k": "v", "depth": 2}}, {"a"}, id="nested-dict"),
        pytest.param({"tags": ["a", "b"]}, {"a"}, id="list"),
    ],
)
def test_list_threads_metadata_filter_matches_equal_values_of_the_same_type(
    checkpointer: Checkpointer, metadata: dict[str, Any], expected: set[str]
) -> None:
    """Every filter pair must be in the thread's metadata, equal and of the same type."""
    for thread_id, thread_metadata in METADATA.items():
        checkpointer.put_thread_metadata(thread_id, thread_metadata)

    assert expected == set(ids_of(checkpointer.list_threads(metadata=metadata)))


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"cfg": {"k": "v"}}, {"c"}, id="dict-part"),
        pytest.param({"cfg": {}}, set(), id="empty-dict"),
        pytest.param({"tags": ["a"]}, {"c"}, id="list-part"),
        pytest.param({"tags": ["b", "a"]}, set(), id="list-reordered"),
        pytest.param({"tags": []}, set(), id="empty-list"),
    ],
)
def test_list_threads_metadata_filter_compares_nested_values_whole(
    checkpointer: Checkpointer, metadata: dict[str, Any], expected: set[str]
) -> None:
    """A dict or list in the filter must equal the stored one, not be contained in it."""
    for thread_id, thread_metadata in METADATA.items():
        checkpointer.put_thread_metadata(thread_id, thread_metadata)

    assert expected == set(ids_of(checkpointer.list_threads(metadata=metadata)))


def test_list_threads_metadata_filter_ignores_nested_key_order(checkpointer: Checkpointer) -> None:
    """A nested dict filter matches an equal dict whose keys were written in another order."""
    checkpointer.put_thread_metadata("a", {"cfg": {"k": "v", "depth": 2}})

    assert ["a"] == ids_of(checkpointer.list_threads(metadata={"cfg": {"depth": 2, "k": "v"}}))


@pytest.fixture
def statuses(checkpointer: Checkpointer) -> Checkpointer:
    """Threads ``d1``, ``d2`` (done), ``i1`` (interrupted), ``u1``, ``u2`` (unfinished)."""
    for thread_id, status in [
        ("d1", "done"),
        ("i1", "interrupted"),
        ("u1", "unfinished"),
        ("d2", "done"),
        ("u2", "unfinished"),
    ]:
        put_with_status(checkpointer, thread_id, status)
    return checkpointer


@pytest.mark.parametrize(
    ("status", "expected"),
    [("done", {"d1", "d2"}), ("interrupted", {"i1"}), ("unfinished", {"u1", "u2"})],
)
def test_list_threads_filters_by_status(
    statuses: Checkpointer, status: ThreadStatus, expected: set[str]
) -> None:
    """Status comes from the latest checkpoint: pauses interrupted, tasks unfinished, else done."""
    found = statuses.list_threads(status=status)

    assert expected == set(ids_of(found))
    assert {status} == {info.status for info in found}


def test_status_follows_the_latest_checkpoint(checkpointer: Checkpointer) -> None:
    """A thread's status is that of its greatest id, whatever order checkpoints were put in."""
    put_with_status(checkpointer, "t", "interrupted", "c0001")
    assert "interrupted" == thread_info(checkpointer, "t").status

    put_with_status(checkpointer, "t", "done", "c0003")
    put_with_status(checkpointer, "t", "unfinished", "c0002")

    info = thread_info(checkpointer, "t")
    assert ("done", "c0003") == (info.status, info.checkpoint_id)
    assert [] == checkpointer.list_threads(status="unfinished")


def test_list_threads_pages_without_overlap(checkpointer: Checkpointer) -> None:
    """``offset`` and ``limit`` cut the same order into pages that neither overlap nor skip."""
    for n in range(7):
        put_with_status(checkpointer, f"thread-{n}", "done" if n % 2 else "unfinished")
    everything = ids_of(checkpointer.list_threads())

    pages = [ids_of(checkpointer.list_threads(offset=offset, limit=3)) for offset in (0, 3, 6, 9)]

    assert 7 == len(everything)
    assert [everything[0:3], everything[3:6], everything[6:7], []] == pages
    assert everything[2:] == ids_of(checkpointer.list_threads(offset=2))
    assert [] == checkpointer.list_threads(limit=0)
    unfinished = ids_of(checkpointer.list_threads(status="unfinished"))
    assert unfinished[1:3] == ids_of(checkpointer.list_threads(status="unfinished", offset=1, limit=2))


def test_get_thread_describes_the_thread(checkpointer: Checkpointer) -> None:
    """``get_thread`` has the id, UTC times (created <= updated), status, step, latest id and metadata."""
    before = dt.datetime.now(UTC)
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    checkpointer.put_thread_metadata("t", {"user": "ada", "tags": ["x"]})
    first = thread_info(checkpointer, "t")
    wait_for_clock_tick()
    checkpointer.put("t", attrs.evolve(make_checkpoint("t", "c0002", "c0001"), next=(TASK,), step=4))
    after = dt.datetime.now(UTC)

    info = thread_info(checkpointer, "t")

    assert ("t", "unfinished", 4, "c0002") == (info.id, info.status, info.step, info.checkpoint_id)
    assert {"user": "ada", "tags": ["x"]} == dict(info.metadata)
    assert dt.timedelta(0) == info.created_at.utcoffset() == info.updated_at.utcoffset()
    assert first.created_at == info.created_at
    assert before - dt.timedelta(seconds=1) <= info.created_at <= first.updated_at <= info.updated_at
    assert first.updated_at < info.updated_at <= after + dt.timedelta(seconds=1)
    assert [info] == checkpointer.list_threads()


def test_get_thread_of_an_unknown_thread_is_none(checkpointer: Checkpointer) -> None:
    """A thread never written has no summary."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))

    assert None is checkpointer.get_thread("t%")


def test_put_thread_metadata_replaces_it(checkpointer: Checkpointer) -> None:
    """New metadata replaces the old whole, keys not repeated are gone."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    checkpointer.put_thread_metadata("t", {"a": 1, "b": 2})
    checkpointer.put_thread_metadata("t", {"b": 3})

    assert {"b": 3} == dict(thread_info(checkpointer, "t").metadata)
    assert ["t"] == ids_of(checkpointer.list_threads(metadata={"b": 3}))
    assert [] == checkpointer.list_threads(metadata={"a": 1})


def test_put_thread_metadata_works_before_any_checkpoint(checkpointer: Checkpointer) -> None:
    """Metadata can name a thread before it runs; its first checkpoint keeps that metadata."""
    checkpointer.put_thread_metadata("t", {"owner": "ada"})

    info = thread_info(checkpointer, "t")
    assert ("t", None, 0, {"owner": "ada"}) == (info.id, info.checkpoint_id, info.step, dict(info.metadata))
    assert ["t"] == ids_of(checkpointer.list_threads(metadata={"owner": "ada"}))
    assert None is checkpointer.get("t")

    put_with_status(checkpointer, "t", "interrupted")

    info = thread_info(checkpointer, "t")
    assert ("c0001", "interrupted", {"owner": "ada"}) == (
        info.checkpoint_id,
        info.status,
        dict(info.metadata),
    )


# --- 7. read_channel -------------------------------------------------------------------------

LONG = [{"i": i} for i in range(1000)]


@pytest.fixture
def long_list(checkpointer: Checkpointer) -> Checkpointer:
    """Thread ``t``: c0001 has 600 items, c0002 all 1,000 of ``LONG``, fork c0003 (of c0001) one more."""
    checkpointer.put("t", make_checkpoint("t", "c0001", log=LONG[:600], text="not a list"))
    checkpointer.put("t", make_checkpoint("t", "c0002", "c0001", log=LONG, text="not a list"))
    checkpointer.put("t", make_checkpoint("t", "c0003", "c0001", log=[*LONG[:600], "fork"], text="x"))
    # c0004 continues the main line, so the latest is the 1,000-item list.
    checkpointer.put("t", make_checkpoint("t", "c0004", "c0002", log=LONG, text="not a list"))
    return checkpointer


def test_read_channel_pages_through_a_long_list(long_list: Checkpointer) -> None:
    """Pages of any size, read in turn, add up to the whole list of the latest checkpoint."""
    pages = [long_list.read_channel("t", "log", offset, 128) for offset in range(0, 1000, 128)]

    assert [128] * 7 + [104] == [len(page) for page in pages]
    assert LONG == [item for page in pages for item in page]
    assert LONG == long_list.read_channel("t", "log")


@pytest.mark.parametrize(
    ("offset", "limit", "expected"),
    [
        (0, 3, LONG[:3]),
        (595, 10, LONG[595:605]),
        (995, None, LONG[995:]),
        (990, 50, LONG[990:]),
        (1000, None, []),
        (5000, 10, []),
        (10, 0, []),
    ],
)
def test_read_channel_reads_the_asked_slice(
    long_list: Checkpointer, offset: int, limit: int | None, expected: list[Any]
) -> None:
    """Items ``[offset, offset + limit)``, cut short at the end of the list."""
    assert expected == long_list.read_channel("t", "log", offset, limit)


def test_read_channel_reads_an_older_checkpoint_by_id(long_list: Checkpointer) -> None:
    """``checkpoint_id`` reads that checkpoint's list, not the latest one's."""
    assert LONG[:600] == long_list.read_channel("t", "log", checkpoint_id="c0001")
    assert LONG[590:600] == long_list.read_channel("t", "log", 590, 50, checkpoint_id="c0001")


def test_read_channel_reads_a_forks_own_items(long_list: Checkpointer) -> None:
    """A fork's list is its parent's prefix plus its own items, also across the fork point."""
    assert [*LONG[598:600], "fork"] == long_list.read_channel("t", "log", 598, 10, checkpoint_id="c0003")
    assert 601 == len(long_list.read_channel("t", "log", checkpoint_id="c0003"))


def test_read_channel_of_a_never_written_channel_is_empty(long_list: Checkpointer) -> None:
    """A channel the checkpoint does not have reads as ``[]``."""
    assert [] == long_list.read_channel("t", "never")
    assert [] == long_list.read_channel("t", "never", 5, 5, checkpoint_id="c0001")


def test_read_channel_pages_a_list_stored_whole(checkpointer: Checkpointer) -> None:
    """A list that replaced a longer one pages like any other."""
    put_chain(checkpointer, "t", [{"log": ["a", "b", "c", "d"]}, {"log": ["x", "y", "z"]}])

    assert ["y", "z"] == checkpointer.read_channel("t", "log", 1)
    assert ["x"] == checkpointer.read_channel("t", "log", 0, 1)
    assert ["b", "c"] == checkpointer.read_channel("t", "log", 1, 2, checkpoint_id=cid(0))


@pytest.mark.parametrize(
    ("thread_id", "checkpoint_id"),
    [("t", "c0009"), ("nobody", None), ("nobody", "c0001"), ("other", "c0001")],
)
def test_read_channel_of_a_missing_checkpoint_raises(
    long_list: Checkpointer, thread_id: str, checkpoint_id: str | None
) -> None:
    """An unknown checkpoint, an unknown thread or another thread's checkpoint is CheckpointNotFoundError."""
    long_list.put("other", make_checkpoint("other", "c0002"))

    with pytest.raises(CheckpointNotFoundError):
        long_list.read_channel(thread_id, "log", checkpoint_id=checkpoint_id)


@pytest.mark.parametrize("value", ["a string", {"k": [1]}, 42, None])
def test_read_channel_of_a_channel_holding_no_list_is_a_type_error(
    checkpointer: Checkpointer, value: Any
) -> None:
    """A channel holding a str, dict, int or None cannot be paged: TypeError."""
    checkpointer.put("t", make_checkpoint("t", "c0001", value=value))

    with pytest.raises(TypeError):
        checkpointer.read_channel("t", "value")


# --- 8. prune --------------------------------------------------------------------------------


def test_prune_keeps_the_newest_and_the_latest_still_loads(checkpointer: Checkpointer) -> None:
    """``keep_last`` newest stay, the rest go; kept ones still read values pruned ones wrote."""
    ids = put_chain(
        checkpointer,
        "t",
        ({"config": {"model": "m"}, "log": list(range(n + 1)), "n": n} for n in range(10)),
    )

    assert 7 == checkpointer.prune("t", keep_last=3)

    assert ids[:-4:-1] == ids_of(checkpointer.list("t"))
    assert None is checkpointer.get("t", ids[0])
    assert {"config": {"model": "m"}, "log": list(range(10)), "n": 9} == channels_at(checkpointer, "t")
    assert {"config": {"model": "m"}, "log": list(range(8)), "n": 7} == channels_at(checkpointer, "t", ids[7])
    assert list(range(10)) == checkpointer.read_channel("t", "log")
    assert 0 == checkpointer.prune("t", keep_last=3)


def test_a_pruned_thread_keeps_growing(checkpointer: Checkpointer) -> None:
    """After a prune, a child of the latest appends and replaces as before."""
    ids = put_chain(checkpointer, "t", ({"config": "c", "log": list(range(n + 1))} for n in range(5)))
    checkpointer.prune("t", keep_last=1)

    checkpointer.put("t", make_checkpoint("t", cid(5), ids[-1], config="c", log=list(range(6))))
    checkpointer.put("t", make_checkpoint("t", cid(6), cid(5), config="new", log=list(range(7))))

    assert {"config": "c", "log": list(range(6))} == channels_at(checkpointer, "t", cid(5))
    assert {"config": "new", "log": list(range(7))} == channels_at(checkpointer, "t")
    assert [cid(6), cid(5), cid(4)] == ids_of(checkpointer.list("t"))


def test_prune_keeps_branch_tips_and_fork_points(checkpointer: Checkpointer) -> None:
    """Every leaf (an open pause sits on one) and every fork point survives, with its values."""
    tree = [
        ("c0001", None, ["a"]),
        ("c0002", "c0001", ["a", "b"]),
        ("c0003", "c0002", ["a", "b", "c"]),
        ("c0004", "c0003", ["a", "b", "c", "d"]),
        ("c0005", "c0002", ["a", "b", "x"]),
        ("c0006", "c0004", ["a", "b", "c", "d", "e"]),
        ("c0007", "c0006", ["a", "b", "c", "d", "e", "f"]),
    ]
    for checkpoint_id, parent_id, log in tree:
        checkpointer.put("t", make_checkpoint("t", checkpoint_id, parent_id, log=log, origin=checkpoint_id))
    paused = make_checkpoint("t", "c0008", "c0005", log=["a", "b", "x"], origin="c0008")
    checkpointer.put("t", attrs.evolve(paused, next=(TASK,), pending=(pause("t", "c0005", "ok?"),)))

    assert 5 == checkpointer.prune("t", keep_last=1)

    assert ["c0008", "c0007", "c0002"] == ids_of(checkpointer.list("t"))
    assert {"log": ["a", "b"], "origin": "c0002"} == channels_at(checkpointer, "t", "c0002")
    assert {"log": list("abcdef"), "origin": "c0007"} == channels_at(checkpointer, "t", "c0007")
    kept_pause = checkpointer.get("t", "c0008")
    assert kept_pause is not None
    assert ({"log": ["a", "b", "x"], "origin": "c0008"}, (pause("t", "c0005", "ok?"),)) == (
        dict(kept_pause.channels),
        kept_pause.pending,
    )


def test_prune_of_an_unknown_thread_drops_nothing(checkpointer: Checkpointer) -> None:
    """Pruning a thread without checkpoints returns 0."""
    assert 0 == checkpointer.prune("nobody", keep_last=1)


@pytest.mark.parametrize("keep_last", [0, -1])
def test_prune_must_keep_at_least_one(checkpointer: Checkpointer, keep_last: int) -> None:
    """``keep_last`` below 1 is a ValueError and drops nothing."""
    put_chain(checkpointer, "t", ({"n": n} for n in range(3)))

    with pytest.raises(ValueError, match="keep_last"):
        checkpointer.prune("t", keep_last=keep_last)

    assert 3 == len(checkpointer.list("t"))


# --- 9. values -------------------------------------------------------------------------------

SERDE_SAMPLES: dict[str, Any] = {
    "tuple": (1, "a", (2, None), []),
    "bytes": b"\x00\xffbinary\n",
    "bytearray": bytearray(b"mutable"),
    "datetime-utc": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    "datetime-offset": dt.datetime(2024, 7, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    "date": dt.date(1999, 12, 31),
    "time-tz": dt.time(8, 15, 30, 123, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    "time-naive": dt.time(23, 0),
    "decimal": decimal.Decimal("1.10"),
    "decimal-huge": decimal.Decimal("-12345678901234567890.000000000000000001"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "set": {1, "two", (3, 4)},
    "frozenset": frozenset({"a", "b"}),
    "non-str-keys": {1: "one", None: "none", (1, 2): "pair", "s": "str"},
    "floats": [0.1, -0.0, 1e300, 1e16, 2**53 + 1],
    "mixed": {"when": dt.date(2020, 1, 1), "ids": [uuid.UUID(int=7)], "raw": {b"k"}},
}


@pytest.mark.parametrize("name", SERDE_SAMPLES)
def test_codec_types_round_trip_exactly_everywhere(checkpointer: Checkpointer, name: str) -> None:
    """Each codec type keeps its type and value in channels, list items, tasks, pauses, journals, metadata."""
    value = SERDE_SAMPLES[name]
    checkpoint = attrs.evolve(
        make_checkpoint("t", "c0001", value=value, items=[value, value]),
        next=(ScheduledTask(node="w", task_key="w#0", is_send=True, input=value),),
        pending=(pause("t", "c0001", value),),
        task_journals={"w#0": (JournalEntry(key="s#0", value=value),)},
        metadata={"value": value},
    )
    checkpointer.put("t", checkpoint)
    checkpointer.put_journal(task_id_for("t", "c0001", "w#0"), [JournalEntry(key="s#0", value=value)])
    checkpointer.put_thread_metadata("t", {"value": value})

    found = checkpointer.get("t")

    assert found is not None
    assert typed(value) == typed(found.channels["value"])
    assert typed([value, value]) == typed(found.channels["items"])
    assert typed([value, value]) == typed(checkpointer.read_channel("t", "items"))
    assert typed(value) == typed(found.next[0].input)
    assert typed(value) == typed(found.pending[0].payload)
    assert typed(value) == typed(found.task_journals["w#0"][0].value)
    assert typed(value) == typed(found.metadata["value"])
    assert typed(value) == typed(checkpointer.get_journal(task_id_for("t", "c0001", "w#0"))[0].value)
    assert typed(value) == typed(thread_info(checkpointer, "t").metadata["value"])


def test_multi_megabyte_values_round_trip(checkpointer: Checkpointer) -> None:
    """A 3 MB string and a list of 5,000 dicts come back whole, also through a child that appends."""
    big_text = ("ilmek ☕ 🧵 " * 300_000)[:3_000_000]
    many = [
        {"i": i, "text": f"item {i}", "tags": ["a", "b"], "nested": {"even": i % 2 == 0}} for i in range(5000)
    ]
    checkpointer.put("t", make_checkpoint("t", "c0001", text=big_text, many=many))
    checkpointer.put("t", make_checkpoint("t", "c0002", "c0001", text=big_text, many=[*many, {"i": 5000}]))

    assert {"text": big_text, "many": many} == channels_at(checkpointer, "t", "c0001")
    assert {"text": big_text, "many": [*many, {"i": 5000}]} == channels_at(checkpointer, "t")
    assert many[4990:] == checkpointer.read_channel("t", "many", 4990, 10)


UNICODE_SAMPLES = {
    "combining": "e\u0301 a\u0308 Z\u0335\u0321 n\u0303",
    "rtl": "שלום עולם — مرحبا بالعالم",
    "zwj": "👩\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👨🏽\u200d💻",
    # Mathematical Fraktur "Unicode", an Egyptian hieroglyph, an emoji, a private-use plane-16 point.
    "astral": "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 𓀀 😀 \U0010fffd",
    "nul": "before\x00after\x00",
    "whitespace": "line\nnext\ttab\r\nend\n",
    "bom-and-cjk": "\ufeff漢字かなカナ",
    "escapes": "back\\slash \"quote\" 'single' \\u0000 %s {}",
}


def test_unicode_round_trips_as_values_keys_metadata_and_journals(checkpointer: Checkpointer) -> None:
    """Combining marks, RTL, ZWJ emoji, astral code points, NUL and control whitespace survive everywhere."""
    thread_id = "🧵 unicode"
    keyed = {text: name for name, text in UNICODE_SAMPLES.items()}
    texts = list(UNICODE_SAMPLES.values())
    checkpoint = attrs.evolve(
        make_checkpoint(thread_id, "c0001", samples=dict(UNICODE_SAMPLES), keyed=keyed, texts=texts),
        pending=(pause(thread_id, "c0001", keyed),),
        task_journals={"agent": (JournalEntry(key="ключ#0", value=keyed, kind="step"),)},
        metadata={"keyed": keyed, UNICODE_SAMPLES["rtl"]: texts},
    )
    checkpointer.put(thread_id, checkpoint)
    checkpointer.put(
        thread_id, make_checkpoint(thread_id, "c0002", "c0001", **{"канал📦": texts}, texts=texts * 2)
    )
    journal = [
        JournalEntry(key=f"step {name} ✓", value=text, kind="interrupt", payload=keyed, answered=True)
        for name, text in UNICODE_SAMPLES.items()
    ]
    # Under the checkpoint without carried journals: what comes back is exactly what went in.
    task_id = task_id_for(thread_id, "c0002", "agent")
    checkpointer.put_journal(task_id, journal)
    checkpointer.put_thread_metadata(thread_id, {"keyed": keyed, "title": UNICODE_SAMPLES["zwj"]})

    first = checkpointer.get(thread_id, "c0001")
    assert first is not None
    assert {"samples": UNICODE_SAMPLES, "keyed": keyed, "texts": texts} == dict(first.channels)
    assert (checkpoint.pending, checkpoint.task_journals) == (first.pending, first.task_journals)
    assert dict(checkpoint.metadata) == dict(first.metadata)
    assert {"канал📦": texts, "texts": texts * 2} == channels_at(checkpointer, thread_id)
    assert texts == checkpointer.read_channel(thread_id, "texts", len(texts))
    assert tuple(journal) == checkpointer.get_journal(task_id)
    info = thread_info(checkpointer, thread_id)
    assert {"keyed": keyed, "title": UNICODE_SAMPLES["zwj"]} == dict(info.metadata)
    assert [thread_id] == ids_of(checkpointer.list_threads(metadata={"title": UNICODE_SAMPLES["zwj"]}))


# --- 10. what cannot be stored -----------------------------------------------------------------


class Unstorable:
    """A class the codec does not know."""


BAD_PARTS: dict[str, Callable[[Checkpoint], Checkpoint]] = {
    "new-channel": lambda c: attrs.evolve(c, channels={**c.channels, "broken": Unstorable()}),
    "replaced-channel": lambda c: attrs.evolve(c, channels={**c.channels, "n": Unstorable()}),
    "appended-item": lambda c: attrs.evolve(
        c, channels={**c.channels, "log": [*c.channels["log"], object()]}
    ),
    "nested": lambda c: attrs.evolve(c, channels={**c.channels, "n": {"deep": [1, {"x": Unstorable()}]}}),
    "send-input": lambda c: attrs.evolve(c, next=(ScheduledTask(node="w", task_key="w#0", input=object()),)),
    "pause-payload": lambda c: attrs.evolve(c, pending=(pause(c.thread_id, payload=object()),)),
    "task-journal": lambda c: attrs.evolve(c, task_journals={"w": [JournalEntry(key="k", value=object())]}),
    "metadata": lambda c: attrs.evolve(c, metadata={"run": object()}),
}
CHANNEL_NAMED = {"new-channel": "broken", "replaced-channel": "n", "appended-item": "log", "nested": "n"}


@pytest.mark.parametrize("part", BAD_PARTS)
def test_put_of_an_unstorable_value_raises_and_writes_nothing(checkpointer: Checkpointer, part: str) -> None:
    """SerializationError (naming the channel, for a channel) and the thread is as it was."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=1, log=["a"]))
    before = checkpointer.get_thread("t")
    bad = BAD_PARTS[part](make_checkpoint("t", "c0002", "c0001", n=1, log=["a", "b"]))

    with pytest.raises(SerializationError) as caught:
        checkpointer.put("t", bad)

    if part in CHANNEL_NAMED:
        assert f"channel {CHANNEL_NAMED[part]!r}" in str(caught.value)
    assert ["c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": 1, "log": ["a"]} == channels_at(checkpointer, "t")
    assert before == checkpointer.get_thread("t")
    assert ["a"] == checkpointer.read_channel("t", "log")


def test_an_unstorable_first_checkpoint_creates_no_thread(checkpointer: Checkpointer) -> None:
    """A thread whose very first checkpoint cannot be stored does not appear at all."""
    with pytest.raises(SerializationError, match="'broken'"):
        checkpointer.put("t", make_checkpoint("t", "c0001", fine=1, broken=Unstorable()))

    assert (None, None, []) == (
        checkpointer.get("t"),
        checkpointer.get_thread("t"),
        checkpointer.list_threads(),
    )


def test_an_unstorable_journal_raises_and_keeps_the_old_journals(checkpointer: Checkpointer) -> None:
    """A journal batch with one bad entry writes none of the batch, naming the step key."""
    first, second = task_id_for("t", "c0001", "a"), task_id_for("t", "c0001", "b")
    checkpointer.put_journal(first, JOURNAL[:1])

    with pytest.raises(SerializationError, match="bad#0"):
        checkpointer.put_journals(
            {
                first: JOURNAL,
                second: [JournalEntry(key="ok#0", value=1), JournalEntry(key="bad#0", value=object())],
            }
        )

    assert {first: JOURNAL[:1]} == checkpointer.get_journals([first, second])


def test_unstorable_thread_metadata_raises_and_keeps_the_old(checkpointer: Checkpointer) -> None:
    """``put_thread_metadata`` with a value the codec refuses changes nothing."""
    checkpointer.put_thread_metadata("t", {"ok": 1})

    with pytest.raises(SerializationError):
        checkpointer.put_thread_metadata("t", {"bad": Unstorable()})

    assert {"ok": 1} == dict(thread_info(checkpointer, "t").metadata)


# --- 11. commit ------------------------------------------------------------------------------


def test_commit_succeeds_when_the_latest_is_as_expected(checkpointer: Checkpointer) -> None:
    """``expect_latest`` naming the thread's latest commits; ``None`` commits a thread's first."""
    checkpointer.commit("t", make_checkpoint("t", "c0001", n=1), expect_latest=None)
    checkpointer.commit("t", make_checkpoint("t", "c0002", "c0001", n=2), expect_latest="c0001")

    assert ["c0002", "c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": 2} == channels_at(checkpointer, "t")


@pytest.mark.parametrize(
    ("existing", "expect_latest"),
    [
        (["c0001", "c0002"], "c0001"),
        (["c0001"], None),
        ([], "c0001"),
        (["c0001"], "c0009"),
    ],
)
def test_commit_refuses_when_the_thread_moved_on(
    checkpointer: Checkpointer, existing: list[str], expect_latest: str | None
) -> None:
    """A stale ``expect_latest`` is ConcurrentUpdateError naming the thread; nothing is written or dropped."""
    parent = None
    for checkpoint_id in existing:
        checkpointer.put("t", make_checkpoint("t", checkpoint_id, parent, n=checkpoint_id))
        parent = checkpoint_id
    journal_id = task_id_for("t", expect_latest or "c0000", "agent")
    checkpointer.put_journal(journal_id, JOURNAL)

    with pytest.raises(ConcurrentUpdateError) as caught:
        checkpointer.commit(
            "t",
            make_checkpoint("t", "c0005", expect_latest, n="new"),
            expect_latest=expect_latest,
            drop_journals=[journal_id],
        )

    assert "t" == caught.value.thread_id
    assert "'t'" in str(caught.value)
    assert existing[::-1] == ids_of(checkpointer.list("t"))
    assert None is checkpointer.get("t", "c0005")
    assert JOURNAL == checkpointer.get_journal(journal_id)


def test_commit_drops_the_superseded_journals(checkpointer: Checkpointer) -> None:
    """``drop_journals`` are gone once the commit returns; other journals stay."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    dropped = [task_id_for("t", "c0001", "a"), task_id_for("t", "c0001", "b")]
    kept = task_id_for("t", "c0001", "c")
    checkpointer.put_journals({dropped[0]: JOURNAL, dropped[1]: JOURNAL, kept: JOURNAL})

    checkpointer.commit(
        "t", make_checkpoint("t", "c0002", "c0001"), expect_latest="c0001", drop_journals=dropped
    )

    assert {kept: JOURNAL} == checkpointer.get_journals([*dropped, kept])


def test_commit_may_precede_the_thread_by_metadata_only(checkpointer: Checkpointer) -> None:
    """A thread that has metadata but no checkpoint accepts ``expect_latest=None``."""
    checkpointer.put_thread_metadata("t", {"owner": "ada"})

    checkpointer.commit("t", make_checkpoint("t", "c0001", n=1), expect_latest=None)

    assert {"n": 1} == channels_at(checkpointer, "t")


def test_commit_with_changes_stores_only_them_and_reads_whole(checkpointer: Checkpointer) -> None:
    """With ``changes``, an Extend adds items and a Replace sets a value; reads see full values."""
    checkpointer.commit(
        "t", make_checkpoint("t", "c0001", log=["a"], n=1), changes={"log": Extend(["a"]), "n": Replace(1)}
    )
    checkpointer.commit(
        "t",
        make_checkpoint("t", "c0002", "c0001", log=["a", "b", "c"], n=2),
        changes={"log": Extend(["b", "c"]), "n": Replace(2)},
        expect_latest="c0001",
    )

    assert {"log": ["a", "b", "c"], "n": 2} == channels_at(checkpointer, "t")
    assert ["b", "c"] == checkpointer.read_channel("t", "log", 1)
    assert {"log": ["a"], "n": 1} == channels_at(checkpointer, "t", "c0001")


def test_racing_commits_on_one_expected_latest_let_exactly_one_win(checkpointer: Checkpointer) -> None:
    """Eight threads commit children of one latest at once: one lands, seven get ConcurrentUpdateError."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=0))
    start = threading.Barrier(8)

    def attempt(worker: int) -> bool:
        checkpoint = make_checkpoint("t", f"c0002-{worker}", "c0001", n=worker)
        start.wait()
        try:
            checkpointer.commit("t", checkpoint, expect_latest="c0001")
        except ConcurrentUpdateError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        won = [worker for worker, landed in enumerate(pool.map(attempt, range(8))) if landed]

    assert 1 == len(won)
    assert [f"c0002-{won[0]}", "c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": won[0]} == channels_at(checkpointer, "t")


# --- 12. hold --------------------------------------------------------------------------------


def test_a_held_thread_cannot_be_held_again(checkpointer: Checkpointer) -> None:
    """A second ``hold`` of a held thread is ThreadBusyError naming the thread."""
    with checkpointer.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError) as caught, checkpointer.hold("t"):
            pytest.fail("the thread was held twice")

    assert "t" == caught.value.thread_id
    assert "'t'" in str(caught.value)


def test_a_thread_held_by_another_checkpointer_cannot_be_held(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """A hold taken through one checkpointer blocks a hold through another on the same store, both ways."""
    other = reopen()
    with checkpointer.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError, match="'t'"), other.hold("t"):
            pytest.fail("the thread was held twice")

    with other.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError, match="'t'"), checkpointer.hold("t"):
            pytest.fail("the thread was held twice")


def test_a_released_thread_can_be_held_again(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Leaving the ``with`` (normally or by an exception) releases the thread at once."""
    with checkpointer.hold("t"):
        pass
    with pytest.raises(KeyError), checkpointer.hold("t"):
        raise KeyError("the run failed")

    with reopen().hold("t"), pytest.raises(ThreadBusyError), checkpointer.hold("t"):
        pytest.fail("the thread was held twice")


def test_release_is_idempotent(checkpointer: Checkpointer) -> None:
    """Releasing a hold twice is harmless and frees the thread for the next holder."""
    with checkpointer.hold("t") as hold:
        hold.release()
        hold.release()
        with checkpointer.hold("t"):
            pass


def test_different_threads_can_be_held_at_once(checkpointer: Checkpointer) -> None:
    """Holds are per thread: look-alike ids are held side by side."""
    with (
        checkpointer.hold("t"),
        checkpointer.hold("t%"),
        checkpointer.hold("T"),
        checkpointer.hold("t2"),
        pytest.raises(ThreadBusyError, match="'t%'"),
        checkpointer.hold("t%"),
    ):
        pytest.fail("the thread was held twice")


def test_racing_holds_of_one_thread_let_exactly_one_win(checkpointer: Checkpointer) -> None:
    """Eight Python threads try to hold one thread at once: one gets it, seven get ThreadBusyError."""
    tried = threading.Barrier(8)

    def attempt(worker: int) -> bool:
        try:
            with checkpointer.hold("t"):
                # Keep the hold until everyone has tried.
                tried.wait()
                return True
        except ThreadBusyError:
            tried.wait()
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))

    assert 1 == sum(outcomes)


# --- 13. many Python threads -------------------------------------------------------------------


def test_many_python_threads_share_one_checkpointer(checkpointer: Checkpointer) -> None:
    """8 threads writing 30 checkpoints each through one checkpointer: everything reads back right."""
    start = threading.Barrier(8)

    def work(worker: int) -> None:
        thread_id = f"worker-{worker}"
        start.wait()
        for n in range(30):
            checkpointer.put(
                thread_id,
                make_checkpoint(
                    thread_id, cid(n), cid(n - 1) if n else None, log=list(range(n + 1)), who=worker
                ),
            )
            if n % 10 == 0:
                checkpointer.put_journal(
                    task_id_for(thread_id, cid(n), "agent"), [JournalEntry(key="k", value=n)]
                )
            assert list(range(n + 1)) == checkpointer.read_channel(thread_id, "log")

    with ThreadPoolExecutor(max_workers=8) as pool:
        for finished in [pool.submit(work, worker) for worker in range(8)]:
            finished.result()

    for worker in range(8):
        thread_id = f"worker-{worker}"
        assert {"log": list(range(30)), "who": worker} == channels_at(checkpointer, thread_id)
        assert [cid(n) for n in reversed(range(30))] == ids_of(checkpointer.list(thread_id))
        assert {"log": list(range(11)), "who": worker} == channels_at(checkpointer, thread_id, cid(10))
        journals = {
            task_id_for(thread_id, cid(n), "agent"): (JournalEntry(key="k", value=n),) for n in (0, 10, 20)
        }
        assert journals == checkpointer.get_journals(list(journals))
    assert {f"worker-{worker}" for worker in range(8)} == set(ids_of(checkpointer.list_threads()))


def test_two_checkpointers_on_one_store_see_each_others_writes(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Writes through one checkpointer read back through another, as from another process, turn by turn."""
    other = reopen()
    checkpointer.put("t", make_checkpoint("t", "c0001", log=["a"], n=1))
    assert {"log": ["a"], "n": 1} == channels_at(other, "t")

    other.put("t", make_checkpoint("t", "c0002", "c0001", log=["a", "b"], n=2))
    checkpointer.put("t", make_checkpoint("t", "c0003", "c0002", log=["a", "b", "c"], n=3))
    other.put("t", make_checkpoint("t", "c0004", "c0001", log=["a", "fork"], n=4))
    other.put_journal(task_id_for("t", "c0004", "agent"), JOURNAL)
    other.put_thread_metadata("t", {"by": "other"})

    for reader in (checkpointer, other):
        assert {"log": ["a", "b", "c"], "n": 3} == channels_at(reader, "t", "c0003")
        assert {"log": ["a", "fork"], "n": 4} == channels_at(reader, "t")
        assert ["b", "c"] == reader.read_channel("t", "log", 1, checkpoint_id="c0003")
        assert JOURNAL == reader.get_journal(task_id_for("t", "c0004", "agent"))
        assert ("c0004", {"by": "other"}) == (
            thread_info(reader, "t").checkpoint_id,
            dict(thread_info(reader, "t").metadata),
        )
    checkpointer.delete_thread("t")
    assert_gone(other, "t")
