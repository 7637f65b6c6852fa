"""How fast does ``delete_threads(updated_before=...)`` clear out old threads?

Retention (``ilmek gc``) deletes threads in bulk: every row of each thread in
every ilmek table (checkpoints, values, list items, journals, the thread),
never one a live run holds. This measures it over ``--threads`` old threads
(100,000 by default) on one database, side by side with the floor:

* **ilmek**: ``checkpointer.delete_threads(updated_before=cutoff,
  limit=batch)``, batch after batch, until no old thread is left;
* **bare**: the same rows of as many other threads deleted set-based, one
  transaction per batch: one ``DELETE ... WHERE thread_id IN (the batch's
  oldest threads)`` per table, items through their logs, threads last. It
  checks no hold and takes no lock per thread: the least a delete can cost.

Batches alternate between the two (who goes first swaps each round); the
first round warms up and is not recorded. Printed: threads per second
(all recorded batches), the median time per 1,000 threads, CPU time of this
process, and ilmek / bare.

Volume. One real thread is made by real runs of an order graph (a journaled
step, a pause answered, messages appended over several supersteps), so its
rows are what ilmek writes. It is then copied, row for row, into twice
``--threads`` threads with ``INSERT ... SELECT`` straight into ilmek's tables
(new thread ids; list-item logs renumbered so each copy's items hang off its
own logs), last updated long ago: the ilmek half older than the cut-off, the
bare half newer, so ``delete_threads`` never takes the bare one's. A few
young threads, made by real runs, must survive both. A copy's checkpoints
still name the original's value rows in their manifests; deleting never
reads manifests, so each delete costs what deleting a real thread costs.

Usage: ``python benchmarks/bench_gc.py [--threads 100000] [--batch 1000]
[--synchronous FULL|NORMAL] [--target sqlite|postgres] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from _common import (
    Target,
    add_target_options,
    message,
    open_target,
    positive_int,
    print_header,
    print_table,
    ratio,
)

from ilmek import END, START, channel, graph, resume, run
from ilmek.checkpoint.base import Checkpointer
from ilmek.graph import CompiledGraph

TEMPLATE = "gc-template"
ILMEK_PREFIX = "gc-ilmek-"
BARE_PREFIX = "gc-bare-"
YOUNG = ("gc-young-1", "gc-young-2", "gc-young-3")
DAY = 86400.0
# The ilmek half was last updated 90 days ago, the bare half 60; the cut-off
# lies between them, as `ilmek gc --older-than 75d` would put it.
ILMEK_AGE_DAYS = 90
BARE_AGE_DAYS = 60
CUTOFF_DAYS = 75
# The order graph appends a message per superstep this many times.
LOOPS = 4


def order_graph() -> CompiledGraph:
    """An order as ilmek stores it: steps, a pause answered, messages appended over supersteps."""

    def take(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", lambda: {"id": 7, "total": 249.9, "items": ["coffee", "mug"]})
        ctx.step("reserve", lambda: "reserved")
        answer = ctx.interrupt({"question": f"Charge {order['total']}?"})
        receipt = ctx.step(
            "charge", lambda: f"charged {order['total']}" if answer == "yes" else "not charged"
        )
        return {"order": order, "messages": [message("assistant", 1), receipt]}

    def chat(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": message("assistant", len(state["messages"]))}

    def again(state: dict[str, Any]) -> str:
        return "chat" if len(state["messages"]) < 3 + LOOPS else END

    return (
        graph("gc-order", {"order": channel.last_write(None), "messages": channel.append()})
        .node("take", take)
        .node("chat", chat)
        .edge(START, "take")
        .edge("take", "chat")
        .router("chat", again, destinations=["chat", END])
        .compile()
    )


def real_thread(checkpointer: Checkpointer, thread_id: str) -> None:
    """One order, start to end, through the public API."""
    g = order_graph()
    assert (
        "interrupted"
        == run(g, {"messages": [message("user", 0)]}, thread_id=thread_id, checkpointer=checkpointer).status
    )
    assert "done" == resume(g, "yes", thread_id=thread_id, checkpointer=checkpointer).status


class Sql:
    """The script's own connection to the target's database, and its dialect."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.postgres = target.name == "postgres"
        self.connection = target.sql_connection()
        self.prefix = target.table_prefix

    def render(self, statement: str) -> str:
        text = statement.replace("{p}", self.prefix)
        # No literal % in these statements, so psycopg2's placeholder is a plain swap.
        return text.replace("?", "%s") if self.postgres else text

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Callable[..., list[tuple[Any, ...]]]]:
        """One committed transaction; yields ``execute(statement, *params) -> rows``."""
        cursor = self.connection.cursor()

        def execute(statement: str, *params: Any) -> list[tuple[Any, ...]]:
            cursor.execute(self.render(statement), params)
            return list(cursor.fetchall()) if cursor.description is not None else []

        try:
            if not self.postgres:
                cursor.execute("BEGIN IMMEDIATE")  # psycopg2 begins by itself
            yield execute
            self.connection.commit() if self.postgres else cursor.execute("COMMIT")
        except BaseException:
            self.connection.rollback() if self.postgres else cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    def query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.transaction() as execute:
            return execute(statement, *params)

    def close(self) -> None:
        self.connection.close()


