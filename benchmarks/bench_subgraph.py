"""Does a subgraph cost what its nodes cost? A 3-level nested run against the same nodes flattened.

The nested graph is a root whose ``--nodes`` nodes (8 by default) are
followed by a subgraph node, whose child has as many nodes and a subgraph
node of its own, three levels down; every node does one journaled step
returning a 200-byte result and appends to ``log``. The flat graph chains
the same nodes in one graph. Both ``run`` to the end on fresh threads,
interleaved batch by batch (``--batches``, ``--runs`` runs each), in the
same store. A subgraph's supersteps are commits of its own thread, like
the root's; what it adds is its own first checkpoint (its input, made
durable) and the parent's superstep for the subgraph node. Its ratio
(nested over flat, medians of wall and CPU time per run) is printed with
the commits each run made; 1.3 is the most we accept on SQLite.

Usage: ``python benchmarks/bench_subgraph.py [--nodes 8] [--runs 5] [--batches 5]
[--synchronous FULL|NORMAL] [--target sqlite|postgres] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

from _common import (
    MESSAGE_BYTES,
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
from ilmek.events import CheckpointEvent

LEVELS = 3
"""Subgraph levels below the root."""


def _work(name: str) -> Any:
    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step(name, message, "result", len(state["log"]))
        return {"log": [name]}

    return node


def _chain(title: str, names: Sequence[str], tail: CompiledGraph | None) -> CompiledGraph:
    """``names`` in a chain, then (if given) the subgraph ``tail`` as the last node."""
    builder = graph(title, {"log": channel.append()})
    for name in names:
        builder = builder.node(name, _work(name))
    order = list(names)
    if tail is not None:
        builder = builder.node(f"{title}-child", tail)
        order.append(f"{title}-child")
    builder = builder.edge(START, order[0])
    for before, after in itertools.pairwise(order):
        builder = builder.edge(before, after)
    return builder.edge(order[-1], END).compile()


def nested_graph(nodes: int) -> CompiledGraph:
    """The root and :data:`LEVELS` subgraphs below it, ``nodes`` working nodes at each level."""
    child: CompiledGraph | None = None
    for level in range(LEVELS, -1, -1):
        child = _chain(f"level{level}", [f"l{level}-n{i}" for i in range(nodes)], child)
    assert child is not None
    return child


def flat_graph(nodes: int) -> CompiledGraph:
    """The same working nodes, in the same order, in one graph."""
    return _chain("flat", [f"l{level}-n{i}" for level in range(LEVELS + 1) for i in range(nodes)], None)


def timed_run(g: CompiledGraph, checkpointer: Checkpointer, thread_id: str) -> tuple[float, float, int]:
    """Wall and CPU seconds of one ``run`` to the end, and how many checkpoints it committed (all levels)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run(g, {"log": []}, thread_id=thread_id, checkpointer=checkpointer, recursion_limit=100)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert result.status == "done", result
    return wall, cpu, sum(isinstance(e, CheckpointEvent) for e in result.events)


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=positive_int, default=8, help="working nodes per level (default 8)")
    parser.add_argument(
        "--runs", type=positive_int, default=5, help="runs of each graph per batch (default 5)"
    )
    parser.add_argument("--batches", type=positive_int, default=5, help="batches (default 5)")
    add_target_options(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    with open_target(options, "subgraph") as target:
        print_header(
            "bench_subgraph",
            target,
            [
                f"{options.nodes} nodes at each of {LEVELS + 1} levels, one {MESSAGE_BYTES}-byte step each; "
                f"{options.batches} batches of {options.runs} runs of each graph, interleaved"
            ],
        )
        checkpointer = target.make_checkpointer()
        graphs = {"flat": flat_graph(options.nodes), "nested": nested_graph(options.nodes)}
        walls: dict[str, list[float]] = {name: [] for name in graphs}
        cpus: dict[str, list[float]] = {name: [] for name in graphs}
        commits: dict[str, int] = {}
        try:
            for name, g in graphs.items():
                timed_run(g, checkpointer, f"warm-up-{name}")
            for batch in range(options.batches):
                order = list(graphs) if batch % 2 == 0 else list(reversed(graphs))
                for name in order:
                    for run_index in range(options.runs):
                        wall, cpu, commits[name] = timed_run(
                            graphs[name], checkpointer, f"{name}-{batch}-{run_index}"
                        )
                        walls[name].append(wall)
                        cpus[name].append(cpu)
        finally:
            checkpointer.close()
        wall_ms = {name: statistics.median(times) * 1000.0 for name, times in walls.items()}
        cpu_ms = {name: statistics.median(times) * 1000.0 for name, times in cpus.items()}
        print_table(
            "one run to the end (medians)",
            ["graph", "commits", "wall ms", "cpu ms", "wall ratio", "cpu ratio"],
            [
                [
                    name,
                    commits[name],
                    wall_ms[name],
                    cpu_ms[name],
                    ratio(wall_ms[name], wall_ms["flat"]),
                    ratio(cpu_ms[name], cpu_ms["flat"]),
                ]
                for name in graphs
            ],
        )


if __name__ == "__main__":
    main()
