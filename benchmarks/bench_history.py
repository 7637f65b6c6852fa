"""Does a step cost the same at checkpoint 10,000 of a thread as at checkpoint 10?

Two chat-like workloads on one database, each measured on a short thread
(about 10 checkpoints) and on a long one (``--history``, 10,000 by default),
interleaved batch by batch in one process:

* **turns**: ``run(g, {"messages": msg}, thread_id=...)`` — an input
  checkpoint and one superstep of a node appending a 200-byte reply;
* **loop**: one run of a node that appends a 200-byte message and schedules
  itself again, timed superstep by superstep.

Per workload it prints the median wall and CPU time per operation, the
bytes each operation left stored and wrote to the WAL, and the ratios long /
short (flat, 1.0, is the goal; 1.5 is the most we accept).

On ``--target postgres`` the same, through a psycopg2 ``ThreadedConnectionPool``
on ``--dsn`` (or ``$ILMEK_BENCH_POSTGRES_DSN``, or a throwaway cluster): stored
bytes are table growth (``pg_total_relation_size``), WAL bytes the WAL
position's advance (``pg_wal_lsn_diff``).

Usage: ``python benchmarks/bench_history.py [--history 10000] [--samples 50]
[--batch 8] [--synchronous FULL|NORMAL] [--target sqlite|postgres] [--db FOLDER]
[--dsn DSN]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import NamedTuple

from _common import (
    NEVER_ENDING,
    Growth,
    SuperstepStream,
    Target,
    Timings,
    add_target_options,
    chat_graph,
    loop_graph,
    message,
    open_target,
    positive_int,
    print_header,
    print_table,
    ratio,
)

from ilmek import run, stream
from ilmek.checkpoint.base import Checkpointer

SHORT_HISTORY = 10
"""Checkpoints the short thread holds in the middle of a measured batch."""


class Batch(NamedTuple):
    """One measured batch on one thread."""

    history_before: int
    history_after: int
    timings: Timings
    growth: Growth


class Side:
    """What one thread (short or long) of a workload measured."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.timings = Timings()
        self.growth = Growth()
        self.first_history: int | None = None
        self.last_history = 0

    def record(self, batch: Batch) -> None:
        if self.first_history is None:
            self.first_history = batch.history_before
        self.last_history = batch.history_after
        self.timings.extend(batch.timings)
        self.growth += batch.growth

    def history_range(self) -> str:
        return f"{self.first_history}-{self.last_history}"

    def stored_per_operation(self) -> float:
        return self.growth.stored / len(self.timings)

    def logged_per_operation(self) -> float:
        return self.growth.logged / len(self.timings)


