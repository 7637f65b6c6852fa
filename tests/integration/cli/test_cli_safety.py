"""The command line against hostile and odd input: no escape sequence, password or traceback gets out.

Stored values and arguments carry terminal escape sequences (a window title,
a screen clear, C1 CSI, a right-to-left override); connection strings carry
passwords in every form libpq reads; numbers, paths and URLs are absurd.
Every command must answer with its output or one ``ilmek: ...`` line, exit
0, 1 or 2, and never let a control character or a password through.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sqlite3
import subprocess
from typing import Any

import pytest

from ilmek import channel, graph, run
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.context import NodeContext
from ilmek.graph import END, START, CompiledGraph
from tests.support.cli_support import (
    COMMANDS,
    SERVING_COMMANDS,
    cli,
    db_fixture,  # noqa: F401 - a fixture, used by name
    home_fixture,  # noqa: F401 - a fixture, used by name
    paused_order,
    raw_controls,
    store_fixture,  # noqa: F401 - a fixture, used by name
)
from tests.support.pgcluster import dsn_to_url

EVIL = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b"
"""Set the window title, clear the screen, reverse the text, and a one-byte CSI."""


def evil_graph() -> CompiledGraph:
    """A graph whose name, step keys, interrupt key, payload and state all carry EVIL."""

    def ask(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ctx.step("lookup " + EVIL, lambda: {"found " + EVIL: EVIL})
        answer = ctx.interrupt({"question " + EVIL: EVIL}, key="approve " + EVIL)
        return {"note": answer}

    return (
        graph("evil " + EVIL, {"note": channel.last_write(""), "big": channel.last_write(0)})
        .node("ask", ask)
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
    )


@pytest.fixture
def evil_thread(store: SqliteCheckpointer) -> str:
    """A paused thread whose id, pause, journal, state and metadata all carry EVIL."""
    thread_id = "t " + EVIL
    result = run(evil_graph(), {"note": EVIL, "big": 10**5000}, thread_id=thread_id, checkpointer=store)
    assert "interrupted" == result.status
    store.put_thread_metadata(thread_id, {"owner " + EVIL: EVIL})
    return thread_id


def assert_clean(status: int, out: str, err: str) -> None:
    """Output fit for a terminal: a known status, no traceback, no raw control character."""
    assert status in {0, 1, 2}
    assert "Traceback" not in err
    assert [] == raw_controls(out)
    assert [] == raw_controls(err)
    if status != 0:
        assert err.startswith("ilmek: ")
        assert 1 == err.count("\n")


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["threads", "--json"],
        ["threads", "--search", EVIL],
        ["history", "{thread}"],
        ["history", "{thread}", "--json"],
        ["show", "{thread}"],
        ["show", "{thread}", "--full"],
        ["show", "{thread}", "--json"],
        ["show", "{thread}", EVIL],
        ["history", "missing " + EVIL],
        ["delete", "missing " + EVIL, "--yes"],
        ["prune", "{thread}", "--keep-last", "1"],
        ["prune", "{thread}", "--keep-last", "1", "--json"],
        ["delete", "missing " + EVIL, "--yes", "--json"],
        ["demo", "--thread", "{thread}", "--json"],
        ["cancel", "{thread}", "--reason", EVIL, "--json"],
        ["recover", "no_such_module:" + EVIL, "--json"],
        ["demo", "--thread", "{thread}"],
        ["demo", "--thread", "other " + EVIL, "--answer", EVIL],
        ["threads", EVIL],
        ["threads", "--updated-before", EVIL],
        ["cancel", "{thread}", "--reason", EVIL],
        ["cancel", "missing " + EVIL],
        ["gc", "--older-than", EVIL],
        ["gc", "--older-than", "0s", "--dry-run", "--verbose"],
        ["gc", "--older-than", "0s", "--keep-last", "1", "--dry-run", "--verbose"],
        ["gc", "--older-than", "0s", "--keep-last", "1", "--dry-run", "--verbose", "--json"],
        ["recover", "no_such_module:" + EVIL],
        ["recover", EVIL],
    ],
)
def test_stored_and_typed_escape_sequences_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str], db: str, evil_thread: str, command: list[str]
) -> None:
    """Every command on a thread full of escape sequences prints them escaped, on stdout and stderr."""
    argv = [word.replace("{thread}", evil_thread) for word in command]
    status, out, err = cli(capsys, "--db", db, *argv)
    assert_clean(status, out, err)
    assert "\\x1b]0;pwned\\x07" in out + err or "\\u001b]0;pwned\\u0007" in out + err


def test_the_demo_hint_escapes_a_hostile_thread_id(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """The demo's `answer with:` hint quotes a hostile thread id as a runnable $'...' word."""
    status, out, err = cli(capsys, "--db", db, "demo", "--thread", EVIL)
    assert_clean(status, out, err)
    assert "--thread $'\\x1b]0;pwned\\x07\\x1b[2J\\xe2\\x80\\xae\\xc2\\x9b' --answer yes" in out


