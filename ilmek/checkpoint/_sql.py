"""The SQL checkpointer: every query written once, for SQLite and Postgres alike.

:class:`SqlCheckpointer` implements the whole port, the holds and the host
API on top of an :class:`~ilmek.dbapi.Adapter`. A backend subclass supplies
its DDL (``SCHEMA`` for a new database, ``UPGRADES`` from each older
version) and a handful of SQL fragments where the dialects differ (how a
JSON parameter is written, how the current time and the holder are read,
how text is searched); everything else is here.

Tables, all named ``<prefix>_<name>``:

* ``meta``: the schema version.
* ``threads``: one row per thread: its latest checkpoint, status, step,
  metadata, times and the failure of its last run; commits compare-and-set
  its ``checkpoint_id``.
* ``checkpoints``: one row per checkpoint; channel values are not here but
  in a *manifest* pointing into ``blobs`` and ``logs`` (see
  :mod:`ilmek.checkpoint._delta`).
* ``blobs``: whole channel values; ``logs`` and ``items``: list channels,
  one row per item.
* ``journals``: one row per recorded step or answer, keyed by thread, the
  checkpoint its superstep ran from, task and key; inserted once, never
  rewritten.
* ``holds``: one row per held thread: the holder's token, its lease, when
  it was taken, and a cancel request if another process made one.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .. import checks
from ..dbapi import Adapter, Pin, Session, Statement, sqlstate
from ..errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    InvalidArgumentError,
    SchemaVersionError,
)
from ..types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    LazyChannels,
    ThreadError,
    ThreadInfo,
    split_task_id,
)
from . import _records
from ._delta import (
    BlobRef,
    ChannelRef,
    LogInfo,
    LogRef,
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
from ._records import EncodedChange
from .base import (
    ANY_LATEST,
    Checkpointer,
    _AnyLatest,
    checkpoints_to_keep,
    concurrent_update_error,
    journal_view,
    missing_parent_error,
    same_channels,
)
from .holds import KEEPER, Hold, busy_error, new_token

__all__ = ["SqlCheckpointer", "SqlHold", "copy_v1_journals", "validate_prefix"]

_LOG = logging.getLogger("ilmek.storage")

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PREFIX = 40
# Rows bound per statement: well under SQLite's default limit of 32,766
# variables and Postgres's 65,535, whatever else the statement binds.
_CHUNK = 500

Migration = str | Callable[[Session, "SqlCheckpointer"], None]


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


_CHECKPOINT_COLUMNS = (
    "checkpoint_id, parent_id, plan_id, step, ts, {jo_manifest}, {jo_next}, {jo_pending}, "
    "{jo_task_journals}, {jo_journal_chain}, {jo_metadata}"
)
_THREAD_COLUMNS = (
    "t.thread_id, t.created_at, t.updated_at, t.status, t.step, t.checkpoint_id, {jo_t_metadata}, "
    "{jo_t_error}, h.acquired_at"
)
# A hold counts while its lease runs and its holder's session is alive.
_LIVE_HOLD = "h.expires_at >= {now} AND NOT ({gone_h})"

# Every query, in named style. ``{p}`` is the table prefix, ``{ji_<col>}``
# wraps a JSON parameter, ``{jo_<col>}`` reads a JSON column as text,
# ``{now}`` is the current time in epoch seconds (the database's clock where
# it has one), ``{holder}`` identifies the writer's session and
# ``{gone_<alias>}`` is true when the session recorded in a hold row ended.
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
        "error = NULL, updated_at = CASE WHEN status <> :status OR updated_at < :now - 1.0 THEN :now "
        "ELSE updated_at END WHERE thread_id = :thread_id AND checkpoint_id = :expected "
        "RETURNING thread_id"
    ),
    # The same move, fenced by the run's hold in the same statement (the hold
    # row is only read, and locked against a takeover until the commit); it
    # returns a cancel request another process may have stored, and the
    # thread's updated_at as it now stands.
    "advance_held_thread": (
        "UPDATE {p}_threads SET checkpoint_id = :checkpoint_id, status = :status, step = :step, "
        "error = NULL, updated_at = CASE WHEN status <> :status OR updated_at < :now - 1.0 THEN :now "
        "ELSE updated_at END WHERE thread_id = :thread_id AND checkpoint_id = :expected "
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
    # is part of the schema). Every argument is cast, so the call
    # means the same through every driver, whatever types it sends.
    "superstep": (
        "SELECT busy, reason, blob_ids, log_ids FROM {p}_superstep(CAST(:thread_id AS text), "
        "CAST(:owner AS text), CAST(:expected AS text), CAST(:checkpoint_id AS text), CAST(:status AS text), "
        "CAST(:step AS bigint), CAST(:now AS double precision), {ji_items}, {ji_blobs}, "
        "CAST(:parent_id AS text), CAST(:plan_id AS text), CAST(:ts AS double precision), {ji_manifest}, "
        "{ji_next}, {ji_pending}, {ji_task_journals}, {ji_journal_chain}, {ji_metadata}, "
        "CAST(:release AS boolean), CAST(:take AS boolean), CAST(:lock_key AS bigint), "
        "CAST(:ttl AS double precision), {ji_drops}, {ji_entries}, {ji_new_logs})"
    ),
    # A resume's answers in one call (where WRITES_IN_ONE_STATEMENT).
    "answer": (
        "SELECT busy, reason, recorded FROM {p}_answer(CAST(:thread_id AS text), CAST(:owner AS text), "
        "CAST(:base_id AS text), CAST(:take AS boolean), CAST(:lock_key AS bigint), "
        "CAST(:ttl AS double precision), {ji_entries})"
    ),
    "start_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}) "
        "ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = excluded.checkpoint_id, "
        "status = excluded.status, step = excluded.step, updated_at = excluded.updated_at, error = NULL "
        "WHERE {p}_threads.checkpoint_id IS NULL RETURNING thread_id"
    ),
    "touch_thread": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, :status, :step, :checkpoint_id, {ji_empty}) "
        "ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, "
        "checkpoint_id = CASE WHEN {newer} THEN excluded.checkpoint_id ELSE {p}_threads.checkpoint_id END, "
        "status = CASE WHEN {newer} THEN excluded.status ELSE {p}_threads.status END, "
        "error = CASE WHEN {newer} THEN NULL ELSE {p}_threads.error END, "
        "step = CASE WHEN {newer} THEN excluded.step ELSE {p}_threads.step END"
    ),
    "thread_latest": "SELECT checkpoint_id FROM {p}_threads WHERE thread_id = :thread_id",
    "record_failure": (
        "UPDATE {p}_threads SET status = 'error', error = {ji_error}, updated_at = :now "
        "WHERE thread_id = :thread_id AND checkpoint_id IS NOT NULL"
    ),
    "insert_blob": (
        "INSERT INTO {p}_blobs (thread_id, channel, value) VALUES (:thread_id, :channel, {ji_value}) "
        "RETURNING blob_id"
    ),
    "insert_log": (
        "INSERT INTO {p}_logs (thread_id, channel, parent_id, base, length) "
        "VALUES (:thread_id, :channel, :parent_id, :base, :length) RETURNING log_id"
    ),
    # Appending to a log claims its next index: taken already means another
    # checkpoint (a fork) extended the log past this one's view of it.
    "append_item": (
        "INSERT INTO {p}_items (log_id, idx, value) SELECT :log_id, :idx, {ji_value} "
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
        "WHERE h.owner = excluded.owner OR h.expires_at < {now} OR {gone_h} RETURNING owner"
    ),
    "fence": (
        "UPDATE {p}_holds SET expires_at = {now} + :ttl, holder = {holder} "
        "WHERE thread_id = :thread_id AND owner = :owner RETURNING cancel_reason"
    ),
    "holds_owner": "SELECT 1 FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner",
    "release_hold": "DELETE FROM {p}_holds WHERE thread_id = :thread_id AND owner = :owner",
    "request_cancel": (
        "UPDATE {p}_holds AS h SET cancel_reason = :reason WHERE thread_id = :thread_id "
        f"AND {_LIVE_HOLD} RETURNING owner"
    ),
    "live_hold": f"SELECT 1 FROM {{p}}_holds AS h WHERE thread_id = :thread_id AND {_LIVE_HOLD}",
    # --- deleting ---
    "delete_items": (
        "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id = :thread_id)"
    ),
    "delete_logs": "DELETE FROM {p}_logs WHERE thread_id = :thread_id",
    "delete_blobs": "DELETE FROM {p}_blobs WHERE thread_id = :thread_id",
    "delete_checkpoints": "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "delete_journals": "DELETE FROM {p}_journals WHERE thread_id = :thread_id",
    "delete_holds": "DELETE FROM {p}_holds WHERE thread_id = :thread_id",
    "delete_thread": "DELETE FROM {p}_threads WHERE thread_id = :thread_id",
    # --- the host API ---
    "thread": (
        f"SELECT {_THREAD_COLUMNS} FROM {{p}}_threads AS t LEFT JOIN {{p}}_holds AS h "
        f"ON h.thread_id = t.thread_id AND {_LIVE_HOLD} WHERE t.thread_id = :thread_id"
    ),
    "put_thread_metadata": (
        "INSERT INTO {p}_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) VALUES (:thread_id, :now, :now, 'done', 0, NULL, {ji_metadata}) "
        "ON CONFLICT (thread_id) DO UPDATE SET metadata = excluded.metadata, updated_at = excluded.updated_at"
    ),
    "lineage": (
        "SELECT checkpoint_id, parent_id, {jo_journal_chain} FROM {p}_checkpoints "
        "WHERE thread_id = :thread_id"
    ),
    "manifests": "SELECT checkpoint_id, {jo_manifest} FROM {p}_checkpoints WHERE thread_id = :thread_id",
    "max_blob": "SELECT MAX(blob_id) FROM {p}_blobs WHERE thread_id = :thread_id",
}


def _epoch(moment: _dt.datetime) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.timestamp()


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _moment(epoch: Any, *, thread_id: str, table: str) -> _dt.datetime:
    """A stored time as an aware datetime, rounded *down* to the microsecond.

    Stored times have digits below the microsecond. Rounding to the nearest
    one could report a time later than the stored one, and that time handed
    back as a bound (``updated_before=info.updated_at``) would then count the
    thread as before it: rounded down, a reported time is never later.
    """
    try:
        stored = float(epoch)
        moment = _EPOCH + _dt.timedelta(microseconds=math.floor(stored * 1_000_000))
        if moment.timestamp() > stored:
            # The product rounded up across a microsecond: the moment as a
            # bound (converted back with timestamp()) would be after the time.
            moment -= _dt.timedelta(microseconds=1)
        return moment
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise _records.corrupt(
            f"a stored time ({epoch!r}) is impossible", thread_id=thread_id, table=table
        ) from exc


def _stored_int(value: Any, *, thread_id: str, table: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _records.corrupt(
            f"a stored number ({value!r}) is not an integer", thread_id=thread_id, table=table
        )
    return value


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


class SqlHold(Hold):
    """A hold stored as a row of the ``holds`` table, with a lease its run renews.

    Attributes:
        pin: The connection the run keeps, through which all its reads and
            writes go (one connection of a pool per run).
        joined: Whether it was taken inside the caller's transaction, where
            no other session can see it (nor needs to renew it).
    """

    def __init__(
        self,
        owner: SqlCheckpointer,
        thread_id: str,
        token: str,
        pin: Pin,
        *,
        lease_seconds: float | None,
        any_thread: bool,
        takeover_at_once: bool,
        taken: bool = True,
    ) -> None:
        super().__init__(thread_id, token, lease_seconds=lease_seconds)
        self._owner = owner
        self.pin = pin
        self.any_thread = any_thread
        self.takeover_at_once = takeover_at_once
        self.taken = taken
        #: The thread's status and updated_at as this run's last commit left
        #: them (None until a commit of this run set them): under the hold
        #: nobody else changes them, so a move that keeps both needs not
        #: assign them.
        self.stamped: tuple[str, float] | None = None

    def take(self) -> None:
        with self.lock:
            if not self.taken:
                self._owner._take_now(self)

    def renew(self) -> None:
        super().renew()
        with self.lock:
            if self.taken:
                self._owner._renew(self)

    def confirm(self) -> None:
        if self.lost:
            super().renew()  # raises HoldLostError
        with self.lock:
            if self.taken:
                self._owner._confirm(self)

    def release(self) -> None:
        try:
            with self.lock:
                if self.taken and not self._released and not self.lost:
                    self._owner._release(self)
        finally:
            self._released = True
            # Given back whether the hold went with the final commit or here.
            self.pin.release()


class SqlCheckpointer(Checkpointer):
    """The port, holds and host API over any DB-API adapter; subclasses add DDL and dialect.

    Attributes:
        SCHEMA: The DDL of a new database at :attr:`SCHEMA_VERSION` (``{p}`` is the prefix).
        UPGRADES: For each older version, the steps (DDL, or a function of
            the session) that bring a database to the next version.
        lease_seconds: How long a hold outlives its last renewal.
    """

    SCHEMA: ClassVar[Sequence[str]] = ()
    UPGRADES: ClassVar[Mapping[int, Sequence[Migration]]] = {}
    SCHEMA_VERSION: ClassVar[int] = 2
    JSON_IN: ClassVar[str] = "{}"
    JSON_OUT: ClassVar[str] = "{}"
    NOW: ClassVar[str] = ":now"
    HOLDER: ClassVar[str] = "NULL"
    HOLDER_GONE: ClassVar[str] = "1 = 0"
    FIND: ClassVar[str] = "instr(lower(t.thread_id), :needle) > 0"
    LOCK_SHARE: ClassVar[str] = ""
    #: Whether an UPDATE that assigns an indexed column rewrites its index
    #: entries even when the value does not change (SQLite does; Postgres
    #: keeps such an update in place).
    REWRITES_ASSIGNED_INDEXES: ClassVar[bool] = False
    #: Whether the schema has a superstep function (Postgres): then a
    #: superstep's writes are one call of it, one round trip.
    WRITES_IN_ONE_STATEMENT: ClassVar[bool] = False
    AUTO_MIGRATE: ClassVar[bool] = False

    def __init__(self, adapter: Adapter, *, table_prefix: str = "ilmek", lease_seconds: float = 5.0) -> None:
        super().__init__()
        # Unquoted SQL identifiers ignore case (Postgres folds them, SQLite
        # compares them case-blind): "Billing" and "billing" are one prefix.
        self.table_prefix = validate_prefix(table_prefix).lower()
        if (
            isinstance(lease_seconds, bool)
            or not isinstance(lease_seconds, (int, float))
            or not lease_seconds > 0
        ):
            raise InvalidArgumentError(f"lease_seconds must be a positive number, got {lease_seconds!r}")
        self.lease_seconds = float(lease_seconds)
        self._adapter = adapter
        self._statements: dict[tuple[str, int], Statement] = {}
        self._cache = ValueCache()
        # Manifests never change once committed: remember the ones this process saw.
        self._manifests = ValueCache(max_bytes=4 * 1024 * 1024)
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    # --- SQL text ---------------------------------------------------------------------

    @classmethod
    def format_sql(cls, template: str, table_prefix: str) -> str:
        """A template with the prefix and the dialect's fragments filled in."""
        p = table_prefix
        columns = (
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
            "items",
            "blobs",
            "drops",
            "new_logs",
        )
        fields: dict[str, str] = {"p": p, "now": cls.NOW, "holder": cls.HOLDER, "lock_share": cls.LOCK_SHARE}
        fields["newer"] = (
            f"({p}_threads.checkpoint_id IS NULL OR {p}_threads.checkpoint_id < excluded.checkpoint_id)"
        )
        for column in columns:
            fields[f"ji_{column}"] = cls.JSON_IN.format(f":{column}")
            fields[f"jo_{column}"] = cls.JSON_OUT.format(column)
            for alias in ("t", "i"):
                fields[f"jo_{alias}_{column}"] = cls.JSON_OUT.format(f"{alias}.{column}")
        fields["ji_empty"] = cls.JSON_IN.format("'{}'")
        fields["gone_h"] = cls.HOLDER_GONE.format(alias="h")
        return template.format(**fields)

    def _format(self, template: str) -> str:
        return self.format_sql(template, self.table_prefix)

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

    def advisory_key(self, thread_id: str) -> int:
        """The key :meth:`advisory_lock` locks for a thread (0 where there are none)."""
        return 0

    def advisory_lock(self, session: Session, thread_id: str, *, wait: bool) -> bool:
        """Serialize holding and deleting one thread within a transaction (where the database can).

        Returns:
            Whether the lock was taken (always, where writers are serialized anyway).
        """
        return True

    # --- schema -----------------------------------------------------------------------

    def table_exists(self, session: Session, table: str) -> bool:
        """Whether ``table`` exists (the dialect knows how to ask)."""
        raise NotImplementedError

    def lock_for_migration(self, session: Session) -> None:
        """Serialize concurrent migrations (SQLite's write lock already does)."""

    @property
    def schema_version(self) -> int:
        """The schema version this code reads and writes."""
        return self.SCHEMA_VERSION

    @classmethod
    def schema_sql(cls, table_prefix: str = "ilmek") -> builtins.list[str]:
        """The SQL that creates the current schema under ``table_prefix``; needs no connection."""
        prefix = validate_prefix(table_prefix).lower()
        statements = [cls.format_sql(s, prefix) for s in cls.SCHEMA]
        statements.append(
            cls.format_sql(
                "INSERT INTO {p}_meta (key, value) VALUES ('schema_version', "
                f"'{cls.SCHEMA_VERSION}') ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                prefix,
            )
        )
        return statements

    def ddl(self) -> builtins.list[str]:
        """The SQL that creates this schema, for operators who run it themselves."""
        return self.schema_sql(self.table_prefix)

    def migrate(self) -> None:
        """Create or upgrade the tables; safe to run again and from several processes at once.

        Raises:
            SchemaVersionError: the database was written by a newer ilmek.
        """

        def work(session: Session) -> int:
            self.lock_for_migration(session)
            found = self._found_version(session)
            if found > self.schema_version:
                raise self._version_error(found)
            if found == 0:
                session.run_script([self._format(s) for s in self.SCHEMA])
            else:
                for version in range(found, self.schema_version):
                    for step in self.UPGRADES[version]:
                        if isinstance(step, str):
                            session.run_script([self._format(step)])
                        else:
                            step(session, self)
            if found != self.schema_version:
                session.execute(self._sql("set_schema_version"), version=str(self.schema_version))
            return found

        found = self._adapter.run(work, what="migrate the schema")
        if found != self.schema_version:
            _LOG.info(
                "migrated the %s_* tables from schema version %d to %d",
                self.table_prefix,
                found,
                self.schema_version,
            )
        self._schema_ready = True

    def _found_version(self, session: Session) -> int:
        if not self.table_exists(session, f"{self.table_prefix}_meta"):
            return 0
        rows = session.query(self._sql("schema_version"))
        if not rows:
            return 0
        try:
            return int(rows[0][0])
        except (TypeError, ValueError) as exc:
            raise SchemaVersionError(
                f"the {self.table_prefix}_meta table holds schema version {rows[0][0]!r}, which is not a "
                "number: the tables were not written by ilmek (use another table_prefix)",
            ) from exc

    def _version_error(self, found: int) -> SchemaVersionError:
        if found > self.schema_version:
            advice = "upgrade ilmek to a version that knows it (or use another table_prefix)"
        else:
            advice = "run migrate() (or `python -m ilmek migrate --db <database>`) to upgrade it"
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
            if not self._schema_ready:
                found = self._adapter.run(self._found_version, what="read the schema version", write=False)
                if found != self.schema_version:
                    if self.AUTO_MIGRATE and found < self.schema_version:
                        self.migrate()
                        return
                    raise self._version_error(found)
                self._schema_ready = True

    def _run(
        self,
        work: Callable[[Session], Any],
        *,
        what: str,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        write: bool = True,
        hold: Hold | None = None,
        takes_hold: bool = False,
        alone: bool = False,
    ) -> Any:
        """Run ``work`` in a transaction, on the hold's connection when there is one.

        A write with a hold not taken yet takes it first, in a transaction of
        its own, unless the work takes it itself (``takes_hold``). ``alone``:
        the work is one statement, which may run as its own transaction.
        Reads may too, statement by statement: what they read never changes
        once written (checkpoints, their items and values) or is read whole
        by one statement (a thread with its hold), and under READ COMMITTED,
        Postgres's default, the statements of one transaction each see a
        snapshot of their own anyway: a BEGIN and a COMMIT around them would
        add two round trips and no consistency.
        """
        alone = alone or not write
        self._ensure_schema()
        if isinstance(hold, SqlHold):
            if write and not hold.taken and not takes_hold:
                hold.take()
            with hold.lock:
                return self._adapter.run(
                    work,
                    what=what,
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                    write=write,
                    pin=hold.pin,
                    alone=alone,
                )
        return self._adapter.run(
            work, what=what, thread_id=thread_id, checkpoint_id=checkpoint_id, write=write, alone=alone
        )

    # --- holds -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[Hold]:
        with self._holding(thread_id, deferred=False) as handle:
            yield handle

    @contextlib.contextmanager
    def deferred_hold(self, thread_id: str) -> Iterator[Hold]:
        # Inside the caller's transaction there is no commit to save.
        with self._holding(thread_id, deferred=not self._adapter.joins) as handle:
            yield handle

    @contextlib.contextmanager
    def _holding(self, thread_id: str, *, deferred: bool) -> Iterator[Hold]:
        thread_id = checks.thread_id(thread_id)
        self._ensure_schema()
        pin = self._adapter.pin()
        joined = self._adapter.joins
        handle = SqlHold(
            self,
            thread_id,
            new_token(),
            pin,
            # Inside the caller's transaction nobody else sees the row: the
            # advisory lock (where there is one) and the caller's write lock
            # keep the thread until the caller commits; nothing to renew.
            lease_seconds=None if joined else self.lease_seconds,
            any_thread=self.any_thread and not joined,
            takeover_at_once=self.HOLDER != "NULL" and not joined,
            taken=False,
        )
        try:
            if not deferred:
                self._take_now(handle)
            yield handle
        except BaseException:
            try:
                handle.release()
            except Exception as error:
                # The failure that ended the run is the one to report; the
                # lease lapses on its own.
                _LOG.warning(
                    "could not give back the hold on thread %r: %s",
                    thread_id,
                    error,
                    extra={"thread_id": thread_id},
                )
            raise
        handle.release()

    def _take(self, session: Session, hold: SqlHold) -> None:
        """Inside a write: take the thread for ``hold``, or raise ThreadBusyError (rolling back)."""
        granted = self.advisory_lock(session, hold.thread_id, wait=False) and session.query(
            self._sql("acquire_hold"),
            thread_id=hold.thread_id,
            owner=hold.token,
            ttl=self.lease_seconds,
            now=time.time(),
        )
        if not granted:
            raise busy_error(hold.thread_id)

    def _take_now(self, hold: SqlHold) -> None:
        """Take a hold that is not taken yet, in a transaction of its own."""
        started = time.monotonic()
        self._adapter.run(
            lambda session: self._take(session, hold),
            what="hold the thread",
            thread_id=hold.thread_id,
            pin=hold.pin,
        )
        self._taken(hold, started)

    def _taken(self, hold: SqlHold, started: float) -> None:
        """The transaction that took ``hold`` (begun at monotonic ``started``) committed."""
        hold.mark_taken()
        hold.renewed(started)
        KEEPER.add(hold)

    @property
    def any_thread(self) -> bool:
        """Whether the connections may be used from any thread (else only from the caller's)."""
        return bool(getattr(self._adapter, "any_thread", False))

    def _fence(self, session: Session, hold: Hold) -> str | None:
        """Inside a write: renew the hold, or fail if it is not the run's any more.

        Returns:
            A cancel request's reason, if another process stored one.
        """
        rows = session.query(
            self._sql("fence"),
            thread_id=hold.thread_id,
            owner=hold.token,
            ttl=self.lease_seconds,
            now=time.time(),
        )
        if not rows:
            raise hold.mark_lost(_HOLD_GONE)
        reason = rows[0][0]
        return reason if isinstance(reason, str) else None

    def _renew(self, hold: SqlHold) -> None:
        started = time.monotonic()
        reason = self._run(
            lambda session: self._fence(session, hold),
            what="renew the hold",
            thread_id=hold.thread_id,
            hold=hold,
        )
        hold.renewed(started, reason)

    def _confirm(self, hold: SqlHold) -> None:
        """A read that the hold's row still carries the run's token (and a live lease)."""
        held = self._run(
            lambda session: bool(
                session.query(self._sql("holds_owner"), thread_id=hold.thread_id, owner=hold.token)
            ),
            what="check the hold",
            thread_id=hold.thread_id,
            write=False,
            hold=hold,
        )
        if not held:
            raise hold.mark_lost(_HOLD_GONE)

    def _release(self, hold: SqlHold) -> None:
        self._run(
            lambda session: session.execute(
                self._sql("release_hold"), thread_id=hold.thread_id, owner=hold.token
            ),
            what="release the hold",
            thread_id=hold.thread_id,
            hold=hold,
        )

    def request_cancel(self, thread_id: str, reason: str = "cancelled") -> bool:
        thread_id = checks.thread_id(thread_id)
        reason = checks.text(reason, "reason")

        def work(session: Session) -> bool:
            rows = session.query(
                self._sql("request_cancel"), thread_id=thread_id, reason=reason, now=time.time()
            )
            return bool(rows)

        asked: bool = self._run(work, what="request a cancel", thread_id=thread_id)
        if asked:
            _LOG.info(
                "asked the run holding thread %r to cancel: %s",
                thread_id,
                reason,
                extra={"thread_id": thread_id},
            )
        return asked

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
        hold: Hold | None = None,
        drop_journals: Sequence[str] = (),
        journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None = None,
        release_hold: bool = False,
    ) -> None:
        thread_id = checks.thread_id(thread_id)
        _records.check_thread(thread_id, checkpoint)
        checks.checkpoint_id(checkpoint.id, "checkpoint.id")
        fields = _records.encode_fields(checkpoint)
        recorded = (
            [
                (
                    journal[0],
                    task_key,
                    _records.stored_key(entry.key),
                    _records.encode_entry(entry, f"task {task_key!r}"),
                )
                for task_key, entries in journal[1].items()
                for entry in entries
            ]
            if journal is not None
            else []
        )
        encoded = _records.encode_changes(changes) if changes is not None else None
        status = checkpoint.status
        now = time.time()
        drops = [_task_scope(task_id) for task_id in drop_journals]
        started = time.monotonic()

        taking = isinstance(hold, SqlHold) and not hold.taken
        # A superstep that appends to lists this process knows, starts new
        # ones and writes values (with the journals it spent or a pause's
        # entries), or a new thread's first checkpoint, is one call of the
        # database's superstep function where it has one; a fork that already
        # grew a list, a list stored whole, or anything unexpected takes the
        # long way.
        if (
            self.WRITES_IN_ONE_STATEMENT
            and isinstance(hold, SqlHold)
            and (isinstance(expect_latest, str) or (expect_latest is None and taking))
            and encoded is not None
        ):
            call = self._superstep_call(
                hold,
                checkpoint,
                fields,
                status,
                expect_latest,
                encoded,
                now,
                release_hold=release_hold,
                taking=taking,
                started=started,
                drops=[(base_id, task_key) for _, base_id, task_key in drops],
                recorded=recorded,
            )
            if call is not None:
                try:
                    self._run(
                        call.run,
                        what="commit a checkpoint",
                        thread_id=thread_id,
                        checkpoint_id=checkpoint.id,
                        hold=hold,
                        takes_hold=True,
                        alone=True,
                    )
                except _LongWay:
                    pass
                else:
                    if release_hold:
                        hold.mark_released()
                    return

        def work(session: Session) -> None:
            if taking:
                # The run's first write takes its hold in the same transaction.
                assert isinstance(hold, SqlHold)
                self._take(session, hold)
            moved, reason = self._advance_thread(
                session, thread_id, checkpoint, status, fields, expect_latest, now, hold
            )
            if not moved:
                # This very commit landed before (its answer was lost).
                if taking:
                    assert isinstance(hold, SqlHold)
                    session.after_commit(lambda: self._taken(hold, started))
                return
            # The move checked the hold; extend its lease only when a quarter
            # of it has passed, so most supersteps leave the hold row alone.
            renewing = hold is not None and not taking and (reason is _NOT_CHECKED or hold.renewal_due())
            if renewing:
                assert hold is not None
                reason = self._fence(session, hold)
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
                found = known or self._manifest(session, thread_id, checkpoint.parent_id)
                if found is None and encoded is not None:
                    raise missing_parent_error(thread_id, checkpoint)
                parent_manifest = found or {}
            keep: set[str] | None = None
            to_write = encoded
            if to_write is None:
                parent_values = read_channels(
                    store, thread_id, parent_manifest, self._cache, remember=not session.joined
                )
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
                journal_chain=fields["chain_text"],
                metadata=fields["metadata_text"],
            )
            if not inserted:
                if self._same_stored(session, thread_id, checkpoint, fields):
                    # A put retried after its COMMIT's answer was lost: the
                    # writes above duplicated nothing that matters, so undo them.
                    raise _AlreadyStored
                raise ConcurrentUpdateError(
                    f"checkpoint {checkpoint.id!r} of thread {thread_id!r} already exists; "
                    "checkpoints are never overwritten: write a new one with a new id",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                )
            for _, base_id, task_key in drops:
                session.execute(
                    self._sql("drop_task_entries"), thread_id=thread_id, base_id=base_id, task_key=task_key
                )
            for base_id, task_key, entry_key, text in recorded:
                session.execute(
                    self._sql("add_entry"),
                    thread_id=thread_id,
                    base_id=base_id,
                    task_key=task_key,
                    entry_key=entry_key,
                    entry=text,
                )
            if release_hold and hold is not None:
                session.execute(self._sql("release_hold"), thread_id=thread_id, owner=hold.token)

            def remember() -> None:
                self._remember_manifest(thread_id, checkpoint.id, manifest)
                extend_cached_logs(self._cache, thread_id, parent_manifest, manifest, to_write)
                if taking:
                    assert isinstance(hold, SqlHold)
                    self._taken(hold, started)
                elif hold is not None:
                    cancel_reason = reason if isinstance(reason, str) else None
                    if renewing:
                        hold.renewed(started, cancel_reason)
                    else:
                        hold.saw_cancel(cancel_reason)

            session.after_commit(remember)

        with contextlib.suppress(_AlreadyStored):
            self._run(
                work,
                what="commit a checkpoint",
                thread_id=thread_id,
                checkpoint_id=checkpoint.id,
                hold=hold,
                takes_hold=True,
            )
        if release_hold and hold is not None:
            hold.mark_released()

    def _superstep_call(
        self,
        hold: SqlHold,
        checkpoint: Checkpoint,
        fields: Mapping[str, str],
        status: str,
        expect_latest: str | None,
        changes: Sequence[EncodedChange],
        now: float,
        *,
        release_hold: bool,
        taking: bool,
        started: float,
        drops: Sequence[tuple[str, str]] = (),
        recorded: Sequence[tuple[str, str, str, str]] = (),
    ) -> _FunctionCall | None:
        """A superstep's writes as one call of the superstep function, or None where it does not apply.

        It applies to a new thread's first checkpoint (no parent, no expected
        latest), and where this process knows the parent's manifest and no
        list written to is stored whole. Planned outside any transaction, so
        the call can run alone (its own transaction, one round trip).
        """
        thread_id = checkpoint.thread_id
        parent: Mapping[str, ChannelRef] | None
        if checkpoint.parent_id is None and expect_latest is None:
            parent = {}
        elif checkpoint.parent_id is None or expect_latest is None:
            return None
        else:
            parent = self._manifests.get((thread_id, checkpoint.parent_id))
        if parent is None or (not taking and hold.renewal_due()):
            return None
        manifest: dict[str, ChannelRef] = dict(parent)
        items: builtins.list[str] = []
        blobs: builtins.list[str] = []
        blob_channels: builtins.list[str] = []
        new_logs: builtins.list[str] = []
        new_channels: builtins.list[tuple[str, int]] = []
        for change in changes:
            if change.items is None:
                assert change.value is not None
                blobs.append(f"[{_records.dump_plain(change.channel)},{change.value}]")
                blob_channels.append(change.channel)
                continue
            ref = manifest.get(change.channel)
            # Each item is already JSON text: the call's arrays are spliced, not re-encoded.
            if ref is None:
                new_logs.append(f"[{_records.dump_plain(change.channel)},[{','.join(change.items)}]]")
                new_channels.append((change.channel, len(change.items)))
                continue
            if not isinstance(ref, LogRef):
                return None  # a list stored whole until now
            items.extend(f"[{ref.log_id},{ref.length + k},{text}]" for k, text in enumerate(change.items))
            manifest[change.channel] = LogRef(ref.log_id, ref.length + len(change.items))
        # The function adds the blobs' and the new lists' references itself.
        plain = manifest_to_plain({name: ref for name, ref in manifest.items() if name not in blob_channels})
        params = {
            "thread_id": thread_id,
            "owner": hold.token,
            "expected": expect_latest,
            "checkpoint_id": checkpoint.id,
            "status": status,
            "step": checkpoint.step,
            "now": now,
            "items": f"[{','.join(items)}]",
            "blobs": f"[{','.join(blobs)}]",
            "parent_id": checkpoint.parent_id,
            "plan_id": checkpoint.plan_id,
            "ts": _epoch(checkpoint.ts),
            "manifest": _records.dump_plain(plain),
            "next": fields["next_text"],
            "pending": fields["pending_text"],
            "task_journals": fields["journals_text"],
            "journal_chain": fields["chain_text"],
            "metadata": fields["metadata_text"],
            "release": release_hold,
            "take": taking,
            "lock_key": self.advisory_key(thread_id),
            "ttl": self.lease_seconds,
            "drops": _records.dump_plain([list(drop) for drop in drops]),
            "new_logs": f"[{','.join(new_logs)}]",
            "entries": _entry_rows(
                ((base_id, task_key, entry_key), text) for base_id, task_key, entry_key, text in recorded
            ),
        }

        def committed(row: tuple[Any, ...]) -> None:
            _, reason, blob_text, log_text = row
            for channel, blob_id in zip(blob_channels, _id_list(blob_text), strict=True):
                manifest[channel] = BlobRef(blob_id)
            for (channel, length), log_id in zip(new_channels, _id_list(log_text), strict=True):
                manifest[channel] = LogRef(log_id, length)
            self._remember_manifest(thread_id, checkpoint.id, manifest)
            extend_cached_logs(self._cache, thread_id, parent, manifest, changes)
            if taking:
                self._taken(hold, started)
            else:
                hold.saw_cancel(reason if isinstance(reason, str) else None)

        return _FunctionCall(self._sql("superstep"), params, committed)

    def _same_stored(
        self, session: Session, thread_id: str, checkpoint: Checkpoint, fields: Mapping[str, str]
    ) -> bool:
        rows = session.query(self._sql("stored_fields"), thread_id=thread_id, checkpoint_id=checkpoint.id)
        if not rows:
            return False
        parent_id, step, next_text, pending_text, metadata_text = rows[0]
        where = {"thread_id": thread_id, "checkpoint_id": checkpoint.id}
        if not (
            parent_id == checkpoint.parent_id
            and step == checkpoint.step
            and _records.load_plain(next_text, **where) == _records.load_plain(fields["next_text"])
            and _records.load_plain(pending_text, **where) == _records.load_plain(fields["pending_text"])
            and _records.load_plain(metadata_text, **where) == _records.load_plain(fields["metadata_text"])
        ):
            return False
        manifest = self._manifest(session, thread_id, checkpoint.id) or {}
        stored = read_channels(_Store(self, session), thread_id, manifest, None)
        return same_channels(stored, checkpoint.channels)

    def _remember_manifest(self, thread_id: str, checkpoint_id: str, manifest: dict[str, ChannelRef]) -> None:
        self._manifests.put((thread_id, checkpoint_id), manifest, 64 * (len(manifest) + 1))

    def _advance_thread(
        self,
        session: Session,
        thread_id: str,
        checkpoint: Checkpoint,
        status: str,
        fields: Mapping[str, str],
        expect_latest: str | _AnyLatest | None,
        now: float,
        hold: Hold | None,
    ) -> tuple[bool, Any]:
        """Move the thread's latest pointer.

        Returns:
            Whether it moved (False: this very commit already landed), and
            the cancel reason stored with the hold when the move checked the
            hold too (else ``_NOT_CHECKED``).
        """
        params = {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint.id,
            "status": status,
            "step": checkpoint.step,
            "now": now,
        }
        reason: Any = _NOT_CHECKED
        if isinstance(expect_latest, _AnyLatest):
            session.execute(self._sql("touch_thread"), **params)
            return True, reason
        if expect_latest is None:
            moved = session.query(self._sql("start_thread"), **params)
        elif hold is not None:
            stamped = hold.stamped if isinstance(hold, SqlHold) else None
            if (
                self.REWRITES_ASSIGNED_INDEXES
                and stamped is not None
                and stamped[0] == status
                and not stamped[1] < now - 1.0
            ):
                # The statement below would keep both: leave their index entries alone.
                moved = session.query(
                    self._sql("advance_held_pointer"),
                    expected=expect_latest,
                    owner=hold.token,
                    thread_id=thread_id,
                    checkpoint_id=checkpoint.id,
                    step=checkpoint.step,
                )
            else:
                moved = session.query(
                    self._sql("advance_held_thread"), expected=expect_latest, owner=hold.token, **params
                )
                if moved and isinstance(hold, SqlHold):
                    stamp = (status, float(moved[0][1]))
                    session.after_commit(lambda: setattr(hold, "stamped", stamp))
            reason = moved[0][0] if moved else None
        else:
            moved = session.query(self._sql("advance_thread"), expected=expect_latest, **params)
        if moved:
            return True, reason
        rows = session.query(self._sql("thread_latest"), thread_id=thread_id)
        found = rows[0][0] if rows else None
        if found == checkpoint.id and self._same_stored(session, thread_id, checkpoint, fields):
            # A retry of a commit whose first try landed but whose answer was
            # lost with the connection: it is done already.
            return False, reason
        if hold is not None and found == expect_latest:
            # The thread is where the run left it, so the hold is what failed.
            self._fence(session, hold)
        raise concurrent_update_error(thread_id, expect_latest, found)

    def _manifest(self, session: Session, thread_id: str, checkpoint_id: str) -> dict[str, ChannelRef] | None:
        rows = session.query(self._sql("manifest"), thread_id=thread_id, checkpoint_id=checkpoint_id)
        if not rows:
            return None
        plain = _records.load_plain(rows[0][0], thread_id=thread_id, checkpoint_id=checkpoint_id)
        return manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return self.load(thread_id, checkpoint_id)

    def load(
        self, thread_id: str, checkpoint_id: str | None = None, *, hold: Hold | None = None
    ) -> Checkpoint | None:
        thread_id = checks.thread_id(thread_id)
        checkpoint_id = checks.latest_or_checkpoint_id(checkpoint_id)

        def work(session: Session) -> Checkpoint | None:
            if checkpoint_id is None:
                rows = session.query(self._sql("latest_checkpoint"), thread_id=thread_id)
            else:
                rows = session.query(
                    self._sql("checkpoint"), thread_id=thread_id, checkpoint_id=checkpoint_id
                )
            if not rows:
                return None
            row = rows[0]
            found_id = row[0]
            plain = _records.load_plain(row[5], thread_id=thread_id, checkpoint_id=found_id)
            manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=found_id)
            values = read_channels(
                _Store(self, session), thread_id, manifest, self._cache, remember=not session.joined
            )
            if not session.joined:
                session.after_commit(lambda: self._remember_manifest(thread_id, found_id, manifest))
            return self._checkpoint(thread_id, row, values)

        result: Checkpoint | None = self._run(
            work, what="read a checkpoint", thread_id=thread_id, write=False, hold=hold
        )
        return result

    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        thread_id = checks.thread_id(thread_id)
        limit = checks.count(limit, "limit", optional=True)
        before = checks.optional_checkpoint_id(before, "before")
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
                params["limit"] = limit
            return session.query(self._statement(template), **params)

        rows = self._run(work, what="list checkpoints", thread_id=thread_id, write=False)
        return [
            self._checkpoint(thread_id, row, self._lazy_values(thread_id, row[0], row[5])) for row in rows
        ]

    def _lazy_values(self, thread_id: str, checkpoint_id: str, stored_manifest: Any) -> LazyChannels:
        plain = _records.load_plain(stored_manifest, thread_id=thread_id, checkpoint_id=checkpoint_id)
        manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)

        def load() -> dict[str, Any]:
            def work(session: Session) -> dict[str, Any]:
                return read_channels(
                    _Store(self, session), thread_id, manifest, self._cache, remember=not session.joined
                )

            values: dict[str, Any] = self._run(
                work, what="read checkpoint values", thread_id=thread_id, write=False
            )
            return values

        return LazyChannels(load)

    @staticmethod
    def _checkpoint(thread_id: str, row: Sequence[Any], channels: Mapping[str, Any]) -> Checkpoint:
        checkpoint_id = row[0]
        where = {"thread_id": thread_id, "checkpoint_id": checkpoint_id}
        if not isinstance(checkpoint_id, str) or not isinstance(row[1], (str, type(None))):
            raise _records.corrupt("its id or parent id is not text", **where)
        return Checkpoint(
            id=checkpoint_id,
            thread_id=thread_id,
            parent_id=row[1],
            plan_id=row[2] if isinstance(row[2], str) else None,
            step=_stored_int(row[3], thread_id=thread_id, table="checkpoints"),
            ts=_moment(row[4], thread_id=thread_id, table="checkpoints"),
            channels=channels,
            next=_records.decode_next(row[6], **where),
            pending=_records.decode_pending(row[7], **where),
            task_journals=_records.decode_task_journals(row[8], **where),
            journal_chain=_records.decode_chain(row[9], **where),
            metadata=_records.decode_metadata(row[10], **where),
        )

    # --- journals ------------------------------------------------------------------------

    def _entries(
        self, session: Session, thread_id: str, bases: Sequence[str], task_key: str | None = None
    ) -> dict[tuple[str, str], builtins.list[JournalEntry]]:
        """Entries recorded from the given base checkpoints, by (base, task key), in order."""
        found: dict[tuple[str, str], builtins.list[JournalEntry]] = {}
        task_condition = " AND task_key = :task_key" if task_key is not None else ""
        for chunk in _chunks(bases):
            template = (
                "SELECT base_id, task_key, {jo_entry} FROM {p}_journals WHERE thread_id = :thread_id "
                f"AND base_id IN ({{in}}){task_condition} ORDER BY entry_id"
            )
            params = {"thread_id": thread_id, **self._in_params(chunk)}
            if task_key is not None:
                params["task_key"] = task_key
            for base_id, key, stored in session.query(self._statement(template, len(chunk)), **params):
                entry = _records.decode_entry(stored, thread_id=thread_id, checkpoint_id=base_id)
                found.setdefault((base_id, key), []).append(entry)
        return found

    def load_journals(
        self, base: Checkpoint, task_keys: Sequence[str], *, hold: Hold | None = None
    ) -> dict[str, tuple[JournalEntry, ...]]:
        sources = [*base.journal_chain, base.id]
        thread_id = base.thread_id

        def work(session: Session) -> dict[tuple[str, str], builtins.list[JournalEntry]]:
            return self._entries(session, thread_id, sources)

        stored = self._run(work, what="read journals", thread_id=thread_id, write=False, hold=hold)
        found = {}
        for key in task_keys:
            entries = journal_view(
                base.task_journals.get(key, ()), [stored.get((source, key), ()) for source in sources]
            )
            if entries:
                found[key] = entries
        return found

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        text = _records.encode_entry(entry, f"task {task_key!r}")
        thread_id = hold.thread_id
        started = time.monotonic()
        renew = hold.renewal_due()

        def work(session: Session) -> str | None:
            reason = self._fence(session, hold) if renew else None
            inserted = session.query(
                self._sql("append_entry"),
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
                entry_key=_records.stored_key(entry.key),
                entry=text,
                owner=hold.token,
            )
            if not inserted and not session.query(
                self._sql("holds_owner"), thread_id=thread_id, owner=hold.token
            ):
                raise hold.mark_lost("its hold row is gone: the thread was deleted, or another run took it")
            if renew:
                session.after_commit(lambda: hold.renewed(started, reason))
            return reason

        # Without a renewal it is one insert (and, only when it inserted
        # nothing, a read of why), so it may be a transaction by itself.
        self._run(work, what="record a step", thread_id=thread_id, hold=hold, alone=not renew)

    def record_answers(
        self, hold: Hold, base_id: str, answers: Mapping[str, Sequence[JournalEntry]]
    ) -> dict[str, tuple[JournalEntry, ...]]:
        encoded = [
            (key, _records.stored_key(entry.key), _records.encode_entry(entry, f"task {key!r}"))
            for key, entries in answers.items()
            for entry in entries
        ]
        thread_id = hold.thread_id
        started = time.monotonic()
        taking = isinstance(hold, SqlHold) and not hold.taken
        if self.WRITES_IN_ONE_STATEMENT and isinstance(hold, SqlHold):
            # One call of the database's answer function, or the long way
            # below when the call finds anything unexpected.
            returned: list[Any] = []
            call = self._answer_call(hold, base_id, encoded, taking=taking, started=started, into=returned)
            try:
                self._run(
                    call.run,
                    what="record the answers",
                    thread_id=thread_id,
                    hold=hold,
                    takes_hold=True,
                    alone=True,
                )
            except _LongWay:
                pass
            else:
                return _recorded_journals(returned, thread_id=thread_id, base_id=base_id)

        def work(session: Session) -> builtins.list[tuple[Any, ...]]:
            if taking:
                # A resume's first write takes its hold in the same transaction;
                # it read the pause without the hold, so the pause must still
                # be the thread's latest checkpoint.
                assert isinstance(hold, SqlHold)
                self._take(session, hold)
                rows = session.query(self._sql("thread_latest"), thread_id=thread_id)
                found = rows[0][0] if rows else None
                if found != base_id:
                    raise concurrent_update_error(thread_id, base_id, found)
                # Nor may anything have been recorded from it since: another
                # resume's answer, or a step that acted on it. The run judged
                # its answers by what it read; under the hold it reads again.
                recorded = session.query(self._sql("base_entries"), thread_id=thread_id, base_id=base_id)
                if not _only_these(recorded, encoded, thread_id=thread_id, base_id=base_id):
                    raise answered_meanwhile_error(thread_id, base_id)
                session.after_commit(lambda: self._taken(hold, started))
            else:
                reason = self._fence(session, hold)
                session.after_commit(lambda: hold.renewed(started, reason))
            for task_key, entry_key, text in encoded:
                session.execute(
                    self._sql("put_entry"),
                    thread_id=thread_id,
                    base_id=base_id,
                    task_key=task_key,
                    entry_key=entry_key,
                    entry=text,
                )
            return session.query(self._sql("base_entries"), thread_id=thread_id, base_id=base_id)

        rows = self._run(work, what="record the answers", thread_id=thread_id, hold=hold, takes_hold=True)
        return _recorded_journals(
            [(task_key, entry) for task_key, _entry_key, entry in rows], thread_id=thread_id, base_id=base_id
        )

    def _answer_call(
        self,
        hold: SqlHold,
        base_id: str,
        encoded: Sequence[tuple[str, str, str]],
        *,
        taking: bool,
        started: float,
        into: builtins.list[Any],
    ) -> _FunctionCall:
        """A resume's answers as one call of the answer function (see record_answers).

        Once it committed, ``into`` holds what is recorded from ``base_id``
        as the function returned it: [task key, entry] pairs, in order.
        """
        # One entry per key, the last one given, as the long way's upserts leave it.
        entries = {(task_key, entry_key): text for task_key, entry_key, text in encoded}
        params = {
            "thread_id": hold.thread_id,
            "owner": hold.token,
            "base_id": base_id,
            "take": taking,
            "lock_key": self.advisory_key(hold.thread_id),
            "ttl": self.lease_seconds,
            "entries": _entry_rows(entries.items()),
        }

        def committed(row: tuple[Any, ...]) -> None:
            if taking:
                self._taken(hold, started)
            else:
                reason = row[1]
                hold.renewed(started, reason if isinstance(reason, str) else None)
            into.extend(
                _records.load_plain(row[2], thread_id=hold.thread_id, checkpoint_id=base_id, table="journals")
            )

        return _FunctionCall(self._sql("answer"), params, committed)

    def record_failure(self, hold: Hold, error: ThreadError) -> None:
        text = _records.encode_thread_error(error)

        def work(session: Session) -> None:
            self._fence(session, hold)
            session.execute(
                self._sql("record_failure"), thread_id=hold.thread_id, error=text, now=time.time()
            )

        self._run(work, what="record the failure", thread_id=hold.thread_id, hold=hold)

    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        self.put_journals({task_id: entries})

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        encoded = [
            (
                _task_scope(task_id),
                [
                    (_records.stored_key(entry.key), _records.encode_entry(entry, f"journal {task_id!r}"))
                    for entry in entries
                ],
            )
            for task_id, entries in journals.items()
        ]
        if not encoded:
            return

        def work(session: Session) -> None:
            for (thread_id, base_id, task_key), rows in encoded:
                session.execute(
                    self._sql("drop_task_entries"), thread_id=thread_id, base_id=base_id, task_key=task_key
                )
                for entry_key, text in rows:
                    session.execute(
                        self._sql("put_entry"),
                        thread_id=thread_id,
                        base_id=base_id,
                        task_key=task_key,
                        entry_key=entry_key,
                        entry=text,
                    )

        self._run(work, what="record a journal", thread_id=encoded[0][0][0])

    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        return self.get_journals([task_id]).get(task_id, ())

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        scopes = {task_id: _task_scope(task_id) for task_id in task_ids}
        if not scopes:
            return {}

        def work(session: Session) -> dict[str, tuple[JournalEntry, ...]]:
            found: dict[str, tuple[JournalEntry, ...]] = {}
            for task_id, (thread_id, base_id, task_key) in scopes.items():
                rows = session.query(self._sql("checkpoint"), thread_id=thread_id, checkpoint_id=base_id)
                carried: tuple[JournalEntry, ...] = ()
                sources = [base_id]
                if rows:
                    where = {"thread_id": thread_id, "checkpoint_id": base_id}
                    carried = _records.decode_task_journals(rows[0][8], **where).get(task_key, ())
                    sources = [*_records.decode_chain(rows[0][9], **where), base_id]
                stored = self._entries(session, thread_id, sources, task_key)
                entries = journal_view(carried, [stored.get((source, task_key), ()) for source in sources])
                if entries:
                    found[task_id] = entries
            return found

        first_thread = next(iter(scopes.values()))[0]
        result: dict[str, tuple[JournalEntry, ...]] = self._run(
            work, what="read journals", thread_id=first_thread, write=False
        )
        return result

    def drop_journal(self, task_id: str) -> None:
        thread_id, base_id, task_key = _task_scope(task_id)
        self._run(
            lambda session: session.execute(
                self._sql("drop_task_entries"), thread_id=thread_id, base_id=base_id, task_key=task_key
            ),
            what="drop a journal",
            thread_id=thread_id,
        )

    # --- deleting -----------------------------------------------------------------------

    _DELETIONS = (
        "delete_items",
        "delete_logs",
        "delete_blobs",
        "delete_checkpoints",
        "delete_journals",
        "delete_holds",
        "delete_thread",
    )

    def delete_thread(self, thread_id: str) -> None:
        thread_id = checks.thread_id(thread_id)

        def work(session: Session) -> None:
            self.advisory_lock(session, thread_id, wait=True)
            for name in self._DELETIONS:
                session.execute(self._sql(name), thread_id=thread_id)

        self._run(work, what="delete the thread", thread_id=thread_id)
        _LOG.info("deleted thread %r", thread_id, extra={"thread_id": thread_id})

    def delete_threads(
        self,
        *,
        updated_before: Any = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> int:
        before = checks.moment(updated_before, "updated_before")
        status = checks.thread_status(status)
        remaining = checks.count(limit, "limit", optional=True)
        if status == "running":
            return 0  # never a thread a live run holds
        deleted = 0
        while remaining is None or remaining > 0:
            batch = _CHUNK if remaining is None else min(_CHUNK, remaining)
            count = self._delete_batch(before, status, batch)
            deleted += count
            if remaining is not None:
                remaining -= count
            if count < batch:
                break
        return deleted

    def _delete_batch(self, before: float | None, status: str | None, batch: int) -> int:
        conditions = [
            f"NOT EXISTS (SELECT 1 FROM {{p}}_holds AS h WHERE h.thread_id = t.thread_id AND {_LIVE_HOLD})"
        ]
        params: dict[str, Any] = {"batch": batch, "now": time.time()}
        if before is not None:
            conditions.append("t.updated_at < :before")
            params["before"] = before
        if status is not None:
            conditions.append("t.status = :status")
            params["status"] = status
        template = (
            f"SELECT t.thread_id FROM {{p}}_threads AS t WHERE {' AND '.join(conditions)} "
            "ORDER BY t.updated_at, t.thread_id LIMIT :batch"
        )

        def work(session: Session) -> int:
            candidates = [row[0] for row in session.query(self._statement(template), **params)]
            return len(self._claim_and_delete(session, candidates))

        deleted: int = self._run(work, what="delete threads")
        if deleted:
            _LOG.info("deleted %d threads", deleted)
        return deleted

    def delete_idle_thread(self, thread_id: str) -> None:
        thread_id = checks.thread_id(thread_id)

        def work(session: Session) -> bool:
            self.advisory_lock(session, thread_id, wait=True)
            if self._claim_and_delete(session, [thread_id]):
                return True
            # Not claimed: either there is no such thread, or a live run holds it.
            if session.query(self._statement(_THREAD_EXISTS), thread_id=thread_id):
                raise busy_error(thread_id)
            return False

        if self._run(work, what="delete the thread", thread_id=thread_id):
            _LOG.info("deleted thread %r", thread_id, extra={"thread_id": thread_id})

    def _claim_and_delete(self, session: Session, candidates: Sequence[str]) -> builtins.list[str]:
        """Inside a write: delete those of ``candidates`` no live run holds; the ids deleted."""
        claimed: builtins.list[str] = []
        token = new_token()
        for chunk in _chunks(candidates):
            # Take the hold of each candidate no live run holds, all in one
            # statement: a run that took one since it was listed keeps it
            # (its row wins), and one that tries now waits for this commit.
            rows = session.query(
                self._statement(_CLAIM_FOR_DELETE, len(chunk)),
                owner=token,
                ttl=self.lease_seconds,
                now=time.time(),
                **self._in_params(chunk),
            )
            claimed.extend(row[0] for row in rows)
        for chunk in _chunks(claimed):
            for deletion in _DELETE_THREADS:
                session.execute(self._statement(deletion, len(chunk)), **self._in_params(chunk))
        return claimed

    # --- host API ----------------------------------------------------------------------------

    def _info(self, row: Sequence[Any]) -> ThreadInfo:
        thread_id = row[0]
        if not isinstance(thread_id, str):
            raise _records.corrupt("a thread id is not text", thread_id=None, table="threads")
        status = row[3]
        if status not in ("done", "interrupted", "unfinished", "error"):
            raise _records.corrupt(f"its status {status!r} is unknown", thread_id=thread_id, table="threads")
        held_since = row[8]
        return ThreadInfo(
            id=thread_id,
            created_at=_moment(row[1], thread_id=thread_id, table="threads"),
            updated_at=_moment(row[2], thread_id=thread_id, table="threads"),
            status=status,
            step=_stored_int(row[4], thread_id=thread_id, table="threads"),
            checkpoint_id=row[5] if isinstance(row[5], str) else None,
            metadata=_records.decode_metadata(row[6], thread_id=thread_id, table="threads"),
            error=_records.decode_thread_error(row[7], thread_id=thread_id) if status == "error" else None,
            running=held_since is not None,
            held_since=_moment(held_since, thread_id=thread_id, table="holds")
            if held_since is not None
            else None,
        )

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        updated_before: Any = None,
        updated_after: Any = None,
    ) -> builtins.list[ThreadInfo]:
        needle = checks.search_text(search)
        wanted = _records.check_metadata_filter(metadata)
        status = checks.thread_status(status)
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        before = checks.moment(updated_before, "updated_before")
        after = checks.moment(updated_after, "updated_after")
        conditions: builtins.list[str] = ["1 = 1"]
        params: dict[str, Any] = {"now": time.time()}
        if needle:
            conditions.append(self.FIND)
            params["needle"] = needle.lower()
        if status == "running":
            conditions.append("h.thread_id IS NOT NULL")
        elif status is not None:
            conditions.append("t.status = :status")
            params["status"] = status
        if before is not None:
            conditions.append("t.updated_at < :before")
            params["before"] = before
        if after is not None:
            conditions.append("t.updated_at >= :after")
            params["after"] = after
        in_python: dict[str, Any] = {}
        for index, (key, value) in enumerate(wanted.items()):
            filtered = self.metadata_filter(index, key, value)
            if filtered is None:
                in_python[key] = value
                continue
            conditions.append(filtered[0])
            params.update(filtered[1])
        page = ""
        if (limit is not None or offset) and not in_python:
            page = " LIMIT :limit OFFSET :offset"
            params["limit"] = limit if limit is not None else checks.MAX_LIMIT
            params["offset"] = offset
        template = (
            f"SELECT {_THREAD_COLUMNS} FROM {{p}}_threads AS t LEFT JOIN {{p}}_holds AS h "
            f"ON h.thread_id = t.thread_id AND {_LIVE_HOLD} WHERE {' AND '.join(conditions)} "
            f"ORDER BY t.updated_at DESC, t.thread_id DESC{page}"
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
        thread_id = checks.thread_id(thread_id)
        rows = self._run(
            lambda session: session.query(self._sql("thread"), thread_id=thread_id, now=time.time()),
            what="read the thread",
            thread_id=thread_id,
            write=False,
        )
        return self._info(rows[0]) if rows else None

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        thread_id = checks.thread_id(thread_id)
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
        thread_id = checks.thread_id(thread_id)
        channel = checks.text(channel, "channel")
        offset = checks.count(offset, "offset") or 0
        limit = checks.count(limit, "limit", optional=True)
        checkpoint_id = checks.optional_checkpoint_id(checkpoint_id)

        def work(session: Session) -> builtins.list[Any]:
            manifest = None
            if checkpoint_id is None:
                rows = session.query(self._sql("latest_checkpoint"), thread_id=thread_id)
                if rows:
                    plain = _records.load_plain(rows[0][5], thread_id=thread_id, checkpoint_id=rows[0][0])
                    manifest = manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=rows[0][0])
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
        thread_id = checks.thread_id(thread_id)
        keep_last = checks.count(keep_last, "keep_last", minimum=1) or 1

        def work(session: Session) -> int:
            lineage: dict[str, str | None] = {}
            chains: dict[str, tuple[str, ...]] = {}
            for checkpoint_id, parent_id, chain in session.query(self._sql("lineage"), thread_id=thread_id):
                lineage[checkpoint_id] = parent_id
                chains[checkpoint_id] = _records.decode_chain(
                    chain, thread_id=thread_id, checkpoint_id=checkpoint_id
                )
            keep = checkpoints_to_keep(builtins.list(lineage), lineage, keep_last)
            dropped = [checkpoint_id for checkpoint_id in lineage if checkpoint_id not in keep]
            if not dropped:
                return 0
            ceiling_rows = session.query(self._sql("max_blob"), thread_id=thread_id)
            ceiling = ceiling_rows[0][0] if ceiling_rows else None
            for chunk in _chunks(dropped):
                session.execute(
                    self._statement(
                        "DELETE FROM {p}_checkpoints WHERE thread_id = :thread_id "
                        "AND checkpoint_id IN ({in})",
                        len(chunk),
                    ),
                    thread_id=thread_id,
                    **self._in_params(chunk),
                )
            used: set[int] = set()
            for checkpoint_id, stored in session.query(self._sql("manifests"), thread_id=thread_id):
                plain = _records.load_plain(stored, thread_id=thread_id, checkpoint_id=checkpoint_id)
                used |= blob_ids(
                    [manifest_from_plain(plain, thread_id=thread_id, checkpoint_id=checkpoint_id)]
                )
            if ceiling is not None:
                # Only blobs that existed when we looked: a commit racing this
                # prune may have written newer ones that it still needs.
                existing = session.query(
                    self._statement(
                        "SELECT blob_id FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id <= :ceiling"
                    ),
                    thread_id=thread_id,
                    ceiling=ceiling,
                )
                unused = [row[0] for row in existing if row[0] not in used]
                for chunk in _chunks(unused):
                    session.execute(
                        self._statement(
                            "DELETE FROM {p}_blobs WHERE thread_id = :thread_id AND blob_id IN ({in})",
                            len(chunk),
                        ),
                        thread_id=thread_id,
                        **self._in_params(chunk),
                    )
            needed = set(keep)
            for checkpoint_id in keep:
                needed.update(chains.get(checkpoint_id, ()))
            bases = [row[0] for row in session.query(self._sql("journal_bases"), thread_id=thread_id)]
            for base_id in bases:
                if base_id not in needed:
                    session.execute(self._sql("drop_base_entries"), thread_id=thread_id, base_id=base_id)
            return len(dropped)

        with self.hold(thread_id) as hold:
            result: int = self._run(work, what="prune checkpoints", thread_id=thread_id, hold=hold)
        return result

    def close(self) -> None:
        self._adapter.close()


