"""What ``tick`` costs with 100 threads in the store and with 100,000, the same number of them due.

``tick`` finds the threads whose deadline or timer has come through the
partial index on ``due_at``; its cost should follow what is due, not how many
threads the store holds. The script fills the store with idle threads — half
finished, half paused with a deadline far in the future (in the index, never
due) — written in bulk straight into the threads table (``INSERT ... SELECT``:
a thread's row is all the sweep's query reads). Then, for each size, each
sample starts ``--due`` real runs that sleep until a moment already past
(``ctx.sleep``: a timer pause, committed), and times one ``tick`` that must
wake exactly those (each wake is a resume: one superstep) and, apart, the
query alone (``list_threads(due_before=now)``).

It prints the median of each at both sizes and their ratio (the target: at
most 2).

Usage: ``python benchmarks/bench_tick.py [--small 100] [--large 100000] [--due 10] [--samples 5]
[--target sqlite|postgres] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from typing import Any

from _common import (
    Target,
    add_target_options,
    open_target,
    positive_int,
    print_header,
    print_table,
    ratio,
)

from ilmek import START, channel, graph, run, tick
from ilmek.checkpoint.base import Checkpointer
from ilmek.graph import CompiledGraph

FAR = 4102444800.0  # 2100-01-01: a deadline that never comes due while this runs


def sleeper() -> CompiledGraph:
    """One node that sleeps until a moment already past, then writes ``woke``."""

    def nap(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.sleep("nap", until=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        return {"log": ["woke"]}

    return graph("bench-tick", {"log": channel.append()}).node("nap", nap).edge(START, "nap").compile()


def add_idle_threads(target: Target, first: int, last: int) -> None:
    """Thread rows ``idle-<first>`` .. ``idle-<last - 1>`` in one statement: odd ones done, even ones paused
    with a far deadline (so the partial index holds half of them)."""
    prefix = target.table_prefix
    columns = "thread_id, created_at, updated_at, status, step, checkpoint_id, metadata, due_at"
    picked = (
        "CASE WHEN i % 2 = 0 THEN 'interrupted' ELSE 'done' END, 0, 'none', {metadata}, "
        f"CASE WHEN i % 2 = 0 THEN {FAR} ELSE NULL END"
    )
    if target.name == "sqlite":
        sql = (
            f"WITH RECURSIVE n(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM n WHERE i < {last - 1}) "
            f"INSERT INTO {prefix}_threads ({columns}) SELECT 'idle-' || i, 0, 0, "
            + picked.format(metadata="'{}'")
            + " FROM n"
        )
    else:
        sql = (
            f"INSERT INTO {prefix}_threads ({columns}) SELECT 'idle-' || i, 0, 0, "
            + picked.format(metadata="'{}'::jsonb")
            + f" FROM generate_series({first}, {last - 1}) AS i"
        )
    connection = target.sql_connection()
    try:
        connection.cursor().execute(sql)
        connection.commit()
        if target.name != "sqlite":
            # What autovacuum does after a bulk load: without statistics the planner guesses a third
            # of the rows match and scans the table instead of the partial index.
            connection.cursor().execute(f"ANALYZE {prefix}_threads")
            connection.commit()
    finally:
        connection.close()


def measure(
    checkpointer: Checkpointer, g: CompiledGraph, due: int, samples: int, size: int
) -> tuple[float, float]:
    """Median ms of one tick waking ``due`` timers, and of the due query alone, at this size."""
    ticks: list[float] = []
    queries: list[float] = []
    for sample in range(samples):
        for n in range(due):
            run(g, {}, thread_id=f"due-{size}-{sample}-{n}", checkpointer=checkpointer)
        now = dt.datetime.now(dt.UTC)
        started = time.perf_counter()
        found = checkpointer.list_threads(due_before=now)
        queries.append((time.perf_counter() - started) * 1000)
        if len(found) != due:
            raise SystemExit(f"{len(found)} threads due, expected {due}")
        started = time.perf_counter()
        woke = tick(g, checkpointer, now=now)
        ticks.append((time.perf_counter() - started) * 1000)
        if len(woke) != due or any(r.status != "done" for r in woke):
            raise SystemExit(f"tick woke {len(woke)} of {due} timers: {[r.status for r in woke]}")
    return statistics.median(ticks), statistics.median(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=positive_int, default=100, help="threads in the store, first")
    parser.add_argument("--large", type=positive_int, default=100_000, help="threads in the store, then")
    parser.add_argument("--due", type=positive_int, default=10, help="threads due at each tick")
    parser.add_argument("--samples", type=positive_int, default=5, help="ticks timed at each size")
    add_target_options(parser)
    options = parser.parse_args()
    with open_target(options, "tick") as target:
        print_header(
            "bench_tick.py",
            target,
            [
                f"{options.due} threads due at each tick; the rest idle (half done, half paused, not due); "
                "idle rows inserted in bulk",
            ],
        )
        checkpointer = target.make_checkpointer()
        g = sleeper()
        add_idle_threads(target, 0, options.small)
        small_tick, small_query = measure(checkpointer, g, options.due, options.samples, options.small)
        add_idle_threads(target, options.small, options.large)
        large_tick, large_query = measure(checkpointer, g, options.due, options.samples, options.large)
        print_table(
            f"tick waking {options.due} timers (ms, median of {options.samples})",
            ["threads", "tick ms", "due query ms"],
            [
                [options.small, f"{small_tick:.2f}", f"{small_query:.3f}"],
                [options.large, f"{large_tick:.2f}", f"{large_query:.3f}"],
            ],
        )
        print(
            f"ratio large/small: tick {ratio(large_tick, small_tick):.2f}, "
            f"due query {ratio(large_query, small_query):.2f} (target: tick at most 2)"
        )
        checkpointer.close()


if __name__ == "__main__":
    main()
