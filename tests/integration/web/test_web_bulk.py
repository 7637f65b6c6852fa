"""Bulk actions, POSTed as the console's forms post them: the ticked threads, or every thread of a filter.

Each test reads the threads page, follows its bulk form to the page that
confirms the action (it must state the count), and sends back what that
page's form holds, as a browser would; the refusals check that a read-only
console, another site, a token made for other threads or another moment,
and an empty selection write nothing. The cross-backend tests run on every
store of the shared ``checkpointer`` fixture (memory, SQLite, Postgres).
"""

from __future__ import annotations

import html
import pathlib
import re
import time
import urllib.parse
from collections.abc import Iterator

import pytest

import ilmek
import ilmek.web
from ilmek import END, START, Checkpointer, SqliteCheckpointer, channel, graph
from tests.support.web_support import (
    THREADS,
    Client,
    graphs,
    looping,
    populate,
    stall_after_first_superstep,
)

pytestmark = pytest.mark.timeout(90)

ACME = {THREADS["forked"], THREADS["waiting"]}
"""The sample threads tagged customer=acme."""


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db", lease_seconds=2.0)
    populate(checkpointer, hostile=False)
    yield checkpointer
    checkpointer.close()


def console(store: Checkpointer, *, allow_actions: bool = True) -> Client:
    """The console on ``store`` with every sample graph."""
    return Client(ilmek.web.app(store, graphs(), allow_actions=allow_actions))


def confirmation(client: Client, **params: str | list[str]) -> tuple[str, list[tuple[str, str]]]:
    """GET the confirmation page of a bulk action; its text and its form's fields (every value kept)."""
    reply = client.get("/bulk?" + urllib.parse.urlencode(params, doseq=True))
    assert 200 == reply.status, reply.text[:400]
    found = re.search(r'<form method="post" action="/bulk"[^>]*>(.*?)</form>', reply.text, re.S)
    assert found is not None, "no confirming form"
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(1))
    return reply.text, [(name, html.unescape(value)) for name, value in fields]


def stored(store: Checkpointer) -> set[str]:
    """Every thread id the store holds."""
    return {info.id for info in store.list_threads()}


def note_of(client: Client, location: str) -> str:
    """The note of the page a redirect leads to."""
    page = client.get(location).text
    found = re.search(r'<div class="note (?:ok|error)" role="status">(.*?)</div>', page, re.S)
    assert found is not None, page[:600]
    return html.unescape(re.sub(r"<br>", "\n", found.group(1)))


def ticked(client: Client, action: str, *thread_ids: str) -> tuple[str, list[tuple[str, str]]]:
    """The confirmation of ``action`` on the ticked threads."""
    return confirmation(client, action=action, thread=list(thread_ids))


# --- the threads page offers them ----------------------------------------------------------------


def test_the_threads_list_has_a_box_per_row_and_both_bulk_forms_only_with_actions_on(
    store: Checkpointer,
) -> None:
    """With actions on: a box per row tied to the bulk form, and the filter's form with its count; read-only:
    neither."""
    page = console(store).get("/?status=all").text
    boxes = re.findall(r'<input type="checkbox" name="thread" value="([^"]*)" form="bulk"', page)
    assert stored(store) == {html.unescape(box) for box in boxes}
    assert '<form method="get" action="/bulk" id="bulk" class="bulk">' in page
    assert f"Every thread of this list ({len(stored(store))}):" in page
    filtered = console(store).get("/?status=all&meta=customer%3Dacme").text
    assert "Every thread of this list (2):" in filtered
    assert 'name="meta" value="customer=acme"' in filtered.split('class="bulk every"', 1)[1]
    read_only = console(store, allow_actions=False).get("/?status=all").text
    assert 'type="checkbox"' not in read_only
    assert "/bulk" not in read_only


# --- ticked threads, on every backend ----------------------------------------------------------------


def test_deleting_ticked_threads_confirms_the_count_then_deletes_only_those(
    checkpointer: Checkpointer,
) -> None:
    """Two ticked: the page asks "Delete 2 threads?" and names both; confirmed, exactly those two are gone."""
    populate(checkpointer, hostile=False)
    client = console(checkpointer)
    before = stored(checkpointer)
    chosen = [THREADS["answered"], THREADS["failed"]]
    page, fields = confirmation(client, action="delete", thread=chosen, status="done", q="order")
    assert "<h1>Delete 2 threads?</h1>" in page
    assert "You ticked 2 threads." in page
    assert all(f">{thread_id}</a>" in page for thread_id in chosen)
    assert before == stored(checkpointer), "the confirmation page deletes nothing"
    reply = client.post("/bulk", fields)
    assert 303 == reply.status
    assert reply.location.startswith("/?status=done&q=order&"), "back to the list the threads were ticked in"
    assert "Deleted 2 threads." == note_of(client, reply.location)
    assert before - set(chosen) == stored(checkpointer)
    assert all(checkpointer.get(thread_id) is None for thread_id in chosen)


