"""Storage economics on Postgres: paged append channels, indexed queries at scale, round trips per turn.

A long append channel is stored once and read in pages; ``list_threads``
filters and pages; the queries use indexes at one hundred thousand threads;
a turn costs a read and two calls, each its own transaction, even through a
proxy that keeps autocommit to itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest
from psycopg2.extensions import TRANSACTION_STATUS_IDLE

from ilmek import END, START, PostgresCheckpointer, channel, graph, resume, run, thread_state
from tests.support.helpers import reply_chat
from tests.support.pgworker import CART, Effects, checkout_graph
from tests.support.postgres import RecordingClient, fresh_checkpointer, query

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


# --- storage economics -------------------------------------------------------------------------------


def chat_graph(turns: int) -> Any:
    """Appends one message per superstep until there are ``turns`` of them."""

    def speak(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [f"message {len(state['messages'])}"]}

    def again(state: dict[str, Any], ctx: Any) -> str:
        return "speak" if len(state["messages"]) < turns else END

    return (
        graph("pg-chat", {"messages": channel.append()})
        .node("speak", speak)
        .edge(START, "speak")
        .router("speak", again)
        .compile()
    )


def test_a_long_append_channel_is_stored_once_and_read_in_pages(postgres_dsn: str) -> None:
    """300 supersteps of one message each: 300 item rows, same-size checkpoints, pages by offset/limit."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        result = run(chat_graph(300), None, thread_id="long", checkpointer=checkpointer, recursion_limit=400)
        assert "done" == result.status
        messages = [f"message {i}" for i in range(300)]
        assert messages == checkpointer.read_channel("long", "messages")
        assert messages[100:110] == checkpointer.read_channel("long", "messages", offset=100, limit=10)
        assert messages[295:] == checkpointer.read_channel("long", "messages", offset=295, limit=10)
        assert [] == checkpointer.read_channel("long", "messages", offset=300, limit=10)
        assert [] == checkpointer.read_channel("long", "messages", offset=0, limit=0)
        assert [] == checkpointer.read_channel("long", "no-such-channel")
    assert [(300,)] == query(postgres_dsn, "SELECT count(*) FROM ilmek_items")
    sizes = query(
        postgres_dsn,
        "SELECT pg_column_size(manifest) FROM ilmek_checkpoints WHERE thread_id = 'long' "
        "ORDER BY checkpoint_id",
    )
    assert 301 == len(sizes)
    # Checkpoint 300 costs what checkpoint 10 did (give or take a digit of a length).
    assert sizes[-1][0] <= sizes[10][0] + 8


def failing_graph() -> Any:
    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the node failed")

    return (
        graph("pg-fail", {"log": channel.append()})
        .node("fail", fail)
        .edge(START, "fail")
        .edge("fail", END)
        .compile()
    )


