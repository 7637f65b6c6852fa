"""Tests for the PostgreSQL test plumbing (tests/support/pgcluster.py, tests/support/conftest_postgres.py)."""

from __future__ import annotations

import os
from typing import Any

import psycopg2
import pytest

from tests.support.pgcluster import (
    PostgresCluster,
    PostgresServer,
    child_pids,
    find_bindir,
    pid_alive,
)

pytestmark = pytest.mark.postgres


def _query(dsn: str, query: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(query)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def test_server_accepts_connection(postgres_server: PostgresServer) -> None:
    """The server accepts a psycopg2 connection and reports its server_version."""
    [(version,)] = _query(postgres_server.dsn, "SHOW server_version")
    assert version.split(".")[0].isdigit()
    assert [(1,)] == _query(postgres_server.url, "SELECT 1")


def test_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    """A private cluster listens on 127.0.0.1 and nowhere else."""
    if not isinstance(postgres_server, PostgresCluster):
        pytest.skip("using an external server (ILMEK_TEST_POSTGRES_DSN)")
    assert [("127.0.0.1",)] == _query(postgres_server.dsn, "SHOW listen_addresses")


def test_databases_are_isolated(
    postgres_dsn: str, postgres_server: PostgresServer, postgres_template_name: str
) -> None:
    """A table created in one clone of the template does not exist in another clone."""
    # postgres_dsn gives one database per test, so make the second clone by hand.
    name = f"isolation_probe_{os.getpid()}"
    other = postgres_server.create_database(name, template=postgres_template_name)
    exists = "SELECT to_regclass('only_here') IS NOT NULL"
    try:
        _query(postgres_dsn, "CREATE TABLE only_here (id int)")
        assert [(True,)] == _query(postgres_dsn, exists)
        assert [(False,)] == _query(other, exists)
    finally:
        postgres_server.drop_database(name)


def test_each_test_gets_fresh_database(postgres_dsn: str) -> None:
    """A postgres_dsn database holds only the template's tables (no earlier test's table)."""
    _query(postgres_dsn, "CREATE TABLE only_here (id int)")
    rows = _query(
        postgres_dsn,
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE 'ilmek%'",
    )
    assert [("only_here",)] == rows


def test_stop_is_idempotent_and_kills_server(postgres_server: PostgresServer) -> None:
    """stop() can be called twice, removes the folder and leaves no postmaster running."""
    bindir: str | None
    if isinstance(postgres_server, PostgresCluster):
        bindir = postgres_server.bindir
    else:
        bindir = os.environ.get("ILMEK_TEST_PG_BINDIR") or find_bindir()
        if bindir is None:
            pytest.skip("external server in use and no local PostgreSQL binaries")
    cluster = PostgresCluster.start(bindir=bindir)
    try:
        pid = cluster.postmaster_pid()
        assert pid is not None
        assert pid_alive(pid)
        helpers = child_pids(pid)  # checkpointer, walwriter, ...
        assert helpers
    finally:
        cluster.stop()
    cluster.stop()
    assert not pid_alive(pid)
    assert [] == [p for p in helpers if pid_alive(p)]  # no orphaned backends
    assert not os.path.exists(cluster.base)
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(cluster.dsn, connect_timeout=2)
