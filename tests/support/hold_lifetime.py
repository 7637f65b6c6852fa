"""Graphs and processes the hold-lifetime tests share with the processes they start.

Effects are appended to a file, so the effects of every process count (a killed one's too).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ilmek import END, START, ThreadBusyError, channel, graph, run
from ilmek.graph import CompiledGraph


def slow_charge_graph(effects: str, started: Any = None, seconds: float = 0.0) -> CompiledGraph:
    """One node whose one step appends ``charge`` to the file ``effects``, then sleeps ``seconds``.

    Once the step's function is running it emits a ``charging`` custom event and sets ``started`` (a
    ``threading.Event``), if given.
    """

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> str:
            with open(effects, "a", encoding="utf-8") as out:
                out.write("charge\n")
            ctx.emit("charging")
            if started is not None:
                started.set()
            time.sleep(seconds)
            return "charged"

        return {"receipt": ctx.step("charge", charge)}

    return (
        graph("slow-pay", {"receipt": channel.last_write()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )


def effect_count(effects: str) -> int:
    """How many times the charge of :func:`slow_charge_graph` ran, in any process."""
    try:
        with open(effects, encoding="utf-8") as found:
            return sum(1 for line in found if line.strip() == "charge")
    except FileNotFoundError:
        return 0


def open_store(kind: str, target: str) -> Any:
    """A checkpointer of this process's own on a SQLite file or a Postgres database (a psycopg2 pool)."""
    if kind == "sqlite":
        from ilmek.checkpoint.sqlite import SqliteCheckpointer

        return SqliteCheckpointer(target)
    import psycopg2.pool

    from ilmek.checkpoint.postgres import PostgresCheckpointer

    return PostgresCheckpointer(psycopg2.pool.ThreadedConnectionPool(1, 4, target))


def try_the_thread(kind: str, target: str, effects: str, thread_id: str) -> None:
    """Once the thread exists, run it (``run(g, None)``) until it is free; print how it went as JSON."""
    checkpointer = open_store(kind, target)
    print(json.dumps({"event": "trying"}), flush=True)
    deadline = time.monotonic() + 30
    while checkpointer.get(thread_id) is None:
        assert time.monotonic() < deadline, "the thread never started"
        time.sleep(0.01)
    refused = 0
    while True:
        try:
            result = run(slow_charge_graph(effects), None, thread_id=thread_id, checkpointer=checkpointer)
            break
        except ThreadBusyError:
            refused += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    print(
        json.dumps({"event": "ran", "status": result.status, "state": result.state, "refused": refused}),
        flush=True,
    )


if __name__ == "__main__":
    try_the_thread(*sys.argv[1:5])
