"""The SQL checkpointer's schema: versions, creating and upgrading tables, the DDL for operators.

A backend supplies its DDL (``SCHEMA`` for a new database, ``UPGRADES``
from each older version, both in the templates' ``{p}`` form);
:class:`Schema` decides what to run. The scripts for operators who run the
SQL themselves are built here from the same lists, without a connection:
:func:`schema_sql` (create), :func:`upgrade_sql` (from an older version)
and :func:`drop_sql` (remove everything). The one upgrade step that is
Python, not SQL (:func:`copy_v1_journals`), lives here too.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ... import forks
from ...dbapi import Adapter, Session, Statement
from ...errors import InvalidArgumentError, SchemaVersionError
from ...logs import logger
from .. import _records
from .journals import task_scope
from .statements import Statements, format_sql, validate_prefix

if TYPE_CHECKING:
    from .checkpointer import SqlCheckpointer

__all__ = ["Migration", "Schema", "copy_v1_journals", "drop_sql", "schema_sql", "upgrade_sql"]

_LOG = logger("ilmek.storage")

Migration = str | Callable[[Session, "SqlCheckpointer"], None]
"""One upgrade step: DDL in template form, or a function of the session and the checkpointer."""


# What a schema statement creates: its kind and its name (the prefix included).
_CREATES = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(TABLE|INDEX|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
    re.IGNORECASE,
)


def _set_version_sql(dialect: type[SqlCheckpointer], prefix: str, version: int) -> str:
    """The statement that records ``version`` as the schema's, as a literal (for a script)."""
    return format_sql(
        dialect,
        f"INSERT INTO {{p}}_meta (key, value) VALUES ('schema_version', '{int(version)}') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        prefix,
    )


def schema_sql(dialect: type[SqlCheckpointer], table_prefix: str = "ilmek") -> builtins.list[str]:
    """The SQL that creates the current schema under ``table_prefix``; needs no connection."""
    prefix = validate_prefix(table_prefix).lower()
    statements = [format_sql(dialect, s, prefix) for s in dialect.SCHEMA]
    statements.append(_set_version_sql(dialect, prefix, dialect.SCHEMA_VERSION))
    return statements


def upgrade_sql(
    dialect: type[SqlCheckpointer], from_version: int, table_prefix: str = "ilmek"
) -> builtins.list[str]:
    """The SQL that upgrades tables at schema ``from_version`` to the current one; needs no connection.

    The statements are those :meth:`Schema.migrate` runs, in its order, then
    the one that records the new version; run them in one transaction. At
    the current version already, the list is empty.

    Raises:
        InvalidArgumentError: ``from_version`` is not a version this code
            upgrades from (1 up to the current one).
        SchemaVersionError: a step on the way is Python, not SQL (from
            version 1 the journals are copied row by row): no script can do
            it, so run ``migrate()`` (``ilmek migrate``) instead.
    """
    prefix = validate_prefix(table_prefix).lower()
    wanted = dialect.SCHEMA_VERSION
    if isinstance(from_version, bool) or not isinstance(from_version, int) or not 1 <= from_version <= wanted:
        raise InvalidArgumentError(
            f"from_version must be a schema version from 1 to {wanted}, got {from_version!r} "
            "(for a database without ilmek's tables, use schema_sql())"
        )
    statements: builtins.list[str] = []
    for version in range(from_version, wanted):
        for step in dialect.UPGRADES[version]:
            if not isinstance(step, str):
                raise SchemaVersionError(
                    f"the upgrade from schema version {version} to {version + 1} is not SQL alone: "
                    f"{step.__name__} moves rows in Python, which no script can do. Run "
                    "`ilmek migrate --db <database>` (or migrate()) instead: it runs every step "
                    "in one transaction",
                    found=from_version,
                    expected=wanted,
                )
            statements.append(format_sql(dialect, step, prefix))
    if statements:
        statements.append(_set_version_sql(dialect, prefix, wanted))
    return statements


def drop_sql(dialect: type[SqlCheckpointer], table_prefix: str = "ilmek") -> builtins.list[str]:
    """The SQL that removes every table, index and function the schema creates under ``table_prefix``.

    Read from the same statements that create them, so nothing the schema
    has is forgotten; in an order that works (functions, then indexes, then
    tables, the newest first). ``IF EXISTS`` everywhere: running it twice,
    or on a schema half made, is safe. Nothing is dropped ``CASCADE``: an
    object of yours built on ilmek's tables (a view) stops the script
    rather than vanishing with them. Needs no connection.
    """
    prefix = validate_prefix(table_prefix).lower()
    created: dict[str, builtins.list[str]] = {"FUNCTION": [], "INDEX": [], "TABLE": []}
    for statement in schema_sql(dialect, prefix):
        found = _CREATES.match(statement.lstrip())
        if found is not None and found.group(2) not in created[found.group(1).upper()]:
            created[found.group(1).upper()].append(found.group(2))
    # Retired signatures first (an upgraded store may keep them beside the current functions of the same
    # name); then each current function by its name alone, which is then the only one of its name.
    retired = [f"DROP FUNCTION IF EXISTS {old.format(p=prefix)}" for old in dialect.RETIRED_FUNCTIONS]
    return retired + [
        f"DROP {kind} IF EXISTS {name}" for kind, names in created.items() for name in reversed(names)
    ]


