"""The command line's operations features: --version, --json, pauses with their journals, ddl offline.

Every store is a real SQLite file or the real Postgres the test session
starts; threads are set up through the public API, then read back by the
commands.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import sys
from typing import Any

import pytest

import ilmek
from ilmek import channel, graph, resume, run
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.cli import build_parser
from ilmek.context import NodeContext
from ilmek.demo import build_checkout_graph
from ilmek.graph import END, START, CompiledGraph
from tests.support.cli_support import (
    COMMANDS,
    REPO_ROOT,
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
from tests.support.conftest_postgres import unavailable

# --- --version ---------------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` prints `ilmek <version>` from ilmek.__version__ and exits 0."""
    status, out, err = cli(capsys, "--version")
    assert (0, f"ilmek {ilmek.__version__}\n", "") == (status, out, err)


# --- --json ------------------------------------------------------------------------------------


def test_threads_json_is_one_document_with_iso_times(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`threads --json` lists the threads newest first, times in ISO 8601, and says if there are more."""
    finished_order(store, "first")
    paused_order(store, "second")
    store.put_thread_metadata("second", {"customer": "c-7", "tags": ("a", "b")})

    status, out, _ = cli(capsys, "--db", db, "threads", "--json", "--limit", "1")
    assert 0 == status
    document = json.loads(out)
    assert True is document["more"]
    [second] = document["threads"]
    info = store.get_thread("second")
    assert info is not None
    assert {
        "id": "second",
        "status": "interrupted",
        "step": 0,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "checkpoint_id": info.checkpoint_id,
        "metadata": {"customer": "c-7", "tags": {"__ilmek__": "tuple", "v": ["a", "b"]}},
        "running": False,
        "held_since": None,
        "error": None,
    } == second
    assert ilmek.serde.from_jsonable(second["metadata"]) == {"customer": "c-7", "tags": ("a", "b")}

    status, out, _ = cli(capsys, "--db", db, "threads", "--json", "--status", "done")
    assert ["first"] == [thread["id"] for thread in json.loads(out)["threads"]]
    status, out, _ = cli(capsys, "--db", db, "threads", "--json", "--search", "nothing")
    assert {"threads": [], "more": False} == json.loads(out)


def test_history_json_lists_checkpoints_oldest_first_with_answered_pauses(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`history --json`: each checkpoint with its parent, status and pauses; a resumed pause is answered."""
    pause_id, yes, no = forked_order(store, "t")

    status, out, _ = cli(capsys, "--db", db, "history", "t", "--json")
    assert 0 == status
    document = json.loads(out)
    assert ("t", False) == (document["thread"], document["truncated"])
    checkpoints = document["checkpoints"]
    assert [c.id for c in reversed(store.list("t"))] == [c["id"] for c in checkpoints]
    # The fork starts with a copy of the pause (answered on its branch).
    fork_copy = checkpoints[3]["id"]
    assert [None, checkpoints[0]["id"], pause_id, pause_id, fork_copy] == [
        c["parent_id"] for c in checkpoints
    ]
    assert ["input", "pause", "loop", "fork", "loop"] == [c["source"] for c in checkpoints]
    assert [False, True, False, True, False] == [c["answered"] for c in checkpoints]
    assert [no.checkpoint_id] == [c["id"] for c in checkpoints if c["latest"]]
    assert yes.checkpoint_id == checkpoints[2]["id"]
    assert [
        {
            "id": "checkout:interrupt#0",
            "task_id": f"t:{pause_id}:checkout",
            "node": "checkout",
            "key": "interrupt#0",
            "payload": {"question": "Charge 249.9?"},
            "kind": "person",
            "answers": None,
            "deadline": None,
        }
    ] == checkpoints[1]["pending"]
    assert [None, {"checkout:interrupt#0": "person"}] == [c["answered_by"] for c in checkpoints[:2]]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", c["ts"]) for c in checkpoints)

    status, out, _ = cli(capsys, "--db", db, "history", "t", "--json", "--limit", "2")
    document = json.loads(out)
    assert True is document["truncated"]
    # The fork's copy (its parent, the pause, cut off) and the branch's end (its parent shown).
    assert [False, True] == [c["parent_shown"] for c in document["checkpoints"]]


# --- history: answered pauses ------------------------------------------------------------------


def test_history_says_answered_for_a_resumed_pause_and_waiting_for_an_open_one(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """After an answer the old pause reads `answered:`; only the new, open pause reads `waiting:`."""
    finished_order(store, "t")
    paused_order(store, "t")
    status, out, _ = cli(capsys, "--db", db, "history", "t")
    assert 0 == status
    notes = [row[5:] for row in history_rows(out) if row[1] == "pause"]
    assert [
        ["answered:", "checkout:interrupt#0", "(by", "person)"],
        ["waiting:", "checkout:interrupt#0", "(latest)"],
    ] == notes


# --- show: a pause's journal -------------------------------------------------------------------


def two_questions() -> CompiledGraph:
    """One node that looks something up, asks a size, computes, then asks a colour."""

    def order(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        stock = ctx.step("stock", lambda: 41)
        size = ctx.interrupt({"question": "Size?"}, key="size")
        label = ctx.step("label", lambda: f"{size}!")
        colour = ctx.interrupt({"question": "Colour?"}, key="colour")
        return {"result": [stock, label, colour]}

    return (
        graph("two-questions", {"result": channel.last_write(None)})
        .node("order", order)
        .edge(START, "order")
        .edge("order", END)
        .compile()
    )


def channels_line(lines: list[str]) -> int:
    """Where `show` starts printing channels (a heading, or `channels  - (none written yet)`)."""
    return next(index for index, line in enumerate(lines) if line.startswith("channels"))


def test_show_lists_the_completed_steps_and_answered_pauses_of_an_open_pause(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """The second pause shows its task's steps with results and the first pause with its answer."""
    g = two_questions()
    first = run(g, {}, thread_id="t", checkpointer=store)
    second = resume(g, "large", thread_id="t", checkpointer=store)
    assert "interrupted" == second.status

    status, out, _ = cli(capsys, "--db", db, "show", "t")
    assert 0 == status
    lines = out.splitlines()
    assert [
        "pending",
        "  order:colour#0  (node order)",
        '    {"question": "Colour?"}',
        "    completed steps:",
        "      stock#0: 41",
        '      label#0: "large!"',
        "    answered pauses:",
        '      size#0: {"question": "Size?"} -> "large" (by person)',
    ] == lines[lines.index("pending") : channels_line(lines)]

    # The first pause, answered: its answer stays in its journal, with what its task did after it.
    status, out, _ = cli(capsys, "--db", db, "show", "t", str(first.checkpoint_id))
    assert 0 == status
    lines = out.splitlines()
    assert "status       interrupted (answered)" in lines
    assert [
        "pauses (answered)",
        "  order:size#0  (node order)",
        '    {"question": "Size?"}',
        '    answer (by person): "large"',
        "    completed steps:",
        "      stock#0: 41",
        '      label#0: "large!"',
        "    answered pauses:",
        '      colour#0: {"question": "Colour?"} -> (waiting)',
    ] == lines[lines.index("pauses (answered)") : channels_line(lines)]


def test_show_of_a_pause_whose_task_finished_keeps_its_answer_and_steps(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """After its task finished, an answered pause still shows its answer and the steps around it."""
    pause_id = paused_order(store, "t")
    resume(build_checkout_graph(), "yes", thread_id="t", checkpointer=store)
    status, out, _ = cli(capsys, "--db", db, "show", "t", pause_id)
    assert 0 == status
    lines = out.splitlines()
    assert '    answer (by person): "yes"' in lines
    assert '      charge#0: "charged 249.9"' in lines


def test_show_of_an_answer_whose_resume_failed(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """A resume that failed after recording the answer: the pause shows the answer and steps after it."""

    def fragile(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        answer = ctx.interrupt("Go?")
        ctx.step("after", lambda: f"went {answer}")
        raise RuntimeError("the payment service is down")

    g = graph("fragile").channel("x", channel.last_write(None)).node("f", fragile)
    g = g.edge(START, "f").edge("f", END).compile()
    run(g, {}, thread_id="t", checkpointer=store)
    assert "error" == resume(g, "yes", thread_id="t", checkpointer=store).status

    status, out, _ = cli(capsys, "--db", db, "show", "t")
    assert 0 == status
    lines = out.splitlines()
    assert [
        "pending",
        "  f:interrupt#0  (node f)",
        '    "Go?"',
        '    answer (by person): "yes"  (recorded; the resume that gave it has not finished)',
        "    completed steps:",
        '      after#0: "went yes"',
    ] == lines[lines.index("pending") : channels_line(lines)]

    status, out, _ = cli(capsys, "--db", db, "show", "t", "--json")
    [pause] = json.loads(out)["pending"]
    assert (True, False, "yes") == (pause["answered"], pause["resumed"], pause["answer"])
    assert ["interrupt#0", "after#0"] == [entry["key"] for entry in pause["journal"]]


def test_show_of_a_step_whose_result_could_not_be_stored(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """A step after the answer that ran but could not store its result: shown as run, with the type."""

    def charge(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ctx.interrupt("Charge?")
        ctx.step("charge", object)
        return {}

    g = graph("sdk").channel("x", channel.last_write(None)).node("c", charge)
    g = g.edge(START, "c").edge("c", END).compile()
    run(g, {}, thread_id="t", checkpointer=store)
    assert "error" == resume(g, "yes", thread_id="t", checkpointer=store).status

    status, out, _ = cli(capsys, "--db", db, "show", "t")
    assert 0 == status
    lines = out.splitlines()
    assert [
        "    completed steps:",
        "      charge#0: (ran; its result, of type object, could not be stored)",
    ] == lines[lines.index("    completed steps:") : channels_line(lines)]


def test_show_json_carries_the_checkpoint_its_pauses_and_their_journals(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`show --json`: place, status, next, pauses with journal entries, channels in stored JSON form."""
    pause_id = paused_order(store, "t")
    status, out, _ = cli(capsys, "--db", db, "show", "t", "--json")
    assert 0 == status
    shown = json.loads(out)
    pause = store.get("t", pause_id)
    assert pause is not None
    assert ("t", pause_id, pause.parent_id, 0, "interrupted") == (
        shown["thread"],
        shown["checkpoint"],
        shown["parent_id"],
        shown["step"],
        shown["status"],
    )
    assert pause.ts.isoformat() == shown["ts"]
    assert [{"node": "checkout", "task_key": "checkout", "is_send": False, "input": None}] == shown["next"]
    assert {"cart": ["coffee", "mug"]} == shown["channels"]
    [pending] = shown["pending"]
    assert (False, False) == (pending["answered"], pending["resumed"])
    assert "answer" not in pending
    order = store.get_journal(pause.pending[0].task_id)[0].value
    assert [
        {
            "key": "create_order#0",
            "kind": "step",
            "value": order,
            "payload": None,
            "answered": False,
            "by": None,
        },
        {
            "key": "interrupt#0",
            "kind": "interrupt",
            "value": None,
            "payload": {"question": "Charge 249.9?"},
            "answered": False,
            "by": None,
        },
    ] == pending["journal"]


# --- ddl without a connection ------------------------------------------------------------------


def test_ddl_for_postgres_needs_no_server(capsys: pytest.CaptureFixture[str], home: pathlib.Path) -> None:
    """`ddl --dialect postgres` prints JSONB tables with no server; --db naming one is not contacted."""
    status, out, err = cli(capsys, "ddl", "--dialect", "postgres", "--table-prefix", "Shop")
    assert (0, "") == (status, err)
    assert "CREATE TABLE IF NOT EXISTS shop_checkpoints (" in out
    assert "JSONB" in out
    unreachable = ["--db", "postgresql://shop:hunter22@127.0.0.1:1/shop"]
    assert (0, out, "") == cli(capsys, *unreachable, "ddl", "--table-prefix", "Shop")
    assert [] == list(home.iterdir())


def test_ddl_sqlite_is_what_the_checkpointer_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`ddl --dialect sqlite` prints exactly SqliteCheckpointer.ddl(), one statement per line."""
    with SqliteCheckpointer(":memory:", table_prefix="Shop") as scratch:
        expected = [f"{statement};" for statement in scratch.ddl()]  # type: ignore[attr-defined]
    status, out, _ = cli(capsys, "ddl", "--dialect", "sqlite", "--table-prefix", "Shop")
    assert (0, expected) == (status, out.splitlines())


@pytest.mark.postgres
def test_ddl_postgres_is_what_the_checkpointer_runs(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    """Offline `ddl --dialect postgres` equals PostgresCheckpointer.ddl() from a live connection."""
    with PostgresCheckpointer.connect(postgres_dsn, table_prefix="Shop") as live:
        # The superstep function's body spans lines: compare the whole text.
        expected = "".join(f"{statement};\n" for statement in live.ddl())  # type: ignore[attr-defined]
    status, out, _ = cli(capsys, "ddl", "--dialect", "postgres", "--table-prefix", "Shop")
    assert (0, expected) == (status, out)


# --- the demo names the command that was run ---------------------------------------------------


def test_the_demo_hint_repeats_the_interpreter_the_user_typed(home: pathlib.Path) -> None:
    """Under `<python> -m ilmek demo` the hint is `<python> -m ilmek demo --answer yes`."""
    result = run_module(home, "demo")
    assert 0 == result.returncode
    assert f"answer with: {shlex.quote(sys.executable)} -m ilmek demo --answer yes" in result.stdout


def test_the_demo_hint_names_the_wrapper_script(home: pathlib.Path) -> None:
    """scripts/demo sets ILMEK_DEMO_COMMAND, and the hint then says `bash scripts/demo --answer yes`."""
    assert 'ILMEK_DEMO_COMMAND="bash' in (REPO_ROOT / "scripts" / "demo").read_text()
    result = run_module(home, "demo", env={"ILMEK_DEMO_COMMAND": "bash scripts/demo"})
    assert 0 == result.returncode
    assert "answer with: bash scripts/demo --answer yes" in result.stdout
    answered = run_module(home, "demo", "--answer", "yes", env={"ILMEK_DEMO_COMMAND": "bash scripts/demo"})
    assert "done: charged 249.9" in answered.stdout


def test_the_demo_hint_names_the_installed_script(home: pathlib.Path) -> None:
    """Run as the installed `ilmek` script, the hint names it as it was run."""
    script = pathlib.Path(sys.executable).parent / "ilmek"
    if not script.exists():
        unavailable("the ilmek console script is not installed next to this Python")
    result = run_module(home, "demo", "--thread", "x y", executable=str(script))
    assert 0 == result.returncode
    on_path = shutil.which("ilmek")
    name = "ilmek" if on_path is not None and os.path.samefile(on_path, script) else str(script)
    assert f"answer with: {shlex.quote(name)} demo --thread 'x y' --answer yes" in result.stdout


# --- help and the docs -------------------------------------------------------------------------


def test_the_docs_list_every_command_and_option() -> None:
    """docs/cli.rst, the "Command line" page, names every command, --json, --version and ddl --dialect."""
    section = (REPO_ROOT / "docs" / "cli.rst").read_text(encoding="utf-8")
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(COMMANDS) == sorted(commands)
    for command in commands:
        assert f"ilmek {command}" in section
    for option in ["--json", "--version", "--dialect", "--full", "ILMEK_DB"]:
        assert option in section


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_itself(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Each command's --help has a description and documents every option it takes."""
    assert 0 == cli(capsys, command, "--help")[0]
    parser = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    assert parser.description
    for action in parser._actions:
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
