"""PostgresCheckpointer: threads shared by processes and machines through Postgres.

It takes the caller's own client: a psycopg2 connection or pool, a psycopg 3
connection or pool, a Django connection, a SQLAlchemy ``Engine``,
``Connection`` or ``Session``, or any object whose ``execute(sql, params)``
returns rows. One small adapter per kind (a module each) is chosen once, by
type, against the driver classes the caller's own code already imported.

Values are stored as JSONB. A hold is a row with a lease that the run
renews, fenced by a token on every write, and judged by the database's
clock: a killed holder's thread frees up when its lease lapses, and a
holder whose session merely ended (a reconnect, a failover, a pooler)
keeps it. Nothing relies on server-side prepared statements or on session
state, so a transaction-mode pooler in front works.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from ... import serde
from ...crypto import Keyring
from ...dbapi import Adapter, Session, Statement, describe_error, scrubbed
from ...errors import InvalidArgumentError, StorageError
from ...redact import dsn_secrets, mask_dsn, mask_secrets
from ..django import DjangoAdapter, is_django_connection
from ..sql import LONG_WAY_SQLSTATE, Migration, SqlCheckpointer, copy_v1_journals, validate_prefix
from ..sql.notices import notices_table
from . import generic, psycopg, psycopg2, sqlalchemy
from .common import SingleConnectionAdapter
from .errors import classify_postgres_error

__all__ = ["PostgresCheckpointer", "adapter_for", "advisory_key", "classify_postgres_error"]

_C = 'COLLATE "C"'
_JOURNALS = (
    "CREATE TABLE IF NOT EXISTS {p}_journals (entry_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    f" thread_id TEXT {_C} NOT NULL, base_id TEXT {_C} NOT NULL, task_key TEXT {_C} NOT NULL,"
    f" entry_key TEXT {_C} NOT NULL, entry JSONB NOT NULL)"
)
_JOURNAL_ENTRIES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS {p}_journals_entry"
    " ON {p}_journals (thread_id, base_id, task_key, entry_key)"
)
# A run's first write (p_take), inside either function: take the hold, or
# answer busy having written nothing.
_TAKE_HOLD = """    IF p_take THEN
        IF NOT pg_try_advisory_xact_lock(p_lock_key) THEN
            busy := true;
            RETURN;
        END IF;
        INSERT INTO {p}_holds AS h (thread_id, owner, expires_at, acquired_at, holder, cancel_reason)
        VALUES (p_thread, p_owner, {now} + p_ttl, {now}, {holder}, NULL)
        ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,
            holder = excluded.holder,
            acquired_at = CASE WHEN h.owner = excluded.owner THEN h.acquired_at ELSE excluded.acquired_at END,
            cancel_reason = CASE WHEN h.owner = excluded.owner THEN h.cancel_reason ELSE NULL END
        WHERE h.owner = excluded.owner OR {lapsed_h};
        IF NOT FOUND THEN
            busy := true;
            RETURN;
        END IF;
    END IF;
"""
# A superstep's writes, in one call: the server keeps the plans of the
# statements inside a function for the session, where a statement sent as
# text is planned again every time (most of its cost), and the call can be
# a transaction by itself. The thread's pointer moves only while the run
# holds the thread and the thread is where the run left it. A run's first
# write (p_take) takes the hold first, or answers `busy` having written
# nothing. Whatever else keeps the call from landing whole (the thread moved
# or its hold is gone, a list grew past this checkpoint, the checkpoint
# exists) raises LONG_WAY_SQLSTATE, which rolls the call back: the caller
# then takes the long way, which says why. Items arrive as
# [log_id, index, value] triples, blobs as [channel, value] pairs, the
# journals a superstep spent as [base_id, task_key] pairs, the entries it
# records (a pause's) as [base_id, task_key, entry_key, entry] and the lists
# it starts as [channel, [value, ...]], in JSON arrays. Without p_expected it
# writes a new thread's first checkpoint (under the hold it takes).
# Its arguments arrive as one JSON object (schema 8; before, as 25 arguments):
# a driver adapts each argument on its own, which cost the client about as
# much as the rest of the superstep (psycopg2: some 12,000 instructions an
# argument), where one object costs the server one jsonb parse.
_SUPERSTEP_FUNCTION = f"""CREATE OR REPLACE FUNCTION {{p}}_superstep(
    p_call jsonb, OUT busy boolean, OUT reason text, OUT blob_ids text, OUT log_ids text)
