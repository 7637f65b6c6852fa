"""How far is one ilmek superstep from the physical floor of a durable write?

Side by side, in batches whose order rotates from round to round:

* **bare**: the least a durable step can cost on the target. On SQLite,
  ``BEGIN IMMEDIATE; INSERT`` of a 200-byte payload ``; COMMIT`` on a fresh
  file beside ilmek's, with the same pragmas (WAL, the same ``synchronous``);
  on Postgres, the ``INSERT`` of the same payload into a table of its own
  and ``COMMIT``, on a connection borrowed from the checkpointer's own pool;
* **superstep**: one superstep of a running loop graph whose node appends a
  200-byte message (one checkpoint), as ``run()`` drives it (the one task
  on the calling thread); its bytes include the run's start (the input's
  checkpoint, the hold), spread over the batch's supersteps;
* **superstep, streamed**: the same read through ``stream()``, which runs
  every task on a worker thread so its events arrive live;
* **turn**: ``run(g, {"messages": msg})`` on a chat thread (an input
  checkpoint, one superstep, and the run's hold taken and released);
* **superstep, in memory**: the superstep as ``run()`` drives it, on
  ``InMemoryCheckpointer``: the engine's own cost, without a database.

Then the SQL each operation sends, and the statements of one superstep: on
SQLite traced with ``sqlite3.Connection.set_trace_callback`` on every
connection the checkpointer opened; on Postgres by wrapping the connections
its pool lends (every statement there is a round trip to the server).

``--profile N`` then profiles N supersteps as ``run()`` drives them (on
the target and in memory) and N/10 turns (cProfile), and prints their own
time by area of ilmek and by function.

Usage: ``python benchmarks/bench_floor.py [--samples 50] [--batch 10]
[--synchronous FULL|NORMAL] [--target sqlite|postgres] [--db FOLDER] [--dsn DSN]
[--profile N]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from _common import (
    MESSAGE_BYTES,
    NEVER_ENDING,
    Growth,
    SqliteTarget,
    SuperstepRun,
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

from ilmek import InMemoryCheckpointer, run, stream
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sql import SqlCheckpointer
from ilmek.checkpoint.sql.calls import call_arguments
from ilmek.types import new_checkpoint_id


class Operation:
    """One kind of operation: how to run a timed batch of it, and what it measured."""

    def __init__(
        self,
        label: str,
        batch: Callable[[int], Timings],
        measure_growth: Callable[[], contextlib.AbstractContextManager[Growth]] | None,
    ) -> None:
        self.label = label
        self.batch = batch
        self.measure_growth = measure_growth
        self.timings = Timings()
        self.growth = Growth()

    def round(self, size: int, *, record: bool) -> None:
        """Run one timed batch; keep its figures if ``record``."""
        if self.measure_growth is None:
            timings = self.batch(size)
        else:
            with self.measure_growth() as growth:
                timings = self.batch(size)
            if record:
                self.growth += growth
        if record:
            self.timings.extend(timings)

    def bytes_per_operation(self, total: int) -> float | str:
        """``total`` bytes spread over the recorded operations (``-`` when not measured)."""
        if self.measure_growth is None or not self.timings:
            return "-"
        return total / len(self.timings)


class IlmekSqlAlone:
    """The SQL of ilmek's plain superstep sent from a bare loop: the database's share of a superstep.

    The statements are the checkpointer's own texts, bound as it binds them,
    on a thread of their own that a real run made: each round moves the
    thread's pointer to a new checkpoint (fenced by a hold row), appends one
    200-byte item to the thread's list and inserts the checkpoint row, with
    the stored texts of a real checkpoint. On SQLite that is ``BEGIN
    IMMEDIATE``, three statements and ``COMMIT``; on Postgres one call of the
    superstep function in autocommit. None of ilmek's Python runs around it.
    """

    THREAD = "floor-sql"
    OWNER = "bench-floor-owner"

    def __init__(self, target: Target, checkpointer: SqlCheckpointer) -> None:
        run(chat_graph(), {"messages": message("user", 0)}, thread_id=self.THREAD, checkpointer=checkpointer)
        self._checkpointer = checkpointer
        self._postgres = isinstance(checkpointer, PostgresCheckpointer)
        self._paramstyle = "pyformat" if self._postgres else "qmark"
        self._connection = target.sql_connection()
        if self._postgres:
            self._connection.autocommit = True
        prefix = checkpointer.table_prefix
        [(latest,)] = self._rows(
            f"SELECT checkpoint_id FROM {prefix}_threads WHERE thread_id = %s", self.THREAD
        )
        [row] = self._rows(
            f"SELECT step, next, pending, metadata FROM {prefix}_checkpoints "
            "WHERE thread_id = %s AND checkpoint_id = %s",
            self.THREAD,
            latest,
        )
        self._step, self._next, self._pending, self._metadata = (
            row[0],
            *(text if isinstance(text, str) else json.dumps(text) for text in row[1:]),
        )
        [(self._log_id, self._length)] = self._rows(
            f"SELECT l.log_id, (SELECT count(*) FROM {prefix}_items AS i WHERE i.log_id = l.log_id) "
            f"FROM {prefix}_logs AS l WHERE l.thread_id = %s",
            self.THREAD,
        )
        self._latest = latest
        self._rows(
            f"INSERT INTO {prefix}_holds (thread_id, owner, expires_at, acquired_at) "
            "VALUES (%s, %s, 1e12, 0)",
            self.THREAD,
            self.OWNER,
        )
        if not self._postgres:
            self._connection.commit()

    def _rows(self, sql: str, *params: Any) -> list[Any]:
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql if self._postgres else sql.replace("%s", "?"), params)
            return list(cursor.fetchall()) if cursor.description is not None else []
        finally:
            cursor.close()

    def _send(self, name: str, **params: Any) -> None:
        text, bound = self._checkpointer.statements.named(name).bind(self._paramstyle, params)
        cursor = self._connection.cursor()
        try:
            cursor.execute(text, bound)
            if cursor.description is not None:
                cursor.fetchall()
        finally:
            cursor.close()

    def batch(self, size: int) -> Timings:
        timings = Timings()
        for _ in range(size):
            self._superstep()
            timings.lap()
        return timings

    def _superstep(self) -> None:
        new_id = new_checkpoint_id(after=self._latest)
        self._step += 1
        value = json.dumps(message("assistant", self._length))
        manifest = json.dumps({"messages": ["l", self._log_id, self._length + 1]}, separators=(",", ":"))
        common = {
            "thread_id": self.THREAD,
            "checkpoint_id": new_id,
            "step": self._step,
            "next": self._next,
            "pending": self._pending,
            "task_journals": "{}",
            "journal_chain": "[]",
            "metadata": self._metadata,
        }
        if self._postgres:
            # The function's arguments, one JSON object, as ilmek makes it (sql/calls.py).
            call = call_arguments(
                {
                    "thread": self.THREAD,
                    "owner": self.OWNER,
                    "expected": self._latest,
                    "checkpoint": new_id,
                    "status": "unfinished",
                    "step": self._step,
                    "now": time.time(),
                    "parent": self._latest,
                    "plan": new_id,
                    "ts": time.time(),
                    "release": False,
                    "take": False,
                    "lock_key": 0,
                    "ttl": 5.0,
                },
                {
                    "items": f"[[{self._log_id},{self._length},{value}]]",
                    "blobs": "[]",
                    "manifest": manifest,
                    "next": common["next"],
                    "pending": common["pending"],
                    "task_journals": common["task_journals"],
                    "journal_chain": common["journal_chain"],
                    "metadata": common["metadata"],
                    "drops": "[]",
                    "entries": "[]",
                    "new_logs": "[]",
                },
            )
            self._send("superstep", call=call)
        else:
            self._connection.execute("BEGIN IMMEDIATE")
            self._send(
                "advance_held_pointer",
                expected=self._latest,
                owner=self.OWNER,
                thread_id=self.THREAD,
                checkpoint_id=new_id,
                step=self._step,
            )
            self._send(
                "append_item",
                thread_id=self.THREAD,
                log_id=self._log_id,
                idx=self._length,
                origin=new_id,
                value=value,
            )
            self._send(
                "insert_checkpoint",
                parent_id=self._latest,
                plan_id=new_id,
                ts=time.time(),
                manifest=manifest,
                **common,
            )
            self._connection.execute("COMMIT")
        self._latest = new_id
        self._length += 1

    def close(self) -> None:
        self._connection.close()


class Workloads:
    """The running things each operation advances: a loop run, a chat thread, a bare table."""

    def __init__(self, target: Target, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer
        self.memory = InMemoryCheckpointer()
        self.chat = chat_graph()
        loop = loop_graph()
        first = {"messages": message("user", 0)}
        self.loop = SuperstepStream(
            stream(
                loop, first, thread_id="floor-loop", checkpointer=checkpointer, recursion_limit=NEVER_ENDING
            )
        )
        self.memory_loop = SuperstepRun(self.memory, "floor-runs")
        self.run_loop = SuperstepRun(checkpointer, "floor-runs")
        assert isinstance(checkpointer, SqlCheckpointer)
        self.sql_alone = IlmekSqlAlone(target, checkpointer)
        self.bare = target.bare_writer(message("assistant", 0))
        self._turns = 0

    def bare_batch(self, size: int) -> Timings:
        write = self.bare.write
        timings = Timings()
        for _ in range(size):
            write()
            timings.lap()
        return timings

    def turn_batch(self, size: int) -> Timings:
        updates = [{"messages": message("user", self._turns + n)} for n in range(size)]
        self._turns += size
        timings = Timings()
        for update in updates:
            run(self.chat, update, thread_id="floor-turns", checkpointer=self.checkpointer)
            timings.lap()
        return timings

    def close(self) -> None:
        self.loop.close()
        self.bare.close()
        self.sql_alone.close()


def trace(target: Target, workloads: Workloads, operations: int) -> tuple[dict[str, list[str]], list[str]]:
    """The SQL each traced operation sent (``operations`` of each), and one superstep's statements."""
    sent: list[str] = []
    traced: dict[str, list[str]] = {}
    workloads.bare.trace_statements(sent.append)
    workloads.bare_batch(operations)
    workloads.bare.trace_statements(None)
    traced["bare"] = list(sent)
    stop = target.trace_statements(workloads.checkpointer, sent.append)
    # A run keeps one connection from start to end: a loop started before the
    # tracing began would write through a connection the trace never saw.
    loop = SuperstepStream(
        stream(
            loop_graph(),
            {"messages": message("user", 0)},
            thread_id="floor-traced-loop",
            checkpointer=workloads.checkpointer,
            recursion_limit=NEVER_ENDING,
        )
    )
    try:
        loop.advance(1)  # its start: the hold, the input, the first superstep
        sent.clear()
        loop.advance(operations)
        traced["superstep"] = list(sent)
        sent.clear()
        workloads.turn_batch(operations)
        traced["turn"] = list(sent)
        sent.clear()
        loop.advance(1)
        one_superstep = list(sent)
    finally:
        loop.close()
        stop()
    return traced, one_superstep