# Every ilmek table with a thread_id, for counting what a thread owns.
THREAD_TABLES = ("threads", "checkpoints", "blobs", "logs", "journals")


def rows_of(sql: Sql, pattern: str) -> dict[str, int]:
    """How many rows of each table belong to the threads whose id matches the LIKE ``pattern``."""
    counts = {
        table: sql.query(f"SELECT count(*) FROM {{p}}_{table} WHERE thread_id LIKE ?", pattern)[0][0]
        for table in THREAD_TABLES
    }
    counts["items"] = sql.query(
        "SELECT count(*) FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id LIKE ?)",
        pattern,
    )[0][0]
    return counts


def copy_template(
    sql: Sql, prefix: str, count: int, updated_at: float, log_offset: int, log_shift: int
) -> None:
    """``count`` copies of the template, ``<prefix>0`` ..., last updated at ``updated_at`` (+1 ms each).

    The copies' logs get ids ``log_id + (k + log_offset) * log_shift``, so
    each copy's items belong to its own logs.
    """
    new_id = "? || CAST(n.k AS TEXT)"
    overriding = " OVERRIDING SYSTEM VALUE" if sql.postgres else ""
    statements = [
        (
            "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
            f"metadata, error) SELECT {new_id}, t.created_at, ? + n.k * 0.001, t.status, t.step, "
            "t.checkpoint_id, t.metadata, t.error FROM {p}_threads AS t, bench_numbers AS n "
            "WHERE t.thread_id = ? AND n.k < ?",
            (prefix, updated_at, TEMPLATE, count),
        ),
        (
            "INSERT INTO {p}_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, manifest, "
            f"next, pending, task_journals, metadata, journal_chain) SELECT {new_id}, c.checkpoint_id, "
            "c.parent_id, c.plan_id, c.step, c.ts, c.manifest, c.next, c.pending, c.task_journals, "
            "c.metadata, c.journal_chain FROM {p}_checkpoints AS c, bench_numbers AS n "
            "WHERE c.thread_id = ? AND n.k < ?",
            (prefix, TEMPLATE, count),
        ),
        (
            f"INSERT INTO {{p}}_blobs (thread_id, channel, value) SELECT {new_id}, b.channel, b.value "
            "FROM {p}_blobs AS b, bench_numbers AS n WHERE b.thread_id = ? AND n.k < ?",
            (prefix, TEMPLATE, count),
        ),
        (
            f"INSERT INTO {{p}}_logs (log_id, thread_id, channel, parent_id, base, length){overriding} "
            f"SELECT l.log_id + (n.k + ?) * ?, {new_id}, l.channel, l.parent_id + (n.k + ?) * ?, l.base, "
            "l.length FROM {p}_logs AS l, bench_numbers AS n WHERE l.thread_id = ? AND n.k < ?",
            (log_offset, log_shift, prefix, log_offset, log_shift, TEMPLATE, count),
        ),
        (
            "INSERT INTO {p}_items (log_id, idx, value) SELECT i.log_id + (n.k + ?) * ?, i.idx, i.value "
            "FROM {p}_items AS i JOIN {p}_logs AS l ON l.log_id = i.log_id, bench_numbers AS n "
            "WHERE l.thread_id = ? AND n.k < ?",
            (log_offset, log_shift, TEMPLATE, count),
        ),
        (
            "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
            f"SELECT {new_id}, j.base_id, j.task_key, j.entry_key, j.entry "
            "FROM {p}_journals AS j, bench_numbers AS n WHERE j.thread_id = ? AND n.k < ?",
            (prefix, TEMPLATE, count),
        ),
    ]
    with sql.transaction() as execute:
        for statement, params in statements:
            execute(statement, *params)