def copy_v1_journals(session: Session, checkpointer: SqlCheckpointer) -> None:
    """Upgrade step 1 → 2: one row per task journal (``journals_v1``) becomes one row per entry.

    Journals left by an unfinished superstep are exactly the steps a crashed
    run paid for: they are kept, under the checkpoint their superstep ran from.
    """
    fmt = checkpointer._format
    rows = session.query(Statement(fmt("SELECT task_id, {jo_entries} FROM {p}_journals_v1")))
    insert = Statement(
        fmt(
            "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
            "VALUES (:thread_id, :base_id, :task_key, :entry_key, {ji_entry}) ON CONFLICT DO NOTHING"
        )
    )
    for task_id, stored in rows:
        thread_id, base_id, task_key = _task_scope(task_id)
        try:
            entries = _records.decode_journal(stored, thread_id=thread_id)
        except Exception as error:  # an unreadable old journal is left behind, not fatal
            _LOG.warning("could not carry over the journal of task %r: %s", task_id, error)
            continue
        for entry in entries:
            session.execute(
                insert,
                thread_id=thread_id,
                base_id=base_id,
                task_key=task_key,
                entry_key=_records.stored_key(entry.key),
                entry=_records.encode_entry(entry, f"journal {task_id!r}"),
            )


_CLAIM_FOR_DELETE = (
    "INSERT INTO {p}_holds AS h (thread_id, owner, expires_at, acquired_at, holder, cancel_reason) "
    "SELECT t.thread_id, :owner, {now} + :ttl, {now}, {holder}, NULL FROM {p}_threads AS t "
    "WHERE t.thread_id IN ({in}) "
    "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, "
    "holder = excluded.holder WHERE h.expires_at < {now} OR {gone_h} RETURNING thread_id"
)
"""Hold every listed thread no live run holds, for the deleting transaction; returns those held."""