_SUPERSTEP_CALL = re.compile(r"\bFROM\s+\w+_superstep\(")


def _writes(verb: str, statement: str) -> bool:
    return (
        verb in ("INSERT", "UPDATE", "DELETE")
        # A data-modifying WITH query: several writes in one statement.
        or (verb == "WITH" and any(word in statement.upper() for word in ("INSERT ", "UPDATE ", "DELETE ")))
        # A call of the superstep function ilmek installs on Postgres (it writes).
        or _SUPERSTEP_CALL.search(statement) is not None
    )


def count(statements: Sequence[str], operations: int) -> list[float]:
    """Statements, write and read transactions, commits and rollbacks, per operation.

    A transaction runs from a ``BEGIN`` to its ``COMMIT`` or ``ROLLBACK``; it
    writes if it began with ``BEGIN IMMEDIATE`` (SQLite's write lock) or
    changed a row, and reads otherwise. A statement outside one is a
    transaction of its own (autocommit), committed as it completes.
    """
    writes = reads = commits = rollbacks = 0
    open_transaction: bool | None = None  # None: outside a transaction; else whether it wrote
    for statement in statements:
        words = statement.split(None, 2)
        verb = words[0].upper() if words else ""
        if verb == "BEGIN":
            open_transaction = words[1:2] == ["IMMEDIATE"]
        elif verb in ("COMMIT", "ROLLBACK"):
            if verb == "COMMIT":
                commits += 1
            else:
                rollbacks += 1
            if open_transaction:
                writes += 1
            elif open_transaction is not None:
                reads += 1
            open_transaction = None
        elif open_transaction is None:
            commits += 1
            if _writes(verb, statement):
                writes += 1
            else:
                reads += 1
        elif _writes(verb, statement):
            open_transaction = True
    return [
        len(statements) / operations,
        writes / operations,
        reads / operations,
        commits / operations,
        rollbacks / operations,
    ]


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=positive_int, default=50, help="measured rounds (default 50)")
    parser.add_argument(
        "--batch", type=positive_int, default=10, help="operations of each kind per round (default 10)"
    )
    parser.add_argument(
        "--profile",
        type=positive_int,
        default=0,
        metavar="N",
        help="then profile N supersteps as run() drives them and N/10 turns (cProfile): by area, by function",
    )
    add_target_options(parser)
    return parser.parse_args(argv)