class Workload:
    """A way of stepping a thread: ``batch`` operations, each timed, on a short or the long thread."""

    name = "?"
    unit = "op"
    checkpoints_per_operation = 1

    def __init__(self, target: Target, checkpointer: Checkpointer, options: argparse.Namespace) -> None:
        self.target = target
        self.checkpointer = checkpointer
        self.batch: int = options.batch
        self.history: int = options.history
        self.short = Side("short")
        self.long = Side("long")
        self.long_history = 0
        self._rounds = 0

    def build_long(self) -> float:
        """Give the long thread its history (with a fast, non-durable checkpointer); return seconds."""
        raise NotImplementedError

    def short_batch(self, round_number: int) -> Batch:
        """A fresh short thread brought to about ``SHORT_HISTORY``, then one measured batch."""
        raise NotImplementedError

    def long_batch(self) -> Batch:
        """One measured batch on the long thread."""
        raise NotImplementedError

    def short_prefill(self) -> int:
        # Start the batch so that its middle sits at SHORT_HISTORY checkpoints.
        added = self.batch * self.checkpoints_per_operation
        prefill = max(SHORT_HISTORY - added // 2, 0)
        return prefill - prefill % self.checkpoints_per_operation

    def round(self, *, record: bool) -> None:
        """One short batch and one long batch, in alternating order from round to round."""
        self._rounds += 1
        sides: list[tuple[Side, Callable[[], Batch]]] = [
            (self.short, lambda: self.short_batch(self._rounds)),
            (self.long, self.long_batch),
        ]
        if self._rounds % 2:
            sides.reverse()
        for side, measure in sides:
            batch = measure()
            if record:
                side.record(batch)

    def close(self) -> None:
        """Let go of any run still open."""


class Turns(Workload):
    """Each operation is one turn: ``run`` with a user message, which replies once."""

    name = "turns"
    unit = "turn"
    checkpoints_per_operation = 2  # the input checkpoint and the superstep's

    def __init__(self, target: Target, checkpointer: Checkpointer, options: argparse.Namespace) -> None:
        super().__init__(target, checkpointer, options)
        self.graph = chat_graph()
        self.long_thread = "turns-long"

    def _turns(self, checkpointer: Checkpointer, thread_id: str, count: int) -> Timings:
        updates = [{"messages": message("user", n)} for n in range(count)]
        timings = Timings()
        for update in updates:
            run(self.graph, update, thread_id=thread_id, checkpointer=checkpointer)
            timings.lap()
        return timings

    def build_long(self) -> float:
        builder = self.target.make_checkpointer(for_setup=True)
        try:
            turns = max(self.history // self.checkpoints_per_operation, 1)
            seconds = sum(self._turns(builder, self.long_thread, turns).wall)
        finally:
            builder.close()
        self.long_history = turns * self.checkpoints_per_operation
        # The first read of a long thread loads it whole into the value cache: not what we time.
        self._turns(self.checkpointer, self.long_thread, 1)
        self.long_history += self.checkpoints_per_operation
        return seconds

    def short_batch(self, round_number: int) -> Batch:
        thread_id = f"turns-short-{round_number}"
        prefill = self.short_prefill()
        self._turns(self.checkpointer, thread_id, prefill // self.checkpoints_per_operation)
        with self.target.measure_growth() as growth:
            timings = self._turns(self.checkpointer, thread_id, self.batch)
        return Batch(prefill, prefill + self.batch * self.checkpoints_per_operation, timings, growth)

    def long_batch(self) -> Batch:
        before = self.long_history
        with self.target.measure_growth() as growth:
            timings = self._turns(self.checkpointer, self.long_thread, self.batch)
        self.long_history += self.batch * self.checkpoints_per_operation
        return Batch(before, self.long_history, timings, growth)


class Loop(Workload):
    """Each operation is one superstep of a single run that keeps appending."""

    name = "loop"
    unit = "superstep"

    def __init__(self, target: Target, checkpointer: Checkpointer, options: argparse.Namespace) -> None:
        super().__init__(target, checkpointer, options)
        self.graph = loop_graph()
        self.long_thread = "loop-long"
        self._long_run: SuperstepStream | None = None

    def _start(self, checkpointer: Checkpointer, thread_id: str, *, first: bool) -> SuperstepStream:
        # The first run of a thread starts from a user message; later ones continue it.
        text = {"messages": message("user", 0)} if first else None
        return SuperstepStream(
            stream(
                self.graph, text, thread_id=thread_id, checkpointer=checkpointer, recursion_limit=NEVER_ENDING
            )
        )

    def build_long(self) -> float:
        builder = self.target.make_checkpointer(for_setup=True)
        try:
            building = self._start(builder, self.long_thread, first=True)
            seconds = sum(building.advance(self.history).wall)
            building.close()
        finally:
            builder.close()
        self.long_history = self.history
        self._long_run = self._start(self.checkpointer, self.long_thread, first=False)
        # The first superstep loads the long thread whole into the value cache: not what we time.
        self._long_run.advance(1)
        self.long_history += 1
        return seconds

    def short_batch(self, round_number: int) -> Batch:
        short_run = self._start(self.checkpointer, f"loop-short-{round_number}", first=True)
        try:
            prefill = self.short_prefill()
            short_run.advance(prefill)
            with self.target.measure_growth() as growth:
                timings = short_run.advance(self.batch)
        finally:
            short_run.close()
        return Batch(prefill, prefill + self.batch, timings, growth)

    def long_batch(self) -> Batch:
        assert self._long_run is not None
        before = self.long_history
        with self.target.measure_growth() as growth:
            timings = self._long_run.advance(self.batch)
        self.long_history += self.batch
        return Batch(before, self.long_history, timings, growth)

    def close(self) -> None:
        if self._long_run is not None:
            self._long_run.close()


WORKLOADS: tuple[type[Workload], ...] = (Turns, Loop)


def report(workload: Workload) -> list[float]:
    """Print one workload's table; return its long/short ratios (wall, CPU, stored, WAL)."""
    unit = workload.unit
    short, long = workload.short, workload.long
    rows: list[list[object]] = [
        [
            side.label,
            side.history_range(),
            len(side.timings),
            side.timings.wall_ms(),
            side.timings.cpu_ms(),
            side.stored_per_operation(),
            side.logged_per_operation(),
        ]
        for side in (short, long)
    ]
    ratios = [
        ratio(long.timings.wall_ms(), short.timings.wall_ms()),
        ratio(long.timings.cpu_ms(), short.timings.cpu_ms()),
        ratio(long.stored_per_operation(), short.stored_per_operation()),
        ratio(long.logged_per_operation(), short.logged_per_operation()),
    ]
    rows.append(["long/short", "", "", *ratios])
    what = "an input checkpoint + 1 superstep" if workload.checkpoints_per_operation == 2 else "1 checkpoint"
    print_table(
        f"{workload.name}: one {unit} = {what}",
        [
            "thread",
            "history (checkpoints)",
            f"{unit}s",
            f"ms/{unit}",
            f"CPU ms/{unit}",
            f"stored B/{unit}",
            f"WAL B/{unit}",
        ],
        rows,
    )
    return ratios


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--history",
        type=positive_int,
        default=10_000,
        help="checkpoints the long thread holds before measuring (default 10000)",
    )
    parser.add_argument(
        "--samples", type=positive_int, default=50, help="measured rounds per workload (default 50)"
    )
    parser.add_argument(
        "--batch", type=positive_int, default=8, help="operations per thread per round (default 8)"
    )
    add_target_options(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    with open_target(options, "history") as target:
        print_header(
            "bench_history",
            target,
            [
                f"history {options.history}, {options.samples} rounds of {options.batch} operations "
                "per thread, short and long alternating",
                target.bytes_note,
            ],
        )
        summary = []
        checkpointer = target.make_checkpointer()
        try:
            for kind in WORKLOADS:
                workload = kind(target, checkpointer, options)
                try:
                    seconds = workload.build_long()
                    built = workload.long_history
                    print(f"\n{workload.name}: built a {built}-checkpoint thread in {seconds:.1f} s", end="")
                    print(f" ({target.setup_note})")
                    workload.round(record=False)
                    for _ in range(options.samples):
                        workload.round(record=True)
                finally:
                    workload.close()
                summary.append([workload.name, *report(workload)])
        finally:
            checkpointer.close()
        print_table(
            f"summary: long ({options.history}) / short ({SHORT_HISTORY}) history; goal <= 1.5, flat is 1.0",
            ["workload", "time", "CPU time", "stored bytes", "WAL bytes"],
            summary,
        )


if __name__ == "__main__":
    main()
