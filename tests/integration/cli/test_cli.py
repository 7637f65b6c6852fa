"""The command line: every command on a SQLite file, plus the demo across two real processes.

Most tests call :func:`ilmek.cli.main` in-process and read what it printed;
the subprocess tests run ``python -m ilmek`` the way a user does, with
``HOME`` pointing at a temporary folder so the default database lands there.
"""

from __future__ import annotations

import datetime
import decimal
import io
import pathlib
import re
import sqlite3
import sys
import threading

import pytest

from ilmek import Checkpoint, Pending, channel, graph, run
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.cli import open_checkpointer, render_history, render_value
from ilmek.demo import build_checkout_graph
from ilmek.graph import END, START, CompiledGraph
from tests.support.cli_support import (
    COMMANDS,
    cli,
    db_fixture,  # noqa: F401 - a fixture, used by name
    finished_order,
    forked_order,
    history_rows,
    home_fixture,  # noqa: F401 - a fixture, used by name
    paused_order,
    run_module,
    store_fixture,  # noqa: F401 - a fixture, used by name
)
from tests.support.pgcluster import dsn_to_url

# --- demo, in two real processes --------------------------------------------------------


def test_demo_pauses_in_one_process_and_is_answered_in_another(home: pathlib.Path) -> None:
    """`demo` asks and exits 0; `demo --answer yes` in a new process charges; the order is created once."""
    first = run_module(home, "demo")
    assert (0, "") == (first.returncode, first.stderr)
    assert "Charge 249.9?" in first.stdout
    assert "python -m ilmek demo --answer yes" in first.stdout
    assert "charging" not in first.stdout

    second = run_module(home, "demo", "--answer", "yes")
    assert (0, "") == (second.returncode, second.stderr)
    assert "charging 249.9" in second.stdout.splitlines()
    assert "done: charged 249.9" in second.stdout

    assert 1 == (first.stdout + second.stdout).count("creating order for coffee, mug")
    assert (home / ".ilmek" / "checkpoints.db").is_file()


def test_demo_answer_on_a_fresh_thread_fails_clearly(home: pathlib.Path) -> None:
    """`demo --answer yes` with nothing paused exits 1, says why and how to start, no traceback."""
    result = run_module(home, "demo", "--answer", "yes")
    assert 1 == result.returncode
    assert "" == result.stdout
    assert "ilmek: thread 'demo' is not waiting for an answer (it has not started)" in result.stderr
    assert "python -m ilmek demo" in result.stderr
    assert "Traceback" not in result.stderr


# --- demo, in-process -----------------------------------------------------------------------


