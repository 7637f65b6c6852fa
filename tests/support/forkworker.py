"""A process that holds a thread inside a long step, then forks, for the fork tests.

    python -m tests.support.forkworker sqlite|postgres TARGET THREAD LEASE

It prints JSON lines: ``{"event": "holding"}`` once its run is inside the
step, then forks; the child starts a run of its own (on ``THREAD-child``,
through a checkpointer it opens after the fork, as an application should)
and prints ``{"event": "child", "pid": ..., "status": ...}`` when that run
is done, then stays alive. The parent prints ``{"event": "forked"}`` and
waits to be killed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from ilmek import START, channel, graph, run, stream


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def open_store(kind: str, target: str, lease: float) -> Any:
    if kind == "sqlite":
        from ilmek.checkpoint.sqlite import SqliteCheckpointer

        return SqliteCheckpointer(target, lease_seconds=lease)
    import psycopg2.pool

    from ilmek.checkpoint.postgres import PostgresCheckpointer

    return PostgresCheckpointer(psycopg2.pool.ThreadedConnectionPool(1, 4, target), lease_seconds=lease)


def lingering_graph(inside: threading.Event, seconds: float) -> Any:
    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def linger() -> str:
            inside.set()
            time.sleep(seconds)
            return "woke"

        return {"log": [ctx.step("linger", linger)]}

    return graph("fork", {"log": channel.append()}).node("work", work).edge(START, "work").compile()


def main(kind: str, target: str, thread_id: str, lease: float) -> None:
    checkpointer = open_store(kind, target, lease)
    inside = threading.Event()
    # The main thread uses the store too, so the child inherits what this thread opened.
    checkpointer.get(thread_id)

    def hold_it() -> None:
        for _ in stream(
            lingering_graph(inside, 600), {"log": ["in"]}, thread_id=thread_id, checkpointer=checkpointer
        ):
            pass

    threading.Thread(target=hold_it, daemon=True).start()
    assert inside.wait(30)
    say(event="holding")
    child = os.fork()
    if child == 0:
        try:
            own = open_store(kind, target, lease) if kind == "postgres" else checkpointer
            quick = threading.Event()
            result = run(
                lingering_graph(quick, 0.0),
                {"log": ["child"]},
                thread_id=f"{thread_id}-child",
                checkpointer=own,
            )
            # A run that lingers keeps a hold of the child's own, renewed by the child's keeper.
            threading.Thread(
                target=lambda: run(
                    lingering_graph(threading.Event(), 600),
                    {"log": ["again"]},
                    thread_id=f"{thread_id}-child2",
                    checkpointer=own,
                ),
                daemon=True,
            ).start()
            say(event="child", pid=os.getpid(), status=result.status)
            time.sleep(600)
        finally:
            os._exit(0)
    say(event="forked", child=child)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
