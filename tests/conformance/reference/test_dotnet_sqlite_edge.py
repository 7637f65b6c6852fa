"""Ported from the .NET port's ``dotnet/test/Ilmek.Checkpointer.Sqlite.Tests/SqliteEdgeCaseTests.cs``.

SQLite's own edges: the table prefix, what the encoding keeps, and one
checkpointer used by many threads at once. The .NET ``SqliteConnection`` a
caller opens is a ``sqlite3`` connection here; ``SqliteCheckpointer.Open``
is ``SqliteCheckpointer.open``. Python refuses a bad ``table_prefix`` with
an ``InvalidArgumentError``, which is a ``ValueError`` (the .NET port's
``ArgumentException``). The encoding cases run on memory, SQLite and
Postgres, since every store shares the codec.
"""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    SerializationError,
    SqliteCheckpointer,
    channel,
    graph,
    resume,
    resume_keyed,
    run,
    send,
)
from tests.support.helpers import Calls
from tests.support.reference_edge import done, make_checkpoint

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def connection() -> Iterator[sqlite3.Connection]:
    """A caller's own ``:memory:`` connection, closed by the test, never by ilmek."""
    opened = sqlite3.connect(":memory:", check_same_thread=False)
    yield opened
    opened.close()


# --- the table prefix ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "x; DROP TABLE y; --",
        "ilmek_checkpoints (x); --",
        "a b",
        "1abc",
        "",
        'pre"fix',
        "pre-fix",
        "abc\n",
        "ünïcode",
    ],
)
def test_a_prefix_that_is_not_a_plain_identifier_is_refused(
    connection: sqlite3.Connection, prefix: str
) -> None:
    """SqliteEdgeCaseTests.HostilePrefixRefused: "a TablePrefix that is not a plain identifier is refused —
    it is interpolated into SQL"."""
    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer(connection, table_prefix=prefix)

    assert [] == connection.execute("SELECT name FROM sqlite_master").fetchall()


def test_a_none_prefix_is_refused(connection: sqlite3.Connection) -> None:
    """SqliteEdgeCaseTests.NullPrefixRefused: "a null TablePrefix is refused"."""
    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer(connection, table_prefix=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["ilmek", "_private", "App_2"])
def test_a_plain_identifier_prefix_is_accepted(prefix: str) -> None:
    """SqliteEdgeCaseTests.PlainPrefixAccepted: "plain identifier prefixes are accepted"."""
    with SqliteCheckpointer.open(":memory:", table_prefix=prefix) as checkpointer:
        assert None is checkpointer.get("t")


def test_a_refused_prefix_leaves_no_file_behind(tmp_path: pathlib.Path) -> None:
    """SqliteEdgeCaseTests.FailedOpenReleasesFile: "Open with a hostile prefix throws without leaving the
    database file locked".

    Python checks the prefix before it touches the file, so there is no file
    to hold.
    """
    path = tmp_path / "refused.db"

    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer.open(path, table_prefix="x;--")

    assert not path.exists()


def test_two_prefixes_on_one_file_isolate_checkpoints_journals_and_deletes(tmp_path: pathlib.Path) -> None:
    """SqliteEdgeCaseTests.PrefixesIsolateEverything: "two prefixes on one file isolate checkpoints AND
    journals, including DeleteThread"."""
    shared = sqlite3.connect(tmp_path / "two-apps.db", check_same_thread=False)
    try:
        app1 = SqliteCheckpointer(shared, table_prefix="app1")
        app2 = SqliteCheckpointer(shared, table_prefix="app2")
        app1.migrate()
        app2.migrate()
        app1.put_journal("t:root:n", [done("s#0", "app1-value")])
        app1.put("t", make_checkpoint("t"))

        assert () == app2.get_journal("t:root:n")
        assert None is app2.get("t")

        app2.delete_thread("t")  # must not reach into app1's tables

        assert None is not app1.get("t")
        assert (done("s#0", "app1-value"),) == app1.get_journal("t:root:n")
    finally:
        shared.close()


# --- the encoding -------------------------------------------------------------------------------


def test_a_lone_surrogate_is_stored_and_reads_back(ref_checkpointer: Checkpointer) -> None:
    """SqliteEdgeCaseTests.LoneSurrogateBecomesReplacementChar: "a lone surrogate is stored, and reads back as
    U+FFFD (the JSON encoder replaces it)".

    The write succeeds and the value reads back. The replacement is the .NET
    encoder's (UTF-16 text that cannot become UTF-8); Python's codec writes
    the code point as a JSON escape, so it reads back unchanged.
    """
    text = "broken \ud800 half"
    ref_checkpointer.put("t", make_checkpoint("t", channels={"s": text}))

    back = ref_checkpointer.get("t")

    assert back is not None
    assert text == back.channels["s"]


@attrs.define
class Unregistered:
    """A class nobody registered with ``ilmek.serde``."""

    id: str


