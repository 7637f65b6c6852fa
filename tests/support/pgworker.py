"""A worker process for the Postgres tests: one ilmek operation on Postgres, to race or kill.

Its tests are in ``tests/integration/postgres/``.

What belongs here: the graphs those tests run (importable, so a test runs the
very same graph in-process before or after a worker), the effects file that
counts what really ran, and the command line. Nothing here asserts; the test
reads what the worker reports.

Every step function appends one line to an *effects file* per real
execution (one ``write`` on an ``O_APPEND`` descriptor, so lines of several
processes never interleave), so a test can count side effects across
processes, including ones a killed process performed.

The worker talks to the test through stdout, one JSON object a line:
``{"event": "ready"}`` (connected; waiting for ``--go-file`` if given),
``{"event": "lingering"}`` (parked inside a node, holding the thread, waiting
to be killed) and finally ``{"event": "outcome", "outcome": ...}``.

Usage::

    python -m tests.support.pgworker migrate --dsn DSN [--go-file F]
    python -m tests.support.pgworker resume --dsn DSN --thread T --effects F --answer A [--go-file F]
    python -m tests.support.pgworker linger --dsn DSN --thread T --effects F [--client connection|pool]
        [--lease SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ilmek import (
    END,
    START,
    CompiledGraph,
    PostgresCheckpointer,
    ResumeError,
    ThreadBusyError,
    channel,
    graph,
    resume,
    run,
)
from tests.support.crashworker import Effects

# How long the charge of a racing resume takes: long enough that a rival
# started at the same moment usually finds the thread held (either outcome
# is correct; this only makes the interesting one likely).
CHARGE_SECONDS = 0.3
# Only a kill ends a lingering worker; a forgotten one still goes away.
LINGER_SECONDS = 60.0
GO_FILE_SECONDS = 30.0

CART = {"cart": ["coffee", "mug"]}
CHECKOUT_DONE = {"cart": ["coffee", "mug"], "log": ["charged"]}

Reached = Callable[[str], None]
"""Called by a node when it reaches a named point."""


def _carry_on(point: str) -> None:
    """The default :data:`Reached`: do nothing."""


def checkout_graph(effects: Effects, *, charge_seconds: float = 0.0) -> CompiledGraph:
    """The spec's checkout: step ``create_order``, the pause "Charge?", step ``charge``."""

    def create_order(cart: list[str]) -> dict[str, Any]:
        effects.record("create_order")
        return {"id": 7, "total": 249.9, "items": cart}

    def charge(order: dict[str, Any], answer: Any) -> str:
        effects.record(f"charge:{answer}")
        time.sleep(charge_seconds)
        return "charged" if answer == "yes" else "cancelled"

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", create_order, state["cart"])
        answer = ctx.interrupt({"question": f"Charge {order['total']}?"})
        return {"log": [ctx.step("charge", charge, order, answer)]}

    return (
        graph("pg-checkout", {"cart": channel.last_write([]), "log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def run_checkout(checkpointer: PostgresCheckpointer, effects: Effects, thread_id: str) -> None:
    """The checkout flow: run -> interrupted -> resume -> done, each step once."""
    checkout = checkout_graph(effects)
    paused = run(checkout, CART, thread_id=thread_id, checkpointer=checkpointer)
    assert "interrupted" == paused.status
    assert [{"question": "Charge 249.9?"}] == [pending.payload for pending in paused.pending]
    finished = resume(checkout, "yes", thread_id=thread_id, checkpointer=checkpointer)
    assert "done" == finished.status
    assert CHECKOUT_DONE == finished.state
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()


def two_step_graph(effects: Effects, reached: Reached = _carry_on) -> CompiledGraph:
    """One node: step ``prepare``, the point ``prepared``, step ``finish``."""

    def perform(key: str, result: str) -> str:
        effects.record(key)
        return result

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        prepared = ctx.step("prepare", perform, "prepare", "prepared")
        reached("prepared")
        finished = ctx.step("finish", perform, "finish", "finished")
        return {"log": [prepared, finished]}

    return (
        graph("pg-two-step", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


TWO_STEP_INPUT: dict[str, Any] = {"log": ["begun"]}
TWO_STEP_FINAL: dict[str, Any] = {"log": ["begun", "prepared", "finished"]}


def announce(event: str, **fields: Any) -> None:
    """Tell the test something: one JSON line on stdout."""
    print(json.dumps({"event": event, **fields}, default=repr), flush=True)


def wait_for_file(path: str | None) -> None:
    if path is None:
        return
    deadline = time.monotonic() + GO_FILE_SECONDS
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the go file {path} never appeared")
        time.sleep(0.001)


def open_client(dsn: str, kind: str) -> Any:
    """A psycopg2 connection or pool of this process's own."""
    import psycopg2
    import psycopg2.pool

    if kind == "pool":
        return psycopg2.pool.ThreadedConnectionPool(1, 4, dsn)
    return psycopg2.connect(dsn)


def do_migrate(args: argparse.Namespace) -> dict[str, Any]:
    client = open_client(args.dsn, "connection")
    announce("ready")
    wait_for_file(args.go_file)
    try:
        PostgresCheckpointer(client).migrate()
    except Exception as error:
        return {"outcome": "error", "error": repr(error)}
    finally:
        client.close()
    return {"outcome": "migrated"}


def do_resume(args: argparse.Namespace) -> dict[str, Any]:
    client = open_client(args.dsn, "connection")
    checkpointer = PostgresCheckpointer(client)
    announce("ready")
    wait_for_file(args.go_file)
    graph_ = checkout_graph(Effects(args.effects), charge_seconds=CHARGE_SECONDS)
    try:
        result = resume(graph_, args.answer, thread_id=args.thread, checkpointer=checkpointer)
    except ThreadBusyError as error:
        return {"outcome": "busy", "message": str(error)}
    except ResumeError as error:
        return {"outcome": "resume_error", "message": str(error)}
    finally:
        client.close()
    return {"outcome": result.status, "state": result.state}


def do_linger(args: argparse.Namespace) -> dict[str, Any]:
    client = open_client(args.dsn, args.client)
    checkpointer = PostgresCheckpointer(client, lease_seconds=args.lease)
    announce("ready")

    def reached(point: str) -> None:
        announce("lingering", point=point)
        time.sleep(LINGER_SECONDS)

    result = run(
        two_step_graph(Effects(args.effects), reached),
        TWO_STEP_INPUT,
        thread_id=args.thread,
        checkpointer=checkpointer,
    )
    return {"outcome": result.status}


ACTIONS = {"migrate": do_migrate, "resume": do_resume, "linger": do_linger}


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.pgworker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=sorted(ACTIONS))
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--thread")
    parser.add_argument("--effects")
    parser.add_argument("--answer")
    parser.add_argument("--go-file")
    parser.add_argument("--client", choices=["connection", "pool"], default="connection")
    parser.add_argument("--lease", type=float, default=5.0, help="the checkpointer's lease_seconds")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    outcome = ACTIONS[args.action](args)
    announce("outcome", **outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
