"""ilmek and DBOS Transact side by side: a durable step, on the same database, in one process.

The workload: a run (ilmek) or a workflow (DBOS) of ``--steps`` durable
steps (10 by default), each a function whose small result is recorded before
the next one starts, on a new thread (ilmek) or a new workflow id (DBOS).
ilmek: one node calling ``ctx.step(f"s{i}", fn)`` for each step, the run's
input committed first; DBOS: a ``@DBOS.workflow()`` calling a
``@DBOS.step()`` function, each step's outcome recorded in its own
transaction. Both record the same values; each system's time is divided by
the number of steps, so the figure is the cost of one durable step with its
share of the run (or workflow) around it.

Both systems run in batches of ``--batch`` runs whose order swaps from round
to round, ``--samples`` rounds. Stores (``--target``): **sqlite** (ilmek's
``SqliteCheckpointer`` on one file, DBOS's system database on another, in
the same folder; DBOS opens SQLite with its own settings, ilmek with
``synchronous`` as given); **postgres** (ilmek on a psycopg2 pool, DBOS on
its own SQLAlchemy pool, one server, with fsync on).

Printed: each system's median time per durable step, wall and CPU, and the
ratio DBOS / ilmek (higher: ilmek faster).

DBOS is not a dependency of ilmek's, not even of its ``bench`` extra (it
pins its own SQLAlchemy and pulls in much else): install it in a virtual
environment of its own beside ilmek, ``pip install -e . dbos``. Without it
the script says so and measures ilmek alone.

Usage: ``python benchmarks/bench_dbos.py [--target sqlite|postgres] [--quick] [--samples 10]
[--batch 5] [--steps 10] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import importlib
import uuid
from collections.abc import Callable
from typing import Any

from _common import (
    PostgresTarget,
    SqliteTarget,
    Target,
    Timings,
    add_target_options,
    machine,
    open_target,
    positive_int,
    print_table,
    ratio,
)

from ilmek import START, Checkpointer, CompiledGraph, NodeContext, channel, graph, run

INSTALL_HINT = (
    "DBOS is not installed, so ilmek is measured alone: pip install dbos (in a virtual environment of "
    "its own with ilmek installed, 'pip install -e . dbos')"
)

FULL = {"samples": 10, "batch": 5, "steps": 10}
QUICK = {"samples": 2, "batch": 1, "steps": 2}
"""``--quick``: a smoke test's sizes (the figures mean nothing)."""


def record(index: int) -> dict[str, Any]:
    """What each durable step returns: a small dict, as a payment gateway's answer would be."""
    return {"step": index, "status": "ok"}


