"""The port suite, put/get and list: every field round-trips, ids order checkpoints, lists page.

Where the contract leaves room, this suite decides:

* ``ts`` comes back aware, in UTC, and the same instant to the millisecond; a
  backend may keep microseconds but need not.
* Putting a checkpoint under another thread's id is a ``ValueError``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest

from ilmek import Checkpoint, Checkpointer, ConcurrentUpdateError, JournalEntry, ScheduledTask
from ilmek.types import new_checkpoint_id
from tests.support.port import (
    TASK,
    UTC,
    assert_same_instant,
    channels_at,
    cid,
    ids_of,
    make_checkpoint,
    pause,
    put_chain,
    typed,
)

pytestmark = pytest.mark.timeout(60)


# --- put / get --------------------------------------------------------------------------

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


# --- list -------------------------------------------------------------------------------


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