def test_list_threads_filters_and_pages(postgres_dsn: str, effects: Effects) -> None:
    """search (LIKE characters literal), metadata, status, offset and limit, newest first."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        checkout = checkout_graph(effects)
        run(checkout, CART, thread_id="order_100%", checkpointer=checkpointer)
        run(checkout, CART, thread_id="order-200", checkpointer=checkpointer)
        resume(checkout, "yes", thread_id="order-200", checkpointer=checkpointer)
        assert "error" == run(failing_graph(), None, thread_id="orderX100", checkpointer=checkpointer).status
        checkpointer.put_thread_metadata("order_100%", {"tenant": "acme", "tier": 1})
        checkpointer.put_thread_metadata("order-200", {"tenant": "acme", "tier": 2})
        checkpointer.put_thread_metadata("orderX100", {"tenant": "globex"})

        def ids(**filters: Any) -> list[str]:
            return [info.id for info in checkpointer.list_threads(**filters)]

        newest_first = ["orderX100", "order-200", "order_100%"]
        assert newest_first == ids()
        assert ["order_100%"] == ids(search="_100%")
        assert ["orderX100", "order_100%"] == ids(search="100")
        assert ["order_100%"] == ids(search="ORDER_")
        assert ["order-200", "order_100%"] == ids(metadata={"tenant": "acme"})
        assert ["order-200"] == ids(metadata={"tenant": "acme", "tier": 2})
        assert ["order_100%"] == ids(status="interrupted")
        assert ["order-200"] == ids(status="done")
        assert ["orderX100"] == ids(status="error")
        assert [] == ids(status="unfinished")
        assert newest_first[1:] == ids(offset=1)
        assert newest_first[1:2] == ids(offset=1, limit=1)
        assert [] == ids(offset=3, limit=5)
        assert ["order_100%"] == ids(metadata={"tenant": "acme"}, status="interrupted", search="order")


BULK_THREADS = 100_000


def explain(dsn: str, sql: str, params: Any) -> str:
    return "\n".join(row[0] for row in query(dsn, "EXPLAIN " + sql, params))


def test_queries_use_indexes_at_one_hundred_thousand_threads(postgres_dsn: str) -> None:
    """With 100,000 threads the latest-checkpoint and list_threads queries use indexes (times reported)."""
    query(
        postgres_dsn,
        "INSERT INTO ilmek_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) SELECT 'bulk-' || i, 1.7e9 + i, 1.7e9 + i, "
        "(ARRAY['done', 'interrupted', 'unfinished'])[1 + i %% 3], i %% 50, lpad(i::text, 12, '0'), "
        "jsonb_build_object('tenant', 'tenant-' || (i %% 1000)) "
        "FROM generate_series(1, %s) AS i",
        (BULK_THREADS,),
    )
    query(
        postgres_dsn,
        "INSERT INTO ilmek_checkpoints (thread_id, checkpoint_id, step, ts, manifest, next, pending, "
        "task_journals, metadata) SELECT 'bulk-' || (i %% 10000), lpad(i::text, 12, '0'), 0, 1.7e9, "
        "'{}', '[]', '[]', '{}', '{}' FROM generate_series(1, %s) AS i",
        (BULK_THREADS,),
    )
    query(postgres_dsn, "ANALYZE ilmek_threads")
    query(postgres_dsn, "ANALYZE ilmek_checkpoints")
    client = RecordingClient.on(postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(client)

        def sent_by(action: Callable[[], Any], marker: str) -> tuple[str, Any]:
            client.calls.clear()
            action()
            [call] = [call for call in client.calls if marker in call[0]]
            return call

        latest = sent_by(lambda: checkpointer.get("bulk-7"), "ORDER BY checkpoint_id DESC LIMIT 1")
        assert "Index" in explain(postgres_dsn, *latest)
        listing = sent_by(lambda: checkpointer.list_threads(limit=50), "ORDER BY t.updated_at DESC")
        assert "Index" in explain(postgres_dsn, *listing)
        by_metadata = sent_by(
            lambda: checkpointer.list_threads(metadata={"tenant": "tenant-7"}, limit=50),
            "ORDER BY t.updated_at",
        )
        assert "ilmek_threads_metadata" in explain(postgres_dsn, *by_metadata)

        timings = {}
        for label, filters in {
            "list_threads(limit=50)": {"limit": 50},
            'list_threads(status="interrupted", limit=50)': {"status": "interrupted", "limit": 50},
            'list_threads(metadata={"tenant": "tenant-7"}, limit=50)': {
                "metadata": {"tenant": "tenant-7"},
                "limit": 50,
            },
        }.items():
            started = time.perf_counter()
            found = checkpointer.list_threads(**filters)
            timings[label] = time.perf_counter() - started
            assert 50 == len(found)
    finally:
        client.close()
    print(f"\nat {BULK_THREADS} threads:")
    for label, seconds in timings.items():
        print(f"  {label}: {seconds * 1000:.1f} ms")


class CountingConnection(psycopg2.extensions.connection):  # type: ignore[misc]
    """Records each statement with whether it ran in autocommit, and counts COMMIT calls."""

    sent: list[tuple[str, bool]] = []  # noqa: RUF012 - one list for every connection of the pool
    commits: int = 0

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = _CountingCursor
        return super().cursor(*args, **kwargs)

    def commit(self) -> None:
        type(self).commits += 1
        super().commit()

    @classmethod
    def count_from_here(cls) -> None:
        """Forget what was sent and committed so far."""
        cls.sent.clear()
        cls.commits = 0


@contextlib.contextmanager
def counting_checkpointer(dsn: str, **options: Any) -> Iterator[PostgresCheckpointer]:
    """A checkpointer on a pool of two :class:`CountingConnection`, closed afterwards."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 2, dsn, connection_factory=CountingConnection)
    try:
        yield PostgresCheckpointer(pool, **options)
    finally:
        pool.closeall()


class _CountingCursor(psycopg2.extensions.cursor):  # type: ignore[misc]
    def execute(self, query: Any, params: Any = None) -> Any:
        CountingConnection.sent.append((" ".join(str(query).split()[:2]), bool(self.connection.autocommit)))
        return super().execute(query, params)


