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


def open_store(kind: str, target: str, **options: Any) -> Any:
    """A checkpointer of this process's own on a SQLite file or a Postgres database (a psycopg2 pool)."""
    if kind == "sqlite":
        from ilmek.checkpoint.sqlite import SqliteCheckpointer

        return SqliteCheckpointer(target, **options)
    import psycopg2.pool

    from ilmek.checkpoint.postgres import PostgresCheckpointer

    return PostgresCheckpointer(psycopg2.pool.ThreadedConnectionPool(1, 4, target), **options)


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


#: How much of a hold's lease is left, by the clock that judges it, in each store's SQL.
LEASE_LEFT = {
    "sqlite": "SELECT expires_at - ((julianday('now') - 2440587.5) * 86400.0) FROM ilmek_holds",
    "postgres": "SELECT expires_at - EXTRACT(EPOCH FROM clock_timestamp()) FROM ilmek_holds",
}


def lease_left(kind: str, target: str) -> float:
    """The lease left on the one hold of the store, read on a connection of its own."""
    if kind == "sqlite":
        import sqlite3

        connection: Any = sqlite3.connect(target)
    else:
        import psycopg2

        connection = psycopg2.connect(target)
    try:
        cursor = connection.cursor()
        cursor.execute(LEASE_LEFT[kind])
        [(left,)] = cursor.fetchall()
        return float(left)
    finally:
        connection.close()


def two_steps_with_a_pause_between(kind: str, target: str, effects: str, thread_id: str, lease: str) -> None:
    """A run of two steps that reports ``between`` after the first and waits for a line on stdin before
    the second (the test freezes this process meanwhile). Each step's function appends its name to the
    file ``effects``; the second also reports the lease it finds left. Prints how the run ended as JSON."""

    def effect(name: str) -> float:
        with open(effects, "a", encoding="utf-8") as out:
            out.write(name + "\n")
        return lease_left(kind, target)

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", effect, "first")
        print(json.dumps({"event": "between"}), flush=True)
        sys.stdin.readline()
        return {"left": ctx.step("second", effect, "second")}

    g = graph("frozen", {"left": channel.last_write()}).node("work", work).edge(START, "work").compile()
    checkpointer = open_store(kind, target, lease_seconds=float(lease))
    try:
        result = run(g, {}, thread_id=thread_id, checkpointer=checkpointer)
        outcome = {"event": "ran", "status": result.status, "left": result.state["left"]}
    except ThreadBusyError as error:
        outcome = {"event": "refused", "error": type(error).__name__, "message": str(error)}
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "two-steps":
        two_steps_with_a_pause_between(*sys.argv[2:7])
    else:
        try_the_thread(*sys.argv[1:5])
