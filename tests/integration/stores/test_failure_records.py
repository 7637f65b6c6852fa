"""A failure record written before failures named the tasks that raised still reads, on a real SQLite file.

The record is JSON text in the threads table; the one written here is what
earlier versions stored (no ``tasks``), put in place with ``sqlite3``.
"""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

from ilmek import START, SqliteCheckpointer, channel, graph, run, serde


def _explode(state: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("boom")


def test_a_failure_stored_without_task_keys_reads_with_none(tmp_path: pathlib.Path) -> None:
    """An older record (node, no ``tasks``) reads back with its node and an empty ``tasks``."""
    path = tmp_path / "old.db"
    store = SqliteCheckpointer(path)
    failing = graph("fails", {"n": channel.last_write(0)}).node("explode", _explode).edge(START, "explode")
    run(failing.compile(), {}, thread_id="t", checkpointer=store)
    info = store.get_thread("t")
    assert info is not None
    assert info.error is not None
    assert 1 == len(info.error.tasks)
    old = serde.encode(
        {
            "kind": "error",
            "type": "RuntimeError",
            "message": "boom",
            "node": "explode",
            "checkpoint_id": info.error.checkpoint_id,
            "at": info.error.at.timestamp(),
            "traceback": None,
        },
        where="the test's old failure record",
    )
    with sqlite3.connect(path) as db:
        assert 1 == db.execute("UPDATE ilmek_threads SET error = ? WHERE thread_id = ?", (old, "t")).rowcount
    db.close()
    again = store.get_thread("t")
    assert again is not None
    assert again.error is not None
    assert ("explode", ()) == (again.error.node, again.error.tasks)
    store.close()
