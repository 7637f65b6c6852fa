"""Where the demo writes: its first line names the SQLite file, and ``--help`` says how to pick another.

The default ``~/.ilmek/checkpoints.db`` is checked as a user meets it, in a
new process with a fresh ``HOME``; ``$ILMEK_DB`` and ``--db`` in-process.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.cli_support import cli, home_fixture, run_module  # noqa: F401 - a fixture, used by name

PICK = "(another store: --db DATABASE or $ILMEK_DB)"


def test_the_demo_says_first_which_file_it_writes(home: pathlib.Path) -> None:
    """In a new process, the first line names ~/.ilmek/checkpoints.db under HOME, before any node prints."""
    default = home / ".ilmek" / "checkpoints.db"
    first = run_module(home, "demo")
    assert (0, "") == (first.returncode, first.stderr)
    assert f"the demo keeps thread 'demo' in {default} {PICK}" == first.stdout.splitlines()[0]
    assert "creating order for coffee, mug" == first.stdout.splitlines()[1]
    assert default.is_file()


def test_the_first_line_names_the_store_ilmek_db_or_db_picks(
    capsys: pytest.CaptureFixture[str],
    home: pathlib.Path,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """$ILMEK_DB, then --db over it: the first line names the file written, and only that one is made."""
    chosen, given = tmp_path / "chosen.db", tmp_path / "given.db"
    monkeypatch.setenv("ILMEK_DB", str(chosen))
    status, out, _ = cli(capsys, "demo", "--thread", "x")
    assert (0, f"the demo keeps thread 'x' in {chosen} {PICK}") == (status, out.splitlines()[0])
    status, out, _ = cli(capsys, "demo", "--db", str(given))
    assert (0, f"the demo keeps thread 'demo' in {given} {PICK}") == (status, out.splitlines()[0])
    assert (True, True, False) == (chosen.is_file(), given.is_file(), (home / ".ilmek").exists())
    # A demo that cannot do what it is asked prints nothing on stdout, only its one-line error.
    status, out, err = cli(capsys, "demo", "--thread", "new", "--answer", "yes")
    assert (1, "") == (status, out)
    assert err.startswith("ilmek: thread 'new' is not waiting for an answer")


def test_the_demo_help_names_the_default_file_and_how_to_pick_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`demo --help` names ~/.ilmek/checkpoints.db, --db and $ILMEK_DB."""
    status, out, _ = cli(capsys, "demo", "--help")
    text = " ".join(out.split())
    assert 0 == status
    assert "It writes to ~/.ilmek/checkpoints.db unless --db or $ILMEK_DB names another store" in text