LANGUAGE plpgsql AS $body$
DECLARE
    p_thread text := p_call ->> 'thread';
    p_owner text := p_call ->> 'owner';
    p_expected text := p_call ->> 'expected';
    p_checkpoint text := p_call ->> 'checkpoint';
    p_status text := p_call ->> 'status';
    p_step bigint := CAST(p_call ->> 'step' AS bigint);
    p_now double precision := CAST(p_call ->> 'now' AS double precision);
    p_items jsonb := p_call -> 'items';
    p_blobs jsonb := p_call -> 'blobs';
    p_parent text := p_call ->> 'parent';
    p_plan text := p_call ->> 'plan';
    p_ts double precision := CAST(p_call ->> 'ts' AS double precision);
    p_manifest jsonb := p_call -> 'manifest';
    p_next jsonb := p_call -> 'next';
    p_pending jsonb := p_call -> 'pending';
    p_task_journals jsonb := p_call -> 'task_journals';
    p_journal_chain jsonb := p_call -> 'journal_chain';
    p_metadata jsonb := p_call -> 'metadata';
    p_release boolean := CAST(p_call ->> 'release' AS boolean);
    p_take boolean := CAST(p_call ->> 'take' AS boolean);
    p_lock_key bigint := CAST(p_call ->> 'lock_key' AS bigint);
    p_ttl double precision := CAST(p_call ->> 'ttl' AS double precision);
    p_drops jsonb := p_call -> 'drops';
    p_entries jsonb := p_call -> 'entries';
    p_new_logs jsonb := p_call -> 'new_logs';
    v_blob record;
    v_log record;
    v_id bigint;
    v_count bigint;
    v_manifest jsonb := p_manifest;
    -- The earliest deadline or timer of the open pauses (the pending list's epoch seconds).
    v_due double precision := (SELECT min(CAST(e ->> 'deadline' AS double precision))
                               FROM jsonb_array_elements(p_pending) AS e);
BEGIN
    busy := false;
    blob_ids := '';
    log_ids := '';
{_TAKE_HOLD}    IF p_expected IS NULL THEN
        -- A new thread's first checkpoint, under the hold this call took.
        INSERT INTO {{p}}_threads AS t (thread_id, created_at, updated_at, status, step, checkpoint_id,
            metadata, due_at)
        VALUES (p_thread, p_now, p_now, p_status, p_step, p_checkpoint, '{{{{}}}}'::jsonb, v_due)
        ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = excluded.checkpoint_id,
            status = excluded.status, step = excluded.step, updated_at = excluded.updated_at, error = NULL,
            due_at = excluded.due_at
        WHERE t.checkpoint_id IS NULL;
    ELSE
        UPDATE {{p}}_threads AS t SET checkpoint_id = p_checkpoint, status = p_status, step = p_step,
            error = NULL, due_at = v_due,
            updated_at = CASE WHEN t.status <> p_status OR t.updated_at < p_now - 1.0 THEN p_now
                         ELSE t.updated_at END
        WHERE t.thread_id = p_thread AND t.checkpoint_id = p_expected
            AND EXISTS (SELECT 1 FROM {{p}}_holds AS h WHERE h.thread_id = p_thread AND h.owner = p_owner
                        FOR SHARE);
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the thread moved, or the hold is gone' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
    END IF;
    SELECT h.cancel_reason INTO reason FROM {{p}}_holds AS h
    WHERE h.thread_id = p_thread AND h.owner = p_owner;
    INSERT INTO {{p}}_items (log_id, idx, origin, value)
        SELECT CAST(e ->> 0 AS bigint), CAST(e ->> 1 AS bigint), p_checkpoint, e -> 2
        FROM jsonb_array_elements(p_items) AS e
        WHERE EXISTS (SELECT 1 FROM {{p}}_logs AS l
                      WHERE l.log_id = CAST(e ->> 0 AS bigint) AND l.thread_id = p_thread)
    ON CONFLICT (log_id, idx) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count <> jsonb_array_length(p_items) THEN
        RAISE EXCEPTION 'a list grew past this checkpoint' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
    END IF;
    FOR v_log IN SELECT e ->> 0 AS channel, e -> 1 AS items FROM jsonb_array_elements(p_new_logs) AS e
    LOOP
        INSERT INTO {{p}}_logs (thread_id, channel, parent_id, base, length)
        VALUES (p_thread, v_log.channel, NULL, 0, jsonb_array_length(v_log.items))
        RETURNING log_id INTO v_id;
        INSERT INTO {{p}}_items (log_id, idx, origin, value)
            SELECT v_id, i.idx - 1, p_checkpoint, i.value
            FROM jsonb_array_elements(v_log.items) WITH ORDINALITY AS i(value, idx);
        v_manifest := v_manifest || jsonb_build_object(v_log.channel,
            jsonb_build_array('l', v_id, jsonb_array_length(v_log.items)));
        log_ids := log_ids || CASE WHEN log_ids = '' THEN '' ELSE ',' END || v_id;
    END LOOP;
    FOR v_blob IN SELECT e ->> 0 AS channel, e -> 1 AS value FROM jsonb_array_elements(p_blobs) AS e
    LOOP
        INSERT INTO {{p}}_blobs (thread_id, channel, origin, value)
        VALUES (p_thread, v_blob.channel, p_checkpoint, v_blob.value)
        RETURNING blob_id INTO v_id;
        v_manifest := v_manifest || jsonb_build_object(v_blob.channel, jsonb_build_array('b', v_id));
        blob_ids := blob_ids || CASE WHEN blob_ids = '' THEN '' ELSE ',' END || v_id;
    END LOOP;
    INSERT INTO {{p}}_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, manifest, next,
        pending, task_journals, journal_chain, metadata)
    VALUES (p_thread, p_checkpoint, p_parent, p_plan, p_step, p_ts, v_manifest, p_next, p_pending,
        p_task_journals, p_journal_chain, p_metadata)
    ON CONFLICT (thread_id, checkpoint_id) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the checkpoint exists' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
    END IF;
    DELETE FROM {{p}}_journals AS j
    USING jsonb_array_elements(p_drops) AS d
    WHERE j.thread_id = p_thread AND j.base_id = d ->> 0 AND j.task_key = d ->> 1;
    INSERT INTO {{p}}_journals (thread_id, base_id, task_key, entry_key, entry)
        SELECT p_thread, e ->> 0, e ->> 1, e ->> 2, e -> 3 FROM jsonb_array_elements(p_entries) AS e
    ON CONFLICT (thread_id, base_id, task_key, entry_key) DO NOTHING;
    IF p_release THEN
        DELETE FROM {{p}}_holds AS h WHERE h.thread_id = p_thread AND h.owner = p_owner;
    END IF;
