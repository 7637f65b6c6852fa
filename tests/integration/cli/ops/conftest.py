"""Fixtures of the operations commands' tests: a real store, graph modules, workers, a broken thread.

``home`` (a fresh HOME and working folder) is on for every test here, as in
the other command-line modules; ``workers`` are crash-worker processes
(``tests/support/crash.py``), killed if still running at the end.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from ilmek.checkpoint.base import Checkpointer
from ilmek.types import ThreadInfo
from tests.support.cli_ops import Modules, Store, failed_threads
from tests.support.cli_support import home_fixture  # noqa: F401 - a fixture, used by name
from tests.support.crash import workers_fixture  # noqa: F401 - a fixture, used by name
from tests.support.crashworker import Effects


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """A SQLite file or a fresh Postgres database, with ilmek's tables."""
    opened = Store(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def checkpointer(store: Store) -> Checkpointer:
    """This process's checkpointer on the test's store (the commands open their own)."""
    return store.open()


@pytest.fixture
def modules(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Modules]:
    """Graph modules in the test's working folder (the ``home`` fixture's ``cwd``)."""
    written = Modules(tmp_path / "cwd", monkeypatch)
    yield written
    written.close()


@pytest.fixture
def effects(tmp_path: pathlib.Path) -> Effects:
    """The test's effects file: one line per real execution of a step."""
    return Effects(tmp_path / "effects.txt")


@pytest.fixture
def broken(checkpointer: Checkpointer, modules: Modules, effects: Effects) -> ThreadInfo:
    """Thread ``broken``, whose run failed in its node (the message full of escapes); its info."""
    failed_threads(checkpointer, modules.flaky(effects, modules.folder / "never"), ["broken"])
    info = checkpointer.get_thread("broken")
    assert info is not None
    assert info.error is not None
    return info