class Schema:
    """Whether a checkpointer's tables are at its version, and how they get there."""

    def __init__(self, owner: SqlCheckpointer, adapter: Adapter, statements: Statements) -> None:
        self._owner = owner
        self._adapter = adapter
        self._statements = statements
        self._ready = False
        self._lock = forks.ForkSafeLock()

    @property
    def prefix(self) -> str:
        return self._statements.table_prefix

    def migrate(self) -> None:
        """Create or upgrade the tables; safe to run again and from several processes at once.

        Raises:
            SchemaVersionError: the database was written by a newer ilmek.
        """
        owner = self._owner
        wanted = owner.schema_version

        def work(session: Session) -> int:
            owner.lock_for_migration(session)
            found = self.found_version(session)
            if found > wanted:
                raise self.version_error(found)
            if found == 0:
                session.run_script([self._statements.format(s) for s in owner.SCHEMA])
            else:
                for version in range(found, wanted):
                    for step in owner.UPGRADES[version]:
                        if isinstance(step, str):
                            session.run_script([self._statements.format(step)])
                        else:
                            step(session, owner)
            if found != wanted:
                session.execute(self._statements.named("set_schema_version"), version=str(wanted))
            return found

        found = self._adapter.run(work, what="migrate the schema")
        if found != wanted:
            _LOG.info("migrated the %s_* tables from schema version %d to %d", self.prefix, found, wanted)
        self._ready = True

    def found_version(self, session: Session) -> int:
        """The version the database is at (0: no tables)."""
        if not self._owner.table_exists(session, f"{self.prefix}_meta"):
            return 0
        rows = session.query(self._statements.named("schema_version"))
        if not rows:
            return 0
        try:
            found = int(rows[0][0])
        except (TypeError, ValueError) as exc:
            raise SchemaVersionError(
                f"the {self.prefix}_meta table holds schema version {rows[0][0]!r}, which is not a "
                "number: the tables were not written by ilmek (use another table_prefix)",
            ) from exc
        if found < 1 or (found < self._owner.schema_version and found not in self._owner.UPGRADES):
            raise SchemaVersionError(
                f"the {self.prefix}_meta table holds schema version {rows[0][0]!r}, which no ilmek "
                "ever wrote: the tables were not written by ilmek, or were damaged (use another "
                "table_prefix, or restore them from a backup)",
                found=found,
                expected=self._owner.schema_version,
            )
        return found

    def version_error(self, found: int) -> SchemaVersionError:
        """The error for a database at another version than this code's."""
        wanted = self._owner.schema_version
        if found == 0:
            return SchemaVersionError(
                f"the {self.prefix}_* tables do not exist in this database yet: run migrate() once at boot "
                "(or `python -m ilmek migrate --db <database>`, or the SQL of `ilmek ddl`) to create them",
                found=found,
                expected=wanted,
            )
        if found > wanted:
            advice = "upgrade ilmek to a version that knows it (or use another table_prefix)"
        else:
            advice = "run migrate() (or `python -m ilmek migrate --db <database>`) to upgrade it"
        return SchemaVersionError(
            f"the {self.prefix}_* tables are at schema version {found}, this ilmek uses "
            f"version {wanted}: {advice}",
            found=found,
            expected=wanted,
        )

    def ensure(self, thread_id: str | None = None) -> None:
        """Check the version once per checkpointer (migrating where the backend does so on its own).

        ``thread_id``: the thread whose read or write needs the check, named if it fails.
        """
        if self._ready:
            return
        with self._lock:
            if not self._ready:
                found = self._adapter.run(
                    self.found_version, what="read the schema version", thread_id=thread_id, write=False
                )
                wanted = self._owner.schema_version
                if found != wanted:
                    if self._owner.AUTO_MIGRATE and found < wanted:
                        self.migrate()
                        return
                    raise self.version_error(found)
                self._ready = True


def copy_v1_journals(session: Session, checkpointer: SqlCheckpointer) -> None:
    """Upgrade step 1 → 2: one row per task journal (``journals_v1``) becomes one row per entry.

    Journals left by an unfinished superstep are exactly the steps a crashed
    run paid for: they are kept, under the checkpoint their superstep ran from.
    """
    fmt = checkpointer.statements.format
    rows = session.query(Statement(fmt("SELECT task_id, {jo_entries} FROM {p}_journals_v1")))
    insert = Statement(
        fmt(
            "INSERT INTO {p}_journals (thread_id, base_id, task_key, entry_key, entry) "
            "VALUES (:thread_id, :base_id, :task_key, :entry_key, {ji_entry}) ON CONFLICT DO NOTHING"
        )
    )
    for task_id, stored in rows:
        thread_id, base_id, task_key = task_scope(task_id)
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
