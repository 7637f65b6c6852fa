"""Which store a command names, and opening it: ``--db``, else ``$ILMEK_DB``, else the default file.

A store is a SQLite file path, a ``postgresql://`` URL or a libpq keyword
string (``host=... dbname=...``). Messages show a store with its password
masked, and no password the command line carries reaches stderr.

Two ways of opening serve a long-running command (``ilmek web``): a
*read-only* SQLite file, opened with SQLite's own read-only mode and its
schema checked without a write (nothing is created or migrated), and a
Postgres store through a small pool of the command's own, so that a
connection the server drops is replaced on the next request.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

# The CLI's one import of the SQL checkpointer's module: the other modules of
# ilmek.cli take these names from here (`as`: an explicit re-export).
from ..checkpoint.sql import SqlCheckpointer as SqlCheckpointer
from ..checkpoint.sql import validate_prefix as validate_prefix
from ..checkpoint.sql.statements import LIVE_HOLD as LIVE_HOLD
from ..checkpoint.sqlite import DEFAULT_PATH, SqliteCheckpointer
from ..connecting import sqlite_target, store_kind
from ..errors import IlmekError, InvalidArgumentError, StorageError

if TYPE_CHECKING:
    from ..crypto import Keyring
from ..redact import dsn_secrets, mask_dsn
from .failures import _CommandFailed
from .output import _one_line, _shorten

DATABASE_ENV: Final = "ILMEK_DB"
"""The environment variable that names the store when ``--db`` is not given."""


def _shown_database(database: str) -> str:
    """A database as messages show it: password masked, shortened."""
    return _shorten(mask_dsn(database))


def _is_postgres(database: str) -> bool:
    """Whether ``database`` names a Postgres server (a URL or a libpq keyword string)."""
    return store_kind(database) == "postgres"


def _sqlite_path(database: str) -> str:
    """The SQLite file a non-Postgres ``--db`` names (a path, or a ``sqlite:///`` URL's file).

    Raises:
        InvalidArgumentError: a URL of another scheme, or a malformed ``sqlite://`` URL.
    """
    kind = store_kind(database)
    if kind == "sqlite-url":
        return sqlite_target(database)
    if kind == "other-url":
        raise InvalidArgumentError(
            f"unsupported database URL {_shown_database(database)!r}: give a SQLite file path, "
            "a sqlite:/// URL, a postgresql:// URL or a libpq keyword string (host=... dbname=...)"
        )
    return database


def open_checkpointer(
    database: str | os.PathLike[str], table_prefix: str = "ilmek", *, cipher: Keyring | None = None
) -> SqlCheckpointer:
    """Open the checkpointer a command line names: a SQLite path or a Postgres DSN.

    Args:
        database: A file path (created, with its folders, if missing), a
            ``sqlite:///`` URL (read as :func:`ilmek.connect` reads it), a
            ``postgresql://`` / ``postgres://`` URL, or a libpq keyword string
            such as ``host=db dbname=shop`` (it must start with a libpq
            keyword; write ``./host=x.db`` for a file of that name).
        table_prefix: The prefix of the store's tables.
        cipher: The store's keyring, if it is encrypted at rest.

    Returns:
        A checkpointer that owns its connections; close it when done.

    Raises:
        ValueError: an empty ``database``, an invalid ``table_prefix``, a
            URL of another scheme or a malformed ``sqlite://`` URL.
        ImportError: a Postgres DSN, but no Postgres driver is installed.
    """
    target = os.fspath(database)
    if not target.strip():
        raise ValueError("the database is empty: give a SQLite file path or a postgresql:// URL")
    if _is_postgres(target):
        # Imported here: a SQLite user never loads the Postgres backend.
        from ..checkpoint.postgres import PostgresCheckpointer

        # libpq reads a URL only from the first character on.
        return PostgresCheckpointer.connect(target.strip(), table_prefix=table_prefix, cipher=cipher)
    return SqliteCheckpointer(_sqlite_path(target), table_prefix=table_prefix, cipher=cipher)


def _open_read_only(
    path: str, table_prefix: str, shown: str, cipher: Keyring | None
) -> tuple[SqlCheckpointer, Any]:
    """A SQLite file opened read-only, at this ilmek's schema; the checkpointer and its connection.

    SQLite itself refuses every write on the connection (``mode=ro``), and the
    schema is checked by reading: a file without ilmek's tables, or at another
    schema version, is refused rather than created or migrated.
    """
    import sqlite3

    prefix = validate_prefix(table_prefix).lower()
    file = pathlib.Path(path).expanduser().resolve()
    if file.is_dir():
        # SQLite's read-only mode would say "disk I/O error"; every other command says this.
        raise _CommandFailed(f"cannot open {shown}: unable to open database file")
    # One connection, shared under the checkpointer's lock, from every request thread.
    connection = sqlite3.connect(
        file.as_uri() + "?mode=ro", uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
    )
    try:
        has_meta = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (f"{prefix}_meta",)
        ).fetchone()
        row = (
            connection.execute(f"SELECT value FROM {prefix}_meta WHERE key = 'schema_version'").fetchone()
            if has_meta
            else None
        )
        if row is None:
            raise _CommandFailed(
                f"no ilmek tables (prefix {prefix!r}) in {shown}: nothing has been stored there "
                "yet, and a read-only console creates nothing"
            )
        found, wanted = str(row[0]), SqliteCheckpointer.SCHEMA_VERSION
        if not found.isdigit():
            raise _CommandFailed(
                f"the {prefix}_meta table holds schema version {found!r}, which is not a number: "
                "the tables were not written by ilmek (use another --table-prefix)"
            )
        if int(found) != wanted:
            advice = (
                "upgrade ilmek to a version that knows it (or use another --table-prefix)"
                if int(found) > wanted
                else "a read-only console changes nothing: run `ilmek migrate` first"
            )
            raise _CommandFailed(
                f"the {prefix}_* tables are at schema version {found}, this ilmek uses version {wanted}: "
                + advice
            )
        return SqliteCheckpointer(connection, table_prefix=table_prefix, cipher=cipher), connection
    except BaseException:
        connection.close()
        raise


def _postgres_pool(dsn: str, size: int) -> Any:
    """A pool of the command's own on ``dsn`` (psycopg2's, else psycopg_pool's), or ``None`` if neither."""
    try:
        import psycopg2.pool
    except ImportError:
        try:
            import psycopg_pool
        except ImportError:
            return None
        return psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=size, open=True)
    return psycopg2.pool.ThreadedConnectionPool(1, size, dsn)