def test_recovering_every_thread_of_a_tab_continues_the_stalled_and_says_which_failed_again(
    checkpointer: Checkpointer,
) -> None:
    """Every thread of "all": the stalled batch runs to its end, the failing sync fails again and is named;
    finished and paused threads are left alone (a recover would have restarted or refused them)."""
    populate(checkpointer, hostile=False)
    client = console(checkpointer)
    done_before = checkpointer.get(THREADS["answered"])
    page, fields = confirmation(client, action="recover", every="1", status="all")
    assert "<h1>Recover 2 threads?</h1>" in page
    assert f"Every thread of the list matches: {len(stored(checkpointer))} threads." in page
    assert f"{len(stored(checkpointer)) - 2} threads will be left alone" in page
    reply = client.post("/bulk", fields)
    note = note_of(client, reply.location)
    left = len(stored(checkpointer)) - 2
    assert note.startswith(
        f"Recovered 1 of 2 threads.\nLeft alone (not failed or stalled, or a run holds them): {left} threads."
        "\nNot done: 1 thread:\nsync-crm-7: Recovery did not succeed. The run failed again"
    ), note
    assert "done" == checkpointer.get_thread(THREADS["stalled"]).status  # type: ignore[union-attr]
    assert "error" == checkpointer.get_thread(THREADS["failed"]).status  # type: ignore[union-attr]
    assert done_before == checkpointer.get(THREADS["answered"]), "a finished thread is not run again"


def test_every_thread_of_a_metadata_filter_is_fixed_when_confirmed(checkpointer: Checkpointer) -> None:
    """Delete every acme thread: a thread tagged acme after the confirmation was drawn is not deleted."""
    populate(checkpointer, hostile=False)
    client = console(checkpointer)
    page, fields = confirmation(client, action="delete", every="1", status="all", meta="customer=acme")
    assert "<h1>Delete 2 threads?</h1>" in page
    time.sleep(0.01)
    checkpointer.put_thread_metadata(THREADS["second_waiting"], {"customer": "acme"})
    reply = client.post("/bulk", fields)
    assert "status=all" in reply.location
    assert "meta=customer%3Dacme" in reply.location
    assert "Deleted 2 threads." == note_of(client, reply.location)
    assert not ACME & stored(checkpointer)
    assert THREADS["second_waiting"] in stored(checkpointer)


# --- cancel, and a thread a run holds ------------------------------------------------------------------


def test_bulk_cancel_stops_the_running_thread_and_bulk_delete_leaves_it(store: Checkpointer) -> None:
    """A looping run ticked with an idle thread: delete leaves the running one (said so), cancel stops it."""
    client = console(store)
    with looping(store, "ticker-bulk", 0.05, stop=False) as results:
        page, fields = ticked(client, "delete", "ticker-bulk", THREADS["answered"])
        assert "<h1>Delete 1 thread?</h1>" in page
        assert "1 thread will be left alone: a run holds them" in page
        note = note_of(client, client.post("/bulk", fields).location)
        assert "Deleted 1 thread.\nLeft alone (a run holds them: cancel those first): 1 thread." == note
        assert "ticker-bulk" in stored(store)
        page, fields = confirmation(client, action="cancel", every="1", status="running")
        assert "<h1>Cancel 1 thread?</h1>" in page
        fields.append(("reason", "bulk test"))
        note = note_of(client, client.post("/bulk", fields).location)
        assert "Asked to stop 1 thread." == note
    assert "aborted" == results[0].status
    assert "bulk test" in (results[0].abort_reason or "")


# --- refusals: nothing written ----------------------------------------------------------------------------


