"""``show`` and ``history`` say who answered a pause (``by``), in text and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ilmek import START, channel, graph, resume, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.cli_support import (
    cli,
    db_fixture,  # noqa: F401 - a fixture, used by name
    home_fixture,  # noqa: F401 - a fixture, used by name
    store_fixture,  # noqa: F401 - a fixture, used by name
)


def _two_asks(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"log": [ctx.interrupt("first?", key="first"), ctx.interrupt("second?", key="second")]}


GRAPH = graph("asks", {"log": channel.append()}).node("ask", _two_asks).edge(START, "ask").compile()


def test_show_says_who_answered_an_earlier_pause(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """At the second pause, show lists the first as answered by a person, in text and in JSON."""
    run(GRAPH, {}, thread_id="t", checkpointer=store)
    resume(GRAPH, "one", thread_id="t", checkpointer=store)
    status, out, _ = cli(capsys, "--db", db, "show", "t")
    assert 0 == status
    assert '      first#0: "first?" -> "one" (by person)' in out.splitlines()
    status, out, _ = cli(capsys, "--db", db, "show", "t", "--json")
    (pause,) = json.loads(out)["pending"]
    first = next(e for e in pause["journal"] if e["key"] == "first#0")
    assert ("one", "person") == (first["value"], first["by"])


def test_history_says_who_answered_each_pause(
    capsys: pytest.CaptureFixture[str], db: str, store: SqliteCheckpointer
) -> None:
    """Once the thread is done and the journals are gone, history still says each pause was answered by
    a person (kept in the metadata of the checkpoint its answer led to)."""
    run(GRAPH, {}, thread_id="t", checkpointer=store)
    resume(GRAPH, "one", thread_id="t", checkpointer=store)
    assert "done" == resume(GRAPH, "two", thread_id="t", checkpointer=store).status
    status, out, _ = cli(capsys, "--db", db, "history", "t")
    assert 0 == status
    assert "answered: ask:first#0 (by person)" in out
    assert "answered: ask:second#0 (by person)" in out
    status, out, _ = cli(capsys, "--db", db, "history", "t", "--json")
    answered = [c["answered_by"] for c in json.loads(out)["checkpoints"] if c["pending"]]
    assert [{"ask:first#0": "person"}, {"ask:second#0": "person"}] == answered
