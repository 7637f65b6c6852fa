"""Clients that are almost right: a SQLAlchemy ``scoped_session`` (Flask-SQLAlchemy's ``db.session``), and a
SQLAlchemy bind on SQLite. The first works as the Session it stands for, the second is refused saying why.
"""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from ilmek import (
    InvalidArgumentError,
    PostgresCheckpointer,
    run,
)
from tests.support.helpers import one_node_graph
from tests.support.pgcluster import dsn_to_url
from tests.support.postgres import query

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


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
    assert "done" == run(one_node_graph(), {}, thread_id="scoped", checkpointer=checkpointer).status
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
        outcome.append(run(one_node_graph(), {}, thread_id="elsewhere", checkpointer=checkpointer).status)
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
