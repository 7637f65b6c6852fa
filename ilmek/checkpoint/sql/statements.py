"""The SQL text of the SQL checkpointer: every statement written once, in named style.

Templates use ``:name`` parameters and a few fields filled in per dialect
and table prefix: ``{p}`` is the table prefix, ``{ji_<col>}`` wraps a JSON
parameter, ``{jo_<col>}`` reads a JSON column as text, ``{now}`` is the
current time in epoch seconds (the database's clock where it has one),
``{holder}`` identifies the writer's session (for operators to read, never
to decide anything) and ``{lapsed_h}`` is :data:`HOLD_LAPSED`, the one
liveness rule. :class:`Statements` renders
them once per checkpointer and caches the result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...dbapi import Statement
from ...errors import InvalidArgumentError

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["CHUNK", "Statements", "chunks", "format_sql", "validate_prefix"]

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PREFIX = 40
#: Rows bound per statement: well under SQLite's default limit of 32,766
#: variables and Postgres's 65,535, whatever else the statement binds.
CHUNK = 500


def validate_prefix(prefix: Any) -> str:
    """Check a table prefix before it is ever put into SQL (or a file is touched).

    Returns:
        The prefix as a plain ``str`` (a subclass could render differently).

    Raises:
        InvalidArgumentError: not ``[A-Za-z_][A-Za-z0-9_]*`` or longer than
            40 characters (it is also a ``ValueError``).
    """
    plain = str.__str__(prefix) if isinstance(prefix, str) else None
    if plain is None or not _PREFIX.fullmatch(plain) or len(plain) > _MAX_PREFIX:
        raise InvalidArgumentError(
            f"table_prefix must match [A-Za-z_][A-Za-z0-9_]* and be at most {_MAX_PREFIX} "
            f"characters, got {prefix!r}"
        )
    return plain


def chunks(values: Sequence[Any]) -> list[Sequence[Any]]:
    """``values`` in slices of at most :data:`CHUNK`, for statements that bind one parameter each."""
    return [values[start : start + CHUNK] for start in range(0, len(values), CHUNK)]


CHECKPOINT_COLUMNS = (
    "checkpoint_id, parent_id, plan_id, step, ts, {jo_manifest}, {jo_next}, {jo_pending}, "
    "{jo_task_journals}, {jo_journal_chain}, {jo_metadata}"
)
"""A checkpoint row as :func:`~ilmek.checkpoint.sql.rows.checkpoint_from_row` reads it."""

THREAD_COLUMNS = (
    "t.thread_id, t.created_at, t.updated_at, t.status, t.step, t.checkpoint_id, {jo_t_metadata}, "
    "{jo_t_error}, h.acquired_at, h.owner, t.due_at"
)
"""A thread row joined with its live hold, as :func:`~ilmek.checkpoint.sql.rows.thread_from_row` reads it."""

HOLD_LAPSED = "{alias}.expires_at < {now}"
"""The one liveness rule: a hold row counts until its lease expires, and then no longer.

