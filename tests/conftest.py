"""Shared fixtures: the ``checkpointer`` fixture runs a test on every backend.

The backends are ``tests/support/backends.py``'s: add one by adding one entry
to ``BACKENDS`` there. Tests that need a second checkpointer on the same store
(another "process") use ``reopen``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ilmek import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from tests.support.backends import BACKENDS, Backend, opened_backend

pytest_plugins = ["tests.support.conftest_postgres"]


@pytest.fixture(scope="session")
def postgres_template_setup(postgres_template_dsn: str) -> None:
    """Every test database starts with ilmek's tables under the default prefix."""
    with PostgresCheckpointer.connect(postgres_template_dsn) as checkpointer:
        checkpointer.migrate()


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The store a test runs on, one per backend."""
    with opened_backend(request.param, request, tmp_path_factory) as store:
        yield store


@pytest.fixture
def checkpointer(backend: Backend) -> Checkpointer:
    """A checkpointer on a fresh store, for each backend in turn."""
    return backend.open()


@pytest.fixture
def reopen(backend: Backend) -> Callable[[], Checkpointer]:
    """Opens another checkpointer on the same store, as another process would."""
    return backend.open
