"""What does encryption at rest cost a superstep on SQLite, in time and in bytes?

One graph, two stores side by side: a plain SQLite file and one whose
checkpointer has a keyring (``cipher=``). Each turn is one run of one
superstep whose node takes a journaled step (a 200-byte result), appends a
200-byte message to an ``append`` channel and replaces a 200-byte ``draft``:
every kind of value a superstep seals. Turns alternate between the stores,
in batches, in rotating order; the medians per superstep and their ratio
(target: at most 1.15) are printed, with the CPU time of each side, then the
bytes each store holds per superstep (the stored value columns summed) and
the overhead per sealed value.

``synchronous=NORMAL`` by default: with ``FULL`` every commit waits for the
disk, which hides what sealing costs; pass ``--synchronous FULL`` to see the
ratio an application with the default setting sees.

Usage: ``python benchmarks/bench_crypto.py [--turns 300] [--batches 6]
[--synchronous NORMAL|FULL]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from typing import Any

from _common import MESSAGE_BYTES, message, positive_int

from ilmek import END, START, CompiledGraph, channel, graph, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.crypto import Keyring

# Every column that holds stored values: what the stores hold per superstep.
_VALUE_COLUMNS = (
    ("blobs", "value"),
    ("items", "value"),
    ("journals", "entry"),
    ("checkpoints", "next"),
    ("checkpoints", "pending"),
    ("checkpoints", "task_journals"),
)


def turn_graph() -> CompiledGraph:
    """One superstep: a journaled step, an appended message and a replaced draft."""

    def reply(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        number = len(state["messages"])
        ctx.step("lookup", lambda: message("lookup", number))
        return {"messages": message("assistant", number), "draft": message("draft", number)}

    return (
        graph("turn", {"messages": channel.append(), "draft": channel.last_write(None)})
        .node("reply", reply)
        .edge(START, "reply")
        .edge("reply", END)
        .compile()
    )


def stored_bytes(path: str) -> int:
    """The bytes of every stored value column in the file (SQLite text lengths)."""
    with sqlite3.connect(path) as connection:
        return sum(
            connection.execute(f"SELECT coalesce(sum(length({column})), 0) FROM ilmek_{table}").fetchone()[0]
            for table, column in _VALUE_COLUMNS
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=positive_int, default=300, help="supersteps per store (default 300)")
    parser.add_argument("--batches", type=positive_int, default=6, help="alternating batches (default 6)")
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    args = parser.parse_args()
    keyring = Keyring({"bench": os.urandom(32)}, "bench")
    g = turn_graph()
    with tempfile.TemporaryDirectory() as folder:
        paths = {"plain": os.path.join(folder, "plain.db"), "sealed": os.path.join(folder, "sealed.db")}
        stores = {
            "plain": SqliteCheckpointer(paths["plain"], synchronous=args.synchronous),
            "sealed": SqliteCheckpointer(paths["sealed"], synchronous=args.synchronous, cipher=keyring),
        }
        walls: dict[str, list[float]] = {name: [] for name in stores}
        cpus: dict[str, float] = dict.fromkeys(stores, 0.0)
        per_batch = max(1, args.turns // args.batches)
        order = list(stores)
        for batch in range(args.batches):
            for name in order[batch % 2 :] + order[: batch % 2]:
                store = stores[name]
                cpu = time.process_time()
                for turn in range(per_batch):
                    started = time.perf_counter()
                    run(g, {}, thread_id=f"t{turn % 10}", checkpointer=store)
                    walls[name].append(time.perf_counter() - started)
                cpus[name] += time.process_time() - cpu
        for store in stores.values():
            store.close()
        turns = per_batch * args.batches
        plain, sealed = (statistics.median(walls[name]) * 1e3 for name in ("plain", "sealed"))
        print(
            f"SQLite, synchronous={args.synchronous}, {turns} supersteps a store, {MESSAGE_BYTES}-byte values"
        )
        print(f"{'':8}{'median ms/superstep':>22}{'CPU ms/superstep':>20}{'bytes/superstep':>18}")
        size = {name: stored_bytes(path) / turns for name, path in paths.items()}
        for name, median in (("plain", plain), ("sealed", sealed)):
            print(f"{name:8}{median:>22.3f}{cpus[name] / turns * 1e3:>20.3f}{size[name]:>18.0f}")
        cpu_ratio = cpus["sealed"] / cpus["plain"]
        print(f"ratio sealed/plain: time {sealed / plain:.3f} (target <= 1.15), CPU {cpu_ratio:.3f}")
        # Two sealed values stay per superstep, the message and the draft: the step's
        # journal row is dropped once its superstep commits.
        extra = (size["sealed"] - size["plain"]) / 2
        print(f"per sealed {MESSAGE_BYTES}-byte value: {extra:.0f} bytes more ({extra / MESSAGE_BYTES:.0%})")


if __name__ == "__main__":
    main()