_THREAD_EXISTS = "SELECT 1 FROM {p}_threads WHERE thread_id = :thread_id"
"""Whether the thread has its row."""

_DELETE_THREADS = (
    "DELETE FROM {p}_items WHERE log_id IN (SELECT log_id FROM {p}_logs WHERE thread_id IN ({in}))",
    "DELETE FROM {p}_logs WHERE thread_id IN ({in})",
    "DELETE FROM {p}_blobs WHERE thread_id IN ({in})",
    "DELETE FROM {p}_checkpoints WHERE thread_id IN ({in})",
    "DELETE FROM {p}_journals WHERE thread_id IN ({in})",
    "DELETE FROM {p}_holds WHERE thread_id IN ({in})",
    "DELETE FROM {p}_threads WHERE thread_id IN ({in})",
)
"""A batch of threads' rows, table by table (the same tables as ``_DELETIONS``)."""

_HOLD_GONE = "its hold row is gone: the thread was deleted, or its lease lapsed and another run took it"
"""Why a run's hold is lost when a fenced write or a check finds its row no longer the run's."""

_NOT_CHECKED = object()
"""The cancel reason of a commit that did not check the hold in its first statement."""


LONG_WAY_SQLSTATE = "IL001"
"""What the schema's functions (superstep, answer) raise, rolling their call back, when the long way
must decide."""