def test_a_turn_is_two_round_trips_two_calls_each_its_own_transaction(postgres_dsn: str) -> None:
    """A turn on a thread this process wrote last: no read (the process remembers the checkpoint it
    committed, and the list's items), the input's call (taking the hold, on the condition that the
    thread is still there) and the superstep's call (giving it back), each a statement in autocommit;
    no BEGIN, no COMMIT."""
    g = reply_chat("turns")
    with counting_checkpointer(postgres_dsn) as checkpointer:
        run(g, {"log": ["one"]}, thread_id="turns", checkpointer=checkpointer)
        CountingConnection.count_from_here()
        result = run(g, {"log": ["two"]}, thread_id="turns", checkpointer=checkpointer)
    assert ["one", "reply to one", "two", "reply to two"] == result.state["log"]
    assert [("SELECT busy,", True), ("SELECT busy,", True)] == CountingConnection.sent
    assert 0 == CountingConnection.commits


def test_a_turn_after_another_processes_turn_costs_one_round_trip_more(postgres_dsn: str) -> None:
    """Another process ran a turn since this one wrote the thread: the input's call, conditioned on
    the checkpoint this process remembers, is refused and rolled back (nothing written, no long way),
    then the turn is what it is on a thread this process does not know: a read of the checkpoint, one
    of the other process's new items, and the two calls. Both processes' messages are there, once."""
    g = reply_chat("bounced")
    with counting_checkpointer(postgres_dsn) as checkpointer:
        run(g, {"log": ["one"]}, thread_id="bounced", checkpointer=checkpointer)
        with PostgresCheckpointer.connect(postgres_dsn) as other:
            run(g, {"log": ["two"]}, thread_id="bounced", checkpointer=other)
        CountingConnection.count_from_here()
        result = run(g, {"log": ["three"]}, thread_id="bounced", checkpointer=checkpointer)
    assert ["one", "reply to one", "two", "reply to two", "three", "reply to three"] == result.state["log"]
    assert [
        ("SELECT busy,", True),
        ("SELECT checkpoint_id,", True),
        ("SELECT i.log_id,", True),
        ("SELECT busy,", True),
        ("SELECT busy,", True),
    ] == CountingConnection.sent
    assert 0 == CountingConnection.commits


def test_turns_taken_in_turn_by_two_processes_read_instead_of_guessing(postgres_dsn: str) -> None:
    """Two processes taking a conversation's turns in turn (round-robin workers): once this process's
    guess was refused, it reads the thread first, as a process that remembers nothing does, with no
    refused call each turn; once a turn finds the thread where this process left it, it guesses again."""
    g = reply_chat("turns")
    sent: list[list[str]] = []
    with (
        counting_checkpointer(postgres_dsn) as checkpointer,
        PostgresCheckpointer.connect(postgres_dsn) as other,
    ):
        for turn, by in enumerate(["this", "other", "this", "other", "this", "this", "this"]):
            CountingConnection.count_from_here()
            run(
                g,
                {"log": [f"m{turn}"]},
                thread_id="turns",
                checkpointer=checkpointer if by == "this" else other,
            )
            if by == "this":
                sent.append([statement for statement, _ in CountingConnection.sent])
        final = run(g, None, thread_id="turns", checkpointer=other).state["log"]
    assert [text for turn in range(7) for text in (f"m{turn}", f"reply to m{turn}")] == final
    call, read, items = "SELECT busy,", "SELECT checkpoint_id,", "SELECT i.log_id,"
    assert [read, call, call] == sent[0][-3:]  # a new thread (after the schema's check): nothing to remember
    assert (
        [
            [call, read, items, call, call],  # the guess, refused: the other process moved the thread
            [read, items, call, call],  # read first: this thread moves elsewhere
            [read, call, call],  # read, and found where this process left it
            [call, call],  # so guessed again
        ]
        == sent[1:]
    )


def test_a_new_threads_first_run_is_a_read_and_one_call_per_checkpoint(postgres_dsn: str) -> None:
    """A run on a new thread: the read that finds no thread, one call that makes the thread, its
    list and its first checkpoint (taking the hold), one call per superstep; all in autocommit.
    Another process then reads the same state, list items included."""
    g = reply_chat("fresh")
    with counting_checkpointer(postgres_dsn) as checkpointer:
        run(g, {"log": ["warm"]}, thread_id="fresh-warm-up", checkpointer=checkpointer)  # the schema check
        CountingConnection.count_from_here()
        result = run(g, {"log": ["one", "two"]}, thread_id="fresh", checkpointer=checkpointer)
    assert ["one", "two", "reply to two"] == result.state["log"]
    assert [("SELECT checkpoint_id,", True), ("SELECT busy,", True), ("SELECT busy,", True)] == (
        CountingConnection.sent
    )
    assert 0 == CountingConnection.commits
    with PostgresCheckpointer.connect(postgres_dsn) as fresh:
        stored = fresh.get("fresh")
        assert stored is not None
        assert ["one", "two", "reply to two"] == list(stored.channels["log"])
        assert 2 == len(fresh.list("fresh"))
        info = fresh.get_thread("fresh")
        assert info is not None
        assert "done" == info.status


