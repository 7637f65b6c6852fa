"""What the port suite's modules share: checkpoints built by hand, and reading them back.

The suite is ``tests/conformance/port/``; its tests use only the port and host
API of :class:`ilmek.Checkpointer` and the value types of :mod:`ilmek.types`,
and so do these helpers.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ilmek import Checkpoint, Checkpointer, JournalEntry, Pending, ScheduledTask, ThreadInfo
from ilmek.types import task_id_for

UTC = dt.UTC
TASK = ScheduledTask(node="agent", task_key="agent")


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


JOURNAL = (
    JournalEntry(key="charge#0", value={"charged": 249.9, "ids": (1, 2)}),
    JournalEntry(key="empty#0", value=None),
    JournalEntry(key="interrupt#0", kind="interrupt", payload={"question": "Charge?"}),
    JournalEntry(key="interrupt#1", kind="interrupt", payload=["a", "b"], value="yes", answered=True),
    JournalEntry(key="interrupt#2", kind="interrupt", payload=None, value=None, answered=True),
)


def assert_gone(checkpointer: Checkpointer, thread_id: str) -> None:
    """Nothing of the thread is left: checkpoints, journals, thread record."""
    assert None is checkpointer.get(thread_id)
    assert None is checkpointer.get(thread_id, "c0001")
    assert [] == checkpointer.list(thread_id)
    assert () == checkpointer.get_journal(task_id_for(thread_id, "c0001", "agent"))
    assert None is checkpointer.get_thread(thread_id)
    assert thread_id not in ids_of(checkpointer.list_threads())
