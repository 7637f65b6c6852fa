"""No piece of a Postgres password in any message ilmek gives, whatever characters the password holds.

Passwords are generated from the characters that mean something in a URL or a
libpq keyword string (``@ : / ? # % ' " \\ =`` and space) and non-ASCII
letters, written into every DSN form (URL raw and percent-encoded, URL query,
keyword string quoted and raw), and given to a real server: one refusing the
role (a real authentication failure) and a closed port, where libpq quotes
back what it could not parse. No four characters in a row of the password
(or of its encoded form) may appear in an error, a log record or the output
of the command line.
"""

from __future__ import annotations

import contextlib
import io
import logging
import pathlib
import sys
import traceback
import uuid
from collections.abc import Iterator
from urllib.parse import quote, unquote

import psycopg2
import psycopg2.pool
import pytest
import sqlalchemy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg2.extensions import parse_dsn

from ilmek import PostgresCheckpointer, StorageError
from ilmek.cli import main
from tests.support.cli_support import run_module
from tests.support.pgcluster import PostgresServer
from tests.support.postgres import query

SPECIAL = "@:/?#%'\"\\= "
PASSWORDS = st.text(alphabet=SPECIAL + "aZ09éß€漢", min_size=4, max_size=14)
PIECE = 4
# Every special character and a non-ASCII letter in each, for the slow (subprocess) checks.
HOSTILE = ["se@cret:pwTAIL", "p/a?s#s%zz'q\"b\\e= ünï", 'x\\ more\' "topsecret"']


def pieces(password: str) -> set[str]:
    """The runs of four characters of the password as typed and as percent-encoded."""
    forms = {password, quote(password, safe="")}
    return {form[i : i + PIECE] for form in forms for i in range(len(form) - PIECE + 1)}


def assert_hidden(password: str, *texts: str) -> None:
    """No piece of ``password`` in any of ``texts``."""
    for text in texts:
        leaked = sorted(piece for piece in pieces(password) if piece in text)
        assert [] == leaked, f"{password!r} leaked in {text!r}"


def chained_messages(error: BaseException) -> str:
    """What a traceback prints of ``error`` and every error chained to it, frames (file names) left out."""
    shown: list[str] = []
    current: BaseException | None = error
    while current is not None:
        shown.extend(traceback.format_exception_only(current))
        current = current.__cause__ or current.__context__
    return "".join(shown)


def dsn_forms(password: str, *, host: str, port: str, user: str, dbname: str) -> list[str]:
    """``password`` in every way a person may write it into a DSN."""
    encoded = quote(password, safe="")
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    forms = [
        f"postgresql://{user}:{password}@{host}:{port}/{dbname}",
        f"postgresql://{user}:{encoded}@{host}:{port}/{dbname}",
        f"postgresql://{user}@{host}:{port}/{dbname}?password={encoded}",
        f"host={host} port={port} dbname={dbname} user={user} password='{escaped}'",
    ]
    if " " not in password:
        # Typed raw: whatever libpq makes of it, its pieces stay hidden (a space would
        # end the value, and what follows is another option of the person's own making).
        forms.append(f"host={host} port={port} dbname={dbname} user={user} password={password}")
    return forms


@pytest.fixture(scope="module")
def refusing(postgres_server: PostgresServer) -> Iterator[dict[str, str]]:
    """Where DSNs point: the test server as a role it refuses to log in, and a closed port."""
    params = parse_dsn(postgres_server.dsn)
    role = f"ilmek_nologin_{uuid.uuid4().hex[:8]}"
    query(postgres_server.dsn, f"CREATE ROLE {role} NOLOGIN")
    host = params.get("host", "127.0.0.1")
    if host.startswith("/"):
        host = quote(host, safe="")  # a socket folder, as a URL's host must spell it
    yield {"host": host, "port": params.get("port", "5432"), "user": role, "dbname": params["dbname"]}
    query(postgres_server.dsn, f"DROP ROLE {role}")


def targets(where: dict[str, str]) -> list[dict[str, str]]:
    """The refusing server, and a closed port of this machine."""
    return [where, {**where, "host": "127.0.0.1", "port": "1"}]


def every_dsn(password: str, where: dict[str, str]) -> list[str]:
    """``password`` in every DSN form, for each of the :func:`targets`."""
    return [dsn for target in targets(where) for dsn in dsn_forms(password, **target)]


def assert_connect_hides(password: str, where: dict[str, str]) -> None:
    """connect() on every DSN of ``password`` fails with no piece of it in the error or a log record."""
    for dsn in every_dsn(password, where):
        with ilmek_logs() as records, pytest.raises(StorageError) as caught:
            PostgresCheckpointer.connect(dsn)
        assert "could not connect to Postgres" in str(caught.value)
        assert caught.value.__cause__ is not None  # the driver's error stays chained...
        # ...and the traceback a person sees, the driver's message included, hides the password.
        assert_hidden(password, chained_messages(caught.value), *(record.getMessage() for record in records))