def test_json_output_keeps_hostile_text_exactly_and_escaped(
    capsys: pytest.CaptureFixture[str], db: str, evil_thread: str
) -> None:
    """--json escapes what could steer a terminal as \\u escapes, and parses back to the stored text."""
    status, out, err = cli(capsys, "--db", db, "threads", "--json")
    assert_clean(status, out, err)
    assert [evil_thread] == [thread["id"] for thread in json.loads(out)["threads"]]
    assert {"owner " + EVIL: EVIL} == json.loads(out)["threads"][0]["metadata"]

    status, out, err = cli(capsys, "--db", db, "show", evil_thread, "--json")
    assert_clean(status, out, err)
    shown = json.loads(out)
    assert EVIL == shown["channels"]["note"]
    assert "ask:approve " + EVIL + "#0" == shown["pending"][0]["id"]


def test_a_huge_integer_in_state_prints_as_its_length(
    capsys: pytest.CaptureFixture[str], db: str, evil_thread: str
) -> None:
    """An int of 5,001 digits (which str() refuses) shows as `<int of 5001 digits>`, whole with --full."""
    status, out, _ = cli(capsys, "--db", db, "show", evil_thread)
    assert 0 == status
    assert '  big: "<int of 5001 digits>"' in out.splitlines()

    status, out, _ = cli(capsys, "--db", db, "show", evil_thread, "--full")
    assert 0 == status
    assert '  big: "1' + "0" * 5000 + '"' in out.splitlines()

    status, out, _ = cli(capsys, "--db", db, "show", evil_thread, "--json")
    assert 0 == status
    assert {"__ilmek__": "int", "v": format(10**5000, "x")} == json.loads(out)["channels"]["big"]


# --- passwords --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "database",
    [
        "postgresql://shop:hunter22@127.0.0.1:1/shop",
        "postgresql://shop@127.0.0.1:1/shop?password=hunter22",
        "postgresql://shop@127.0.0.1:1/shop?sslmode=disable&SSLPASSWORD=hunter22",
        "postgresql://shop@127.0.0.1:1/shop?pass%77ord=hunter22",
        "host=127.0.0.1 port=1 dbname=shop password=hunter22",
        "host=127.0.0.1 port=1 dbname=shop password='hunter22 with spaces'",
        "host=127.0.0.1 port=1 dbname=shop password = hunter22",
        "host=127.0.0.1 port=1 password=hunter22 with spaces dbname=shop",
        "postgresql://shop:hunter22@[::1/shop",
    ],
)
@pytest.mark.parametrize("command", [["threads"], ["demo"], ["migrate"], ["history", "t"]])
def test_no_password_in_any_error(
    capsys: pytest.CaptureFixture[str], database: str, command: list[str]
) -> None:
    """A server that refuses, or a DSN libpq cannot parse: the error names the store, password masked."""
    status, out, err = cli(capsys, "--db", database, *command)
    assert_clean(status, out, err)
    assert 1 == status
    assert "hunter22" not in out + err
    assert "***" in err


