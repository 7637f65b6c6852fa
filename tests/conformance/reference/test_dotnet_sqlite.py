"""Ported from the reference's ``dotnet/test/Ilmek.Checkpointer.Sqlite.Tests/SqliteCheckpointerTests.cs``.

The .NET suite mirrors ``sqlite.test.ts`` case for case; those seven cases
("Open() migrates…", "using it before Migrate()…", "a step runs once…", "a
pause survives closing the database…", "an effect before the pause…", "get by
id, list…", "a custom TablePrefix…") are ported once, in
``test_store_sqlite.py``. Here are the two it adds: values read back after a
restart are plain data, and a fan-out's send inputs survive a restart. Both
run on memory, a SQLite file and Postgres.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import END, START, Checkpointer, channel, graph, resume_keyed, run, send, thread_state

pytestmark = pytest.mark.timeout(60)


def test_values_read_after_a_restart_are_plain_python_data(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """dotnet sqlite · "channel values survive the JSON boundary as plain CLR data, not JsonElement".

    In Python: lists, dicts, strings and ints, an integral number staying an ``int``.
    """

    def pause(state: dict[str, Any], ctx: Any) -> None:
        ctx.interrupt({"q": "?"})

    g = (
        graph(
            "shapes",
            {"items": channel.append(), "meta": channel.last_write(), "count": channel.last_write(0)},
        )
        .node("write", lambda state: {"items": ["a", "b"], "meta": {"k": "v", "n": 2}, "count": 3})
        .node("pause", pause)
        .edge(START, "write")
        .edge("write", "pause")
        .edge("pause", END)
        .compile()
    )
    run(g, {}, thread_id="t4", checkpointer=ref_checkpointer)
    ref_checkpointer.close()

    state = thread_state(g, ref_reopen(), "t4")

    assert {"items": ["a", "b"], "meta": {"k": "v", "n": 2}, "count": 3} == state
    assert (list, dict, int, int) == (
        type(state["items"]),
        type(state["meta"]),
        type(state["meta"]["n"]),
        type(state["count"]),
    )


def test_a_fan_outs_send_inputs_survive_a_restart(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """dotnet sqlite · "a fan-out send payload survives the restart"."""

    def worker(task_input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"q": task_input["id"]})
        return {"out": [f"{task_input['id']}:{answer}"]}

    g = (
        graph("fanout", {"out": channel.append()})
        .node("map", lambda state: None)
        .node("worker", worker)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"id": "a"}), send("worker", {"id": "b"})])
        .edge("worker", END)
        .compile()
    )
    paused = run(g, {}, thread_id="t6", checkpointer=ref_checkpointer)
    assert 2 == len(paused.pending)
    answers = {pause.id: "yes" for pause in paused.pending}
    ref_checkpointer.close()

    finished = resume_keyed(g, answers, thread_id="t6", checkpointer=ref_reopen())

    assert "done" == finished.status
    assert ["a:yes", "b:yes"] == sorted(finished.state["out"])