class _FunctionCall:
    """One planned call of a function of the schema: the superstep or the answers (Postgres).

    The function's row starts with ``busy``; ``committed`` gets the whole row
    once the call's transaction has committed.
    """

    def __init__(
        self, statement: Statement, params: dict[str, Any], committed: Callable[[tuple[Any, ...]], None]
    ) -> None:
        self._statement = statement
        self._params = params
        self._committed = committed

    def run(self, session: Session) -> None:
        """Make the call; raises ``_LongWay`` (nothing written) where the long way must decide.

        ThreadBusyError when the run's first write finds the thread held.
        """
        if session.joined:
            raise _LongWay  # inside the caller's transaction: the long way
        try:
            [row] = session.query(self._statement, **self._params)
        except Exception as error:
            if sqlstate(error) == LONG_WAY_SQLSTATE:
                # The function rolled its statement back: the thread moved,
                # the hold is gone, or a list grew past this checkpoint.
                raise _LongWay from None
            raise
        if row[0]:
            raise busy_error(self._params["thread_id"])
        session.after_commit(lambda: self._committed(tuple(row)))


def _entry_rows(rows: Iterable[tuple[Sequence[str], str]]) -> str:
    """A JSON array of journal rows for a schema function: each row's key parts, then its entry.

    Each entry is already JSON text: spliced into the array, not re-encoded.
    """
    return "[{}]".format(",".join(f"[{_records.dump_plain(list(keys))[1:-1]},{text}]" for keys, text in rows))