def _close_pool(pool: Any) -> None:
    # psycopg2's pools close with closeall(), psycopg_pool's with close().
    closing = getattr(pool, "closeall", None) or pool.close
    closing()


def _database(args: argparse.Namespace) -> str:
    if args.db:
        return str(args.db)
    # An empty ILMEK_DB reads as unset, as shells write "unset" that way.
    return os.environ.get(DATABASE_ENV) or str(DEFAULT_PATH.expanduser())


@contextlib.contextmanager
def _opened(
    args: argparse.Namespace,
    *,
    create: bool = False,
    read_only: bool = False,
    pool_size: int = 0,
    synchronous: str = "FULL",
) -> Iterator[SqlCheckpointer]:
    """The store the arguments name, closed afterwards.

    Without ``create``, a SQLite file that does not exist is an error rather
    than a new empty file: ``ilmek threads --db typo.db`` must not leave
    ``typo.db`` behind. With ``read_only``, a SQLite file is opened so that
    nothing can be written to it (see :func:`_open_read_only`). With a
    ``pool_size``, a Postgres store is opened through a pool of that many
    connections at most, which replaces a connection the server dropped.
    ``synchronous``: SQLite's pragma on the command's own connections (see
    :class:`~ilmek.checkpoint.sqlite.SqliteCheckpointer`). Every way opening
    can fail becomes one message.
    """
    database = _database(args)
    shown = _shown_database(database)
    # What is ours besides the checkpointer (a read-only connection, a pool) closes after it.
    with contextlib.ExitStack() as owned:
        try:
            if not _is_postgres(database):
                database = _sqlite_path(database)
                exists = database == ":memory:" or pathlib.Path(database).expanduser().exists()
                if not create and not exists:
                    raise _CommandFailed(f"no database at {shown} (nothing has been stored there yet)")
            cipher = keyring_of(args)
            checkpointer = _open(
                database, args.table_prefix, shown, owned, read_only, pool_size, synchronous, cipher
            )
        except StorageError as error:
            # The driver's own words (a refused connection, a malformed DSN, a file
            # that is not a database), chained under ilmek's: what the user needs.
            said = _one_line(str(error.__cause__ or error))
            raise _CommandFailed(f"cannot open {shown}: {said}") from error
        except (IlmekError, _CommandFailed):
            raise
        except ImportError as error:
            raise _CommandFailed(
                f"cannot open {shown}: PostgreSQL support is not available ({error}); "
                "install it with: pip install 'ilmek[postgres]'"
            ) from error
        except OSError as error:
            # Its own text repeats the file name, which may be thousands of characters.
            raise _CommandFailed(f"cannot open {shown}: {error.strerror or error}") from error
        except Exception as error:
            # A driver's own error (a refused connection, a malformed DSN, a file
            # that is not a database): the user needs its message, not a traceback.
            raise _CommandFailed(f"cannot open {shown}: {_one_line(str(error))}") from error
        try:
            yield checkpointer
        finally:
            checkpointer.close()


def _open(
    database: str,
    table_prefix: str,
    shown: str,
    owned: contextlib.ExitStack,
    read_only: bool,
    pool_size: int,
    synchronous: str,
    cipher: Keyring | None,
) -> SqlCheckpointer:
    """The checkpointer for :func:`_opened`; what else it opens is closed by ``owned``."""
    if read_only and not _is_postgres(database):
        checkpointer, connection = _open_read_only(database, table_prefix, shown, cipher)
        owned.callback(connection.close)
        return checkpointer
    if pool_size and _is_postgres(database):
        pool = _postgres_pool(database.strip(), pool_size)
        if pool is not None:
            from ..checkpoint.postgres import PostgresCheckpointer

            owned.callback(_close_pool, pool)
            return PostgresCheckpointer(pool, table_prefix=table_prefix, cipher=cipher)
    if synchronous != "FULL" and not _is_postgres(database):
        return SqliteCheckpointer(database, table_prefix=table_prefix, synchronous=synchronous, cipher=cipher)
    return open_checkpointer(database, table_prefix, cipher=cipher)


def keyring_of(args: argparse.Namespace) -> Keyring | None:
    """The keyring ``--keys-env VAR`` names (read from that variable), or ``None`` without the option.

    Raises:
        InvalidArgumentError: the variable is unset or malformed (never showing a key).
    """
    variable = getattr(args, "keys_env", None)
    if not variable:
        return None
    from ..crypto import Keyring

    return Keyring.from_env(variable)


def _secrets_in(argv: Sequence[str]) -> tuple[str, ...]:
    """Every password the command line or ``ILMEK_DB`` carries, to keep out of messages."""
    words = [*argv, os.environ.get(DATABASE_ENV, "")]
    return tuple(secret for word in words for secret in dsn_secrets(word))
