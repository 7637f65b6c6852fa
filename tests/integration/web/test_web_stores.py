"""``ilmek web`` on its store: a read-only console writes nothing; a dropped Postgres connection heals.

Real processes (``python -m ilmek web``) on real SQLite files and on the
PostgreSQL server the test session starts; the Postgres test ends the
console's own backend with ``pg_terminate_backend``, as a restarted server
or a failover would.
"""

from __future__ import annotations

import hashlib
import pathlib
import sqlite3
import time

import psycopg2
import pytest

from ilmek import SqliteCheckpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from tests.support.web_support import THREADS, fetch, populate, start_web, stop_web, url_of

pytestmark = pytest.mark.timeout(90)


def digest(path: pathlib.Path) -> str:
    """The file's bytes, hashed."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tables(path: pathlib.Path) -> list[str]:
    """The tables a SQLite file holds."""
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as connection:
        found = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    connection.close()
    return sorted(found)


# --- read-only on SQLite ---------------------------------------------------------------------------


@pytest.mark.parametrize("existing", ["empty file", "another app's database"])
def test_a_read_only_console_creates_no_tables_in_a_file_without_them(
    tmp_path: pathlib.Path, existing: str
) -> None:
    """An empty file, or a SQLite file of other tables: exit 1 saying so, the file exactly as it was."""
    path = tmp_path / "other.db"
    if existing == "empty file":
        path.touch()
    else:
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        connection.close()
    before, kept = digest(path), tables(path)
    process, first = start_web("--db", str(path), "--port", "0", home=tmp_path)
    out, err = stop_web(process)
    assert 1 == process.returncode, first + out
    assert "no ilmek tables" in err
    assert "creates nothing" in err
    assert before == digest(path)
    assert kept == tables(path)


def test_a_read_only_console_refuses_a_store_at_another_schema_version(tmp_path: pathlib.Path) -> None:
    """A store whose meta table says version 1: exit 1 naming the versions, not a migration."""
    path = tmp_path / "old.db"
    SqliteCheckpointer(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE ilmek_meta SET value = '1' WHERE key = 'schema_version'")
    connection.close()
    before = digest(path)
    process, _ = start_web("--db", str(path), "--port", "0", home=tmp_path)
    _, err = stop_web(process)
    assert 1 == process.returncode
    version = SqliteCheckpointer.SCHEMA_VERSION
    assert f"schema version 1, this ilmek uses version {version}: a read-only console changes nothing" in err
    assert before == digest(path)


def test_a_read_only_console_serves_its_pages_without_writing_the_file(tmp_path: pathlib.Path) -> None:
    """The inbox and a thread page over a read-only connection; the database file's bytes do not change."""
    path = tmp_path / "shop.db"
    store = SqliteCheckpointer(path)
    populate(store, hostile=False)
    store.close()
    before = digest(path)
    process, first = start_web("--db", str(path), "--port", "0", home=tmp_path)
    try:
        url = url_of(first)
        status, inbox = fetch(url)
        assert 200 == status, inbox
        assert THREADS["waiting"] in inbox
        status, page = fetch(url + "thread?id=" + THREADS["failed"])
        assert 200 == status, page
        assert "502 Bad Gateway" in page
    finally:
        _, err = stop_web(process)
    assert 0 == process.returncode, err
    assert "Traceback" not in err
    assert before == digest(path)


# --- Postgres: a dropped connection ----------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("actions", [[], ["--allow-actions"]], ids=["read-only", "actions"])
def test_the_console_reconnects_after_its_postgres_backend_is_terminated(
    tmp_path: pathlib.Path, postgres_dsn: str, actions: list[str]
) -> None:
    """pg_terminate_backend on the console's sessions: the next pages are served again, no restart."""
    store = PostgresCheckpointer(psycopg2.connect(postgres_dsn))
    store.migrate()
    populate(store, hostile=False)
    store.close()
    process, first = start_web("--db", postgres_dsn, "--port", "0", *actions, home=tmp_path)
    admin = psycopg2.connect(postgres_dsn)
    admin.autocommit = True
    try:
        url = url_of(first)
        assert 200 == fetch(url)[0]
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.rowcount >= 1
        # The first request after the drop may meet the dead connection; none after it may.
        deadline = time.monotonic() + 20
        statuses = []
        while time.monotonic() < deadline:
            statuses.append(fetch(url)[0])
            if statuses[-3:] == [200, 200, 200]:
                break
        assert [200, 200, 200] == statuses[-3:], statuses
        assert statuses.count(500) <= 1, statuses
        status, page = fetch(url + "thread?id=" + THREADS["waiting"])
        assert 200 == status
        assert "Charge 74.97 EUR?" in page
    finally:
        admin.close()
        _, err = stop_web(process)
    assert 0 == process.returncode, err
