"""Bad input, attacked on every backend: forged and damaged rows, hostile arguments.

Every bad row or argument gets an ilmek error that names the thread (and the checkpoint where there
is one), promptly: nothing hangs, nothing is imported, no raw Python or driver exception escapes,
and one thread's rows are never read as another's.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import pytest

from ilmek import (
    START,
    CorruptCheckpointError,
    InvalidArgumentError,
    channel,
    graph,
    history,
    resume,
    resume_keyed,
    resume_keyed_stream,
    resume_stream,
    run,
    stream,
    thread_state,
)
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.cli import main as cli_main
from ilmek.errors import CheckpointNotFoundError, SchemaVersionError

pytestmark = pytest.mark.timeout(120)

READ_TIMEOUT = 5.0


class Store:
    """A SQLite file or a Postgres database, with raw SQL access to forge rows."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Any) -> None:
        self.kind = kind
        self.opened: list[Checkpointer] = []
        if kind == "sqlite":
            self.path = tmp_path / "forged.db"
        else:
            self.dsn: str = request.getfixturevalue("postgres_dsn")

    def open(self) -> Checkpointer:
        checkpointer: Checkpointer = (
            SqliteCheckpointer(self.path) if self.kind == "sqlite" else PostgresCheckpointer.connect(self.dsn)
        )
        self.opened.append(checkpointer)
        return checkpointer

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            connection = sqlite3.connect(self.path, isolation_level=None)
            try:
                return connection.execute(statement, params).fetchall()
            finally:
                connection.close()
        connection = psycopg2.connect(self.dsn)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement.replace("?", "%s"), params)
                return cursor.fetchall() if cursor.description is not None else []
        finally:
            connection.close()

    def close(self) -> None:
        for checkpointer in self.opened:
            checkpointer.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    """A real store whose rows the test may forge."""
    opened = Store(request.param, request, tmp_path)
    yield opened
    opened.close()


def chat() -> Any:
    """A list channel (stored as logs and items) and a value channel (a blob), paused each turn."""

    def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        said = ctx.step("say", lambda: f"reply {len(state['log'])}")
        return {"log": [said], "mood": ctx.interrupt({"question": "again?"})}

    return (
        graph("chat", {"log": channel.append(), "mood": channel.last_write("calm")})
        .node("talk", talk)
        .edge(START, "talk")
        .compile()
    )


def within(seconds: float, action: Callable[[], Any]) -> Any:
    """``action()``, which must finish (return or raise) within ``seconds``: a hang is a failure."""
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(("value", action()))
        except BaseException as error:
            outcome.append(("error", error))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"the read did not finish within {seconds}s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


# --- loops in stored pointers ---------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["self", "two"])
def test_a_loop_in_list_log_pointers_is_a_clear_error_on_every_read(store: Store, loop: str) -> None:
    """A log whose parent is itself (or a 2-cycle): every read raises CorruptCheckpointError at once."""
    checkpointer = store.open()
    g = chat()
    run(g, {"log": ["hi"]}, thread_id="t", checkpointer=checkpointer)
    resume(g, "fine", thread_id="t", checkpointer=checkpointer)
    [(first, *_)] = store.sql("SELECT min(log_id), max(log_id) FROM ilmek_logs WHERE thread_id = ?", "t")
    if loop == "self":
        store.sql("UPDATE ilmek_logs SET parent_id = log_id, base = 1 WHERE thread_id = ?", "t")
    else:
        other = store.sql(
            "INSERT INTO ilmek_logs (thread_id, channel, parent_id, base, length) "
            "VALUES ('t', 'log', ?, 1, 1) RETURNING log_id",
            first,
        )[0][0]
        store.sql("UPDATE ilmek_logs SET parent_id = ?, base = 1 WHERE log_id = ?", other, first)
    reader = store.open()  # nothing cached
    reads: list[Callable[[], Any]] = [
        lambda: reader.get("t"),
        lambda: thread_state(g, reader, "t"),
        lambda: [dict(c.channels) for c in history(reader, "t")],
        lambda: reader.read_channel("t", "log", 0, 10),
        lambda: resume(g, "again", thread_id="t", checkpointer=reader),
    ]
    for read in reads:
        with pytest.raises(CorruptCheckpointError) as caught:
            within(READ_TIMEOUT, read)
        assert "t" == caught.value.thread_id
        assert "'t'" in str(caught.value)


