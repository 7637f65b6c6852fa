"""SqlCheckpointer: the port, the holds and the host API over a DB-API adapter, for SQLite and Postgres.

This class is a façade. Each concern lives in a module of its own, and the
port's methods delegate to them:

* :mod:`.statements`: the SQL text, written once, rendered per dialect;
* :mod:`.schema`: versions, creating and upgrading the tables;
* :mod:`.holds`: a run's hold on its thread;
* :mod:`.supersteps`: the commit of a checkpoint (the long way and the one-statement way);
* :mod:`.journals`: steps, answers and failure records;
* :mod:`.reads`: checkpoints and list channels read back;
* :mod:`.threads`: listing, metadata, deleting and pruning threads.

A backend subclass supplies its DDL (``SCHEMA``, ``UPGRADES``) and the SQL
fragments where the dialects differ, as class attributes (how a JSON
parameter is written, how the current time and the holder are read, how
text is searched), and the few hooks that need the database's own
functions (advisory locks, table existence, metadata filters in SQL).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from ... import checks
from ...crypto import Keyring, RekeyCallback, RekeyProgress
from ...dbapi import Adapter, Pin, Session
from ...types import ChannelChange, Checkpoint, JournalEntry, ThreadCancel, ThreadError, ThreadInfo
from .._sealing import Sealer
from ..base import ANY_LATEST, Checkpointer, _AnyLatest
from ..holds import INHERITED, Hold
from ..outbox import OutboxNotice
from .holds import HoldRows, SqlHold
from .journals import Journals
from .notices import NoticeRows
from .reads import Reads
from .rekeying import Rekeying
from .remembered import SqlRemembersLatest
from .schema import Migration, Schema, drop_sql, schema_sql, upgrade_sql
from .statements import Statements, format_sql, validate_prefix
from .supersteps import Supersteps
from .threads import ChildThreadReads, Threads

__all__ = ["SqlCheckpointer"]


class SqlCheckpointer(ChildThreadReads, SqlRemembersLatest, Checkpointer):
    """The port, holds and host API over any DB-API adapter; subclasses add DDL and dialect.

    Attributes:
        SCHEMA: The DDL of a new database at :attr:`SCHEMA_VERSION` (``{p}`` is the prefix).
        UPGRADES: For each older version, the steps (DDL, or a function of
            the session) that bring a database to the next version.
        lease_seconds: How long a hold outlives its last renewal.
        statements: The checkpointer's SQL, rendered for its dialect and prefix.
    """

    SCHEMA: ClassVar[Sequence[str]] = ()
    UPGRADES: ClassVar[Mapping[int, Sequence[Migration]]] = {}
    #: Old schemas' functions an upgraded store keeps, by signature (``{p}``: prefix); drop_sql drops them.
    RETIRED_FUNCTIONS: ClassVar[Sequence[str]] = ()
    SCHEMA_VERSION: ClassVar[int] = 2
    JSON_IN: ClassVar[str] = "{}"
    JSON_OUT: ClassVar[str] = "{}"
    NOW: ClassVar[str] = ":now"
    HOLDER: ClassVar[str] = "NULL"
    FIND: ClassVar[str] = "instr(lower(t.thread_id), :needle) > 0"
    LOCK_SHARE: ClassVar[str] = ""
    #: Whether an UPDATE that assigns an indexed column rewrites its index entries
    #: even when the value does not change (SQLite does; Postgres keeps it in place).
    REWRITES_ASSIGNED_INDEXES: ClassVar[bool] = False
    #: Whether a step's effect waits for a read confirming the run's lease (holders on several machines
    #: share the database; see :attr:`ilmek.checkpoint.holds.Hold.confirms_each_step`).
    CONFIRMS_EACH_STEP: ClassVar[bool] = False
    #: Whether the schema has a superstep function (Postgres): a superstep is one call, one round trip.
    WRITES_IN_ONE_STATEMENT: ClassVar[bool] = False
    AUTO_MIGRATE: ClassVar[bool] = False
    STORES_JSONB: ClassVar[bool] = False  # values read back with keys in jsonb's order (Postgres)

    def __init__(
        self,
        adapter: Adapter,
        *,
        table_prefix: str = "ilmek",
        lease_seconds: float = 5.0,
        cipher: Keyring | None = None,
    ) -> None:
        super().__init__()
        # Unquoted SQL identifiers ignore case (Postgres folds them, SQLite
        # compares them case-blind): "Billing" and "billing" are one prefix.
        self.table_prefix = validate_prefix(table_prefix).lower()
        #: How stored values are sealed (SPEC §7a); bound to the prefix: a row copied elsewhere does not open.
        self.sealer = Sealer(cipher, self.table_prefix)
        self.lease_seconds = checks.seconds(lease_seconds, "lease_seconds", positive=True)
        self._adapter = adapter
        self.statements = Statements(type(self), self.table_prefix)
        self._schema = Schema(self, adapter, self.statements)
        self._holds = HoldRows(self, adapter, self.statements)
        self._reads = Reads(self, self.statements)
        self._journals = Journals(self, self.statements, self._holds)
        self._supersteps = Supersteps(self, self.statements, self._reads, self._holds)
        self._threads = Threads(self, self.statements)
        self._notices = NoticeRows(self, self.statements)

    # --- SQL text and the dialect's hooks ---------------------------------------------

    @classmethod
    def format_sql(cls, template: str, table_prefix: str) -> str:
        """A template with the prefix and the dialect's fragments filled in."""
        return format_sql(cls, template, table_prefix)

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

    def commits_seen(self, pin: Pin) -> object | None:
        """What changes whenever another connection commits to the database (``None``: nothing cheap can).

        Read on the run's connection: equal to the value seen at the last
        check of a hold, nobody can have changed the hold's row since, and
        the check before a step needs no query.
        """
        return None

    def transaction_id(self, session: Session) -> object | None:
        """What tells the session's transaction from any later one, once it wrote (``None``: nothing can).

        A hold taken inside the caller's transaction lasts as long as that
        transaction; this is how the run sees it ended.
        """
        return None

    def table_exists(self, session: Session, table: str) -> bool:
        """Whether ``table`` exists (the dialect knows how to ask)."""
        raise NotImplementedError

    def lock_for_migration(self, session: Session) -> None:
        """Serialize concurrent migrations (SQLite's write lock already does)."""

    # --- schema -----------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        """The schema version this code reads and writes."""
        return self.SCHEMA_VERSION

    @classmethod
    def schema_sql(cls, table_prefix: str = "ilmek") -> builtins.list[str]:
        """The SQL that creates the current schema under ``table_prefix``; needs no connection."""
        return schema_sql(cls, table_prefix)

    @classmethod
    def upgrade_sql(cls, from_version: int, table_prefix: str = "ilmek") -> builtins.list[str]:
        """The SQL that upgrades tables at schema ``from_version`` to :attr:`SCHEMA_VERSION`.

        What :meth:`migrate` would run on such a database, for operators who
        run it themselves (in one transaction); empty at the current
        version. Needs no connection.

        Raises:
            InvalidArgumentError: not a version from 1 to the current one.
            SchemaVersionError: a step on the way is Python, not SQL: run
                :meth:`migrate` (``ilmek migrate``) instead.
        """
        return upgrade_sql(cls, from_version, table_prefix)

    @classmethod
    def drop_sql(cls, table_prefix: str = "ilmek") -> builtins.list[str]:
        """The SQL that removes every table, index and function of the schema under ``table_prefix``.

        Functions first, then indexes, then tables, each ``IF EXISTS`` and
        never ``CASCADE``. It deletes every thread stored there. Needs no
        connection.
        """
        return drop_sql(cls, table_prefix)

    def ddl(self) -> builtins.list[str]:
        """The SQL that creates this schema, for operators who run it themselves."""
        return self.schema_sql(self.table_prefix)

    def migrate(self) -> None:
        """Create or upgrade the tables; safe to run again and from several processes at once.

        Raises:
            SchemaVersionError: the database was written by a newer ilmek.
        """
        self._schema.migrate()

    def ensure_schema(self, thread_id: str | None = None) -> None:
        """Check, once, that the tables are at this code's version (migrating where the backend does)."""
        self._schema.ensure(thread_id)

    # --- transactions -----------------------------------------------------------------

    def transact(
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
        self.ensure_schema(thread_id)
        if isinstance(hold, SqlHold):
            if hold.inherited:
                raise hold.mark_lost(INHERITED)
            if write and not hold.taken and not takes_hold:
                hold.take()
            if hold.joined_in is not None:
                work = self._holds.within_joined(hold, work)
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

    # --- holds ------------------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[Hold]:
        with self._holds.holding(thread_id, deferred=False) as handle:
            yield handle

    @contextlib.contextmanager
    def deferred_hold(self, thread_id: str) -> Iterator[Hold]:
        # Inside the caller's transaction there is no commit to save.
        with self._holds.holding(thread_id, deferred=not self._adapter.joins) as handle:
            yield handle

    @property
    def tasks_on_caller_thread(self) -> bool | None:
        answer = getattr(self._adapter, "tasks_on_caller_thread", None)
        if answer is not None:
            return bool(answer)
        return super().tasks_on_caller_thread

    def worker_finished(self) -> None:
        finished = getattr(self._adapter, "worker_finished", None)
        if callable(finished):
            finished()

    @property
    def any_thread(self) -> bool:
        """Whether the connections may be used from any thread (else only from the caller's)."""
        return bool(getattr(self._adapter, "any_thread", False))

    def request_cancel(self, thread_id: str, reason: str = "cancelled") -> bool:
        return self._holds.request_cancel(thread_id, reason)

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
        notices: Sequence[OutboxNotice] = (),
    ) -> None:
        self._supersteps.commit(
            thread_id,
            checkpoint,
            changes=changes,
            expect_latest=expect_latest,
            hold=hold,
            drop_journals=drop_journals,
            journal=journal,
            release_hold=release_hold,
            notices=notices,
        )

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return self._reads.load(thread_id, checkpoint_id)

    def load(
        self, thread_id: str, checkpoint_id: str | None = None, *, hold: Hold | None = None
    ) -> Checkpoint | None:
        return self._reads.load(thread_id, checkpoint_id, hold=hold)

    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        return self._reads.list(thread_id, limit=limit, before=before)

    def read_channel(
        self,
        thread_id: str,
        channel: str,
        offset: int = 0,
        limit: int | None = None,
        *,
        checkpoint_id: str | None = None,
    ) -> builtins.list[Any]:
        return self._reads.read_channel(thread_id, channel, offset, limit, checkpoint_id=checkpoint_id)

    # --- journals ---------------------------------------------------------------------

    def load_journals(
        self, base: Checkpoint, task_keys: Sequence[str], *, hold: Hold | None = None
    ) -> dict[str, tuple[JournalEntry, ...]]:
        return self._journals.load_journals(base, task_keys, hold=hold)

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        self._journals.append_journal(hold, base_id, task_key, entry)

    def record_answers(
        self, hold: Hold, base_id: str, answers: Mapping[str, Sequence[JournalEntry]]
    ) -> dict[str, tuple[JournalEntry, ...]]:
        return self._journals.record_answers(hold, base_id, answers)

    def record_failure(self, hold: Hold, error: ThreadError) -> None:
        self._journals.record_failure(hold, error)

    def record_cancel(self, hold: Hold, cancel: ThreadCancel) -> None:
        self._journals.record_cancel(hold, cancel)

    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        self._journals.put_journals({task_id: entries})

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        self._journals.put_journals(journals)

    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        return self._journals.get_journals([task_id]).get(task_id, ())

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        return self._journals.get_journals(task_ids)

    def drop_journal(self, task_id: str) -> None:
        self._journals.drop_journal(task_id)

    # --- threads ----------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self._threads.delete_thread(thread_id)

    def delete_threads(
        self,
        *,
        updated_before: Any = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> int:
        return self._threads.delete_threads(updated_before=updated_before, status=status, limit=limit)

    def rekey(self, *, batch: int = 500, progress: RekeyCallback | None = None) -> RekeyProgress:
        batch = checks.count(batch, "batch", minimum=1) or 1
        return Rekeying(self, self.statements).run(batch, progress)

    def delete_idle_thread(self, thread_id: str) -> None:
        self._threads.delete_idle_thread(thread_id)

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        updated_before: Any = None,
        updated_after: Any = None,
        due_before: Any = None,
    ) -> builtins.list[ThreadInfo]:
        return self._threads.list_threads(
            search=search,
            metadata=metadata,
            status=status,
            offset=offset,
            limit=limit,
            updated_before=updated_before,
            updated_after=updated_after,
            due_before=due_before,
        )

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        return self._threads.get_thread(thread_id)

    def read_thread(self, thread_id: str, *, hold: Hold | None = None) -> ThreadInfo | None:
        return self._threads.get_thread(thread_id, hold=hold)

    def due_notices(self, now: float, limit: int | None = None) -> builtins.list[OutboxNotice]:
        return self._notices.due(now, limit)

    def notice_delivered(self, notice_id: str) -> None:
        self._notices.delivered(notice_id)

    def notice_failed(self, notice_id: str, retry_at: float) -> None:
        self._notices.failed(notice_id, retry_at)

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        self._threads.put_thread_metadata(thread_id, metadata)

    def prune(self, thread_id: str, keep_last: int) -> int:
        return self._threads.prune(thread_id, keep_last)

    def close(self) -> None:
        self._adapter.close()
