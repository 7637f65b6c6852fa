"""The driver-free DB-API layer: paramstyle rendering, transactions, retries and error wrapping.

Rendering needs no database at all. Transactions and retries run on real
``sqlite3`` connections through :class:`SqliteTestAdapter`, the smallest
adapter there is, so what is checked is :class:`ilmek.dbapi.Adapter` itself
(its ``transaction`` and ``run``), not a backend's overrides.
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek.dbapi import Adapter, ErrorKind, Session, Statement, render
from ilmek.errors import ResumeError, StorageError, TransientStorageError

pytestmark = pytest.mark.timeout(30)

SQLITE_BUSY = 5

# --- render -------------------------------------------------------------------------------

REPEATED = "SELECT :a, :b, :a FROM t"


@pytest.mark.parametrize(
    ("paramstyle", "expected_sql"),
    [
        ("qmark", "SELECT ?, ?, ? FROM t"),
        ("numeric", "SELECT :1, :2, :3 FROM t"),
        ("named", "SELECT :a, :b, :a FROM t"),
        ("format", "SELECT %s, %s, %s FROM t"),
        ("pyformat", "SELECT %(a)s, %(b)s, %(a)s FROM t"),
    ],
)
def test_render_writes_each_paramstyle_binding_a_repeated_name_at_each_use(
    paramstyle: str, expected_sql: str
) -> None:
    """Every occurrence of a name is a placeholder, and positional styles list the name each time."""
    assert (expected_sql, ("a", "b", "a")) == render(REPEATED, paramstyle)


@pytest.mark.parametrize(
    ("paramstyle", "placeholder"),
    [("qmark", "?"), ("numeric", ":1"), ("named", ":v"), ("format", "%s"), ("pyformat", "%(v)s")],
)
def test_render_leaves_casts_alone(paramstyle: str, placeholder: str) -> None:
    """``::jsonb`` is a cast, not a parameter, whether after a parameter, a column or a literal."""
    sql = "SELECT :v::jsonb, payload::jsonb, '{}'::jsonb, CAST(x AS text)::int FROM t"
    expected = f"SELECT {placeholder}::jsonb, payload::jsonb, '{{}}'::jsonb, CAST(x AS text)::int FROM t"
    assert (expected, ("v",)) == render(sql, paramstyle)


@pytest.mark.parametrize("paramstyle", ["qmark", "numeric", "named", "format", "pyformat"])
def test_render_leaves_names_inside_quoted_literals_and_identifiers_alone(paramstyle: str) -> None:
    """``:name`` inside '...' or "..." (doubled quotes included) is text, not a parameter."""
    sql = """SELECT ':a', 'it''s :b', "col:c", "odd"":d" FROM t WHERE x = :x"""
    rendered, names = render(sql, paramstyle)
    assert ("x",) == names
    assert rendered.startswith("""SELECT ':a', 'it''s :b', "col:c", "odd"":d" FROM t WHERE x = """)


@pytest.mark.parametrize(
    ("paramstyle", "expected_sql"),
    [
        ("qmark", """SELECT ? % 2, 'a%b' LIKE '%:x%', "pct%" FROM t"""),
        ("numeric", """SELECT :1 % 2, 'a%b' LIKE '%:x%', "pct%" FROM t"""),
        ("named", """SELECT :v % 2, 'a%b' LIKE '%:x%', "pct%" FROM t"""),
        ("format", """SELECT %s %% 2, 'a%%b' LIKE '%%:x%%', "pct%%" FROM t"""),
        ("pyformat", """SELECT %(v)s %% 2, 'a%%b' LIKE '%%:x%%', "pct%%" FROM t"""),
    ],
)
def test_render_doubles_literal_percent_only_for_format_styles(paramstyle: str, expected_sql: str) -> None:
    """``%`` is doubled in SQL text, string literals and identifiers for format/pyformat only."""
    sql = """SELECT :v % 2, 'a%b' LIKE '%:x%', "pct%" FROM t"""
    assert (expected_sql, ("v",)) == render(sql, paramstyle)


def test_rendered_percent_survives_the_drivers_own_formatting() -> None:
    """What a format-style driver does with the text (``%`` interpolation) gives back the literal ``%``."""
    sql = "SELECT :v % 2, 'a%b' LIKE '%x%'"
    pyformat_text, _ = render(sql, "pyformat")
    format_text, _ = render(sql, "format")
    assert "SELECT 7 % 2, 'a%b' LIKE '%x%'" == pyformat_text % {"v": 7}
    assert "SELECT 7 % 2, 'a%b' LIKE '%x%'" == format_text % (7,)


def test_render_refuses_an_unknown_paramstyle() -> None:
    """An unknown paramstyle is a ValueError naming it, not SQL with no placeholders."""
    with pytest.raises(ValueError, match="'dollar'"):
        render("SELECT :a", "dollar")


def test_statement_bind_refuses_an_unknown_paramstyle() -> None:
    """Binding for an unknown paramstyle is the same ValueError."""
    with pytest.raises(ValueError, match="'dollar'"):
        Statement("SELECT :a").bind("dollar", {"a": 1})


# --- Statement.bind -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paramstyle", "expected_params"),
    [
        ("qmark", (1, 2, 1)),
        ("numeric", (1, 2, 1)),
        ("format", (1, 2, 1)),
        ("named", {"a": 1, "b": 2}),
        ("pyformat", {"a": 1, "b": 2}),
    ],
)
def test_statement_bind_gives_a_tuple_or_a_mapping_as_the_style_needs(
    paramstyle: str, expected_params: Any
) -> None:
    """Positional styles get a tuple (a repeated name twice); named styles a dict without extras."""
    text, params = Statement(REPEATED).bind(paramstyle, {"a": 1, "b": 2, "unused": 3})
    assert render(REPEATED, paramstyle)[0] == text
    assert expected_params == params
    assert type(expected_params) is type(params)


@pytest.mark.parametrize("paramstyle", ["qmark", "numeric", "named", "format", "pyformat"])
def test_statement_bind_raises_key_error_for_a_missing_parameter(paramstyle: str) -> None:
    """A parameter the SQL names but the caller did not pass is a KeyError naming it."""
    with pytest.raises(KeyError, match="'b'"):
        Statement(REPEATED).bind(paramstyle, {"a": 1})


@pytest.mark.parametrize("paramstyle", ["qmark", "named"])
def test_bound_statement_runs_on_sqlite(paramstyle: str) -> None:
    """What bind returns is what the driver accepts: sqlite3 speaks qmark and named."""
    connection = sqlite3.connect(":memory:")
    try:
        text, params = Statement("SELECT :a, :b, :a, ':a', '50%'").bind(paramstyle, {"a": "x", "b": 2})
        assert [("x", 2, "x", ":a", "50%")] == connection.execute(text, params).fetchall()
    finally:
        connection.close()


# --- Adapter on a real sqlite3 connection --------------------------------------------------------


class SqliteTestAdapter(Adapter):
    """The least an adapter must say, over one sqlite3 connection in autocommit mode.

    ``begin`` is a deferred ``BEGIN``, so a lock conflict surfaces inside the
    caller's work (where the test can count attempts) rather than at ``BEGIN``.
    Commit and rollback are the base class's.
    """

    paramstyle = "qmark"

    def __init__(self, connection: sqlite3.Connection, *, joins: bool = False) -> None:
        super().__init__()
        self._connection = connection
        self.joins = joins

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[sqlite3.Connection]:
        yield self._connection

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._borrow()

    def classify(self, error: BaseException) -> ErrorKind | None:
        if not isinstance(error, sqlite3.Error):
            return None
        code = getattr(error, "sqlite_errorcode", None)
        return "transient" if code is not None and code & 0xFF == SQLITE_BUSY else "permanent"

    def transaction_open(self, connection: Any) -> bool:
        return bool(connection.in_transaction)

    def begin(self, connection: Any, *, write: bool) -> None:
        connection.execute("BEGIN")


INSERT = Statement("INSERT INTO items (name) VALUES (:name)")


def connect(path: pathlib.Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions only where someone says BEGIN)."""
    return sqlite3.connect(path, isolation_level=None, timeout=timeout, check_same_thread=False)


