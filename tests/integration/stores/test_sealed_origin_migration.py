"""A sealed store written before channel rows recorded their origin (SQLite schema 4, Postgres 6) still opens.

Such a store's channel values are bound to their thread and channel only
(``Place(store, thread, "value" | "item", (channel,))``), and its ``blobs`` and
``items`` tables have no ``origin`` column. The test makes one from a current
store (reseals each channel row that old way, drops the columns, sets the old
version), then checks that it migrates, reads back whole, that ``rekey``
binds every old row to a place of its own, and that a value moved afterwards
is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ilmek import DecryptionError, pending_interrupts, run, thread_state, update_state
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.crypto import Keyring, Place, open_sealed, seal
from tests.support.backends import Backend, SqliteFileBackend
from tests.support.sealed import SQL_BACKENDS, keyring, raw_sql, secret_graph
from tests.support.sealed_rows import stored_rows

pytestmark = pytest.mark.timeout(120)

STATE = {"card": "CARD-EDITED", "note": "NOTE-SECRET", "log": ["LOG-SECRET-1", "LOG-SECRET-2"]}


def _parsed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _as_before_origins(execute: Any, ring: Keyring, sqlite: bool) -> int:
    """Reseal every channel row bound to thread and channel only, drop ``origin``, set the old version.

    Returns how many rows were resealed.
    """
    blobs = execute("SELECT blob_id, thread_id, channel, origin, value FROM ilmek_blobs")
    for blob_id, thread_id, channel, origin, value in blobs:
        text = open_sealed(ring, _parsed(value), Place("ilmek", thread_id, "value", (channel, origin)))
        old = seal(ring, text, Place("ilmek", thread_id, "value", (channel,)))
        execute("UPDATE ilmek_blobs SET value = ? WHERE blob_id = ?", json.dumps(old), blob_id)
    items = execute(
        "SELECT i.log_id, i.idx, l.thread_id, l.channel, i.origin, i.value FROM ilmek_items AS i "
        "JOIN ilmek_logs AS l ON l.log_id = i.log_id"
    )
    for log_id, index, thread_id, channel, origin, value in items:
        text = open_sealed(
            ring, _parsed(value), Place("ilmek", thread_id, "item", (channel, str(index), origin))
        )
        old = seal(ring, text, Place("ilmek", thread_id, "item", (channel,)))
        execute(
            "UPDATE ilmek_items SET value = ? WHERE log_id = ? AND idx = ?", json.dumps(old), log_id, index
        )
    execute("ALTER TABLE ilmek_blobs DROP COLUMN origin")
    execute("ALTER TABLE ilmek_items DROP COLUMN origin")
    # The version whose upgrade step adds ``origin`` (SQLite 4, Postgres 6): the store as it stood then.
    dialect = SqliteCheckpointer if sqlite else PostgresCheckpointer
    old_version = next(
        version
        for version, steps in dialect.UPGRADES.items()
        if any(isinstance(step, str) and "ADD COLUMN" in step and " origin " in f"{step} " for step in steps)
    )
    execute("UPDATE ilmek_meta SET value = ? WHERE key = 'schema_version'", str(old_version))
    return len(blobs) + len(items)


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_store_sealed_before_origins_migrates_reads_and_is_rebound_by_rekey(backend: Backend) -> None:
    """Old bindings open after the migration; rekey rebinds each old row; then a moved value is refused."""
    g = secret_graph()
    writer = backend.open(cipher=keyring("k1"))
    assert run(g, {}, thread_id="t", checkpointer=writer).status == "interrupted"
    update_state(g, writer, "t", {"card": "CARD-EDITED"})
    sqlite = isinstance(backend, SqliteFileBackend)
    with raw_sql(backend) as execute:
        old_rows = _as_before_origins(execute, keyring("k1"), sqlite)
    assert old_rows >= 4  # ``card`` twice, then ``log``'s two items at least
    migrated = backend.open(cipher=keyring("k1"))
    migrated.migrate()  # type: ignore[attr-defined]
    assert thread_state(g, migrated, "t") == STATE
    assert migrated.read_channel("t", "log", offset=1) == ["LOG-SECRET-2"]
    assert pending_interrupts(migrated, "t")[0].payload["question"] == "PAUSE-SECRET"

    report = migrated.rekey(batch=2)
    assert report.rewritten == old_rows
    assert migrated.rekey(batch=2).rewritten == 0  # rebound once: a second rekey finds nothing to do
    with raw_sql(backend) as execute:
        origins = execute("SELECT origin FROM ilmek_blobs UNION ALL SELECT origin FROM ilmek_items")
    assert None not in [origin for (origin,) in origins]
    assert thread_state(g, backend.open(cipher=keyring("k1")), "t") == STATE

    with stored_rows(backend) as rows:
        [(_, first), (later_id, _)] = rows.blobs("t", "card")
        rows.set_blob("t", later_id, first)
    with pytest.raises(DecryptionError) as caught:
        backend.open(cipher=keyring("k1")).get("t")
    assert caught.value.thread_id == "t"
    assert "(blobs)" in str(caught.value)