def _only_these(
    recorded: Iterable[Sequence[Any]],
    encoded: Sequence[tuple[str, str, str]],
    *,
    thread_id: str,
    base_id: str,
) -> bool:
    """Whether the rows recorded from a pause are, at most, the answers about to be written.

    ``recorded`` holds (task key, entry key, entry) rows as read; ``encoded``
    the answers as (task key, entry key, entry text). A retried write meets
    its own answers; anything else (another answer, a step's record) means
    another resume got there first.
    """
    mine = {(task_key, entry_key): text for task_key, entry_key, text in encoded}
    for task_key, entry_key, stored in recorded:
        text = mine.get((task_key, entry_key))
        if text is None or not _records.json_equal(
            _records.load_plain(stored, thread_id=thread_id, checkpoint_id=base_id, table="journals"),
            _records.load_plain(text),
        ):
            return False
    return True


def _recorded_journals(
    pairs: Iterable[Sequence[Any]], *, thread_id: str, base_id: str
) -> dict[str, tuple[JournalEntry, ...]]:
    """(task key, stored entry) pairs, in the order recorded, as entries by task key.

    Decoded as a read decodes them, so a run sees what a later replay sees.
    """
    found: dict[str, builtins.list[JournalEntry]] = {}
    for pair in pairs:
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise _records.corrupt(
                f"a recorded journal row came back as {type(pair).__name__}",
                thread_id=thread_id,
                checkpoint_id=base_id,
                table="journals",
            )
        task_key, stored = pair
        entry = _records.decode_entry(stored, thread_id=thread_id, checkpoint_id=base_id)
        found.setdefault(str(task_key), []).append(entry)
    return {key: tuple(entries) for key, entries in found.items()}