#: Supersteps whose WAL pages are counted by table (SQLite).
PAGED_SUPERSTEPS = 100

# Where each part of ilmek sits, for the profile: (area, path fragments), first match wins.
_AREAS = (
    (
        "encoding (serde, stored texts, channel deltas)",
        ("ilmek/serde/", "_records.py", "_delta.py", "_held.py"),
    ),
    ("hold keeping (holds, keeper)", ("holds.py", "ilmek/execution/keeping.py")),
    ("telemetry (logs, spans)", ("ilmek/execution/telemetry.py", "ilmek/tracing.py", "ilmek/logs.py")),
    ("SQL text and rows (statements, row mapping)", ("sql/statements.py", "sql/rows.py")),
    (
        "driver adapter (dbapi, sqlite, postgres)",
        ("ilmek/dbapi.py", "ilmek/checkpoint/sqlite.py", "postgres/"),
    ),
    ("checkpointer write path (supersteps, journals, reads)", ("ilmek/checkpoint/",)),
    (
        "task hand-off and attempts (tasks, messages)",
        ("ilmek/execution/tasks.py", "messages.py", "attempts.py"),
    ),
    (
        "planning (superstep, routes, sends)",
        ("ilmek/execution/superstep.py", "ilmek/graph", "predicates.py", "control.py"),
    ),
    ("fold (channels, state)", ("ilmek/channel.py", "ilmek/schema.py", "ilmek/state")),
    ("node context and journal replay", ("ilmek/context.py", "ilmek/journals.py")),
    ("events", ("ilmek/events.py",)),
    ("run lifecycle (run, position, options, ids)", ("ilmek/",)),
    ("the benchmark's node and clocks", ("benchmarks/",)),
)