def test_a_step_is_one_round_trip_its_fenced_insert(postgres_dsn: str) -> None:
    """Three steps in a fresh run cost three statements, one per step: the journal insert, fenced by the
    hold in the same statement; no read confirms the hold while its lease is fresh by the client's clock."""

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.step(f"s{i}", lambda i=i: f"paid {i}") for i in range(3)]}

    g = graph("steps", {"log": channel.append()}).node("pay", pay).edge(START, "pay").edge("pay", END)
    with counting_checkpointer(postgres_dsn, lease_seconds=60.0) as checkpointer:
        run(g.compile(), None, thread_id="warm-up", checkpointer=checkpointer)  # the schema check
        CountingConnection.count_from_here()
        result = run(g.compile(), {"log": ["order"]}, thread_id="steps", checkpointer=checkpointer)
    assert ["order", "paid 0", "paid 1", "paid 2"] == result.state["log"]
    assert [
        ("SELECT checkpoint_id,", True),
        ("SELECT busy,", True),
        ("INSERT INTO", True),
        ("INSERT INTO", True),
        ("INSERT INTO", True),
        ("SELECT busy,", True),
    ] == CountingConnection.sent


def test_a_resume_records_its_answers_in_one_call(postgres_dsn: str) -> None:
    """A resume: the latest checkpoint and the pause's journals read, the answers one call (taking
    the hold, and returning what is recorded from the pause, so the journals are not read again),
    the superstep one call; all in autocommit, no COMMIT."""
    charges: list[str] = []

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: charges.append("charged") or len(charges))
        answer = ctx.interrupt("Charge?")
        return {"log": [f"{receipt}: {answer}"]}

    g = graph("answers", {"log": channel.append()}).node("checkout", checkout)
    g = g.edge(START, "checkout").edge("checkout", END).compile()
    with counting_checkpointer(postgres_dsn) as checkpointer:
        assert (
            "interrupted" == run(g, {"log": ["order"]}, thread_id="answers", checkpointer=checkpointer).status
        )
        CountingConnection.count_from_here()
        done = resume(g, "yes", thread_id="answers", checkpointer=checkpointer)
    assert (["order", "1: yes"], ["charged"]) == (done.state["log"], charges)
    assert [
        ("SELECT checkpoint_id,", True),
        ("SELECT base_id,", True),
        ("SELECT busy,", True),
        ("SELECT busy,", True),
    ] == CountingConnection.sent
    assert 0 == CountingConnection.commits


class KeepsSettingsToItself:
    """A proxy for a psycopg2 connection whose attribute sets (``autocommit``) stay on the proxy."""

    def __init__(self, connection: Any) -> None:
        self.wrapped = connection

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # stands in for the connection, as wrapt's proxies do
        return type(self.wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class ProxyLendingPool(psycopg2.pool.ThreadedConnectionPool):  # type: ignore[misc]
    """Lends each connection through a :class:`KeepsSettingsToItself` proxy."""

    def getconn(self, key: Any = None) -> Any:
        return KeepsSettingsToItself(super().getconn(key))

    def putconn(self, conn: Any = None, key: Any = None, close: bool = False) -> None:
        super().putconn(conn.wrapped if isinstance(conn, KeepsSettingsToItself) else conn, key, close)


def test_a_proxy_that_keeps_autocommit_to_itself_still_commits_every_call(postgres_dsn: str) -> None:
    """The switch to autocommit never reaches the driver, which opens a transaction for the call:
    ilmek commits it. Every turn is durable for another process, no transaction (or advisory
    lock) stays open on a pooled connection, and the thread is free for the next run."""
    pool = ProxyLendingPool(1, 2, postgres_dsn)
    g = reply_chat("proxied")
    try:
        checkpointer = PostgresCheckpointer(pool)
        for turn in ("one", "two", "three"):
            assert "done" == run(g, {"log": [turn]}, thread_id="proxied", checkpointer=checkpointer).status
        lent = [pool.getconn() for _ in range(2)]
        statuses = [connection.get_transaction_status() for connection in lent]
        for connection in lent:
            pool.putconn(connection)
    finally:
        pool.closeall()
    assert [TRANSACTION_STATUS_IDLE] * 2 == statuses
    with fresh_checkpointer(postgres_dsn) as other:
        assert ["one", "reply to one", "two", "reply to two", "three", "reply to three"] == (
            thread_state(g, other, "proxied")["log"]
        )
        with other.hold("proxied"):
            pass
