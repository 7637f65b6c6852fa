"""ilmek's tables from an Alembic migration, online and offline (``--sql``): real Alembic, real Postgres.

A tiny Alembic project is written into the test's folder and run as an
operator runs it (``python -m alembic upgrade head``). Online,
``PostgresCheckpointer(op.get_bind()).migrate()`` creates the tables inside
Alembic's transaction. Offline, ``op.get_bind()`` is a mock connection that
runs nothing: ``migrate()`` there is refused with an ``IlmekError`` that says
to ``op.execute()`` the DDL, and the README's recipe, which does so, emits a
script that makes a schema the checkpointer accepts.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys

import psycopg2
import pytest

from ilmek import InvalidArgumentError, PostgresCheckpointer, run
from ilmek.demo import CART, build_checkout_graph
from tests.support.cli_support import REPO_ROOT
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(120)

ENV_PY = '''
"""Alembic's env.py, as its generic template has it: offline, a URL; online, a connection."""
import os

from alembic import context
from sqlalchemy import create_engine, pool

URL = os.environ["ILMEK_TEST_ALEMBIC_URL"]

if context.is_offline_mode():
    context.configure(url=URL, literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(URL, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
'''

NAIVE = '''
"""ilmek's tables, the online way only."""
from alembic import op

from ilmek import PostgresCheckpointer

revision = "0001"
down_revision = None


def upgrade():
    PostgresCheckpointer(op.get_bind(), table_prefix="shop").migrate()


def downgrade():
    for statement in PostgresCheckpointer.drop_sql("shop"):
        op.execute(statement)
'''

# The README's recipe, word for word but for the prefix.
RECIPE = '''
"""ilmek's tables: migrate() through Alembic's connection online, the DDL emitted offline."""
from alembic import context, op

from ilmek import PostgresCheckpointer

revision = "0001"
down_revision = None


def upgrade():
    if context.is_offline_mode():
        for statement in PostgresCheckpointer.schema_sql("shop"):
            op.execute(statement)
    else:
        PostgresCheckpointer(op.get_bind(), table_prefix="shop").migrate()


def downgrade():
    for statement in PostgresCheckpointer.drop_sql("shop"):
        op.execute(statement)
'''


def alembic_project(folder: pathlib.Path, revision: str) -> pathlib.Path:
    """An Alembic project with one revision; returns its alembic.ini."""
    versions = folder / "migrations" / "versions"
    versions.mkdir(parents=True)
    (folder / "migrations" / "env.py").write_text(ENV_PY, encoding="utf-8")
    (versions / "0001_ilmek.py").write_text(revision, encoding="utf-8")
    ini = folder / "alembic.ini"
    ini.write_text("[alembic]\nscript_location = %(here)s/migrations\n", encoding="utf-8")
    return ini


def alembic(ini: pathlib.Path, dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m alembic -c ini ...`` against the test's database."""
    url = dsn_to_url(dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "ILMEK_TEST_ALEMBIC_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(ini), *argv],
        cwd=ini.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def shop_tables(dsn: str) -> set[str]:
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'shop\\_%'")
        return {row[0] for row in cursor.fetchall()}


def checkout_pauses(dsn: str) -> None:
    """A checkout on the shop_* tables pauses: the schema is whole and at this ilmek's version."""
    with PostgresCheckpointer.connect(dsn, table_prefix="shop") as checkpointer:
        result = run(build_checkout_graph(), {"cart": list(CART)}, thread_id="t", checkpointer=checkpointer)
        assert "interrupted" == result.status


@pytest.mark.postgres
def test_migrate_in_offline_mode_is_refused_saying_to_emit_the_ddl(
    tmp_path: pathlib.Path, postgres_dsn: str
) -> None:
    """`alembic upgrade head --sql` calling migrate(): an IlmekError naming op.execute and schema_sql."""
    ini = alembic_project(tmp_path, NAIVE)
    offline = alembic(ini, postgres_dsn, "upgrade", "head", "--sql")
    assert 1 == offline.returncode
    last = offline.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ilmek.errors.InvalidArgumentError: PostgresCheckpointer cannot use a SQLAlchemy mock"
    )
    for advice in (
        "offline mode",
        "op.execute(statement)",
        "PostgresCheckpointer.schema_sql(prefix)",
        "upgrade_sql",
    ):
        assert advice in last
    assert "transaction open" not in offline.stderr
    # Nothing of ilmek's reached the script (the old probe wrote a SAVEPOINT into it).
    assert "ilmek_probe" not in offline.stdout
    assert "shop_" not in offline.stdout
    assert set() == shop_tables(postgres_dsn)


@pytest.mark.postgres
def test_the_readme_recipe_emits_a_script_offline_that_makes_a_working_schema(
    tmp_path: pathlib.Path, postgres_dsn: str
) -> None:
    """Offline, the recipe prints the DDL (run by hand: a working schema) and drop_sql() to downgrade."""
    ini = alembic_project(tmp_path, RECIPE)
    offline = alembic(ini, postgres_dsn, "upgrade", "head", "--sql")
    assert 0 == offline.returncode, offline.stderr
    assert "CREATE OR REPLACE FUNCTION shop_superstep(" in offline.stdout
    assert set() == shop_tables(postgres_dsn)  # offline: nothing ran
    with contextlib.closing(psycopg2.connect(postgres_dsn)) as connection:
        with connection.cursor() as cursor:
            cursor.execute(offline.stdout)
        connection.commit()
    assert {"shop_meta", "shop_threads", "shop_checkpoints", "shop_journals"} <= shop_tables(postgres_dsn)
    checkout_pauses(postgres_dsn)
    # The offline downgrade emits drop_sql(): run by hand, it leaves no table and no function.
    down = alembic(ini, postgres_dsn, "downgrade", "0001:base", "--sql")
    assert 0 == down.returncode, down.stderr
    assert "DROP FUNCTION IF EXISTS shop_superstep;" in down.stdout
    with contextlib.closing(psycopg2.connect(postgres_dsn)) as connection:
        with connection.cursor() as cursor:
            cursor.execute(down.stdout)
            cursor.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'shop\\_%'")
            assert [] == cursor.fetchall()
        connection.commit()
    assert set() == shop_tables(postgres_dsn)


@pytest.mark.postgres
def test_the_recipe_online_migrates_through_alembics_connection_and_downgrades(
    tmp_path: pathlib.Path, postgres_dsn: str
) -> None:
    """Online, migrate() runs in Alembic's transaction; `downgrade base` drops every table again."""
    ini = alembic_project(tmp_path, RECIPE)
    online = alembic(ini, postgres_dsn, "upgrade", "head")
    assert 0 == online.returncode, online.stderr
    checkout_pauses(postgres_dsn)
    down = alembic(ini, postgres_dsn, "downgrade", "base")
    assert 0 == down.returncode, down.stderr
    assert set() == shop_tables(postgres_dsn)


def test_a_mock_connection_is_refused_before_any_sql() -> None:
    """PostgresCheckpointer(create_mock_engine(...)) is an InvalidArgumentError; the mock records nothing."""
    from sqlalchemy import create_mock_engine

    recorded: list[object] = []
    mock = create_mock_engine("postgresql+psycopg2://", lambda sql, *args, **kw: recorded.append(sql))
    with pytest.raises(InvalidArgumentError, match=r"Alembic's op.get_bind\(\) returns in offline mode"):
        PostgresCheckpointer(mock)
    assert [] == recorded
