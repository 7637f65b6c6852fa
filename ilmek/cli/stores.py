"""Which store a command names, and opening it: ``--db``, else ``$ILMEK_DB``, else the default file.

A store is a SQLite file path, a ``postgresql://`` URL or a libpq keyword
string (``host=... dbname=...``). Messages show a store with its password
masked, and no password the command line carries reaches stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
from collections.abc import Iterator, Sequence
from typing import Final

# The CLI's one import of the SQL checkpointer's module: the other modules of
# ilmek.cli take these names from here (`as`: an explicit re-export).
from ..checkpoint.sql import SqlCheckpointer as SqlCheckpointer
from ..checkpoint.sql import validate_prefix as validate_prefix
from ..checkpoint.sqlite import DEFAULT_PATH, SqliteCheckpointer
from ..errors import IlmekError, StorageError
from ..redact import dsn_secrets, mask_dsn
from .failures import _CommandFailed
from .output import _one_line, _shorten

DATABASE_ENV: Final = "ILMEK_DB"
"""The environment variable that names the store when ``--db`` is not given."""

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# A libpq keyword string starts with one of libpq's keywords and `=`: only
# those, so that a file named `notes=old.db` stays a file.
_LIBPQ_KEYWORDS = frozenset(
    {
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
        "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
        "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
        "requiressl", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword",
        "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
        "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
        "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
    }
)  # fmt: skip
_KEYWORD_DSN = re.compile(r"\s*([A-Za-z_]+)\s*=")


def _shown_database(database: str) -> str:
    """A database as messages show it: password masked, shortened."""
    return _shorten(mask_dsn(database))


def _is_postgres(database: str) -> bool:
    """Whether ``database`` names a Postgres server (a URL or a libpq keyword string)."""
    if database.lstrip().startswith(_POSTGRES_SCHEMES):
        return True
    keyword = _KEYWORD_DSN.match(database)
    return keyword is not None and keyword.group(1) in _LIBPQ_KEYWORDS


def _unsupported(database: str) -> str:
    return (
        f"unsupported database URL {_shown_database(database)!r}: give a SQLite file path, "
        "a postgresql:// URL or a libpq keyword string (host=... dbname=...)"
    )


def open_checkpointer(database: str | os.PathLike[str], table_prefix: str = "ilmek") -> SqlCheckpointer:
    """Open the checkpointer a command line names: a SQLite path or a Postgres DSN.

    Args:
        database: A file path (created, with its folders, if missing), a
            ``postgresql://`` / ``postgres://`` URL, or a libpq keyword string
            such as ``host=db dbname=shop`` (it must start with a libpq
            keyword; write ``./host=x.db`` for a file of that name).
        table_prefix: The prefix of the store's tables.

    Returns:
        A checkpointer that owns its connections; close it when done.

    Raises:
        ValueError: an empty ``database``, an invalid ``table_prefix``, or a
            URL of another scheme.
        ImportError: a Postgres DSN, but no Postgres driver is installed.
    """
    target = os.fspath(database)
    if not target.strip():
        raise ValueError("the database is empty: give a SQLite file path or a postgresql:// URL")
    if _is_postgres(target):
        # Imported here: a SQLite user never loads the Postgres backend.
        from ..checkpoint.postgres import PostgresCheckpointer

        # libpq reads a URL only from the first character on.
        return PostgresCheckpointer.connect(target.strip(), table_prefix=table_prefix)
    if _URL.match(target.lstrip()):
        raise ValueError(_unsupported(target))
    return SqliteCheckpointer(target, table_prefix=table_prefix)


def _database(args: argparse.Namespace) -> str:
    if args.db:
        return str(args.db)
    # An empty ILMEK_DB reads as unset, as shells write "unset" that way.
    return os.environ.get(DATABASE_ENV) or str(DEFAULT_PATH.expanduser())


@contextlib.contextmanager
def _opened(args: argparse.Namespace, *, create: bool = False) -> Iterator[SqlCheckpointer]:
    """The store the arguments name, closed afterwards.

    Without ``create``, a SQLite file that does not exist is an error rather
    than a new empty file: ``ilmek threads --db typo.db`` must not leave
    ``typo.db`` behind. Every way opening can fail becomes one message.
    """
    database = _database(args)
    shown = _shown_database(database)
    try:
        if not _is_postgres(database):
            if _URL.match(database.lstrip()):
                raise _CommandFailed(_unsupported(database))
            if not create and not pathlib.Path(database).expanduser().exists():
                raise _CommandFailed(f"no database at {shown} (nothing has been stored there yet)")
        checkpointer = open_checkpointer(database, args.table_prefix)
    except StorageError as error:
        # The driver's own words (a refused connection, a malformed DSN, a file
        # that is not a database), chained under ilmek's: what the user needs.
        raise _CommandFailed(f"cannot open {shown}: {_one_line(str(error.__cause__ or error))}") from error
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


def _secrets_in(argv: Sequence[str]) -> tuple[str, ...]:
    """Every password the command line or ``ILMEK_DB`` carries, to keep out of messages."""
    words = [*argv, os.environ.get(DATABASE_ENV, "")]
    return tuple(secret for word in words for secret in dsn_secrets(word))