@pytest.mark.parametrize("loop", ["self", "two"])
def test_checkpoints_whose_parents_loop_are_all_still_listed_and_drawn(
    store: Store, loop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint whose parent is itself, or two pointing at each other: history() and
    ``ilmek history`` finish and show every checkpoint, the looping ones marked damaged."""
    checkpointer = store.open()
    g = chat()
    run(g, {"log": ["hi"]}, thread_id="t", checkpointer=checkpointer)
    resume(g, "fine", thread_id="t", checkpointer=checkpointer)
    ids = [row[0] for row in store.sql("SELECT checkpoint_id FROM ilmek_checkpoints WHERE thread_id = 't'")]
    first, second = sorted(ids)[:2]
    if loop == "self":
        store.sql("UPDATE ilmek_checkpoints SET parent_id = checkpoint_id WHERE checkpoint_id = ?", first)
    else:
        store.sql("UPDATE ilmek_checkpoints SET parent_id = ? WHERE checkpoint_id = ?", second, first)
    reader = store.open()

    listed = within(READ_TIMEOUT, lambda: [c.id for c in history(reader, "t")])
    assert sorted(ids) == sorted(listed)
    db = str(store.path) if store.kind == "sqlite" else store.dsn
    code = within(READ_TIMEOUT, lambda: cli_main(["--db", db, "history", "t"]))
    drawn = capsys.readouterr().out
    assert 0 == code
    assert all(checkpoint_id in drawn for checkpoint_id in ids)
    assert "(damaged: its parents loop)" in drawn


# --- one thread's rows never read as another's ----------------------------------------------------


def test_a_manifest_naming_another_threads_rows_is_refused_cold_and_warm(store: Store) -> None:
    """A forged manifest points thread b at thread a's list: refused whether or not a's items are cached."""
    checkpointer = store.open()
    g = chat()
    run(g, {"log": ["alice's secret"]}, thread_id="alice", checkpointer=checkpointer)
    run(g, {"log": ["bob"]}, thread_id="bob", checkpointer=checkpointer)
    [(manifest,)] = store.sql(
        "SELECT manifest FROM ilmek_checkpoints WHERE thread_id = 'alice' ORDER BY checkpoint_id DESC LIMIT 1"
    )
    forged = manifest if isinstance(manifest, str) else json.dumps(manifest)
    [(bob_latest,)] = store.sql(
        "SELECT checkpoint_id FROM ilmek_checkpoints WHERE thread_id = 'bob' "
        "ORDER BY checkpoint_id DESC LIMIT 1"
    )
    if store.kind == "postgres":
        store.sql(
            "UPDATE ilmek_checkpoints SET manifest = CAST(? AS jsonb) WHERE checkpoint_id = ?",
            forged,
            bob_latest,
        )
    else:
        store.sql("UPDATE ilmek_checkpoints SET manifest = ? WHERE checkpoint_id = ?", forged, bob_latest)

    cold = store.open()
    with pytest.raises(CorruptCheckpointError) as refused:
        cold.get("bob")
    assert "bob" == refused.value.thread_id
    # Warm: alice's items are in the cache of the checkpointer that reads bob next.
    assert "alice's secret" in str(checkpointer.get("alice").channels["log"])  # type: ignore[union-attr]
    with pytest.raises(CorruptCheckpointError):
        checkpointer.get("bob")
    with pytest.raises(CorruptCheckpointError):
        checkpointer.read_channel("bob", "log")


# --- damaged structural columns -------------------------------------------------------------------

DAMAGE = {
    "next-not-json": ("next", "not json at all"),
    "next-wrong-shape": ("next", '[{"node": 1}]'),
    "pending-wrong-shape": ("pending", '[{"id": "x"}]'),
    "pending-not-a-list": ("pending", '{"a": 1}'),
    "manifest-deep": ("manifest", "[" * 5000 + "]" * 5000),
    "manifest-bad-ref": ("manifest", '{"log": ["l", "not a number", 3]}'),
    "manifest-huge-int": ("manifest", '{"log": ["l", 1e400, 3]}'),
    "metadata-a-list": ("metadata", "[1, 2]"),
    "chain-not-text": ("journal_chain", "[1, 2]"),
    "journals-wrong": ("task_journals", '{"talk": [{"kind": "mystery"}]}'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkpoint_column_is_a_corrupt_checkpoint_error_naming_where(
    store: Store, damage: str
) -> None:
    """A structural column replaced by junk: CorruptCheckpointError naming the thread and checkpoint."""
    column, junk = DAMAGE[damage]
    checkpointer = store.open()
    run(chat(), {"log": ["hi"]}, thread_id="t", checkpointer=checkpointer)
    [(latest,)] = store.sql("SELECT checkpoint_id FROM ilmek_threads WHERE thread_id = 't'")
    if store.kind == "postgres":
        # JSONB refuses text that is not JSON (and nesting that deep): such junk
        # arrives as a JSON string where a list or object belongs instead.
        refused = damage in ("next-not-json", "manifest-deep")
        as_json = "to_jsonb(CAST(? AS text))" if refused else "CAST(? AS jsonb)"
        store.sql(f"UPDATE ilmek_checkpoints SET {column} = {as_json} WHERE checkpoint_id = ?", junk, latest)
    else:
        store.sql(f"UPDATE ilmek_checkpoints SET {column} = ? WHERE checkpoint_id = ?", junk, latest)
    reader = store.open()
    with pytest.raises(CorruptCheckpointError) as caught:
        within(READ_TIMEOUT, lambda: reader.get("t"))
    assert ("t", latest) == (caught.value.thread_id, caught.value.checkpoint_id)
    assert "'t'" in str(caught.value)


def test_a_schema_version_that_is_not_a_number_is_a_schema_version_error(tmp_path: Any) -> None:
    """The meta table says 'abc': opening says so (a SchemaVersionError), not a ValueError."""
    path = tmp_path / "odd.db"
    SqliteCheckpointer(path).close()
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("UPDATE ilmek_meta SET value = 'abc' WHERE key = 'schema_version'")
    connection.close()
    with pytest.raises(SchemaVersionError, match="'abc'"):
        SqliteCheckpointer(path)


# --- hostile arguments ----------------------------------------------------------------------------

BAD_THREAD_IDS = [("alice",), 5, None, b"alice", "", "a\0b", "x\ud800", "x" * 5000]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_checkpointer(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Checkpointer]:
    """A checkpointer of each kind, holding one thread named 'alice'."""
    from ilmek import InMemoryCheckpointer

    checkpointer: Checkpointer
    if request.param == "memory":
        checkpointer = InMemoryCheckpointer()
    elif request.param == "sqlite":
        checkpointer = SqliteCheckpointer(tmp_path / "args.db")
    else:
        checkpointer = PostgresCheckpointer.connect(request.getfixturevalue("postgres_dsn"))
    run(chat(), {"log": ["hi"]}, thread_id="alice", checkpointer=checkpointer)
    yield checkpointer
    checkpointer.close()


@pytest.mark.parametrize("bad", BAD_THREAD_IDS, ids=repr)
def test_every_entry_point_refuses_a_bad_thread_id_the_same_way(
    any_checkpointer: Checkpointer, bad: Any
) -> None:
    """A tuple, an int, bytes, '', NUL, a lone surrogate, 5,000 characters: InvalidArgumentError."""
    cp = any_checkpointer
    calls: list[Callable[[], Any]] = [
        lambda: cp.get(bad),
        lambda: cp.list(bad),
        lambda: cp.delete_thread(bad),
        lambda: cp.get_thread(bad),
        lambda: cp.put_thread_metadata(bad, {}),
        lambda: cp.read_channel(bad, "log"),
        lambda: cp.prune(bad, 1),
        lambda: cp.get_journal(bad),
        lambda: run(chat(), {"log": ["x"]}, thread_id=bad, checkpointer=cp),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError):
            call()
    # Nothing happened to alice, whatever the bad id looked like.
    assert cp.get("alice") is not None


BAD_ARGUMENTS: dict[str, Callable[[Checkpointer], Any]] = {
    "limit-huge": lambda cp: cp.list_threads(limit=2**63),
    "limit-negative": lambda cp: cp.list("alice", limit=-1),
    "limit-bool": lambda cp: cp.list_threads(limit=True),
    "offset-float": lambda cp: cp.list_threads(offset=1.5),
    "search-int": lambda cp: cp.list_threads(search=5),
    "search-nul": lambda cp: cp.list_threads(search="\0anything"),
    "status-unknown": lambda cp: cp.list_threads(status="sleeping"),
    "metadata-not-a-dict": lambda cp: cp.list_threads(metadata=[("a", 1)]),
    "keep-last-float": lambda cp: cp.prune("alice", keep_last=1.5),
    "keep-last-zero": lambda cp: cp.prune("alice", keep_last=0),
    "journal-none": lambda cp: cp.get_journal(None),
    "updated-before-naive": lambda cp: cp.list_threads(
        updated_before=__import__("datetime").datetime(2020, 1, 1)
    ),
    "delete-threads-status": lambda cp: cp.delete_threads(status=3),
    "channel-int": lambda cp: cp.read_channel("alice", 5),
    "checkpoint-id-int": lambda cp: cp.get("alice", 5),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_hostile_arguments_get_an_invalid_argument_error(any_checkpointer: Checkpointer, case: str) -> None:
    """Out-of-range, wrong-typed and NUL-bearing arguments: InvalidArgumentError, on every backend."""
    with pytest.raises(InvalidArgumentError):
        BAD_ARGUMENTS[case](any_checkpointer)


WITHOUT_A_CHECKPOINTER: dict[str, Callable[[Any], Any]] = {
    "run": lambda g: run(g, {"log": ["x"]}, thread_id="t"),
    "stream": lambda g: stream(g, {"log": ["x"]}, thread_id="t"),
    "resume": lambda g: resume(g, "yes", thread_id="t"),
    "resume_keyed": lambda g: resume_keyed(g, {"talk:interrupt#0": "yes"}, thread_id="t"),
    "resume_stream": lambda g: resume_stream(g, "yes", thread_id="t"),
    "resume_keyed_stream": lambda g: resume_keyed_stream(g, {"talk:interrupt#0": "yes"}, thread_id="t"),
}


@pytest.mark.parametrize("entry", sorted(WITHOUT_A_CHECKPOINTER))
def test_a_thread_id_without_a_checkpointer_is_refused_before_anything_runs(entry: str) -> None:
    """thread_id= and no checkpointer: InvalidArgumentError (a ValueError) from the call itself.

    A stream raises when called, not when first read: nothing is yielded, no node runs.
    """
    ran: list[str] = []

    def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ran.append("talk")
        return {"log": [ctx.interrupt("again?")]}

    g = graph("chat", {"log": channel.append()}).node("talk", talk).edge(START, "talk").compile()
    with pytest.raises(InvalidArgumentError) as caught:
        WITHOUT_A_CHECKPOINTER[entry](g)
    assert InvalidArgumentError is type(caught.value)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith("thread_id='t' was given without a checkpointer")
    assert "Pass checkpointer=" in str(caught.value)
    assert [] == ran


class Sneaky(str):
    """A str whose rendering differs from its value: it must not reach DDL as anything but its value."""

    def __str__(self) -> str:
        return "x; DROP TABLE users; --"

    def __format__(self, spec: str) -> str:
        return "x; DROP TABLE users; --"


def test_a_str_subclass_prefix_is_used_as_its_plain_value(tmp_path: Any) -> None:
    """A str subclass that renders otherwise passes the check as its value and is used as its value."""
    checkpointer = SqliteCheckpointer(tmp_path / "sneaky.db", table_prefix=Sneaky("shop"))
    try:
        assert "shop" == checkpointer.table_prefix
        assert type(checkpointer.table_prefix) is str
        assert all("DROP" not in statement for statement in checkpointer.ddl())
    finally:
        checkpointer.close()


def test_a_rejected_prefix_touches_no_file(tmp_path: Any) -> None:
    """A bad prefix is refused before the folder, the file or WAL exist."""
    target = tmp_path / "new" / "folder" / "app.db"
    with pytest.raises(InvalidArgumentError):
        SqliteCheckpointer(target, table_prefix="bad prefix")
    assert not (tmp_path / "new").exists()


def test_an_unknown_checkpoint_of_read_channel_is_not_found(any_checkpointer: Checkpointer) -> None:
    """read_channel of a checkpoint the thread does not have: CheckpointNotFoundError naming both."""
    with pytest.raises(CheckpointNotFoundError, match="'alice'"):
        any_checkpointer.read_channel("alice", "log", checkpoint_id="nope")
