"""What the command-line test modules share: fixtures, running a command, stores set up.

The fixtures are named with ``name=`` so that a test module imports them as
``home_fixture`` and its tests still ask for ``home``, ``db`` and ``store``.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import unicodedata
from collections.abc import Iterator

import pytest

from ilmek import Checkpointer, Result, resume, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.cli import main
from ilmek.demo import CART, build_checkout_graph

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = [
    "demo", "threads", "history", "show", "delete", "prune",
    "recover", "cancel", "gc", "migrate", "rekey", "ddl", "web", "worker",
]  # fmt: skip
SERVING_COMMANDS = frozenset({"web", "worker"})
"""Commands that serve until Ctrl-C: tested on their own (``tests/integration/web/test_web_serve.py``),
never fuzzed."""

# What must never reach a terminal raw (ilmek.redact.printable's families).
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"}


@pytest.fixture(name="home", autouse=True)
def home_fixture(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A fresh HOME, no ILMEK_DB, and a scratch working folder: no test touches the developer's files."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "cwd").mkdir()
    # A store given by a relative name (or an odd word taken as one) is created here.
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ILMEK_DB", raising=False)
    monkeypatch.delenv("ILMEK_DEMO_COMMAND", raising=False)
    return home


@pytest.fixture(name="db")
def db_fixture(tmp_path: pathlib.Path) -> str:
    """The path of the SQLite file a test's commands work on."""
    return str(tmp_path / "store.db")


@pytest.fixture(name="store")
def store_fixture(db: str) -> Iterator[SqliteCheckpointer]:
    """A checkpointer on the test's file, for setting up threads through the Python API."""
    checkpointer = SqliteCheckpointer(db)
    yield checkpointer
    checkpointer.close()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run one command in-process; return its exit status, stdout and stderr."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def run_module(
    home: pathlib.Path, *argv: str, env: dict[str, str] | None = None, executable: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ilmek`` (or ``executable``) in a new process from the repository root."""
    environment = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    environment.pop("ILMEK_DB", None)
    if env is None or "ILMEK_DEMO_COMMAND" not in env:
        environment.pop("ILMEK_DEMO_COMMAND", None)
    command = [executable] if executable is not None else [sys.executable, "-m", "ilmek"]
    return subprocess.run(
        [*command, *argv],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def paused_order(store: Checkpointer, thread_id: str) -> str:
    """Start the demo's checkout on a thread through the API; return the pause's checkpoint id."""
    result = run(build_checkout_graph(), {"cart": list(CART)}, thread_id=thread_id, checkpointer=store)
    assert "interrupted" == result.status
    assert result.checkpoint_id is not None
    return result.checkpoint_id


def finished_order(store: Checkpointer, thread_id: str, answer: str = "yes") -> None:
    """Run the demo's checkout to the end on a thread through the API."""
    paused_order(store, thread_id)
    assert "done" == resume(build_checkout_graph(), answer, thread_id=thread_id, checkpointer=store).status


def forked_order(store: Checkpointer, thread_id: str) -> tuple[str, Result, Result]:
    """A checkout answered "yes", then its pause answered again "no": a fork.

    Returns:
        The pause's checkpoint id, the "yes" result and the "no" result (the latest).
    """
    g = build_checkout_graph()
    pause_id = paused_order(store, thread_id)
    yes = resume(g, "yes", thread_id=thread_id, checkpointer=store)
    no = resume(g, "no", thread_id=thread_id, checkpointer=store, checkpoint_id=pause_id)
    return pause_id, yes, no


def history_rows(text: str) -> list[list[str]]:
    """The lines `history` printed, split into words (box-drawing prefixes included)."""
    return [line.split() for line in text.splitlines()]


def raw_controls(text: str) -> list[str]:
    """The characters of printed ``text`` that could steer a terminal (line breaks aside)."""
    return [char for char in text if char != "\n" and unicodedata.category(char) in _UNSAFE_CATEGORIES]