def answered_meanwhile_error(thread_id: str, base_id: str) -> ConcurrentUpdateError:
    """The error for answers whose pause another resume answered, or acted on, after this one read it."""
    return ConcurrentUpdateError(
        f"pause checkpoint {base_id!r} of thread {thread_id!r} was answered or acted on by another "
        "resume after this one read it; nothing was written. Read the thread again and resume "
        "with the answer it holds",
        thread_id=thread_id,
        checkpoint_id=base_id,
    )


def _id_list(text: Any) -> builtins.list[int]:
    """The ids a schema function returned as comma-separated text (``''``: none)."""
    return [int(part) for part in str(text).split(",") if part]


class _LongWay(Exception):
    """Internal: the one-statement commit met something it does not handle; roll back, go the long way."""


class _AlreadyStored(Exception):
    """Internal: a retried write found its own earlier write; roll this one back."""


def _task_scope(task_id: Any) -> tuple[str, str, str]:
    """(thread, base checkpoint, task key) of a task id; an id of another shape is its own thread."""
    task_id = checks.text(task_id, "task_id")
    try:
        return split_task_id(task_id)
    except ValueError:
        return task_id, "", ""


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
        found: dict[int, Any] = {}
        for chunk in _chunks(blob_ids):
            rows = self._session.query(
                self._owner._statement(template, len(chunk)),
                thread_id=thread_id,
                **self._owner._in_params(chunk),
            )
            for blob_id, value in rows:
                found[int(blob_id)] = _records.decode_value(value, thread_id=thread_id, table="blobs")
        return found

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

    def append_items(self, thread_id: str, log_id: int, start: int, texts: Sequence[str]) -> bool:
        claimed = self._session.query(
            self._owner._sql("append_item"), thread_id=thread_id, log_id=log_id, idx=start, value=texts[0]
        )
        if not claimed:
            return False
        if len(texts) > 1:
            self.insert_items(thread_id, log_id, start + 1, texts[1:])
        return True

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
        logs: dict[int, LogInfo] = {}
        for row in rows:
            log_id, parent_id, base = (
                _stored_int(row[0], thread_id=thread_id, table="logs"),
                None if row[1] is None else _stored_int(row[1], thread_id=thread_id, table="logs"),
                _stored_int(row[2], thread_id=thread_id, table="logs"),
            )
            logs[log_id] = LogInfo(log_id, parent_id, base)
        return logs

    def fetch_items(
        self, thread_id: str, spans: Sequence[tuple[int, int, int]]
    ) -> dict[int, builtins.list[Any]]:
        found: dict[int, builtins.list[Any]] = {}
        for start in range(0, len(spans), 100):
            chunk = spans[start : start + 100]
            # Scoped by thread in SQL too: a manifest naming another thread's
            # log (a forged row) reads nothing of that thread.
            clauses = " OR ".join(
                f"(i.log_id = :l{n} AND i.idx >= :s{n} AND i.idx < :e{n})" for n in range(len(chunk))
            )
            params: dict[str, Any] = {"thread_id": thread_id}
            for n, (log_id, lower, upper) in enumerate(chunk):
                params[f"l{n}"], params[f"s{n}"], params[f"e{n}"] = log_id, lower, upper
            statement = self._owner._statement(
                "SELECT i.log_id, {jo_i_value} FROM {p}_items AS i JOIN {p}_logs AS l ON l.log_id = i.log_id "
                f"WHERE l.thread_id = :thread_id AND ({clauses}) ORDER BY i.log_id, i.idx"
            )
            for log_id, value in self._session.query(statement, **params):
                found.setdefault(int(log_id), []).append(
                    _records.decode_value(value, thread_id=thread_id, table="items")
                )
        return found