def test_no_password_in_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A DSN given where argparse did not expect it is echoed masked."""
    status, out, err = cli(capsys, "threads", "postgresql://shop:hunter22@db/shop", "password=hunter22")
    assert_clean(status, out, err)
    assert 2 == status
    assert "hunter22" not in err


def test_no_password_in_the_demo_hint(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    """The demo echoes --db in its hint; a password there would be shown masked (here: a file path)."""
    odd = str(tmp_path / "password=hunter22.db")
    status, out, err = cli(capsys, "--db", odd, "demo")
    assert_clean(status, out, err)
    assert "hunter22" not in out


@pytest.mark.postgres
def test_a_keyword_dsn_is_postgres_and_its_password_is_never_shown(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, home: pathlib.Path
) -> None:
    """`--db "host=... dbname=..."` opens Postgres (no SQLite file appears); errors mask its password."""
    # The test server trusts every connection, so the password is accepted and ignored.
    dsns = [
        f"{postgres_dsn} password='quoted hunter22'",
        dsn_to_url(postgres_dsn) + "&password=hunter22"
        if "?" in dsn_to_url(postgres_dsn)
        else dsn_to_url(postgres_dsn) + "?password=hunter22",
        f"{postgres_dsn} sslpassword=hunter22",
    ]
    status, out, err = cli(capsys, "--db", dsns[0], "migrate")
    assert (0, "") == (status, err)
    assert f"schema version {PostgresCheckpointer.SCHEMA_VERSION}" in out
    for dsn in dsns:
        status, out, err = cli(capsys, "--db", dsn, "threads")
        assert (0, "no threads\n", "") == (status, out, err)
        status, out, err = cli(capsys, "--db", dsn, "history", "nope")
        assert 1 == status
        assert err.startswith("ilmek: thread 'nope' has no checkpoints in ")
        assert "hunter22" not in err
    assert [] == list(pathlib.Path.cwd().glob("host=*"))
    assert [] == list(home.iterdir())


# --- odd input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["threads", "--limit", "99999999999999999999999"], "argument --limit: must be at most 1000000000"),
        (["threads", "--limit", "9" * 5000], "argument --limit: must be at most 1000000000"),
        (["threads", "--limit", "-3"], "argument --limit: must be at least 1, got -3"),
        (["threads", "--limit", "1e3"], "argument --limit: not a whole number: '1e3'"),
        (["history", "t", "--limit", "0"], "argument --limit: must be at least 1, got 0"),
        (["prune", "t", "--keep-last", "4294967297000"], "argument --keep-last: must be at most 1000000000"),
        (["--db", "", "threads"], "argument --db: is empty"),
        (["--db", "   ", "threads"], "argument --db: is empty"),
        (["migrate", ""], "argument DATABASE: is empty"),
        (["history", "bad \udcff"], "argument THREAD: not valid text"),
        (["--table-prefix", "p" * 5000, "ddl"], "argument --table-prefix: table_prefix must match"),
    ],
)
def test_odd_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Absurd numbers, an empty --db, undecodable bytes: one `ilmek:` line, status 2, no store opened."""
    status, out, err = cli(capsys, *argv)
    assert_clean(status, out, err)
    assert (2, "") == (status, out)
    assert err.startswith(f"ilmek: {message}")
    assert len(err) < 500


@pytest.mark.parametrize(
    ("database", "message"),
    [
        ("postgresql://shop:hunter22@[::1/shop", "cannot open postgresql://shop:***@[::1/shop: invalid dsn"),
        ("x" * 5000, "cannot open " + "x" * 200 + "… (4800 more characters): "),
        ("mysql:///tmp/store.db", "unsupported database URL 'mysql:///tmp/store.db'"),
        ("sqlite://db.example/store.db", "'sqlite://db.example/store.db' names a host"),
    ],
)
@pytest.mark.parametrize("command", ["threads", "migrate", "demo"])
def test_a_store_that_cannot_be_opened_is_one_clean_line(
    capsys: pytest.CaptureFixture[str], database: str, message: str, command: str
) -> None:
    """An unbalanced IPv6 bracket, a 5,000-character path, another scheme: status 1 and why."""
    status, out, err = cli(capsys, "--db", database, command)
    assert_clean(status, out, err)
    assert 1 == status
    assert err.startswith(f"ilmek: {message}")


