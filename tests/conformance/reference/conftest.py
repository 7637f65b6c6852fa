"""Fixtures for the ported reference suite: memory, a SQLite file and Postgres.

The reference's behavioural tests (``AimTune/ilmek``: ``ts/packages/*/test``
and ``dotnet/test``) are ported here, each test naming the reference case it
ports. They run on three stores rather than on every client kind: the
conformance suite (``tests/conformance/port``) already covers every client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ilmek import Checkpointer
from tests.support.backends import Backend, opened_backend

REFERENCE_BACKENDS = ("memory", "sqlite-file", "postgres-pool")


@pytest.fixture(params=REFERENCE_BACKENDS)
def ref_backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """The store a reference test runs on: memory, a SQLite file, then Postgres."""
    with opened_backend(request.param, request, tmp_path_factory) as store:
        yield store


@pytest.fixture
def ref_checkpointer(ref_backend: Backend) -> Checkpointer:
    """A checkpointer on a fresh store of each reference backend in turn."""
    return ref_backend.open()


@pytest.fixture
def ref_reopen(ref_backend: Backend) -> Callable[[], Checkpointer]:
    """Another checkpointer on the same store, as another process would open it."""
    return ref_backend.open