def test_demo_repeats_the_question_without_running_and_a_new_demo_starts_a_new_order(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """Asking again while paused runs nothing; after an answer, `demo` is a new order on the thread."""
    status, out, _ = cli(capsys, "--db", db, "demo", "--thread", "order-1")
    assert 0 == status
    assert ["creating order for coffee, mug", "Charge 249.9?"] == out.splitlines()[1:3]
    assert f"python -m ilmek demo --db {db} --thread order-1 --answer yes" in out

    status, out, _ = cli(capsys, "--db", db, "demo", "--thread", "order-1")
    assert 0 == status
    assert "already waiting for an answer" in out
    assert "Charge 249.9?" in out
    assert "creating order" not in out

    status, out, _ = cli(capsys, "--db", db, "demo", "--thread", "order-1", "--answer", "no")
    assert 0 == status
    assert ["not charging", "done: not charged"] == out.splitlines()[1:3]
    assert '"log": ["not charged"]' in out

    status, out, _ = cli(capsys, "--db", db, "demo", "--thread", "order-1")
    assert 0 == status
    assert "creating order for coffee, mug" in out.splitlines()


def test_demo_continues_an_unfinished_thread_instead_of_starting_over(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """A thread stopped before its first superstep is continued: one order, then the question."""
    stopped = threading.Event()
    stopped.set()
    result = run(build_checkout_graph(), {"cart": ["mug"]}, thread_id="t", checkpointer=store, cancel=stopped)
    assert "aborted" == result.status

    status, out, _ = cli(capsys, "--db", db, "demo", "--thread", "t")
    assert 0 == status
    assert ["continuing the unfinished order on thread 't'", "creating order for mug"] == out.splitlines()[
        1:3
    ]
    assert 1 == out.count("creating order")


def test_demo_refuses_a_thread_of_another_graph(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`demo --thread` on an application's thread touches nothing and says whose thread it is."""
    assert "done" == run(long_values_graph(), {}, thread_id="app", checkpointer=store).status
    before = [c.id for c in store.list("app")]
    status, out, err = cli(capsys, "--db", db, "demo", "--thread", "app")
    assert (1, "") == (status, out)
    assert (
        "ilmek: thread 'app' belongs to graph 'long', not to the demo; pick another thread with --thread\n"
        == err
    )
    assert before == [c.id for c in store.list("app")]


def test_demo_answer_on_a_finished_thread_exits_1(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """Answering a thread that already finished is refused with its status."""
    cli(capsys, "--db", db, "demo")
    cli(capsys, "--db", db, "demo", "--answer", "yes")
    status, out, err = cli(capsys, "--db", db, "demo", "--answer", "yes")
    assert (1, "") == (status, out)
    assert "ilmek: thread 'demo' is not waiting for an answer (it is done, not paused)" in err


# --- history ---------------------------------------------------------------------------------


def test_history_draws_a_fork_as_two_branches(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """Answering an old pause differently forks; `history` draws both answers under the pause."""
    pause_id, yes, no = forked_order(store, "t")
    pause = store.get("t", pause_id)
    assert pause is not None
    assert pause.parent_id is not None

    no_branch = store.get("t", no.checkpoint_id)
    assert no_branch is not None
    assert no_branch.parent_id is not None
    status, out, _ = cli(capsys, "--db", db, "history", "t")
    assert 0 == status
    # The fork starts with a copy of the pause, answered in its turn.
    assert [
        [pause.parent_id, "input", "step", "0", "unfinished"],
        [
            pause_id,
            "pause",
            "step",
            "0",
            "interrupted",
            "answered:",
            "checkout:interrupt#0",
            "(by",
            "person)",
        ],
        ["├─", yes.checkpoint_id, "loop", "step", "1", "done"],
        [
            "└─",
            no_branch.parent_id,
            "fork",
            "step",
            "0",
            "interrupted",
            "answered:",
            "checkout:interrupt#0",
            "(by",
            "person)",
        ],
        [no.checkpoint_id, "loop", "step", "1", "done", "(latest)"],
    ] == history_rows(out)


def test_history_limit_shows_the_newest_and_says_their_parent_is_not_shown(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`history --limit 1` prints the latest checkpoint alone, marked as cut off from its parent."""
    finished_order(store, "t")
    status, out, _ = cli(capsys, "--db", db, "history", "t", "--limit", "1")
    assert 0 == status
    latest = store.get("t")
    assert latest is not None
    assert [[latest.id, "loop", "step", "1", "done", "(parent", "not", "shown)", "(latest)"]] == history_rows(
        out
    )


def test_history_of_an_unknown_thread_exits_1(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """A thread with no checkpoints is an error naming the thread."""
    SqliteCheckpointer(db).close()
    status, out, err = cli(capsys, "--db", db, "history", "nope")
    assert (1, "") == (status, out)
    assert err.startswith("ilmek: thread 'nope' has no checkpoints")


def checkpoint(checkpoint_id: str, parent_id: str | None, source: str = "loop") -> Checkpoint:
    """A bare checkpoint for drawing trees without a database."""
    return Checkpoint(id=checkpoint_id, thread_id="t", parent_id=parent_id, metadata={"source": source})


def tree_shape(lines: list[str]) -> list[tuple[str, str]]:
    """Each drawn line's box-drawing prefix and checkpoint id."""
    shape = []
    for line in lines:
        match = re.match(r"([ │├└─]*)(\S+)", line)
        assert match is not None
        shape.append((match.group(1), match.group(2)))
    return shape


def test_render_history_continues_a_branch_under_its_fork_and_roots_orphans() -> None:
    """A chain inside a branch keeps the branch's indentation; a pruned parent makes a root."""
    checkpoints = [
        checkpoint("a", None, "input"),
        checkpoint("b", "a"),
        checkpoint("c", "b"),
        checkpoint("d", "b"),
        checkpoint("e", "c"),
        checkpoint("f", "e"),
        checkpoint("g", "gone"),
    ]
    lines = render_history(list(reversed(checkpoints)))
    assert [
        ("", "a"),
        ("", "b"),
        ("├─ ", "c"),
        ("│  ", "e"),
        ("│  ", "f"),
        ("└─ ", "d"),
        ("", "g"),
    ] == tree_shape(lines)
    assert lines[-1].endswith("(parent pruned)  (latest)")


def test_render_history_draws_nested_forks_and_a_three_way_fork() -> None:
    """Forks inside forks nest their prefixes; a checkpoint with three children opens three branches."""
    checkpoints = [
        checkpoint("a", None),
        checkpoint("b", "a"),
        checkpoint("c", "a"),
        checkpoint("d", "a"),
        checkpoint("e", "b"),
        checkpoint("f", "b"),
    ]
    assert [
        ("", "a"),
        ("├─ ", "b"),
        ("│  ├─ ", "e"),
        ("│  └─ ", "f"),
        ("├─ ", "c"),
        ("└─ ", "d"),
    ] == tree_shape(render_history(checkpoints))


def test_render_history_of_a_long_chain_stays_flat() -> None:
    """Ten thousand checkpoints in a line draw at one indentation (no recursion limit)."""
    ids = [f"{n:06d}" for n in range(10_000)]
    checkpoints = [checkpoint(ids[0], None)] + [checkpoint(ids[n], ids[n - 1]) for n in range(1, 10_000)]
    lines = render_history(checkpoints)
    assert [("", checkpoint_id) for checkpoint_id in ids] == tree_shape(lines)


def test_render_history_shows_the_pending_ids_of_a_pause() -> None:
    """A paused checkpoint lists its open pauses' ids."""
    pause = Checkpoint(
        id="a",
        thread_id="t",
        metadata={"source": "pause"},
        pending=[
            Pending(id="x:interrupt#0", task_id="t:a:x", node="x", key="interrupt#0"),
            Pending(id="y:interrupt#0", task_id="t:a:y", node="y", key="interrupt#0"),
        ],
    )
    assert [
        "a  pause  step 0  interrupted  waiting: x:interrupt#0, y:interrupt#0  (latest)"
    ] == render_history([pause])


# --- show --------------------------------------------------------------------------------------


def test_show_of_an_unknown_thread_exits_1_with_the_message_on_stderr(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """`show` of a thread that does not exist: nothing on stdout, the reason on stderr, status 1."""
    SqliteCheckpointer(db).close()
    status, out, err = cli(capsys, "--db", db, "show", "nope")
    assert (1, "") == (status, out)
    assert f"ilmek: thread 'nope' has no checkpoints in {db}\n" == err


def test_show_of_an_unknown_checkpoint_exits_1(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`show THREAD CHECKPOINT` with an id the thread does not have names it and points at history."""
    paused_order(store, "t")
    status, out, err = cli(capsys, "--db", db, "show", "t", "no-such-id")
    assert (1, "") == (status, out)
    assert "ilmek: thread 't' has no checkpoint 'no-such-id'; list them with: history t\n" == err


def test_show_prints_the_latest_pause_with_its_question(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """The latest pause: its status, next task, payload, its task's completed steps, and channels."""
    pause_id = paused_order(store, "t")
    status, out, _ = cli(capsys, "--db", db, "show", "t")
    assert 0 == status
    lines = out.splitlines()
    assert f"checkpoint   {pause_id}" in lines
    assert "status       interrupted" in lines
    assert ["next", "  checkout"] == lines[lines.index("next") : lines.index("next") + 2]
    pause = store.get("t", pause_id)
    assert pause is not None
    order = store.get_journal(pause.pending[0].task_id)[0].value
    assert [
        "pending",
        "  checkout:interrupt#0  (node checkout)",
        '    {"question": "Charge 249.9?"}',
        "    completed steps:",
        f'      create_order#0: {{"id": "{order["id"]}", "items": ["coffee", "mug"], "total": 249.9}}',
        "channels",
        '  cart: ["coffee", "mug"]',
    ] == lines[lines.index("pending") :]


def test_show_a_given_checkpoint(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`show THREAD CHECKPOINT` prints that checkpoint, not the latest."""
    pause = store.get("t", paused_order(store, "t"))
    assert pause is not None
    assert pause.parent_id is not None
    status, out, _ = cli(capsys, "--db", db, "show", "t", pause.parent_id)
    assert 0 == status
    lines = out.splitlines()
    assert f"checkpoint   {pause.parent_id}" in lines
    assert "parent       -" in lines
    assert "status       unfinished" in lines
    assert "pending" not in lines


def long_values_graph() -> CompiledGraph:
    """A graph (not the demo's) that writes a long string and a long list."""
    return (
        graph("long", {"text": channel.last_write(""), "numbers": channel.append()})
        .node("write", lambda state: {"text": "x" * 1000, "numbers": list(range(100))})
        .edge(START, "write")
        .edge("write", END)
        .compile()
    )


def test_show_shortens_long_values_unless_full(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """A long string and a long list are cut with a note of what was left out; --full prints them whole."""
    assert "done" == run(long_values_graph(), {}, thread_id="long", checkpointer=store).status

    status, out, _ = cli(capsys, "--db", db, "show", "long")
    assert 0 == status
    assert f'"{"x" * 200}… (800 more characters)"' in out
    assert '"… 87 more items …"' in out
    assert "x" * 201 not in out

    status, out, _ = cli(capsys, "--db", db, "show", "long", "--full")
    assert 0 == status
    assert f'"{"x" * 1000}"' in out
    assert "more items" not in out
    assert "    50," in out.splitlines()


def test_render_value_prints_what_json_lacks_as_text() -> None:
    """Tuples, sets, dates, decimals and attrs values print as JSON-ish text, never a failure."""
    value = {
        "pair": (1, 2),
        "tags": {"b", "a"},
        "when": datetime.date(2024, 5, 1),
        "price": decimal.Decimal("9.90"),
        "pause": Pending(id="p", task_id="t:c:n", node="n", key="k"),
    }
    rendered = render_value(value)
    assert rendered.startswith('{\n  "pair": [1, 2],\n  "tags": ["a", "b"],\n  "when": "2024-05-01",\n')
    assert '  "price": "9.90",\n' in rendered
    assert (
        '  "pause": {\n    "id": "p",\n    "task_id": "t:c:n",\n    "node": "n",\n    "key": "k",\n'
        in rendered
    )
    assert '    "kind": "person",\n    "ns": []\n  }\n}' in rendered


# --- threads -----------------------------------------------------------------------------------


def test_threads_lists_only_the_asked_status(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`threads --status interrupted` lists the paused thread and not the finished one."""
    paused_order(store, "waiting-order")
    finished_order(store, "finished-order")

    status, out, _ = cli(capsys, "--db", db, "threads", "--status", "interrupted")
    assert 0 == status
    rows = history_rows(out)
    latest = store.get("waiting-order")
    assert latest is not None
    assert ["THREAD", "STATUS", "STEP", "UPDATED", "LATEST", "CHECKPOINT"] == rows[0]
    assert 2 == len(rows)
    assert ["waiting-order", "interrupted", "0"] == rows[1][:3]
    assert latest.id == rows[1][-1]


def test_threads_search_limit_and_empty(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """--search filters by id, --limit cuts the list and says so, and no match prints `no threads`."""
    paused_order(store, "alpha-1")
    paused_order(store, "alpha-2")
    paused_order(store, "beta")

    status, out, _ = cli(capsys, "--db", db, "threads", "--search", "ALPHA", "--limit", "1")
    assert 0 == status
    lines = out.splitlines()
    assert 3 == len(lines)
    assert lines[1].startswith("alpha-")
    assert "(the 1 most recently updated; --limit N shows more)" == lines[2]

    status, out, _ = cli(capsys, "--db", db, "threads", "--status", "done")
    assert (0, "no threads\n") == (status, out)


def test_the_database_may_come_from_ilmek_db_or_after_the_command(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ILMEK_DB names the store when --db is absent; --db works after the command too."""
    paused_order(store, "t")
    monkeypatch.setenv("ILMEK_DB", db)
    assert "t" == history_rows(cli(capsys, "threads")[1])[1][0]
    monkeypatch.delenv("ILMEK_DB")
    assert "t" == history_rows(cli(capsys, "threads", "--db", db)[1])[1][0]


def test_a_missing_database_file_is_an_error_and_is_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """Read commands on a path with no file say so and leave no empty file behind."""
    missing = tmp_path / "typo.db"
    status, out, err = cli(capsys, "--db", str(missing), "threads")
    assert (1, "") == (status, out)
    assert f"ilmek: no database at {missing} (nothing has been stored there yet)\n" == err
    assert not missing.exists()


# --- delete, prune -------------------------------------------------------------------------------


def test_delete_with_yes_removes_the_thread(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`delete --yes` removes the thread and leaves the others alone."""
    paused_order(store, "doomed")
    paused_order(store, "kept")
    status, out, _ = cli(capsys, "--db", db, "delete", "doomed", "--yes")
    assert (0, "deleted thread 'doomed'\n") == (status, out)
    assert store.get("doomed") is None
    assert store.get("kept") is not None


def test_delete_refuses_a_thread_a_run_holds_unless_forced(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """A live hold (here the store's, seen by the CLI through the file): exit 1, kept; --force deletes it."""
    paused_order(store, "t; rm -rf ~")
    with store.hold("t; rm -rf ~"):
        status, out, err = cli(capsys, "--db", db, "delete", "t; rm -rf ~", "--yes")
        assert (1, "") == (status, out)
        assert "a run holds thread 't; rm -rf ~' now: nothing deleted" in err
        assert "ilmek cancel 't; rm -rf ~'" in err
        assert store.get("t; rm -rf ~") is not None
        status, out, _ = cli(capsys, "--db", db, "delete", "t; rm -rf ~", "--yes", "--force")
        assert (0, "deleted thread 't; rm -rf ~'\n") == (status, out)
        assert store.get("t; rm -rf ~") is None


def test_delete_without_yes_off_a_terminal_refuses(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """With stdin not a terminal, `delete` without --yes deletes nothing and asks for --yes."""
    paused_order(store, "t")
    status, out, err = cli(capsys, "--db", db, "delete", "t")
    assert (1, "") == (status, out)
    assert "pass --yes" in err
    assert store.get("t") is not None


class Terminal(io.StringIO):
    """Typed input, as if from a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("typed", "deleted"), [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)]
)
def test_delete_on_a_terminal_asks_first(
    capsys: pytest.CaptureFixture[str],
    db: str,
    store: SqliteCheckpointer,
    monkeypatch: pytest.MonkeyPatch,
    typed: str,
    deleted: bool,
) -> None:
    """On a terminal `delete` asks; only yes deletes, anything else keeps the thread and exits 1."""
    paused_order(store, "t")
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    status, out, err = cli(capsys, "--db", db, "delete", "t")
    assert "delete thread 't' and its 2 checkpoints? [y/N] " in out
    assert (0 if deleted else 1) == status
    assert deleted == (store.get("t") is None)
    assert ("" if deleted else "ilmek: nothing deleted\n") == err


def test_delete_of_an_unknown_thread_exits_1(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """Deleting a thread that does not exist is an error, not a silent success."""
    SqliteCheckpointer(db).close()
    status, _, err = cli(capsys, "--db", db, "delete", "nope", "--yes")
    assert 1 == status
    assert err.startswith("ilmek: thread 'nope' does not exist")


def test_prune_keep_last_1_reports_how_many_were_dropped(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """Two finished orders make six checkpoints in a line; keeping one drops five."""
    finished_order(store, "t")
    finished_order(store, "t")
    assert 6 == len(store.list("t"))
    status, out, _ = cli(capsys, "--db", db, "prune", "t", "--keep-last", "1")
    assert (0, "dropped 5 checkpoints of thread 't'; 1 kept\n") == (status, out)
    assert 1 == len(store.list("t"))


def test_prune_needs_a_positive_keep_last(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """--keep-last 0 is a usage error (status 2), checked before the store is opened."""
    status, _, err = cli(capsys, "--db", db, "prune", "t", "--keep-last", "0")
    assert 2 == status
    assert "--keep-last: must be at least 1, got 0" in err


# --- migrate, ddl ---------------------------------------------------------------------------------


def test_migrate_says_the_schema_is_up_to_date(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """`migrate` creates the store if needed and reports its schema version."""
    version = SqliteCheckpointer(":memory:").schema_version
    status, out, _ = cli(capsys, "--db", db, "migrate")
    assert (0, f"ilmek_* tables up to date, schema version {version}\n") == (status, out)
    status, out, _ = cli(capsys, "--table-prefix", "shop", "migrate", db)
    assert (0, f"shop_* tables up to date, schema version {version}\n") == (status, out)


def test_ddl_prints_create_table_statements_with_the_prefix(
    capsys: pytest.CaptureFixture[str], home: pathlib.Path
) -> None:
    """`ddl` prints every statement ending in `;`, with the prefix, and creates no database file."""
    status, out, _ = cli(capsys, "--table-prefix", "shop", "ddl")
    assert 0 == status
    statements = out.splitlines()
    assert all(statement.endswith(";") for statement in statements)
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS shop_checkpoints (") for s in statements)
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS shop_journals (") for s in statements)
    assert not any("ilmek_" in statement for statement in statements)
    assert [] == list(home.iterdir())


def test_a_newer_schema_is_a_clean_error(capsys: pytest.CaptureFixture[str], db: str) -> None:
    """A store written by a newer ilmek: `ilmek: ...` on stderr with the advice, no traceback."""
    SqliteCheckpointer(db).close()
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE ilmek_meta SET value = '99' WHERE key = 'schema_version'")
    connection.close()
    status, out, err = cli(capsys, "--db", db, "threads")
    assert (1, "") == (status, out)
    assert err.startswith("ilmek: the ilmek_* tables are at schema version 99")
    assert "Traceback" not in err


# --- usage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`<command> --help` exits 0 and prints a usage line naming the command."""
    status, out, _ = cli(capsys, command, "--help")
    assert 0 == status
    assert out.startswith(f"usage: python -m ilmek {command} ")


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` names each command."""
    status, out, _ = cli(capsys, "--help")
    assert 0 == status
    assert all(f"    {command} " in out for command in COMMANDS)


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a command: one `ilmek:` line pointing at --help, status 2."""
    status, _, err = cli(capsys)
    assert 2 == status
    assert "ilmek: the following arguments are required: COMMAND (see: python -m ilmek --help)\n" == err


@pytest.mark.parametrize(
    "argv",
    [
        ["--table-prefix", "drop table x;", "threads"],
        ["threads", "--table-prefix", "1abc"],
        ["--table-prefix", "p" * 41, "ddl"],
    ],
)
def test_an_invalid_table_prefix_is_a_clean_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A prefix that is not an SQL name is refused before any store is opened, without a traceback."""
    status, out, err = cli(capsys, *argv)
    assert (2, "") == (status, out)
    assert "argument --table-prefix: table_prefix must match [A-Za-z_][A-Za-z0-9_]*" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["threads", "ddl", "demo"])
def test_an_unsupported_url_is_an_error_that_hides_the_password(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A URL of another scheme is refused, and the message never shows the password."""
    status, _, err = cli(capsys, "--db", "mysql://shop:s3cret@db.example/shop", command)
    assert 1 == status
    assert (
        "ilmek: unsupported database URL 'mysql://shop:***@db.example/shop': give a SQLite file "
        "path, a sqlite:/// URL, a postgresql:// URL or a libpq keyword string (host=... dbname=...)\n"
    ) == err
    assert "s3cret" not in err


@pytest.mark.postgres
def test_demo_on_a_postgres_url_across_two_processes(home: pathlib.Path, postgres_dsn: str) -> None:
    """On a postgresql:// URL the demo creates its tables, pauses, and is answered by another process."""
    url = dsn_to_url(postgres_dsn)
    first = run_module(home, "--db", url, "demo")
    assert (0, "") == (first.returncode, first.stderr)
    assert "Charge 249.9?" in first.stdout
    second = run_module(home, "--db", url, "demo", "--answer", "yes")
    assert (0, "") == (second.returncode, second.stderr)
    assert "charging 249.9" in second.stdout.splitlines()
    assert 1 == (first.stdout + second.stdout).count("creating order for coffee, mug")

    listed = run_module(home, "--db", url, "threads")
    assert ["demo", "done", "1"] == history_rows(listed.stdout)[1][:3]
    drawn = run_module(home, "--db", url, "history", "demo")
    assert [["input", "unfinished"], ["pause", "interrupted"], ["loop", "done"]] == [
        [row[1], row[4]] for row in history_rows(drawn.stdout)
    ]
    assert not (home / ".ilmek").exists()


def test_postgres_url_opens_postgres_checkpointer() -> None:
    """A postgresql:// URL is handed to the Postgres backend (its module is imported), not to SQLite."""
    # An option libpq does not know fails at once, before any network I/O.
    url = "postgresql://ilmek@localhost/ilmek?not_a_libpq_option=1"
    with pytest.raises(Exception) as raised:  # noqa: PT011 - whichever error the driver raises
        open_checkpointer(url, "ilmek").close()
    assert not isinstance(raised.value, ImportError)
    assert "ilmek.checkpoint.postgres" in sys.modules


# --- every command on a postgresql:// URL ----------------------------------------------------


@pytest.mark.postgres
def test_every_command_works_on_a_postgres_url(capsys: pytest.CaptureFixture[str], postgres_dsn: str) -> None:
    """migrate, ddl, threads, history, show, prune and delete take a postgresql:// URL like a file path."""
    url = dsn_to_url(postgres_dsn)
    prefix = ["--db", url, "--table-prefix", "shop"]
    status, out, _ = cli(capsys, *prefix, "ddl")
    assert 0 == status
    assert "CREATE TABLE IF NOT EXISTS shop_checkpoints" in out
    assert "CREATE TABLE IF NOT EXISTS shop_journals" in out
    status, out, err = cli(capsys, *prefix, "migrate")
    assert (0, "") == (status, err)
    assert f"schema version {PostgresCheckpointer.SCHEMA_VERSION}" in out

    with PostgresCheckpointer.connect(postgres_dsn, table_prefix="shop") as store:
        pause_id, _, _ = forked_order(store, "pg-order")

    status, out, _ = cli(capsys, *prefix, "threads")
    assert 0 == status
    assert "pg-order" in out
    status, out, _ = cli(capsys, *prefix, "history", "pg-order")
    assert 0 == status
    assert "├─" in out  # the fork opened two branches
    assert "└─" in out
    assert pause_id in out
    status, out, _ = cli(capsys, *prefix, "show", "pg-order")
    assert 0 == status
    assert 'log: ["not charged"]' in out  # the latest is the fork that answered "no"
    status, out, _ = cli(capsys, *prefix, "prune", "pg-order", "--keep-last", "1")
    assert 0 == status
    assert "dropped" in out
    status, out, err = cli(capsys, *prefix, "delete", "pg-order", "--yes")
    assert (0, "") == (status, err)
    status, _, err = cli(capsys, *prefix, "show", "pg-order")
    assert 1 == status
    assert "pg-order" in err
