"""Fixtures of the Postgres-only modules: an effects file, pgworker processes, an empty database.

The database fixtures themselves (``postgres_dsn``, ``postgres_server``...) are
the plugin ``tests/support/conftest_postgres.py``'s.
"""

from __future__ import annotations

import itertools
import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.support.pgcluster import PostgresServer
from tests.support.pgworker import Effects
from tests.support.postgres import Worker


@pytest.fixture
def effects(tmp_path: pathlib.Path) -> Effects:
    """An empty effects file: one line per real execution of a step function."""
    return Effects(tmp_path / "effects.log")


@pytest.fixture
def workers(tmp_path: pathlib.Path) -> Iterator[Callable[..., Worker]]:
    """Starts workers; any still running at the end of the test is killed."""
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        worker = Worker(tmp_path, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


_empty_databases = itertools.count(1)


@pytest.fixture
def empty_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A database with no tables at all (not cloned from the migrated template)."""
    name = f"ilmek_empty_{next(_empty_databases)}_{uuid.uuid4().hex[:6]}"
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.drop_database(name)
