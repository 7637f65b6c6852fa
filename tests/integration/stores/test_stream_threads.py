"""A stream read from a different OS thread at each event, as Starlette's ``iterate_in_threadpool`` reads a
sync generator, on clients bound to the caller's thread (a ``sqlite3`` connection, a psycopg2 connection, a
generic ``execute`` client): the run ends as it would on one thread, each step runs once, and every
statement goes out from the thread reading the stream at that moment, never from a worker.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from ilmek import END, START, channel, graph, stream
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.events import Event
from ilmek.graph import CompiledGraph
from tests.support.backends import ExecuteClient
from tests.support.helpers import Calls
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(60)

#: The name of each thread that sent a statement, in order.
SENDERS: list[str] = []


def sent_from_here() -> None:
    SENDERS.append(threading.current_thread().name)


class NamingSqlite(sqlite3.Connection):
    """A caller's sqlite3 connection that notes which thread sends each statement."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        sent_from_here()
        return super().execute(sql, *args)


class NamingPsycopg2(psycopg2.extensions.connection):  # type: ignore[misc]
    """A caller's psycopg2 connection that notes which thread opens each cursor."""

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        sent_from_here()
        return super().cursor(*args, **kwargs)


class NamingExecuteClient(ExecuteClient):
    """The generic ``execute`` client, noting which thread sends each statement."""

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        sent_from_here()
        return super().execute(sql, params)


def thread_bound(kind: str, store: Store) -> Checkpointer:
    """A checkpointer on a client of the caller's that ilmek uses only from the thread reading the stream."""
    if kind == "sqlite-connection":
        SqliteCheckpointer(store.path).close()
        connection = sqlite3.connect(store.path, factory=NamingSqlite, check_same_thread=False)
        connection.isolation_level = None
        store.closing.append(connection)
        return SqliteCheckpointer(connection, lease_seconds=2.0)
    if kind == "psycopg2-connection":
        own = psycopg2.connect(store.dsn, connection_factory=NamingPsycopg2)
        store.closing.append(own)
        return PostgresCheckpointer(own, lease_seconds=2.0)
    client = NamingExecuteClient(store.dsn)
    store.closing.append(client)
    return PostgresCheckpointer(client, lease_seconds=2.0)


def fan_out_graph(calls: Calls) -> CompiledGraph:
    """Three nodes at once, each emitting and taking two steps, then one that sums them: two supersteps."""

    def worker(name: str) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.emit(f"{name} starts")
            first = ctx.step("first", lambda: calls.hit(f"{name}.first") or 1)
            second = ctx.step("second", lambda: calls.hit(f"{name}.second") or 2)
            return {"parts": [first + second]}

        return work

    def total(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"total": ctx.step("sum", lambda: sum(state["parts"]))}

    built = graph("hopping", {"parts": channel.append(), "total": channel.last_write(0)})
    for name in ("a", "b", "c"):
        built = built.node(name, worker(name)).edge(START, name).edge(name, "total")
    return built.node("total", total).edge("total", END).compile()


def next_on(name: str, events: Iterator[Event]) -> Event | None:
    """``next(events)`` on a new thread called ``name``, which then ends; its error is raised here."""
    box: list[Any] = []

    def read() -> None:
        try:
            box.append(next(events, None))
        except BaseException as error:
            box.append(error)

    reader = threading.Thread(target=read, name=name)
    reader.start()
    reader.join(30)
    [got] = box
    if isinstance(got, BaseException):
        raise got
    found: Event | None = got
    return found


def read_on_a_new_thread_each_time(events: Iterator[Event]) -> Iterator[Event]:
    """Each ``next()`` on a fresh thread, as a thread pool handing out any of its threads would."""
    count = 0
    while (event := next_on(f"reader-{count}", events)) is not None:
        count += 1
        yield event


@pytest.mark.parametrize(
    ("kind", "store"),
    [
        ("sqlite-connection", "sqlite"),
        pytest.param("psycopg2-connection", "postgres", marks=pytest.mark.postgres),
        pytest.param("generic-client", "postgres", marks=pytest.mark.postgres),
    ],
    indirect=["store"],
)
def test_a_stream_read_from_a_new_thread_at_each_event_runs_as_on_one_thread(store: Store, kind: str) -> None:
    """A fan-out stream on a thread-bound client, each event read on a new thread: the run is done with
    every event, each step ran once, and each statement was sent by a reading thread, not a worker."""
    calls = Calls()
    checkpointer = thread_bound(kind, store)
    SENDERS.clear()
    events = list(
        read_on_a_new_thread_each_time(
            iter(stream(fan_out_graph(calls), {}, thread_id="hopping", checkpointer=checkpointer))
        )
    )
    strangers = {name for name in SENDERS if not name.startswith("reader-")}
    assert ("run_end", "done") == (events[-1].type, getattr(events[-1], "status", None))
    assert {"a starts", "b starts", "c starts"} == {e.payload for e in events if e.type == "custom"}
    assert {f"{n}.{s}": 1 for n in "abc" for s in ("first", "second")} == dict(calls)
    state = checkpointer.get("hopping")
    assert state is not None
    assert 9 == state.channels["total"]
    assert set() == strangers, strangers
