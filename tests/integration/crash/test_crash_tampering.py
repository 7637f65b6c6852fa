"""The database tampered with, as a crash or an attacker would leave it: a foreign schema
version, a forged type tag, a value that cannot be stored.

These need no second process and run in this one, on each ``crash_db``; the
effects file still counts what really ran.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shlex
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    CompiledGraph,
    SchemaVersionError,
    SerializationError,
    channel,
    graph,
    history,
    resume,
    run,
    stream,
    thread_state,
)
from ilmek.events import CheckpointEvent, Event, RunEnd
from tests.support.crash import direct_sql, leftovers, status_of, stored_json
from tests.support.crashworker import INPUTS, Effects, checkout_graph, open_target

pytestmark = pytest.mark.timeout(90)


# --- a foreign schema version ----------------------------------------------------------------


def open_and_read(target: str) -> None:
    """Open the database and read from it (a backend may check the schema on open or on first use)."""
    with open_target(target) as checkpointer:
        checkpointer.get("any thread")


def test_a_database_at_another_schema_version_is_refused_with_what_to_do(crash_db: str) -> None:
    """A schema_version edited to 999 is a SchemaVersionError naming found, expected and the remedy."""
    checkpointer = open_target(crash_db)
    expected = checkpointer.schema_version  # type: ignore[attr-defined]
    checkpointer.close()
    direct_sql(crash_db, "UPDATE ilmek_meta SET value = '999' WHERE key = 'schema_version'")

    with pytest.raises(SchemaVersionError) as refused:
        open_and_read(crash_db)

    assert (999, expected) == (refused.value.found, refused.value.expected)
    message = str(refused.value)
    assert "version 999" in message
    assert f"version {expected}" in message
    assert "upgrade ilmek" in message
    assert [("999",)] == direct_sql(crash_db, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'")


# --- a forged type tag -----------------------------------------------------------------------

MARKER_MODULE = "ilmek_forged_marker"


def forged_values(marker: pathlib.Path) -> dict[str, Any]:
    """Stored values naming something that, were it imported or called, would write ``marker``."""
    shell = f"echo forged > {shlex.quote(str(marker))}"
    return {
        "module-on-path": {"__ilmek__": "obj", "type": f"{MARKER_MODULE}.Evil", "v": {}},
        "popen": {"__ilmek__": "obj", "type": "subprocess.Popen", "v": {"args": ["/bin/sh", "-c", shell]}},
        "os-system": {"__ilmek__": "enum", "type": "os.system", "v": shell},
    }


@pytest.fixture
def marker(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """A file that appears if a forged value imports or calls anything; its module is importable."""
    marker_file = tmp_path / "marker"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / f"{MARKER_MODULE}.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker_file)!r}).write_text('imported')\n"
        "class Evil:\n"
        "    def __init__(self, **fields):\n"
        f"        pathlib.Path({str(marker_file)!r}).write_text('called')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(modules))
    # Importable, so a decoder that imported names would have found it.
    assert importlib.util.find_spec(MARKER_MODULE) is not None
    yield marker_file
    sys.modules.pop(MARKER_MODULE, None)


def fragile_graph(effects: Effects, behaviour: dict[str, str]) -> CompiledGraph:
    """One node: step ``pay``, then per ``behaviour["mode"]`` raise, return ``object()``, or succeed."""

    def settle(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("pay", effects.perform, "pay", "receipt-1")
        if behaviour["mode"] == "raise":
            raise RuntimeError("the node broke after paying")
        if behaviour["mode"] == "unstorable":
            return {"result": object()}
        return {"result": receipt}

    return (
        graph("crash-fragile", {"result": channel.last_write(None), "log": channel.append()})
        .node("settle", settle)
        .edge(START, "settle")
        .edge("settle", END)
        .compile()
    )


@pytest.mark.parametrize("forgery", ["module-on-path", "popen", "os-system"])
def test_a_forged_type_tag_in_a_channel_imports_and_runs_nothing(
    crash_db: str, marker: pathlib.Path, tmp_path: pathlib.Path, forgery: str
) -> None:
    """A channel value edited to name a class or function is a SerializationError; nothing imported or run."""
    effects = Effects(tmp_path / "checkout.effects")
    checkout = checkout_graph(effects)
    with open_target(crash_db) as writer:
        paused = run(checkout, INPUTS["checkout"], thread_id="forged", checkpointer=writer)
    assert "interrupted" == paused.status
    forged = json.dumps(forged_values(marker)[forgery])
    direct_sql(
        crash_db, "UPDATE ilmek_blobs SET value = ? WHERE thread_id = 'forged' AND channel = 'cart'", forged
    )
    assert [json.loads(forged)] == stored_json(
        crash_db, "SELECT value FROM ilmek_blobs WHERE channel = 'cart'"
    )

    # A fresh checkpointer: nothing decoded before the edit is cached.
    with open_target(crash_db) as reader:
        with pytest.raises(SerializationError):
            thread_state(checkout, reader, "forged")
        with pytest.raises(SerializationError):
            resume(checkout, "yes", thread_id="forged", checkpointer=reader)

    assert not marker.exists()
    assert MARKER_MODULE not in sys.modules
    assert ["create_order"] == effects.lines()


@pytest.mark.parametrize("forgery", ["module-on-path", "popen", "os-system"])
def test_a_forged_type_tag_in_a_journal_imports_and_runs_nothing(
    crash_db: str, marker: pathlib.Path, tmp_path: pathlib.Path, forgery: str
) -> None:
    """A journal entry edited to name a class or function is a SerializationError; nothing imported or run."""
    effects = Effects(tmp_path / "fragile.effects")
    behaviour = {"mode": "raise"}
    fragile = fragile_graph(effects, behaviour)
    with open_target(crash_db) as writer:
        failed = run(fragile, {"log": ["begun"]}, thread_id="forged", checkpointer=writer)
    assert "error" == failed.status
    entry = json.dumps({"key": "pay#0", "kind": "step", "value": forged_values(marker)[forgery]})
    direct_sql(crash_db, "UPDATE ilmek_journals SET entry = ? WHERE thread_id = 'forged'", entry)
    assert [json.loads(entry)] == stored_json(crash_db, "SELECT entry FROM ilmek_journals")

    behaviour["mode"] = "succeed"
    with open_target(crash_db) as reader, pytest.raises(SerializationError):
        run(fragile, None, thread_id="forged", checkpointer=reader)

    assert not marker.exists()
    assert MARKER_MODULE not in sys.modules
    assert ["pay"] == effects.lines()


# --- a write that fails ----------------------------------------------------------------------


def note_commits(events: Iterator[Event], committed: list[str]) -> None:
    """Consume a run's events, noting each committed checkpoint's id as it comes."""
    for event in events:
        if isinstance(event, CheckpointEvent):
            committed.append(event.id)


def test_an_unstorable_update_leaves_the_thread_at_its_previous_checkpoint(
    crash_db: str, tmp_path: pathlib.Path
) -> None:
    """A node returning object() fails its node (channel, type named); nothing moves; a fix finishes."""
    effects = Effects(tmp_path / "fragile.effects")
    behaviour = {"mode": "unstorable"}
    fragile = fragile_graph(effects, behaviour)
    committed: list[str] = []
    with open_target(crash_db) as first:
        events = list(stream(fragile, {"log": ["begun"]}, thread_id="fragile", checkpointer=first))
        note_commits(iter(events), committed)
    end = events[-1]
    assert isinstance(end, RunEnd)
    assert "error" == end.status
    ((_, refused),) = end.errors
    assert isinstance(refused, SerializationError)
    message = str(refused)
    assert "channel 'result'" in message
    assert "object" == refused.type_name
    assert "object" in message
    assert 1 == len(committed), "only the input checkpoint was committed"
    with open_target(crash_db) as second:
        assert committed == [c.id for c in history(second, "fragile")]
        assert "error" == status_of(second, "fragile")
        behaviour["mode"] = "succeed"
        finished = run(fragile, None, thread_id="fragile", checkpointer=second)
    assert "done" == finished.status
    assert {"result": "receipt-1", "log": ["begun"]} == finished.state
    assert ["pay"] == effects.lines()
    assert [] == leftovers(crash_db, "fragile")
