"""Supersteps per second with N worker threads, each driving a thread of its own, vs one worker.

Every worker runs, again and again, a loop graph on its own ``thread_id``:
the input checkpoint of a user message, then ``--supersteps`` supersteps of
a node appending a 200-byte message (a router ends the run after that many;
``recursion_limit`` is never the limit). All workers share ONE checkpointer:
on Postgres (the default target) one ``PostgresCheckpointer`` on one psycopg2
``ThreadedConnectionPool`` sized so it never starves (a running run holds one
connection for its hold and borrows another for each write: two per worker,
and two to spare); on ``--target sqlite`` one ``SqliteCheckpointer`` on one
file (SQLite takes one writer at a time: expect little speed-up).

Rounds of ``--seconds`` alternate between 1 worker and ``--workers`` (8 by
default), in swapping order, after one unrecorded warm-up round of each.
A round counts the supersteps committed before its deadline (a run's input
checkpoint is work done but not counted). The script prints supersteps per
second for each, the speed-up, the CPU per superstep of this process and of
the server, and the ceilings those put on the speed-up of this machine.

Usage: ``python benchmarks/bench_concurrency.py [--workers 8] [--supersteps 50]
[--seconds 3] [--rounds 5] [--synchronous FULL|NORMAL] [--target postgres|sqlite]
[--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from _common import (
    MESSAGE_BYTES,
    NEVER_ENDING,
    BareWriter,
    Target,
    add_target_options,
    message,
    open_target,
    positive_int,
    print_header,
    print_table,
    ratio,
)

from ilmek import END, START, CompiledGraph, channel, graph, stream
from ilmek.checkpoint.base import Checkpointer
from ilmek.events import CheckpointEvent, StepStart


def run_graph(supersteps: int) -> CompiledGraph:
    """``messages`` (append); ``think`` appends a message and runs again until the run did ``supersteps``."""

    def think(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": message("assistant", len(state["messages"]))}

    def again(state: dict[str, Any], ctx: Any) -> str:
        # Counted per run, not from the history: a run stopped at a round's
        # deadline leaves its thread unfinished, and the next run starts afresh.
        done = ctx.recursion_limit - ctx.remaining_steps
        return END if done >= supersteps else "think"

    return (
        graph("concurrency", {"messages": channel.append()})
        .node("think", think)
        .edge(START, "think")
        .router("think", again)
        .compile()
    )


class Round(NamedTuple):
    """What one timed round of ``workers`` measured."""

    workers: int
    seconds: float
    supersteps: int
    client_cpu: float
    server_cpu: float | None

    @property
    def rate(self) -> float:
        """Supersteps per second, all workers together."""
        return self.supersteps / self.seconds


class Bench:
    """One checkpointer, one graph, and the workers' threads (distinct ids per configuration)."""

    def __init__(self, target: Target, checkpointer: Checkpointer, graph_: CompiledGraph) -> None:
        self.target = target
        self.checkpointer = checkpointer
        self.graph = graph_
        self._runs = 0

    def _drive(self, thread_id: str, stop: threading.Event, counts: list[int], slot: int) -> None:
        """One worker: run after run on ``thread_id`` until ``stop``; count supersteps committed before it."""
        while not stop.is_set():
            self._runs += 1  # only names the input message; races between workers do not matter
            events = stream(
                self.graph,
                {"messages": message("user", self._runs)},
                thread_id=thread_id,
                checkpointer=self.checkpointer,
                recursion_limit=NEVER_ENDING,
            )
            stepping = False  # the input checkpoint comes before the first step_start
            try:
                for event in events:
                    if isinstance(event, StepStart):
                        stepping = True
                    elif isinstance(event, CheckpointEvent) and stepping:
                        if stop.is_set():
                            break
                        counts[slot] += 1
            finally:
                events.close()  # a run stopped mid-way gives its thread back

    def round(self, workers: int, seconds: float, bare: BareWriter | None = None) -> Round:
        """Run ``workers`` workers for ``seconds``; the supersteps they committed meanwhile.

        With ``bare``, each worker instead inserts and commits the same
        payload through it, as fast as it can: the hardware's own ceiling.
        """
        stop = threading.Event()
        counts = [0] * workers
        failures: list[BaseException] = []
        ready = threading.Barrier(workers + 1)

        def worker(slot: int) -> None:
            try:
                ready.wait()
                if bare is None:
                    self._drive(f"workers-{workers}-{slot}", stop, counts, slot)
                else:
                    while not stop.is_set():
                        bare.write()
                        counts[slot] += 1
            except BaseException as error:  # reported by the main thread
                failures.append(error)
                stop.set()

        threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(workers)]
        for thread in threads:
            thread.start()
        server_before = self.target.server_cpu_seconds()
        ready.wait()
        started, cpu_started = time.perf_counter(), time.process_time()
        time.sleep(seconds)
        stop.set()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        server_after = self.target.server_cpu_seconds()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        server = None if server_before is None or server_after is None else server_after - server_before
        return Round(workers, elapsed, sum(counts), cpu, server)


