"""Clients that are almost right: a SQLAlchemy ``scoped_session``, a SQLAlchemy bind on SQLite, a generic
client whose connection is closed. Each works, or is refused at once saying why, on the real server.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import sqlalchemy
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from ilmek import (
    START,
    InvalidArgumentError,
    PostgresCheckpointer,
    StorageError,
    TransientStorageError,
    channel,
    graph,
    run,
)
from tests.support.backends import ExecuteClient
from tests.support.pgcluster import dsn_to_url
from tests.support.postgres import query

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def one_node() -> Any:
    return graph("one", {"n": channel.last_write(0)}).node("n", lambda s: {"n": 1}).edge(START, "n").compile()


@pytest.fixture(params=["psycopg2", "psycopg"])
def scoped(request: pytest.FixtureRequest, postgres_dsn: str) -> Iterator[scoped_session[Session]]:
    """A scoped_session (what Flask-SQLAlchemy's db.session is) on the test database, per driver."""
    url = dsn_to_url(postgres_dsn).replace("postgresql://", f"postgresql+{request.param}://", 1)
    engine = sqlalchemy.create_engine(url)
    sessions = scoped_session(sessionmaker(bind=engine))
    yield sessions
    sessions.remove()
    engine.dispose()


def test_a_scoped_session_is_used_as_the_session_it_stands_for(
    scoped: scoped_session[Session], postgres_dsn: str
) -> None:
    """migrate() and a run go through the current scope's Session, in its transaction: the caller commits."""
    checkpointer = PostgresCheckpointer(scoped)
    checkpointer.migrate()
    assert "done" == run(one_node(), {}, thread_id="scoped", checkpointer=checkpointer).status
    assert [] == query(postgres_dsn, "SELECT 1 FROM ilmek_threads WHERE thread_id = 'scoped'")
    scoped.commit()
    assert [(1,)] == query(postgres_dsn, "SELECT 1 FROM ilmek_threads WHERE thread_id = 'scoped'")


def test_a_scoped_session_follows_its_scope_into_another_thread(
    scoped: scoped_session[Session], postgres_dsn: str
) -> None:
    """A checkpointer made once writes, on another thread, in that thread's Session (committed there)."""
    checkpointer = PostgresCheckpointer(scoped)
    checkpointer.migrate()
    scoped.commit()
    outcome: list[str] = []

    def request() -> None:
        outcome.append(run(one_node(), {}, thread_id="elsewhere", checkpointer=checkpointer).status)
        scoped.commit()
        scoped.remove()

    worker = threading.Thread(target=request)
    worker.start()
    worker.join(30)
    assert ["done"] == outcome
    assert not scoped().in_transaction()  # this thread's Session never saw the write
    assert [(1,)] == query(postgres_dsn, "SELECT 1 FROM ilmek_threads WHERE thread_id = 'elsewhere'")


@pytest.mark.parametrize("kind", ["engine", "connection", "session", "scoped_session"])
def test_a_sqlalchemy_bind_on_sqlite_is_refused_naming_it(kind: str, tmp_path: pathlib.Path) -> None:
    """An Engine, Connection or Session on SQLite: InvalidArgumentError naming the dialect and what to use."""
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    clients: dict[str, Any] = {
        "engine": lambda: engine,
        "connection": engine.connect,
        "session": lambda: Session(engine),
        "scoped_session": lambda: scoped_session(sessionmaker(bind=engine)),
    }
    client = clients[kind]()
    try:
        with pytest.raises(InvalidArgumentError) as refused:
            PostgresCheckpointer(client)
    finally:
        getattr(client, "close", lambda: None)()
        engine.dispose()
    assert "sqlite" in str(refused.value)
    assert "SqliteCheckpointer" in str(refused.value)


@pytest.mark.parametrize("join_transaction", [False, True], ids=["own", "joined"])
def test_a_generic_client_whose_connection_is_closed_says_closed_at_once(
    postgres_dsn: str, join_transaction: bool
) -> None:
    """Closed under ilmek: one permanent StorageError saying closed, no retries, no "after 1 tries"."""
    client = ExecuteClient(postgres_dsn)
    checkpointer = PostgresCheckpointer(client, join_transaction=join_transaction)
    client.close()
    began = time.monotonic()
    with pytest.raises(StorageError) as failed:
        run(one_node(), {}, thread_id="closed", checkpointer=checkpointer)
    message = str(failed.value)
    assert not isinstance(failed.value, TransientStorageError), message
    assert "closed" in message
    assert "tries" not in message
    assert "Try again later" not in message
    assert time.monotonic() - began < 0.5


class FlakyClient(ExecuteClient):
    """A generic client that loses its session once and reconnects by itself, as some wrappers do."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.dsn = dsn
        self.calls = 0
        self.dropped = False

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.calls += 1
        if self.calls == 5:  # in the middle of the run's first transactions
            self.dropped = True
            self.connection.close()
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        if self.connection.closed:
            self.connection = psycopg2.connect(self.dsn)
            self.connection.autocommit = True
        return super().execute(sql, params)


def test_a_generic_client_that_reconnects_by_itself_is_retried(postgres_dsn: str) -> None:
    """A lost session that the client itself restores is transient: ilmek retries and the run ends done."""
    client = FlakyClient(postgres_dsn)
    try:
        result = run(one_node(), {}, thread_id="flaky", checkpointer=PostgresCheckpointer(client))
    finally:
        client.close()
    assert client.dropped
    assert "done" == result.status