def _area(filename: str, function: str) -> str:
    if filename == "~":  # a built-in: the driver's C calls, or Python's
        driver = ("sqlite3", "psycopg", "cursor", "connection")
        return "database calls (driver, server)" if any(d in function for d in driver) else "Python built-ins"
    for area, fragments in _AREAS:
        if any(fragment in filename for fragment in fragments):
            return area
    return "standard library"


def profile(workloads: Workloads, supersteps: int) -> Callable[[], None]:
    """Profile N run()-driven supersteps on the target and in memory, and N/10 turns on the target.

    Returns what prints each one's own time by area and by function.
    """
    turns = max(1, supersteps // 10)
    reports = [
        _profiled(f"{supersteps} supersteps as run() drives them", supersteps, workloads.run_loop.advance),
        _profiled(f"{supersteps} supersteps in memory", supersteps, workloads.memory_loop.advance),
        _profiled(f"{turns} turns (input + superstep)", turns, workloads.turn_batch),
    ]

    def report() -> None:
        for each in reports:
            each()

    return report


def _profiled(label: str, count: int, action: Callable[[int], Any]) -> Callable[[], None]:
    """Profile ``action(count)``; return what prints its own time per operation by area and by function."""
    profiler = cProfile.Profile()
    profiler.enable()
    action(count)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    own: dict[str, float] = {}
    functions: list[tuple[float, str]] = []
    for (filename, line, function), (_, _, tottime, _, callers) in stats.items():
        # A built-in only the benchmark calls (its clocks) is the benchmark's.
        mine = filename == "~" and callers and all("benchmarks/" in caller[0] for caller in callers)
        area = "the benchmark's node and clocks" if mine else _area(filename, function)
        own[area] = own.get(area, 0.0) + tottime
        where = function if filename == "~" else f"{function} ({filename.split('/work/')[-1]}:{line})"
        functions.append((tottime, where))
    total = sum(own.values()) or 1.0

    def report() -> None:
        print_table(
            f"profile of {label} (cProfile, own time; its overhead weighs on small calls: read the shares)",
            ["area", "ms/op", "share"],
            [
                [area, seconds * 1000 / count, seconds / total]
                for area, seconds in sorted(own.items(), key=lambda item: -item[1])
            ],
        )
        print_table(
            "the functions with the most own time",
            ["function", "ms/op", "share"],
            [
                [name[:90], seconds * 1000 / count, seconds / total]
                for seconds, name in sorted(functions, reverse=True)[:15]
            ],
        )

    return report


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    with open_target(options, "floor") as target:
        print_header(
            "bench_floor",
            target,
            [
                f"{options.samples} rounds of {options.batch} operations of each kind, order rotating; "
                f"payload {MESSAGE_BYTES} bytes",
                target.bytes_note,
            ],
        )
        checkpointer = target.make_checkpointer()
        workloads = Workloads(target, checkpointer)
        try:
            operations = [
                Operation("bare insert + commit", workloads.bare_batch, workloads.bare.measure_growth),
                Operation("ilmek's SQL alone", workloads.sql_alone.batch, None),
                Operation("ilmek superstep", workloads.run_loop.advance, target.measure_growth),
                Operation("ilmek superstep, streamed", workloads.loop.advance, target.measure_growth),
                Operation("ilmek turn (input + superstep)", workloads.turn_batch, target.measure_growth),
                Operation("ilmek superstep, in memory", workloads.memory_loop.advance, None),
            ]
            for number in range(options.samples + 1):
                # Round 0 warms up (connections, caches, thread pools) and is not recorded.
                start = number % len(operations)
                for operation in operations[start:] + operations[:start]:
                    operation.round(options.batch, record=number > 0)
            traced, one_superstep = trace(target, workloads, options.batch)
            pages = (
                target.wal_pages_by_table(lambda: workloads.run_loop.advance(PAGED_SUPERSTEPS))
                if isinstance(target, SqliteTarget)
                else {}
            )
            report_profile = profile(workloads, options.profile) if options.profile else None
        finally:
            workloads.close()
            checkpointer.close()

        bare = operations[0].timings
        print_table(
            "time and bytes per operation (medians; ratio = this / bare)",
            ["operation", "ms/op", "ratio to bare", "CPU ms/op", "CPU ratio", "stored B/op", "WAL B/op"],
            [
                [
                    operation.label,
                    operation.timings.wall_ms(),
                    ratio(operation.timings.wall_ms(), bare.wall_ms()),
                    operation.timings.cpu_ms(),
                    ratio(operation.timings.cpu_ms(), bare.cpu_ms()),
                    operation.bytes_per_operation(operation.growth.stored),
                    operation.bytes_per_operation(operation.growth.logged),
                ]
                for operation in operations
            ],
        )
        print(f"\n{target.trace_note}")
        print_table(
            f"SQL per operation (traced over {options.batch} of each)",
            ["operation", "statements", "write transactions", "read transactions", "commits", "rollbacks"],
            [[label, *count(statements, options.batch)] for label, statements in traced.items()],
        )
        print_table(
            "the statements of one superstep, in order",
            ["#", "statement"],
            [[index, _abridged(statement)] for index, statement in enumerate(one_superstep, 1)],
        )
        if pages:

            def by_count(item: tuple[str, int]) -> int:
                return -item[1]

            print_table(
                f"WAL pages per superstep by table or index ({PAGED_SUPERSTEPS} supersteps as run() drives "
                "them, dbstat; a page written by several commits counts once per commit)",
                ["table or index", "pages/superstep"],
                [[name, count / PAGED_SUPERSTEPS] for name, count in sorted(pages.items(), key=by_count)]
                + [["all", sum(pages.values()) / PAGED_SUPERSTEPS]],
            )
        if report_profile is not None:
            report_profile()


def _abridged(statement: str, width: int = 100) -> str:
    flat = " ".join(statement.split())
    return flat[: width - 3] + "..." if len(flat) > width else flat


if __name__ == "__main__":
    main()