def ilmek_graph(steps: int) -> CompiledGraph[dict[str, Any]]:
    """One node running ``steps`` journaled steps."""

    def work(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        results = [ctx.step(f"s{index}", record, index) for index in range(steps)]
        return {"done": len(results)}

    return (
        graph("durable_steps", {"done": channel.last_write(0)})
        .node("work", work)
        .edge(START, "work")
        .compile()
    )


def ilmek_runner(checkpointer: Checkpointer, steps: int) -> Callable[[], None]:
    """One run of the workload on a new thread."""
    g = ilmek_graph(steps)

    def once() -> None:
        result = run(g, {}, thread_id=uuid.uuid4().hex, checkpointer=checkpointer)
        if result.status != "done":
            raise RuntimeError(f"ilmek's run ended {result.status}: {result.errors}")

    return once


def dbos_url(target: Target) -> str:
    """The system database DBOS is given: a file beside ilmek's, or a database of its own on the server."""
    if isinstance(target, SqliteTarget):
        return f"sqlite:///{target.folder / 'dbos.sqlite'}"
    assert isinstance(target, PostgresTarget)
    from tests.support.pgcluster import dsn_to_url

    url = dsn_to_url(target.dsn)
    base, _, query = url.partition("?")
    server = base.rsplit("/", 1)[0]
    return f"{server}/ilmek_bench_dbos" + (f"?{query}" if query else "")


def dbos_runner(url: str, steps: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """One DBOS workflow of ``steps`` steps, and how to shut DBOS down."""
    # Imported by name: DBOS is no declared dependency of the project, not even of an extra.
    DBOS = importlib.import_module("dbos").DBOS

    config: dict[str, Any] = {
        "name": "ilmek-bench",
        "system_database_url": url,
        "log_level": "WARNING",
        "console_log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def step(index: int) -> dict[str, Any]:
        return record(index)

    @DBOS.workflow()
    def workflow(count: int) -> int:
        return len([step(index) for index in range(count)])

    DBOS.launch()

    def once() -> None:
        if workflow(steps) != steps:
            raise RuntimeError("DBOS's workflow did not run every step")

    return once, lambda: DBOS.destroy(destroy_registry=True)


def dbos_installed() -> bool:
    """Whether ``import dbos`` works here."""
    try:
        importlib.import_module("dbos")
    except ImportError:
        return False
    return True


def measure(
    runners: dict[str, Callable[[], None]], samples: int, batch: int, steps: int
) -> dict[str, Timings]:
    """Each runner's time per durable step, batches interleaved in swapping order."""
    timings = {name: Timings() for name in runners}
    for runner in runners.values():
        runner()  # warm up: tables, caches, the first connection
    names = list(runners)
    for round_number in range(samples):
        order = names if round_number % 2 == 0 else list(reversed(names))
        for name in order:
            lap = Timings()
            for _ in range(batch):
                runners[name]()
                lap.lap()
            # Per step: each run's time spread over its steps.
            lap.wall = [seconds / steps for seconds in lap.wall]
            lap.cpu = [seconds / steps for seconds in lap.cpu]
            timings[name].extend(lap)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    add_target_options(parser, default="sqlite")
    parser.add_argument("--quick", action="store_true", help="a smoke test's sizes")
    parser.add_argument("--samples", type=positive_int, default=None)
    parser.add_argument("--batch", type=positive_int, default=None)
    parser.add_argument("--steps", type=positive_int, default=None)
    options = parser.parse_args()
    sizes = dict(QUICK if options.quick else FULL)
    for key in sizes:
        if getattr(options, key) is not None:
            sizes[key] = getattr(options, key)
    have_dbos = dbos_installed()
    with open_target(options, "dbos") as target:
        print(f"bench_dbos.py: {target.describe()}")
        print(machine())
        print(
            f"{sizes['steps']} durable steps per run; {sizes['samples']} rounds of {sizes['batch']} runs each"
        )
        if not have_dbos:
            print(INSTALL_HINT)
        checkpointer = target.make_checkpointer()
        runners = {"ilmek": ilmek_runner(checkpointer, sizes["steps"])}
        shutdown: Callable[[], None] = lambda: None  # noqa: E731 - nothing to shut without DBOS
        if have_dbos:
            runners["DBOS"], shutdown = dbos_runner(dbos_url(target), sizes["steps"])
        try:
            timings = measure(runners, sizes["samples"], sizes["batch"], sizes["steps"])
        finally:
            shutdown()
            checkpointer.close()
    rows = [[name, found.wall_ms(), found.cpu_ms()] for name, found in timings.items()]
    print_table(f"a durable step on {target.name}, ms", ["system", "wall ms", "CPU ms"], rows)
    if "DBOS" in timings:
        ilmek_timings, dbos_timings = timings["ilmek"], timings["DBOS"]
        print_table(
            "DBOS / ilmek (higher: ilmek faster)",
            ["store", "wall", "CPU"],
            [
                [
                    target.name,
                    ratio(dbos_timings.wall_ms(), ilmek_timings.wall_ms()),
                    ratio(dbos_timings.cpu_ms(), ilmek_timings.cpu_ms()),
                ]
            ],
        )


if __name__ == "__main__":
    main()
