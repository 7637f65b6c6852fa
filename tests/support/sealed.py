"""What the encryption-at-rest tests share: keys, a graph that stores every kind of value, raw SQL.

The graph writes each kind of value SPEC §7a seals, each holding a secret
marker: a whole channel value, appended list items, a step result, a send's
input, a pause payload, an answer and a failure message. The raw helpers
read and change rows behind ilmek's back (a DBA, a stolen backup), on the
SQLite file or the Postgres database of a ``tests.support.backends`` store.
"""

from __future__ import annotations

import base64
import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg2

from ilmek import END, START, channel, graph, send
from ilmek.crypto import Keyring
from tests.support.backends import Backend, PostgresBackend, SqliteFileBackend

KEY_1 = bytes(range(32))
KEY_2 = bytes(range(100, 132))
KEY_TEXTS = (base64.b64encode(KEY_1).decode(), base64.b64encode(KEY_2).decode())

#: Every secret the graph stores; none may appear in any stored column of a sealed store.
SECRETS = (
    "CARD-SECRET",
    "NOTE-SECRET",
    "LOG-SECRET",
    "STEP-SECRET",
    "SEND-SECRET",
    "PAUSE-SECRET",
    "ANSWER-SECRET",
    "FAIL-SECRET",
)

#: The backends the sealed tests run on: the memory reference, a real SQLite file, a real Postgres.
SEALED_BACKENDS = ["memory", "sqlite-file", "postgres-conn"]
#: Those where rows can be read and changed by SQL.
SQL_BACKENDS = ["sqlite-file", "postgres-conn"]


def keyring(*ids: str, allow_plaintext: bool = False) -> Keyring:
    """A keyring of the test keys ``k1`` and ``k2`` named by ``ids`` (the first current)."""
    keys = {"k1": KEY_1, "k2": KEY_2}
    return Keyring({key_id: keys[key_id] for key_id in ids}, ids[0], allow_plaintext=allow_plaintext)


def _intake(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.step("lookup", lambda: {"card": "STEP-SECRET-lookup"})
    ctx.step("charge", lambda: "STEP-SECRET-charge")
    return {"card": "CARD-SECRET", "note": "NOTE-SECRET", "log": ["LOG-SECRET-1", "LOG-SECRET-2"]}


def _fan_out(state: dict[str, Any], ctx: Any) -> Any:
    return [send("approve", {"draft": "SEND-SECRET"})]


def _approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    # Steps before the pause stay journaled while it waits: their results are stored then.
    ctx.step("charge", lambda: "STEP-SECRET-charge")
    ctx.step("receipt", lambda: "STEP-SECRET-receipt")
    answer = ctx.interrupt({"question": "PAUSE-SECRET", "draft": state["draft"]}, key="ok")
    if answer == "fail":
        raise RuntimeError("FAIL-SECRET: the card was declined")
    return {"log": [f"answered {answer}"]}


def secret_graph() -> Any:
    """The graph that stores every sealed kind: run it, then resume with an answer (or ``"fail"``)."""
    return (
        graph(
            "vault",
            {"card": channel.last_write(None), "note": channel.last_write(None), "log": channel.append()},
        )
        .node("intake", _intake)
        .node("approve", _approve)
        .edge(START, "intake")
        .router("intake", _fan_out)
        .edge("approve", END)
        .compile()
    )


@contextlib.contextmanager
def raw_sql(backend: Backend) -> Iterator[Any]:
    """``execute(sql, *params) -> rows`` on the store's database, outside ilmek (``?`` placeholders)."""
    if isinstance(backend, SqliteFileBackend):
        connection = sqlite3.connect(backend.path, timeout=30, isolation_level=None)

        def execute_sqlite(sql: str, *params: Any) -> list[tuple[Any, ...]]:
            return connection.execute(sql, params).fetchall()

        try:
            yield execute_sqlite
        finally:
            connection.close()
        return
    assert isinstance(backend, PostgresBackend)
    pg = psycopg2.connect(backend.dsn)
    pg.autocommit = True

    def execute_postgres(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with pg.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description is not None else []

    try:
        yield execute_postgres
    finally:
        pg.close()


def stored_text(execute: Any, sqlite: bool) -> str:
    """Every column of every row of every table in the database, as one text."""
    if sqlite:
        tables = [row[0] for row in execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    else:
        tables = [
            row[0]
            for row in execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
    parts = []
    for table in tables:
        for row in execute(f'SELECT * FROM "{table}"'):  # names read from the catalog, quoted
            parts.append(repr(row))
    return "\n".join(parts)