def build(sql: Sql, checkpointer: Checkpointer, count: int) -> dict[str, int]:
    """The template and young threads by real runs, then ``count`` old copies for each side.

    Returns:
        The template's rows per table: what each copy holds.
    """
    real_thread(checkpointer, TEMPLATE)
    for thread_id in YOUNG:
        real_thread(checkpointer, thread_id)
    template_rows = rows_of(sql, TEMPLATE)
    assert all(template_rows.values()), f"the template thread lacks rows somewhere: {template_rows}"
    with sql.transaction() as execute:
        execute("CREATE TEMP TABLE bench_numbers (k BIGINT PRIMARY KEY)")
    with sql.transaction() as execute:
        # Filled in slices: one statement per 10,000 numbers keeps it quick on both.
        for start in range(0, count, 10_000):
            numbers = ", ".join(f"({k})" for k in range(start, min(count, start + 10_000)))
            execute(f"INSERT INTO bench_numbers (k) VALUES {numbers}")
    log_shift = sql.query("SELECT COALESCE(max(log_id), 0) + 1 FROM {p}_logs")[0][0]
    now = time.time()
    copy_template(sql, ILMEK_PREFIX, count, now - ILMEK_AGE_DAYS * DAY, 1, log_shift)
    copy_template(sql, BARE_PREFIX, count, now - BARE_AGE_DAYS * DAY, 1 + count, log_shift)
    with sql.transaction() as execute:
        execute("DROP TABLE bench_numbers")
        if sql.postgres:
            # Explicit ids went past the identity's counter: move it on, as a real history would have.
            execute(
                "SELECT setval(pg_get_serial_sequence('{p}_logs', 'log_id'), "
                "(SELECT max(log_id) FROM {p}_logs))"
            )
    # Fresh statistics, as autovacuum (or SQLite's optimize) would have them after such growth.
    if sql.postgres:
        sql.connection.autocommit = True
        with sql.connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        sql.connection.autocommit = False
    else:
        sql.connection.execute("ANALYZE")
    return template_rows


class Side:
    """One way of deleting: its batches' times and thread counts."""

    def __init__(self, label: str, delete: Callable[[int], int]) -> None:
        self.label = label
        self.delete = delete
        self.threads: list[int] = []
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.exhausted = False

    def round(self, batch: int, *, record: bool) -> None:
        if self.exhausted:
            return
        started = (time.perf_counter(), time.process_time())
        deleted = self.delete(batch)
        wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
        if deleted < batch:
            self.exhausted = True
        if record and deleted:
            self.threads.append(deleted)
            self.wall.append(wall)
            self.cpu.append(cpu)

    def threads_per_second(self) -> float:
        return ratio(sum(self.threads), sum(self.wall))

    def ms_per_thousand(self) -> float:
        return statistics.median(w / n for w, n in zip(self.wall, self.threads, strict=True)) * 1e6

    def cpu_ms_per_thousand(self) -> float:
        return statistics.median(c / n for c, n in zip(self.cpu, self.threads, strict=True)) * 1e6