def test_a_file_that_is_not_a_database_is_a_clean_error(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """A text file or a folder given as the store: `ilmek: cannot open ...`, status 1."""
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    for database in [str(text), str(tmp_path)]:
        status, out, err = cli(capsys, "--db", database, "threads")
        assert_clean(status, out, err)
        assert 1 == status
        assert err.startswith(f"ilmek: cannot open {database}: ")


def test_an_empty_ilmek_db_reads_as_unset(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, home: pathlib.Path
) -> None:
    """ILMEK_DB= (empty) falls back to the default file, as an unset variable does; --db '' does not."""
    monkeypatch.setenv("ILMEK_DB", "")
    status, _, err = cli(capsys, "threads")
    assert 1 == status
    assert err.startswith(f"ilmek: no database at {home / '.ilmek' / 'checkpoints.db'}")


# --- escape sequences in the store's own path ------------------------------------------------------

SHOWN_EVIL = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b"
"""EVIL as a message shows it: every control escaped, nothing dropped."""

PATH_COMMANDS: dict[str, list[str]] = {
    "threads": ["threads"],
    "history": ["history", "t"],
    "show": ["show", "t"],
    "delete": ["delete", "t", "--yes"],
    "prune": ["prune", "t", "--keep-last", "1"],
    "gc": ["gc", "--older-than", "1d"],
    "recover": ["recover", "ilmek.demo:build_checkout_graph"],
    "cancel": ["cancel", "t"],
    "demo": ["demo"],
    "migrate": ["migrate"],
    "web": ["web", "--port", "0"],
}


def evil_store_path(kind: str, tmp_path: pathlib.Path) -> str:
    """A --db value carrying EVIL: missing, a text file, a folder, a later schema's store, an empty store."""
    folder = tmp_path / "stores"
    folder.mkdir()
    path = folder / f"{kind} {EVIL}.db"
    if kind == "text-file":
        path.write_text("not a database\n" * 100)
    elif kind == "folder":
        path.mkdir()
    elif kind in ("later-schema", "empty-store"):
        SqliteCheckpointer(path).close()
        if kind == "later-schema":
            connection = sqlite3.connect(path, isolation_level=None)
            connection.execute("UPDATE ilmek_meta SET value = '99' WHERE key = 'schema_version'")
            connection.close()
    return str(path)


def expected_for(kind: str, command: str, shown: str) -> tuple[int, str]:
    """The exit status and the start of stderr (or stdout, on success) for a path of ``kind``."""
    if kind == "missing":
        if command in ("demo", "migrate"):
            return (
                0,
                f"the demo keeps thread 'demo' in {shown} "
                if command == "demo"
                else "ilmek_* tables up to date",
            )
        return 1, f"ilmek: no database at {shown} (nothing has been stored there yet)"
    if kind == "text-file":
        return 1, f"ilmek: cannot open {shown}: file is not a database"
    if kind == "folder":
        return 1, f"ilmek: cannot open {shown}: unable to open database file"
    if kind == "later-schema":
        version = SqliteCheckpointer.SCHEMA_VERSION
        return 1, f"ilmek: the ilmek_* tables are at schema version 99, this ilmek uses version {version}"
    missing_thread = {
        "history": f"ilmek: thread 't' has no checkpoints in {shown}",
        "show": f"ilmek: thread 't' has no checkpoints in {shown}",
        "delete": f"ilmek: thread 't' does not exist in {shown}",
        "prune": f"ilmek: thread 't' does not exist in {shown}",
        "cancel": f"ilmek: thread 't' does not exist in {shown}",
    }
    if command in missing_thread:
        return 1, missing_thread[command]
    return 0, {
        "threads": "no threads",
        "gc": "deleted 0 threads",
        "recover": "no stalled threads",
        "demo": f"the demo keeps thread 'demo' in {shown} ",
        "migrate": "ilmek_* tables up to date",
    }[command]


PATH_CASES = [
    (kind, command)
    for kind in ("missing", "text-file", "folder", "later-schema", "empty-store")
    for command in sorted(PATH_COMMANDS)
    # A store that opens would be served until Ctrl-C (integration/web/test_web_serve.py covers serving).
    if not (kind == "empty-store" and command == "web")
]


@pytest.mark.parametrize(("kind", "command"), PATH_CASES)
def test_escape_sequences_in_the_db_path_never_reach_the_terminal(
    capfd: pytest.CaptureFixture[str], tmp_path: pathlib.Path, kind: str, command: str
) -> None:
    """A --db path holding a title-setter, a screen clear, an RLO and a C1 CSI: every message escapes it.

    Captured at the file descriptors, so nothing written around Python's streams escapes the check;
    where a message names the path, it names it whole, escaped.
    """
    database = evil_store_path(kind, tmp_path)
    shown = database.replace(EVIL, SHOWN_EVIL)
    status, out, err = cli(capfd, "--db", database, *PATH_COMMANDS[command])
    assert_clean(status, out, err)
    expected_status, expected_start = expected_for(kind, command, shown)
    assert expected_status == status, out + err
    assert (err if status else out).startswith(expected_start)


def test_the_demo_hint_quotes_an_escape_laden_db_path_as_a_runnable_word(
    capfd: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """The demo's `answer with:` hint repeats --db as a $'...' word that bash turns back into the path."""
    database = evil_store_path("missing", tmp_path)
    status, out, err = cli(capfd, "--db", database, "demo")
    assert_clean(status, out, err)
    [hint] = [line for line in out.splitlines() if line.startswith("answer with: ")]
    word = hint.split(" --db ", 1)[1].split(" --answer ", 1)[0]
    assert word.startswith("$'")
    echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True)
    assert os.fsencode(database) == echoed.stdout


@pytest.mark.parametrize("where", ["ILMEK_DB", "migrate DATABASE"])
def test_escape_sequences_in_a_store_path_given_otherwise_are_escaped_too(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
    where: str,
) -> None:
    """The store named by $ILMEK_DB, or as migrate's argument: the same escaping as --db."""
    database = evil_store_path("text-file", tmp_path)
    if where == "ILMEK_DB":
        monkeypatch.setenv("ILMEK_DB", database)
        status, out, err = cli(capfd, "threads")
    else:
        status, out, err = cli(capfd, "migrate", database)
    assert_clean(status, out, err)
    assert 1 == status
    assert err.startswith(f"ilmek: cannot open {database.replace(EVIL, SHOWN_EVIL)}: file is not a database")


# --- every command, a battery of odd arguments ------------------------------------------------

ODD_WORDS = [
    EVIL,
    "",
    " ",
    "-",
    "--",
    "0",
    "-1",
    "99999999999999999999999",
    "9" * 5000,
    "1e9",
    "nan",
    "x" * 5000,
    "bad \udcff bytes",
    "\x00nul",
    "'; DROP TABLE ilmek_threads; --",
    "%_\\",
    "😀",
    "postgresql://u:hunter22@[::1/db",
    "postgresql://u@127.0.0.1:1/db?password=hunter22",
    "host=127.0.0.1 port=1 password='hunter22'",
    "mysql://u:hunter22@h/db",
    "sqlite:///x.db",
    "~",
    "/",
    ".",
    "{tmp}/folder/new.db",
    "{db}",
    "{thread}",
    "t",
]
OPTIONS = [
    "--db",
    "--table-prefix",
    "--limit",
    "--keep-last",
    "--status",
    "--search",
    "--thread",
    "--answer",
    "--json",
    "--full",
    "--yes",
    "--dialect",
    "--version",
]


def test_every_command_survives_a_seeded_battery_of_odd_arguments(
    capsys: pytest.CaptureFixture[str],
    db: str,
    tmp_path: pathlib.Path,
    evil_thread: str,
) -> None:
    """Seeded: any command with any odd words exits 0, 1 or 2 with no traceback and no raw control."""
    rng = random.Random(11)
    seen_statuses = set()
    for _ in range(300):
        words = [rng.choice([*(c for c in COMMANDS if c not in SERVING_COMMANDS), "--version", "nope"])]
        for _ in range(rng.randint(0, 4)):
            words.append(rng.choice(OPTIONS) if rng.random() < 0.5 else rng.choice(ODD_WORDS))
        if rng.random() < 0.7:
            words = ["--db", db, *words]
        argv = [
            word.replace("{db}", db).replace("{thread}", evil_thread).replace("{tmp}", str(tmp_path))
            for word in words
        ]
        status, out, err = cli(capsys, *argv)
        assert_clean(status, out, err)
        assert "hunter22" not in out + err, argv
        seen_statuses.add(status)
    assert {0, 1, 2} == seen_statuses
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM ilmek_threads").fetchone()[0] >= 1
    connection.close()


def test_reading_commands_never_create_a_store(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, store: SqliteCheckpointer
) -> None:
    """threads, history, show, delete and prune on a missing file leave no file behind."""
    paused_order(store, "t")
    missing = tmp_path / "missing" / "store.db"
    for command in [
        ["threads"],
        ["history", "t"],
        ["show", "t"],
        ["delete", "t", "--yes"],
        ["prune", "t", "--keep-last", "1"],
    ]:
        status, _, err = cli(capsys, "--db", str(missing), *command)
        assert 1 == status
        assert "no database at" in err
    assert not missing.parent.exists()
