"""The schema commands: ``migrate`` creates or upgrades a store's tables, ``ddl`` prints their SQL.

``ddl`` prints, without connecting, the SQL that creates the tables, that
upgrades them from an older schema version (``--from-version N``) or that
removes them (``--drop``); the SQL itself is built by the checkpointer
classes (:meth:`~ilmek.checkpoint.sql.SqlCheckpointer.schema_sql`,
``upgrade_sql``, ``drop_sql``), never here.
"""

from __future__ import annotations

import argparse

from .arguments import Subcommands, _database_argument, _json_option, _positive
from .output import _print_json, _say
from .stores import SqlCheckpointer, _database, _is_postgres, _opened, _shown_database, _sqlite_path

_DIALECTS = ("postgres", "sqlite")


def _cmd_migrate(args: argparse.Namespace) -> int:
    if args.database is not None:
        args.db = args.database
    with _opened(args, create=True) as checkpointer:
        checkpointer.migrate()
        prefix, version = checkpointer.table_prefix, checkpointer.schema_version
    if args.json:
        _print_json(
            {"database": _shown_database(_database(args)), "table_prefix": prefix, "schema_version": version}
        )
    else:
        _say(f"{prefix}_* tables up to date, schema version {version}")
    return 0


def add_migrate_parser(commands: Subcommands) -> None:
    """Add ``migrate``, which creates or upgrades the tables, to the commands."""
    migrate = commands.add("migrate", _cmd_migrate, "Create or upgrade the store's tables.")
    migrate.add_argument(
        "database",
        type=_database_argument,
        nargs="?",
        metavar="DATABASE",
        help="the store, as with --db (which it overrides)",
    )
    _json_option(
        migrate, '{"database" (its password masked), "table_prefix", "schema_version" (now current)}'
    )


def _dialect_class(dialect: str) -> type[SqlCheckpointer]:
    """The checkpointer class whose SQL ``ddl`` prints for ``dialect`` (imported only when asked)."""
    if dialect == "postgres":
        from ..checkpoint.postgres import PostgresCheckpointer

        return PostgresCheckpointer
    from ..checkpoint.sqlite import SqliteCheckpointer

    return SqliteCheckpointer


def _ddl_statements(args: argparse.Namespace, dialect: str) -> list[str]:
    """The statements ``ddl`` prints: the create, upgrade or drop script, built without a connection."""
    checkpointer_class = _dialect_class(dialect)
    if args.drop:
        return checkpointer_class.drop_sql(args.table_prefix)
    if args.from_version is not None:
        # A step that is Python (not SQL) is a SchemaVersionError saying to run `ilmek migrate`.
        return checkpointer_class.upgrade_sql(args.from_version, args.table_prefix)
    return checkpointer_class.schema_sql(args.table_prefix)


def _cmd_ddl(args: argparse.Namespace) -> int:
    dialect = args.dialect
    if dialect is None:
        # The store's form says its dialect; nothing is opened or created.
        database = _database(args)
        if _is_postgres(database):
            dialect = "postgres"
        else:
            _sqlite_path(database)  # another scheme, or a malformed sqlite:// URL, is refused
            dialect = "sqlite"
    statements = _ddl_statements(args, dialect)
    if args.json:
        _print_json(statements)
        return 0
    if not statements:
        # An SQL comment: the output stays a script a client can run.
        version = _dialect_class(dialect).SCHEMA_VERSION
        _say(f"-- schema version {version} is the current one: nothing to upgrade")
    for statement in statements:
        _say(f"{statement};")
    return 0


def add_ddl_parser(commands: Subcommands) -> None:
    """Add ``ddl``, which prints the tables' SQL, to the commands."""
    ddl = commands.add(
        "ddl",
        _cmd_ddl,
        "Print the SQL that creates the store's tables (or upgrades or drops them), for running it "
        "yourself; connects to nothing.",
    )
    ddl.add_argument(
        "--dialect",
        choices=_DIALECTS,
        help="the database's dialect (default: the kind of store --db names)",
    )
    script = ddl.add_mutually_exclusive_group()
    script.add_argument(
        "--drop",
        action="store_true",
        help="print the SQL that removes every table, index and function of the prefix instead "
        "(it deletes every thread stored there)",
    )
    script.add_argument(
        "--from-version",
        type=_positive,
        metavar="N",
        help="print only the SQL that upgrades tables at schema version N to the current one "
        "(run it in one transaction); where a step is not SQL alone, run `ilmek migrate` instead",
    )
    _json_option(ddl, "a list of the statements, each without its closing semicolon")