def test_a_read_only_console_refuses_bulk_actions(store: Checkpointer) -> None:
    """Read-only: the confirmation page and the POST are 403, even with a valid form; nothing is deleted."""
    secret = "s" * 32
    writable = Client(ilmek.web.app(store, graphs(), allow_actions=True, secret=secret))
    _, fields = ticked(writable, "delete", THREADS["answered"])
    read_only = Client(ilmek.web.app(store, graphs(), allow_actions=False, secret=secret))
    assert 403 == read_only.get(f"/bulk?action=delete&thread={THREADS['answered']}").status
    assert 403 == read_only.post("/bulk", fields).status
    assert THREADS["answered"] in stored(store)


def test_a_token_is_good_for_its_threads_its_moment_and_its_site_only(store: Checkpointer) -> None:
    """A thread added to a confirmed form, a moved moment, another action, another origin, no token: 403."""
    client = console(store)
    before = stored(store)
    _, fields = ticked(client, "delete", THREADS["answered"])
    widened = [*fields, ("thread", THREADS["waiting"])]
    assert 403 == client.post("/bulk", widened).status
    other_action = [(n, "recover" if n == "action" else v) for n, v in fields]
    assert 403 == client.post("/bulk", other_action).status
    assert 403 == client.post("/bulk", [(n, v) for n, v in fields if n != "token"]).status
    assert 403 == client.post("/bulk", fields, headers={"Origin": "https://evil.example"}).status
    _, every = confirmation(client, action="delete", every="1", status="all", meta="customer=acme")
    later = [(n, str(time.time() + 60) if n == "at" else v) for n, v in every]
    assert 403 == client.post("/bulk", later).status
    wider = [(n, "tier=1" if n == "meta" else v) for n, v in every]
    assert 403 == client.post("/bulk", wider).status
    assert before == stored(store)


def test_a_bulk_form_without_threads_or_action_says_what_is_missing(store: Checkpointer) -> None:
    """Nothing ticked, no known action, a list filtered by graph, an id no store can hold: a 400 saying so."""
    client = console(store)
    assert "No thread was ticked" in client.get("/bulk?action=delete").text
    assert 400 == client.get("/bulk?action=delete").status
    assert 400 == client.get(f"/bulk?action=explode&thread={THREADS['answered']}").status
    assert 400 == client.get("/bulk?action=delete&every=1&status=all&graph=checkout").status
    for forged in ("%00", "x" * 1100):
        reply = client.get(f"/bulk?action=delete&thread={forged}")
        assert 400 == reply.status
        assert "A ticked thread is not a thread id" in reply.text


def test_recover_refuses_a_finished_thread_rather_than_run_it_again(store: Checkpointer) -> None:
    """The single Recover, posted for a done thread: refused, and nothing is run (no new checkpoint)."""
    client = Client(ilmek.web.app(store, graphs(), allow_actions=True, secret="k" * 32))
    guard = ilmek.web.app(store, graphs(), allow_actions=True, secret="k" * 32).guard
    before = store.get(THREADS["answered"])
    reply = client.post(
        "/action/recover?" + urllib.parse.urlencode({"id": THREADS["answered"]}),
        {"token": guard.token("recover", THREADS["answered"])},
    )
    assert "has not failed or stalled" in note_of(client, reply.location)
    assert before == store.get(THREADS["answered"])


def slow_graph() -> ilmek.CompiledGraph:
    """Two supersteps; the second takes 0.4 s."""
    return (
        graph("slow", {"log": channel.append()})
        .node("first", lambda state: {"log": ["first"]})
        .node("second", lambda state: time.sleep(0.4) or {"log": ["second"]})
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
    )


def test_a_long_bulk_recover_goes_on_after_the_page_and_finishes_every_thread(store: Checkpointer) -> None:
    """Three stalled threads of 0.4 s each: the note says they are being recovered in the console's process;
    each then finishes, one after another, without another request."""
    slow = slow_graph()
    stalled = [f"slow-{index}" for index in range(3)]
    for thread_id in stalled:
        stall_after_first_superstep(slow, thread_id, store)
    app = ilmek.web.app(store, {**graphs(), "slow": slow}, allow_actions=True)
    client = Client(app)
    try:
        page, fields = ticked(client, "recover", *stalled)
        assert "<h1>Recover 3 threads?</h1>" in page
        note = note_of(client, client.post("/bulk", fields).location)
        assert note.startswith("Recovering 3 threads one after another in the console's process (pid ")
        deadline = time.monotonic() + 20
        while any(store.get_thread(t).status != "done" for t in stalled):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the background recovery did not finish"
            time.sleep(0.05)
        assert all(ilmek.thread_state(slow, store, t)["log"] == ["first", "second"] for t in stalled)  # type: ignore[index]
    finally:
        app.close()
