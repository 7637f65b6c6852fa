"""A long chat in the console: paged steps, a fork's parent drawn past the page, a conversation.

The chat pauses for the person's message each turn and answers it; 200
turns are written once per module on a SQLite file, then a fork answers
the fifth turn's pause differently. The console is served by ``wsgiref``
on 127.0.0.1 and read over a real connection; one browser test looks at
the page at both sizes and in both schemes (axe-clean, height bounded).
"""

from __future__ import annotations

import html
import pathlib
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import ilmek
from ilmek import START, Checkpoint, SqliteCheckpointer, channel, graph, resume, run
from ilmek.web.conversation import conversation_of
from ilmek.web.tree import layout
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    full_page_screenshot,
    show_as_screen,
)
from tests.support.web_support import fetch, serving

pytestmark = pytest.mark.timeout(240)

TURNS = 200
THREAD = "chat-200"


def chat_graph() -> ilmek.CompiledGraph:
    """Each turn asks the person for a message and answers it; both land in ``messages`` as role/content."""

    def turn(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        said = ctx.interrupt({"question": "Your message?\n\nOne line is enough."})
        return {
            "messages": [
                {"role": "user", "content": said},
                {"role": "assistant", "content": f"You said: {said}"},
            ]
        }

    return (
        graph("chat", {"messages": channel.append()})
        .node("turn", turn)
        .edge(START, "turn")
        .edge("turn", "turn")
        .compile()
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteCheckpointer]:
    """200 turns of one chat, then a fork from the fifth turn's pause, on a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path_factory.mktemp("chat") / "chat.db")
    chat = chat_graph()
    run(chat, {"messages": []}, thread_id=THREAD, checkpointer=checkpointer)
    for number in range(TURNS):
        resume(chat, f"message {number}", thread_id=THREAD, checkpointer=checkpointer)
    fifth = sorted((c for c in checkpointer.list(THREAD) if c.pending), key=lambda c: c.id)[4]
    resume(
        chat, "a different fifth message", thread_id=THREAD, checkpointer=checkpointer, checkpoint_id=fifth.id
    )
    yield checkpointer
    checkpointer.close()


@pytest.fixture(scope="module")
def console(store: SqliteCheckpointer) -> Iterator[str]:
    """The console on the chat store, read-only, served on 127.0.0.1; its base URL."""
    with serving(store, {"chat": chat_graph()}) as server:
        yield server.url.rstrip("/")


def page(console: str, checkpoint_id: str | None = None) -> str:
    """The chat thread's page (at ``checkpoint_id``), fetched over the socket."""
    params = {"id": THREAD} | ({"checkpoint": checkpoint_id} if checkpoint_id else {})
    status, body = fetch(f"{console}/thread?{urllib.parse.urlencode(params)}")
    assert 200 == status, body[:500]
    return body


def fork_of(store: SqliteCheckpointer) -> Checkpoint:
    """The fork's first checkpoint."""
    return next(c for c in store.list(THREAD) if c.metadata.get("source") == "fork")


def old_tip(store: SqliteCheckpointer) -> Checkpoint:
    """The last checkpoint of the branch the fork left (its 200th turn's pause)."""
    fork = fork_of(store)
    return max((c for c in store.list(THREAD, limit=10) if c.id < fork.id), key=lambda c: c.id)


def steps_table(body: str) -> str:
    """The "Steps to here" table's body."""
    found = re.search(r'<table class="grid steps">.*?</table>', body, re.S)
    assert found is not None, "no steps table"
    return found.group(0)


def test_a_fork_past_the_newest_page_is_drawn_from_its_parent_on_a_branch_of_its_own(
    console: str, store: SqliteCheckpointer
) -> None:
    """The fork's parent (past the newest 300) is drawn, a fork edge joins them, the fork has its own lane."""
    fork = fork_of(store)
    body = page(console)
    assert fork.parent_id is not None
    newest = store.list(THREAD, limit=300)
    assert fork.parent_id not in {c.id for c in newest}, "the test needs the parent past the page"
    tree = re.search(r'<div class="checkpoint-tree".*?</a></div></div>', body, re.S)
    assert tree is not None
    assert f"checkpoint={fork.parent_id}" in tree.group(0), "the fork's parent is not drawn"
    assert 'class="edge fork"' in tree.group(0)
    parent = store.get(THREAD, fork.parent_id)
    assert parent is not None
    nodes = {node.checkpoint.id: node for node in layout([parent, *newest])}
    assert nodes[fork.id].parent_row == nodes[parent.id].row
    assert nodes[fork.id].lane != nodes[parent.id].lane, "the fork reads as the old branch going on"


def test_steps_to_here_are_paged_and_older_pages_reach_the_first_step(
    console: str, store: SqliteCheckpointer
) -> None:
    """The old branch's 400 steps: at most 25 a page, older pages linked, each once, down to the first."""
    body = page(console, old_tip(store).id)
    pages = 0
    seen_steps: list[int] = []
    seen_ids: list[str] = []
    while True:
        pages += 1
        table = steps_table(body)
        rows = re.findall(r'<td class="num">(-?\d+)</td>', table)
        assert 0 < len(rows) <= 25
        seen_steps += [int(step) for step in rows]
        seen_ids += re.findall(r'<td class="key"><a [^>]*>([^<]*)</a>', table)
        older = re.search(r'<a href="([^"]*)"[^>]*>Older steps', body)
        if older is None:
            break
        status, body = fetch(console + html.unescape(older.group(1)).split("#")[0].replace(console, ""))
        assert 200 == status
        assert pages < 20
    assert pages > 1
    assert seen_steps[-1] in (-1, 0), "the oldest page ends at the thread's first step"
    # Each page starts where the last ended: every step of the branch once, newest first.
    assert len(seen_ids) == len(set(seen_ids)) == 2 * TURNS + 2
    assert seen_ids == sorted(seen_ids, reverse=True)


def test_the_messages_channel_reads_as_a_conversation_in_order(
    console: str, store: SqliteCheckpointer
) -> None:
    """Who said what, in order, as text: the newest messages shown, the older ones counted, no JSON braces."""
    body = page(console)
    found = re.search(r'<ol class="conversation".*?</ol>', body, re.S)
    assert found is not None, "the messages channel is not drawn as a conversation"
    said = re.findall(
        r'<span class="who[^"]*">([^<]*)</span>\s*<div class="said">([^<]*)</div>', found.group(0)
    )
    assert said, found.group(0)[:400]
    assert {"user", "assistant"} == {who for who, _ in said}
    contents = [text for _, text in said]
    assert contents[-2:] == ["a different fifth message", "You said: a different fifth message"]
    assert "{&quot;role&quot;" not in found.group(0)
    long_chat = page(console, old_tip(store).id)
    shown = re.search(r'<ol class="conversation".*?</ol>', long_chat, re.S)
    assert shown is not None
    assert 40 == shown.group(0).count('<li class="msg')
    assert "You said: message 199</div></li></ol>" in shown.group(0)
    assert "400 messages; 360 earlier messages are not shown here." in long_chat


def test_conversation_reads_role_dicts_langchain_dicts_and_objects_and_nothing_else() -> None:
    """Role/content dicts, type/content dicts and objects are a conversation; other lists are not."""

    class Message:
        def __init__(self, type: str, content: Any) -> None:
            self.type = type
            self.content = content

    assert [("user", "hi"), ("assistant", "hello")] == conversation_of(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    assert [("human", "hi"), ("ai", "hello")] == conversation_of(
        [{"type": "human", "content": "hi", "id": "1"}, Message("ai", "hello")]
    )
    parts = conversation_of([Message("ai", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])])
    assert [("ai", "a\nb")] == parts
    assert conversation_of([]) is None
    assert conversation_of([{"role": "user"}]) is None
    assert conversation_of([1, 2]) is None
    assert conversation_of({"role": "user", "content": "x"}) is None


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_the_long_chat_page_is_short_readable_and_axe_clean(
    driver: Any, console: str, width: int, scheme: str, tmp_path: pathlib.Path
) -> None:
    """At 1440 and 390 px, light and dark: under 6,000 px tall, the conversation shown, axe finds nothing."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    show_as_screen(driver, width, scheme)
    driver.get(f"{console}/thread?{urllib.parse.urlencode({'id': THREAD})}")
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    assert height < 6000, height
    said = driver.find_elements("css selector", "ol.conversation li")
    assert said
    assert all(item.is_displayed() for item in said[-2:])
    assert 0 == int(driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth"))
    full_page_screenshot(driver, tmp_path / f"chat-{width}-{scheme}.png", width=width)
    assert [] == axe_violations(driver)


def test_a_forks_first_checkpoint_is_badged_as_its_pause_table_reads(
    console: str, store: SqliteCheckpointer
) -> None:
    """The fork's copy of the pause, which the fork answered: badge, pause table and tree say answered."""
    fork = fork_of(store)
    body = page(console, fork.id)
    facts = re.search(r'<section class="panel detail".*?</dl>', body, re.S)
    assert facts is not None
    status = re.search(r"<dt>Status</dt><dd>(.*?)</dd>", facts.group(0), re.S)
    assert status is not None
    assert "answered" in status.group(1)
    assert "waiting" not in status.group(1)
    assert re.search(r'<span class="badge p-answered">answered</span>', body)
    row = re.search(rf'<a href="[^"]*checkpoint={fork.id}"[^>]*>.*?</a>', body, re.S)
    assert row is not None
    assert "t-answered" in row.group(0)
