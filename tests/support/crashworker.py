"""A worker program that runs one ilmek graph in its own process, so tests can kill it.

The crash tests (``tests/integration/crash/``) start it with ``python -m
tests.support.crashworker`` (through ``tests/support/crash.py``), SIGKILL it
at chosen moments and race two of it against each other. What belongs
here: the graphs those tests run (importable, so a test can also run them
in-process to learn what an uninterrupted run produces), the effects file
that counts what really ran, and the command line.

Every step function appends one line to an *effects file* per real
execution, outside the database, so a test sees what happened even when the
database did not get to record it.

The worker talks to the test through stdout, one JSON object a line:
``{"event": "ready"}`` (waiting for ``--go-file``), ``{"event": "started"}``
(the run holds the thread and has begun), ``{"event": "waiting", "point":
...}`` (parked at ``--wait-at`` until ``--wait-for`` exists), ``{"event":
"lingering", "point": ...}`` (parked at ``--linger-at``, waiting to be
killed) and finally
``{"event": "outcome", "outcome": ..., ...}``. It exits 0 whenever it
reports an outcome; anything else is a traceback on stderr and exit 1.

Usage::

    python -m tests.support.crashworker GRAPH ACTION --db TARGET --thread ID --effects FILE [options]

``TARGET`` is a SQLite path or a ``postgresql://`` URL (see :func:`open_target`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    ResumeError,
    ThreadBusyError,
    channel,
    graph,
    resume_stream,
    stream,
)
from ilmek.events import Event, RunEnd

T = TypeVar("T")

LEASE_SECONDS = 1.0
"""The SQLite lease: how long a killed holder keeps its thread."""

LOOP_ROUNDS = 12
"""Supersteps the loop graph takes (each does two journaled steps)."""

# How long a step function dawdles after taking effect: the window in which a
# kill leaves an effect whose record is not yet durable (the one allowed repeat).
SETTLE_SECONDS = 0.003
# The pause between the two steps of one loop superstep.
STEP_GAP_SECONDS = 0.002
# Long enough that only a kill ends a lingering worker; short enough that a
# worker a broken test forgot to kill does not outlive the session by much.
LINGER_SECONDS = 120.0
WAIT_FOR_FILE_SECONDS = 10.0

INPUTS: dict[str, dict[str, Any]] = {
    "loop": {"seed": "s"},
    "checkout": {"cart": ["coffee", "mug"]},
    "slow": {"log": ["begun"]},
    "nested": {"log": ["begun"]},
}
"""The input each graph starts with."""

Reached = Callable[[str], None]
"""Called by a node when it reaches a named point; the worker parks or waits there."""


def _nowhere(point: str) -> None:
    """The default :data:`Reached`: carry on."""


def is_postgres(target: str) -> bool:
    """Whether a ``--db`` target names a Postgres database rather than a SQLite file."""
    return target.startswith(("postgresql://", "postgres://"))


def open_target(target: str) -> Checkpointer:
    """Open the checkpointer a ``--db`` target names.

    A path opens ``SqliteCheckpointer(path, lease_seconds=1.0)``; a
    ``postgresql://`` URL opens ``PostgresCheckpointer.connect(url)`` (imported
    only then, so SQLite runs never import a Postgres driver).
    """
    if is_postgres(target):
        from ilmek.checkpoint.postgres import PostgresCheckpointer

        checkpointer: Checkpointer = PostgresCheckpointer.connect(target)
        return checkpointer
    from ilmek.checkpoint.sqlite import SqliteCheckpointer

    return SqliteCheckpointer(target, lease_seconds=LEASE_SECONDS)


class Effects:
    """An append-only file with one line per real execution of a step function.

    Each line is one ``write`` on an ``O_APPEND`` descriptor, so lines from
    several processes never interleave, and is fsync'd before the step
    function goes on.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)

    def record(self, key: str) -> None:
        """Note that the effect named ``key`` happened, durably."""
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, f"{key}\n".encode())
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def perform(self, key: str, result: T) -> T:
        """A step function: take effect (record ``key``), then return ``result``."""
        self.record(key)
        time.sleep(SETTLE_SECONDS)
        return result

    def lines(self) -> list[str]:
        """Every effect so far, in the order they happened."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return text.splitlines()

    def counts(self) -> collections.Counter[str]:
        """How many times each effect happened, in every process so far."""
        return collections.Counter(self.lines())


# --- the graphs -----------------------------------------------------------------------


def loop_graph(effects: Effects, reached: Reached = _nowhere) -> CompiledGraph:
    """A loop of :data:`LOOP_ROUNDS` supersteps, each doing steps ``a:<i>`` and ``b:<i>``."""

    def tick(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        i = len(state["log"])
        a = ctx.step(f"a:{i}", effects.perform, f"a:{i}", i * i)
        time.sleep(STEP_GAP_SECONDS)
        b = ctx.step(f"b:{i}", effects.perform, f"b:{i}", a + i)
        return {"log": [f"{state['seed']}:{i}:{a}:{b}"]}

    def again(state: dict[str, Any], ctx: Any) -> str:
        return "tick" if len(state["log"]) < LOOP_ROUNDS else END

    return (
        graph("crash-loop", {"seed": channel.last_write(""), "log": channel.append()})
        .node("tick", tick)
        .edge(START, "tick")
        .router("tick", again, destinations=["tick", END])
        .compile()
    )


def checkout_graph(effects: Effects, reached: Reached = _nowhere) -> CompiledGraph:
    """The spec's checkout: ``create_order``, the pause "Charge?", ``charge``.

    Points: ``charging`` (inside the charge, before it takes effect) and
    ``charged`` (after the charge step returned, before the node does).
    """

    def create_order(cart: list[str]) -> dict[str, Any]:
        effects.record("create_order")
        return {"id": 7, "total": 249.9, "items": cart}

    def charge(order: dict[str, Any], answer: Any) -> str:
        reached("charging")
        effects.record(f"charge:{answer}")
        return "charged" if answer == "yes" else "cancelled"

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", create_order, state["cart"])
        answer = ctx.interrupt({"question": f"Charge {order['total']}?"})
        outcome = ctx.step("charge", charge, order, answer)
        reached("charged")
        return {"log": [outcome]}

    return (
        graph("crash-checkout", {"cart": channel.last_write([]), "log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def slow_graph(effects: Effects, reached: Reached = _nowhere) -> CompiledGraph:
    """One node: step ``prepare``, the point ``prepared`` (where a worker lingers), step ``finish``."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        prepared = ctx.step("prepare", effects.perform, "prepare", "prepared")
        reached("prepared")
        finished = ctx.step("finish", effects.perform, "finish", "finished")
        return {"log": [prepared, finished]}

    return (
        graph("crash-slow", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def nested_graph(effects: Effects, reached: Reached = _nowhere) -> CompiledGraph:
    """Two levels of subgraphs: root ``before`` → ``outer`` → ``inner`` (steps ``first``, then
    ``prepare``, the point ``prepared``, ``finish``) → root ``after``; every step is an effect.
    """

    def effect(name: str) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"log": [ctx.step(name, effects.perform, name, name)]}

        return node

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        prepared = ctx.step("prepare", effects.perform, "prepare", "prepared")
        reached("prepared")
        finished = ctx.step("finish", effects.perform, "finish", "finished")
        return {"log": [prepared, finished]}

    log = {"log": channel.append()}
    inner = (
        graph("crash-inner", log)
        .node("first", effect("first"))
        .node("work", work)
        .edge(START, "first")
        .edge("first", "work")
        .edge("work", END)
        .compile()
    )
    outer = graph("crash-outer", log).node("inner", inner).edge(START, "inner").edge("inner", END).compile()
    return (
        graph("crash-nested", log)
        .node("before", effect("before"))
        .node("outer", outer)
        .node("after", effect("after"))
        .edge(START, "before")
        .edge("before", "outer")
        .edge("outer", "after")
        .edge("after", END)
        .compile()
    )


GRAPHS: dict[str, Callable[[Effects, Reached], CompiledGraph]] = {
    "loop": loop_graph,
    "checkout": checkout_graph,
    "slow": slow_graph,
    "nested": nested_graph,
}


# --- the worker -----------------------------------------------------------------------


def announce(event: str, **fields: Any) -> None:
    """Tell the test something, one JSON line on stdout."""
    print(json.dumps({"event": event, **fields}, default=repr), flush=True)


def wait_for_file(path: str, timeout: float) -> bool:
    """Poll until ``path`` exists; False if it did not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


class Points:
    """What the worker does when a node reaches a named point (see ``--linger-at``, ``--wait-at``)."""

    def __init__(self, linger_at: str | None, wait_at: str | None, wait_for: str | None) -> None:
        self.linger_at = linger_at
        self.wait_at = wait_at
        self.wait_for = wait_for

    def reached(self, point: str) -> None:
        if point == self.wait_at and self.wait_for is not None:
            announce("waiting", point=point)
            # Carry on after the timeout: were the wait a mistake, the test
            # should see what the run does next, not a hung worker.
            wait_for_file(self.wait_for, WAIT_FOR_FILE_SECONDS)
        if point == self.linger_at:
            announce("lingering", point=point)
            time.sleep(LINGER_SECONDS)


def _events(graph_: CompiledGraph, args: argparse.Namespace, checkpointer: Checkpointer) -> Iterator[Event]:
    options: dict[str, Any] = {"thread_id": args.thread, "checkpointer": checkpointer}
    if args.action == "resume":
        return resume_stream(graph_, args.answer, **options)
    start_input: dict[str, Any] | None = INPUTS[args.graph]
    # Continue with run(g, None); but a run that died before committing its
    # input left nothing to continue: then send the input again, as a client
    # whose request failed would.
    if args.action == "continue" and checkpointer.get(args.thread) is not None:
        start_input = None
    return stream(graph_, start_input, **options)


def drive(graph_: CompiledGraph, args: argparse.Namespace, checkpointer: Checkpointer) -> dict[str, Any]:
    """Run the action, retrying a busy thread for ``--wait-busy`` seconds; return the outcome."""
    deadline = time.monotonic() + args.wait_busy
    try:
        while True:
            events = _events(graph_, args, checkpointer)
            try:
                # The hold is taken when the first event is asked for.
                end = next(events)
            except ThreadBusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
                continue
            break
        announce("started")
        for event in events:
            end = event
    except ThreadBusyError as error:
        return {"outcome": "busy", "message": str(error)}
    except ResumeError as error:
        return {"outcome": "resume_error", "message": str(error)}
    assert isinstance(end, RunEnd)
    return {
        "outcome": end.status,
        "state": end.state,
        "errors": [f"{node}: {error!r}" for node, error in end.errors],
    }


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.crashworker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("graph", choices=sorted(GRAPHS))
    parser.add_argument(
        "action",
        choices=["start", "continue", "resume"],
        help="start: run with the graph's input; continue: run(g, None) (with the input if the "
        "thread has no checkpoint yet); resume: answer the pause with --answer",
    )
    parser.add_argument("--db", required=True, help="a SQLite path or a postgresql:// URL")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--effects", required=True, help="the effects file to append to")
    parser.add_argument("--answer", help="the answer, for resume")
    parser.add_argument("--wait-busy", type=float, default=0.0, help="retry a busy thread this long")
    parser.add_argument("--go-file", help="announce ready, then start when this file exists")
    parser.add_argument("--linger-at", help="at this point, announce it and sleep until killed")
    parser.add_argument("--wait-at", help="at this point, wait for --wait-for to exist")
    parser.add_argument("--wait-for", help="the file --wait-at waits for")
    parser.add_argument("--outcome-file", help="also write the outcome here (atomically)")
    args = parser.parse_args(argv)
    if args.action == "resume" and args.answer is None:
        parser.error("resume needs --answer")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    points = Points(args.linger_at, args.wait_at, args.wait_for)
    graph_ = GRAPHS[args.graph](Effects(args.effects), points.reached)
    if args.go_file is not None:
        # Before opening the database, so that racing workers also race to open
        # (and, on a new database, to create) it.
        announce("ready")
        if not wait_for_file(args.go_file, 60.0):
            raise TimeoutError(f"the go file {args.go_file} never appeared")
    checkpointer = open_target(args.db)
    try:
        outcome = drive(graph_, args, checkpointer)
    finally:
        checkpointer.close()
    if args.outcome_file is not None:
        scratch = f"{args.outcome_file}.{os.getpid()}.tmp"
        pathlib.Path(scratch).write_text(json.dumps(outcome, default=repr), encoding="utf-8")
        os.replace(scratch, args.outcome_file)
    announce("outcome", **outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