def bare_delete(sql: Sql, newer_than: float, older_than: float) -> Callable[[int], int]:
    """The floor: the bare half's oldest threads deleted set-based, a batch per transaction.

    The batch is found once through the ``updated_at`` index (the bare half
    alone is last updated between ``newer_than`` and ``older_than``), then
    each table loses the batch's rows in one statement per 500 ids.
    """
    find = (
        "SELECT thread_id FROM {p}_threads WHERE updated_at >= ? AND updated_at < ? "
        "ORDER BY updated_at, thread_id LIMIT ?"
    )
    # Items through their logs, the threads last, as ilmek deletes them.
    tables = (
        "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id IN ({in}))",
        "DELETE FROM {p}_logs WHERE thread_id IN ({in})",
        "DELETE FROM {p}_blobs WHERE thread_id IN ({in})",
        "DELETE FROM {p}_checkpoints WHERE thread_id IN ({in})",
        "DELETE FROM {p}_journals WHERE thread_id IN ({in})",
        "DELETE FROM {p}_holds WHERE thread_id IN ({in})",
        "DELETE FROM {p}_threads WHERE thread_id IN ({in})",
    )

    def delete(batch: int) -> int:
        with sql.transaction() as execute:
            doomed = [row[0] for row in execute(find, newer_than, older_than, batch)]
            for start in range(0, len(doomed), 500):
                chunk = doomed[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                for statement in tables:
                    execute(statement.replace("{in}", marks), *chunk)
        return len(doomed)

    return delete


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--threads", type=positive_int, default=100_000, help="old threads each side deletes (default 100000)"
    )
    parser.add_argument(
        "--batch", type=positive_int, default=1000, help="threads per delete_threads call (default 1000)"
    )
    add_target_options(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    with open_target(options, "gc") as target:
        checkpointer = target.make_checkpointer(concurrent_runs=1)
        sql = Sql(target)
        try:
            started = time.perf_counter()
            per_thread = build(sql, checkpointer, options.threads)
            built = time.perf_counter() - started
            print_header(
                "bench_gc",
                target,
                [
                    f"{options.threads} old threads deleted by each side, batches of {options.batch}, "
                    "order alternating; the first round is a warm-up",
                    "rows per thread: "
                    + ", ".join(f"{table} {count}" for table, count in per_thread.items())
                    + f" ({sum(per_thread.values())} in all)",
                    f"built {2 * options.threads} old threads in {built:.1f} s "
                    "(real runs, then INSERT ... SELECT)",
                ],
            )
            cutoff = time.time() - CUTOFF_DAYS * DAY
            sides = [
                Side(
                    "ilmek delete_threads(updated_before=...)",
                    lambda batch: checkpointer.delete_threads(updated_before=cutoff, limit=batch),
                ),
                Side(
                    "bare set-based DELETE, a transaction per batch",
                    bare_delete(sql, cutoff, time.time() - (BARE_AGE_DAYS - 1) * DAY),
                ),
            ]
            number = 0
            while not all(side.exhausted for side in sides):
                for side in sides if number % 2 == 0 else sides[::-1]:
                    side.round(options.batch, record=number > 0)
                number += 1
            left = {
                side: rows_of(sql, prefix + "%")
                for side, prefix in (("ilmek", ILMEK_PREFIX), ("bare", BARE_PREFIX))
            }
            young = [thread_id for thread_id in YOUNG if checkpointer.get_thread(thread_id) is not None]
        finally:
            sql.close()
            checkpointer.close()

        assert all(count == 0 for rows in left.values() for count in rows.values()), f"rows left: {left}"
        assert list(YOUNG) == young, f"young threads deleted: {set(YOUNG) - set(young)}"
        ilmek_side, bare = sides
        print_table(
            f"deleting old threads (all recorded batches; medians per batch of {options.batch})",
            [
                "operation",
                "threads",
                "seconds",
                "threads/s",
                "ms per 1,000 threads",
                "CPU ms per 1,000",
                "ratio to bare",
            ],
            [
                [
                    side.label,
                    sum(side.threads),
                    sum(side.wall),
                    side.threads_per_second(),
                    side.ms_per_thousand(),
                    side.cpu_ms_per_thousand(),
                    ratio(side.ms_per_thousand(), bare.ms_per_thousand()),
                ]
                for side in sides
            ],
        )
        print(
            f"\nsummary: delete_threads deletes {ilmek_side.threads_per_second():.0f} threads/s, "
            f"{ilmek_side.ms_per_thousand():.0f} ms per 1,000 threads "
            f"({ratio(ilmek_side.ms_per_thousand(), bare.ms_per_thousand()):.1f}x the bare "
            "set-based delete); "
            "every old thread's rows gone, the young threads kept"
        )


if __name__ == "__main__":
    main()