Written once, here: every statement that takes, claims, lists or cancels a
hold, in Python and in the schema's functions, reads it as ``{lapsed_h}``.
Nothing else counts: a holder's ended session proves nothing (ilmek
reconnects on its own; servers restart and fail over, idle sessions time
out, poolers recycle server connections), so a live run never loses its
thread to one of those.
"""

LIVE_HOLD = "NOT ({lapsed_h})"
"""A hold that still counts (the negation of :data:`HOLD_LAPSED`)."""

SQL: dict[str, str] = {
    "schema_version": "SELECT value FROM {p}_meta WHERE key = 'schema_version'",
    "set_schema_version": (
        "INSERT INTO {p}_meta (key, value) VALUES ('schema_version', :version) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    ),
    "checkpoint": (
        f"SELECT {CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints "
        "WHERE thread_id = :thread_id AND checkpoint_id = :checkpoint_id"
    ),
    "latest_checkpoint": (
        f"SELECT {CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints "
        "WHERE thread_id = :thread_id ORDER BY checkpoint_id DESC LIMIT 1"
    ),
    "manifest": (
        "SELECT {jo_manifest} FROM {p}_checkpoints "
        "WHERE thread_id = :thread_id AND checkpoint_id = :checkpoint_id"
    ),
    "stored_fields": (
        "SELECT parent_id, step, {jo_next}, {jo_pending}, {jo_metadata} FROM {p}_checkpoints "
        "WHERE thread_id = :thread_id AND checkpoint_id = :checkpoint_id"
    ),
    "insert_checkpoint": (
        "INSERT INTO {p}_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, "
        "manifest, next, pending, task_journals, journal_chain, metadata) VALUES (:thread_id, "
        ":checkpoint_id, :parent_id, :plan_id, :step, :ts, {ji_manifest}, {ji_next}, {ji_pending}, "
        "{ji_task_journals}, {ji_journal_chain}, {ji_metadata}) "
        "ON CONFLICT (thread_id, checkpoint_id) DO NOTHING RETURNING checkpoint_id"
    ),
    # updated_at (indexed) moves when the status does, else at most once a second:
    # rewriting it every superstep would rewrite its index entries every time.
    "advance_thread": (
        "UPDATE {p}_threads SET checkpoint_id = :checkpoint_id, status = :status, step = :step, "
        "error = NULL, due_at = :due_at, "
        "updated_at = CASE WHEN status <> :status OR updated_at < :now - 1.0 THEN :now ELSE updated_at END "
        "WHERE thread_id = :thread_id AND checkpoint_id = :expected "
        "RETURNING thread_id"
    ),
    # The same move, fenced by the run's hold in the same statement (the hold
    # row is only read, and locked against a takeover until the commit); it
    # returns a cancel request another process may have stored, and the
    # thread's updated_at as it now stands.
    "advance_held_thread": (
        "UPDATE {p}_threads SET checkpoint_id = :checkpoint_id, status = :status, step = :step, "
        "error = NULL, due_at = :due_at, "
        "updated_at = CASE WHEN status <> :status OR updated_at < :now - 1.0 THEN :now ELSE updated_at END "
        "WHERE thread_id = :thread_id AND checkpoint_id = :expected "
        "AND EXISTS (SELECT 1 FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner{lock_share}) "
        "RETURNING (SELECT cancel_reason FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner), "
        "updated_at"
    ),
    # Where assigning an indexed column rewrites its index entries even when
    # the value stays (SQLite), a held move that keeps the status and
    # updated_at the run last stamped leaves both alone.
    "advance_held_pointer": (
        "UPDATE {p}_threads SET checkpoint_id = :checkpoint_id, step = :step, error = NULL "
        "WHERE thread_id = :thread_id AND checkpoint_id = :expected "
        "AND EXISTS (SELECT 1 FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner{lock_share}) "
        "RETURNING (SELECT cancel_reason FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner)"
    ),
    # A superstep in one call (where WRITES_IN_ONE_STATEMENT: the function
    # is part of the schema), its arguments one JSON object (see calls.py):
    # one parameter, sent as text by every driver and cast.
    "superstep": "SELECT busy, reason, blob_ids, log_ids FROM {p}_superstep({ji_call})",
    # A resume's answers in one call (where WRITES_IN_ONE_STATEMENT).
    "answer": "SELECT busy, reason, recorded FROM {p}_answer({ji_call})",
    "start_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata, due_at) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}, "
        ":due_at) ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = excluded.checkpoint_id, "
        "status = excluded.status, step = excluded.step, updated_at = excluded.updated_at, error = NULL, "
        "due_at = excluded.due_at "
        "WHERE {p}_threads.checkpoint_id IS NULL RETURNING thread_id"
    ),
    "touch_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata, due_at) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}, "
        ":due_at) ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, "
        "due_at = CASE WHEN {newer} THEN excluded.due_at ELSE {p}_threads.due_at END, "
        "checkpoint_id = CASE WHEN {newer} THEN excluded.checkpoint_id ELSE {p}_threads.checkpoint_id END, "
        "status = CASE WHEN {newer} THEN excluded.status ELSE {p}_threads.status END, "
        "error = CASE WHEN {newer} THEN NULL ELSE {p}_threads.error END, "
        "step = CASE WHEN {newer} THEN excluded.step ELSE {p}_threads.step END"
    ),
    "thread_latest": "SELECT checkpoint_id FROM {p}_threads WHERE thread_id = :thread_id",
    "record_failure": (
        "UPDATE {p}_threads SET status = 'error', error = {ji_error}, updated_at = :now, due_at = NULL "
        "WHERE thread_id = :thread_id AND checkpoint_id IS NOT NULL"
    ),
    # A cancel leaves the status (the thread still plans its tasks) and says how the run stopped.
    "record_cancel": (
        "UPDATE {p}_threads SET error = {ji_error}, updated_at = :now "
        "WHERE thread_id = :thread_id AND checkpoint_id IS NOT NULL"
    ),
    "insert_blob": (
        "INSERT INTO {p}_blobs (thread_id, channel, origin, value) "
        "VALUES (:thread_id, :channel, :origin, {ji_value}) "
        "RETURNING blob_id"
    ),
    "insert_log": (
        "INSERT INTO {p}_logs (thread_id, channel, parent_id, base, length) "
        "VALUES (:thread_id, :channel, :parent_id, :base, :length) RETURNING log_id"
    ),
    # Appending to a log claims its next index: taken already means another
    # checkpoint (a fork) extended the log past this one's view of it.
    "append_item": (
        "INSERT INTO {p}_items (log_id, idx, origin, value) SELECT :log_id, :idx, :origin, {ji_value} "
        "WHERE EXISTS (SELECT 1 FROM {p}_logs WHERE log_id = :log_id AND thread_id = :thread_id) "
        "ON CONFLICT (log_id, idx) DO NOTHING RETURNING idx"
    ),
    "logs": "SELECT log_id, parent_id, base FROM {p}_logs WHERE thread_id = :thread_id",
    # --- journals: one row per entry, never rewritten ---
    "append_entry": (
        "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
        "SELECT :thread_id, :base_id, :task_key, :entry_key, {ji_entry} "
        "WHERE EXISTS (SELECT 1 FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner{lock_share}) "
        "ON CONFLICT (thread_id, base_id, task_key, entry_key) DO NOTHING RETURNING 1"
    ),
    "add_entry": (
        "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
        "VALUES (:thread_id, :base_id, :task_key, :entry_key, {ji_entry}) "
        "ON CONFLICT (thread_id, base_id, task_key, entry_key) DO NOTHING"
    ),
    "put_entry": (
        "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
        "VALUES (:thread_id, :base_id, :task_key, :entry_key, {ji_entry}) "
        "ON CONFLICT (thread_id, base_id, task_key, entry_key) DO UPDATE SET entry = excluded.entry"
    ),
    # What is recorded from one base checkpoint: a pause's answers and the steps after them.
    "base_entries": (
        "SELECT task_key, entry_key, {jo_entry} FROM {p}_journals "
        "WHERE thread_id = :thread_id AND base_id = :base_id ORDER BY entry_id"
    ),
    "drop_task_entries": (
        "DELETE FROM {p}_journals WHERE thread_id = :thread_id AND base_id = :base_id "
        "AND task_key = :task_key"
    ),
    "drop_base_entries": "DELETE FROM {p}_journals WHERE thread_id = :thread_id AND base_id = :base_id",
    "journal_bases": "SELECT DISTINCT base_id FROM {p}_journals WHERE thread_id = :thread_id",
    # --- holds ---
    "acquire_hold": (
        "INSERT INTO {p}_holds AS h (thread_id, owner, expires_at, acquired_at, holder, cancel_reason) "
        "VALUES (:thread_id, :owner, {now} + :ttl, {now}, {holder}, NULL) "
        "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, "
        "holder = excluded.holder, "
        "acquired_at = CASE WHEN h.owner = excluded.owner THEN h.acquired_at ELSE excluded.acquired_at END, "
        "cancel_reason = CASE WHEN h.owner = excluded.owner THEN h.cancel_reason ELSE NULL END "
        "WHERE h.owner = excluded.owner OR {lapsed_h} RETURNING owner"
    ),
    "fence": (
        "UPDATE {p}_holds SET expires_at = {now} + :ttl, holder = {holder} "
        "WHERE thread_id = :thread_id AND owner = :owner RETURNING cancel_reason"
    ),
    "holds_owner": "SELECT 1 FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner",
    # How much of the run's lease is left, by the clock that judges it.
    "hold_lease_left": (
        "SELECT expires_at - {now} FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner"
    ),
    "release_hold": "DELETE FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner",
    "request_cancel": (
        "UPDATE {p}_holds AS h SET cancel_reason = :reason WHERE thread_id = :thread_id "
        f"AND {LIVE_HOLD} RETURNING owner"
    ),
    "live_hold": f"SELECT 1 FROM {{p}}_holds AS h WHERE thread_id = :thread_id AND {LIVE_HOLD}",
    # --- deleting ---
    "delete_items": (
        "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id = :thread_id)"
    ),
    "delete_logs": "DELETE FROM {p}_logs WHERE thread_id = :thread_id",
    "delete_blobs": "DELETE FROM {p}_blobs WHERE thread_id = :thread_id",
    "delete_checkpoints": "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "delete_journals": "DELETE FROM {p}_journals WHERE thread_id = :thread_id",
    "delete_holds": "DELETE FROM {p}_holds WHERE thread_id = :thread_id",
    "delete_notices": "DELETE FROM {p}_notices WHERE thread_id = :thread_id",
    "delete_thread": "DELETE FROM {p}_threads WHERE thread_id = :thread_id",
    "thread_exists": "SELECT 1 FROM {p}_threads WHERE thread_id = :thread_id",
    # --- the host API ---
    "thread": (
        f"SELECT {THREAD_COLUMNS} FROM {{p}}_threads AS t LEFT JOIN {{p}}_holds AS h "
        f"ON h.thread_id = t.thread_id AND {LIVE_HOLD} WHERE t.thread_id = :thread_id"
    ),
    "put_thread_metadata": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, 'done', 0, NULL, {ji_metadata}) "
        "ON CONFLICT (thread_id) DO UPDATE SET metadata = excluded.metadata, updated_at = excluded.updated_at"
    ),
    "lineage": (
        "SELECT checkpoint_id, parent_id, {jo_journal_chain}, plan_id FROM {p}_checkpoints "
        "WHERE thread_id = :thread_id"
    ),
    "manifests": "SELECT checkpoint_id, {jo_manifest} FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "max_blob": "SELECT MAX(blob_id) FROM {p}_blobs WHERE thread_id = :thread_id",
}
"""Every fixed statement, by name (see the module docstring for the fields)."""

CLAIM_FOR_DELETE = (
    "INSERT INTO {p}_holds AS h (thread_id, owner, expires_at, acquired_at, holder, cancel_reason) "
    "SELECT t.thread_id, :owner, {now} + :ttl, {now}, {holder}, NULL FROM {p}_threads AS t "
    "WHERE t.thread_id IN ({in}) "
    "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, "
    "holder = excluded.holder WHERE {lapsed_h} RETURNING thread_id"
)
"""Hold every listed thread no live run holds, for the deleting transaction; returns those held."""

THREAD_DELETIONS = (
    "delete_items",
    "delete_logs",
    "delete_blobs",
    "delete_checkpoints",
    "delete_journals",
    "delete_holds",
    "delete_notices",
    "delete_thread",
)
"""The statements that delete one thread's rows, table by table."""