END
$body$"""
# A resume's answers, in one call. Its first write (p_take) takes the hold,
# and the pause it answers must still be the thread's latest checkpoint,
# with nothing recorded from it but these same answers (the resume judged
# its answers by a read made without the hold); a run that holds the
# thread renews its lease and reads a cancel request. Anything else (the
# thread moved, the hold is gone) raises LONG_WAY_SQLSTATE, and the long
# way says why. Entries arrive as [task_key, entry_key, entry] in a JSON
# array, at most one per key; `recorded` returns what is then recorded from
# the pause, as [task_key, entry] in order, so the run need not read it. Its
# arguments arrive as one JSON object, as the superstep function's do.
_ANSWER_FUNCTION = f"""CREATE OR REPLACE FUNCTION {{p}}_answer(
    p_call jsonb, OUT busy boolean, OUT reason text, OUT recorded jsonb)
LANGUAGE plpgsql AS $body$
DECLARE
    p_thread text := p_call ->> 'thread';
    p_owner text := p_call ->> 'owner';
    p_base text := p_call ->> 'base';
    p_take boolean := CAST(p_call ->> 'take' AS boolean);
    p_lock_key bigint := CAST(p_call ->> 'lock_key' AS bigint);
    p_ttl double precision := CAST(p_call ->> 'ttl' AS double precision);
    p_entries jsonb := p_call -> 'entries';
