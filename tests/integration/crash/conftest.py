"""Fixtures of the crash tests: the database a test and its workers share, and the workers.

Every test takes its database from ``crash_db``, a ``--db`` target for the
worker: a SQLite file, and (marked ``postgres``) a fresh Postgres database as
a ``postgresql://`` URL; the helpers of ``tests/support/crash.py`` speak both.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from ilmek import Checkpointer
from tests.support.crash import workers_fixture  # noqa: F401 - a fixture, used by name
from tests.support.crashworker import open_target

# --- the database -----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def crash_db(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A ``--db`` target on a fresh, empty database, one per backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "crash.db")
    elif request.param == "postgres":
        from tests.support.pgcluster import dsn_to_url

        # The worker takes a URL; the fixture gives a fresh cloned database as a DSN.
        yield dsn_to_url(request.getfixturevalue("postgres_dsn"))
    else:
        raise AssertionError(f"no database for crash_db param {request.param!r}")


@pytest.fixture
def lease_db(tmp_path: pathlib.Path) -> str:
    """A database whose holds are leases (SQLite): what a frozen holder can outlive."""
    return str(tmp_path / "crash.db")


@pytest.fixture
def crash_checkpointer(crash_db: str) -> Iterator[Checkpointer]:
    """This process's checkpointer on ``crash_db`` (the workers open their own)."""
    checkpointer = open_target(crash_db)
    try:
        yield checkpointer
    finally:
        checkpointer.close()
