"""The schema commands: ``migrate`` creates or upgrades a store's tables, ``ddl`` prints their SQL."""

from __future__ import annotations

import argparse

from .arguments import Subcommands, _database_argument
from .failures import _CommandFailed
from .output import _say
from .stores import _URL, SqlCheckpointer, _database, _is_postgres, _opened, _unsupported

_DIALECTS = ("postgres", "sqlite")


def _cmd_migrate(args: argparse.Namespace) -> int:
    if args.database is not None:
        args.db = args.database
    with _opened(args, create=True) as checkpointer:
        checkpointer.migrate()
        _say(f"{checkpointer.table_prefix}_* tables up to date, schema version {checkpointer.schema_version}")
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


def _ddl_statements(dialect: str, table_prefix: str) -> list[str]:
    """What ``SqlCheckpointer.ddl()`` returns for ``dialect``, built without a connection."""
    checkpointer_class: type[SqlCheckpointer]
    if dialect == "postgres":
        from ..checkpoint.postgres import PostgresCheckpointer

        checkpointer_class = PostgresCheckpointer
    else:
        from ..checkpoint.sqlite import SqliteCheckpointer

        checkpointer_class = SqliteCheckpointer
    return checkpointer_class.schema_sql(table_prefix)


def _cmd_ddl(args: argparse.Namespace) -> int:
    dialect = args.dialect
    if dialect is None:
        # The store's form says its dialect; nothing is opened or created.
        database = _database(args)
        if _is_postgres(database):
            dialect = "postgres"
        elif _URL.match(database.lstrip()):
            raise _CommandFailed(_unsupported(database))
        else:
            dialect = "sqlite"
    for statement in _ddl_statements(dialect, args.table_prefix):
        _say(f"{statement};")
    return 0


def add_ddl_parser(commands: Subcommands) -> None:
    """Add ``ddl``, which prints the tables' SQL, to the commands."""
    ddl = commands.add(
        "ddl",
        _cmd_ddl,
        "Print the SQL that creates the store's tables, for running it yourself; connects to nothing.",
    )
    ddl.add_argument(
        "--dialect",
        choices=_DIALECTS,
        help="the database's dialect (default: the kind of store --db names)",
    )
