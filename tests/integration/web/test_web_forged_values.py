"""Forged stored tags on every page of the console, on a real SQLite file and on Postgres.

Rows are written straight into the database, as someone with access to it
(or a damaged disk) would: a pause's payload, a channel's blob and a
recorded step each become a tag that cannot be decoded (a tag that is a
list or an object, an unknown tag, a malformed payload, one nested in a
dict key). The inbox, the thread page and the value page must answer 200
with the value shown as damaged, over a real socket, and log no crash.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

import pytest

from ilmek.types import Checkpoint
from tests.support.stores import Store, execute, store_fixture  # noqa: F401 - the store fixture
from tests.support.web_support import THREADS, graphs, populate, serving

pytestmark = pytest.mark.timeout(120)

FORGED_TAGS = [
    {"__ilmek__": ["list"]},
    {"__ilmek__": {"dict": 1}},
    {"__ilmek__": None},
    {"__ilmek__": "no-such-tag", "v": 1},
    {"__ilmek__": "set", "v": [[1]]},
    {"__ilmek__": "int", "v": [1]},
    {"__ilmek__": "obj", "type": ["app.Money"], "v": {}},
    {"__ilmek__": "dict", "v": [[{"__ilmek__": ["key"]}, 1]]},
    {"question": "Ship it?", "options": {"__ilmek__": ["list"]}},
]
"""Stored JSON that decoding refuses, each somewhere else in the shape of a tag."""

DAMAGED = "damaged value"


def quoted(text: str) -> str:
    """A SQL string literal (the forgeries hold no parameters to bind)."""
    return "'" + text.replace("'", "''") + "'"


def forge(store: Store, latest: Checkpoint, task: str, forged: Any) -> None:
    """Make the thread's open pause, its ``cart`` channel and its recorded quote hold ``forged``."""
    thread = quoted(latest.thread_id)
    pending = [
        {"id": p.id, "task_id": p.task_id, "node": p.node, "key": p.key, "payload": forged}
        for p in latest.pending
    ]
    entry = {"key": "quote#0", "kind": "step", "value": forged}
    execute(
        store,
        f"UPDATE ilmek_checkpoints SET pending = {quoted(json.dumps(pending))} "
        f"WHERE thread_id = {thread} AND checkpoint_id = {quoted(latest.id)}",
    )
    execute(
        store,
        f"UPDATE ilmek_blobs SET value = {quoted(json.dumps(forged))} "
        f"WHERE thread_id = {thread} AND channel = 'cart'",
    )
    execute(
        store,
        f"UPDATE ilmek_journals SET entry = {quoted(json.dumps(entry))} "
        f"WHERE thread_id = {thread} AND task_key = {quoted(task)} AND entry_key = '\"quote#0\"'",
    )


def get(port: int, target: str) -> tuple[int, str]:
    """A GET over a socket to 127.0.0.1; the status and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", target, headers={"Host": f"127.0.0.1:{port}"})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        connection.close()


def test_every_page_shows_a_forged_tag_as_damaged_and_answers_200(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Each forgery in a payload, a channel and a step: inbox, thread and value pages say damaged, 200."""
    populate(store.open(), hostile=False)
    thread = THREADS["waiting"]
    latest = store.open().get(thread)
    assert latest is not None
    task = latest.next[0].task_key
    where = {"id": thread, "checkpoint": latest.id}
    pages = {
        "inbox": "/",
        "thread": "/thread?" + urllib.parse.urlencode({"id": thread}),
        "channel": "/value?" + urllib.parse.urlencode({**where, "channel": "cart"}),
        "step": "/value?" + urllib.parse.urlencode({**where, "task": task, "key": "quote#0"}),
    }
    for forged in FORGED_TAGS:
        forge(store, latest, task, forged)
        # A new checkpointer each time: nothing of the last forgery in a value cache.
        with serving(store.open(), graphs(), allow_actions=True) as server:
            for name, target in pages.items():
                status, page = get(server.server_port, target)
                # The inbox shows a payload's question: one that is left says what is asked.
                shown = "Ship it?" if name == "inbox" and "question" in forged else DAMAGED
                assert (200, True) == (status, shown in page), (forged, name, page[-3000:])
            status, page = get(server.server_port, "/")
            assert THREADS["second_waiting"] in page
    assert [] == [record.getMessage() for record in caplog.records if record.name == "ilmek.web"]