BEGIN
    busy := false;
{_TAKE_HOLD}    IF p_take THEN
        PERFORM 1 FROM {{p}}_threads AS t WHERE t.thread_id = p_thread AND t.checkpoint_id = p_base;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the thread moved' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
        END IF;
        PERFORM 1 FROM {{p}}_journals AS j
        WHERE j.thread_id = p_thread AND j.base_id = p_base
            AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_entries) AS e
                            WHERE e ->> 0 = j.task_key AND e ->> 1 = j.entry_key AND e -> 2 = j.entry);
        IF FOUND THEN
            RAISE EXCEPTION 'the pause was answered or acted on' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
        END IF;
    ELSE
        UPDATE {{p}}_holds AS h SET expires_at = {{now}} + p_ttl, holder = {{holder}}
        WHERE h.thread_id = p_thread AND h.owner = p_owner
        RETURNING h.cancel_reason INTO reason;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the hold is gone' USING ERRCODE = '{LONG_WAY_SQLSTATE}';
        END IF;
    END IF;
    INSERT INTO {{p}}_journals (thread_id, base_id, task_key, entry_key, entry)
        SELECT p_thread, p_base, e ->> 0, e ->> 1, e -> 2 FROM jsonb_array_elements(p_entries) AS e
    ON CONFLICT (thread_id, base_id, task_key, entry_key) DO UPDATE SET entry = excluded.entry;
    SELECT coalesce(jsonb_agg(jsonb_build_array(j.task_key, j.entry) ORDER BY j.entry_id), '[]'::jsonb)
    INTO recorded FROM {{p}}_journals AS j WHERE j.thread_id = p_thread AND j.base_id = p_base;