THREADS_DELETIONS = (
    "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id IN ({in}))",
    "DELETE FROM {p}_logs WHERE thread_id IN ({in})",
    "DELETE FROM {p}_blobs WHERE thread_id IN ({in})",
    "DELETE FROM {p}_checkpoints WHERE thread_id IN ({in})",
    "DELETE FROM {p}_journals WHERE thread_id IN ({in})",
    "DELETE FROM {p}_holds WHERE thread_id IN ({in})",
    "DELETE FROM {p}_notices WHERE thread_id IN ({in})",
    "DELETE FROM {p}_threads WHERE thread_id IN ({in})",
)
"""A batch of threads' rows, table by table (the same tables as :data:`THREAD_DELETIONS`)."""

_JSON_COLUMNS = (
    "manifest",
    "next",
    "pending",
    "task_journals",
    "journal_chain",
    "metadata",
    "value",
    "entry",
    "entries",
    "error",
    "call",
)


def format_sql(dialect: type[SqlCheckpointer], template: str, table_prefix: str) -> str:
    """A template with the prefix and the dialect's fragments filled in."""
    p = table_prefix
    fields: dict[str, str] = {
        "p": p,
        "now": dialect.NOW,
        "holder": dialect.HOLDER,
        "lock_share": dialect.LOCK_SHARE,
    }
    fields["newer"] = (
        f"({p}_threads.checkpoint_id IS NULL OR {p}_threads.checkpoint_id < excluded.checkpoint_id)"
    )
    for column in _JSON_COLUMNS:
        fields[f"ji_{column}"] = dialect.JSON_IN.format(f":{column}")
        fields[f"jo_{column}"] = dialect.JSON_OUT.format(column)
        for alias in ("t", "i"):
            fields[f"jo_{alias}_{column}"] = dialect.JSON_OUT.format(f"{alias}.{column}")
    fields["ji_empty"] = dialect.JSON_IN.format("'{}'")
    fields["lapsed_h"] = HOLD_LAPSED.format(alias="h", now=dialect.NOW)
    return template.format(**fields)