@pytest.fixture
def database(tmp_path: pathlib.Path) -> pathlib.Path:
    """A SQLite file with an empty ``items`` table."""
    path = tmp_path / "app.db"
    setup = connect(path)
    setup.execute("CREATE TABLE items (name TEXT NOT NULL)")
    setup.close()
    return path


@pytest.fixture
def ours(database: pathlib.Path) -> Iterator[sqlite3.Connection]:
    """The connection the adapter under test uses."""
    connection = connect(database)
    yield connection
    connection.close()


def names_seen_by_another_connection(path: pathlib.Path) -> list[str]:
    """What is committed, as a fresh connection sees it."""
    other = connect(path)
    try:
        return [row[0] for row in other.execute("SELECT name FROM items ORDER BY rowid")]
    finally:
        other.close()


def test_transaction_commits_on_success(database: pathlib.Path, ours: sqlite3.Connection) -> None:
    """Work that returns normally is committed: another connection sees it."""
    adapter = SqliteTestAdapter(ours)
    with adapter.transaction() as session:
        session.execute(INSERT, name="kept")
        assert session.joined is False
    assert ["kept"] == names_seen_by_another_connection(database)
    assert ours.in_transaction is False


def test_after_commit_runs_only_once_the_commit_landed(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """after_commit callbacks run after ilmek's own COMMIT, and never when the work failed."""
    adapter = SqliteTestAdapter(ours)
    seen: list[str] = []
    with adapter.transaction() as session:
        session.execute(INSERT, name="kept")
        session.after_commit(lambda: seen.append(str(names_seen_by_another_connection(database))))
        assert [] == seen
    assert ["['kept']"] == seen

    def fail_after_registering() -> None:
        with adapter.transaction() as session:
            session.after_commit(lambda: seen.append("after a failure"))
            raise ValueError("fail")

    with pytest.raises(ValueError, match="fail"):
        fail_after_registering()
    assert ["['kept']"] == seen


class Abandon(BaseException):
    """Not an Exception: like KeyboardInterrupt or a closed generator, it must roll back too."""


@pytest.mark.parametrize("error_type", [ValueError, Abandon])
def test_transaction_rolls_back_on_any_exception_and_reraises_it(
    database: pathlib.Path, ours: sqlite3.Connection, error_type: type[BaseException]
) -> None:
    """An exception inside leaves nothing behind (no commit in a finally) and reaches the caller as it was."""
    adapter = SqliteTestAdapter(ours)
    raised = error_type("stop")

    def write_then_fail() -> None:
        with adapter.transaction() as session:
            session.execute(INSERT, name="written before the error")
            raise raised

    with pytest.raises(error_type) as caught:
        write_then_fail()
    assert raised is caught.value
    assert [] == names_seen_by_another_connection(database)
    assert ours.in_transaction is False
    assert [] == ours.execute("SELECT name FROM items").fetchall()


def test_an_owning_adapter_refuses_a_transaction_someone_else_left_open(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """Owning its transactions, the adapter never commits the caller's work: it refuses and writes nothing."""
    adapter = SqliteTestAdapter(ours)
    ours.execute("BEGIN")
    ours.execute("INSERT INTO items (name) VALUES ('the caller''s')")
    with pytest.raises(StorageError, match="did not start"), adapter.transaction() as session:
        session.execute(INSERT, name="ilmek's")
    assert ours.in_transaction is True
    assert [] == names_seen_by_another_connection(database)
    ours.execute("ROLLBACK")


def test_a_joining_adapter_writes_in_a_savepoint_and_leaves_the_commit(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """Joining the caller's transaction nothing is committed; the caller's rollback undoes our write."""
    adapter = SqliteTestAdapter(ours, joins=True)
    ours.execute("BEGIN")
    ours.execute("INSERT INTO items (name) VALUES ('the caller''s')")
    seen: list[str] = []
    with adapter.transaction() as session:
        assert session.joined is True
        session.execute(INSERT, name="ilmek's")
        session.after_commit(lambda: seen.append("never: the caller may still roll back"))
    assert ours.in_transaction is True
    assert ["the caller's", "ilmek's"] == [row[0] for row in ours.execute("SELECT name FROM items")]
    assert [] == names_seen_by_another_connection(database)
    ours.execute("ROLLBACK")
    assert [] == names_seen_by_another_connection(database)
    assert [] == seen


def test_a_joined_write_is_committed_by_the_caller(database: pathlib.Path, ours: sqlite3.Connection) -> None:
    """When the caller commits, the write made in the savepoint is committed with it."""
    adapter = SqliteTestAdapter(ours, joins=True)
    ours.execute("BEGIN")
    with adapter.transaction() as session:
        session.execute(INSERT, name="ilmek's")
    ours.execute("COMMIT")
    assert ["ilmek's"] == names_seen_by_another_connection(database)


def test_savepoint_names_are_unique_so_nested_joins_do_not_collide(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """A joined write inside another joined write (same adapter) rolls back only its own savepoint."""
    adapter = SqliteTestAdapter(ours, joins=True)
    ours.execute("BEGIN")

    def fail_inside() -> None:
        with adapter.transaction() as inner:
            inner.execute(INSERT, name="inner")
            raise ValueError("inner")

    with adapter.transaction() as outer:
        outer.execute(INSERT, name="outer")
        with pytest.raises(ValueError, match="inner"):
            fail_inside()
    ours.execute("COMMIT")
    assert ["outer"] == names_seen_by_another_connection(database)


def test_a_failing_savepoint_undoes_only_its_own_writes(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """An error inside the savepoint rolls back to it; the caller's transaction and writes stay."""
    adapter = SqliteTestAdapter(ours, joins=True)
    ours.execute("BEGIN")
    ours.execute("INSERT INTO items (name) VALUES ('the caller''s')")

    def write_then_fail() -> None:
        with adapter.transaction() as session:
            session.execute(INSERT, name="ilmek's")
            raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        write_then_fail()
    assert ours.in_transaction is True
    ours.execute("COMMIT")
    assert ["the caller's"] == names_seen_by_another_connection(database)


class FailingCommit(SqliteTestAdapter):
    """COMMIT fails as SQLite's can (busy), after the work ran."""

    def commit(self, connection: Any) -> None:
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = 5  # type: ignore[attr-defined]
        raise error


def test_a_failed_commit_is_rolled_back_and_surfaced(
    database: pathlib.Path, ours: sqlite3.Connection
) -> None:
    """A COMMIT that fails leaves no transaction open for a later call to mistake for the caller's."""
    adapter = FailingCommit(ours)
    adapter.retry_attempts = 2
    adapter.retry_backoff = 0.001
    with pytest.raises(TransientStorageError, match="2 tries"):
        adapter.run(lambda session: session.execute(INSERT, name="lost"), what="insert", thread_id="t")
    assert ours.in_transaction is False
    assert [] == names_seen_by_another_connection(database)
    # The next transaction is ilmek's own again: nothing mistakes the connection for the caller's.
    with SqliteTestAdapter(ours).transaction() as session:
        session.execute(INSERT, name="next")
    assert ["next"] == names_seen_by_another_connection(database)


def test_a_transient_error_not_retried_does_not_claim_tries(ours: sqlite3.Connection) -> None:
    """A transient failure tried once (no retries left) says it failed, not "kept failing after 1 tries"."""
    adapter = FailingCommit(ours)
    adapter.retry_attempts = 1
    with pytest.raises(TransientStorageError) as failed:
        adapter.run(lambda session: session.execute(INSERT, name="lost"), what="insert", thread_id="t")
    assert "tries" not in str(failed.value)
    assert "could not insert for thread 't': the database failed (OperationalError" in str(failed.value)


# --- Adapter.run: retries and errors ----------------------------------------------------------


@pytest.fixture
def locker(database: pathlib.Path) -> Iterator[sqlite3.Connection]:
    """Another connection that takes the whole file with ``BEGIN EXCLUSIVE``."""
    connection = connect(database)
    connection.execute("BEGIN EXCLUSIVE")
    yield connection
    if connection.in_transaction:
        connection.execute("ROLLBACK")
    connection.close()


def impatient_adapter(path: pathlib.Path, **retries: Any) -> SqliteTestAdapter:
    """An adapter whose connection gives up on a lock after 10 ms (SQLITE_BUSY)."""
    adapter = SqliteTestAdapter(connect(path, timeout=0.01))
    adapter.retry_backoff = 0.005
    adapter.retry_max_backoff = 0.05
    for name, value in retries.items():
        setattr(adapter, name, value)
    return adapter


def test_run_retries_a_transient_lock_until_it_is_released(
    database: pathlib.Path, locker: sqlite3.Connection
) -> None:
    """SQLITE_BUSY is retried; once the other connection lets go (from another thread) the work commits."""
    adapter = impatient_adapter(database, retry_attempts=400)
    attempts: list[int] = []
    second_attempt = threading.Event()

    def release_when_retrying() -> None:
        second_attempt.wait(10)
        locker.execute("COMMIT")

    releaser = threading.Thread(target=release_when_retrying)
    releaser.start()

    def work(session: Session) -> str:
        attempts.append(1)
        if len(attempts) == 2:
            second_attempt.set()
        session.execute(INSERT, name="after the lock")
        return "ok"

    try:
        assert "ok" == adapter.run(work, what="insert an item", thread_id="t-1")
    finally:
        second_attempt.set()
        releaser.join()
    assert len(attempts) >= 2
    assert ["after the lock"] == names_seen_by_another_connection(database)


def test_run_gives_up_with_transient_storage_error_chained_from_the_driver_error(
    database: pathlib.Path, locker: sqlite3.Connection
) -> None:
    """After ``retry_attempts`` tries a lock that never goes is TransientStorageError ``from`` SQLITE_BUSY."""
    adapter = impatient_adapter(database, retry_attempts=3)
    attempts: list[int] = []

    def work(session: Session) -> None:
        attempts.append(1)
        session.execute(INSERT, name="never")

    with pytest.raises(TransientStorageError) as caught:
        adapter.run(work, what="insert an item", thread_id="conv-42")
    assert 3 == len(attempts)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert SQLITE_BUSY == caught.value.__cause__.sqlite_errorcode & 0xFF
    assert "conv-42" == caught.value.thread_id
    assert "'conv-42'" in str(caught.value)
    assert "3 tries" in str(caught.value)
    locker.execute("ROLLBACK")
    assert [] == names_seen_by_another_connection(database)


def test_run_does_not_retry_inside_the_callers_transaction(
    database: pathlib.Path, locker: sqlite3.Connection
) -> None:
    """A transient error in a savepoint is raised at once: the caller's transaction is not ours to replay."""
    impatient = connect(database, timeout=0.01)
    adapter = SqliteTestAdapter(impatient, joins=True)
    adapter.retry_attempts = 5
    impatient.execute("BEGIN")
    attempts: list[int] = []

    def work(session: Session) -> None:
        attempts.append(1)
        session.execute(INSERT, name="never")

    try:
        with pytest.raises(TransientStorageError, match="does not try again inside a transaction of yours"):
            adapter.run(work, what="insert an item", thread_id="t-1")
        assert 1 == len(attempts)
        assert impatient.in_transaction is True
    finally:
        impatient.execute("ROLLBACK")
        impatient.close()


def test_run_wraps_a_permanent_error_in_storage_error_naming_the_thread(ours: sqlite3.Connection) -> None:
    """A syntax error is tried once and becomes StorageError (not transient) ``from`` the driver's error."""
    adapter = SqliteTestAdapter(ours)
    attempts: list[int] = []

    def work(session: Session) -> None:
        attempts.append(1)
        session.execute(Statement("SELEC 1"))

    with pytest.raises(StorageError) as caught:
        adapter.run(work, what="read a checkpoint", thread_id="conv-42")
    assert not isinstance(caught.value, TransientStorageError)
    assert 1 == len(attempts)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert "could not read a checkpoint for thread 'conv-42'" in str(caught.value)
    assert "conv-42" == caught.value.thread_id


def test_storage_error_messages_never_carry_a_password(ours: sqlite3.Connection) -> None:
    """A driver error whose text holds ``password=hunter2`` is reported with the password redacted, and the
    driver's error, still chained, is masked too (a traceback prints its text)."""
    adapter = SqliteTestAdapter(ours)
    with pytest.raises(StorageError) as caught:
        adapter.run(
            lambda session: session.query(Statement('SELECT * FROM "password=hunter2"')),
            what="read a checkpoint",
            thread_id="conv-42",
        )
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert "hunter2" not in str(caught.value.__cause__)
    assert "hunter2" not in str(caught.value)
    assert "password=***" in str(caught.value)


def test_storage_error_messages_redact_a_quoted_password_with_spaces(ours: sqlite3.Connection) -> None:
    """A libpq-style quoted password (``password='hunter two'``) is redacted whole."""
    adapter = SqliteTestAdapter(ours)
    with pytest.raises(StorageError) as caught:
        adapter.run(
            lambda session: session.query(Statement("""SELECT * FROM "password='hunter two'" """)),
            what="read a checkpoint",
        )
    assert "two" not in str(caught.value.__cause__)
    assert "two" not in str(caught.value)


def test_run_passes_ilmek_errors_and_non_database_errors_through_unchanged(
    ours: sqlite3.Connection,
) -> None:
    """Only database errors are wrapped: an IlmekError or a ValueError of the work arrives as raised."""
    adapter = SqliteTestAdapter(ours)
    for raised in (ResumeError("not parked"), ValueError("bad input")):
        attempts: list[int] = []

        def work(session: Session, raised: Exception = raised, attempts: list[int] = attempts) -> None:
            attempts.append(1)
            session.execute(INSERT, name="rolled back")
            raise raised

        with pytest.raises(type(raised)) as caught:
            adapter.run(work, what="insert an item")
        assert raised is caught.value
        assert 1 == len(attempts)
    assert [] == ours.execute("SELECT name FROM items").fetchall()


def test_session_runs_scripts_and_returns_rows(ours: sqlite3.Connection) -> None:
    """``run_script`` runs parameterless statements in order; ``query`` returns rows as tuples."""
    adapter = SqliteTestAdapter(ours)
    with adapter.transaction() as session:
        session.run_script(["CREATE TABLE extra (n INTEGER)", "INSERT INTO extra VALUES (1)"])
        session.execute(Statement("INSERT INTO extra VALUES (:n)"), n=2)
        assert [(1,), (2,)] == session.query(Statement("SELECT n FROM extra ORDER BY n"))
        assert [] == session.query(Statement("UPDATE extra SET n = n + 1"))
