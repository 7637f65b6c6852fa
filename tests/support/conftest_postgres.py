"""pytest fixtures giving tests a real PostgreSQL database.

Load it from ``tests/conftest.py`` with ``pytest_plugins = ["tests.support.conftest_postgres"]``
(or ``-p tests.support.conftest_postgres``). Only fixtures and their pytest glue belong
here; starting/stopping servers lives in ``tests/support/pgcluster.py``.

Fixtures:

* ``postgres_server`` (session): a ``PostgresServer`` with ``.dsn``, ``.url``,
  ``create_database()`` and ``drop_database()``.
* ``postgres_template_dsn`` (session): DSN of the empty ``ilmek_template`` database.
* ``postgres_template_setup`` (session): hook run once against the template
  before the first clone; does nothing unless a conftest overrides it, e.g.::

      @pytest.fixture(scope="session")
      def postgres_template_setup(postgres_template_dsn):
          run_migrations(postgres_template_dsn)

* ``postgres_template_name`` (session): the template's database name, once the
  hook has run (for cloning extra databases by hand).
* ``postgres_dsn`` (function): DSN of a fresh database cloned from the template,
  dropped after the test.

Environment:

* ``ILMEK_TEST_POSTGRES_DSN``: use this server instead of starting one (the role
  needs CREATEDB; ``ilmek_template`` and ``test_<n>`` databases are dropped and
  recreated on it).
* ``ILMEK_TEST_PG_BINDIR``: folder with initdb/pg_ctl (default: auto-detected).
* ``ILMEK_TEST_PG_TMPDIR``: parent folder for the throwaway cluster (default:
  /dev/shm if it has 1 GiB free, else the system temp folder).
* ``CI``: when set (and not ``0``/``false``), a missing server fails the tests
  instead of skipping them.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import warnings
from collections.abc import Iterator
from typing import NoReturn

import psycopg2
import pytest

from tests.support.pgcluster import PostgresCluster, PostgresServer

TEMPLATE_NAME = "ilmek_template"


def in_ci() -> bool:
    """Whether the tests run under CI (``CI`` set, and not ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def unavailable(problem: str) -> NoReturn:
    """A service a test needs cannot be had: fail under CI, skip elsewhere."""
    if in_ci():
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


def _suffix() -> str:
    # Keeps database names apart if pytest-xdist workers share one external server.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"_{worker}" if worker else ""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole session: ``ILMEK_TEST_POSTGRES_DSN`` or a private cluster.

    Fails under CI and skips elsewhere when no server can be had.
    """
    external = os.environ.get("ILMEK_TEST_POSTGRES_DSN", "").strip()
    server: PostgresServer | None = None
    try:
        if external:
            server = PostgresServer(external)
            server.server_version()  # connects, so a bad DSN is reported here
        else:
            bindir = os.environ.get("ILMEK_TEST_PG_BINDIR", "").strip() or None
            tmpdir = os.environ.get("ILMEK_TEST_PG_TMPDIR", "").strip() or None
            server = PostgresCluster.start(bindir=bindir, tmpdir=tmpdir)
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg2.Error) as exc:
        source = "ILMEK_TEST_POSTGRES_DSN" if external else "a throwaway cluster"
        problem = f"no PostgreSQL server available ({source}): {type(exc).__name__}: {exc}"
        server = None
    # Outside the except block, so the report is not cluttered by exception chaining.
    if server is None:
        unavailable(problem)
    try:
        yield server
    finally:
        if isinstance(server, PostgresCluster):
            server.stop()
        else:
            server.close()


@pytest.fixture(scope="session")
def postgres_template_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """DSN of the (re)created, empty template database that ``postgres_dsn`` clones."""
    name = TEMPLATE_NAME + _suffix()
    # Drop a stale copy left by an earlier run on an external server.
    postgres_server.drop_database(name)
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def postgres_template_setup(postgres_template_dsn: str) -> None:
    """Hook to fill the template (e.g. run migrations) once; override it in a conftest.

    Close every connection you open: a template cannot be cloned while in use.
    """


@pytest.fixture(scope="session")
def postgres_template_name(
    postgres_server: PostgresServer,
    postgres_template_dsn: str,
    postgres_template_setup: None,
) -> str:
    """Name of the template database, after the setup hook has run."""
    name = TEMPLATE_NAME + _suffix()
    # A connection left open by the hook would make every clone wait and retry.
    postgres_server.terminate_backends(name)
    return name


_counter = itertools.count(1)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer, postgres_template_name: str) -> Iterator[str]:
    """DSN of a fresh database cloned from the template; dropped after the test."""
    name = f"test_{next(_counter)}{_suffix()}"
    if not isinstance(postgres_server, PostgresCluster):
        # Names repeat across sessions: drop a leftover from a crashed run.
        postgres_server.drop_database(name)
    dsn = postgres_server.create_database(name, template=postgres_template_name)
    yield dsn
    try:
        postgres_server.drop_database(name)
    except (RuntimeError, psycopg2.Error) as exc:
        # A leak must not turn a passing test red (the cluster is discarded
        # anyway), even under `filterwarnings = error`: report, never raise.
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(f"could not drop test database {name}: {exc}", stacklevel=1)