END
$body$"""
# What tick() asks: the threads with something due by now. Partial: only
# threads with an open deadline or timer are in it, so it stays as small as
# the due work, whatever the number of threads.
_DUE_INDEX = (
    "CREATE INDEX IF NOT EXISTS {p}_threads_due ON {p}_threads (due_at, thread_id) WHERE due_at IS NOT NULL"
)
# The pause notices' outbox (version 6).
_NOTICES = notices_table(f"TEXT {_C}", "DOUBLE PRECISION")
_SCHEMA: list[str] = [
    "CREATE TABLE IF NOT EXISTS {p}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {{p}}_threads (thread_id TEXT {_C} PRIMARY KEY,"
    " created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,"
    f" status TEXT NOT NULL, step BIGINT NOT NULL, checkpoint_id TEXT {_C},"
    " metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb, error JSONB, due_at DOUBLE PRECISION)"
    " WITH (fillfactor = 85)",
    "CREATE INDEX IF NOT EXISTS {p}_threads_updated ON {p}_threads (updated_at DESC, thread_id DESC)",
    "CREATE INDEX IF NOT EXISTS {p}_threads_status ON {p}_threads (status, updated_at DESC)",
    _DUE_INDEX,
    "CREATE INDEX IF NOT EXISTS {p}_threads_metadata ON {p}_threads USING GIN (metadata jsonb_path_ops)",
    f"CREATE TABLE IF NOT EXISTS {{p}}_checkpoints (thread_id TEXT {_C} NOT NULL,"
    f" checkpoint_id TEXT {_C} NOT NULL, parent_id TEXT {_C}, plan_id TEXT {_C},"
    " step BIGINT NOT NULL, ts DOUBLE PRECISION NOT NULL, manifest JSONB NOT NULL,"
    " next JSONB NOT NULL, pending JSONB NOT NULL, task_journals JSONB NOT NULL,"
    " metadata JSONB NOT NULL, journal_chain JSONB NOT NULL DEFAULT '[]'::jsonb,"
    " PRIMARY KEY (thread_id, checkpoint_id))",
    # origin: the checkpoint that wrote the row, which a sealed value is bound
    # to (version 7; NULL in older rows until rekey gives them one).
    "CREATE TABLE IF NOT EXISTS {p}_blobs (blob_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    f" thread_id TEXT {_C} NOT NULL, channel TEXT NOT NULL, value JSONB NOT NULL, origin TEXT)",
    "CREATE INDEX IF NOT EXISTS {p}_blobs_thread ON {p}_blobs (thread_id)",
    # length: how many items the log was created with; appends claim the next
    # index of items (a primary key) instead of rewriting this row.
    "CREATE TABLE IF NOT EXISTS {p}_logs (log_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    f" thread_id TEXT {_C} NOT NULL, channel TEXT NOT NULL, parent_id BIGINT,"
    " base BIGINT NOT NULL, length BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS {p}_logs_thread ON {p}_logs (thread_id)",
    "CREATE TABLE IF NOT EXISTS {p}_items (log_id BIGINT NOT NULL, idx BIGINT NOT NULL,"
    " value JSONB NOT NULL, origin TEXT, PRIMARY KEY (log_id, idx))",
    _JOURNALS,
    _JOURNAL_ENTRIES,
    f"CREATE TABLE IF NOT EXISTS {{p}}_holds (thread_id TEXT {_C} PRIMARY KEY,"
    " owner TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL,"
    " acquired_at DOUBLE PRECISION NOT NULL DEFAULT 0, holder INTEGER, cancel_reason TEXT)",
    _SUPERSTEP_FUNCTION,
    _ANSWER_FUNCTION,
    *_NOTICES,
]

_UPGRADES: dict[int, list[Migration]] = {
    1: [
        "ALTER TABLE {p}_threads ADD COLUMN IF NOT EXISTS error JSONB",
        "ALTER TABLE {p}_checkpoints ADD COLUMN IF NOT EXISTS journal_chain JSONB NOT NULL"
        " DEFAULT '[]'::jsonb",
        "ALTER TABLE {p}_holds ADD COLUMN IF NOT EXISTS acquired_at DOUBLE PRECISION NOT NULL DEFAULT 0",
        "ALTER TABLE {p}_holds ADD COLUMN IF NOT EXISTS holder INTEGER",
        "ALTER TABLE {p}_holds ADD COLUMN IF NOT EXISTS cancel_reason TEXT",
        "DROP INDEX IF EXISTS {p}_journals_thread",
        "ALTER TABLE {p}_journals RENAME TO {p}_journals_v1",
        "ALTER TABLE {p}_journals_v1 RENAME CONSTRAINT {p}_journals_pkey TO {p}_journals_v1_pkey",
        _JOURNALS,
        _JOURNAL_ENTRIES,
        copy_v1_journals,
        "DROP TABLE {p}_journals_v1",
    ],
    2: [_SUPERSTEP_FUNCTION, _ANSWER_FUNCTION],
    # The functions take a hold by its lease alone, as every other statement does.
    3: [_SUPERSTEP_FUNCTION, _ANSWER_FUNCTION],
    # Pauses with a deadline or a timer: the thread keeps the earliest (NULL before), which the
    # superstep function now writes.
    4: [
        "ALTER TABLE {p}_threads ADD COLUMN IF NOT EXISTS due_at DOUBLE PRECISION",
        _DUE_INDEX,
        _SUPERSTEP_FUNCTION,
    ],
    # The outbox of pause notices (on_pause hooks).
    5: [*_NOTICES],
    # Each channel row records the checkpoint that wrote it (what its sealed value is bound to),
    # which the superstep function now writes.
    6: [
        "ALTER TABLE {p}_blobs ADD COLUMN IF NOT EXISTS origin TEXT",
        "ALTER TABLE {p}_items ADD COLUMN IF NOT EXISTS origin TEXT",
        _SUPERSTEP_FUNCTION,
    ],
    # The functions take their arguments as one JSON object. They are new
    # functions beside the old ones (another signature), which stay: a process
    # of the previous version that checked the schema before this upgrade
    # keeps calling them until it restarts.
    7: [_SUPERSTEP_FUNCTION, _ANSWER_FUNCTION],
}

# The functions' signatures up to schema 7 (they took each argument on its own).
_RETIRED_FUNCTIONS = (
    "{p}_superstep(text, text, text, text, text, bigint, double precision, jsonb, jsonb, text, text, "
    "double precision, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, boolean, boolean, bigint, double precision, "
    "jsonb, jsonb, jsonb)",
    "{p}_answer(text, text, text, boolean, bigint, double precision, jsonb)",
)

_TABLE_EXISTS = Statement("SELECT to_regclass(:name) IS NOT NULL")
_TRY_XACT_LOCK = Statement("SELECT pg_try_advisory_xact_lock(:key)")
_XACT_LOCK = Statement("SELECT pg_advisory_xact_lock(:key)")
# NULL in a transaction that wrote nothing yet: never the id of the one a hold was taken in.
_TRANSACTION_ID = Statement("SELECT txid_current_if_assigned()")


def advisory_key(table_prefix: str, thread_id: str) -> int:
    """The 64-bit advisory lock key of a thread under a table prefix."""
    digest = hashlib.blake2b(f"{table_prefix}\0{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def adapter_for(client: Any, *, join_transaction: bool = False) -> Adapter:
    """Choose the adapter for a caller's client, once, by its type.

    Raises:
        InvalidArgumentError: the object is none of the supported client
            kinds, or an async one (it is also a ``TypeError``).
    """
    if isinstance(client, Adapter):
        return client
    if is_django_connection(client, "postgresql"):
        return DjangoAdapter(client, classify=classify_postgres_error)
    for kind in (sqlalchemy, psycopg2, psycopg, generic):
        adapter: Adapter | None = kind.adapt(client, join_transaction=join_transaction)
        if adapter is not None:
            return adapter
    raise InvalidArgumentError(
        f"PostgresCheckpointer cannot use a {type(client).__module__}.{type(client).__qualname__}: "
        "pass a psycopg2 or psycopg connection or pool, a Django connection, a SQLAlchemy "
        "Engine, Connection or Session, or an object whose execute(sql, params) returns rows"
    )


class PostgresCheckpointer(SqlCheckpointer):
    """Checkpoints in Postgres, through the client the application already has.

    Args:
        client: A psycopg2 connection or pool (``getconn``/``putconn``), a
            psycopg 3 connection or ``psycopg_pool.ConnectionPool``, a Django
            connection (``django.db.connection``), a SQLAlchemy ``Engine``,
            ``Connection`` or ``Session``, or any object whose
            ``execute(sql, params)`` returns rows (it must run consecutive
            calls on one session). ilmek never opens or closes the caller's
            connections, and never commits work it did not start.
        table_prefix: Tables are ``<prefix>_checkpoints``, ``<prefix>_journals``
            and a few more; ``[A-Za-z_][A-Za-z0-9_]*``, at most 40 characters.
        lease_seconds: How long a hold outlives its last renewal, when its
            holder's death cannot be seen at once (behind a transaction-mode
            pooler, or a process frozen without its connection closing).
        join_transaction: With a single connection of yours (psycopg2,
            psycopg 3, generic): write inside the transaction you keep open on
            it, in savepoints; the writes land when you commit. Without it,
            ilmek runs transactions of its own and refuses a connection on
            which you left one open. A SQLAlchemy ``Connection`` or ``Session``
            always joins yours; Django's ``atomic`` decides for a Django
            connection; a pool or an ``Engine`` lends connections of their own.
        cipher: An :class:`ilmek.crypto.Keyring`: every stored value is sealed
            (AES-256-GCM) and bound to its place; see :doc:`/encryption`.

    The tables are not created until :meth:`migrate` runs (or an operator runs
    the SQL of :meth:`ddl`).

    Raises:
        InvalidArgumentError: an invalid ``table_prefix`` (before any SQL is
            sent), or an unsupported client.
    """

    SCHEMA: ClassVar[list[str]] = _SCHEMA
    UPGRADES: ClassVar[dict[int, list[Migration]]] = _UPGRADES
    RETIRED_FUNCTIONS: ClassVar[tuple[str, ...]] = _RETIRED_FUNCTIONS
    JSON_IN: ClassVar[str] = "CAST({} AS jsonb)"
    JSON_OUT: ClassVar[str] = "{}::text"
    NOW: ClassVar[str] = "EXTRACT(EPOCH FROM clock_timestamp())"
    # The holder's session, for operators reading the table (pg_stat_activity);
    # it decides nothing (see HOLD_LAPSED).
    HOLDER: ClassVar[str] = "pg_backend_pid()"
    # Through a pool a fresh lease is trusted before a step, with no read
    # (Adapter.replaces_lost_connections): only its lapse, by the server's
    # clock, lets another run take the thread, and the step's record is
    # fenced by the hold in the same statement.
    CONFIRMS_EACH_STEP: ClassVar[bool] = True
    FIND: ClassVar[str] = "strpos(lower(t.thread_id), :needle) > 0"
    LOCK_SHARE: ClassVar[str] = " FOR SHARE"
    WRITES_IN_ONE_STATEMENT: ClassVar[bool] = True
    STORES_JSONB: ClassVar[bool] = True
    SCHEMA_VERSION: ClassVar[int] = 8

    def __init__(
        self,
        client: Any,
        *,
        table_prefix: str = "ilmek",
        lease_seconds: float = 5.0,
        join_transaction: bool = False,
        cipher: Keyring | None = None,
    ) -> None:
        table_prefix = validate_prefix(table_prefix)
        super().__init__(
            adapter_for(client, join_transaction=join_transaction),
            table_prefix=table_prefix,
            lease_seconds=lease_seconds,
            cipher=cipher,
        )

    @classmethod
    def connect(cls, dsn: str, *, table_prefix: str = "ilmek", **options: Any) -> PostgresCheckpointer:
        """Open a connection of ilmek's own (closed by :meth:`close`) with psycopg2, or psycopg 3.

        Raises:
            StorageError: the connection failed (the message never shows a password).
        """
        validate_prefix(table_prefix)  # before a session is opened for nothing
        try:
            import psycopg2 as driver
        except ImportError:
            import psycopg as driver
        # The driver's messages may quote any piece of the DSN it could not parse.
        secrets = dsn_secrets(str(dsn))
        try:
            connection = driver.connect(dsn)
        except Exception as error:
            shown = mask_secrets(mask_dsn(str(dsn)), secrets)
            raise StorageError(
                f"could not connect to Postgres at {shown!r}: {describe_error(error, secrets)}"
            ) from scrubbed(error, secrets)
        adapter = adapter_for(connection)
        adapter.secrets = secrets
        if isinstance(adapter, SingleConnectionAdapter):
            adapter.owned = True
        return cls(adapter, table_prefix=table_prefix, **options)

    def table_exists(self, session: Session, table: str) -> bool:
        return bool(session.query(_TABLE_EXISTS, name=table)[0][0])

    def lock_for_migration(self, session: Session) -> None:
        session.execute(_XACT_LOCK, key=advisory_key(self.table_prefix, "\0migrate"))

    def advisory_key(self, thread_id: str) -> int:
        return advisory_key(self.table_prefix, thread_id)

    def advisory_lock(self, session: Session, thread_id: str, *, wait: bool) -> bool:
        # A transaction lock: inside the caller's transaction it lasts until
        # they commit, which is how a hold taken there keeps other runs out.
        key = self.advisory_key(thread_id)
        if wait:
            session.execute(_XACT_LOCK, key=key)
            return True
        return bool(session.query(_TRY_XACT_LOCK, key=key)[0][0])

    def transaction_id(self, session: Session) -> object | None:
        found: object | None = session.query(_TRANSACTION_ID)[0][0]
        return found

    def metadata_filter(self, index: int, key: str, value: Any) -> tuple[str, dict[str, Any]]:
        # Containment lets the GIN index find candidates; jsonb equality then
        # demands the whole value (containment alone would match a sub-dict).
        whole = serde.encode({key: value}, where=f"the metadata filter {key!r}")
        single = serde.encode(value, where=f"the metadata filter {key!r}")
        fragment = (
            f"t.metadata @> CAST(:mf{index} AS jsonb) "
            f"AND t.metadata -> CAST(:mk{index} AS text) = CAST(:mv{index} AS jsonb)"
        )
        return fragment, {f"mf{index}": whole, f"mk{index}": key, f"mv{index}": single}

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({type(self._adapter).__name__}, table_prefix={self.table_prefix!r})"