def test_numbers_come_back_as_int_or_float_and_an_unregistered_object_is_refused(
    ref_checkpointer: Checkpointer,
) -> None:
    """SqliteEdgeCaseTests.CustomTypesComeBackAsJsonShape: "custom CLR objects come back as their JSON shape,
    numbers as long or double".

    The data part holds: a mapping comes back with its integral number an
    ``int`` and its fractional one a ``float``. An object of a class nobody
    registered has no JSON shape in Python: it is refused before anything is
    written (README, "Serialization"), rather than stored as its fields.
    """
    ref_checkpointer.put_journal("task", [done("order#0", {"Id": "o-1", "Total": 12.5, "Count": 3})])

    (entry,) = ref_checkpointer.get_journal("task")

    assert {"Id": "o-1", "Total": 12.5, "Count": 3} == entry.value
    assert (float, int) == (type(entry.value["Total"]), type(entry.value["Count"]))
    with pytest.raises(SerializationError, match="Unregistered"):
        ref_checkpointer.put_journal("other", [done("order#0", Unregistered("o-1"))])
    assert () == ref_checkpointer.get_journal("other")


# --- concurrency --------------------------------------------------------------------------------


Opener = Callable[[pathlib.Path], SqliteCheckpointer]


@pytest.fixture(params=["path", "caller-connection"])
def open_store(request: pytest.FixtureRequest) -> Iterator[Opener]:
    """Opens the SQLite checkpointer a concurrency case shares: on ilmek's own connections, or on one
    connection the caller opened (closed here, never by ilmek)."""
    opened: list[SqliteCheckpointer] = []
    connections: list[sqlite3.Connection] = []

    def open_store(path: pathlib.Path) -> SqliteCheckpointer:
        if request.param == "path":
            checkpointer = SqliteCheckpointer(path)
        else:
            connections.append(sqlite3.connect(path, check_same_thread=False, timeout=30))
            checkpointer = SqliteCheckpointer(connections[-1])
        opened.append(checkpointer)
        return checkpointer

    yield open_store
    for checkpointer in opened:
        checkpointer.close()
    for caller_connection in connections:
        caller_connection.close()


def test_a_wide_fan_out_recording_steps_at_once_stays_consistent(
    tmp_path: pathlib.Path, open_store: Opener
) -> None:
    """SqliteEdgeCaseTests.ConcurrentStepsShareOneConnection: "a wide fan-out journaling steps concurrently
    through one SQLite connection stays consistent".

    24 sends run as parallel tasks, each recording five steps and pausing;
    every answer then replays every step from SQLite. On ilmek's own
    connections and on one connection the caller passed in.
    """
    calls = Calls()

    def worker(task: dict[str, Any], ctx: Any) -> dict[str, Any]:
        n = task["n"]
        total = 0
        for i in range(5):

            def effect(i: int = i) -> int:
                calls.hit("step")
                return n * 10 + i

            total += ctx.step(f"s{i}", effect)
        ok = ctx.interrupt({"n": n})
        return {"out": [f"{n}:{total}:{ok}"]}

    g = (
        graph("wide", {"out": channel.append()})
        .node("map", lambda state: None)
        .node("worker", worker)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"n": i}) for i in range(24)])
        .edge("worker", END)
        .compile()
    )
    checkpointer = open_store(tmp_path / "fanout-steps.db")
    opts: dict[str, Any] = {"thread_id": "wide", "checkpointer": checkpointer}

    paused = run(g, None, **opts)

    assert "interrupted" == paused.status
    assert 24 == len(paused.pending)
    assert 24 * 5 == calls["step"]
    finished = resume_keyed(g, {p.id: "y" for p in paused.pending}, **opts)
    assert "done" == finished.status
    assert 24 * 5 == calls["step"]
    expected = sorted(f"{n}:{sum(n * 10 + i for i in range(5))}:y" for n in range(24))
    assert expected == sorted(finished.state["out"])


def test_concurrent_runs_on_distinct_threads_through_one_checkpointer_are_isolated(
    tmp_path: pathlib.Path, open_store: Opener
) -> None:
    """SqliteEdgeCaseTests.ConcurrentThreadsShareOneCheckpointer: "concurrent runs on distinct threads sharing
    one SQLite checkpointer are isolated"."""

    def w(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        who = state["who"]
        greeting = ctx.step("greet", lambda: f"hi {who}")
        ok = ctx.interrupt(who)
        return {"log": [f"{greeting}:{ok}"]}

    g = (
        graph("per-thread", {"who": channel.last_write(""), "log": channel.append()})
        .node("w", w)
        .edge(START, "w")
        .edge("w", END)
        .compile()
    )
    checkpointer = open_store(tmp_path / "threads.db")
    names = [f"user{i}" for i in range(16)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda n: run(g, {"who": n}, thread_id=n, checkpointer=checkpointer), names))
        finished = list(
            pool.map(lambda n: resume(g, f"ok-{n}", thread_id=n, checkpointer=checkpointer), names)
        )

    assert [[f"hi {n}:ok-{n}"] for n in names] == [r.state["log"] for r in finished]
