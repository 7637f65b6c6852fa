"""Hostile stored text renders as text: markup, javascript: URLs and control characters, everywhere.

The hostile graph stores ``<script>``, ``"><img onerror>`` and ``javascript:``
URLs (and terminal controls) in its thread id, graph, node and channel
names, state, step keys and values, pause payload and key, metadata, and
the message of a failed run. Every page of those threads, every
checkpoint, every tab of the threads page and the notes after actions
must show them escaped. (``tests/integration/web/test_web_browser.py`` checks the same in a
real browser: no alert, no injected element.)
"""

from __future__ import annotations

import pathlib
import re
import urllib.parse
from collections.abc import Iterator

import pytest

import ilmek.web
from ilmek import Checkpointer, SqliteCheckpointer
from tests.support.web_support import (
    HOSTILE_NODE,
    HOSTILE_THREAD,
    XSS_IMG,
    XSS_SCRIPT,
    XSS_URL,
    Client,
    graphs,
    hostile_failure,
    populate,
    without_console_script,
)

pytestmark = pytest.mark.timeout(60)

# What would be live markup if it were not escaped.
_RAW = ("<script", "<img", "onerror=alert(1)>", XSS_IMG, XSS_SCRIPT)
# A link, inside a tag, whose target came from a store (text reading "href=javascript:" is fine).
_SCRIPT_URL = re.compile(
    r"""<[a-z][^<>]*\s(?:href|src|action|formaction|xlink:href)\s*=\s*["']?\s*javascript:""", re.I
)
# Controls that must be shown as escapes (\x07, \x1b, \u202e), never sent raw.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample store (with the hostile thread) and a hostile failed thread."""
    checkpointer = SqliteCheckpointer(tmp_path / "hostile.db")
    populate(checkpointer)
    hostile_failure(checkpointer)
    yield checkpointer
    checkpointer.close()


def assert_inert(page: str) -> None:
    """No hostile markup, no javascript: link, no raw control character."""
    page = without_console_script(page)
    for raw in _RAW:
        assert raw not in page
    assert _SCRIPT_URL.search(page) is None
    assert _CONTROLS.search(page) is None


def pages_of(client: Client, store: Checkpointer, thread_id: str) -> Iterator[str]:
    """The thread's page at every one of its checkpoints."""
    for checkpoint in store.list(thread_id):
        query = urllib.parse.urlencode({"id": thread_id, "checkpoint": checkpoint.id})
        reply = client.get(f"/thread?{query}")
        assert 200 == reply.status
        yield reply.text


def test_hostile_text_is_escaped_on_every_page(store: Checkpointer) -> None:
    """Threads page tabs, both hostile threads at every checkpoint: all inert, the text still there."""
    client = Client(ilmek.web.app(store, graphs(), allow_actions=True))
    failed = XSS_IMG + "-failed"
    pages = [client.get(f"/?status={status}").text for status in ("interrupted", "error", "all")]
    pages += [client.get("/?" + urllib.parse.urlencode({"status": "all", "q": XSS_SCRIPT})).text]
    pages += list(pages_of(client, store, HOSTILE_THREAD))
    pages += list(pages_of(client, store, failed))
    for page in pages:
        assert_inert(page)
    joined = "\n".join(pages)
    # Shown as text, not dropped: a person must see what was stored.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in joined
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in joined
    assert XSS_URL in joined
    assert "bell\\x07 esc\\x1b[31m" in joined
    assert "\\u202egnp.exe" in joined
    assert "ask&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in joined  # the node
    assert "ValueError" in joined  # the failure


def test_hostile_options_become_escaped_button_values(store: Checkpointer) -> None:
    """An option that is markup is a button naming its index, with an escaped label."""
    client = Client(ilmek.web.app(store, graphs(), allow_actions=True))
    page = client.get("/thread?" + urllib.parse.urlencode({"id": HOSTILE_THREAD})).text
    assert 'name="option.0" value="0"' in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</button>" in page
    assert 'value="1" class="option" formnovalidate>javascript:alert(1)</button>' in page


def test_notes_after_actions_on_hostile_threads_are_escaped(store: Checkpointer) -> None:
    """Answering the hostile pause with markup, and a refusal quoting the hostile id: notes are inert."""
    client = Client(ilmek.web.app(store, graphs(), allow_actions=True))
    query = urllib.parse.urlencode({"id": HOSTILE_THREAD})
    page = client.get(f"/thread?{query}").text
    token = re.search(r'name="token" value="([0-9a-f]+)"', page)
    assert token is not None
    latest = store.get(HOSTILE_THREAD)
    assert latest is not None
    action = "/action/answer?" + urllib.parse.urlencode({"id": HOSTILE_THREAD, "checkpoint": latest.id})
    reply = client.post(action, {"token": token.group(1), "answer.0": f'"{XSS_SCRIPT}"'})
    answered = client.get(reply.location).text
    assert "Answered. The run finished." in answered
    assert_inert(answered)
    again = client.get(client.post(action, {"token": token.group(1), "answer.0": "1"}).location).text
    assert "The thread moved on" in again
    assert_inert(again)


def test_a_hostile_thread_id_in_a_404_and_the_urls_stays_inert(store: Checkpointer) -> None:
    """A missing thread named with markup: the 404 page quotes it escaped."""
    client = Client(ilmek.web.app(store, graphs()))
    reply = client.get("/thread?" + urllib.parse.urlencode({"id": XSS_SCRIPT + XSS_IMG}))
    assert 404 == reply.status
    assert_inert(reply.text)
    assert HOSTILE_NODE not in reply.text


def test_the_check_itself_catches_live_markup() -> None:
    """assert_inert fails on a script, an injected image, a javascript: link and a raw escape character."""
    for page in ("<script>x</script>", XSS_IMG, '<a class="x" href="javascript:alert(1)">', "a\x1bb"):
        with pytest.raises(AssertionError):
            assert_inert(page)
