"""The SQL checkpointer: every query written once, for SQLite and Postgres alike.

:class:`SqlCheckpointer` implements the whole port and host API on top of an
:class:`~ilmek.dbapi.Adapter`. A backend subclass supplies its DDL (the
``MIGRATIONS`` list, whose index + 1 is the schema version) and a handful of
SQL fragments where the dialects differ (how a JSON parameter is written,
how the current time is read, how metadata is filtered); everything else is
here.

Tables, all named ``<prefix>_<name>``:

* ``meta``: the schema version.
* ``threads``: one row per thread: its latest checkpoint, status, step,
  metadata and times; commits compare-and-set its ``checkpoint_id``.
* ``checkpoints``: one row per checkpoint; channel values are not here but
  in a *manifest* pointing into ``blobs`` and ``logs`` (see
  :mod:`ilmek.checkpoint._delta`).
* ``blobs``: whole channel values; ``logs`` and ``items``: list channels,
  one row per item.
* ``journals``: one row per task journal.
* ``holds``: leases for the one-run-per-thread rule.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .. import serde
from ..dbapi import Adapter, Session, Statement
from ..errors import CheckpointNotFoundError, ConcurrentUpdateError, SchemaVersionError
from ..types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    LazyChannels,
    ThreadInfo,
    ThreadStatus,
    thread_of_task,
)
from . import _records
from ._delta import (
    ChannelRef,
    LogInfo,
    ValueCache,
    blob_ids,
    diff_channels,
    extend_cached_logs,
    manifest_from_plain,
    manifest_to_plain,
    read_channel_slice,
    read_channels,
    write_channels,
)
from .base import (
    ANY_LATEST,
    Checkpointer,
    ThreadHold,
    _AnyLatest,
    busy_error,
    checkpoints_to_keep,
    concurrent_update_error,
)

__all__ = ["LeaseHold", "SqlCheckpointer", "validate_prefix"]

_NO_LIMIT = 2**62
_DELETE_CHECKPOINTS = "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id AND checkpoint_id IN ({in})"
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PREFIX = 40


def validate_prefix(prefix: Any) -> str:
    """Check a table prefix before it is ever put into SQL.

    Raises:
        ValueError: not ``[A-Za-z_][A-Za-z0-9_]*`` or longer than 40 characters.
    """
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix) or len(prefix) > _MAX_PREFIX:
        raise ValueError(
            f"table_prefix must match [A-Za-z_][A-Za-z0-9_]* and be at most {_MAX_PREFIX} "
            f"characters, got {prefix!r}"
        )
    return prefix


_CHECKPOINT_COLUMNS = (
    "checkpoint_id, parent_id, plan_id, step, ts, {jo_manifest}, {jo_next}, {jo_pending}, "
    "{jo_task_journals}, {jo_metadata}"
)

# Every query, in named style. ``{p}`` is the table prefix, ``{ji}`` wraps a
# JSON parameter, ``{jo_<col>}`` reads a JSON column as text, ``{now}`` is
# the current time in epoch seconds.
_SQL: dict[str, str] = {
    "schema_version": "SELECT value FROM {p}_meta WHERE key = 'schema_version'",
    "set_schema_version": (
        "INSERT INTO {p}_meta (key, value) VALUES ('schema_version', :version) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    ),
    "checkpoint": (
        f"SELECT {_CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints "
        "WHERE thread_id = :thread_id AND checkpoint_id = :checkpoint_id"
    ),
    "latest_checkpoint": (
        f"SELECT {_CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints "
        "WHERE thread_id = :thread_id ORDER BY checkpoint_id DESC LIMIT 1"
    ),
    "manifest": (
        "SELECT {jo_manifest} FROM {p}_checkpoints "
        "WHERE thread_id = :thread_id AND checkpoint_id = :checkpoint_id"
    ),
    "insert_checkpoint": (
        "INSERT INTO {p}_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, "
        "manifest, next, pending, task_journals, metadata) VALUES (:thread_id, :checkpoint_id, "
        ":parent_id, :plan_id, :step, :ts, {ji_manifest}, {ji_next}, {ji_pending}, "
        "{ji_task_journals}, {ji_metadata}) ON CONFLICT (thread_id, checkpoint_id) DO NOTHING "
        "RETURNING checkpoint_id"
    ),
    # updated_at (indexed) moves when the status does, else at most once a second:
    # rewriting it every superstep would rewrite its index entries every time.
    "advance_thread": (
        "UPDATE {p}_threads SET checkpoint_id = :checkpoint_id, status = :status, step = :step, "
        "updated_at = CASE WHEN status <> :status OR updated_at < :now - 1.0 THEN :now "
        "ELSE updated_at END WHERE thread_id = :thread_id AND checkpoint_id = :expected "
        "RETURNING thread_id"
    ),
    "start_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}) "
        "ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = excluded.checkpoint_id, "
        "status = excluded.status, step = excluded.step, updated_at = excluded.updated_at "
        "WHERE {p}_threads.checkpoint_id IS NULL RETURNING thread_id"
    ),
    "touch_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}) "
        "ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, "
        "checkpoint_id = CASE WHEN {newer} THEN excluded.checkpoint_id ELSE {p}_threads.checkpoint_id END, "
        "status = CASE WHEN {newer} THEN excluded.status ELSE {p}_threads.status END, "
        "step = CASE WHEN {newer} THEN excluded.step ELSE {p}_threads.step END"
    ),
    "thread_latest": "SELECT checkpoint_id FROM {p}_threads WHERE thread_id = :thread_id",
    "insert_blob": (
        "INSERT INTO {p}_blobs (thread_id, channel, value) VALUES (:thread_id, :channel, {ji_value}) "
        "RETURNING blob_id"
    ),
    "insert_log": (
        "INSERT INTO {p}_logs (thread_id, channel, parent_id, base, length) "
        "VALUES (:thread_id, :channel, :parent_id, :base, :length) RETURNING log_id"
    ),
    "extend_log": (
        "UPDATE {p}_logs SET length = :new_length WHERE log_id = :log_id AND thread_id = :thread_id "
        "AND length = :old_length RETURNING log_id"
    ),
    "logs": "SELECT log_id, parent_id, base, length FROM {p}_logs WHERE thread_id = :thread_id",
    "put_journal": (
        "INSERT INTO {p}_journals (task_id, thread_id, entries) VALUES (:task_id, :thread_id, "
        "{ji_entries}) ON CONFLICT (task_id) DO UPDATE SET entries = excluded.entries"
    ),
    "delete_items": (
        "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id = :thread_id)"
    ),
    "delete_logs": "DELETE FROM {p}_logs WHERE thread_id = :thread_id",
    "delete_blobs": "DELETE FROM {p}_blobs WHERE thread_id = :thread_id",
    "delete_checkpoints": "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "delete_journals": "DELETE FROM {p}_journals WHERE thread_id = :thread_id",
    "delete_thread": "DELETE FROM {p}_threads WHERE thread_id = :thread_id",
    "thread": (
        "SELECT thread_id, created_at, updated_at, status, step, checkpoint_id, {jo_metadata} "
        "FROM {p}_threads WHERE thread_id = :thread_id"
    ),
    "put_thread_metadata": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, 'done', 0, NULL, {ji_metadata}) "
        "ON CONFLICT (thread_id) DO UPDATE SET metadata = excluded.metadata, updated_at = excluded.updated_at"
    ),
    "lineage": "SELECT checkpoint_id, parent_id FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "manifests": "SELECT {jo_manifest} FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "max_blob": "SELECT MAX(blob_id) FROM {p}_blobs WHERE thread_id = :thread_id",
    "acquire_hold": (
        "INSERT INTO {p}_holds (thread_id, owner, expires_at) VALUES (:thread_id, :owner, {now} + :ttl) "
        "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
        "WHERE {p}_holds.expires_at < {now} RETURNING owner"
    ),
    "renew_hold": (
        "UPDATE {p}_holds SET expires_at = {now} + :ttl WHERE thread_id = :thread_id AND owner = :owner "
        "RETURNING owner"
    ),
    "release_hold": "DELETE FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner",
}


def _epoch(moment: _dt.datetime) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.timestamp()


def _moment(epoch: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(float(epoch), _dt.UTC)


class LeaseHold(ThreadHold):
    """A hold kept as a row with an expiry, renewed while the run works.

    If the holding process dies, the row simply lapses: another run can take
    the thread once ``lease_seconds`` have passed without a renewal.
    """

    def __init__(self, owner: SqlCheckpointer, thread_id: str, token: str) -> None:
        super().__init__(thread_id)
        self._owner = owner
        self.token = token
        self.keep_alive_interval = max(owner.lease_seconds / 4, 0.05)
        self._released = False

    verifies = True

    def keep_alive(self) -> None:
        self._owner._renew_hold(self.thread_id, self.token)

    def verify(self) -> None:
        # Renewed lately (by a commit, a journal write or keep_alive): still
        # ours. Otherwise renew now, which fails if another run took it.
        if time.monotonic() - self._owner._renewed_at(self.thread_id) > self._owner.lease_seconds / 2:
            self.keep_alive()

    def release(self) -> None:
        if not self._released:
            self._released = True
            if self._owner._forget_hold(self.thread_id, self.token):
                self._owner._release_hold(self.thread_id, self.token)


class SqlCheckpointer(Checkpointer):
    """The port and host API over any DB-API adapter; subclasses add DDL and dialect.

    Attributes:
        MIGRATIONS: DDL statements per schema version (``{p}`` is the prefix).
        lease_seconds: How long a hold outlives its last renewal.
    """

    MIGRATIONS: ClassVar[Sequence[Sequence[str]]] = ()
    JSON_IN: ClassVar[str] = "{}"
    JSON_OUT: ClassVar[str] = "{}"
    NOW: ClassVar[str] = ":now"
    AUTO_MIGRATE: ClassVar[bool] = False

    def __init__(self, adapter: Adapter, *, table_prefix: str = "ilmek", lease_seconds: float = 5.0) -> None:
        super().__init__()
        # Unquoted SQL identifiers ignore case (Postgres folds them, SQLite
        # compares them case-blind): "Billing" and "billing" are one prefix.
        self.table_prefix = validate_prefix(table_prefix).lower()
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
        self.lease_seconds = float(lease_seconds)
        self._adapter = adapter
        self._statements: dict[tuple[str, int], Statement] = {}
        self._cache = ValueCache()
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._held: dict[str, str] = {}
        self._renewals: dict[str, float] = {}
        # Manifests never change once written: remember the ones this process saw.
        self._manifests = ValueCache(max_bytes=4 * 1024 * 1024)
        self._held_lock = threading.Lock()

    # --- SQL text ---------------------------------------------------------------------

    def _format(self, template: str) -> str:
        columns = ("manifest", "next", "pending", "task_journals", "metadata", "value", "entries")
        fields: dict[str, str] = {"p": self.table_prefix, "now": self.NOW}
        fields["newer"] = (
            f"({self.table_prefix}_threads.checkpoint_id IS NULL "
            f"OR {self.table_prefix}_threads.checkpoint_id < excluded.checkpoint_id)"
        )
        for column in columns:
            fields[f"ji_{column}"] = self.JSON_IN.format(f":{column}")
            fields[f"jo_{column}"] = self.JSON_OUT.format(column)
        fields["ji_empty"] = self.JSON_IN.format("'{}'")
        return template.format(**fields)

    def _sql(self, name: str) -> Statement:
        key = (name, -1)
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = Statement(self._format(_SQL[name]))
        return statement

    def _statement(self, template: str, count: int = 0) -> Statement:
        """A statement built at run time, cached by its template.

        ``{in}`` in the template becomes ``:v0, :v1, ...`` for ``count`` values.
        """
        key = (template, count)
        statement = self._statements.get(key)
        if statement is None:
            placeholders = ", ".join(f":v{i}" for i in range(count))
            statement = self._statements[key] = Statement(
                self._format(template.replace("{in}", placeholders))
            )
        return statement

    @staticmethod
    def _in_params(values: Sequence[Any]) -> dict[str, Any]:
        return {f"v{i}": value for i, value in enumerate(values)}

    def metadata_filter(self, index: int, key: str, value: Any) -> tuple[str, dict[str, Any]] | None:
        """A WHERE fragment matching threads whose metadata has ``key`` equal to ``value``.

        ``None`` (the default) filters in Python instead, after the other
        conditions narrowed the rows in SQL.
        """
        return None

    # --- schema -----------------------------------------------------------------------

    def table_exists(self, session: Session, table: str) -> bool:
        """Whether ``table`` exists (the dialect knows how to ask)."""
        raise NotImplementedError

    def lock_for_migration(self, session: Session) -> None:
        """Serialize concurrent migrations (SQLite's write lock already does)."""

    @property
    def schema_version(self) -> int:
        """The schema version this code reads and writes."""
        return len(self.MIGRATIONS)

    def ddl(self) -> builtins.list[str]:
        """The SQL that creates this schema, for operators who run it themselves."""
        statements = [self._format(s) for step in self.MIGRATIONS for s in step]
        statements.append(
            self._format(
                "INSERT INTO {p}_meta (key, value) VALUES ('schema_version', "
                f"'{self.schema_version}') ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            )
        )
        return statements

    def migrate(self) -> None:
        """Create or upgrade the tables; safe to run again and from several processes at once.

        Raises:
            SchemaVersionError: the database was written by a newer ilmek.
        """

        def work(session: Session) -> None:
            self.lock_for_migration(session)
            found = self._found_version(session)
            if found > self.schema_version:
                raise self._version_error(found)
            for version in range(found, self.schema_version):
                session.run_script([self._format(s) for s in self.MIGRATIONS[version]])
            if found != self.schema_version:
                session.execute(self._sql("set_schema_version"), version=str(self.schema_version))

        self._adapter.run(work, what="migrate the schema")
        self._schema_ready = True

    def _found_version(self, session: Session) -> int:
        if not self.table_exists(session, f"{self.table_prefix}_meta"):
            return 0
        rows = session.query(self._sql("schema_version"))
        return int(rows[0][0]) if rows else 0

    def _version_error(self, found: int) -> SchemaVersionError:
        if found > self.schema_version:
            advice = "upgrade ilmek to a version that knows it (or use another table_prefix)"
        else:
            advice = "run migrate() (or `python -m ilmek migrate <database>`) to upgrade it"
        return SchemaVersionError(
            f"the {self.table_prefix}_* tables are at schema version {found}, this ilmek uses "
            f"version {self.schema_version}: {advice}",
            found=found,
            expected=self.schema_version,
        )

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            self._check_schema()

    def _check_schema(self) -> None:
        if not self._schema_ready:
            found = self._adapter.run(self._found_version, what="read the schema version", write=False)
            if found != self.schema_version:
                if self.AUTO_MIGRATE and found < self.schema_version:
                    self.migrate()
                    return
                raise self._version_error(found)
            self._schema_ready = True

    def _run(self, work: Any, *, what: str, thread_id: str | None = None, write: bool = True) -> Any:
        self._ensure_schema()
        return self._adapter.run(work, what=what, thread_id=thread_id, write=write)

    # --- checkpoints ------------------------------------------------------------------

    def put(self, thread_id: str, checkpoint: Checkpoint) -> None:
        self.commit(thread_id, checkpoint)

    def commit(
        self,
        thread_id: str,
        checkpoint: Checkpoint,
        *,
        changes: Mapping[str, ChannelChange] | None = None,
        expect_latest: str | _AnyLatest | None = ANY_LATEST,
        drop_journals: Sequence[str] = (),
        release_hold: bool = False,
    ) -> None:
        _records.check_thread(thread_id, checkpoint)
        fields = _records.encode_fields(checkpoint)
        encoded = _records.encode_changes(changes) if changes is not None else None
        status = checkpoint.status
        now = time.time()

        with self._held_lock:
            lease = self._held.get(thread_id) if release_hold else None

        def work(
            session: Session,
        ) -> tuple[dict[str, ChannelRef], dict[str, ChannelRef], list[_records.EncodedChange]] | None:
            self._fence(session, thread_id)
            if not self._advance_thread(session, thread_id, checkpoint, status, expect_latest, now):
                return None
            store = _Store(self, session)
            parent_manifest: dict[str, ChannelRef] = {}
            if checkpoint.parent_id is not None:
                # After a successful compare-and-set the thread is as this
                # process last saw it, so a manifest it remembers is current.
                known = (
                    None
                    if isinstance(expect_latest, _AnyLatest)
                    else self._manifests.get((thread_id, checkpoint.parent_id))
                )
                parent_manifest = known or self._manifest(session, thread_id, checkpoint.parent_id) or {}
            keep: set[str] | None = None
            to_write = encoded
            if to_write is None:
                parent_values = read_channels(store, thread_id, parent_manifest, self._cache)
                to_write = _records.encode_changes(diff_channels(parent_values, checkpoint.channels))
                keep = set(checkpoint.channels)
            manifest = write_channels(store, thread_id, parent_manifest, to_write, keep)
            inserted = session.query(
                self._sql("insert_checkpoint"),
                thread_id=thread_id,
                checkpoint_id=checkpoint.id,
                parent_id=checkpoint.parent_id,
                plan_id=checkpoint.plan_id,
                step=checkpoint.step,
                ts=_epoch(checkpoint.ts),
                manifest=_records.dump_plain(manifest_to_plain(manifest)),
                next=fields["next_text"],
                pending=fields["pending_text"],
                task_journals=fields["journals_text"],
                metadata=fields["metadata_text"],
            )
            if not inserted:
                raise ConcurrentUpdateError(
                    f"checkpoint {checkpoint.id!r} of thread {thread_id!r} already exists; "
                    "checkpoints are never overwritten: write a new one with a new id",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                )
            if drop_journals:
                self._drop_journals(session, drop_journals)
            if lease is not None:
                session.execute(self._sql("release_hold"), thread_id=thread_id, owner=lease)
            return manifest, parent_manifest, to_write

        written = self._run(work, what="commit a checkpoint", thread_id=thread_id)
        if written is not None:
            manifest, parent_manifest, to_write = written
            self._remember_manifest(thread_id, checkpoint.id, manifest)
            extend_cached_logs(self._cache, parent_manifest, manifest, to_write)
        if lease is not None:
            self._forget_hold(thread_id, lease)

    def _remember_manifest(self, thread_id: str, checkpoint_id: str, manifest: dict[str, ChannelRef]) -> None:
        self._manifests.put((thread_id, checkpoint_id), manifest, 64 * (len(manifest) + 1))

    def _advance_thread(
        self,
        session: Session,
        thread_id: str,
        checkpoint: Checkpoint,
        status: str,
        expect_latest: str | _AnyLatest | None,
        now: float,
    ) -> bool:
        """Move the thread's latest pointer; False when this very commit already landed."""
        params = {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint.id,
            "status": status,
            "step": checkpoint.step,
            "now": now,
        }
        if isinstance(expect_latest, _AnyLatest):
            session.execute(self._sql("touch_thread"), **params)
            return True
        if expect_latest is None:
            moved = session.query(self._sql("start_thread"), **params)
        else:
            moved = session.query(self._sql("advance_thread"), expected=expect_latest, **params)
        if moved:
            return True
        rows = session.query(self._sql("thread_latest"), thread_id=thread_id)
        found = rows[0][0] if rows else None
        if found == checkpoint.id and self._manifest(session, thread_id, checkpoint.id) is not None:
            # A retry of a commit whose first try landed but whose answer was
            # lost with the connection: it is done already.
            return False
        raise concurrent_update_error(thread_id, expect_latest, found)

    def _manifest(self, session: Session, thread_id: str, checkpoint_id: str) -> dict[str, ChannelRef] | None:
        rows = session.query(self._sql("manifest"), thread_id=thread_id, checkpoint_id=checkpoint_id)
        if not rows:
            return None
        return manifest_from_plain(_records.load_plain(rows[0][0]))

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        def work(session: Session) -> Checkpoint | None:
            if checkpoint_id is None:
                rows = session.query(self._sql("latest_checkpoint"), thread_id=thread_id)
            else:
                rows = session.query(
                    self._sql("checkpoint"), thread_id=thread_id, checkpoint_id=checkpoint_id
                )
            if not rows:
                return None
            manifest = manifest_from_plain(_records.load_plain(rows[0][5]))
            self._remember_manifest(thread_id, rows[0][0], manifest)
            values = read_channels(_Store(self, session), thread_id, manifest, self._cache)
            return self._checkpoint(thread_id, rows[0], values)

        result: Checkpoint | None = self._run(
            work, what="read a checkpoint", thread_id=thread_id, write=False
        )
        return result

    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        conditions = "thread_id = :thread_id" + (" AND checkpoint_id < :before" if before is not None else "")
        suffix = " LIMIT :limit" if limit is not None else ""
        template = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM {{p}}_checkpoints WHERE {conditions} "
            f"ORDER BY checkpoint_id DESC{suffix}"
        )

        def work(session: Session) -> builtins.list[tuple[Any, ...]]:
            params: dict[str, Any] = {"thread_id": thread_id}
            if before is not None:
                params["before"] = before
            if limit is not None:
                params["limit"] = max(limit, 0)
            return session.query(self._statement(template), **params)

        rows = self._run(work, what="list checkpoints", thread_id=thread_id, write=False)
        return [self._checkpoint(thread_id, row, self._lazy_values(thread_id, row[5])) for row in rows]

    def _lazy_values(self, thread_id: str, stored_manifest: Any) -> LazyChannels:
        manifest = manifest_from_plain(_records.load_plain(stored_manifest))

        def load() -> dict[str, Any]:
            def work(session: Session) -> dict[str, Any]:
                return read_channels(_Store(self, session), thread_id, manifest, self._cache)

            values: dict[str, Any] = self._run(
                work, what="read checkpoint values", thread_id=thread_id, write=False
            )
            return values

        return LazyChannels(load)

    @staticmethod
    def _checkpoint(thread_id: str, row: Sequence[Any], channels: Mapping[str, Any]) -> Checkpoint:
        return Checkpoint(
            id=row[0],
            thread_id=thread_id,
            parent_id=row[1],
            plan_id=row[2],
            step=int(row[3]),
            ts=_moment(row[4]),
            channels=channels,
            next=_records.decode_next(row[6]),
            pending=_records.decode_pending(row[7]),
            task_journals=_records.decode_task_journals(row[8]),
            metadata=serde.from_jsonable(_records.load_plain(row[9])),
        )

    # --- journals ------------------------------------------------------------------------

    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        self.put_journals({task_id: entries})

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        encoded = [
            (task_id, thread_of_task(task_id), _records.encode_journal(task_id, entries))
            for task_id, entries in journals.items()
        ]
        if not encoded:
            return

        def work(session: Session) -> None:
            for thread_id in {thread for _, thread, _ in encoded}:
                self._fence(session, thread_id)
            for task_id, thread_id, text in encoded:
                session.execute(self._sql("put_journal"), task_id=task_id, thread_id=thread_id, entries=text)

        self._run(work, what="record a journal", thread_id=encoded[0][1])

    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        return self.get_journals([task_id]).get(task_id, ())

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        if not task_ids:
            return {}
        template = "SELECT task_id, {jo_entries} FROM {p}_journals WHERE task_id IN ({in})"

        def work(session: Session) -> builtins.list[tuple[Any, ...]]:
            return session.query(self._statement(template, len(task_ids)), **self._in_params(task_ids))

        rows = self._run(work, what="read journals", thread_id=thread_of_task(task_ids[0]), write=False)
        found = {row[0]: _records.decode_journal(row[1]) for row in rows}
        return {task_id: entries for task_id, entries in found.items() if entries}

    def drop_journal(self, task_id: str) -> None:
        self._run(
            lambda session: self._drop_journals(session, [task_id]),
            what="drop a journal",
            thread_id=thread_of_task(task_id),
        )

    def _drop_journals(self, session: Session, task_ids: Sequence[str]) -> None:
        template = "DELETE FROM {p}_journals WHERE task_id IN ({in})"
        session.execute(self._statement(template, len(task_ids)), **self._in_params(task_ids))

    def delete_thread(self, thread_id: str) -> None:
        def work(session: Session) -> None:
            for name in (
                "delete_items",
                "delete_logs",
                "delete_blobs",
                "delete_checkpoints",
                "delete_journals",
                "delete_thread",
            ):
                session.execute(self._sql(name), thread_id=thread_id)

        self._run(work, what="delete the thread", thread_id=thread_id)

    # --- holds -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[ThreadHold]:
        token = f"{os.getpid()}-{threading.get_ident()}-{os.urandom(6).hex()}"

        def acquire(session: Session) -> bool:
            rows = session.query(
                self._sql("acquire_hold"),
                thread_id=thread_id,
                owner=token,
                ttl=self.lease_seconds,
                now=time.time(),
            )
            return bool(rows)

        if not self._run(acquire, what="hold the thread", thread_id=thread_id):
            raise busy_error(thread_id)
        handle = LeaseHold(self, thread_id, token)
        with self._held_lock:
            self._held[thread_id] = token
            self._renewals[thread_id] = time.monotonic()
        try:
            yield handle
        finally:
            handle.release()

    def _forget_hold(self, thread_id: str, token: str) -> bool:
        """Stop renewing a lease; False if it was already given back (by a final commit)."""
        with self._held_lock:
            if self._held.get(thread_id) != token:
                return False
            del self._held[thread_id]
            self._renewals.pop(thread_id, None)
            return True

    def _fence(self, session: Session, thread_id: str) -> None:
        """Inside a write: renew this process's hold on the thread, or fail if it was lost."""
        with self._held_lock:
            token = self._held.get(thread_id)
        # Renewed less than a quarter lease ago: it cannot have lapsed, and
        # renewing again would cost a page write in every commit.
        if token is not None and time.monotonic() - self._renewed_at(thread_id) > self.lease_seconds / 4:
            self._renew_in(session, thread_id, token)

    def _renew_in(self, session: Session, thread_id: str, token: str) -> None:
        renewed = time.monotonic()
        rows = session.query(
            self._sql("renew_hold"), thread_id=thread_id, owner=token, ttl=self.lease_seconds, now=time.time()
        )
        if not rows:
            raise busy_error(thread_id)
        self._renewals[thread_id] = renewed

    def _renewed_at(self, thread_id: str) -> float:
        """When this process last renewed its lease on the thread (monotonic clock)."""
        return self._renewals.get(thread_id, 0.0)

    def _renew_hold(self, thread_id: str, token: str) -> None:
        self._run(
            lambda session: self._renew_in(session, thread_id, token),
            what="renew the hold",
            thread_id=thread_id,
        )

    def _release_hold(self, thread_id: str, token: str) -> None:
        self._run(
            lambda session: session.execute(self._sql("release_hold"), thread_id=thread_id, owner=token),
            what="release the hold",
            thread_id=thread_id,
        )

    # --- host API ----------------------------------------------------------------------------

    def _info(self, row: Sequence[Any]) -> ThreadInfo:
        return ThreadInfo(
            id=row[0],
            created_at=_moment(row[1]),
            updated_at=_moment(row[2]),
            status=row[3],
            step=int(row[4]),
            checkpoint_id=row[5],
            metadata=serde.from_jsonable(_records.load_plain(row[6])),
        )

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: ThreadStatus | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> builtins.list[ThreadInfo]:
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must not be negative")
        conditions: builtins.list[str] = []
        params: dict[str, Any] = {}
        if search:
            escaped = search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            conditions.append("lower(thread_id) LIKE :pattern ESCAPE '\\'")
            params["pattern"] = f"%{escaped}%"
        if status is not None:
            conditions.append("status = :status")
            params["status"] = status
        in_python: dict[str, Any] = {}
        for index, (key, value) in enumerate((metadata or {}).items()):
            filtered = self.metadata_filter(index, key, value)
            if filtered is None:
                in_python[key] = value
                continue
            conditions.append(filtered[0])
            params.update(filtered[1])
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        page = ""
        if (limit is not None or offset) and not in_python:
            page = " LIMIT :limit OFFSET :offset"
            params["limit"] = limit if limit is not None else _NO_LIMIT
            params["offset"] = offset
        template = (
            "SELECT thread_id, created_at, updated_at, status, step, checkpoint_id, {jo_metadata} "
            f"FROM {{p}}_threads{where} ORDER BY updated_at DESC, thread_id DESC{page}"
        )

        def work(session: Session) -> builtins.list[tuple[Any, ...]]:
            return session.query(self._statement(template), **params)

        rows = self._run(work, what="list threads", write=False)
        infos = [self._info(row) for row in rows]
        if in_python:
            matching = [i for i in infos if _records.metadata_matches(i.metadata, in_python)]
            infos = matching[offset : None if limit is None else offset + limit]
        return infos

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        rows = self._run(
            lambda session: session.query(self._sql("thread"), thread_id=thread_id),
            what="read the thread",
            thread_id=thread_id,
            write=False,
        )
        return self._info(rows[0]) if rows else None

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        text = _records.encode_thread_metadata(thread_id, metadata)
        self._run(
            lambda session: session.execute(
                self._sql("put_thread_metadata"), thread_id=thread_id, metadata=text, now=time.time()
            ),
            what="store thread metadata",
            thread_id=thread_id,
        )

    def read_channel(
        self,
        thread_id: str,
        channel: str,
        offset: int = 0,
        limit: int | None = None,
        *,
        checkpoint_id: str | None = None,
    ) -> builtins.list[Any]:
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must not be negative")

        def work(session: Session) -> builtins.list[Any]:
            if checkpoint_id is None:
                rows = session.query(self._sql("latest_checkpoint"), thread_id=thread_id)
                manifest = manifest_from_plain(_records.load_plain(rows[0][5])) if rows else None
            else:
                manifest = self._manifest(session, thread_id, checkpoint_id)
            if manifest is None:
                raise CheckpointNotFoundError(
                    f"thread {thread_id!r} has no checkpoint {checkpoint_id or '(latest)'}",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )
            ref = manifest.get(channel)
            if ref is None:
                return []
            return read_channel_slice(_Store(self, session), thread_id, ref, offset, limit)

        result: builtins.list[Any] = self._run(work, what="read a channel", thread_id=thread_id, write=False)
        return result

    def prune(self, thread_id: str, keep_last: int) -> int:
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1: the latest checkpoint is always kept")

        def work(session: Session) -> int:
            lineage = {row[0]: row[1] for row in session.query(self._sql("lineage"), thread_id=thread_id)}
            keep = checkpoints_to_keep(builtins.list(lineage), lineage, keep_last)
            dropped = [checkpoint_id for checkpoint_id in lineage if checkpoint_id not in keep]
            if not dropped:
                return 0
            ceiling_rows = session.query(self._sql("max_blob"), thread_id=thread_id)
            ceiling = ceiling_rows[0][0] if ceiling_rows else None
            for start in range(0, len(dropped), 500):
                chunk = dropped[start : start + 500]
                session.execute(
                    self._statement(_DELETE_CHECKPOINTS, len(chunk)),
                    thread_id=thread_id,
                    **self._in_params(chunk),
                )
            used = blob_ids(
                manifest_from_plain(_records.load_plain(stored))
                for (stored,) in session.query(self._sql("manifests"), thread_id=thread_id)
            )
            if ceiling is not None:
                # Only blobs that existed when we looked: a commit racing this
                # prune may have written newer ones that it still needs.
                template = "DELETE FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id <= :ceiling"
                if used:
                    template += " AND blob_id NOT IN ({in})"
                session.execute(
                    self._statement(template, len(used)),
                    thread_id=thread_id,
                    ceiling=ceiling,
                    **self._in_params(sorted(used)),
                )
            return len(dropped)

        with self.hold(thread_id):
            result: int = self._run(work, what="prune checkpoints", thread_id=thread_id)
        return result

    def close(self) -> None:
        self._adapter.close()


class _Store:
    """The delta primitives as queries inside one session."""

    def __init__(self, owner: SqlCheckpointer, session: Session) -> None:
        self._owner = owner
        self._session = session

    def insert_blob(self, thread_id: str, channel: str, text: str) -> int:
        rows = self._session.query(
            self._owner._sql("insert_blob"), thread_id=thread_id, channel=channel, value=text
        )
        return int(rows[0][0])

    def fetch_blobs(self, thread_id: str, blob_ids: Sequence[int]) -> dict[int, Any]:
        template = (
            "SELECT blob_id, {jo_value} FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id IN ({in})"
        )
        rows = self._session.query(
            self._owner._statement(template, len(blob_ids)),
            thread_id=thread_id,
            **self._owner._in_params(blob_ids),
        )
        return {int(row[0]): serde.decode(row[1]) for row in rows}

    def create_log(self, thread_id: str, channel: str, parent_id: int | None, base: int, length: int) -> int:
        rows = self._session.query(
            self._owner._sql("insert_log"),
            thread_id=thread_id,
            channel=channel,
            parent_id=parent_id,
            base=base,
            length=length,
        )
        return int(rows[0][0])

    def try_extend_log(self, thread_id: str, log_id: int, old_length: int, new_length: int) -> bool:
        rows = self._session.query(
            self._owner._sql("extend_log"),
            thread_id=thread_id,
            log_id=log_id,
            old_length=old_length,
            new_length=new_length,
        )
        return bool(rows)

    def insert_items(self, thread_id: str, log_id: int, start: int, texts: Sequence[str]) -> None:
        for offset in range(0, len(texts), 100):
            chunk = texts[offset : offset + 100]
            values = ", ".join(
                f"(:log_id, :i{n}, {self._owner.JSON_IN.format(f':t{n}')})" for n in range(len(chunk))
            )
            params: dict[str, Any] = {"log_id": log_id}
            for n, text in enumerate(chunk):
                params[f"i{n}"] = start + offset + n
                params[f"t{n}"] = text
            statement = self._owner._statement(
                f"INSERT INTO {{p}}_items (log_id, idx, value) VALUES {values}"
            )
            self._session.execute(statement, **params)

    def fetch_logs(self, thread_id: str) -> dict[int, LogInfo]:
        rows = self._session.query(self._owner._sql("logs"), thread_id=thread_id)
        return {
            int(row[0]): LogInfo(
                int(row[0]), None if row[1] is None else int(row[1]), int(row[2]), int(row[3])
            )
            for row in rows
        }

    def fetch_items(
        self, thread_id: str, spans: Sequence[tuple[int, int, int]]
    ) -> dict[int, builtins.list[Any]]:
        if not spans:
            return {}
        clauses = " OR ".join(f"(log_id = :l{n} AND idx >= :s{n} AND idx < :e{n})" for n in range(len(spans)))
        params: dict[str, Any] = {}
        for n, (log_id, start, stop) in enumerate(spans):
            params[f"l{n}"], params[f"s{n}"], params[f"e{n}"] = log_id, start, stop
        statement = self._owner._statement(
            f"SELECT log_id, {{jo_value}} FROM {{p}}_items WHERE {clauses} ORDER BY log_id, idx", 0
        )
        found: dict[int, builtins.list[Any]] = {}
        for log_id, value in self._session.query(statement, **params):
            found.setdefault(int(log_id), []).append(serde.decode(value))
        return found