def summarize(rounds: Sequence[Round]) -> dict[str, float | None]:
    """Medians over one configuration's rounds."""
    supersteps = sum(r.supersteps for r in rounds)
    servers = [r.server_cpu for r in rounds]
    server_total = None if any(s is None for s in servers) else sum(s for s in servers if s is not None)
    return {
        "rate": statistics.median(r.rate for r in rounds),
        "low": min(r.rate for r in rounds),
        "high": max(r.rate for r in rounds),
        "client_ms": 1000.0 * sum(r.client_cpu for r in rounds) / supersteps if supersteps else float("nan"),
        "server_ms": None if server_total is None or not supersteps else 1000.0 * server_total / supersteps,
    }


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers", type=positive_int, default=8, help="worker threads to compare with one (default 8)"
    )
    parser.add_argument("--supersteps", type=positive_int, default=50, help="supersteps per run (default 50)")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="length of a measured round in seconds (default 3)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=5, help="measured rounds of each configuration (default 5)"
    )
    add_target_options(parser, default="postgres")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    many = options.workers
    with open_target(options, "concurrency") as target:
        print_header(
            "bench_concurrency",
            target,
            [
                f"1 vs {many} worker threads, each on its own thread id, through one checkpointer; "
                f"a run = input checkpoint + {options.supersteps} supersteps of a 200-byte append",
                f"{options.rounds} rounds of {options.seconds:g} s per configuration, alternating, "
                "after one warm-up round of each",
            ],
        )
        checkpointer = target.make_checkpointer(concurrent_runs=many)
        # The floor runs through the same pool (Postgres: a pool is safe to
        # share); SQLite's bare writer is one connection, for one thread.
        bare = target.bare_writer(message("assistant", 0)) if target.name == "postgres" else None
        try:
            bench = Bench(target, checkpointer, run_graph(options.supersteps))
            configurations: list[tuple[int, BareWriter | None]] = [(1, None), (many, None)]
            if bare is not None:
                configurations.append((many, bare))
            for workers, writer in configurations:
                bench.round(workers, min(options.seconds, 1.0), writer)  # warm-up: connections, caches
            measured: dict[tuple[int, bool], list[Round]] = {
                (w, b is not None): [] for w, b in configurations
            }
            for number in range(options.rounds):
                order = configurations if number % 2 == 0 else configurations[::-1]
                for workers, writer in order:
                    measured[workers, writer is not None].append(
                        bench.round(workers, options.seconds, writer)
                    )
        finally:
            if bare is not None:
                bare.close()
            checkpointer.close()

    one, all_ = summarize(measured[1, False]), summarize(measured[many, False])
    rows = []
    for workers, summary in ((1, one), (many, all_)):
        rate = summary["rate"]
        assert rate is not None
        rows.append(
            [
                workers,
                rate,
                summary["low"],
                summary["high"],
                1000.0 * workers / rate if rate else float("inf"),
                summary["client_ms"],
                "-" if summary["server_ms"] is None else summary["server_ms"],
            ]
        )
    print_table(
        "supersteps per second, all workers together (median of the rounds, and their range)",
        [
            "workers",
            "supersteps/s",
            "lowest",
            "highest",
            "ms/superstep per worker",
            "client CPU ms/superstep",
            "server CPU ms/superstep",
        ],
        rows,
    )
    # Rounds ran in pairs, one of each configuration back to back: the ratio
    # of each pair cancels most of the drift of a busy machine.
    pairs = [ratio(b.rate, a.rate) for a, b in zip(measured[1, False], measured[many, False], strict=True)]
    print_table(
        f"speed-up, {many} workers / 1 (ideal {many}.0)",
        ["median of round pairs", "lowest pair", "highest pair", "ratio of medians"],
        [[statistics.median(pairs), min(pairs), max(pairs), ratio(all_["rate"] or 0.0, one["rate"] or 0.0)]],
    )
    print_ceilings(target, one, all_, many)
    if (many, True) in measured:
        floor = summarize(measured[many, True])
        floor_rate = floor["rate"] or 0.0
        print_table(
            f"against the floor: {many} workers each inserting and committing a {MESSAGE_BYTES}-byte row "
            "through the same pool, as fast as they can",
            ["workers", "bare inserts/s", f"ilmek supersteps/s, {many} workers", "share of the floor"],
            [[many, floor_rate, all_["rate"] or 0.0, ratio(all_["rate"] or 0.0, floor_rate)]],
        )


def print_ceilings(
    target: Target, one: dict[str, float | None], all_: dict[str, float | None], many: int
) -> None:
    """What bounds the speed-up on this machine, from the CPU each superstep cost."""
    cores = os.cpu_count() or 1
    client_ms = all_["client_ms"] or 0.0
    server_ms = all_["server_ms"]
    one_rate = one["rate"] or 0.0
    print(f"\n{cores} cores, shared by this process and the database server (and anything else running).")
    if target.name == "sqlite":
        print(
            "SQLite runs inside this process: its CPU is in the client column. It takes one writer at a "
            "time, so commits queue on the database lock whatever the number of workers."
        )
    # Python code runs one thread at a time; the driver's network waits
    # (and SQLite's I/O) let go of the GIL, so this is a ceiling, not a forecast.
    ceiling = ratio(1000.0, client_ms)
    print(
        f"The GIL: at {client_ms:.3f} CPU ms per superstep in this process, about {ceiling:.0f} "
        "supersteps/s at most, whatever the number of workers."
    )
    if server_ms is not None:
        total = client_ms + server_ms
        cores_ceiling = ratio(1000.0 * cores, total)
        ceiling = min(ceiling, cores_ceiling)
        busy = (one["client_ms"] or 0.0) + (one["server_ms"] or 0.0)
        print(
            f"The cores: client and server use {total:.3f} CPU ms per superstep, so {cores} cores give at "
            f"most {cores_ceiling:.0f} supersteps/s. One worker alternates between them and kept "
            f"{busy * one_rate / 1000.0:.2f} cores busy."
        )
    print(
        f"So {many} workers can be at most about {ratio(ceiling, one_rate):.1f} times as fast as one "
        f"({one_rate:.0f}/s) on this machine; they reached {ratio(all_['rate'] or 0.0, ceiling):.0%} "
        "of that ceiling."
    )


if __name__ == "__main__":
    main()
