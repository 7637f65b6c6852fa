"""Running a graph through transient database failures: the retry loop the README shows.

A ``TransientStorageError`` (the server restarting, a connection killed, a
pool with nothing to lend) or a ``ThreadBusyError`` (another run still holds
the thread) is worth another try. The input is committed before any node
runs, so a retry must not send it twice: when the failed run had already
committed something (its checkpoints carry its ``run_id``, and so does the
error), the retry continues the thread with ``None`` instead.

Run as a script, it shows the loop at work on a small graph: another
"process" holds the thread for a moment, the first tries fail busy, a later
one runs, and the welcome email is sent once. From a clone (``bash
scripts/demo`` or ``bash scripts/test`` makes ``.venv``)::

    .venv/bin/python examples/retrying.py
    .venv/bin/python -m examples.retrying

The SQLite file lives in a temporary folder, removed at the end.
"""

from __future__ import annotations

import pathlib
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from ilmek import (
    END,
    START,
    CompiledGraph,
    Result,
    SqliteCheckpointer,
    ThreadBusyError,
    TransientStorageError,
    channel,
    graph,
    run,
)
from ilmek.checkpoint.base import Checkpointer

RetryReport = Callable[[int, Exception, float], None]
"""Told of each failed attempt: its number, the error, and the seconds before the next."""


def run_reliably(
    graph: CompiledGraph,
    update: Any,
    *,
    thread_id: str,
    checkpointer: Checkpointer,
    attempts: int = 8,
    backoff: float = 0.2,
    on_retry: RetryReport | None = None,
) -> Result:
    """``run``, tried again (with growing pauses) while the failure is transient.

    A node's own failure is not retried here (its ``RetryPolicy`` is for that):
    it comes back as a result with ``status == "error"``, which the caller
    checks with ``raise_for_status()``.
    """
    for attempt in range(1, attempts + 1):
        try:
            return run(graph, update, thread_id=thread_id, checkpointer=checkpointer)
        except (TransientStorageError, ThreadBusyError) as error:
            if attempt == attempts:
                raise
            pause = backoff * 2 ** (attempt - 1)
            if on_retry is not None:
                on_retry(attempt, error, pause)
            time.sleep(pause)
            if update is not None and _committed(checkpointer, thread_id, error.run_id):
                update = None  # the input landed before the failure: continue, do not add it twice
    raise AssertionError("unreachable")


def _committed(checkpointer: Checkpointer, thread_id: str, run_id: str | None) -> bool:
    """Whether the failed run committed a checkpoint (its input at least)."""
    for _ in range(20):
        try:
            latest = checkpointer.get(thread_id)
        except TransientStorageError:
            time.sleep(0.5)
            continue
        return latest is not None and latest.metadata.get("run_id") == run_id
    return False


# --- the demonstration -------------------------------------------------------------------------

THREAD_ID = "signup-1"
HELD_FOR = 0.5


def signup_graph(sent: list[str]) -> CompiledGraph:
    """One node that sends a welcome email in a journaled step (``sent`` counts the sends)."""

    def send(address: str) -> str:
        sent.append(address)
        print(f"  sending the welcome email to {address}", flush=True)
        return f"welcomed {address}"

    def welcome(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.step("send_email", send, state["email"])]}

    return (
        graph("signup", {"email": channel.last_write(""), "log": channel.append()})
        .node("welcome", welcome)
        .edge(START, "welcome")
        .edge("welcome", END)
        .compile()
    )


def _say_retry(attempt: int, error: Exception, pause: float) -> None:
    print(f"attempt {attempt}: {type(error).__name__} ({error}); trying again in {pause:.1f} s", flush=True)


def main() -> int:
    """Hold the thread from another checkpointer for a moment, and run through it with ``run_reliably``."""
    sent: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "retrying.db"
        with SqliteCheckpointer(path) as mine, SqliteCheckpointer(path) as theirs:
            taken = threading.Event()

            def elsewhere() -> None:
                # What a run in another process looks like from here: a hold on the thread.
                with theirs.hold(THREAD_ID):
                    taken.set()
                    time.sleep(HELD_FOR)

            holder = threading.Thread(target=elsewhere)
            holder.start()
            taken.wait()
            print(f"another run holds thread {THREAD_ID!r} for {HELD_FOR} s; running it anyway:", flush=True)
            result = run_reliably(
                signup_graph(sent),
                {"email": "ada@example.com"},
                thread_id=THREAD_ID,
                checkpointer=mine,
                on_retry=_say_retry,
            ).raise_for_status()  # a node that failed is re-raised here, not mistaken for a run
            holder.join()
    print(f"the run ended {result.status}: {result.state['log']}")
    print(f"the welcome email was sent {len(sent)} time{'s' if len(sent) != 1 else ''}")
    return 0 if result.status == "done" and len(sent) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
