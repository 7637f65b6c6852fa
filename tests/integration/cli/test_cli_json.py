"""``--json`` on every command that prints data: one JSON document on stdout, its keys named in ``--help``.

``delete``, ``prune``, ``gc``, ``recover``, ``cancel``, ``migrate``, ``ddl``
and ``demo`` join ``threads``, ``history`` and ``show``. Stdout holds the
document alone (what a graph's nodes print goes elsewhere); a failure is
still one ``ilmek: ...`` line on stderr with nothing on stdout.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import SqliteCheckpointer, run
from ilmek.cli import build_parser
from ilmek.demo import build_checkout_graph
from tests.support.cli_support import (
    cli,
    db_fixture,  # noqa: F401 - a fixture, used by name
    finished_order,
    home_fixture,  # noqa: F401 - a fixture, used by name
    paused_order,
    store_fixture,  # noqa: F401 - a fixture, used by name
)

DEMO_GRAPH = "ilmek.demo:build_checkout_graph"


def commands() -> dict[str, Any]:
    """Each command's sub-parser, by name."""
    return dict(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def test_every_command_that_prints_data_takes_json() -> None:
    """Every command but `web` (which serves pages) has --json, and its help says what the document holds."""
    for name, parser in commands().items():
        options = {option: action for action in parser._actions for option in action.option_strings}
        if name == "web":
            assert "--json" not in options
            continue
        assert "--json" in options, name
        assert "print one JSON document instead" in options["--json"].help, name


def stalled_demo_thread(store: SqliteCheckpointer, thread_id: str) -> None:
    """A demo thread stopped before its first superstep: planned tasks, no pause, no run (stalled)."""
    stopped = threading.Event()
    stopped.set()
    result = run(
        build_checkout_graph(), {"cart": ["mug"]}, thread_id=thread_id, checkpointer=store, cancel=stopped
    )
    assert "aborted" == result.status


# Each command with what it needs stored first, and the document it must print.
SCENARIOS: dict[str, tuple[Callable[[SqliteCheckpointer], Any], list[str], Callable[[Any], None]]] = {}


def scenario(
    name: str, argv: list[str], setup: Callable[[SqliteCheckpointer], Any] = lambda store: None
) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register the check of command ``name``'s document, run after ``setup`` with ``argv``."""

    def register(check: Callable[[Any], None]) -> Callable[[Any], None]:
        SCENARIOS[name] = (setup, argv, check)
        return check

    return register


@scenario("delete", ["delete", "t", "--yes"], lambda store: paused_order(store, "t"))
def _delete(document: Any) -> None:
    assert {"thread": "t", "deleted": True, "forced": False} == document


@scenario("prune", ["prune", "t", "--keep-last", "1"], lambda store: finished_order(store, "t"))
def _prune(document: Any) -> None:
    assert {"thread": "t", "dropped": 2, "kept": 1} == document


@scenario("gc", ["gc", "--older-than", "0s"], lambda store: finished_order(store, "t"))
def _gc(document: Any) -> None:
    assert ("delete", False, 1, 1, None, 0, [], None) == (
        document["action"],
        document["dry_run"],
        document["threads"],
        document["old_threads"],
        document["checkpoints_dropped"],
        document["running"],
        document["skipped"],
        document["listed"],
    )


@scenario("recover", ["recover", DEMO_GRAPH], lambda store: stalled_demo_thread(store, "t"))
def _recover(document: Any) -> None:
    assert (False, 1, []) == (document["dry_run"], document["continued"], document["skipped"])
    assert [("t", "unfinished", "checkout", True)] == [
        (entry["thread"], entry["status"], entry["graph"], entry["continue"]) for entry in document["stalled"]
    ]
    [result] = document["results"]
    assert ("t", "interrupted", None, None) == (
        result["thread"],
        result["status"],
        result["error"],
        result["abort_reason"],
    )
    assert {"question": "Charge 20.0?"} == result["pending"][0]["payload"]


@scenario("migrate", ["migrate"])
def _migrate(document: Any) -> None:
    assert ("ilmek", SqliteCheckpointer.SCHEMA_VERSION) == (
        document["table_prefix"],
        document["schema_version"],
    )
    assert document["database"].endswith("store.db")


@scenario("ddl", ["ddl", "--dialect", "sqlite"])
def _ddl(document: Any) -> None:
    assert SqliteCheckpointer.schema_sql() == document


@scenario("demo", ["demo", "--thread", "d"])
def _demo(document: Any) -> None:
    assert ("d", "interrupted", ["Charge 249.9?"], None) == (
        document["thread"],
        document["status"],
        document["questions"],
        document["state"],
    )
    assert document["answer_with"].endswith("demo --db " + document["database"] + " --thread d --answer yes")
    assert ["creating order for coffee, mug"] == document["printed"]


@pytest.mark.parametrize("command", sorted(SCENARIOS))
def test_json_is_one_document_on_stdout_whose_keys_the_help_names(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer, command: str
) -> None:
    """The command with --json prints one parseable document, nothing else; --help names each key."""
    setup, argv, check = SCENARIOS[command]
    setup(store)
    status, out, err = cli(capsys, "--db", db, *argv, "--json")
    assert 0 == status, err
    document = json.loads(out)  # the whole of stdout: one document, nothing printed around it
    check(document)
    if isinstance(document, dict):
        status, shown, _ = cli(capsys, command, "--help")
        help_text = " ".join(shown.split())
        assert [] == [key for key in document if f'"{key}"' not in help_text]


def test_cancel_json_names_the_thread_and_the_reason(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """`cancel --json` while a run holds the thread: {"thread", "asked": true, "reason"}."""
    paused_order(store, "t")
    with store.hold("t"):
        status, out, err = cli(capsys, "--db", db, "cancel", "t", "--reason", "refunded", "--json")
    assert (0, "") == (status, err)
    assert {"thread": "t", "asked": True, "reason": "refunded"} == json.loads(out)


def test_a_failure_under_json_is_still_one_line_on_stderr(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """`delete --json` of a missing thread, `cancel --json` of an idle one: exit 1, stdout empty, one line."""
    SqliteCheckpointer(db).close()
    for argv in (["delete", "nope", "--yes"], ["cancel", "nope"], ["prune", "nope", "--keep-last", "1"]):
        status, out, err = cli(capsys, "--db", db, *argv, "--json")
        assert (1, "") == (status, out)
        assert err.startswith("ilmek: thread 'nope' does not exist in ")
        assert 1 == err.count("\n")


def test_recover_json_keeps_what_the_nodes_print_off_stdout(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """The demo's node prints "creating order"; under `recover --json` it goes to stderr, not stdout."""
    stalled_demo_thread(store, "t")
    status, out, err = cli(capsys, "--db", db, "recover", DEMO_GRAPH, "--json")
    assert 0 == status
    assert 1 == json.loads(out)["continued"]
    assert "creating order for mug\n" == err


class Terminal(io.StringIO):
    """Typed answers on a stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_delete_json_asks_its_question_on_stderr(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal `delete --json` asks first, on stderr, so stdout stays the document."""
    paused_order(store, "t")
    monkeypatch.setattr(sys, "stdin", Terminal("yes\n"))
    status, out, err = cli(capsys, "--db", db, "delete", "t", "--json")
    assert (0, "delete thread 't' and its 2 checkpoints? [y/N] ") == (status, err)
    assert {"thread": "t", "deleted": True, "forced": False} == json.loads(out)
