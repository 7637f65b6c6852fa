"""The console against hostile input and forged rows, over real sockets and a real SQLite file.

Deeply nested JSON in an answer or a metadata filter, a pause whose payload
is a set of integers that all hash alike (or holds what cannot be decoded),
forged parent links that loop, a lone surrogate in a stored journal chain:
each page answers with its own message, in bounded time, and nothing is
logged as a crash.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator, Mapping

import pytest

import ilmek
from ilmek import SqliteCheckpointer
from tests.support.web_support import THREADS, graphs, populate, serving

pytestmark = pytest.mark.timeout(60)

PAUSE = "approve:interrupt#0"
HASH_MODULUS = 2**61 - 1
"""Every multiple of it hashes to 0 (a hash-flooding set)."""


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A SQLite file holding the sample threads."""
    store = SqliteCheckpointer(tmp_path / "console.db")
    populate(store, hostile=False)
    store.close()
    return tmp_path / "console.db"


@pytest.fixture
def store(path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """The sample store, open."""
    checkpointer = SqliteCheckpointer(path)
    yield checkpointer
    checkpointer.close()


def request(
    port: int,
    method: str,
    target: str,
    *,
    body: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    """One request over a socket to 127.0.0.1; the status, the headers and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, target, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode("utf-8")
    finally:
        connection.close()


def crashes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the console logged as a failure of its own."""
    return [record.getMessage() for record in caplog.records if record.name == "ilmek.web"]


def set_latest(path: pathlib.Path, thread_id: str, column: str, value: str) -> str:
    """Overwrite a column of the thread's latest checkpoint row (a forged row); returns its id."""
    with sqlite3.connect(path) as connection:
        (checkpoint_id,) = connection.execute(
            "SELECT max(checkpoint_id) FROM ilmek_checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        connection.execute(
            f"UPDATE ilmek_checkpoints SET {column} = ? WHERE thread_id = ? AND checkpoint_id = ?",
            (value, thread_id, checkpoint_id),
        )
    connection.close()
    return str(checkpoint_id)


def forge_payload(path: pathlib.Path, thread_id: str, payload: object) -> None:
    """Make the open pause of the thread's latest checkpoint carry ``payload`` (stored JSON, as given)."""
    with sqlite3.connect(path) as connection:
        (stored,) = connection.execute(
            "SELECT pending FROM ilmek_checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
    connection.close()
    pending = json.loads(stored)
    pending[0]["payload"] = payload
    set_latest(path, thread_id, "pending", json.dumps(pending))


# --- JSON nested too deeply -----------------------------------------------------------------


def test_an_answer_nested_a_thousand_levels_is_refused_with_the_pages_message(
    store: SqliteCheckpointer, caplog: pytest.LogCaptureFixture
) -> None:
    """A 4 kB answer nested 1,000 deep: a 303 to the thread with a note, no RecursionError, no answer."""
    thread = THREADS["waiting"]
    deep = "[" * 1000 + "]" * 1000
    with serving(store, graphs(), allow_actions=True) as server:
        token = server.console.guard.token("answer", thread)
        checkpoint = store.get(thread)
        assert checkpoint is not None
        query = urllib.parse.urlencode({"id": thread, "checkpoint": checkpoint.id})
        body = urllib.parse.urlencode({"token": token, "answer.0": deep})
        assert len(body) < 10_000
        status, headers, _ = request(server.server_port, "POST", f"/action/answer?{query}", body=body)
        assert 303 == status
        status, _, page = request(server.server_port, "GET", headers["Location"])
    assert 200 == status
    assert "nests deeper than 100 levels" in page
    assert "nothing was answered" in page
    after = store.get(thread)
    assert after is not None
    assert checkpoint.id == after.id
    assert [] == crashes(caplog)


# Not an ASCII index of at most six digits: superscripts, circled and Arabic-Indic digits pass
# str.isdigit() (some even int()), 5,000 digits overflow int()'s limit.
MALFORMED_OPTIONS = [
    "\u00b2",
    "\u2460",
    "\u0661",
    "1" * 5000,
    "0" * 7,
    "-1",
    "+1",
    " 1",
    "1 ",
    "0x1",
    "1.0",
    "",
]


@pytest.mark.parametrize("back", ["thread", "inbox"])
def test_an_option_that_is_not_an_ascii_index_is_a_400_that_says_so(
    store: SqliteCheckpointer, caplog: pytest.LogCaptureFixture, back: str
) -> None:
    """option.0 as ², ①, 5,000 digits...: a 400 page naming the field, nothing answered; "0" answers."""
    thread = THREADS["waiting"]
    checkpoint = store.get(thread)
    assert checkpoint is not None
    query = urllib.parse.urlencode({"id": thread, "checkpoint": checkpoint.id})
    with serving(store, graphs(), allow_actions=True) as server:
        token = server.console.guard.token("answer", thread)
        for option in MALFORMED_OPTIONS:
            body = urllib.parse.urlencode({"token": token, "option.0": option, "back": back})
            status, _, page = request(server.server_port, "POST", f"/action/answer?{query}", body=body)
            assert (400, True) == (status, "option.0" in page and "digits" in page), (option, page[-2000:])
            latest = store.get(thread)
            assert latest is not None
            assert checkpoint.id == latest.id
        body = urllib.parse.urlencode({"token": token, "option.0": "0", "back": back})
        assert 303 == request(server.server_port, "POST", f"/action/answer?{query}", body=body)[0]
    assert [] == crashes(caplog)


def test_a_metadata_filter_nested_five_thousand_levels_gets_the_pages_message(
    store: SqliteCheckpointer, caplog: pytest.LogCaptureFixture
) -> None:
    """meta=k=[[[...]]] 5,000 deep: the threads page says the filter is not taken, no 500, nothing logged."""
    deep = "[" * 5000 + "]" * 5000
    with serving(store) as server:
        query = urllib.parse.urlencode({"meta": f"k={deep}", "status": "all"})
        status, _, page = request(server.server_port, "GET", f"/?{query}")
        # Text that merely looks like a deep list stays text, as any other value would.
        quoted = urllib.parse.urlencode({"meta": 'k="' + "[" * 5000 + '"', "status": "all"})
        status_text, _, page_text = request(server.server_port, "GET", f"/?{quoted}")
    assert 200 == status
    assert "nests deeper than 100 levels" in page
    assert THREADS["waiting"] in page
    assert 200 == status_text
    assert "nests deeper" not in page_text
    assert [] == crashes(caplog)


# --- payloads slow to decode -----------------------------------------------------------------


def test_the_inbox_lists_a_pause_whose_payload_is_a_hash_flooding_set_at_once(
    path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 0.5 MB set of 20,000 ints that hash alike in an open pause: the inbox lists it and names the damage.

    The inbox once decoded it whole on every view (3 s, quadratic); now it reads a
    bounded preview, which names the damage, and the other rows are as ever; the
    thread's page shows the set as a damaged value. That the refusal is linear is
    counted, not timed, in tests/unit/test_serde_security.py.
    """
    colliding = {"__ilmek__": "set", "v": [index * HASH_MODULUS for index in range(1, 20_001)]}
    forge_payload(path, THREADS["waiting"], {"question": "Charge?", "ids": colliding})
    forge_payload(path, THREADS["second_waiting"], colliding)
    store = SqliteCheckpointer(path)
    try:
        with serving(store) as server:
            status, _, page = request(server.server_port, "GET", "/")
            # Its own page shows the rest of the thread, and the set as damaged.
            target = "/thread?" + urllib.parse.urlencode({"id": THREADS["second_waiting"]})
            thread_status, _, thread_page = request(server.server_port, "GET", target)
        with pytest.raises(ilmek.CorruptCheckpointError, match="share one hash value"):
            store.get(THREADS["second_waiting"])
    finally:
        store.close()
    assert 200 == status
    assert "Charge?" in page
    assert "damaged value" in page
    assert (200, True) == (thread_status, "damaged value" in thread_page)
    assert "share one hash value" in thread_page
    assert [] == crashes(caplog)


def test_the_inbox_never_decodes_a_payload_whole(path: pathlib.Path) -> None:
    """A payload whose 10,000th item names an unregistered type: the inbox shows its question all the same.

    Decoding the payload whole would fail (the thread page says so); the inbox
    decodes only the preview, which never reaches that item.
    """
    items = [{"n": index} for index in range(10_000)]
    items.append({"__ilmek__": "obj", "type": "nowhere.Unregistered", "v": {}})
    forge_payload(path, THREADS["waiting"], {"items": items, "question": "Ship all 10,001?"})
    store = SqliteCheckpointer(path)
    try:
        with serving(store) as server:
            status, _, page = request(server.server_port, "GET", "/")
        with pytest.raises(ilmek.CorruptCheckpointError, match="not registered"):
            store.get(THREADS["waiting"])
    finally:
        store.close()
    assert 200 == status
    assert "Ship all 10,001?" in page
    assert THREADS["second_waiting"] in page


# --- forged parents --------------------------------------------------------------------------


def _forge(path: pathlib.Path, thread_id: str, forgery: Mapping[int, int | str]) -> list[str]:
    """Rewrite the thread's checkpoints by position (oldest first): a parent (an int) or the id (a str).

    Returns the ids the thread's checkpoints have afterwards.
    """
    with sqlite3.connect(path) as connection:
        select = "SELECT checkpoint_id FROM ilmek_checkpoints WHERE thread_id = ? ORDER BY checkpoint_id"
        ids = [row[0] for row in connection.execute(select, (thread_id,))]
        for position, change in forgery.items():
            column, value = (
                ("parent_id", ids[change]) if isinstance(change, int) else ("checkpoint_id", change)
            )
            connection.execute(
                f"UPDATE ilmek_checkpoints SET {column} = ? WHERE thread_id = ? AND checkpoint_id = ?",
                (value, thread_id, ids[position]),
            )
        ids = [row[0] for row in connection.execute(select, (thread_id,))]
    connection.close()
    return ids


@pytest.mark.parametrize(
    "forgery",
    [
        pytest.param({1: 1}, id="self-parent"),
        pytest.param({1: 2, 2: 1}, id="two-cycle"),
        pytest.param({0: 3}, id="loop-through-the-root"),
        # Its parent (the one before it) is now newer than it, though no loop.
        pytest.param({2: "0000-renamed"}, id="renamed-checkpoint-id"),
    ],
)
def test_the_thread_page_draws_forged_parent_links_and_marks_them(
    path: pathlib.Path, forgery: Mapping[int, int | str], caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint its own parent, parents that loop, a parent newer than its child: a 200, not a KeyError.

    Every checkpoint is drawn, the forged ones marked damaged, as ``ilmek history`` does.
    """
    thread = THREADS["answered"]
    ids = _forge(path, thread, forgery)
    store = SqliteCheckpointer(path)
    try:
        with serving(store, graphs()) as server:
            status, _, page = request(
                server.server_port, "GET", "/thread?" + urllib.parse.urlencode({"id": thread})
            )
    finally:
        store.close()
    assert 200 == status, page
    tree = page[page.index('<div class="checkpoint-tree"') :]
    tree = tree[: tree.index("</a></div></div>")]
    for checkpoint_id in ids:
        assert f"{checkpoint_id} ·" in tree
    assert tree.count("damaged") >= len(forgery)
    assert [] == crashes(caplog)


# --- text that cannot be encoded ---------------------------------------------------------------


def test_a_lone_surrogate_in_a_stored_journal_chain_leaves_the_thread_page_readable(
    path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """journal_chain ["\\ud800x"] (a JSON escape SQLite keeps): the page draws, saying what it cannot read."""
    thread = THREADS["waiting"]
    set_latest(path, thread, "journal_chain", '["\\ud800x"]')
    store = SqliteCheckpointer(path)
    try:
        with serving(store, graphs(), allow_actions=True) as server:
            status, _, page = request(
                server.server_port, "GET", "/thread?" + urllib.parse.urlencode({"id": thread})
            )
    finally:
        store.close()
    assert 200 == status, page
    assert "Charge 74.97 EUR?" in page
    assert re.search(r"journals? .*could not be read", page)
    assert [] == crashes(caplog)
