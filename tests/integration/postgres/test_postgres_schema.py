"""PostgresCheckpointer's schema on a real server: ``migrate()`` racing across processes, ``ddl()``, prefixes.

Four processes migrating an empty database at once, an old schema brought up
to date, the printed DDL run by hand in psql, schemas of another version
refused; table prefixes that keep stores apart, and hostile prefixes refused
before any SQL. Cross-process tests run ``tests/support/pgworker.py``.
"""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg2
import pytest
from psycopg2.extensions import TRANSACTION_STATUS_IDLE

from ilmek import PostgresCheckpointer, SchemaVersionError, ThreadBusyError, resume, run, thread_state
from ilmek.cli import main
from tests.support.pgcluster import find_bindir
from tests.support.pgworker import (
    CART,
    CHECKOUT_DONE,
    TWO_STEP_INPUT,
    Effects,
    checkout_graph,
    run_checkout,
    two_step_graph,
)
from tests.support.postgres import (
    RecordingClient,
    Worker,
    application_dsn,
    fresh_checkpointer,
    query,
    tables,
    unique,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

ILMEK_TABLES = {"meta", "threads", "checkpoints", "blobs", "logs", "items", "journals", "holds", "notices"}
# --- migrate() and ddl() -----------------------------------------------------------------


def test_migrate_from_four_processes_at_once_succeeds_in_all(
    empty_dsn: str, tmp_path: pathlib.Path, workers: Callable[..., Worker], effects: Effects
) -> None:
    """Four processes booting together on an empty database all migrate; the schema is whole, once."""
    go = tmp_path / "go"
    started = [workers("migrate", "--dsn", empty_dsn, "--go-file", str(go)) for _ in range(4)]
    for worker in started:
        worker.expect("ready")
    go.touch()
    assert ["migrated"] * 4 == [worker.outcome()["outcome"] for worker in started]
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    assert [("schema_version", str(PostgresCheckpointer.SCHEMA_VERSION))] == query(
        empty_dsn, "SELECT key, value FROM ilmek_meta"
    )
    with fresh_checkpointer(empty_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "after-migrate")


@pytest.mark.parametrize("old_version", [2, 3])
def test_migrate_brings_an_older_store_with_a_paused_thread_to_the_current_version(
    empty_dsn: str, effects: Effects, old_version: int
) -> None:
    """Schema 3 added the superstep and answer functions; schema 4 rewrote them to take a hold by its lease
    alone. A store at an older version is refused until migrated, then resumes."""
    current = PostgresCheckpointer.SCHEMA_VERSION
    with fresh_checkpointer(empty_dsn) as checkpointer:
        checkpointer.migrate()
        checkout = checkout_graph(effects)
        paused = run(checkout, CART, thread_id="from-old", checkpointer=checkpointer)
        assert "interrupted" == paused.status
    # The same tables; the functions as that version had them (schema 2: none at all).
    query(empty_dsn, "DROP FUNCTION ilmek_superstep")
    query(empty_dsn, "DROP FUNCTION ilmek_answer")
    query(empty_dsn, "UPDATE ilmek_meta SET value = %s WHERE key = 'schema_version'", (str(old_version),))
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(
            SchemaVersionError,
            match=rf"version {old_version}, this ilmek uses version {current}: run migrate",
        ):
            resume(checkout, "yes", thread_id="from-old", checkpointer=checkpointer)
        checkpointer.migrate()
        assert [(str(current),)] == query(
            empty_dsn, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'"
        )
        functions = query(
            empty_dsn,
            "SELECT proname, prosrc FROM pg_proc "
            "WHERE proname IN ('ilmek_superstep', 'ilmek_answer') ORDER BY 1",
        )
        assert ["ilmek_answer", "ilmek_superstep"] == [name for name, _ in functions]
        # A session that ended decides nothing: the functions read no session's activity.
        assert [] == [name for name, source in functions if "pg_stat" in source]
        finished = resume(checkout, "yes", thread_id="from-old", checkpointer=checkpointer)
    assert ("done", CHECKOUT_DONE) == (finished.status, finished.state)
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()


#: The superstep function's arguments up to schema 7 (schema 8 takes one JSON object).
_SCHEMA_7_SUPERSTEP_ARGUMENTS = (
    "text, text, text, text, text, bigint, double precision, jsonb, jsonb, text, text, double precision, "
    "jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, boolean, boolean, bigint, double precision, jsonb, jsonb, "
    "jsonb"
)
_SCHEMA_7_ANSWER_ARGUMENTS = "text, text, text, boolean, bigint, double precision, jsonb"


def test_migrating_from_schema_7_adds_the_one_argument_functions_and_keeps_the_old_ones(
    empty_dsn: str, effects: Effects
) -> None:
    """Schema 8's functions take their arguments as one JSON object. Migrating a schema-7 store installs
    them beside the old ones (another signature), which stay for a process of the previous version that
    checked the schema before the upgrade; runs then go through the new ones, and drop_sql removes both."""
    with fresh_checkpointer(empty_dsn) as checkpointer:
        checkpointer.migrate()
    # A schema-7 store: the old signatures (their bodies do not matter here), the version said so.
    query(empty_dsn, "DROP FUNCTION ilmek_superstep(jsonb)")
    query(empty_dsn, "DROP FUNCTION ilmek_answer(jsonb)")
    query(
        empty_dsn,
        f"CREATE FUNCTION ilmek_superstep({_SCHEMA_7_SUPERSTEP_ARGUMENTS}, OUT busy boolean, "
        "OUT reason text, OUT blob_ids text, OUT log_ids text) "
        "LANGUAGE sql AS 'SELECT false, NULL::text, NULL::text, NULL::text'",
    )
    query(
        empty_dsn,
        f"CREATE FUNCTION ilmek_answer({_SCHEMA_7_ANSWER_ARGUMENTS}, OUT busy boolean, OUT reason text, "
        "OUT recorded jsonb) LANGUAGE sql AS 'SELECT false, NULL::text, NULL::jsonb'",
    )
    query(empty_dsn, "UPDATE ilmek_meta SET value = '7' WHERE key = 'schema_version'")

    with fresh_checkpointer(empty_dsn) as checkpointer:
        checkpointer.migrate()
        signatures = query(
            empty_dsn,
            # The argument types alone (IN arguments: what tells the functions apart).
            "SELECT proname, oidvectortypes(proargtypes) FROM pg_proc "
            "WHERE proname IN ('ilmek_superstep', 'ilmek_answer') ORDER BY 1, 2",
        )
        assert [
            ("ilmek_answer", "jsonb"),
            ("ilmek_answer", _SCHEMA_7_ANSWER_ARGUMENTS),
            ("ilmek_superstep", "jsonb"),
            ("ilmek_superstep", _SCHEMA_7_SUPERSTEP_ARGUMENTS),
        ] == signatures
        run_checkout(checkpointer, effects, "after-8")
    # drop_sql removes the old signatures first: a current function's name is then its own alone.
    for statement in PostgresCheckpointer.drop_sql("ilmek"):
        query(empty_dsn, statement)
    assert [] == query(empty_dsn, "SELECT proname FROM pg_proc WHERE proname LIKE 'ilmek%'")
    assert set() == tables(empty_dsn)


def test_the_printed_ddl_runs_in_psql_and_gives_a_schema_ready_to_use(
    empty_dsn: str, effects: Effects, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ilmek ddl --dialect postgres` piped into psql (a function body spans lines) makes a usable store."""
    bindir = find_bindir()
    assert bindir is not None, "psql comes with the server the tests run"
    assert 0 == main(["ddl", "--dialect", "postgres"])
    printed = capsys.readouterr().out
    subprocess.run(
        [f"{bindir}/psql", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-q", empty_dsn],
        input=printed,
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    with fresh_checkpointer(empty_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "by-psql")


DDL_WORDS = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE")


def test_migrate_twice_is_a_no_op(empty_dsn: str) -> None:
    """A second migrate() reads the version and changes nothing: no DDL, no write."""
    client = RecordingClient.on(empty_dsn)
    try:
        checkpointer = PostgresCheckpointer(client)
        checkpointer.migrate()
        assert any(sql.startswith("CREATE TABLE") for sql in client.statements())
        before = tables(empty_dsn)
        client.calls.clear()
        PostgresCheckpointer(client).migrate()
        writes = [sql for sql in client.statements() if sql.split()[0].upper() in DDL_WORDS]
        assert [] == writes
        assert before == tables(empty_dsn)
    finally:
        client.close()


def run_ddl_by_hand(dsn: str, statements: list[str]) -> None:
    """What an operator does with ``ddl()``: run each statement, then commit."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        connection.commit()


def test_ddl_run_by_hand_gives_a_schema_the_checkpointer_accepts_without_migrate(
    empty_dsn: str, effects: Effects
) -> None:
    """The SQL of ddl(), run with psycopg2 into an empty database, is a schema ready to use."""
    statements = PostgresCheckpointer(RecordingClient()).ddl()
    run_ddl_by_hand(empty_dsn, statements)
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    connection = psycopg2.connect(empty_dsn)
    try:
        run_checkout(PostgresCheckpointer(connection), effects, "by-hand")
    finally:
        connection.close()


def test_a_schema_of_another_version_is_refused_saying_what_to_do(empty_dsn: str, effects: Effects) -> None:
    """A meta version edited to 999 is SchemaVersionError naming found and expected; nothing runs."""
    run_ddl_by_hand(empty_dsn, PostgresCheckpointer(RecordingClient()).ddl())
    query(empty_dsn, "UPDATE ilmek_meta SET value = '999' WHERE key = 'schema_version'")
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(SchemaVersionError) as caught:
            checkpointer.get("any")
        assert 999 == caught.value.found
        assert checkpointer.schema_version == caught.value.expected
        assert "999" in str(caught.value)
        assert f"version {checkpointer.schema_version}" in str(caught.value)
        assert "upgrade ilmek" in str(caught.value)
        with pytest.raises(SchemaVersionError):
            run(checkout_graph(effects), CART, thread_id="refused", checkpointer=checkpointer)
    assert {} == effects.counts()
    assert [] == query(empty_dsn, "SELECT thread_id FROM ilmek_threads")


def test_missing_tables_are_schema_version_error_saying_run_migrate(empty_dsn: str, effects: Effects) -> None:
    """Without the tables every use is SchemaVersionError telling to run migrate(); nothing is created."""
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(SchemaVersionError, match=r"run migrate\(\)") as caught:
            checkpointer.get("any")
        assert 0 == caught.value.found
        with pytest.raises(SchemaVersionError, match=r"run migrate\(\)"):
            run(checkout_graph(effects), CART, thread_id="no-tables", checkpointer=checkpointer)
    assert set() == tables(empty_dsn)


# --- table prefixes ----------------------------------------------------------------------------


def test_table_prefix_names_every_table(postgres_dsn: str) -> None:
    """``table_prefix="billing"`` creates billing_checkpoints, billing_journals... and nothing else."""
    with fresh_checkpointer(postgres_dsn, table_prefix="billing") as checkpointer:
        checkpointer.migrate()
        assert all("ilmek_" not in statement for statement in checkpointer.ddl())
    rows = query(
        postgres_dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s",
        ("billing\\_%",),
    )
    assert {f"billing_{name}" for name in ILMEK_TABLES} == {row[0] for row in rows}
    assert {"billing_checkpoints", "billing_journals"} <= {row[0] for row in rows}


def test_two_prefixes_in_one_database_never_see_each_others_threads(
    postgres_dsn: str, effects: Effects
) -> None:
    """The same thread id under two prefixes: separate states, listings, deletes and holds."""
    with (
        fresh_checkpointer(postgres_dsn) as default,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as billing,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as billing_elsewhere,
    ):
        billing.migrate()
        two_step = two_step_graph(effects)
        run(two_step, {"log": ["default"]}, thread_id="shared", checkpointer=default)
        run(two_step, {"log": ["billing"]}, thread_id="shared", checkpointer=billing)
        assert ["default", "prepared", "finished"] == thread_state(two_step, default, "shared")["log"]
        assert ["billing", "prepared", "finished"] == thread_state(two_step, billing, "shared")["log"]
        run(two_step, None, thread_id="only-default", checkpointer=default)
        assert ["only-default", "shared"] == sorted(info.id for info in default.list_threads())
        assert ["shared"] == [info.id for info in billing.list_threads()]
        with billing.hold("shared"):
            with pytest.raises(ThreadBusyError):
                run(two_step, None, thread_id="shared", checkpointer=billing_elsewhere)
            assert "done" == run(two_step, None, thread_id="shared", checkpointer=default).status
        billing.delete_thread("shared")
        assert billing.get("shared") is None
        assert default.get("shared") is not None


def test_prefixes_differing_only_in_case_name_the_same_tables(postgres_dsn: str, effects: Effects) -> None:
    """``Billing`` and ``billing`` are one prefix (as unquoted SQL names are): same tables, same holds."""
    with (
        fresh_checkpointer(postgres_dsn, table_prefix="Billing") as upper,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as lower,
    ):
        upper.migrate()
        lower.migrate()
        run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="case", checkpointer=upper)
        assert lower.get("case") is not None
        with upper.hold("case"), pytest.raises(ThreadBusyError):
            lower.hold("case").__enter__()
    tables = query(postgres_dsn, "SELECT count(*) FROM pg_class WHERE relname = 'billing_checkpoints'")
    assert [(1,)] == tables


def test_the_longest_allowed_prefix_works(postgres_dsn: str, effects: Effects) -> None:
    """A 40-character prefix keeps every table and index name within Postgres's 63 characters."""
    prefix = "p" * 40
    with fresh_checkpointer(postgres_dsn, table_prefix=prefix) as checkpointer:
        checkpointer.migrate()
        run_checkout(checkpointer, effects, "long-prefix")
    names = query(postgres_dsn, "SELECT relname FROM pg_class WHERE relname LIKE %s", (prefix + "%",))
    assert len(names) > len(ILMEK_TABLES)
    assert all(len(name) <= 63 and name.startswith(prefix + "_") for (name,) in names)


HOSTILE_PREFIXES = [
    "x; DROP TABLE ilmek_checkpoints; --",
    "ilmek_checkpoints--",
    "a b",
    "1abc",
    "",
    "é",
    "a" * 41,
    None,
    'quoted"name',
    "tab\tname",
]


@pytest.mark.parametrize("prefix", HOSTILE_PREFIXES)
def test_a_hostile_prefix_is_value_error_before_any_sql(postgres_dsn: str, prefix: Any) -> None:
    """A prefix outside ``[A-Za-z_][A-Za-z0-9_]{0,39}`` is refused before a single statement is sent."""
    recording = RecordingClient()
    with pytest.raises(ValueError, match="table_prefix"):
        PostgresCheckpointer(recording, table_prefix=prefix)
    assert [] == recording.calls
    before = tables(postgres_dsn)
    connection = psycopg2.connect(postgres_dsn)
    try:
        with pytest.raises(ValueError, match="table_prefix"):
            PostgresCheckpointer(connection, table_prefix=prefix)
        # A statement would have opened a transaction on this non-autocommit connection.
        assert TRANSACTION_STATUS_IDLE == connection.info.transaction_status
    finally:
        connection.close()
    assert before == tables(postgres_dsn)
    assert "ilmek_checkpoints" in before


def test_connect_with_a_hostile_prefix_opens_no_session(postgres_dsn: str) -> None:
    """``connect(dsn, table_prefix=bad)`` is ValueError and leaves no session behind."""
    name = unique("bad-prefix")
    with pytest.raises(ValueError, match="table_prefix") as caught:
        PostgresCheckpointer.connect(application_dsn(postgres_dsn, name), table_prefix="a b")
    sessions = query(
        postgres_dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
    )
    del caught
    assert [(0,)] == sessions


def test_a_database_without_the_tables_says_they_are_missing_and_to_migrate(empty_dsn: str) -> None:
    """A run on a database whose tables were never created: the error says the tables do not exist and to
    run migrate() once, not "schema version 0"."""
    with fresh_checkpointer(empty_dsn) as checkpointer, pytest.raises(SchemaVersionError) as missing:
        checkpointer.get("anyone")
    message = str(missing.value)
    assert "do not exist" in message
    assert "migrate()" in message
    assert "version 0" not in message
