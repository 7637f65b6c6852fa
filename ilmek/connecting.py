"""Opening a store from what the command line's ``--db`` takes: :func:`connect`.

What belongs here: telling a SQLite path, a ``sqlite:///`` URL, a
``postgresql://`` URL and a libpq keyword string apart, and opening the
matching backend migrated and ready. The CLI and the console open their
stores through the same rules, so a ``--db`` value and ``ilmek.connect``
always name the same store.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import unquote

from .errors import InvalidArgumentError
from .redact import mask_dsn

if TYPE_CHECKING:
    from .checkpoint.sql import SqlCheckpointer

__all__ = ["connect", "sqlite_target", "store_kind"]

_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
_SQLITE_SCHEME: Final = "sqlite://"
_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# A libpq keyword string starts with one of libpq's keywords and `=`: only
# those, so that a file named `notes=old.db` stays a file.
_LIBPQ_KEYWORDS: Final = frozenset(
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
_KEYWORD_DSN: Final = re.compile(r"\s*([A-Za-z_]+)\s*=")


def store_kind(database: str) -> Literal["postgres", "sqlite-url", "sqlite", "other-url"]:
    """Which kind of store ``database`` names.

    ``"postgres"`` for a ``postgresql://`` / ``postgres://`` URL or a libpq
    keyword string (``host=db dbname=shop``: it must start with a libpq
    keyword), ``"sqlite-url"`` for a ``sqlite://`` URL, ``"other-url"`` for a
    URL of any other scheme, and ``"sqlite"`` for anything else (a file path).
    """
    stripped = database.lstrip()
    if stripped.startswith(_POSTGRES_SCHEMES):
        return "postgres"
    keyword = _KEYWORD_DSN.match(database)
    if keyword is not None and keyword.group(1) in _LIBPQ_KEYWORDS:
        return "postgres"
    if stripped.lower().startswith(_SQLITE_SCHEME):
        return "sqlite-url"
    if _URL.match(stripped):
        return "other-url"
    return "sqlite"


def sqlite_target(url: str) -> str:
    """The file (or ``":memory:"``) a ``sqlite://`` URL names, read as SQLAlchemy reads it.

    ``sqlite:///rel.db`` is ``rel.db`` relative to the current folder,
    ``sqlite:////abs/x.db`` is ``/abs/x.db``, and ``sqlite://`` or
    ``sqlite:///:memory:`` an in-memory database. Percent escapes are decoded.

    Raises:
        InvalidArgumentError: the URL names a host, carries a query, or names no file.
    """
    rest = url.strip()[len(_SQLITE_SCHEME) :]
    if rest in ("", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise InvalidArgumentError(
            f"{mask_dsn(url)!r} names a host; a SQLite URL has none: write sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    if "?" in rest or "#" in rest:
        raise InvalidArgumentError(
            f"{mask_dsn(url)!r} carries a query; ilmek's SQLite options are keywords of connect() "
            "(synchronous=..., busy_timeout=...), not URL parameters"
        )
    path = unquote(rest[1:])
    if not path:
        raise InvalidArgumentError(f"{url!r} names no file: write sqlite:///relative.db or sqlite:////abs.db")
    return path


def connect(url_or_path: str | os.PathLike[str], **options: Any) -> SqlCheckpointer:
    """Open a store from what the CLI's ``--db`` takes, migrated and ready; the caller closes it.

    >>> import ilmek
    >>> with ilmek.connect("sqlite://") as store:
    ...     store.list_threads()
    []

    Args:
        url_or_path: A SQLite file path (created with its folders if
            missing), a ``sqlite:///`` URL read as SQLAlchemy reads it
            (``sqlite:///rel.db`` relative, ``sqlite:////abs.db`` absolute,
            ``sqlite://`` in memory), a ``postgresql://`` URL or a libpq
            keyword string (``host=db dbname=shop``).
        **options: The backend's keywords: ``table_prefix`` for every store;
            ``synchronous``, ``busy_timeout``, ``lease_seconds`` for SQLite;
            ``lease_seconds`` and the like for Postgres.

    Returns:
        A :class:`~ilmek.SqliteCheckpointer` or
        :class:`~ilmek.PostgresCheckpointer` that owns its connection:
        close it (or use it in a ``with`` block) when done.

    Raises:
        InvalidArgumentError: an empty value, a URL of another scheme, or a
            malformed ``sqlite://`` URL.
        StorageError: the store cannot be opened or migrated (the message
            never shows a password).
    """
    target = os.fspath(url_or_path)
    if not isinstance(target, str) or not target.strip():
        raise InvalidArgumentError(
            "connect() needs a store: a SQLite file path, a sqlite:/// URL or a postgresql:// URL"
        )
    kind = store_kind(target)
    if kind == "postgres":
        # Imported here: a SQLite user never loads the Postgres backend.
        from .checkpoint.postgres import PostgresCheckpointer

        # libpq reads a URL only from its first character on.
        store: SqlCheckpointer = PostgresCheckpointer.connect(target.strip(), **options)
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
        return store
    if kind == "other-url":
        raise InvalidArgumentError(
            f"unsupported database URL {mask_dsn(target)!r}: give a SQLite file path, a sqlite:/// URL, "
            "a postgresql:// URL or a libpq keyword string (host=... dbname=...)"
        )
    from .checkpoint.sqlite import SqliteCheckpointer

    path = sqlite_target(target) if kind == "sqlite-url" else target
    # A SQLite checkpointer creates and migrates its file when it opens it.
    return SqliteCheckpointer(path, **options)