def assert_reading_hides(password: str, client: object) -> None:
    """A read through a checkpointer on the caller's ``client`` fails with no piece of ``password`` shown."""
    with ilmek_logs() as records, pytest.raises(StorageError) as caught:
        PostgresCheckpointer(client).get("t")
    assert_hidden(password, chained_messages(caught.value), *(record.getMessage() for record in records))


EXAMPLES = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
"""Hypothesis settings of the tests below: a real server answers, so no deadline; a module fixture."""


@contextlib.contextmanager
def ilmek_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record ilmek's loggers write inside the block, at any level."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("ilmek")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@settings(EXAMPLES, max_examples=40)
# A percent-escape that is not UTF-8: psycopg2 raises UnicodeDecodeError, not one of its errors.
@example(password="0%90")
@given(password=PASSWORDS)
def test_connect_errors_show_no_piece_of_the_password(refusing: dict[str, str], password: str) -> None:
    """connect() with a refused role or a closed port: no piece of the password in the error or the logs."""
    assert_connect_hides(password, refusing)


@pytest.mark.parametrize("password", HOSTILE)
def test_connect_through_psycopg_3_shows_no_piece_of_the_password(
    refusing: dict[str, str], password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without psycopg2, connect() uses psycopg 3, whose parser words its errors otherwise: still hidden."""
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # `import psycopg2` raises ImportError
    assert_connect_hides(password, refusing)


@settings(EXAMPLES, max_examples=15)
# A percent-escape that is not UTF-8: psycopg2 raises UnicodeDecodeError, not one of its errors.
@example(password="0%90")
@given(password=PASSWORDS)
def test_command_line_errors_show_no_piece_of_the_password(refusing: dict[str, str], password: str) -> None:
    """`ilmek threads --db DSN`, in-process: stdout and stderr hold no piece of the password."""
    for dsn in every_dsn(password, refusing):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["threads", "--db", dsn])
        assert 1 == status
        assert err.getvalue().startswith("ilmek: ")
        assert_hidden(password, out.getvalue(), err.getvalue())


@settings(EXAMPLES, max_examples=20)
# A percent-escape that is not UTF-8: psycopg2 raises UnicodeDecodeError, not one of its errors.
@example(password="0%90")
@given(password=PASSWORDS)
def test_a_pool_s_errors_show_no_piece_of_the_password(refusing: dict[str, str], password: str) -> None:
    """A psycopg2 pool of the caller's that cannot log in: ilmek's StorageError hides its password."""
    for dsn in every_dsn(password, refusing):
        try:
            pool = psycopg2.pool.ThreadedConnectionPool(0, 1, dsn)
        except psycopg2.Error:
            continue  # the driver refused the DSN itself: ilmek never saw it
        try:
            assert_reading_hides(password, pool)
        finally:
            pool.closeall()


@pytest.mark.parametrize(("password", "form"), [(HOSTILE[0], 0), (HOSTILE[1], 2), (HOSTILE[2], 3)])
def test_the_command_as_a_process_shows_no_piece_of_the_password(
    refusing: dict[str, str], password: str, form: int, tmp_path: pathlib.Path
) -> None:
    """`python -m ilmek threads --db DSN` in its own process (raw URL, URL query, keywords): nothing leaks."""
    dsn = dsn_forms(password, **targets(refusing)[1])[form]
    done = run_module(tmp_path, "threads", "--db", dsn)
    assert 1 == done.returncode
    assert "***" in done.stderr
    assert_hidden(password, done.stdout, done.stderr)


@pytest.mark.parametrize("password", HOSTILE)
def test_a_sqlalchemy_engine_s_errors_show_no_piece_of_the_password(
    refusing: dict[str, str], password: str
) -> None:
    """An Engine whose URL holds the password, a refused role or a closed port: nothing of it in the error."""
    for where in targets(refusing):
        url = sqlalchemy.URL.create(
            "postgresql+psycopg2",
            username=where["user"],
            password=password,
            host=unquote(where["host"]),
            port=int(where["port"]),
            database=where["dbname"],
        )
        engine = sqlalchemy.create_engine(url)
        try:
            assert_reading_hides(password, engine)
        finally:
            engine.dispose()


def test_a_pool_whose_dsn_its_driver_cannot_read_is_a_storage_error(refusing: dict[str, str]) -> None:
    """psycopg2 reads a percent-escape that is not UTF-8 with a UnicodeDecodeError, not an error of its own:
    ilmek raises a StorageError that says no connection could be had, the driver's error chained."""
    dsn = dsn_forms("0%90", **targets(refusing)[0])[0]
    pool = psycopg2.pool.ThreadedConnectionPool(0, 1, dsn)
    try:
        with pytest.raises(StorageError, match="no connection could be had") as caught:
            PostgresCheckpointer(pool).get("t")
    finally:
        pool.closeall()
    assert isinstance(caught.value.__cause__, UnicodeDecodeError)
    assert caught.value.thread_id == "t"