class Statements:
    """The statements of one checkpointer (one dialect, one prefix), rendered once and cached."""

    def __init__(self, dialect: type[SqlCheckpointer], table_prefix: str) -> None:
        self.dialect = dialect
        self.table_prefix = table_prefix
        self._cache: dict[tuple[str, int], Statement] = {}

    def format(self, template: str) -> str:
        """``template`` with this checkpointer's prefix and dialect filled in."""
        return format_sql(self.dialect, template, self.table_prefix)

    def named(self, name: str) -> Statement:
        """The fixed statement ``name`` of :data:`SQL`."""
        key = (name, -1)
        statement = self._cache.get(key)
        if statement is None:
            statement = self._cache[key] = Statement(self.format(SQL[name]))
        return statement

    def built(self, template: str, count: int = 0) -> Statement:
        """A statement built at run time, cached by its template.

        ``{in}`` in the template becomes ``:v0, :v1, ...`` for ``count`` values.
        """
        key = (template, count)
        statement = self._cache.get(key)
        if statement is None:
            placeholders = ", ".join(f":v{i}" for i in range(count))
            statement = self._cache[key] = Statement(self.format(template.replace("{in}", placeholders)))
        return statement

    @staticmethod
    def in_params(values: Sequence[Any]) -> dict[str, Any]:
        """The parameters of a ``{in}`` list (see :meth:`built`)."""
        return {f"v{i}": value for i, value in enumerate(values)}
