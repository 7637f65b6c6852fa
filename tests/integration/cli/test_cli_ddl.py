"""``ilmek ddl --drop`` and ``--from-version N``: the scripts an operator runs by hand, run on real databases.

The create script, then the drop script, leave nothing of ilmek's under the
prefix (tables, indexes, sequences, the two Postgres functions), on SQLite
and on Postgres; the upgrade script brings an old schema to the current
version, and refuses, naming ``ilmek migrate``, where a step is Python.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sqlite3

import psycopg2
import pytest

from ilmek import PostgresCheckpointer, SqliteCheckpointer, run
from ilmek.demo import CART, build_checkout_graph
from tests.support.cli_support import cli, home_fixture  # noqa: F401 - a fixture, used by name

pytestmark = pytest.mark.timeout(60)


def ddl(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The script `ilmek ddl ...` prints (it must succeed, quietly)."""
    status, out, err = cli(capsys, "ddl", *argv)
    assert (0, "") == (status, err)
    return out


def sqlite_objects(path: pathlib.Path, prefix: str) -> list[tuple[str, str]]:
    """Every table, index, trigger and view under ``prefix`` in the file, and its AUTOINCREMENT rows."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        found = connection.execute(
            "SELECT type, name FROM sqlite_master WHERE name LIKE ? ESCAPE '\\' ORDER BY name",
            (f"{prefix}\\_%",),
        ).fetchall()
        has_sequence = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
        ).fetchone()
        if has_sequence:
            found += connection.execute(
                "SELECT 'sequence', name FROM sqlite_sequence WHERE name LIKE ? ESCAPE '\\'",
                (f"{prefix}\\_%",),
            ).fetchall()
    return found


def run_sqlite_script(path: pathlib.Path, script: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.executescript(script)


def test_sqlite_drop_script_removes_everything_the_create_script_made(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """Create DDL, a thread stored, then `ddl --drop`: no shop_* object or sequence row left; ilmek_* kept."""
    path = tmp_path / "store.db"
    run_sqlite_script(path, ddl(capsys, "--dialect", "sqlite", "--table-prefix", "shop"))
    with SqliteCheckpointer(path) as other, SqliteCheckpointer(path, table_prefix="shop") as shop:
        assert (
            "interrupted"
            == run(build_checkout_graph(), {"cart": list(CART)}, thread_id="t", checkpointer=shop).status
        )
        assert (
            "interrupted"
            == run(build_checkout_graph(), {"cart": list(CART)}, thread_id="t", checkpointer=other).status
        )
    created = sqlite_objects(path, "shop")
    assert {"table", "index", "sequence"} == {kind for kind, _ in created}
    left_alone = sqlite_objects(path, "ilmek")

    drop = ddl(capsys, "--dialect", "sqlite", "--table-prefix", "shop", "--drop")
    assert all(line.startswith("DROP ") and line.endswith(";") for line in drop.splitlines())
    run_sqlite_script(path, drop)
    assert [] == sqlite_objects(path, "shop")
    assert left_alone == sqlite_objects(path, "ilmek")
    # Safe to run again, and its JSON form is the same statements.
    run_sqlite_script(path, drop)
    assert [line.rstrip(";") for line in drop.splitlines()] == json.loads(
        ddl(capsys, "--dialect", "sqlite", "--table-prefix", "shop", "--drop", "--json")
    )


def postgres_objects(dsn: str, prefix: str) -> dict[str, list[str]]:
    """Every relation (table, index, sequence) and function named ``<prefix>_*`` in the database."""
    pattern = f"{prefix}\\_%"
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT relkind, relname FROM pg_class WHERE relname LIKE %s ORDER BY relname", (pattern,)
        )
        relations = [f"{kind}:{name}" for kind, name in cursor.fetchall()]
        cursor.execute("SELECT proname FROM pg_proc WHERE proname LIKE %s ORDER BY proname", (pattern,))
        functions = [row[0] for row in cursor.fetchall()]
    return {"relations": relations, "functions": functions}


def run_postgres_script(dsn: str, script: str) -> None:
    """What an operator does with the printed script: send it whole, in one transaction."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection:
        with connection.cursor() as cursor:
            cursor.execute(script)
        connection.commit()


