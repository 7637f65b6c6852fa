"""A child's pause that its parent had not written down yet: the parent takes it up on the next run.

Between the child's pause commit and the parent's record of it (a step in the
parent task's journal) the process can die. Here the record's write fails
instead (an in-memory store refusing that one append, as a lost connection
would), which leaves the store exactly as such a crash does.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import END, START, InMemoryCheckpointer, StorageError, channel, graph, resume, run
from ilmek.checkpoint.holds import Hold
from ilmek.types import JournalEntry
from tests.support.helpers import Calls


class LosesOnePauseRecord(InMemoryCheckpointer):
    """Refuses the first append of a parent's record that its child paused."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        if "@pause" in entry.key and not self.refused:
            self.refused += 1
            raise StorageError("the connection was lost")
        super().append_journal(hold, base_id, task_key, entry)


def test_a_child_pause_the_parent_never_recorded_is_taken_up_and_answered_once() -> None:
    """The failed run leaves the child paused; ``run(g, None)`` surfaces that pause; its answer finishes."""
    calls = Calls()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, "before")
        return {"log": [ctx.interrupt("ship?")]}

    child = graph("child", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)
    parent = (
        graph("parent", {"log": channel.append()}).node("sub", child.compile()).edge(START, "sub").compile()
    )
    store = LosesOnePauseRecord()
    opts: dict[str, Any] = {"thread_id": "lost", "checkpointer": store}

    with pytest.raises(StorageError):
        run(parent, {}, **opts)
    assert 1 == store.refused
    taken_up = run(parent, None, **opts)

    assert "interrupted" == taken_up.status
    assert ["sub:sub/ask:interrupt#0"] == [p.id for p in taken_up.pending]
    done = resume(parent, "yes", **opts)
    assert ["yes"] == done.state["log"]
    assert 1 == calls["before"]
