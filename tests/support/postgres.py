"""What the Postgres test modules share: plain SQL on a connection of its own, names, clients, workers.

``tests/integration/postgres/conftest.py`` turns these into fixtures (``workers``,
``empty_dsn``); a ``Worker`` is a ``tests/support/pgworker.py`` process.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg2
from psycopg2.extensions import make_dsn

from ilmek import PostgresCheckpointer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own, committed; the rows, if any."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall() if cursor.description is not None else []
        connection.commit()
    return rows


def tables(dsn: str) -> set[str]:
    """The tables of the ``public`` schema."""
    rows = query(dsn, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
    return {row[0] for row in rows}


def application_dsn(dsn: str, name: str) -> str:
    """The DSN with an ``application_name``, so a test can find its sessions in pg_stat_activity."""
    return make_dsn(dsn, application_name=name)


def unique(stem: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def fresh_checkpointer(dsn: str, **options: Any) -> Iterator[PostgresCheckpointer]:
    """A checkpointer on a connection of its own, as another process would open."""
    checkpointer = PostgresCheckpointer.connect(dsn, **options)
    try:
        yield checkpointer
    finally:
        checkpointer.close()


class RecordingClient:
    """The generic client kind (``execute(sql, params)`` returning rows) that records every call.

    With a connection it forwards each call to it (autocommit, so ilmek's own
    ``BEGIN``/``COMMIT`` are real); without one it answers nothing.
    """

    paramstyle = "pyformat"

    def __init__(self, connection: Any = None) -> None:
        self.connection = connection
        self.calls: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.calls.append((sql, params))
        if self.connection is None:
            return []
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or None)
            return cursor.fetchall() if cursor.description is not None else []

    def statements(self) -> list[str]:
        return [sql for sql, _ in self.calls]

    @classmethod
    def on(cls, dsn: str) -> RecordingClient:
        connection = psycopg2.connect(dsn)
        connection.autocommit = True
        return cls(connection)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


class Worker:
    """A ``tests/support/pgworker.py`` process and the JSON lines it reports."""

    def __init__(self, log_dir: pathlib.Path, *args: str) -> None:
        self.stderr_path = log_dir / f"worker-{uuid.uuid4().hex[:8]}.err"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.pgworker", *args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    def next_event(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise AssertionError(
                f"the worker exited ({self.process.returncode}) without reporting:\n"
                f"{self.stderr_path.read_text()}"
            )
        event: dict[str, Any] = json.loads(line)
        return event

    def expect(self, name: str) -> dict[str, Any]:
        event = self.next_event()
        assert name == event["event"], event
        return event

    def outcome(self) -> dict[str, Any]:
        event = self.expect("outcome")
        assert 0 == self.process.wait(30)
        return event

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()
