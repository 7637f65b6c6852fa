"""The console and subgraphs: a pause two levels down is in the inbox with its path, and answered there.

The store is a SQLite file; the console is served by ``wsgiref`` on
127.0.0.1 and read over a real connection, as the other web tests do.
"""

from __future__ import annotations

import html
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import END, START, CompiledGraph, SqliteCheckpointer, channel, graph, resume_keyed, run
from tests.support.web_support import fetch, serving

pytestmark = pytest.mark.timeout(120)

PATH = "outer:outer/review:review"


def nested() -> CompiledGraph:
    """root → outer → review, whose ``ask`` pauses with a question."""
    ask = lambda state, ctx: {"log": [ctx.interrupt({"question": "Ship order 7?"}, key="approve")]}  # noqa: E731
    inner = graph("inner", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)
    outer = graph("outer", {"log": channel.append()}).node("review", inner.compile())
    outer = outer.edge(START, "review").edge("review", END)
    root = graph("root", {"log": channel.append()}).node("outer", outer.compile())
    return root.edge(START, "outer").edge("outer", END).compile()


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """A SQLite file with one thread paused two subgraphs down."""
    checkpointer = SqliteCheckpointer(str(tmp_path / "console.db"))
    run(nested(), {}, thread_id="order-7", checkpointer=checkpointer)
    yield checkpointer
    checkpointer.close()


def test_the_inbox_lists_a_child_pause_once_with_its_path(store: SqliteCheckpointer) -> None:
    """One row (the root thread, never a child's), its question and the subgraph path of the pause."""
    with serving(store, {"root": nested()}) as server:
        status, body = fetch(server.url)
        _, thread_page = fetch(f"{server.url.rstrip('/')}/thread?id=order-7")

    assert 200 == status, body[:300]
    text = html.unescape(body)
    assert "Ship order 7?" in text
    assert f"outer (in {PATH})" in text
    assert "\x1f" not in text
    assert "%1F" not in body.upper()
    assert f"{PATH}/ask:approve#0" in html.unescape(thread_page)


def test_a_child_pause_answered_by_its_id_finishes_the_root(store: SqliteCheckpointer) -> None:
    """The id the console shows is the one ``resume_keyed`` takes."""
    done: Any = resume_keyed(
        nested(), {f"{PATH}/ask:approve#0": "yes"}, thread_id="order-7", checkpointer=store
    )

    assert ["yes"] == done.state["log"]
