"""Does ``ctx.step`` cost the same at step 1,000 of a task as at step 10?

A node calls ``ctx.step`` ``--steps`` times (1,000 by default), each
returning a 200-byte result, in one task of one superstep. Each step is
persisted (and committed) before it returns, one row per step, so its cost
should not depend on how many steps came before it in the task. The run is
repeated ``--samples`` times on fresh threads; each step's time is taken
inside the node, from one step's return to the next.

It prints the median time per step over the first ten steps (after the
first, which pays for the connection) and over the last ten, their ratio
(flat, 1.0, is the goal; 1.5 the most we accept), and the SQL one step
sends.

Usage: ``python benchmarks/bench_steps.py [--steps 1000] [--samples 5]
[--synchronous FULL|NORMAL] [--target sqlite|postgres] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from _common import (
    MESSAGE_BYTES,
    Target,
    add_target_options,
    message,
    open_target,
    positive_int,
    print_header,
    print_table,
    ratio,
)

from ilmek import END, START, CompiledGraph, channel, graph, run
from ilmek.checkpoint.base import Checkpointer

WINDOW = 10
"""How many steps each end of the task is measured over."""


class StepClock:
    """Per-step wall times of one task, taken inside the node."""

    def __init__(self) -> None:
        self.laps: list[float] = []
        self._mark = 0.0

    def start(self) -> None:
        self.laps = []
        self._mark = time.perf_counter()

    def lap(self) -> None:
        now = time.perf_counter()
        self.laps.append(now - self._mark)
        self._mark = now


def stepping_graph(steps: int, clock: StepClock) -> CompiledGraph:
    """One node that takes ``steps`` journaled steps, timing each."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        clock.start()
        for n in range(steps):
            ctx.step(f"step {n}", message, "result", n)
            clock.lap()
        return {"done": steps}

    return (
        graph("many-steps", {"done": channel.last_write(0)})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def statements_of_one_step(target: Target, checkpointer: Checkpointer, steps: int) -> list[str]:
    """The SQL the middle step of a traced task sent."""
    sent: list[str] = []
    marks: list[int] = []

    class Marking(StepClock):
        """Marks where in the trace each step ended, instead of timing it."""

        def lap(self) -> None:
            marks.append(len(sent))

    g = stepping_graph(steps, Marking())
    stop = target.trace_statements(checkpointer, sent.append)
    try:
        run(g, {"done": 0}, thread_id="steps-traced", checkpointer=checkpointer)
    finally:
        stop()
    middle = steps // 2
    return sent[marks[middle - 1] : marks[middle]]


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive_int, default=1000, help="steps per task (default 1000)")
    parser.add_argument("--samples", type=positive_int, default=5, help="tasks measured (default 5)")
    add_target_options(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    if options.steps < 2 * WINDOW + 1:
        raise SystemExit(f"--steps must be at least {2 * WINDOW + 1}")
    with open_target(options, "steps") as target:
        print_header(
            "bench_steps",
            target,
            [f"{options.samples} tasks of {options.steps} steps each; step results of {MESSAGE_BYTES} bytes"],
        )
        checkpointer = target.make_checkpointer()
        clock = StepClock()
        g = stepping_graph(options.steps, clock)
        early: list[float] = []
        late: list[float] = []
        try:
            run(g, {"done": 0}, thread_id="steps-warm-up", checkpointer=checkpointer)
            for sample in range(options.samples):
                run(g, {"done": 0}, thread_id=f"steps-{sample}", checkpointer=checkpointer)
                early.extend(clock.laps[1 : WINDOW + 1])
                late.extend(clock.laps[-WINDOW:])
            one_step = statements_of_one_step(target, checkpointer, min(options.steps, 40))
        finally:
            checkpointer.close()
        early_ms = statistics.median(early) * 1000.0
        late_ms = statistics.median(late) * 1000.0
        print_table(
            "time per step (medians over the tasks)",
            ["steps", "ms/step", "ratio to steps 2-11"],
            [
                [f"2-{WINDOW + 1}", early_ms, 1.0],
                [f"{options.steps - WINDOW + 1}-{options.steps}", late_ms, ratio(late_ms, early_ms)],
            ],
        )
        print(f"\n{target.trace_note}")
        print_table(
            "the statements of one step, in order",
            ["#", "statement"],
            [[index, " ".join(statement.split())[:100]] for index, statement in enumerate(one_step, 1)],
        )


if __name__ == "__main__":
    main()