@pytest.mark.postgres
def test_postgres_drop_script_removes_tables_indexes_sequences_and_both_functions(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    """Create DDL (and migrate()'s own schema), used, then `ddl --drop`: pg_class and pg_proc hold nothing."""
    run_postgres_script(postgres_dsn, ddl(capsys, "--dialect", "postgres", "--table-prefix", "shop"))
    with PostgresCheckpointer.connect(postgres_dsn, table_prefix="shop") as shop:
        assert (
            "interrupted"
            == run(build_checkout_graph(), {"cart": list(CART)}, thread_id="t", checkpointer=shop).status
        )
    # The test database's ilmek_* schema was made by migrate(), not by the script.
    for prefix in ("shop", "ilmek"):
        before = postgres_objects(postgres_dsn, prefix)
        assert [f"{prefix}_answer", f"{prefix}_superstep"] == before["functions"]
        assert {"r", "i", "S"} == {relation.split(":")[0] for relation in before["relations"]}

        drop = ddl(capsys, "--dialect", "postgres", "--table-prefix", prefix, "--drop")
        run_postgres_script(postgres_dsn, drop)
        assert {"relations": [], "functions": []} == postgres_objects(postgres_dsn, prefix)
        run_postgres_script(postgres_dsn, drop)  # again: IF EXISTS everywhere


@pytest.mark.postgres
def test_postgres_upgrade_script_from_version_3_brings_the_schema_to_the_current_one(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    """Tables at version 3 without their functions: `ddl --from-version 3` restores them and the version."""
    run_postgres_script(
        postgres_dsn,
        "DROP FUNCTION ilmek_superstep; DROP FUNCTION ilmek_answer; "
        "UPDATE ilmek_meta SET value = '3' WHERE key = 'schema_version'",
    )
    script = ddl(capsys, "--dialect", "postgres", "--from-version", "3")
    # Only the notice outbox (version 6) is a new table since version 3.
    assert [] == [line for line in script.splitlines() if "CREATE TABLE" in line and "_notices" not in line]
    assert script.rstrip().endswith(
        f"VALUES ('schema_version', '{PostgresCheckpointer.SCHEMA_VERSION}') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value;"
    )
    run_postgres_script(postgres_dsn, script)
    assert ["ilmek_answer", "ilmek_superstep"] == postgres_objects(postgres_dsn, "ilmek")["functions"]
    with PostgresCheckpointer.connect(postgres_dsn) as checkpointer:
        # No SchemaVersionError: the version is the current one, and the functions work.
        assert (
            "interrupted"
            == run(
                build_checkout_graph(), {"cart": list(CART)}, thread_id="t", checkpointer=checkpointer
            ).status
        )


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_an_upgrade_that_is_python_is_refused_saying_to_run_migrate(
    capsys: pytest.CaptureFixture[str], dialect: str
) -> None:
    """`ddl --from-version 1` (journals copied in Python) exits 1 on one line naming `ilmek migrate`."""
    status, out, err = cli(capsys, "ddl", "--dialect", dialect, "--from-version", "1")
    assert (1, "") == (status, out)
    assert err.startswith("ilmek: the upgrade from schema version 1 to 2 is not SQL alone")
    assert "ilmek migrate" in err
    assert 1 == err.count("\n")


def test_the_upgrade_script_at_the_current_version_is_empty_and_a_future_one_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At the current version the script is one SQL comment ([] in JSON); a version past it exits 1."""
    current = str(SqliteCheckpointer.SCHEMA_VERSION)
    assert f"-- schema version {current} is the current one: nothing to upgrade\n" == ddl(
        capsys, "--dialect", "sqlite", "--from-version", current
    )
    assert [] == json.loads(ddl(capsys, "--dialect", "sqlite", "--from-version", current, "--json"))
    status, out, err = cli(capsys, "ddl", "--dialect", "sqlite", "--from-version", "9")
    assert (1, "") == (status, out)
    assert f"from_version must be a schema version from 1 to {current}, got 9" in err


def test_the_classmethods_build_the_scripts_without_a_connection() -> None:
    """SqlCheckpointer.drop_sql / upgrade_sql are what the command prints, for any prefix, case-folded."""
    dropped = PostgresCheckpointer.drop_sql("Shop")
    # The signatures schema 7 had (an upgraded store keeps them), then the current functions by name.
    assert dropped[0].startswith("DROP FUNCTION IF EXISTS shop_superstep(text, text, ")
    assert dropped[1:4] == [
        "DROP FUNCTION IF EXISTS shop_answer(text, text, text, boolean, bigint, double precision, jsonb)",
        "DROP FUNCTION IF EXISTS shop_answer",
        "DROP FUNCTION IF EXISTS shop_superstep",
    ]
    assert "DROP TABLE IF EXISTS shop_meta" == SqliteCheckpointer.drop_sql("Shop")[-1]
    assert all("ilmek_" not in statement for statement in PostgresCheckpointer.upgrade_sql(2, "shop"))
    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer.drop_sql("shop; DROP TABLE x")
